"""End to end, from outside (#20): a tolerance gate against an infinite golden. ``|obtained -
expected| <= atol + rtol * |expected|`` is ``inf <= inf`` when the golden is infinite and
``rtol > 0``: any finite value, or the infinity of the other sign, passed as LOSSY-PASS. An
infinity matches only itself (as ``numpy.isclose`` has it); the bounds hold for finite values.
"""

from __future__ import annotations

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

SUITE = """
import numpy as np
import pytest
from pytest_lossless import tolerance

inf = np.inf
CASES = {cases}

@pytest.mark.parametrize("case", range(len(CASES)))
def test_inf(golden, case):
    a = np.array(CASES[case], dtype=np.float32)
    golden.check("a.npy", a, gate=tolerance(atol=0.5, rtol=1e-3))
"""

CHANGED = [
    "[0.0, -inf, 1.0]",  # a finite value against +inf
    "[-inf, -inf, 1.0]",  # the other infinity
    "[inf, -3.0e38, 1.0]",  # a large finite float32 against -inf
    "[inf, -inf, 1.25]",  # within atol: still passes
]


def test_an_infinite_golden_matches_only_the_same_infinity(pytester: pytest.Pytester) -> None:
    golden = "[inf, -inf, 1.0]"
    pytester.makepyfile(test_inf=SUITE.format(cases="[" + ", ".join([golden] * 5) + "]"))
    assert pytester.runpytest("--update-goldens").ret == 0
    pytester.makepyfile(test_inf=SUITE.format(cases="[" + ", ".join([golden, *CHANGED]) + "]"))
    result = pytester.runpytest("--lossless", "-v")
    outcomes = {
        line.split("::test_inf[")[1].split("]")[0]: line.split()[1]
        for line in result.stdout.lines
        if "::test_inf[" in line and (" PASSED" in line or " FAILED" in line)
    }
    assert outcomes == {
        "0": "PASSED",
        "1": "FAILED",
        "2": "FAILED",
        "3": "FAILED",
        "4": "PASSED",
    }, result.stdout.str()
