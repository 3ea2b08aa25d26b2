"""End to end: plans frozen with the goldens, the manifest's entry hashes, and ``before_arm``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SUITE = """
import numpy as np
import pytest

TARGET = 0.30
GATE = "elementwise"


def run():
    return {"t.npy": np.zeros(3)}


@pytest.mark.lossless
def test_gates(golden, lossless, speed_gate):
    golden.check("a.npy", np.arange(4.0))
    lossless.compare(run, run, gate=GATE, label="cmp")
    speed_gate(lambda: 1.0, lambda: 0.5, target=TARGET, workload="5s", seed=1)


@pytest.mark.lossless
def test_reversed(speed_gate, lossless, golden):
    speed_gate(lambda: 1.0, lambda: 0.5, target=TARGET, workload="5s", seed=1)
    lossless.compare(run, run, gate=GATE, label="cmp")
    golden.check("a.npy", np.arange(4.0))


@pytest.mark.lossless
def test_no_golden(lossless, speed_gate):
    lossless.compare(run, run, gate=GATE, label="cmp")
    speed_gate(lambda: 1.0, lambda: 0.5, target=TARGET, workload="5s", seed=1)
"""

TESTS = ("test_gates", "test_reversed", "test_no_golden")


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _folder(pytester: pytest.Pytester, test: str) -> Path:
    return pytester.path / "goldens" / "test_suite" / test


def _receipt(pytester: pytest.Pytester, test: str) -> dict:
    """The test's receipt of the latest session (session folders sort by their start)."""
    *_, path = sorted(pytester.path.glob(f"lossless-receipts/*/test_suite.py__{test}.json"))
    return json.loads(path.read_text())


def _freeze(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--update-goldens", "--lossless")
    result.assert_outcomes(passed=3)


def test_plans_are_frozen_beside_the_goldens_and_survive_in_both_orders(suite):
    _freeze(suite)
    for test in TESTS:
        plans = json.loads((_folder(suite, test) / "plan.json").read_text())
        assert set(plans["plans"]) == {"lossless", "speed"}
        speed = plans["plans"]["speed"]["5s"]["plan"]
        assert speed == {
            "target": 0.3,
            "pairs": 8,
            "design": "ABBA",
            "confidence": 0.95,
            "workload": "5s",
            "proof": None,
        }
        assert plans["plans"]["lossless"]["cmp"]["plan"]["gate"] == "elementwise"
    for test in ("test_gates", "test_reversed"):
        manifest = json.loads((_folder(suite, test) / "manifest.json").read_text())
        assert set(manifest["artifacts"]) == {"a.npy"}
    assert sorted(p.name for p in _folder(suite, "test_no_golden").iterdir()) == ["plan.json"]
    # A golden change swaps each folder again: the plans stay.
    suite.makepyfile(test_suite=SUITE.replace("np.arange(4.0)", "np.arange(5.0)"))
    _freeze(suite)
    for test in TESTS:
        assert (_folder(suite, test) / "plan.json").is_file()
    result = suite.runpytest("--lossless")
    result.assert_outcomes(passed=3)
    assert "not frozen" not in result.stdout.str()
    record = _receipt(suite, "test_gates")["speed"][0]["gate_plan"]
    assert record["frozen"] is True
    assert record["plan"]["target"] == 0.3
    assert record["file"].endswith("goldens/test_suite/test_gates/plan.json")


def test_a_changed_speed_target_is_refused_until_goldens_are_updated(suite):
    _freeze(suite)
    suite.makepyfile(test_suite=SUITE.replace("TARGET = 0.30", "TARGET = 0.20"))
    result = suite.runpytest("--lossless")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*GateChanged: plan changed for speed_gate '5s' in *test_gates/plan.json: "
            "--update-goldens froze target=0.3 but this run asks for target=0.2*"
            "--update-goldens*"
        ]
    )
    assert "Traceback" not in result.stdout.str()
    _freeze(suite)
    suite.runpytest("--lossless").assert_outcomes(passed=3)


def test_a_changed_compare_gate_is_refused_until_goldens_are_updated(suite):
    _freeze(suite)
    suite.makepyfile(
        test_suite=SUITE.replace('GATE = "elementwise"', 'GATE = "tolerance(atol=0.5)"')
    )
    result = suite.runpytest("--lossless")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*GateChanged: plan changed for lossless.compare 'cmp' in *plan.json: --update-goldens"
            ' froze gate="elementwise" but this run asks for '
            'gate="tolerance(atol=0.5, rtol=0)"*'
        ]
    )
    _freeze(suite)
    suite.runpytest("--lossless").assert_outcomes(passed=3)


