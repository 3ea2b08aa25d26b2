"""The fault harness (issue #23, the method): every stop point of the registry
(:data:`pytest_lossless.core.faults.POINTS`) times every way a session dies
(:data:`~pytest_lossless.core.faults.ACTIONS`), and the invariants that must hold afterwards.

Session A (a real pytest, a real server with two workers, a command, two goldens, two cpu
device slots) is stopped at the armed point. Then:

1. no process left: after SIGINT, SIGTERM or SIGHUP, every process A started is gone within
   5 s of A's exit; after SIGKILL or ``os._exit`` (pytest-timeout's thread method) what
   survives is in the orphan record, and the next session ends it (``--lossless-orphans=kill``);
2. no device granted twice: session B gets the same devices only once none of A's processes
   runs, and within 10 s of A's end after a signal;
3. every golden whole: B compares against the goldens A left, the old or the new one whole
   (and recovers what A's kill left), never a mix or an integrity error;
4. receipts say what happened: after a signal A exits 2 with one line and no traceback, its
   index says ``interrupted``, and the test's receipt names the signal; after SIGKILL or
   ``exit`` no index claims the session finished.

A point added to the registry is covered here at once. Deep tier: ``pytest -m deep``. In CI a
covering design runs (each point once, each action at least once, the pairing drawn from a seed
the session header prints); ``PYTEST_LOSSLESS_FULL_HARNESS=1`` runs every point with every
action (``tests/faults/tiers.py``, docs/faults.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.core import faults
from pytest_lossless.goldens.folder import read_manifest
from tests.faults import tiers

pytestmark = [pytest.mark.deep, pytest.mark.slow]

SERVER = Path(__file__).resolve().parent.parent / "data" / "servers" / "worker_server.py"
SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")

PROJECT = f"""
import json, os, pathlib, sys, time
import pytest

SERVER = [sys.executable, {str(SERVER)!r}, "{{port}}", "--workers", "2"]

def tagged_alive(tag):
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                env = pathlib.Path(f"/proc/{{name}}/environ").read_bytes().split(b"\\0")
                stat = pathlib.Path(f"/proc/{{name}}/stat").read_text()
                state = stat.rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if f"HARNESS_TAG={{tag}}".encode() in env and state not in ("Z", "X"):
                found.append(int(name))
    return found

@pytest.mark.lossless
@pytest.mark.npu(devices=2)
def test_all(model_run, devices, golden):
    previous = os.environ.get("PREVIOUS_TAG")
    if previous:
        pathlib.Path(os.environ["GRANTED"]).write_text(json.dumps(
            {{"at": time.time(), "alive": tagged_alive(previous)}}))
    model_run.server(SERVER, ready="/health", workers_expected=2)
    model_run([sys.executable, "-c", "pass"])
    value = os.environ["GOLDEN_VALUE"].encode()
    golden.check("v.bin", value * 100)
    golden.check("w.bin", b"second artifact: " + value)
"""

#: What the golden holds after A is killed at each point (A updates "one" to "two" at the
#: golden points, compares against "one" elsewhere).
KEPT = {"golden-swapped": "two"}


def kept(point: str, action: str) -> str:
    """The value of the whole golden A leaves: a signal during an update lets it finish (the
    new golden, whole); a kill leaves the old one before the swap, the new one after it."""
    if action in SIGNALS and point.startswith("golden-"):
        return "two"
    return KEPT.get(point, "one")


def tagged(tag: str) -> list[int]:
    """Live processes (not zombies) whose environment carries ``HARNESS_TAG=tag``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"HARNESS_TAG={tag}".encode() in env and state not in ("Z", "X"):
            found.append(int(name))
    return found


def session(
    root: Path, *args: str, env: dict[str, str], timeout: float = 120
) -> tuple[subprocess.Popen[str], Path]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environment.update(env)
    log = root / f"session-{uuid.uuid4().hex[:6]}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=root,
        env=environment,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, log


