"""End to end, from outside (#20): pytest's own modes that collect but run no test. ``--setup-plan``
("don't execute anything"), ``--setup-only``, ``--fixtures`` and ``--fixtures-per-test`` finish a
session that collected every test, so the plugin took them for a full run: with
``--update-goldens`` it removed the golden folders of tests no longer defined, and it wrote an
HTML report (with ``--lossless`` also an ``INDEX.json`` and ``SUMMARY.md`` of no receipt) for a
session that ran nothing. Like ``--collect-only``, such a session claims nothing and changes
nothing on disk.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import numpy as np

def test_keep(golden):
    golden.check("k.npy", np.ones(2))

def test_gone(golden):
    golden.check("k.npy", np.ones(3))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode", ["--setup-plan", "--setup-only", "--fixtures", "--fixtures-per-test", "--co"]
)
@pytest.mark.parametrize("flags", [["--update-goldens"], ["--update-goldens", "--lossless"]])
def test_a_session_that_runs_no_test_writes_and_removes_nothing(
    pytester: pytest.Pytester, mode: str, flags: list[str]
) -> None:
    pytester.makeini("[pytest]\nlossless_backend = cpu\n")
    pytester.makepyfile(test_m=TESTS)
    made = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-goldens")
    made.assert_outcomes(passed=2)
    gone = pytester.path / "goldens" / "test_m" / "test_gone"
    assert gone.is_dir()
    pytester.makepyfile(test_m=TESTS.replace("def test_gone", "def _not_a_test"))
    receipts = pytester.path / "lossless-receipts"
    before = sorted(p.relative_to(pytester.path) for p in receipts.rglob("*"))

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", mode, *flags)

    assert result.ret == 0, result.stdout.str()
    assert gone.is_dir(), result.stdout.str()  # a golden folder is never removed by a dry run
    after = sorted(p.relative_to(pytester.path) for p in receipts.rglob("*"))
    assert after == before, result.stdout.str()  # no report, INDEX or SUMMARY of nothing
    assert "removed:" not in result.stdout.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


CHANGED = """
import numpy as np

def test_changed(golden):
    golden.check("k.npy", np.ones(2) * SCALE)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["--co", "--setup-plan", "--fixtures"])
def test_a_session_that_runs_no_test_keeps_the_export_it_is_given(
    pytester: pytest.Pytester, mode: str
) -> None:
    """``--lossless-export DIR`` given to a session that ran nothing replaced the export a
    real session had left there with one of no entry: ``accept`` had nothing left to accept."""
    pytester.makeini("[pytest]\nlossless_backend = cpu\n")
    pytester.makepyfile(test_x="SCALE = 1\n" + CHANGED)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-goldens").assert_outcomes(
        passed=1
    )
    pytester.makepyfile(test_x="SCALE = 2\n" + CHANGED)
    export = pytester.path / "ex"
    failed = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--lossless", "--lossless-export", str(export)
    )
    failed.assert_outcomes(failed=1)
    before = (export / "export.json").read_bytes()
    assert b'"entries": []' not in before

    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", mode, "--lossless", "--lossless-export", str(export)
    )

    assert result.ret == 0, result.stdout.str()
    assert (export / "export.json").read_bytes() == before, result.stdout.str()
