"""Faults: what an allocation leaves running when its pytest process dies (issue #12, D1, D2).

No device is granted while any process started under an earlier allocation of it still runs,
whatever happened to the pytest process that held it (SIGKILL of the session, of an xdist
worker) and whatever the process did to hide (its own session, a double fork, a cleared
environment, closed descriptors). Real pytest sessions, real processes, real signals and
real locks; session A is always killed with SIGKILL to its own pid (never its group), the
way an OOM killer or a CI runner's timeout ends it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.core import faults
from pytest_lossless.devices.runs import Member

SERVERS = Path(__file__).resolve().parent.parent / "data" / "servers"
SERVER = [sys.executable, str(SERVERS / "worker_server.py"), "{port}"]


# ------------------------------------------------------------------ helpers


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: it only waits for its parent to reap it)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def wait_until(what: str, check: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.02)


def settle(what: str, check: Callable[[], bool], seconds: float) -> bool:
    """Like :func:`wait_until`, without failing: whether ``check`` came true in time."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def main_of(parent: int, *, besides: int) -> int:
    """The one child of ``parent`` but ``besides`` (a run's main process is a child of its
    pytest; so is an orphan re-parented to it, the child subreaper)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{name}/stat").read_text()
                if int(text[text.rfind(")") + 2 :].split()[1]) == parent and int(name) != besides:
                    found.append(int(name))
    assert len(found) == 1, f"pid {parent} has children {found}"
    return found[0]


def end(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class Session:
    """One pytest session in a subprocess, its output in a file that the test can read
    while it runs."""

    def __init__(self, cwd: Path, args: Sequence[str], log: Path) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-q", *args],
            cwd=cwd,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
                # The orphan record on its own: the reaper gone with pytest (a cgroup kill).
                faults.FAULT_ENV: "no-reaper",
            },
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, seconds: float = 60.0) -> int:
        try:
            return self.proc.wait(seconds)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._out.close()


@pytest.fixture
def sessions() -> Iterator[list[Session]]:
    started: list[Session] = []
    yield started
    for session in started:
        if session.proc.poll() is None:
            session.proc.kill()
        session.wait(10)


def device_args(locks: Path, receipts: Path, *more: str) -> list[str]:
    return [
        "--lossless-backend=cpu",
        "--lossless-devices=0,1",
        f"--lossless-lock-dir={locks}",
        f"--lossless-receipts={receipts}",
        *more,
    ]


def only_receipt(folder: Path, name: str) -> dict[str, Any]:
    found = [p for p in folder.rglob("*.json") if name in p.name and "index" not in p.name]
    assert len(found) == 1, f"one receipt of {name} expected in {folder}: {found}"
    return dict(json.loads(found[0].read_text()))


#: Session A: holds devices 0 and 1, starts a server with two workers, says who is who, and
#: stays until it is killed.
SERVING = """
import json, os, pathlib, sys, time
import pytest

@pytest.mark.npu(devices=2)
def test_serve(model_run, devices):
    server = model_run.server({server!r} + ["--workers", "2"], ready="/health",
                              workers_expected=2)
    workers = server.record["workers_at_ready"]
    pathlib.Path({info!r}).write_text(json.dumps(
        {{"pytest": os.getpid(), "server": server.pid, "workers": workers,
          "ids": list(devices.ids)}}))
    {ending}
"""

#: Session B: asks for the same devices; its body notes when it got them, and which of A's
#: processes were still alive then.
ASKING = """
import json, os, pathlib, sys, time
import pytest

