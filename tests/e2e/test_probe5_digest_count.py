"""End to end, from outside (#20): the row of a mismatch against a digest-only golden. Only the
chunk that differs is known, not how many elements: the terminal table, ``SUMMARY.md`` and the
HTML report said ``None of 4096 differ`` (Python's word for a missing count). They say "an
unknown number of 4096 differ", as the gate's own message says "unknown".
"""

from __future__ import annotations

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

SUITE = """
import os

import numpy as np


def test_big(golden):
    golden.check("a.npy", np.arange(4096, dtype=np.float32) + float(os.environ.get("SHIFT", 0)))
"""


def test_an_unknown_count_is_not_printed_as_none(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nlossless_digest_above = 1024\n")
    pytester.makepyfile(test_big=SUITE)
    assert pytester.runpytest("--update-goldens").ret == 0
    monkeypatch.setenv("SHIFT", "0.5")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    text = " ".join(result.stdout.str().split())
    assert "None of" not in text
    assert "an unknown number of 4096 differ" in text
    report = next((pytester.path / "lossless-receipts").glob("*/report/index.html"))
    assert "None of" not in report.read_text()
