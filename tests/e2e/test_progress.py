"""End-to-end: the progress line of a long ``model_run`` command in a CI log (not a terminal)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

SOURCE = """
import sys

SLEEP = [sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))"]


def test_long(model_run):
    model_run(SLEEP + ["11.5"])


def test_short(model_run):
    print("test says hi")
    model_run(SLEEP + ["0.5"])
"""


def test_sparse_line_in_a_log(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_slow=SOURCE)
    # -rP shows what each passing test printed: a progress line caught by capture would be there.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rP", timeout=60)
    result.assert_outcomes(passed=2)
    lines = result.stdout.lines
    progress = [line for line in lines if ": run 01, " in line]
    # After 10 s, one line (the next is due at 40 s); the 0.5 s run writes nothing.
    assert progress == ["test_slow.py::test_long: run 01, 10 s"], lines
    assert not any("\r" in line for line in lines)
    assert "test says hi" in result.stdout.str()  # capture still works around it
