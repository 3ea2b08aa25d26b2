"""End to end, from outside (#20): a ``speed_gate`` arm whose run was killed by a signal
(``check=False``). Its time counted, and the speed verdict said PASS while the raw record said
SIGTERM. Now such an arm is an error of the gate: INCONCLUSIVE (every arm must complete), and
``verify`` re-derives the same from the samples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def _receipt(folder: Path, test: str) -> Any:
    (path,) = folder.rglob(f"*{test}.json")
    return json.loads(path.read_text())


def test_a_speed_arm_killed_by_a_signal_is_not_a_speed_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_speed="""
import sys

def test_crashing_candidate(model_run, speed_gate):
    control = lambda: model_run([sys.executable, "-c", "import time; time.sleep(0.3)"])
    candidate = lambda: model_run(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
        check=False,
    )
    speed_gate(control, candidate, target=0.3, workload="w", act=False)
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--lossless-receipts", "r")
    receipt = _receipt(pytester.path / "r", "test_crashing_candidate")
    (speed,) = receipt["speed"]
    assert speed["verdict"] == "INCONCLUSIVE", speed["message"]
    assert "SIGTERM" in speed["reason"]
    # The receipt's own re-derivation agrees.
    done = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(pytester.path / "r")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "CONTRADICTION" not in done.stdout, done.stdout
