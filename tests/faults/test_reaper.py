"""The session's reaper (run/reaper.py): when pytest dies without finishing (SIGKILL,
``os._exit``), every process the session started ends within seconds, the session folder says
interrupted, and nothing else is touched; at a normal end it ends nothing.

A stand-in for pytest (a Python process) starts the reaper as the plugin does, starts a run in
a session of its own that ignores SIGTERM (with a child that clears its environment but keeps
the session), and a process of its own group that carries no token; then it dies or says done.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

STAND_IN = r"""
import os, subprocess, sys, time
from pathlib import Path
from pytest_lossless.run.reaper import TOKEN_ENV, Reaper

folder, how = sys.argv[1], sys.argv[2]
reaper = Reaper("tok-" + str(os.getpid()))
os.environ[TOKEN_ENV] = reaper.token
reaper.send("folder", folder)
reaper.send("test", "tests/test_x.py::test_y")
# A run: its own session, ignores SIGTERM, with a child that clears its environment.
code = (
    "import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env={});"
    "time.sleep(60)"
)
run = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
# A bystander in pytest's own group, without the token: never the reaper's to end.
bystander = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(60)"],
    env={k: v for k, v in os.environ.items() if k != TOKEN_ENV},
)
time.sleep(0.5)
print(run.pid, bystander.pid, reaper.pid, flush=True)
if how == "done":
    reaper.done()
    print("done", flush=True)
    time.sleep(0.3)
    os._exit(0)
os._exit(3)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def session_members(sid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
                found.append(int(name))
    return found


def stand_in(tmp_path: Path, how: str) -> tuple[int, int, int, float]:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = tmp_path / "stand-in.out"  # a file: the runs it leaves must not hold our pipe open
    with out.open("w") as handle:
        proc = subprocess.Popen(
            [sys.executable, "-c", STAND_IN, str(tmp_path / "session"), how],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
        )
        proc.wait(60)
    ended = time.monotonic()
    run, bystander, reaper = (int(x) for x in out.read_text().split()[:3])
    return run, bystander, reaper, ended


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux only")
def test_pytest_killed_the_reaper_ends_its_runs_and_marks_the_session(tmp_path: Path) -> None:
    run, bystander, _, ended = stand_in(tmp_path, "exit")
    try:
        members = session_members(run)
        while (alive(run) or session_members(run)) and time.monotonic() - ended < 5.0:
            time.sleep(0.05)
        seconds = time.monotonic() - ended
        assert not alive(run), "the run outlived pytest by 5 s"
        assert session_members(run) == [], f"its session's processes outlived pytest: {members}"
        assert alive(bystander), "the reaper ended a process that was not the session's"
        mark = tmp_path / "session" / "INTERRUPTED.jsonl"
        while not mark.exists() and time.monotonic() - ended < 5.0:
            time.sleep(0.05)
        record = json.loads(mark.read_text())
        assert record["state"] == "interrupted"
        assert record["test"] == "tests/test_x.py::test_y"
        assert run in [e["pid"] for e in record["ended"]]
        assert seconds < 5.0
    finally:
        for pid in (run, bystander, *session_members(run)):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux only")
def test_a_session_that_ends_normally_leaves_its_runs_to_itself(tmp_path: Path) -> None:
    run, bystander, reaper, ended = stand_in(tmp_path, "done")
    try:
        while alive(reaper) and time.monotonic() - ended < 5.0:
            time.sleep(0.05)
        assert not alive(reaper), "the reaper outlived a session that said done"
        assert alive(run), "a normal end is pytest's to handle: the reaper ended a run"
        assert not (tmp_path / "session" / "INTERRUPTED.jsonl").exists()
    finally:
        for pid in (run, bystander, *session_members(run)):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


INNER = """
import os, sys

def test_runs(model_run):
    model_run([sys.executable, "-c", "import os; print(os.environ['{env}'])"])
    assert os.environ["{env}"]
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux only")
def test_an_in_process_session_stops_its_reaper_and_gives_the_token_back(pytester) -> None:
    from pytest_lossless.run.reaper import TOKEN_ENV

    before = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = "outer-session"
    try:
        pytester.makepyfile(test_inner=INNER.replace("{env}", TOKEN_ENV))
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)
        assert os.environ[TOKEN_ENV] == "outer-session"  # the enclosing session's, again
    finally:
        if before is None:
            os.environ.pop(TOKEN_ENV, None)
        else:
            os.environ[TOKEN_ENV] = before


TIMED_OUT = """
import sys, time
import pytest

SERVER = [sys.executable, {server!r}, "{{port}}", "--workers", "2"]

@pytest.mark.timeout(4, method="thread")
def test_hangs(model_run):
    model_run.server(SERVER, ready="/health", workers_expected=2)
    time.sleep(60)
"""


def tagged(tag: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
                state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if f"REAPER_TAG={tag}".encode() in env and state not in ("Z", "X"):
                found.append(int(name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux only")
def test_pytest_timeout_s_thread_method_leaves_no_process(tmp_path: Path) -> None:
    """The real pytest-timeout, thread method (it ends pytest with ``os._exit(1)``): the server
    and its workers are gone within 5 s, and the session folder says interrupted."""
    pytest.importorskip("pytest_timeout")
    server = Path(__file__).resolve().parent.parent / "data" / "servers" / "worker_server.py"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_t.py").write_text(TIMED_OUT.format(server=str(server)))
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["REAPER_TAG"] = tag
    with (tmp_path / "log").open("w") as log:
        code = subprocess.call(
            [
                *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"),
                *("--lossless-receipts=receipts", f"--lossless-lock-dir={tmp_path / 'locks'}"),
            ],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=60,
        )
    ended = time.monotonic()
    output = (tmp_path / "log").read_text()
    try:
        assert code == 1, output[-2000:]
        assert "Timeout" in output, output[-2000:]
        while tagged(tag) and time.monotonic() - ended < 5.0:
            time.sleep(0.05)
        print(f"pytest-timeout thread method: processes gone {time.monotonic() - ended:.2f} s")
        assert tagged(tag) == [], "the server outlived pytest-timeout's os._exit by 5 s"
        marks = list((tmp_path / "receipts").rglob("INTERRUPTED.jsonl"))
        assert len(marks) == 1, output[-2000:]
        assert json.loads(marks[0].read_text())["test"] == "test_t.py::test_hangs"
    finally:
        for pid in tagged(tag):
            os.kill(pid, signal.SIGKILL)
