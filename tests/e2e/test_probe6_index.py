"""End to end, from outside (#20): ``INDEX.json`` records what became of each test that wrote a
receipt. A test not marked ``lossless`` whose golden check failed (a mismatch, no golden, an
assertion after the check) was listed with the outcome "passed": the session's ledger read
only reports that carried our attributes, and the failing call report of such a test carries
none (its receipt is named on the teardown report, which passed). Its outcome is "failed".
"""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import os
import numpy as np

def test_mismatch(golden):
    golden.check("o.npy", np.arange(3) + int(os.environ.get("PROBE_SHIFT", "0")))

def test_missing(golden):
    golden.check("m.npy", np.arange(3))

def test_assert_after(golden):
    golden.check("a.npy", np.arange(3))
    assert os.environ.get("PROBE_SHIFT") is None

def test_passes(golden):
    golden.check("p.npy", np.arange(3))
"""


@pytest.mark.slow
def test_a_failed_test_with_a_receipt_is_failed_in_the_index(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nlossless_backend = cpu\n")
    pytester.makepyfile(test_i=TESTS)
    made = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--update-goldens", "-k", "not missing"
    )
    made.assert_outcomes(passed=3)
    monkeypatch.setenv("PROBE_SHIFT", "1")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--lossless")
    result.assert_outcomes(failed=3, passed=1)
    [index] = sorted((pytester.path / "lossless-receipts").glob("*/INDEX.json"))[-1:]
    outcomes = {t["test_id"]: t["outcome"] for t in json.loads(index.read_text())["tests"]}
    assert outcomes == {
        "test_i.py::test_assert_after": "failed",
        "test_i.py::test_missing": "failed",
        "test_i.py::test_mismatch": "failed",
        "test_i.py::test_passes": "passed",
    }
