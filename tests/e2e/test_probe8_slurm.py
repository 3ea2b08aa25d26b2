"""Probe 8 (#20): a campaign past one machine on Slurm, as a CI/HPC user runs it.

Two tiers. The first runs everywhere (no Slurm): the logic behind each case, through the
plugin with a Slurm task's environment, ``verify`` and the submit helper. The second
(``-m deep``, like ``test_slurm.py``, whose one-node cluster it starts) runs the same cases on
a real ``slurmctld``/``slurmd``: a task run again alone, a task requeued and one cancelled while
they ran, and the merged ``verify`` after each; it skips, saying why, where Slurm cannot start.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from pytest_lossless.__main__ import main
from pytest_lossless.devices.scheduler import slurm_job
from pytest_lossless.errors import ConfigError
from pytest_lossless.evidence.provenance import scheduler_identity
from tests.e2e.test_slurm import (
    EXAMPLES,
    INI,
    PYTEST,
    SUITE,
    Cluster,
    cluster,  # noqa: F401 (the module's own cluster, started and stopped like test_slurm's)
)

#: ``sbatch --array=2``: task 2 of a campaign run again, alone.
RERUN = {
    "SLURM_JOB_ID": "40",
    "SLURM_ARRAY_JOB_ID": "40",
    "SLURM_ARRAY_TASK_ID": "2",
    "SLURM_ARRAY_TASK_MIN": "2",
    "SLURM_ARRAY_TASK_MAX": "2",
    "SLURM_ARRAY_TASK_COUNT": "1",
    "SLURMD_NODENAME": "node7",
    "SLURM_JOB_GPUS": "2,3",
    "CUDA_VISIBLE_DEVICES": "2,3",
}

SMALL = """
import numpy as np
import pytest

pytestmark = [pytest.mark.npu(devices=2), pytest.mark.lossless]


@pytest.mark.parametrize("n", range(4))
def test_same(n, lossless):
    make = lambda: {"x": np.full(4, n, dtype=np.int16)}
    lossless.compare(make, make, runs=2, label=f"same{n}")
