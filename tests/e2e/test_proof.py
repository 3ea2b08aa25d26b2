"""End to end: a candidate without its dispatch proof is INCONCLUSIVE, in lossless.compare and
speed_gate, recorded per run, and re-derived by verify."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import sys
import pytest

WRITE = (
    "import sys, pathlib; print('path=' + sys.argv[2], file=sys.stderr); "
    "pathlib.Path(sys.argv[1], 'out.bin').write_bytes(b'same')"
)

def run(model_run, path):
    return lambda: model_run([sys.executable, "-c", WRITE, "{out}", path],
                             outputs={"out.bin": "{out}/out.bin"})

@pytest.mark.lossless
def test_proven(model_run, lossless):
    lossless.compare(run(model_run, "reference"), run(model_run, "fused"), proof=r"path=fused")

@pytest.mark.lossless
def test_fallback(model_run, lossless):
    lossless.compare(run(model_run, "reference"), run(model_run, "reference"), proof=r"path=fused")

@pytest.mark.lossless
def test_speed_without_proof(model_run, speed_gate):
    sleep = "import time, sys; time.sleep(float(sys.argv[1]))"
    speed_gate(lambda: model_run([sys.executable, "-c", sleep, "0.4"]),
               lambda: model_run([sys.executable, "-c", sleep, "0.01"]),
               target=0.3, pairs=6, seed=3, proof=lambda result: "no counter")
"""


def test_a_candidate_without_proof_is_inconclusive(pytester):
    pytester.makepyfile(test_proof=PROJECT)
    result = pytester.runpytest("--lossless")
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("inconclusive")) == (1, 2), outcomes
    assert result.ret == 1  # INCONCLUSIVE does not pass
    result.stdout.fnmatch_lines_random(
        [
            "*no evidence that the candidate's path ran*path=fused/ not found*",
            "*o evidence that the candidate's path ran*no counter*",
        ]
    )
    folder = pytester.path / "lossless-receipts"
    proven = json.loads(max(folder.rglob("*test_proven*.json")).read_text())
    finding = proven["lossless"][0]["proof"]
    assert finding["rule"] == "regex path=fused"
    assert finding["runs"][0]["found"] is True
    assert finding["runs"][0]["evidence"].endswith("path=fused")
    fallback = json.loads(max(folder.rglob("*test_fallback*.json")).read_text())
    assert fallback["verdicts"]["overall"] == "INCONCLUSIVE"
    speed = json.loads(max(folder.rglob("*test_speed_without*.json")).read_text())
    assert speed["speed"][0]["verdict"] == "INCONCLUSIVE"
    assert all(
        s["proof"]["found"] is False
        for s in speed["speed"][0]["samples"]
        if s["arm"] == "candidate"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout
