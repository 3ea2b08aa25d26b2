"""End to end, from outside (#20): producers that return the same path on every run (a model
that always writes ``/data/out/o.npy``). Each run was fingerprinted as it ended, but compared
later by reading the files again, so every comparison read the last run's file twice:
``lossless.compare`` said PASS for a candidate that differs, and for a control that is not
repeatable, while ``verify`` found the recorded comparison contradicted by the fingerprints.
Now a run's artifact file that changed after its run ended is an error naming the run and the
file, never compared; ``lossless.matrix`` alike."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import itertools
import numpy as np
import pytest

@pytest.mark.lossless
def test_candidate_differs(lossless, tmp_path):
    fixed = tmp_path / "o.npy"
    def control():
        np.save(fixed, np.arange(3))
        return {"o.npy": fixed}
    def candidate():
        np.save(fixed, np.arange(3) + 1)
        return {"o.npy": fixed}
    lossless.compare(control, candidate, label="shared")

@pytest.mark.lossless
def test_matrix_cells_share_a_path(lossless, tmp_path):
    fixed = tmp_path / "o.npy"
    def make_run(threads):
        def run():
            np.save(fixed, np.arange(3) * threads)
            return {"o.npy": fixed}
        return run
    lossless.matrix(make_run, {"threads": [1, 2]}, label="shared cells")

@pytest.mark.lossless
def test_own_files_still_pass(lossless, tmp_path):
    count = itertools.count()
    def run():
        own = tmp_path / f"o{next(count)}.npy"
        np.save(own, np.arange(3))
        return {"o.npy": own}
    lossless.compare(run, run, label="own files")
"""


def test_a_file_rewritten_by_a_later_run_is_never_compared(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_shared=PROJECT)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-goldens", "--lossless")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--lossless")
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*o.npy*artifact 'o.npy' of control#1 changed after that run ended*",
            "*o.npy*artifact 'o.npy' of threads=1 #1 changed after that run ended*",
        ],
        consecutive=False,
    )
    result.stdout.no_fnmatch_line("PASS *test_candidate_differs*")
    result.stdout.no_fnmatch_line("PASS *test_matrix_cells_share_a_path*")
