"""End to end on a real Slurm (the deeper tier: ``-m deep``): a one-node cluster with four
generic-resource GPUs (fake device files), started here and stopped after; the documented
scripts (docs/examples/slurm/) submit a 4-task array of shards of a small gate suite, 2 devices
each, and the verification as a dependent job; the merged receipts verify, every shard present,
each session on its own devices; then one task of a second array is cancelled, and the merged
verify fails naming the missing shard.

Skips, saying why, where Slurm cannot start: not root, or no ``slurm-wlm`` and ``munge``
packages (``.ci/run`` installs them where it can). The cpu backend stands in for GPUs: it takes
its slots from the generic-resource allocation, so no GPU is needed.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pytest_lossless
from pytest_lossless.__main__ import main

pytestmark = [pytest.mark.slow, pytest.mark.deep]

REPO = Path(pytest_lossless.__file__).resolve().parents[1]
EXAMPLES = REPO / "docs" / "examples" / "slurm"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")
SHARDS = 4
PYTEST = (sys.executable, "-m", "pytest", "--lossless", "-q", "-p", "no:cacheprovider")
#: Seconds one array may take to run through (two tasks at a time on four devices).
ARRAY_TIMEOUT = 150.0

SUITE = """
import numpy as np
import pytest

pytestmark = [pytest.mark.npu(devices=2), pytest.mark.lossless]


@pytest.mark.parametrize("n", range(4))
def test_matches_golden(n, golden):
    golden.check("frame", np.arange(16, dtype=np.int32) * n)


@pytest.mark.parametrize("n", range(4))
def test_is_lossless(n, lossless):
    make = lambda: {"x": np.full(8, n, dtype=np.float32)}
    lossless.compare(make, make, runs=2, label=f"same{n}")
"""

INI = """[pytest]
lossless_backend = cpu
lossless_devices = 0,1,2,3
lossless_no_canary = true
"""


def _why_not() -> str | None:
    if not sys.platform.startswith("linux"):
        return "a Slurm cluster is started on Linux only"
    if os.geteuid() != 0:
        return "starting munged, slurmctld and slurmd for the test needs root"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} not on PATH): "
            "apt-get install slurm-wlm munge (.ci/run does, where it runs as root)"
        )
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _node_line(node: str) -> str:
    """This machine's hardware as slurmd sees it (``slurmd -C``), named ``node``."""
    done = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30)
    first = next((line for line in done.stdout.splitlines() if line.startswith("NodeName=")), "")
    fields = [f for f in first.split() if f.split("=")[0] not in ("NodeName", "UpTime")]
    return " ".join([f"NodeName={node}", "NodeAddr=127.0.0.1", *fields])


@dataclass
class Cluster:
    """A one-node Slurm, its daemons children of this process (run in the foreground)."""

    root: Path
    env: dict[str, str]
    daemons: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "wb")  # noqa: SIM115 (the daemon's)
        with log:
            self.daemons.append(
                (name, subprocess.Popen(argv, env=self.env, stdout=log, stderr=log))
            )

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def exited(self) -> str | None:
        for name, process in self.daemons:
            if process.poll() is not None:
                return f"{name} exited with {process.returncode}"
        return None

    def wait_idle(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (gone := self.exited()) is not None:
                raise RuntimeError(gone)
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True
            )
            if state.stdout.strip() == "idle":
                return
            time.sleep(0.2)
        raise RuntimeError(f"the node is not idle after {timeout:g} s")

    def wait_jobs(self, *job_ids: str, timeout: float = ARRAY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.run("squeue", "-h", "-j", ",".join(job_ids)).strip():
                return
            time.sleep(0.5)
        queue = self.run("squeue", check=False)
        raise AssertionError(f"jobs {job_ids} still queued after {timeout:g} s:\n{queue}")

    def exit_code(self, job_id: str) -> str:
        shown = self.run("scontrol", "-o", "show", "job", job_id)
        found = re.search(r"\bExitCode=(\S+)", shown)
        return found.group(1) if found else shown

    def stop(self) -> None:
        """Cancel this cluster's jobs, then end the daemons this test started (only those)."""
        if self.exited() is None:
            subprocess.run(["scancel", "--user", "root"], env=self.env, timeout=30, check=False)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                queue = subprocess.run(
                    ["squeue", "-h"], env=self.env, capture_output=True, text=True, timeout=30
                )
                if queue.returncode != 0 or not queue.stdout.strip():
                    break
                time.sleep(0.5)
        for _, process in reversed(self.daemons):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in reversed(self.daemons):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)


