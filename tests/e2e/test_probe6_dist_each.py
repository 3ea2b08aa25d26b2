"""End to end, from outside (#20): pytest-xdist's ``--dist each`` runs every test on every
worker, but a test id has one receipt and one golden folder: the workers' runs of one gate
overwrote each other's receipt (the session counted 4 receipts and kept 2, the last writer's
verdict standing for both runs, so a gate that failed on one worker and passed on the other
could leave a PASS receipt) and raced on one golden update (one CONFLICT). A test that checks a
gate is an error under ``--dist each``, naming it and what to use instead; other tests run.
"""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import numpy as np
import pytest

def test_g(golden):
    golden.check("o.npy", np.arange(3))

@pytest.mark.lossless
def test_c(lossless):
    lossless.compare(lambda: {"a": np.ones(3)}, lambda: {"a": np.ones(3)}, label="x")

def test_plain():
    pass
"""


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--update-goldens", "--lossless"], ["--lossless"]])
def test_gates_under_dist_each_are_an_error_not_racing_receipts(
    pytester: pytest.Pytester, flags: list[str]
) -> None:
    pytester.makeini("[pytest]\nlossless_backend = cpu\n")
    pytester.makepyfile(test_e=TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--dist", "each", *flags
    )
    out = result.stdout.str()
    result.assert_outcomes(passed=2, errors=4)  # test_plain on each worker; each gate refused
    assert result.ret != 0
    assert "--dist each" in out, out
    assert "CONFLICT" not in out, out
    assert not (pytester.path / "goldens" / "test_e" / "test_g").exists()
    for receipt in (pytester.path / "lossless-receipts").glob("*/test_e.py__*.json"):
        assert json.loads(receipt.read_text())["verdicts"]["overall"] != "PASS", receipt