"""


def _verify(*folders: Path) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        code = main(["verify", *map(str, folders)])
    return code, out.getvalue()


def _summary_write(folder: Path) -> int:
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        return main(["summary", "--write", str(folder)])


@pytest.fixture
def small(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTEST_LOSSLESS_LOCK_DIR", str(tmp_path / "locks"))
    for name in list(os.environ):
        if name.startswith("SLURM"):
            monkeypatch.delenv(name)
    pytester.makeini(
        "[pytest]\nlossless_backend = cpu\nlossless_devices = 0,1,2,3\n"
        "lossless_receipts = receipts\nlossless_no_canary = true\n"
    )
    pytester.makepyfile(test_small=SMALL)
    return pytester


# -- everywhere: the logic


def test_a_task_run_again_alone_is_not_shard_0_of_1():
    """``sbatch --array=2`` (the way one task is run again) was taken as shard 0/1: the rerun
    ran every test, and verify then said the shards disagree on N instead of naming shard 2."""
    job = slurm_job(RERUN)
    assert job is not None
    with pytest.raises(ConfigError, match=r"--lossless-shard 2/4\), or --lossless-shard 0/1"):
        job.array_shard()
    # Task 0 alone is the one-shard campaign (submit.sh with SHARDS=1: --array=0-0).
    alone = slurm_job({**RERUN, "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0"})
    assert alone is not None
    shard = alone.array_shard()
    assert shard is not None
    assert shard.label == "0/1"


def test_a_rerun_task_names_its_shard_or_is_a_usage_error(
    small: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    for name, value in RERUN.items():
        monkeypatch.setenv(name, value)
    refused = small.runpytest("--lossless", "-p", "no:cacheprovider")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*SLURM_ARRAY_TASK_COUNT=1*give --lossless-shard I/N*"])
    assert not (small.path / "receipts").exists()
    named = small.runpytest("--lossless", "-p", "no:cacheprovider", "--lossless-shard", "2/4")
    named.stdout.fnmatch_lines(["*shard 2/4 (--lossless-shard)*", "*shard 2/4 runs 1 of the 4*"])
    assert named.ret == 0


def test_a_requeued_task_records_its_restart():
    """A requeued task has the job id and array task of its first run: only Slurm's restart
    count tells its sessions apart in the receipts."""
    env = {**RERUN, "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}
    job = slurm_job({**env, "SLURM_RESTART_COUNT": "1"})
    assert job is not None
    assert job.record()["allocation"]["SLURM_RESTART_COUNT"] == "1"
    identity = scheduler_identity({**env, "SLURM_RESTART_COUNT": "1"})
    assert identity is not None
    allocation = identity["allocation"]
    assert isinstance(allocation, dict)
    assert allocation["SLURM_RESTART_COUNT"] == "1"


def test_a_task_given_fewer_devices_than_a_test_asks_is_told_to_ask_slurm(
    small: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    """A task given 1 GPU where a test asks for 2 was told to "widen --lossless-devices", which
    inside the job is a usage error (the pool is at most the allocation)."""
    for name, value in {
        "SLURM_JOB_ID": "41",
        "SLURM_JOB_GPUS": "3",
        "SLURMD_NODENAME": "n",
    }.items():
        monkeypatch.setenv(name, value)
    done = small.runpytest("--lossless", "-p", "no:cacheprovider", "-k", "same and 1")
    assert done.ret == pytest.ExitCode.TESTS_FAILED
    done.stdout.fnmatch_lines(
        [
            "*asks for 2 cpu devices but the pool has only 1 (3): lower devices=N in its marker "
            "or ask Slurm for more*Slurm job 41 (SLURM_JOB_GPUS=3)*--gres=gpu:N*"
        ]
    )
    assert "widen --lossless-devices" not in done.stdout.str()


@pytest.mark.slow
def test_a_shard_run_twice_verifies_once_its_extra_folder_is_removed_as_told(
    small: pytest.Pytester,
):
    """The documented way out of "shard I/N ran 2 times" (remove the folder of the run that does
    not count) left the merged SUMMARY.md of the receipts folder naming that run's receipts,
    a CONTRADICTION; the message now names the step that writes it again."""
    for _ in range(2):
        done = small.runpytest_subprocess(
            "--lossless", "-p", "no:cacheprovider", "--lossless-shard", "0/1"
        )
        assert done.ret == 0, done.stdout.str()
    receipts = small.path / "receipts"
    code, out = _verify(receipts)
    assert code == 1
    assert "shard 0/1 ran 2 times" in out
    assert "summary --write DIR) and verify again" in out
    first = sorted(p for p in receipts.iterdir() if p.is_dir())[0]
    shutil.rmtree(first)
    code, out = _verify(receipts)
    assert code == 1, out
    assert "SUMMARY.md: does not match the receipts beside it" in out
    assert _summary_write(receipts) == 0
    code, out = _verify(receipts)
    assert code == 0, out
    assert "shards: 1 of 1 present (0/1)" in out


def _path_without(tmp_path: Path, missing: str) -> str:
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    for tool in ("mkdir", "dirname", "bash"):
        found = shutil.which(tool)
        if found is not None and tool != missing:
            (tools / tool).symlink_to(found)
    return str(tools)


@pytest.mark.skipif(shutil.which("bash") is None, reason="submit.sh is a bash script")
def test_submit_without_slurm_is_a_clear_error(tmp_path: Path):
    campaign = tmp_path / "campaign"
    env = {"PATH": _path_without(tmp_path, "sbatch"), "CAMPAIGN": str(campaign)}
    done = subprocess.run(
        [shutil.which("bash") or "bash", str(EXAMPLES / "submit.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert "sbatch is not on PATH: run this on a Slurm submit host" in done.stderr
    assert "command not found" not in done.stderr
    assert not campaign.exists()  # nothing created for a campaign that was never queued


@pytest.mark.skipif(shutil.which("bash") is None, reason="submit.sh is a bash script")
@pytest.mark.parametrize("shards", ["0", "-1", "four", "07"])
def test_submit_refuses_a_shard_count_that_is_not_one_or_more(tmp_path: Path, shards: str):
    tools = Path(_path_without(tmp_path, ""))
    sbatch = tools / "sbatch"  # never reached: the count is refused first
    sbatch.write_text('#!/bin/sh\necho queued >> "$0.calls"\necho 1\n')
    sbatch.chmod(0o755)
    env = {"PATH": str(tools), "CAMPAIGN": str(tmp_path / "c"), "SHARDS": shards}
    done = subprocess.run(
        [shutil.which("bash") or "bash", str(EXAMPLES / "submit.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert f"SHARDS='{shards}'" in done.stderr
    assert not (tools / "sbatch.calls").exists()


# -- on a real Slurm (-m deep)

SLOW = """
import time

