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
from tests.e2e.test_slurm import (
    EXAMPLES,
    INI,
    PYTEST,
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