def alive(pid):
    try:
        text = pathlib.Path(f"/proc/{{pid}}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2:].split()[0] not in ("Z", "X")

@pytest.mark.npu(devices=2)
def test_after(model_run, devices):
    got = time.time()
    pids = json.loads(pathlib.Path({info!r}).read_text())["pids"]
    model_run([sys.executable, "-c", "pass"])
    pathlib.Path({entered!r}).write_text(json.dumps(
        {{"at": got, "alive": [p for p in pids if alive(p)], "ids": list(devices.ids)}}))
"""


def start_serving(
    tmp_path: Path,
    sessions: list[Session],
    locks: Path,
    *more: str,
    ending: str = "",
    stubborn: bool = False,
) -> tuple[Session, dict[str, Any]]:
    """Session A, up and serving on devices 0 and 1; its info (pids). Its test then sleeps
    (to be killed), or ends as ``ending`` says (``os._exit(3)``: a power-cut-style exit).
    ``stubborn``: the server's workers ignore SIGTERM."""
    folder = tmp_path / "a"
    folder.mkdir()
    info = tmp_path / "a-info.json"
    server = [*SERVER, "--worker-ignore-term"] if stubborn else SERVER
    script = SERVING.format(server=server, info=str(info), ending=ending or "time.sleep(120)")
    (folder / "test_a.py").write_text(textwrap.dedent(script))
    a = Session(folder, [*device_args(locks, tmp_path / "a-receipts"), *more], tmp_path / "a.log")
    sessions.append(a)
    wait_until("session A serves", lambda: info.exists() or a.proc.poll() is not None, 60)
    assert info.exists(), a.output()
    return a, json.loads(info.read_text())


def start_asking(
    tmp_path: Path, sessions: list[Session], locks: Path, pids: Sequence[int], *more: str
) -> tuple[Session, Path]:
    folder = tmp_path / "b"
    folder.mkdir()
    info = tmp_path / "b-pids.json"
    info.write_text(json.dumps({"pids": list(pids)}))
    entered = tmp_path / "b-entered.json"
    (folder / "test_b.py").write_text(
        textwrap.dedent(ASKING.format(info=str(info), entered=str(entered)))
    )
    b = Session(
        folder,
        [*device_args(locks, tmp_path / "b-receipts"), "--lossless-lock-timeout=90", *more],
        tmp_path / "b.log",
    )
    sessions.append(b)
    return b, entered


def kill_session(session: Session) -> None:
    """SIGKILL to the pytest process alone, as an OOM killer does it."""
    os.kill(session.pid, signal.SIGKILL)
    session.wait(10)
    assert session.proc.returncode == -signal.SIGKILL


# ------------------------------------------------------------------ D1: a killed session


@pytest.mark.slow
@pytest.mark.parametrize("death", ["SIGKILL", "os._exit"])
def test_a_killed_session_s_server_keeps_its_devices_until_every_process_is_gone(
    tmp_path: Path, sessions: list[Session], death: str
) -> None:
    locks = tmp_path / "locks"
    ending = "os._exit(3)" if death == "os._exit" else ""
    a, info = start_serving(tmp_path, sessions, locks, ending=ending)
    orphans = [info["server"], *info["workers"]]
    assert len(orphans) == 3
    if death == "SIGKILL":
        kill_session(a)
    else:
        assert a.wait(30) == 3  # no teardown, no finalizer: the process is just gone
    # The server and its workers outlive A: without protection, B would get the devices now.
    assert all(alive(pid) for pid in orphans)
    b, entered = start_asking(tmp_path, sessions, locks, orphans)
    try:
        wait_until("B waits or runs", lambda: "still run" in b.output() or entered.exists())
        assert not entered.exists(), "B was granted the devices while A's server still ran"
        line = next(x for x in b.output().splitlines() if "waits for 2 cpu device(s)" in x)
        assert f"pid {info['server']} (" in line
        assert "worker_server.py" in line
        assert "started by test_a.py::test_serve" in line
        assert f"its pytest process (pid {info['pytest']}) is gone" in line
        assert "running since 20" in line
        # The server main goes; its workers (re-parented away) still hold the devices.
        end([info["server"]])
        wait_until("the server main is gone", lambda: not alive(info["server"]))
        time.sleep(1.0)
        assert not entered.exists(), "B was granted the devices while A's workers still ran"
        assert b.proc.poll() is None
    finally:
        end(orphans)
    wait_until("the workers are gone", lambda: not any(alive(p) for p in orphans))
    gone = time.time()
    assert b.wait(60) == 0, b.output()
    got = json.loads(entered.read_text())
    assert got["alive"] == []
    assert got["ids"] == ["0", "1"]
    # B's body began soon after the last orphan ended (it polls every 50 ms at first).
    assert got["at"] - gone < 1.0, got["at"] - gone
    receipt = only_receipt(tmp_path / "b-receipts", "test_after")
    found = receipt["allocation"]["orphans"]
    assert sorted(o["pid"] for o in found) == sorted(orphans)
    assert {o["action"] for o in found} == {"waited"}
    assert {o["outcome"] for o in found} == {"ended while waited for"}
    assert all(o["test"] == "test_a.py::test_serve" for o in found)
    assert all(o["holder"] == "gone" and o["holder_pid"] == info["pytest"] for o in found)
    assert all(sorted(o["devices"]) == ["0", "1"] for o in found)
    assert receipt["allocation"]["orphan_policy"] == "wait"


@pytest.mark.slow
def test_with_orphans_kill_the_next_session_ends_them_and_proceeds(
    tmp_path: Path, sessions: list[Session]
) -> None:
    locks = tmp_path / "locks"
    a, info = start_serving(tmp_path, sessions, locks)
    orphans = [info["server"], *info["workers"]]
    kill_session(a)
    assert all(alive(pid) for pid in orphans)
    b, entered = start_asking(tmp_path, sessions, locks, orphans, "--lossless-orphans=kill")
    try:
        assert b.wait(60) == 0, b.output()
    finally:
        end(orphans)
    got = json.loads(entered.read_text())
    assert got["alive"] == [], "B's test ran while A's processes still lived"
    output = b.output()
    assert "ends what an earlier allocation left running on cpu device(s) 0,1" in output
    assert f"pid {info['server']} (" in output
    assert "started by test_a.py::test_serve" in output
    receipt = only_receipt(tmp_path / "b-receipts", "test_after")
    found = {o["pid"]: o for o in receipt["allocation"]["orphans"]}
    assert sorted(found) == sorted(orphans)
    assert receipt["allocation"]["orphan_policy"] == "kill"
    for orphan in found.values():
        assert orphan["action"] == "ended"
        assert orphan["signals"][0]["signal"] == "SIGTERM"
        assert orphan["signals"][0]["target"] == "group"
        assert orphan["outcome"].startswith("ended after SIGTERM"), orphan


# ------------------------------------------------------------------ D2: a daemon that hides

#: Double-forks a daemon that replaces its environment (``env -i``) and closes every
#: descriptor (the device locks it inherited too), then sleeps ``argv[2]`` seconds.
#: The daemon writes its pid to ``argv[1]`` first.
DAEMONIZE = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            hide = ("import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
                    "os.closerange(0, 65536); time.sleep(120)")
            os.execv("/usr/bin/env", ["env", "-i", sys.executable, "-c", hide, sys.argv[1]])
        os._exit(0)
    time.sleep(float(sys.argv[2]))
    """
)


def read_pid(path: Path) -> int:
    wait_until(f"{path.name} is written", lambda: path.exists() and path.read_text() != "", 30)
    return int(path.read_text())


def environment_of(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


@pytest.mark.slow
def test_a_daemon_that_clears_its_environment_and_closes_its_fds_is_recorded_and_ended(
    tmp_path: Path,
) -> None:
    from pytest_lossless.errors import RunError
    from pytest_lossless.run import Launcher, lifecycle_verdict

    pidfile = tmp_path / "daemon.pid"
    launcher = Launcher(
        allocation=None, out_dir=tmp_path / "runs", run_timeout=30, knobs=(), grace=0.5
    )
    daemon = 0
    try:
        with pytest.raises(RunError, match="lifecycle was not clean") as info:
            launcher([sys.executable, "-c", DAEMONIZE, str(pidfile), "0.5"])
        daemon = int(pidfile.read_text())
        record = info.value.record
        by_pid = {p["pid"]: p for p in record["processes"]}
        assert daemon in by_pid, f"the daemon {daemon} is not in the record"
        assert by_pid[daemon]["role"] == "descendant"
        assert by_pid[daemon]["forced"]
        assert not lifecycle_verdict(record).clean
        assert f"pid {daemon}" in str(info.value)
        assert not alive(daemon), "the daemon outlived its run"
    finally:
        launcher.close()
        if daemon:
            end([daemon])


#: Session A: runs the daemonizing command on devices 0 and 1 and is killed during it.
HIDING = """
import pytest, sys

@pytest.mark.npu(devices=2)
def test_hide(model_run):
    model_run([sys.executable, "-c", {script!r}, {pidfile!r}, "120"], timeout=300)
"""


def listed(locks: Path) -> list[dict[str, Any]]:
    """Every process the runs records in ``locks`` list."""
    found = []
    for path in locks.glob("*.runs.*.json"):
        try:
            found.extend(json.loads(path.read_text())["processes"])
        except (OSError, ValueError, KeyError):
            continue
    return found


def runs_record_lists(locks: Path, pid: int) -> bool:
    return any(p["pid"] == pid for p in listed(locks))


@pytest.mark.slow
def test_a_hidden_daemon_still_blocks_the_devices_after_its_session_is_killed(
    tmp_path: Path, sessions: list[Session]
) -> None:
    locks = tmp_path / "locks"
    folder = tmp_path / "a"
    folder.mkdir()
    pidfile = tmp_path / "daemon.pid"
    (folder / "test_a.py").write_text(
        textwrap.dedent(HIDING.format(script=DAEMONIZE, pidfile=str(pidfile)))
    )
    a = Session(folder, device_args(locks, tmp_path / "a-receipts"), tmp_path / "a.log")
    sessions.append(a)
    daemon = read_pid(pidfile)
    try:
        # A process is listed from the first sample that sees it (50 ms); kill A after that.
        settle("the daemon is listed", lambda: runs_record_lists(locks, daemon), 5)
        assert b"PYTEST_LOSSLESS_RUN" not in environment_of(daemon)  # it hides: no token
        assert os.listdir(f"/proc/{daemon}/fd") == []  # and no descriptor, no lock
        main = main_of(a.pid, besides=daemon)
        kill_session(a)
        b, entered = start_asking(tmp_path, sessions, locks, [main, daemon])
        wait_until("B waits or runs", lambda: "still run" in b.output() or entered.exists())
        assert not entered.exists(), "B was granted the devices while A's daemon still ran"
        assert f"pid {daemon} (" in b.output()
        line = next(x for x in b.output().splitlines() if "waits for" in x)
        assert "started by test_a.py::test_hide" in line
        assert f"pid {main} (" in line
        # The run's main process goes: the daemon, which holds no lock, still blocks B.
        end([main])
        wait_until("A's run is gone", lambda: not alive(main))
        time.sleep(1.0)
        assert not entered.exists(), "B was granted the devices while the daemon ran"
    finally:
        end([daemon])
    wait_until("the daemon is gone", lambda: not alive(daemon))
    assert b.wait(60) == 0, b.output()
    assert json.loads(entered.read_text())["alive"] == []
    receipt = only_receipt(tmp_path / "b-receipts", "test_after")
    assert daemon in {o["pid"] for o in receipt["allocation"]["orphans"]}


# ------------------------------------------------------------------ an xdist worker OOM-killed

#: Two tests of one xdist session on the same two devices: the first serves and is killed
#: with its worker; the second, on the worker xdist starts in its place, asks for them.
WORKERS = """
import json, os, pathlib, sys, time
import pytest

def alive(pid):
    try:
        text = pathlib.Path(f"/proc/{{pid}}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2:].split()[0] not in ("Z", "X")

@pytest.mark.npu(devices=2)
def test_1_serve(model_run):
    server = model_run.server({server!r} + ["--workers", "2"], ready="/health",
                              workers_expected=2)
    workers = server.record["workers_at_ready"]
    pathlib.Path({info!r}).write_text(json.dumps(
        {{"pytest": os.getpid(), "server": server.pid, "workers": workers}}))
    time.sleep(120)

@pytest.mark.npu(devices=2)
def test_2_after(model_run):
    info = json.loads(pathlib.Path({info!r}).read_text())
    pids = [info["server"], *info["workers"]]
    pathlib.Path({entered!r}).write_text(json.dumps(
        {{"worker": os.getpid(), "alive": [p for p in pids if alive(p)]}}))
    model_run([sys.executable, "-c", "pass"])
"""


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["wait", "kill"])
def test_an_oom_killed_xdist_worker_leaves_the_same_protection(
    tmp_path: Path, sessions: list[Session], policy: str
) -> None:
    locks = tmp_path / "locks"
    info, entered = tmp_path / "info.json", tmp_path / "entered.json"
    (tmp_path / "test_w.py").write_text(
        textwrap.dedent(WORKERS.format(server=SERVER, info=str(info), entered=str(entered)))
    )
    receipts = tmp_path / "receipts"
    more = ["-p", "xdist", "-n", "1", "--lossless-lock-timeout=60"]
    if policy == "kill":
        more.append("--lossless-orphans=kill")
    session = Session(
        tmp_path, [*device_args(locks, receipts, *more), "test_w.py"], tmp_path / "session.log"
    )
    sessions.append(session)
    wait_until("the first test serves", lambda: info.exists() or session.proc.poll() is not None)
    assert info.exists(), session.output()
    pids = json.loads(info.read_text())
    orphans = [pids["server"], *pids["workers"]]
    try:
        os.kill(pids["pytest"], signal.SIGKILL)  # the worker, as the OOM killer would
        if policy == "wait":
            wait_until(
                "the next test waits or runs",
                lambda: "still run" in session.output() or entered.exists(),
            )
            time.sleep(0.5)
            assert not entered.exists(), "the next test ran while the killed worker's server did"
            assert all(alive(p) for p in orphans)
            end(orphans)
        session.wait(90)
    finally:
        end(orphans)
    output = session.output()
    assert "crashed" in output, output
    got = json.loads(entered.read_text())
    assert got["worker"] != pids["pytest"]
    assert got["alive"] == [], "the next test ran while the killed worker's server still did"
    assert f"pid {pids['server']} (" in output
    assert "started by test_w.py::test_1_serve" in output
    receipt = only_receipt(receipts, "test_2_after")
    found = receipt["allocation"]["orphans"]
    assert sorted(o["pid"] for o in found) == sorted(orphans)
    assert all(o["holder_pid"] == pids["pytest"] for o in found)
    assert {o["action"] for o in found} == {"waited" if policy == "wait" else "ended"}


# ------------------------------------------------------------------ the runs record itself

OTHER_UID = 12345
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="simulating another account needs root (chown, setuid)"
)


@pytest.fixture
def sleepers() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``sleep``-like processes (``user=`` to run one as another account); all are
    ended after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*argv: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        command = list(argv) or [sys.executable, "-c", "import time; time.sleep(60)"]
        proc = subprocess.Popen(command, start_new_session=True, **kwargs)
        started.append(proc)
        wait_until("the sleeper runs", lambda: Path(f"/proc/{proc.pid}/stat").exists())
        return proc

    yield start
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def start_of(pid: int) -> int:
    from pytest_lossless.core.procfs import process_stat

    found = process_stat(pid)
    assert found is not None
    return found.starttime


def gone_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def plant(
    locks: Path,
    processes: Sequence[int],
    *,
    uid: int | None = None,
    name_uid: int | None = None,
    key: str = "cpu-slot-0",
    **fields: Any,
) -> Path:
    """A runs record of ``key`` listing ``processes`` (pid, true start), whose holder is gone,
    as the file of account ``name_uid`` owned by ``uid`` (both default to this account)."""
    import socket

    from pytest_lossless.devices.locks import LockDir

    LockDir(locks).ensure()
    owner = os.geteuid() if uid is None else uid
    path = locks / f"{key}.runs.{owner if name_uid is None else name_uid}.json"
    record = {
        "schema": "pytest-lossless.runs",
        "version": 1,
        "host": socket.gethostname(),
        "holder": {"pid": gone_pid(), "pid_start": 1},
        "test": "test_old.py::test_left_it",
        "since": "2026-01-01T00:00:00.000Z",
        "locks": [key],
        "released_at": None,
        "processes": [
            {
                "pid": pid,
                "start": start_of(pid),
                "pgid": pid,
                "sid": pid,
                "comm": "python3",
                "command": "python3 -c sleep",
                "run": "command-01",
                "role": "main",
            }
            for pid in processes
        ],
        **fields,
    }
    path.write_text(json.dumps(record))
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def allocator(locks: Path, pool: Sequence[str] = ("0",), **kwargs: Any) -> Any:
    from pytest_lossless.core.clock import FakeClock
    from pytest_lossless.devices import Allocator, CpuBackend

    kwargs.setdefault("timeout", 1.0)
    kwargs.setdefault("clock", FakeClock())
    return Allocator([CpuBackend()], backend="cpu", pool=pool, lock_dir=locks, **kwargs)


def test_a_listed_live_process_blocks_the_device_and_the_timeout_names_it(
    tmp_path: Path, sleepers: Callable[..., subprocess.Popen[bytes]]
) -> None:
    from pytest_lossless.errors import AllocationTimeout

    sleeper = sleepers()
    plant(tmp_path, [sleeper.pid])
    lines: list[str] = []
    with pytest.raises(AllocationTimeout) as info:
        allocator(tmp_path, on_wait=lines.append).acquire(1, "t::new")
    message = str(info.value)
    assert f"pid {sleeper.pid} (python3 -c sleep, command-01, running since 20" in message
    assert "started by test_old.py::test_left_it still runs" in message
    assert "--lossless-orphans=kill" in message
    assert f"pid {sleeper.pid} (" in lines[0]


def test_a_second_device_is_taken_while_the_first_runs_an_orphan(
    tmp_path: Path, sleepers: Callable[..., subprocess.Popen[bytes]]
) -> None:
    sleeper = sleepers()
    plant(tmp_path, [sleeper.pid], key="cpu-slot-0")
    with allocator(tmp_path, pool=("0", "1")).acquire(1, "t::new") as allocation:
        assert allocation.ids == ("1",)
        assert [o.orphan.pid for o in allocation.orphans] == [sleeper.pid]
        assert allocation.orphans[0].outcome == "still running (on devices not granted)"
    assert sleeper.poll() is None  # wait, not kill: nothing was ended


def test_kill_ends_the_orphan_s_group_and_records_it(
    tmp_path: Path, sleepers: Callable[..., subprocess.Popen[bytes]]
) -> None:
    from pytest_lossless.core.clock import SYSTEM_CLOCK

    leader = sleepers(
        sys.executable,
        "-c",
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "os.fork(); time.sleep(60)",
    )
    time.sleep(0.3)
    plant(tmp_path, [leader.pid])
    chosen = allocator(tmp_path, orphans="kill", orphan_grace=0.3, clock=SYSTEM_CLOCK)
    with chosen.acquire(1, "t::new") as allocation:
        entries = {o.orphan.pid: o for o in allocation.orphans}
    assert leader.wait(5) == -signal.SIGKILL  # it ignored SIGTERM: killed after the grace
    assert leader.pid in entries
    child = next(pid for pid in entries if pid != leader.pid)
    assert entries[child].orphan.found_by == f"not listed: in its session {leader.pid}"
    for entry in entries.values():
        assert entry.action == "ended"
        assert [s.signal for s in entry.signals][:2] == ["SIGTERM", "SIGKILL"]
        assert entry.outcome is not None
        assert entry.outcome.startswith("ended after SIGKILL, 0.3 s after SIGTERM")
    assert not alive(child)


def test_an_unlisted_process_of_a_listed_session_blocks_too(
    tmp_path: Path, sleepers: Callable[..., subprocess.Popen[bytes]]
) -> None:
    from pytest_lossless.errors import AllocationTimeout

    leader = sleepers(sys.executable, "-c", "import os, time; os.fork(); time.sleep(60)")
    time.sleep(0.3)
    plant(tmp_path, [leader.pid])
    os.kill(leader.pid, signal.SIGKILL)  # the listed one goes; its child stays unlisted
    leader.wait()
    with pytest.raises(AllocationTimeout, match=f"not listed: in its session {leader.pid}"):
        allocator(tmp_path).acquire(1, "t::new")


def test_a_reused_pid_a_dead_pid_and_another_host_are_not_believed(
    tmp_path: Path, sleepers: Callable[..., subprocess.Popen[bytes]]
) -> None:
    sleeper = sleepers()
    path = plant(tmp_path, [sleeper.pid])
    record = json.loads(path.read_text())
    record["processes"][0]["start"] += 1  # the same pid, another process: not this one
    record["processes"].append({"pid": gone_pid(), "start": 1})
    path.write_text(json.dumps(record))
    with allocator(tmp_path).acquire(1, "t::a") as allocation:
        assert allocation.orphans == ()
    plant(tmp_path, [sleeper.pid], host="another-host")
    with allocator(tmp_path).acquire(1, "t::b") as allocation:
        assert allocation.orphans == ()


@needs_root
def test_a_co_tenant_cannot_block_a_device_by_naming_someone_else_s_process(
    tmp_path: Path, sleepers: Callable[..., subprocess.Popen[bytes]]
) -> None:
    from pytest_lossless.devices.locks import LockDir
    from pytest_lossless.devices.runs import read_runs
    from pytest_lossless.errors import AllocationTimeout

    mine = sleepers()  # root's process, named in the co-tenant's record
    plant(tmp_path, [mine.pid], uid=OTHER_UID)
    with allocator(tmp_path).acquire(1, "t::a") as allocation:
        assert allocation.orphans == ()
    # Its own process it can name: that blocks (as holding the lock would), never forever.
    theirs = sleepers("sleep", "60", user=OTHER_UID)
    plant(tmp_path, [theirs.pid], uid=OTHER_UID, command="\x1b[2Jrm -rf ~")
    with pytest.raises(AllocationTimeout) as info:
        allocator(tmp_path).acquire(1, "t::b")
    assert f"pid {theirs.pid} (" in str(info.value)
    assert "\x1b" not in str(info.value)  # what a record says is shown, never obeyed
    # A file that says it is another account's, and is not, is named and ignored.
    plant(tmp_path, [theirs.pid], uid=OTHER_UID, name_uid=OTHER_UID + 1)
    _, problems = read_runs(LockDir(tmp_path), ["cpu-slot-0"])
    assert any(f"belongs to uid {OTHER_UID}, not uid {OTHER_UID + 1}" in p for p in problems)


@needs_root
def test_a_runs_record_planted_under_my_name_makes_its_device_unusable(tmp_path: Path) -> None:
    from pytest_lossless.errors import AllocationError

    plant(tmp_path, [], uid=OTHER_UID, name_uid=os.geteuid())
    with pytest.raises(AllocationError, match="planted under your name") as info:
        allocator(tmp_path).acquire(1, "t::a")
    assert f"cpu-slot-0.runs.{os.geteuid()}.json" in str(info.value)
    with allocator(tmp_path, pool=("0", "1")).acquire(1, "t::b") as allocation:
        assert allocation.ids == ("1",)


def test_a_fifo_or_garbage_runs_record_is_named_and_never_waited_on(tmp_path: Path) -> None:
    from pytest_lossless.devices.locks import LockDir
    from pytest_lossless.devices.runs import read_runs

    LockDir(tmp_path).ensure()
    os.mkfifo(tmp_path / f"cpu-slot-0.runs.{os.geteuid()}.json")
    (tmp_path / f"cpu-slot-1.runs.{os.geteuid()}.json").write_text("[" * 100000)
    _, problems = read_runs(LockDir(tmp_path), ["cpu-slot-0", "cpu-slot-1"])
    assert any("is a FIFO" in p for p in problems)
    assert any("nested deeper" in p for p in problems)
    with allocator(tmp_path, pool=("0", "1")).acquire(2, "t::a") as allocation:
        assert allocation.ids == ("0", "1")  # the FIFO is replaced by the real record


@pytest.mark.slow
def test_a_run_inherits_the_locks_and_is_listed_until_it_ends(tmp_path: Path) -> None:
    from pytest_lossless.run import Launcher

    locks = tmp_path / "locks"
    allocation = allocator(locks, pool=("0", "1")).acquire(2, "t::serve")
    launcher = Launcher(
        allocation=allocation, out_dir=tmp_path / "runs", run_timeout=30, knobs=(), grace=2
    )
    records = sorted(locks.glob("*.runs.*.json"))
    assert [p.name.split(".")[0] for p in records] == ["cpu-slot-0", "cpu-slot-1"]
    server = launcher.server([*SERVER, "--workers", "2"], ready="/health", workers_expected=2)
    workers = server.record["workers_at_ready"]
    wait_until("the workers are listed", lambda: len(listed(locks)) == 2 * 3)
    entries = {p["pid"]: p for p in json.loads(records[0].read_text())["processes"]}
    assert sorted(entries) == sorted([server.pid, *workers])
    assert entries[server.pid]["role"] == "main"
    assert entries[server.pid]["command"].endswith(
        "worker_server.py " + str(server.port) + " --workers 2"
    )
    assert {entries[w]["role"] for w in workers} == {"descendant"}
    held = {
        os.readlink(f"/proc/{server.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{server.pid}/fd")
    }
    assert {str(locks / "cpu-slot-0.lock"), str(locks / "cpu-slot-1.lock")} <= held
    allocation.release()  # ends the server first (the launcher's finalizer)
    assert not alive(server.pid)
    assert allocation.left_running == ()
    assert list(locks.glob("*.runs.*.json")) == []  # nothing left: the records go


def test_what_a_release_leaves_running_stays_listed_and_blocks_the_next_allocation(
    tmp_path: Path, sleepers: Callable[..., subprocess.Popen[bytes]]
) -> None:
    from pytest_lossless.core.clock import SYSTEM_CLOCK
    from pytest_lossless.errors import AllocationTimeout

    stuck = sleepers()
    allocation = allocator(tmp_path).acquire(1, "t::first")
    stuck_member = Member(stuck.pid, start_of(stuck.pid), None, None, None, argv=("stuck",))
    allocation.note_processes("command-01", [stuck_member])
    allocation.release()
    assert [p.pid for p in allocation.left_running] == [stuck.pid]
    with pytest.raises(AllocationTimeout, match="left running when its allocation was released"):
        allocator(tmp_path).acquire(1, "t::second")
    chosen = allocator(tmp_path, orphans="kill", orphan_grace=1.0, clock=SYSTEM_CLOCK)
    with chosen.acquire(1, "t::third") as third:
        (entry,) = third.orphans
    assert entry.orphan.holder == "released"
    assert entry.action == "ended"
    assert stuck.wait(5) == -signal.SIGTERM


def test_a_run_of_many_processes_keeps_its_record_readable(tmp_path: Path) -> None:
    from pytest_lossless.devices.locks import LockDir
    from pytest_lossless.devices.runs import RUNS_LIMIT, read_runs

    with allocator(tmp_path).acquire(1, "t::many") as allocation:
        many = [
            Member(10_000 + i, 1, None, None, None, comm="w", argv=("\u00e9\u4e2d" * 400,))
            for i in range(2000)
        ]
        allocation.note_processes("server-01", many)
        (path,) = tmp_path.glob("*.runs.*.json")
        assert path.stat().st_size <= RUNS_LIMIT
        found, problems = read_runs(LockDir(tmp_path), ["cpu-slot-0"])
        assert problems == []
        (record,) = found["cpu-slot-0"]
        assert 0 < len(record.processes) < 2000
        assert json.loads(path.read_text())["not_listed"] == 2000 - len(record.processes)
