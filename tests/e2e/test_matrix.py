"""End to end: ``lossless.matrix`` (#24) as pytest outcomes, rows, receipts, frozen grids,
``verify`` and a ``devices`` axis."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

MODEL = """
import itertools
import os
import numpy as np
import pytest

COUNTER = itertools.count()
# The knob that breaks equality, read from the environment so a test can "fix the model".
BROKEN_ABOVE = int(os.environ.get("BROKEN_ABOVE", "1"))

def make_run(threads, batch):
    def produce():
        out = np.arange(16, dtype=np.float32)
        if threads > BROKEN_ABOVE:
            out[5] = np.nextafter(out[5], np.float32(100))  # another reduction order
        if threads == 4:
            out[2] += next(COUNTER)  # a race: never the same twice
        return {"latent.npy": out}
    return produce

AXES = {"threads": [1, 2, 4], "batch": [1, 8]}
"""

SUITE = (
    MODEL
    + """
@pytest.mark.lossless
def test_acts(lossless):
    lossless.matrix(make_run, AXES, runs=2, label="knobs")

@pytest.mark.lossless
def test_expected_cells(lossless):
    grid = lossless.matrix(
        make_run, AXES, runs=2, label="knobs",
        expect={(2, 1): "FAIL", (2, 8): "FAIL", "threads=4, batch=1": "INCONCLUSIVE",
                "threads=4,batch=8": "INCONCLUSIVE"},
    )
    assert grid.verdict == "FAIL"
    assert grid["threads=1, batch=8"].verdict == "PASS"
    assert grid.explanation.startswith("differs whenever threads > 1, whatever the batch")

@pytest.mark.lossless
def test_one_verdict(lossless):
    lossless.matrix(make_run, AXES, runs=2, label="knobs", expect="FAIL")

@pytest.mark.lossless
def test_observed_only(lossless):
    grid = lossless.matrix(make_run, AXES, runs=2, label="knobs", act=False)
    assert grid.verdict == "FAIL"
"""
)


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _receipt(pytester: pytest.Pytester, test: str) -> dict:
    *_, path = sorted(pytester.path.glob(f"lossless-receipts/*/test_suite.py__{test}.json"))
    return json.loads(path.read_text())


def _verify(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_one_row_per_cell_and_the_grid_acts(suite):
    result = suite.runpytest("--lossless", "-v", "-p", "no:randomly")
    result.assert_outcomes(passed=3, failed=1)
    text = result.stdout.str()
    result.stdout.fnmatch_lines(["*test_acts FAILED*", "*test_expected_cells PASSED*"])
    assert "lossless matrix knobs verdict: FAIL: differs whenever threads > 1" in text
    # Each cell's row names it in full, with its verdict and evidence. The test column is
    # clipped at 80 columns keeping the name's start: 'test_expected_cel…'.
    lines = text.splitlines()
    for cell, verdict in (
        ("threads=2, batch=8: differs from the reference: latent.npy", "FAIL (expected)"),
        ("threads=4, batch=1: not repeatable over 2 runs", "INCONCLUSIVE (expected)"),
        ("threads=1, batch=8: 2 runs identical; identical to the reference", "PASS"),
    ):
        where = next(
            i
            for i, line in enumerate(lines)
            if line.strip().startswith(cell) and "test_expected_cel" in lines[i - 1]
        )
        assert lines[where - 1].startswith(verdict + " "), lines[where - 1]
        assert "knobs: threads=" in lines[where - 1]
    receipt = _receipt(suite, "test_expected_cells")
    (grid,) = receipt["matrix"]
    assert [c["name"] for c in grid["cells"]][:2] == ["threads=1, batch=1", "threads=1, batch=8"]
    assert grid["cells"][2]["verdict"] == "FAIL"
    assert grid["cells"][2]["reference_comparison"]["results"][0]["first_mismatch"]
    assert receipt["verdicts"]["matrix"] == ["FAIL"]
    assert receipt["verdicts"]["overall"] == "FAIL"
    folder = next(suite.path.glob("lossless-receipts/*/"))
    checked = _verify(folder)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    page = (folder / "report" / "index.html").read_text()
    assert "<th>threads \\ batch</th><th>1</th><th>8</th>" in page  # the grid, drawn
    assert "<td>threads=1</td><td>PASS (reference)</td><td>PASS</td>" in page
    assert "<td>threads=4</td><td>INCONCLUSIVE</td><td>INCONCLUSIVE</td>" in page
    assert "its own runs disagree, so it cannot be judged" in page
    summary = (folder / "SUMMARY.md").read_text()
    assert "| test_suite.py::test_expected_cells | knobs | threads=4, batch=8 | INCONCLUSIVE |" in (
        summary
    )


def test_verify_rederives_every_cell(suite):
    suite.runpytest("--lossless", "-k", "test_expected_cells")
    (path,) = suite.path.glob("lossless-receipts/*/test_suite.py__test_expected_cells.json")
    receipt = json.loads(path.read_text())
    receipt["matrix"][0]["cells"][2]["verdict"] = "PASS"  # a FAIL cell claimed as a pass
    path.write_text(json.dumps(receipt))
    checked = _verify(path.parent)
    assert checked.returncode != 0
    assert "matrix[0] cell threads=2, batch=1: recorded PASS but its comparisons give FAIL" in (
        checked.stdout
    )
    receipt["matrix"][0]["cells"][2]["verdict"] = "FAIL"
    result = receipt["matrix"][0]["cells"][2]["reference_comparison"]["results"][0]
    result["passed"] = True  # a comparison claimed as identical: the fingerprints disagree
    path.write_text(json.dumps(receipt))
    checked = _verify(path.parent)
    assert "latent.npy: recorded passed=True but the fingerprints give False" in checked.stdout


def test_the_grid_is_frozen_and_a_change_fails(suite, monkeypatch):
    freeze = suite.runpytest("--update-goldens", "--lossless", "-k", "test_observed_only")
    freeze.assert_outcomes(passed=1)
    plan = suite.path / "goldens" / "test_suite" / "test_observed_only" / "plan.json"
    frozen = json.loads(plan.read_text())["plans"]["matrix"]["knobs"]["plan"]
    assert frozen["grid"]["threads=2, batch=8"] == "FAIL"
    assert frozen["grid"]["threads=4, batch=1"] == "INCONCLUSIVE"
    assert frozen["axes"] == {"threads": [1, 2, 4], "batch": [1, 8]}
    again = suite.runpytest("--lossless", "-k", "test_observed_only")
    again.assert_outcomes(passed=1)
    # The model changes: threads=2 now matches the reference. The frozen grid catches it.
    monkeypatch.setenv("BROKEN_ABOVE", "2")
    changed = suite.runpytest("--lossless", "-k", "test_observed_only")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(
        [
            "*not the expected grid (the grid frozen in plan.json)*",
            "*threads=2, batch=1: expected FAIL, got PASS*",
        ]
    )


def test_an_expect_that_disagrees_with_the_frozen_grid_is_gate_changed(suite):
    suite.runpytest("--update-goldens", "--lossless", "-k", "test_observed_only")
    source = suite.path / "test_suite.py"
    source.write_text(
        source.read_text().replace(
            'label="knobs", act=False)', 'label="knobs", act=False, expect={(2, 1): "PASS"})'
        )
    )
    result = suite.runpytest("--lossless", "-k", "test_observed_only")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*GateChanged: plan changed for lossless.matrix 'knobs' in *plan.json*"
            "threads=2, batch=1: FAIL*threads=2, batch=1: PASS*"
        ]
    )


def test_bad_arguments_are_named(pytester):
    pytester.makepyfile(
        test_bad=MODEL
        + """