def _start(root: Path) -> Cluster:
    node = socket.gethostname().split(".")[0]
    for name in ("state", "spool", "log", "dev", "munge"):
        (root / name).mkdir(parents=True)
    munge = root / "munge"
    munge.chmod(0o755)  # munged wants its socket's folder open to all, the key closed
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for index in range(4):  # gres.conf accepts character devices only; these are /dev/null's
        os.mknod(root / "dev" / f"gpu{index}", 0o600 | 0o020000, os.makedev(1, 3))
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=lossless",
                f"SlurmctldHost={node}(127.0.0.1)",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                f"AuthInfo=socket={munge / 'socket'}",
                "CredType=cred/munge",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "GresTypes=gpu",
                "MpiDefault=none",
                "ReturnToService=2",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "JobCompType=jobcomp/none",
                "AccountingStorageType=accounting_storage/none",
                "MinJobAge=600",
                f"{_node_line(node)} Gres=gpu:4 State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
                "OverSubscribe=YES",
                "",
            ]
        )
    )
    (root / "gres.conf").write_text(f"Name=gpu File={root / 'dev'}/gpu[0-3]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "PYTEST_"))}
    env.update(
        SLURM_CONF=str(conf),
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
        PYTEST_LOSSLESS_LOCK_DIR=str(root / "locks"),
        PYTHON=sys.executable,
    )
    cluster = Cluster(root, env)
    try:
        _start_daemons(cluster, node)
    except BaseException:
        cluster.stop()  # what did start, and only that
        raise
    return cluster


def _start_daemons(cluster: Cluster, node: str) -> None:
    root = cluster.root
    munge = root / "munge"
    cluster.start(
        "munged",
        [
            "munged",
            "--foreground",
            f"--key-file={munge / 'munge.key'}",
            f"--socket={munge / 'socket'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={root / 'log' / 'munged.log'}",
            f"--seed-file={munge / 'seed'}",
        ],
    )
    deadline = time.monotonic() + 10
    while not (munge / "socket").exists():
        if cluster.exited() or time.monotonic() > deadline:
            raise RuntimeError(f"munged did not start: {cluster.exited() or 'no socket in 10 s'}")
        time.sleep(0.1)
    cluster.start("slurmctld", ["slurmctld", "-D", "-i"])
    time.sleep(0.5)
    cluster.start("slurmd", ["slurmd", "-D", "-N", node])
    cluster.wait_idle()


def _tail(root: Path) -> str:
    logs = sorted((root / "log").glob("*"))
    return "; ".join(
        f"{p.name}: {' / '.join(p.read_text(errors='replace').splitlines()[-3:])}" for p in logs
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = _why_not()
    if reason is not None:
        pytest.skip(reason)
    # Not under pytest's own temporary folder (mode 0700): munged wants every folder above its
    # socket open to all; and a short path, for the socket's name.
    root = Path(tempfile.mkdtemp(prefix="lossless-slurm-"))
    root.chmod(0o755)
    try:
        try:
            started = _start(root)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            pytest.skip(f"Slurm did not start here ({exc}): {_tail(root)}")
        try:
            yield started
        finally:
            started.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def project(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gate suite, with its goldens and frozen plans written once, here, off the cluster."""
    root = tmp_path_factory.mktemp("project")
    (root / "pytest.ini").write_text(INI)
    (root / "test_gates.py").write_text(SUITE)
    done = subprocess.run(
        [*PYTEST, "--update-goldens", "--lossless-receipts=local-receipts"],
        cwd=root,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def _verify(folder: Path) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        code = main(["verify", str(folder)])
    return code, out.getvalue()


def _logs(folder: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(folder.rglob("*.log")))


def test_an_array_of_shards_verifies_merged(cluster: Cluster, project: Path):
    campaign = project / "campaign-1"
    env = {**cluster.env, "CAMPAIGN": str(campaign), "SHARDS": str(SHARDS), "GPUS": "2"}
    submitted = subprocess.run(
        ["bash", str(EXAMPLES / "submit.sh")],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert submitted.returncode == 0, submitted.stderr
    array, verify_job = submitted.stdout.split()
    cluster.wait_jobs(array, verify_job)
    logs = _logs(campaign / "logs")
    # The dependent job verified the merged receipts, and passed.
    assert cluster.exit_code(verify_job) == "0:0", logs
    assert "shards: 4 of 4 present (0/4, 1/4, 2/4, 3/4)" in (campaign / "verify.txt").read_text()

    code, out = _verify(campaign / "receipts")
    assert code == 0, out + logs
    assert "8 of 8 receipts consistent" in out
    indexes = [json.loads(p.read_text()) for p in (campaign / "receipts").rglob("INDEX.json")]
    assert sorted(i["shard"]["index"] for i in indexes) == [0, 1, 2, 3]
    assert sum(i["shard"]["kept"] for i in indexes) == 8
    assert all(i["finished"] for i in indexes)
    receipts = [
        json.loads(p.read_text())
        for p in (campaign / "receipts").rglob("*.json")
        if p.name != "INDEX.json"
    ]
    assert len(receipts) == 8
    tasks = set()
    for receipt in receipts:
        scheduler = receipt["runspec"]["scheduler"]
        assert scheduler["array_job_id"] == array
        assert scheduler["node"] == socket.gethostname().split(".")[0]
        given = scheduler["allocation"]["SLURM_JOB_GPUS"].split(",")
        assert len(given) == 2
        # Each session took the devices Slurm gave its task, locked by the scheduler's index.
        assert sorted(receipt["allocation"]["lock_keys"]) == sorted(f"cpu-slot-{d}" for d in given)
        tasks.add(scheduler["array_task_id"])
    assert tasks == {0, 1, 2, 3}


def test_a_cancelled_shard_fails_the_merged_verify_named(cluster: Cluster, project: Path):
    campaign = project / "campaign-2"
    (campaign / "logs").mkdir(parents=True)
    array = cluster.run(
        "sbatch",
        "--parsable",
        "--hold",
        f"--array=0-{SHARDS - 1}",
        "--gres=gpu:2",
        f"--output={campaign / 'logs' / 'shard-%A_%a.log'}",
        f"--chdir={project}",
        f"--export=ALL,CAMPAIGN={campaign}",
        str(EXAMPLES / "lossless-shard.sbatch"),
    ).strip()
    cluster.run("scancel", f"{array}_2")
    cluster.run("scontrol", "release", array)
    cluster.wait_jobs(array)
    code, out = _verify(campaign / "receipts")
    assert code == 1, out
    assert "INCOMPLETE shard 2/4 is missing: none of the 3 sharded sessions ran it" in out
    assert "shards: 3 of 4 present (0/4, 1/4, 3/4)" in out
