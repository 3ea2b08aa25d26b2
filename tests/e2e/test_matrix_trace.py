"""End to end: ``lossless.matrix(..., trace=True)`` (#24) names each differing cell's first
divergence, through real pytest and real model subprocesses.

A tiny numpy model traces three tensors (``embed``, ``block.proj``, ``head``); its ``kernel``
knob changes only ``block.proj``: ``fused`` rounds it differently (a FAIL cell, whose first
divergence against the reference is ``block.proj``, never ``embed``), ``racy`` nudges it by a
counter kept in a file (its own runs disagree: an INCONCLUSIVE cell, traced between them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

MODEL = """
import sys
from pathlib import Path

import numpy as np

from pytest_lossless import trace

kernel, out, counter = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
x = np.linspace(0.1, 1.0, 32, dtype=np.float32)
trace.tensor("embed", x)
proj = x * np.float32(1.1)
if kernel == "fused":
    proj = np.nextafter(proj, np.float32(2.0))  # another rounding of the same product
if kernel == "racy":
    seen = int(counter.read_text()) if counter.is_file() else 0
    counter.write_text(str(seen + 1))
    proj[3] += np.float32(seen + 1)  # never the same twice
trace.tensor("block.proj", proj)
head = proj * np.float32(0.9)
trace.tensor("head", head)
np.save(out / "out.npy", head)
"""

TESTS = """
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MODEL = [sys.executable, str(HERE / "model.py")]
AXES = {"kernel": ["exact", "fused", "racy"], "batch": [1]}
EXPECT = {"kernel=fused, batch=1": "FAIL", "kernel=racy, batch=1": "INCONCLUSIVE"}


def runs_of(model_run):
    def make_run(kernel, batch):
        argv = [*MODEL, kernel, "{out}", str(HERE / "counter.txt")]
        return lambda: model_run(argv, outputs={"out.npy": "out.npy"})
    return make_run


@pytest.mark.lossless
def test_traced(model_run, lossless):
    grid = lossless.matrix(
        runs_of(model_run), AXES, runs=2, label="kernels", expect=EXPECT, trace=True
    )
    fused = grid["kernel=fused, batch=1"]
    assert fused.divergence["first"]["name"] == "block.proj"
    assert fused.divergence["between"] == ["kernel=exact, batch=1 #1", "kernel=fused, batch=1 #1"]
    assert grid["kernel=exact, batch=1"].divergence is None


@pytest.mark.lossless
def test_untraced(model_run, lossless):
    grid = lossless.matrix(runs_of(model_run), AXES, runs=2, label="plain", expect=EXPECT)
    assert all(cell.divergence is None for cell in grid)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    pytester.makepyfile(model=MODEL)
    pytester.makepyfile(test_knobs=TESTS)
    return pytester.path


def _receipt(root: Path, test: str) -> dict:
    *_, path = sorted(root.glob(f"lossless-receipts/*/test_knobs.py__{test}.json"))
    return json.loads(path.read_text())


def _verify(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )


def _row(lines: list[str], label: str, cell: str) -> str:
    """A cell's row detail (wrapped over indented lines) under the row of matrix ``label``."""
    start = next(
        i
        for i, line in enumerate(lines)
        if line.strip().startswith(cell + ":") and f" {label}: " in lines[i - 1]
    )
    end = start + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    return " ".join(line.strip() for line in lines[start:end])


def test_a_traced_grid_names_each_differing_cells_first_divergence(pytester, project):
    result = pytester.runpytest_inprocess("--lossless", "-v", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    lines = result.stdout.str().splitlines()
    fused = _row(lines, "kernels", "kernel=fused, batch=1")
    assert "differs from the reference: out.npy" in fused
    assert "first divergence: block.proj" in fused
    racy = _row(lines, "kernels", "kernel=racy, batch=1")
    assert "not repeatable over 2 runs" in racy
    assert "first divergence: block.proj" in racy
    assert "first divergence" not in _row(lines, "kernels", "kernel=exact, batch=1")
    # trace=False: the same grid, and no row names a divergence.
    for cell in ("kernel=exact", "kernel=fused", "kernel=racy"):
        assert "first divergence" not in _row(lines, "plain", cell + ", batch=1")

    (grid,) = _receipt(project, "test_traced")["matrix"]
    assert grid["trace"] is True
    cells = {c["name"]: c for c in grid["cells"]}
    found = cells["kernel=fused, batch=1"]["divergence"]
    assert found["first"]["name"] == "block.proj"
    assert found["last_identical"]["name"] == "embed"
    assert found["between"] == ["kernel=exact, batch=1 #1", "kernel=fused, batch=1 #1"]
    racy_found = cells["kernel=racy, batch=1"]["divergence"]
    assert racy_found["between"] == ["kernel=racy, batch=1 #1", "kernel=racy, batch=1 #2"]
    assert cells["kernel=exact, batch=1"]["divergence"] is None
    # Every run of every cell traced into a folder of its own.
    folders = [r["trace_dir"] for c in grid["cells"] for r in c["runs"]]
    assert len(folders) == 6
    assert len(set(folders)) == 6
    assert all((Path(f) / "manifest.jsonl").is_file() for f in folders)
    (plain,) = _receipt(project, "test_untraced")["matrix"]
    assert plain["trace"] is False
    assert all(c["divergence"] is None for c in plain["cells"])
    assert all("trace_dir" not in r for c in plain["cells"] for r in c["runs"])

    folder = next(project.glob("lossless-receipts/*/"))
    checked = _verify(folder)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_verify_rejects_a_divergence_between_the_wrong_runs(pytester, project):
    pytester.runpytest_inprocess("--lossless", "-k", "test_traced")
    (path,) = project.glob("lossless-receipts/*/test_knobs.py__test_traced.json")
    receipt = json.loads(path.read_text())
    cells = receipt["matrix"][0]["cells"]
    # The FAIL cell's divergence claimed between its own two runs (they are identical).
    cells[1]["divergence"]["between"] = ["kernel=fused, batch=1 #1", "kernel=fused, batch=1 #2"]
    cells[0]["divergence"] = {"between": ["kernel=exact, batch=1 #1", "kernel=exact, batch=1 #2"]}
    path.write_text(json.dumps(receipt))
    checked = _verify(path.parent)
    assert checked.returncode != 0
    assert (
        "matrix[0] cell kernel=fused, batch=1: its divergence is between kernel=fused, batch=1 #1 "
        "and kernel=fused, batch=1 #2, not kernel=exact, batch=1 #1 and kernel=fused, batch=1 #1"
    ) in checked.stdout
    assert "matrix[0] cell kernel=exact, batch=1: a divergence recorded for a cell that passes" in (
        checked.stdout
    )
