"""The GPU run's receipts committed under tests/data/gpu/ref2va (docs/gpu.md): verify finds them
consistent, and they say what docs/gpu.md says. Runs on any machine (no GPU, no torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "tests" / "data" / "gpu" / "ref2va"

#: Per test of the run: its lossless and speed verdicts, as docs/gpu.md's table has them.
EXPECTED = {
    "test_gpu_cli_matches_goldens[5s]": ([], []),
    "test_gpu_cli_matches_goldens[15s]": ([], []),
    "test_gpu_server_matches_goldens[5s]": ([], []),
    "test_gpu_server_matches_goldens[15s]": ([], []),
    "test_gpu_fast_is_lossless_and_faster[5s]": (["PASS"], ["PASS"]),
    "test_gpu_fast_is_lossless_and_faster[15s]": (["PASS"], ["PASS"]),
    "test_gpu_tf32_is_caught": (["FAIL", "LOSSY-PASS"], []),
    "test_gpu_atomics_control_is_inconclusive": (["INCONCLUSIVE"], []),
    "test_atomic_control_is_inconclusive": (["INCONCLUSIVE"], []),
    "test_deterministic_fast_is_lossless": (["PASS"], []),
}


def _session() -> Path:
    sessions = sorted(p for p in RUN.iterdir() if p.is_dir())
    assert len(sessions) == 1, sessions
    return sessions[0]


def test_verify_finds_the_gpu_receipts_consistent() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(_session())],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10 of 10 receipts consistent" in done.stdout


def test_the_receipts_hold_the_verdicts_docs_gpu_md_shows() -> None:
    found = {}
    for path in _session().glob("*.json"):
        if path.name == "INDEX.json":
            continue
        receipt = json.loads(path.read_text())
        verdicts = receipt["verdicts"]
        found[receipt["test_id"].split("::", 1)[1]] = (verdicts["lossless"], verdicts["speed"])
        assert receipt["allocation"]["backend"] == "cuda"
        if verdicts["gates"]["passed"]:  # the golden tests: every artifact's gate passed
            assert verdicts["gates"] == {"passed": 3, "failed": 0, "lossy_passed": 0,
                                         "lossless": True}  # fmt: skip
    assert found == EXPECTED
    speed = json.loads(next(_session().glob("*lossless_and_faster_15s.json")).read_text())
    assert speed["speed"][0]["ci"][1] <= 0.70