def options(root: Path, receipts: str) -> list[str]:
    return [
        "--lossless-backend=cpu",
        "--lossless-devices=0,1",
        f"--lossless-lock-dir={root.parent / 'locks'}",
        f"--lossless-receipts={receipts}",
        "--lossless-lock-timeout=60",
    ]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose goldens hold "one", made once and copied for each case."""
    root = tmp_path_factory.mktemp("baseline") / "project"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_h.py").write_text(PROJECT)
    proc, log = session(
        root,
        "--update-goldens",
        *options(root, "r0"),
        env={"GOLDEN_VALUE": "one", "HARNESS_TAG": "baseline"},
    )
    assert proc.wait(120) == 0, log.read_text()
    return root


def test_the_registry_names_every_point_the_code_calls() -> None:
    """One registry: every ``faults.point("...")`` in the package is registered, and every
    registered point is called somewhere (a point nobody reaches covers nothing)."""
    import re

    package = Path(faults.__file__).resolve().parent.parent
    called: set[str] = set()
    written: set[str] = set()
    for path in package.rglob("*.py"):
        text = path.read_text()
        called |= set(re.findall(r"""faults\.point\("([a-z-]+)"\)""", text))
        called |= set(re.findall(r"""\bfault\("([a-z-]+)"\)""", text))
        written |= set(re.findall(r'faults\.write\(\s*"([a-z-]+)"', text))
    assert called == set(faults.POINTS), called ^ set(faults.POINTS)
    assert written == set(faults.WRITES), written ^ set(faults.WRITES)
    assert not set(faults.POINTS) & set(faults.WRITES)
    # Each point is the session's or a command's (test_commands.py), and covered there.
    commands = {p for points in faults.COMMANDS.values() for p in points}
    assert commands <= set(faults.POINTS), commands - set(faults.POINTS)
    assert set(faults.SESSION_POINTS) | commands == set(faults.POINTS)


@pytest.mark.parametrize(
    ("point", "action"),
    [
        pytest.param(point, action, id=f"{point}-{action}")
        for point, action in tiers.cases(list(faults.SESSION_POINTS), faults.ACTIONS)
    ],
)
def test_a_session_stopped_at_any_point_breaks_no_invariant(
    tmp_path: Path, baseline: Path, point: str, action: str
) -> None:
    root = tmp_path / "project"
    shutil.copytree(baseline, root, ignore=shutil.ignore_patterns("r0", "*.log"))
    tag = uuid.uuid4().hex
    update = point.startswith("golden-")
    armed = f"{point}:{action}"
    if point == "golden-retired":
        armed = f"no-exchange,{armed}"
    a, a_log = session(
        root,
        *(["--update-goldens"] if update else ["--lossless"]),
        *options(root, "ra"),
        env={
            "GOLDEN_VALUE": "two" if update else "one",
            "HARNESS_TAG": tag,
            faults.FAULT_ENV: armed,
        },
    )
    code = a.wait(120)
    ended = time.monotonic()
    output = a_log.read_text()
    # The point was reached, and the action done.
    expected = {"SIGKILL": -signal.SIGKILL, "exit": 3}.get(action, 2)
    assert code == expected, f"A exited {code}, not {expected}:\n{output[-3000:]}"

    # 1. No process left within 5 s of A's exit: after a signal pytest ends them; after
    #    SIGKILL or os._exit the session's reaper does (run/reaper.py).
    while tagged(tag) and time.monotonic() - ended < 5.0:
        time.sleep(0.05)
    gone = time.monotonic() - ended
    assert tagged(tag) == [], f"{armed}: A's processes outlived it by 5 s"

    # 2, 3. B gets the same devices only once nothing of A runs; the goldens are whole.
    granted = tmp_path / "granted.json"
    b, b_log = session(
        root,
        "--lossless",
        "--lossless-orphans=kill",
        *options(root, "rb"),
        env={
            "GOLDEN_VALUE": kept(point, action),
            "HARNESS_TAG": uuid.uuid4().hex,
            "PREVIOUS_TAG": tag,
            "GRANTED": str(granted),
        },
    )
    started = time.time()
    assert b.wait(120) == 0, f"{armed}: B failed:\n{b_log.read_text()[-4000:]}"
    got: dict[str, Any] = json.loads(granted.read_text())
    assert got["alive"] == [], f"{armed}: B was granted the devices while A's {got} ran"
    assert got["at"] - started < 10.0 + 5.0, "B waited for devices A no longer held"
    times = os.environ.get("LOSSLESS_HARNESS_TIMES")
    if times:  # the seconds docs/faults.md quotes
        with open(times, "a") as handle:
            handle.write(f"{armed}\tgone {gone:.2f}\tgranted {got['at'] - started:.2f}\n")
    assert tagged(tag) == [], f"{armed}: A's processes outlived the next session"
    folder = root / "goldens" / "test_h" / "test_all"
    manifest = read_manifest(folder)
    assert sorted(manifest) == ["v.bin", "w.bin"]
    value = kept(point, action).encode()
    assert (folder / "v.bin").read_bytes() == value * 100
    assert (folder / "w.bin").read_bytes() == b"second artifact: " + value

    # 4. Receipts say what happened.
    indexes = list((root / "ra").rglob("INDEX.json"))
    states = [json.loads(p.read_text())["state"] for p in indexes]
    if action in SIGNALS:
        assert "Traceback" not in output, output[-3000:]
        assert f"interrupted by {action}" in output, output[-3000:]
        assert states == ["interrupted"], f"{armed}: index states {states}\n{output[-3000:]}"
        receipts = list((root / "ra").rglob("test_h.py__test_all.json"))
        if point != "session-finish":
            assert len(receipts) == 1, f"{armed}: {receipts}\n{output[-3000:]}"
            outcome = json.loads(receipts[0].read_text())["outcome"]
            assert outcome.get("interrupted") == action, f"{armed}: {outcome}"
    else:
        assert "finished" not in states, f"{armed}: a killed session's index says finished"
        if point != "allocation":  # by then a run has started, and with it the reaper
            marks = list((root / "ra").rglob("INTERRUPTED.jsonl"))
            assert len(marks) == 1, f"{armed}: {marks}\n{output[-3000:]}"
            mark = json.loads(marks[0].read_text())
            assert mark["state"] == "interrupted", mark
            assert mark["test"] == "test_h.py::test_all", mark
