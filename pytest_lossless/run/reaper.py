"""The session's reaper: a small process that ends what a session started when pytest dies
without finishing (SIGKILL, ``os._exit`` as pytest-timeout's thread method does, a crash).

A signal to pytest is handled in pytest (its runs are stopped, its receipts written); nothing
in pytest runs after SIGKILL or ``os._exit``. So a session that starts runs also starts, once,
this reaper: standard library only, in a session of its own (a Ctrl-C to the terminal's group
does not reach it), reading a pipe whose only writer is pytest (the write end is not
inherited by any run: Python's descriptors are close-on-exec). pytest tells it the session's
token (set in pytest's environment, so every run inherits it), the session folder and the
test running now; at a normal end pytest says ``done``. End of file without ``done`` means
pytest is gone: the reaper sends SIGTERM to the process group of every process that carries the
token (and to every process of the same session id, which a daemon that cleared its
environment keeps), SIGKILL after a grace, and writes ``INTERRUPTED.jsonl`` into the session
folder (which test ran, why, and what it ended). Then it exits.

Out of reach: a daemon that left the run's session *and* cleared its environment (the orphan
record of :mod:`pytest_lossless.devices` finds it by ancestry, and the next session ends or
waits for it), and a kill of the reaper itself (a cgroup kill of the whole job, which ends the
runs too). The reaper never signals pytest's own process group (a CI runner may share it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: The environment variable, in pytest's environment and so in every run's, naming the session.
TOKEN_ENV = "PYTEST_LOSSLESS_SESSION_TOKEN"
#: How long the runs get between SIGTERM and SIGKILL.
GRACE = 2.0
#: The file the reaper writes into the session folder: one JSON line. Not ``*.json``: every
#: other ``.json`` file of a session folder is a receipt to ``verify``, which says of a folder
#: without ``INDEX.json`` that its session was killed.
MARK = "INTERRUPTED.jsonl"


class Reaper:
    """pytest's side: start the reaper once, tell it what it needs, say ``done`` at the end."""

    def __init__(self, token: str) -> None:
        self.token = token
        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
            start_new_session=True,
        )
        self.send("token", token)
        self.send("pytest", f"{os.getpid()} {os.getpgid(0)} {os.getsid(0)}")

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def send(self, key: str, value: str) -> None:
        """One line to the reaper (``key value``); a reaper that is gone is not an error."""
        if self._proc is None or self._proc.stdin is None:
            return
        text = f"{key} {value}".replace("\n", " ").replace("\r", " ")
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.write(text.encode("utf-8", "replace") + b"\n")
            self._proc.stdin.flush()

    def done(self) -> None:
        """The session ended normally: the reaper exits without ending anything."""
        if self._proc is None:
            return
        self.send("done", "")
        with contextlib.suppress(OSError, ValueError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(2.0)
        self._proc = None


# ------------------------------------------------------------------ the reaper's own side


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, session id) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as handle:
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return "?"


def tagged(
    token: str, *, skip: set[int], protect: frozenset[int] = frozenset()
) -> dict[int, tuple[int, int]]:
    """Live processes (not zombies) carrying ``token``, or sharing a session (not one of
    ``protect``: pytest's own, a terminal's) with one that does: pid -> (pgid, session id)."""
    needle = f"{TOKEN_ENV}={token}".encode()
    stats: dict[int, tuple[str, int, int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in skip:
            found = _stat(int(name))
            if found is not None and found[0] not in ("Z", "X"):
                stats[int(name)] = found
    carrying = {pid for pid in stats if needle in _environ(pid).split(b"\0")}
    sessions = {stats[pid][3] for pid in carrying if stats[pid][3] not in protect | {0}}
    return {
        pid: (stat[2], stat[3])
        for pid, stat in stats.items()
        if pid in carrying or stat[3] in sessions
    }


def reap(
    token: str, *, protect: set[int], sessions: frozenset[int] = frozenset(), grace: float = GRACE
) -> list[dict[str, object]]:
    """End every process of the session: SIGTERM to each one's process group (its own pid where
    the group is ``protect``ed), SIGKILL to what is left after ``grace``. Returns what was
    found. ``sessions``: session ids never followed (pytest's own)."""
    skip = {os.getpid()}
    found = tagged(token, skip=skip, protect=sessions)
    ended = [
        {"pid": pid, "pgid": pgid, "comm": _comm(pid)} for pid, (pgid, _) in sorted(found.items())
    ]

    def send(sig: signal.Signals, targets: dict[int, tuple[int, int]]) -> None:
        groups = {pgid for pgid, _ in targets.values() if pgid not in protect and pgid > 1}
        for pgid in groups:
            with contextlib.suppress(OSError):
                os.killpg(pgid, sig)
        for pid, (pgid, _) in targets.items():
            if pgid in protect or pgid <= 1:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)

    send(signal.SIGTERM, found)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        found = tagged(token, skip=skip, protect=sessions)
        if not found:
            break
        time.sleep(0.05)
    if found:
        send(signal.SIGKILL, found)
    return ended


def mark(folder: Path, record: dict[str, object]) -> None:
    """Write ``INTERRUPTED.jsonl`` into the session folder (made if missing), atomically."""
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".{MARK}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(record, sort_keys=True) + "\n")
        os.replace(temporary, folder / MARK)


def main() -> int:
    """Read pytest's lines until ``done`` (exit) or end of file (pytest died: reap)."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_IGN)  # pytest's signals are pytest's to handle
    state: dict[str, str] = {}
    for raw in sys.stdin.buffer:
        key, _, value = raw.decode("utf-8", "replace").rstrip("\n").partition(" ")
        if key == "done":
            return 0
        state[key] = value
    token = state.get("token")
    if not token:
        return 0
    started = time.time()
    pid, pgid, sid = ([*state.get("pytest", "").split(), "0", "0", "0"])[:3]
    protect = {int(pgid), os.getpgid(0)}
    ended = reap(token, protect=protect, sessions=frozenset({int(sid), os.getsid(0)}))
    folder = state.get("folder")
    if folder:
        mark(
            Path(folder),
            {
                "state": "interrupted",
                "reason": (
                    f"pytest (pid {pid}) ended without finishing the session (SIGKILL, "
                    "os._exit or a crash): nothing of it wrote this session's index"
                ),
                "test": state.get("test") or None,
                "ended": ended,
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                "seconds": round(time.time() - started, 3),
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