@pytest.mark.lossless
def test_cell(lossless):
    lossless.matrix(make_run, AXES, runs=2, expect={(3, 1): "PASS"})

@pytest.mark.lossless
def test_word(lossless):
    lossless.matrix(make_run, AXES, runs=2, expect="GREEN")

@pytest.mark.lossless
def test_devices(lossless):
    lossless.matrix(lambda devices: None, {"devices": [1, 2]}, runs=2)
"""
    )
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*ConfigError*lossless.matrix(expect)*names no cell*",
            "*ConfigError*GREEN*PASS, LOSSY-PASS, FAIL or INCONCLUSIVE*",
            "*ConfigError*mark the test npu(devices=2) or gpu(devices=2)*",
        ]
    )


DEVICES = """
import sys
import pytest

SHOW = "import os, sys; open(sys.argv[1], 'w').write(os.environ['PYTEST_LOSSLESS_CPU_SLOTS'])"

@pytest.mark.lossless
@pytest.mark.npu(devices=2)
def test_devices_axis(lossless, devices, model_run):
    def make_run(devices):
        argv = [sys.executable, "-c", SHOW, "{out}/slots.txt"]
        return lambda: model_run(argv, outputs={"slots.txt": "{out}/slots.txt"})

    grid = lossless.matrix(make_run, {"devices": [1, 2]}, runs=2, act=False)
    # Each cell's runs see the test's own allocation, narrowed to the cell's count.
    assert grid["devices=1"].context["devices"] == list(devices.ids[:1])
    assert grid["devices=2"].context["devices"] == list(devices.ids[:2])
    seen = [open(c.runs[0]["artifacts"]["slots.txt"]["path"]).read() for c in grid]
    assert seen == [devices.ids[0], ",".join(devices.ids[:2])]
    assert grid["devices=2"].verdict == "FAIL"  # another set of devices, another output here
    assert devices.env["PYTEST_LOSSLESS_CPU_SLOTS"] == ",".join(devices.ids)  # restored

@pytest.mark.lossless
@pytest.mark.npu(devices=1)
def test_too_few(lossless):
    lossless.matrix(lambda devices: None, {"devices": [1, 2]}, runs=2)
"""


def test_a_devices_axis_narrows_the_tests_own_allocation(pytester, tmp_path):
    pytester.makepyfile(test_devices=DEVICES)
    result = pytester.runpytest(
        "--lossless",
        "--lossless-backend=cpu",
        "--lossless-devices=0-3",
        f"--lossless-lock-dir={tmp_path / 'locks'}",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*the test holds 1 device(s) but a cell asks for 2*"])
