"""End to end, from outside (#20): pytest-rerunfailures (``--reruns 2``) and a golden gate in a
test not marked ``lossless`` (the README's first example). Lossless-marked gates were kept from
reruns, but this one was rerun: its first attempt's FAIL and every later attempt's PASS all
reached the table ("3 FAIL, 3 PASS" for one check), and the test failed as "caught the failure
(an except around the check)". A gate that failed once has failed, in any test that checks one:
it runs once, its one row says FAIL, and the session fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TEST = """
import os
from pathlib import Path
import numpy as np

def test_flaky_golden(golden):
    count = Path(os.environ["PROBE_COUNT"])
    n = int(count.read_text()) if count.exists() else 0
    count.write_text(str(n + 1))
    golden.check("o.npy", np.arange(3) + (1 if n == 0 else 0))  # differs on the first attempt
"""


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--lossless"]])
def test_a_golden_that_failed_is_not_rerun_until_it_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    pytester.makeini("[pytest]\nlossless_backend = cpu\n")
    pytester.makepyfile(test_r=TEST)
    count = pytester.path / "count"
    monkeypatch.setenv("PROBE_COUNT", str(count))
    count.write_text("5")
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-goldens").assert_outcomes(
        passed=1
    )
    count.unlink()
    receipts = pytester.path / "lossless-receipts"
    for old in receipts.glob("*/*.json"):
        old.unlink()

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--reruns", "2", *flags)

    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert result.ret != 0
    assert count.read_text() == "1", out  # one attempt: a failed gate is not rerun
    assert "PASS " not in out, out  # no row of a later attempt says PASS
    assert "1 FAIL" in out, out
    [receipt] = [p for p in receipts.glob("*/test_r.py__*.json")]
    assert json.loads(Path(receipt).read_text())["verdicts"]["overall"] == "FAIL"
