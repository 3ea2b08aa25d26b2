"""End to end, from outside (#20): the canary on a tensor of non-finite values. A golden that
holds only NaNs or infinities (a fully masked attention row, an overflowed layer) compared
under ``ulp(n)`` or ``tolerance`` passed its gate, then the canary found no element it could move
beyond the bound and made the test an ERROR (``CanaryError: ... cannot fail``) on every honest
run, though the gate does fail on such a change: a NaN replaced by a number (or by a NaN of
other bits, under ``ulp``), an infinity by a number. The canary now makes that change, and the
gate is proved as for any other tensor.
"""

from __future__ import annotations

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

SUITE = """
import numpy as np
import pytest

from pytest_lossless import tolerance, ulp

VALUES = {
    "nan32": np.full(4, np.nan, dtype=np.float32),
    "inf64": np.array([np.inf, -np.inf], dtype=np.float64),
    "nanbf16": np.full(3, 0x7FC0, dtype=np.uint16),
}
GATES = {"ulp": ulp(2), "tol": tolerance(atol=1e-3, rtol=1e-3)}


@pytest.mark.parametrize("gate", sorted(GATES))
@pytest.mark.parametrize("value", sorted(VALUES))
def test_nonfinite(golden, value, gate):
    if value == "nanbf16":
        if gate == "tol":
            pytest.skip("raw words: tolerance reads them as integers")
        chosen = ulp(2, dtype="bfloat16")
    else:
        chosen = GATES[gate]
    golden.check("t.npy", VALUES[value], gate=chosen)
"""


def test_the_canary_proves_a_gate_on_a_tensor_of_non_finite_values(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_nonfinite=SUITE)
    assert pytester.runpytest("--update-goldens").ret == 0
    result = pytester.runpytest("--lossless", "-p", "no:randomly")
    text = result.stdout.str()
    assert "CanaryError" not in text, text
    result.assert_outcomes(passed=5, skipped=1)
    result.stdout.fnmatch_lines(["canary: *tensor/tolerance*FAIL as required*"])
    result.stdout.fnmatch_lines(["*tensor/ulp*FAIL as required*"])