def test_a_hand_edited_manifest_gate_is_an_integrity_error(suite):
    _freeze(suite)
    path = _folder(suite, "test_gates") / "manifest.json"
    data = json.loads(path.read_text())
    assert data["artifacts"]["a.npy"]["gate"] == "elementwise"
    data["artifacts"]["a.npy"]["gate"] = "tolerance(atol=1, rtol=0)"
    path.write_text(json.dumps(data, indent=2))
    result = suite.runpytest("--lossless", "-k", "test_gates")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*GoldenIntegrityError*test_gates/manifest.json: the entry 'a.npy' was edited by hand*"]
    )


def test_a_hand_edited_plan_is_an_integrity_error_naming_the_file(suite):
    _freeze(suite)
    path = _folder(suite, "test_no_golden") / "plan.json"
    data = json.loads(path.read_text())
    data["plans"]["speed"]["5s"]["plan"]["target"] = 0.05
    path.write_text(json.dumps(data, indent=2))
    suite.makepyfile(test_suite=SUITE.replace("TARGET = 0.30", "TARGET = 0.05"))
    result = suite.runpytest("--lossless", "-k", "test_no_golden")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*GoldenIntegrityError*test_no_golden/plan.json: the frozen plan of speed_gate '5s' "
            "was edited by hand*"
        ]
    )


def test_plans_not_frozen_pass_and_are_counted(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--lossless", "-k", "test_no_golden")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*pytest-lossless: 2 gate plans are not frozen*"
            "freeze them with --update-goldens --lossless"
        ]
    )
    receipt = _receipt(pytester, "test_no_golden")
    assert receipt["speed"][0]["gate_plan"] == {"frozen": False}
    assert receipt["lossless"][0]["gate_plan"] == {"frozen": False}
    assert not (pytester.path / "goldens").exists()


def test_a_frozen_plan_no_longer_used_fails_and_an_update_drops_it(suite):
    _freeze(suite)
    head, _, _ = SUITE.partition("@pytest.mark.lossless\ndef test_no_golden")
    without = head + (
        "@pytest.mark.lossless\n"
        "def test_no_golden(lossless):\n"
        '    lossless.compare(run, run, gate=GATE, label="cmp")\n'
    )
    suite.makepyfile(test_suite=without)
    result = suite.runpytest("--lossless", "-k", "test_no_golden")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*frozen plan speed_gate '5s' in *test_no_golden/plan.json was not used by*"
            "--update-goldens to remove it*"
        ]
    )
    result = suite.runpytest("--update-goldens", "--lossless", "-k", "test_no_golden")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["removed: 1", "*test_no_golden/plan.json (speed_gate '5s'*"])
    plans = json.loads((_folder(suite, "test_no_golden") / "plan.json").read_text())
    assert set(plans["plans"]) == {"lossless"}
    suite.runpytest("--lossless", "-k", "test_no_golden").assert_outcomes(passed=1)


BEFORE_ARM = """
from pathlib import Path

import pytest
from pytest_lossless import devices_idle
from pytest_lossless.speed.before_arm import DropPageCache

CALLS = []


def note(arm, index):
    CALLS.append((arm, index))
    return f"{arm}#{index}"


@pytest.mark.lossless
def test_arms(speed_gate, devices):
    cold = DropPageCache(path=str(Path(__file__).parent / "no-proc" / "drop_caches"))
    verdict = speed_gate(
        lambda: 1.0, lambda: 0.5, target=0.3, workload="w", seed=2,
        before_arm=[note, cold, devices_idle(devices)],
    )
    assert CALLS == [(s.arm, s.index) for s in verdict.samples]
"""


def test_before_arm_is_called_before_each_arm_and_recorded(pytester):
    pytester.makepyfile(test_arms=BEFORE_ARM)
    result = pytester.runpytest("--lossless", "--lossless-backend=cpu")
    result.assert_outcomes(passed=1)
    (path,) = pytester.path.glob("lossless-receipts/*/test_arms.py__test_arms.json")
    receipt = json.loads(path.read_text())
    samples = receipt["speed"][0]["samples"]
    assert samples
    for sample in samples:
        note, cold, idle = sample["before_arm"]
        assert note == {"name": "note", "result": f"{sample['arm']}#{sample['index']}"}
        assert cold["name"] == "drop_page_cache"
        assert cold["result"].startswith("not permitted: No such file or directory")
        assert idle["name"] == "devices_idle"
        assert idle["result"]["observed"] is False
    verified = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(path.parent)],
        capture_output=True,
        text=True,
        cwd=pytester.path,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
