"""End to end: traced runs through real pytest and real subprocesses (issue #23).

A small model script traces two blocks over three steps; its ``shifted`` build rounds one block
differently from step 1 on. model_run(trace=True), lossless.compare(trace=True) and
golden.check_trace are driven as a user would, and each check is shown able to fail.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

MODEL = """
import sys
from pathlib import Path

import numpy as np

from pytest_lossless import trace

variant, out = sys.argv[1], Path(sys.argv[2])
x = np.linspace(0.1, 1.0, 64, dtype=np.float32)
for k in range(3):
    with trace.stage(f"step {k}"):
        trace.tensor("block.in", x)
        proj = x * np.float32(1.1)
        if variant == "shifted" and k >= 1:
            proj = np.nextafter(proj, np.float32(2.0))
        trace.tensor("block.proj", proj)
        x = proj * np.float32(0.9)
np.save(out / "out.npy", x)
"""

TESTS = """
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MODEL = [sys.executable, str(HERE / "model.py")]


def run(model_run, variant, traced=False):
    return model_run([*MODEL, variant, "{out}"], outputs={"out.npy": "out.npy"}, trace=traced)


def test_traced_run_has_its_folder(model_run):
    result = run(model_run, "plain", traced=True)
    assert result.trace_dir is not None
    assert (result.trace_dir / "manifest.jsonl").is_file()
    assert result.record["trace_dir"] == str(result.trace_dir)
    untraced = run(model_run, "plain")
    assert untraced.trace_dir is None


@pytest.mark.lossless
def test_shifted_is_lossless(model_run, lossless):
    lossless.compare(
        lambda: run(model_run, "plain"), lambda: run(model_run, "shifted"), trace=True,
        label="shifted vs plain",
    )


@pytest.mark.lossless
def test_stage_times(model_run, speed_gate):
    speed_gate(
        lambda: run(model_run, "plain"), lambda: run(model_run, "shifted"), target=0.5,
        pairs=5, trace=True, expect=("PASS", "FAIL", "INCONCLUSIVE"),
    )


@pytest.mark.lossless
def test_pinned_trace(model_run, golden):
    golden.check_trace("t", run(model_run, VARIANT, traced=True), names=["block.*"])


@pytest.mark.lossless
def test_pinned_within_ulps(model_run, golden):
    golden.check_trace(
        "u", run(model_run, VARIANT, traced=True), {"block.in#0": "bytes", "block.*": "ulp(4)"}
    )
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    pytester.makepyfile(model=MODEL)
    pytester.makepyfile(test_traced=TESTS.replace("VARIANT", "'plain'"))
    return pytester.path


def _receipt_blocks(root: Path, key: str) -> list[dict]:
    found = []
    for path in root.glob("lossless-receipts/*/*.json"):
        found += json.loads(path.read_text()).get(key) or []
    return found


def test_model_run_trace_and_first_divergence_in_the_failure(pytester, project):
    result = pytester.runpytest_inprocess(
        "--lossless", "-k", "test_traced_run_has_its_folder or test_shifted_is_lossless"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*first divergence: block.proj (occurrence 1, stage step 1): 64 of 64 elements "
            "differ, largest 1 ulp*last identical: block.in#1 (stage step 1)*",
        ]
    )
    blocks = _receipt_blocks(project, "lossless")
    assert blocks[0]["divergence"]["first"]["name"] == "block.proj"
    assert blocks[0]["divergence"]["between"] == ["control#1", "candidate"]
    assert [g["occurrence"] for g in blocks[0]["divergence"]["growth"] if g["name"] == "block.proj"]
    report = next(project.glob("lossless-receipts/*/report/index.html")).read_text()
    assert "first divergence: block.proj" in report
    assert "<svg" in report
    assert "divergence-growth" in report


def test_check_trace_pins_digests_and_finds_the_first_changed_tensor(pytester, project):
    created = pytester.runpytest_inprocess("--update-goldens", "-k", "test_pinned")
    created.assert_outcomes(passed=2)
    folder = project / "goldens/test_traced/test_pinned_trace"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "t.block.proj_0.sha256" in json.dumps(manifest)
    assert pytester.runpytest_inprocess("--lossless", "-k", "test_pinned").ret == 0
    # The model changes from step 1 on: the digest golden names the first changed tensor, and
    # the ulp(4) gate (bit for bit for the first input) lets those few-ulp changes pass.
    (project / "test_traced.py").write_text(TESTS.replace("VARIANT", "'shifted'"))
    changed = pytester.runpytest_inprocess("--lossless", "-k", "test_pinned")
    changed.assert_outcomes(passed=1, failed=1)
    changed.stdout.fnmatch_lines(["FAIL *test_pinned_trace*t.block.proj_1.sha256*"])


def test_speed_gate_stage_rows_from_separate_traced_runs(pytester, project):
    result = pytester.runpytest_inprocess("--lossless", "-k", "test_stage_times")
    result.assert_outcomes(passed=1)
    (block,) = _receipt_blocks(project, "speed")
    rows = block["stages"]["rows"]
    assert [r["stage"] for r in rows] == ["step 0", "step 1", "step 2"]
    assert all(r["control_seconds"] and r["candidate_seconds"] for r in rows)
    # The two traced runs came first and belong to no timed sample.
    timed = {name for s in block["samples"] for name in s["runs"]}
    assert "command-01" not in timed
    assert "command-02" not in timed
    report = next(project.glob("lossless-receipts/*/report/index.html")).read_text()
    assert "Stage times, from one traced run of each arm" in report
    verify = pytester.run(sys.executable, "-m", "pytest_lossless", "verify", "lossless-receipts")
    assert verify.ret == 0, verify.stdout.str()


def test_check_trace_refuses_what_it_cannot_check(pytester, project, tmp_path):
    pytester.makepyfile(
        test_bad="""
import pytest

@pytest.mark.lossless
def test_not_traced(golden, tmp_path):
    golden.check_trace("t", {"out": "x"})
"""
    )
    result = pytester.runpytest_inprocess("--lossless", "test_bad.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*not a traced run*trace=True*"])
    assert sys.executable
