"""End to end, from outside (#20): a declared output at a fixed path outside the run's own
folder (``outputs={"clip.mp4": "/data/out/clip.mp4"}``, a model that always writes there), and a
run that exits 0 having written nothing. The file the previous run left was taken as this run's
output: a candidate that wrote nothing was "identical" to its control, and ``lossless.compare``
said PASS. Now an output the run left unchanged (the same file, not rewritten since before the
run started) is "not written by this run", like a missing one."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import sys
import pytest

WRITE = "import sys; open(sys.argv[1], 'w').write('frames')"

@pytest.mark.lossless
def test_candidate_writes_nothing(model_run, lossless, tmp_path):
    fixed = tmp_path / "clip.txt"  # where this model always writes
    control = lambda: model_run([sys.executable, "-c", WRITE, str(fixed)],
                                outputs={"clip": str(fixed)})
    candidate = lambda: model_run([sys.executable, "-c", "pass"], outputs={"clip": str(fixed)})
    lossless.compare(control, candidate, label="fixed path")

def test_a_rewrite_of_the_same_bytes_is_written(model_run, tmp_path):
    fixed = tmp_path / "clip.txt"
    fixed.write_text("frames")
    result = model_run([sys.executable, "-c", WRITE, str(fixed)], outputs={"clip": str(fixed)})
    assert result["clip"].read_text() == "frames"
"""


def test_an_output_left_by_an_earlier_run_is_not_this_runs_output(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_fixed=PROJECT)
    pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--update-goldens", "--lossless", "-k", "nothing"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--lossless")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*'clip' was not written by this run*unchanged*"])
    result.stdout.no_fnmatch_line("PASS *fixed path*")