import numpy as np
import pytest

pytestmark = [pytest.mark.npu(devices=2), pytest.mark.lossless]


@pytest.mark.parametrize("n", range(6))
def test_slow(n, golden):
    golden.check("frame", np.arange(16, dtype=np.int32) * n)
    time.sleep(2)
"""


def _project(root: Path, suite: str, env: dict[str, str], *args: str) -> Path:
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text(INI)
    (root / "test_gates.py").write_text(suite)
    if args:
        done = subprocess.run(
            [*PYTEST, *args], cwd=root, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return root


def _sbatch(slurm: Cluster, project: Path, campaign: Path, *args: str, extra=()) -> str:
    (campaign / "logs").mkdir(parents=True, exist_ok=True)
    return slurm.run(
        "sbatch",
        "--parsable",
        *args,
        f"--output={campaign / 'logs' / 'shard-%A_%a.log'}",
        f"--chdir={project}",
        f"--export=ALL,CAMPAIGN={campaign}",
        str(EXAMPLES / "lossless-shard.sbatch"),
        *extra,
    ).strip()


def _sessions(receipts: Path) -> dict[str, dict[str, object]]:
    """Each session folder's index (an empty dict where it has none)."""
    found: dict[str, dict[str, object]] = {}
    for folder in sorted(p for p in receipts.iterdir() if p.is_dir()):
        index = folder / "INDEX.json"
        found[folder.name] = json.loads(index.read_text()) if index.exists() else {}
    return found


def _wait_for(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:g} s")
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.deep
def test_slurm_a_task_run_again_alone(cluster: Cluster, tmp_path: Path):  # noqa: F811
    """The documented rerun: ``sbatch --array=2 lossless-shard.sbatch`` alone is refused with
    the fix named; given ``--lossless-shard 2/4`` it runs shard 2/4, verify names the shard run
    twice, and removing the extra folder as told verifies."""
    project = _project(
        tmp_path / "p", SUITE, cluster.env, "--update-goldens", "--lossless-receipts=r0"
    )
    campaign = project / "campaign"
    receipts = campaign / "receipts"
    array = _sbatch(cluster, project, campaign, "--array=0-3%2", "--gres=gpu:2")
    cluster.wait_jobs(array)
    first = set(_sessions(receipts))
    assert len(first) == 4

    alone = _sbatch(cluster, project, campaign, "--array=2", "--gres=gpu:2")
    cluster.wait_jobs(alone)
    log = (campaign / "logs" / f"shard-{alone}_2.log").read_text()
    assert "give --lossless-shard I/N" in log, log
    assert "--lossless-shard 2/4" in log
    assert cluster.exit_code(f"{alone}_2") == "4:0"
    assert set(_sessions(receipts)) == first  # no session: nothing ran

    named = _sbatch(
        cluster, project, campaign, "--array=2", "--gres=gpu:2", extra=["--lossless-shard", "2/4"]
    )
    cluster.wait_jobs(named)
    rerun = set(_sessions(receipts)) - first
    assert len(rerun) == 1
    code, out = _verify(receipts)
    assert code == 1, out
    assert "shard 2/4 ran 2 times" in out
    assert "summary --write DIR" in out
    shutil.rmtree(receipts / rerun.pop())
    assert _summary_write(receipts) == 0
    code, out = _verify(receipts)
    assert code == 0, out
    assert "shards: 4 of 4 present (0/4, 1/4, 2/4, 3/4)" in out


@pytest.mark.slow
@pytest.mark.deep
def test_slurm_a_task_given_fewer_gpus_than_a_test_asks(cluster: Cluster, tmp_path: Path):  # noqa: F811
    project = _project(tmp_path / "p", SUITE, cluster.env)
    campaign = project / "campaign"
    job = _sbatch(
        cluster, project, campaign, "--array=0-0", "--gres=gpu:1", extra=["-k", "golden and 1"]
    )
    cluster.wait_jobs(job)
    log = (campaign / "logs" / f"shard-{job}_0.log").read_text()
    assert "lossless: shard 0/1 (Slurm array task" in log
    assert "asks for 2 cpu devices but the pool has only 1" in log, log
    assert "ask Slurm for more" in log
    assert "--gres=gpu:N" in log
    assert cluster.exit_code(f"{job}_0") == "1:0"
    code, out = _verify(campaign / "receipts")
    assert code == 1, out
    assert "was collected and is failed (setup failed), but wrote no receipt" in out


