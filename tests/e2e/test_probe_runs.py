"""End to end, from outside (#20): ``runs=0`` given to ``lossless.compare`` or
``lossless.matrix`` is a mistake like ``runs=1`` (a control must run at least twice to show it
repeats), never a silent fall back to the default number of runs."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import numpy as np
import pytest

def make():
    return {"o.npy": np.arange(3)}

@pytest.mark.parametrize("runs", [0, 1, -1, 0.0, False, "3", 2.5])
def test_compare(lossless, runs):
    lossless.compare(make, make, runs=runs)

@pytest.mark.parametrize("runs", [0, 1, -2, False])
def test_matrix(lossless, runs):
    lossless.matrix(lambda x: make, {"x": [1, 2]}, runs=runs)

def test_default_still_runs(lossless):
    lossless.compare(make, make)
"""


def test_runs_zero_is_refused_like_runs_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_r=PROJECT)
    result = pytester.runpytest("-p", "no:cacheprovider", "--lossless", "-rf")
    result.assert_outcomes(failed=11, passed=1)
    out = result.stdout.str()
    for runs in ("0", "1", "-1", "0.0", "False", "'3'", "2.5"):
        assert f"lossless.compare(runs=...)={runs}: " in out, (runs, out)
    assert out.count("a control must run at least twice") >= 7
    for runs in ("0", "1", "-2", "False"):
        assert f"lossless.matrix(runs=...)={runs}: " in out, (runs, out)
    assert out.count("a cell must run at least twice") >= 4
    assert "Traceback" not in out
