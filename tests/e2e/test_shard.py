"""End to end (pytester): ``--lossless-shard I/N`` splits a selection so that each test runs in
exactly one session; inside a (faked) Slurm array task the shard is the task's and the pool is
its allocation; each session's index records its shard; the merged verify names a missing or
duplicated shard. The same on a real Slurm: tests/e2e/test_slurm.py."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

from pytest_lossless.__main__ import main

pytestmark = pytest.mark.slow  # runs pytest in pytest, a dozen times

SUITE = """
import json, os
import numpy as np
import pytest

@pytest.mark.lossless
@pytest.mark.npu(devices=2)
@pytest.mark.parametrize("n", range(6))
def test_gate(n, devices, lossless):
    print("IDS", n, json.dumps(devices.ids), json.dumps(devices.env), flush=True)
    make = lambda: {"x": np.arange(n + 1)}
    lossless.compare(make, make, runs=2, label=f"g{n}")
"""

SLURM_TASK = {
    "SLURM_JOB_ID": "17",
    "SLURM_ARRAY_JOB_ID": "16",
    "SLURM_ARRAY_TASK_ID": "3",
    "SLURM_ARRAY_TASK_MIN": "2",
    "SLURM_ARRAY_TASK_COUNT": "3",
    "SLURMD_NODENAME": "node7",
    "SLURM_JOB_GPUS": "2,3",
    "CUDA_VISIBLE_DEVICES": "2,3",
}


@pytest.fixture
def suite(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTEST_LOSSLESS_LOCK_DIR", str(tmp_path / "locks"))
    for name in [*SLURM_TASK, "SLURM_STEP_GPUS", "SLURM_ARRAY_TASK_STEP", "SLURM_JOB_GRES"]:
        monkeypatch.delenv(name, raising=False)
    pytester.makeini(
        "[pytest]\nlossless_backend = cpu\nlossless_devices = 0,1,2,3\n"
        "lossless_receipts = receipts\nlossless_no_canary = true\n"
    )
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _verify(*folders: Path) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        code = main(["verify", *map(str, folders)])
    return code, out.getvalue()


def _passed(result: pytest.RunResult) -> list[str]:
    return sorted(line.split()[0] for line in result.outlines if line.startswith("test_suite.py::"))


def _indexes(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("INDEX.json"))]


def test_shards_split_the_selection_and_verify_counts_them(suite: pytest.Pytester):
    ran: list[str] = []
    for index in range(3):
        result = suite.runpytest(
            "--lossless", "-p", "no:cacheprovider", "-v", f"--lossless-shard={index}/3"
        )
        result.assert_outcomes(passed=2, deselected=4)
        result.stdout.fnmatch_lines([f"lossless: shard {index}/3 runs 2 of the 6 selected tests"])
        ran += _passed(result)
    assert sorted(ran) == sorted(f"test_suite.py::test_gate[{n}]" for n in range(6))
    receipts = suite.path / "receipts"
    shards = sorted((i["shard"]["index"], i["shard"]["kept"]) for i in _indexes(receipts))
    assert shards == [(0, 2), (1, 2), (2, 2)]
    code, out = _verify(receipts)
    assert code == 0, out
    assert "shards: 3 of 3 present (0/3, 1/3, 2/3); tests per session 2+2+2" in out
    # One more run of shard 1: a duplicated shard fails the merged verify, named.
    suite.runpytest("--lossless", "-p", "no:cacheprovider", "--lossless-shard=1/3")
    code, out = _verify(receipts)
    assert code == 1
    assert "CONTRADICTION shard 1/3 ran 2 times" in out


def test_a_missing_shard_fails_the_merged_verify(suite: pytest.Pytester):
    for index in (0, 2):
        suite.runpytest("--lossless", "-p", "no:cacheprovider", f"--lossless-shard={index}/3")
    code, out = _verify(suite.path / "receipts")
    assert code == 1
    assert "INCOMPLETE shard 1/3 is missing: none of the 2 sharded sessions ran it" in out


def test_an_empty_shard_passes_and_still_leaves_its_index(suite: pytest.Pytester):
    result = suite.runpytest("--lossless", "-p", "no:cacheprovider", "--lossless-shard=7/8")
    assert result.ret == 0, result.stdout.str()
    [index] = _indexes(suite.path / "receipts")
    assert index["shard"]["kept"] == 0
    assert index["shard"]["selected"] == 6


def test_a_bad_shard_is_a_usage_error(suite: pytest.Pytester):
    result = suite.runpytest("--lossless-shard=3/3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--lossless-shard='3/3': shard 3 of 3 does not exist*"])


def test_a_slurm_array_task_takes_its_shard_and_its_allocation(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    for name, value in SLURM_TASK.items():
        monkeypatch.setenv(name, value)
    result = suite.runpytest("--lossless", "-p", "no:cacheprovider", "-v", "-s")
    result.stdout.fnmatch_lines(
        [
            "lossless: Slurm job 16_3 on node7 (SLURM_JOB_GPUS=2,3, CUDA_VISIBLE_DEVICES=2,3):"
            " devices 2,3",
            "lossless: shard 1/3 (Slurm array task 16_3 (SLURM_ARRAY_TASK_ID=3,*",
        ]
    )
    result.assert_outcomes(passed=2, deselected=4)
    # The ini's pool 0-3 gave way to the allocation: cpu slots 2 and 3, locked as such.
    seen = [line for line in result.outlines if "IDS" in line]
    assert seen
    assert all('["2", "3"]' in line for line in seen)
    [index] = _indexes(suite.path / "receipts")
    assert index["shard"]["index"] == 1
    assert index["shard"]["count"] == 3
    receipt = next(
        json.loads(p.read_text())
        for p in (suite.path / "receipts").rglob("*.json")
        if p.name not in ("INDEX.json",)
    )
    scheduler = receipt["runspec"]["scheduler"]
    assert scheduler["job_id"] == "17"
    assert scheduler["array_task_id"] == 3
    assert scheduler["node"] == "node7"
    assert scheduler["allocation"]["SLURM_JOB_GPUS"] == "2,3"
    keys = sorted(receipt["allocation"]["lock_keys"])
    assert keys == ["cpu-slot-2", "cpu-slot-3"]


def test_a_command_line_pool_larger_than_the_allocation_is_a_usage_error(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    for name, value in SLURM_TASK.items():
        monkeypatch.setenv(name, value)
    result = suite.runpytest("--lossless", "--lossless-devices=0-3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--lossless-devices='0,1,2,3': names 4 devices, but the Slurm job 16_3 on node7 "
            "(SLURM_JOB_GPUS=2,3, CUDA_VISIBLE_DEVICES=2,3) was given 2*"
        ]
    )


def test_a_shard_under_xdist_records_the_workers_split(suite: pytest.Pytester):
    result = suite.runpytest_subprocess(
        "--lossless", "-p", "no:cacheprovider", "-n", "2", "--lossless-shard=0/3"
    )
    result.assert_outcomes(passed=2)
    [index] = _indexes(suite.path / "receipts")
    assert index["workers"] == 2
    assert (index["shard"]["index"], index["shard"]["kept"], index["shard"]["selected"]) == (
        0,
        2,
        6,
    )