@pytest.mark.slow
@pytest.mark.deep
def test_slurm_a_pool_larger_than_the_allocation_is_a_usage_error(cluster: Cluster, tmp_path: Path):  # noqa: F811
    """As documented: --lossless-devices naming more devices than the task was given stops the
    session at its start (exit 4), naming both, and leaves no session folder."""
    project = _project(tmp_path / "p", SUITE, cluster.env)
    campaign = project / "campaign"
    job = _sbatch(
        cluster, project, campaign, "--array=0-0", "--gres=gpu:2", extra=["--lossless-devices=0-3"]
    )
    cluster.wait_jobs(job)
    log = (campaign / "logs" / f"shard-{job}_0.log").read_text()
    assert "--lossless-devices='0,1,2,3': names 4 devices, but the Slurm job" in log, log
    assert "was given 2: name at most 2 of them" in log
    assert cluster.exit_code(f"{job}_0") == "4:0"
    assert not (campaign / "receipts").exists()


@pytest.mark.slow
@pytest.mark.deep
def test_slurm_requeued_and_cancelled_tasks_mid_session(cluster: Cluster, tmp_path: Path):  # noqa: F811
    """Task 0 requeued (``scontrol requeue``) and task 1 cancelled (``scancel``: SIGTERM, then
    SIGKILL after KillWait) while their sessions ran, writing goldens: each interrupted
    session writes its index (interrupted), no golden of an unfinished test is written, the
    requeued run takes the same devices again (no lock left held) and records its restart;
    verify names both; the procedure it names verifies once task 1 ran again."""
    project = _project(tmp_path / "p", SLOW, cluster.env)
    campaign = project / "campaign"
    receipts = campaign / "receipts"
    array = _sbatch(
        cluster, project, campaign, "--array=0-1", "--gres=gpu:2", extra=["--update-goldens"]
    )
    logs = campaign / "logs"

    def started() -> bool:
        return all(
            (logs / f"shard-{array}_{t}.log").exists()
            and "runs 3 of the 6" in (logs / f"shard-{array}_{t}.log").read_text()
            for t in (0, 1)
        )

    _wait_for(started, "both tasks' sessions started")
    time.sleep(1.0)
    cluster.run("scontrol", "requeue", f"{array}_0")
    cluster.run("scancel", f"{array}_1")
    _wait_for(
        lambda: "PENDING" in cluster.run("scontrol", "-o", "show", "job", f"{array}_0"), "requeued"
    )
    cluster.run("scontrol", "update", f"jobid={array}_0", "StartTime=now")  # not in 2 minutes
    cluster.wait_jobs(array)

    sessions = _sessions(receipts)
    assert len(sessions) == 3, sessions
    states = sorted(str(i.get("state")) for i in sessions.values())
    assert states == ["finished", "interrupted", "interrupted"], sessions
    restarts = set()
    for path in receipts.rglob("*.json"):
        if path.name == "INDEX.json":
            continue
        receipt = json.loads(path.read_text())
        scheduler = receipt["runspec"]["scheduler"]
        if scheduler["array_task_id"] == 0:
            restarts.add(scheduler["allocation"].get("SLURM_RESTART_COUNT"))
            assert sorted(receipt["allocation"]["lock_keys"]) == ["cpu-slot-0", "cpu-slot-1"]
    assert "1" in restarts, restarts  # the run after the requeue; the first records none
    code, out = _verify(receipts)
    assert code == 1, out
    assert "shard 0/2 ran 2 times" in out
    assert "shard 1/2: its session" in out
    assert "did not finish (interrupted)" in out

    # What verify says to do: remove the runs that do not count, run task 1 again as its shard.
    for name, index in sessions.items():
        if index.get("state") == "interrupted":
            shutil.rmtree(receipts / name)
    again = _sbatch(
        cluster,
        project,
        campaign,
        "--array=1",
        "--gres=gpu:2",
        extra=["--update-goldens", "--lossless-shard", "1/2"],
    )
    cluster.wait_jobs(again)
    assert _summary_write(receipts) == 0
    code, out = _verify(receipts)
    assert code == 0, out
    assert "shards: 2 of 2 present (0/2, 1/2)" in out
    # The goldens are whole: every test compares against them.
    done = subprocess.run(
        [*PYTEST, "--lossless-receipts=check"],
        cwd=project,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout
