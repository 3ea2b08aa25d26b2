"""End to end (#20, Evidence): ``expect=`` verdicts are frozen with the plans like gates and
targets, and a speed target of zero or below is a usage error."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

SUITE = """
import numpy as np
import pytest

def control():
    return {"t.npy": np.zeros(3)}

def candidate():
    return {"t.npy": np.zeros(3)}

@pytest.mark.lossless
def test_cmp(lossless, speed_gate):
    lossless.compare(control, candidate, label="cmp")
    speed_gate(lambda: 1.0, lambda: 0.5, target=0.30, workload="5s", seed=1, pairs=6)
"""


def test_an_expect_added_in_test_code_is_a_changed_plan(pytester):
    pytester.makepyfile(test_suite=SUITE)
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    # The candidate now differs, and someone makes the test green by asserting the FAIL.
    broken = SUITE.replace(
        'def candidate():\n    return {"t.npy": np.zeros(3)}',
        'def candidate():\n    return {"t.npy": np.ones(3)}',
    ).replace('label="cmp")', 'label="cmp", expect="FAIL")')
    pytester.makepyfile(test_suite=broken)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*GateChanged: plan changed for lossless.compare 'cmp' in *plan.json: "
            "--update-goldens froze expect_verdict=null but this run asks for "
            'expect_verdict=[[]"FAIL"]*'
        ]
    )
    # The same for a speed gate's asserted verdicts.
    pytester.makepyfile(
        test_suite=SUITE.replace("pairs=6)", 'pairs=6, expect=("FAIL", "INCONCLUSIVE"))')
    )
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*GateChanged: plan changed for speed_gate '5s'*expect_verdict*"])
    # Frozen deliberately, the assertion holds and is recorded in plan.json.
    pytester.makepyfile(test_suite=broken)
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    plan = json.loads((pytester.path / "goldens/test_suite/test_cmp/plan.json").read_text())
    assert "FAIL" in json.dumps(plan)
    result = pytester.runpytest("--lossless", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines_random(["FAIL (expected) *test_cmp*cmp*"])
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="lossless_verdict" value="FAIL"' in junit
    assert 'name="lossless_verdict_expected" value="true"' in junit
    # The receipt, SUMMARY.md and verify say the same: a FAIL the test asserted.
    receipts = pytester.path / "lossless-receipts"
    session = max(p for p in receipts.iterdir() if p.is_dir())
    receipt = json.loads(next(session.glob("*test_cmp.json")).read_text())
    assert receipt["lossless"][0]["expect_verdict"] == ["FAIL"]
    assert receipt["verdicts"]["overall"] == "FAIL"
    assert receipt["verdicts"]["expected"] is True
    assert "| FAIL (expected) |" in (session / "SUMMARY.md").read_text()
    verified = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(session)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("target", ["0", "0.0", "-0.2"])
def test_a_speed_target_of_zero_or_below_is_a_usage_error(pytester, target):
    pytester.makepyfile(
        test_speed=f"""
import pytest

@pytest.mark.lossless
def test_speed(speed_gate):
    speed_gate(lambda: 1.0, lambda: 0.5, target={target}, pairs=6, seed=1)
"""
    )
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*target*{target}*above 0*"])
    assert "Traceback" not in result.stdout.str()
