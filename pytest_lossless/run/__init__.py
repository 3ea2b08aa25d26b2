"""Commands and servers for model runs, with a lifecycle record written by code.

A :class:`Launcher` starts every command in its own session and process group, watches
the whole group (the direct child through ``os.wait4``, every descendant by sampling
``/proc``), ends it on timeout (SIGTERM to the group, a grace period, then SIGKILL, each
recorded as forced), and emits one raw record per run. :func:`lifecycle_verdict` derives
"clean or not, and why" from that raw record only, so a summary can never contradict it.

Linux only: descendants are found and measured through ``/proc``.
"""

from __future__ import annotations

import ctypes
import http.client
import json as jsonlib
import math
import os
import signal
import socket
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, TypeGuard

from ..core.clock import SYSTEM_CLOCK, Clock, utc_iso
from ..core.digests import sha256_file
from ..core.procfs import ProcStat, process_stat, read_cmdline, read_memory_kib, scan_proc
from ..errors import ArtifactError, ConfigError, RunError

#: Seconds between SIGTERM and SIGKILL when a run times out or a server is stopped.
DEFAULT_GRACE = 5.0
#: Seconds between two samples of ``/proc`` while a process group runs.
SAMPLE_INTERVAL = 0.05
#: Every this many samples, processes known not to be ours are read again (pid reuse).
FULL_SCAN_EVERY = 40
#: Response bodies larger than this are streamed to a file in the run's folder.
STREAM_TO_FILE_ABOVE = 1 << 20
#: How much of stdout/stderr a failure message shows.
TAIL_BYTES = 4000
TAIL_LINES = 25

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_CHUNK = 1 << 16


class AllocationLike(Protocol):
    """What the launcher needs from a device allocation (see ``devices.Allocation``)."""

    @property
    def env(self) -> Mapping[str, str]: ...

    def add_finalizer(self, fn: Callable[[], None]) -> None: ...


# ------------------------------------------------------------------ prctl


def _child_subreaper(on: bool | None) -> bool | None:
    """Read (``on=None``) or set this process's child-subreaper flag; None where unsupported.

    As a subreaper, orphaned descendants of our runs are re-parented to us instead of to
    init, so we can reap them and record their real exit status.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if on is None:
            value = ctypes.c_int(0)
            if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
                return None
            return bool(value.value)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            return None
        return on
    except (OSError, AttributeError):
        return None


def _describe_status(status: int) -> tuple[int | None, str | None, bool]:
    """A wait status as (exit code, signal name, core dumped)."""
    if os.WIFSIGNALED(status):
        return None, _signal_name(os.WTERMSIG(status)), os.WCOREDUMP(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None, False
    return None, None, False


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


# ------------------------------------------------------------------ one process group


@dataclass
class _Proc:
    """What we observed of one process: the raw material of a lifecycle record."""

    pid: int
    starttime: int
    role: str
    ppid: int
    pgrp: int
    comm: str
    argv: list[str]
    first_seen: float
    last_seen: float
    ppid_last: int = 0
    ended: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    core_dumped: bool = False
    observed: str = "alive"
    peak_rss_kib: int | None = None
    memory_source: str | None = None
    signals_received: list[dict[str, Any]] = field(default_factory=list)

    def note_memory(self, kib: int | None, source: str) -> None:
        if kib is not None and (self.peak_rss_kib is None or kib > self.peak_rss_kib):
            self.peak_rss_kib = kib
            self.memory_source = source

    def to_dict(self) -> dict[str, Any]:
        wall = None if self.ended is None else round(self.ended - self.first_seen, 6)
        return {
            "pid": self.pid,
            "role": self.role,
            "ppid": self.ppid,
            "ppid_last": self.ppid_last or self.ppid,
            "pgid": self.pgrp,
            "comm": self.comm,
            "argv": self.argv,
            "observed": self.observed,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "core_dumped": self.core_dumped,
            "forced": any(bool(s.get("forced")) for s in self.signals_received),
            "signals_received": list(self.signals_received),
            "started_seconds": round(self.first_seen, 6),
            "ended_seconds": None if self.ended is None else round(self.ended, 6),
            "wall_seconds": wall,
            "peak_rss_kib": self.peak_rss_kib,
            "peak_rss_source": self.memory_source,
        }


class _ProcessGroup:
    """One started process in its own session and group, and every descendant seen.

    The direct child is reaped by a waiter thread with ``os.wait4`` (exit status and
    ``ru_maxrss``); descendants are found by sampling ``/proc`` (same session or group,
    or a parent already known), their memory read from ``VmHWM``; a zombie's exit status
    is read from ``/proc/<pid>/stat``; orphans re-parented to us are reaped by us.
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None,
                 stdout_path: Path, stderr_path: Path, clock: Clock, interval: float) -> None:
        self._clock = clock
        self._interval = interval
        self._lock = threading.Lock()
        self._main_done = threading.Event()
        self._stop_sampling = threading.Event()
        self.signals: list[dict[str, Any]] = []
        self.procs: dict[int, _Proc] = {}
        self._gone: list[_Proc] = []
        self.leftovers: list[dict[str, Any]] = []
        self._me = os.getpid()
        token = env.get(RUN_TOKEN)
        self._token = f"{RUN_TOKEN}={token}".encode() if token else b""
        self._strangers: set[int] = set()
        self._samples = 0
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            self.t0 = clock.monotonic()
            self.started_at = utc_iso(clock.wall())
            self.popen = subprocess.Popen(
                list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=err, start_new_session=True, close_fds=True,
            )
        self.pid = self.popen.pid
        self.pgid = self.pid
        stat = process_stat(self.pid)
        self.main = _Proc(self.pid, stat.starttime if stat else 0, "main", self._me, self.pgid,
                          stat.comm if stat else Path(argv[0]).name[:15], list(argv)[:16], 0.0, 0.0)
        self.procs[self.pid] = self.main
        self._waiter = threading.Thread(target=self._wait_main, name=f"lossless-wait-{self.pid}",
                                        daemon=True)
        self._sampler = threading.Thread(target=self._sample_loop,
                                         name=f"lossless-sample-{self.pid}", daemon=True)
        self._waiter.start()
        self._sampler.start()

    # -- time
    def now(self) -> float:
        return self._clock.monotonic() - self.t0

    @property
    def main_done(self) -> bool:
        return self._main_done.is_set()

    def wait_main(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the direct child to be reaped."""
        deadline = self._clock.monotonic() + max(0.0, seconds)
        while not self._main_done.is_set():
            left = deadline - self._clock.monotonic()
            if left <= 0:
                break
            self._main_done.wait(min(left, 0.05))
        return self._main_done.is_set()

    # -- the direct child
    def _wait_main(self) -> None:
        try:
            _, status, usage = os.wait4(self.pid, 0)
        except ChildProcessError:
            with self._lock:
                self.main.ended = self.now()
                self.main.observed = "unknown"
            self._main_done.set()
            return
        ended = self.now()
        code, sig, core = _describe_status(status)
        with self._lock:
            self.main.ended = ended
            self.main.exit_code, self.main.signal, self.main.core_dumped = code, sig, core
            self.main.observed = "reaped"
            self.main.note_memory(int(usage.ru_maxrss), "wait4 ru_maxrss")
        self.popen.returncode = os.waitstatus_to_exitcode(status)
        self._main_done.set()

    # -- descendants
    def _sample_loop(self) -> None:
        while not self._stop_sampling.is_set():
            self.sample()
            self._stop_sampling.wait(self._interval)

    def sample(self) -> None:
        """One pass over ``/proc``: find members, measure them, note exits."""
        self._samples += 1
        if self._samples % FULL_SCAN_EVERY == 0:
            self._strangers.clear()
        # A process seen outside our group with another parent cannot become our
        # descendant, so it is not read again (until the next full scan).
        stats = scan_proc(self._strangers)
        now = self.now()
        with self._lock:
            known = {pid for pid, p in self.procs.items() if p.ended is None}
            children: dict[int, list[int]] = {}
            for entry in stats.values():
                children.setdefault(entry.ppid, []).append(entry.pid)
            members = {pid for pid, st in stats.items()
                       if st.session == self.pgid or st.pgrp == self.pgid}
            # A known pid stays ours only while it is the same process (same start time).
            members |= {pid for pid in known if pid in stats and self.procs[pid].starttime
                        in (0, stats[pid].starttime)}
            # Orphans handed to us (the subreaper) are ours only if they carry this run's
            # token: a double-forked daemon in a new session is still accounted for.
            members |= {pid for pid, st in stats.items()
                        if st.ppid == self._me and pid != self.pid and pid not in members
                        and self._carries_token(pid)}
            todo = list(members | ({self.pid} if not self._main_done.is_set() else set()))
            while todo:
                for child in children.get(todo.pop(), []):
                    if child not in members:
                        members.add(child)
                        todo.append(child)
            for pid in sorted(members):
                st = stats.get(pid)
                if st is None:
                    continue
                if pid != self.pid and self.main.starttime and st.starttime < self.main.starttime:
                    continue  # started before this run: it cannot be one of ours
                proc = self.procs.get(pid)
                if proc is not None and proc.starttime and st.starttime != proc.starttime:
                    self._vanish(proc, now)  # pid reused: the one we knew is gone
                    proc = None
                if proc is None:
                    if pid == self.pid:
                        continue
                    proc = _Proc(pid, st.starttime, "descendant", st.ppid, st.pgrp, st.comm,
                                 read_cmdline(pid), now, now)
                    self.procs[pid] = proc
                if proc.ended is not None:
                    continue
                proc.last_seen = now
                proc.comm, proc.pgrp = st.comm, st.pgrp
                if st.ppid != 0:
                    proc.ppid_last = st.ppid
                if st.state == "Z":
                    self._note_zombie(proc, st, now)
                else:
                    hwm, rss = read_memory_kib(pid)
                    proc.note_memory(hwm, "sampled /proc VmHWM")
                    if hwm is None:
                        proc.note_memory(rss, "sampled /proc VmRSS")
            for pid in known:
                proc = self.procs[pid]
                if pid not in members and proc.ended is None and pid != self.pid:
                    self._vanish(proc, now)
            self._strangers.update(pid for pid in stats if pid not in members)

    def _carries_token(self, pid: int) -> bool:
        if not self._token:
            return False
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        return self._token in environ.split(b"\0")

    def _note_zombie(self, proc: _Proc, st: ProcStat, now: float) -> None:
        if proc is self.main:
            return  # the waiter thread reaps it
        if st.ppid == self._me:
            try:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == proc.pid:
                proc.exit_code, proc.signal, proc.core_dumped = _describe_status(status)
                proc.observed = "adopted"
                proc.ended = now
                proc.note_memory(int(usage.ru_maxrss), "wait4 ru_maxrss")
                return
        if proc.observed == "alive" and st.exit_status is not None:
            proc.exit_code, proc.signal, proc.core_dumped = _describe_status(st.exit_status)
            proc.observed = "zombie"
            proc.ended = now

    def _vanish(self, proc: _Proc, now: float) -> None:
        if proc.observed == "alive":
            proc.observed = "disappeared"
        if proc.ended is None:
            proc.ended = now
        if self.procs.get(proc.pid) is proc and proc is not self.main:
            self._gone.append(proc)
            del self.procs[proc.pid]

    def alive(self, *, group_only: bool = False) -> list[_Proc]:
        with self._lock:
            procs = [p for p in self.procs.values() if p.ended is None]
        if group_only:
            procs = [p for p in procs if p.pgrp == self.pgid]
        return procs

    # -- signals
    def send(self, sig: signal.Signals, *, forced: bool, reason: str, group: bool) -> None:
        """Signal the group (or the main process alone) and record it on each receiver."""
        self.sample()
        at = self.now()
        receivers = self.alive(group_only=True) if group else (
            [self.main] if not self.main_done else [])
        delivered = bool(receivers)
        if delivered:
            try:
                if group:
                    os.killpg(self.pgid, sig)
                else:
                    os.kill(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                delivered = False
        entry = {"signal": sig.name, "target": "group" if group else "process",
                 "pid": self.pid, "at_seconds": round(at, 6), "forced": forced,
                 "reason": reason, "delivered": delivered,
                 "receivers": [p.pid for p in receivers] if delivered else []}
        with self._lock:
            self.signals.append(entry)
            if delivered:
                for proc in receivers:
                    proc.signals_received.append({k: entry[k] for k in
                                                  ("signal", "forced", "reason", "at_seconds")})

    def _kill_one(self, proc: _Proc, reason: str) -> None:
        at = self.now()
        try:
            os.kill(proc.pid, signal.SIGKILL)
            delivered = True
        except (ProcessLookupError, PermissionError):
            delivered = False
        entry = {"signal": "SIGKILL", "target": "process", "pid": proc.pid,
                 "at_seconds": round(at, 6), "forced": True, "reason": reason,
                 "delivered": delivered, "receivers": [proc.pid] if delivered else []}
        with self._lock:
            self.signals.append(entry)
            if delivered:
                proc.signals_received.append({k: entry[k] for k in
                                              ("signal", "forced", "reason", "at_seconds")})

    def settle(self, seconds: float) -> bool:
        """Sample quickly until no member is alive or ``seconds`` passed; True when none is."""
        deadline = self._clock.monotonic() + seconds
        while True:
            self.sample()
            if self.main_done and not self.alive():
                return True
            if self._clock.monotonic() >= deadline:
                return False
            self._clock.sleep(0.01)

    def finish(self, *, reason: str) -> None:
        """End whatever is left (forced, with ``reason``), reap, and account for leftovers."""
        self.sample()
        if self.alive(group_only=True):
            self.send(signal.SIGKILL, forced=True, reason=reason, group=True)
        self.wait_main(5.0)
        self.settle(1.0)
        for proc in self.alive():
            if proc.pgrp != self.pgid:
                self._kill_one(proc, "escaped the process group; killed on its own")
                with self._lock:
                    self.leftovers.append({"pid": proc.pid, "comm": proc.comm,
                                           "state": "alive outside the process group",
                                           "action": "SIGKILL to the process"})
        self.settle(2.0)
        stats = scan_proc()
        for proc in self.alive():
            st = stats.get(proc.pid)
            state = "zombie, not reaped by its parent" if st and st.state == "Z" else (
                "alive after SIGKILL")
            with self._lock:
                self.leftovers.append({"pid": proc.pid, "comm": proc.comm, "state": state,
                                       "action": "none possible"})
        self._stop_sampling.set()
        self._sampler.join(timeout=5.0)
        self._waiter.join(timeout=1.0)

    def processes(self) -> list[dict[str, Any]]:
        with self._lock:
            everyone = [self.main, *self._gone,
                        *(p for p in self.procs.values() if p is not self.main)]
        everyone.sort(key=lambda p: (p.role != "main", p.first_seen, p.pid))
        return [p.to_dict() for p in everyone]


# ------------------------------------------------------------------ helpers


#: Set in every child's environment to a token of its run, so that processes which leave the
#: run's session and process group (daemons) can still be told apart as its own.
RUN_TOKEN = "PYTEST_LOSSLESS_RUN"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, *, max_bytes: int = TAIL_BYTES, max_lines: int = TAIL_LINES) -> str:
    """The last lines of a log file, for failure messages."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    lines = data.decode(errors="replace").splitlines()[-max_lines:]
    return "\n".join(lines)


def hash_inputs(inputs: Mapping[str, str | os.PathLike[str]]) -> dict[str, dict[str, Any]]:
    """SHA-256 and size of each declared input file; a missing one is an error."""
    hashed: dict[str, dict[str, Any]] = {}
    for name, raw in inputs.items():
        path = Path(raw).resolve()
        if not path.is_file():
            raise ArtifactError(path, f"declared input {name!r} does not exist or is not a file")
        hashed[name] = {"path": str(path), "bytes": path.stat().st_size,
                        "sha256": sha256_file(path)}
    return hashed


def _check_argv(argv: object, what: str) -> list[str]:
    if isinstance(argv, (str, bytes)):
        raise ConfigError(what, argv, "pass a list of arguments such as ['python', 'run.py'], "
                          "never a shell string (no shell is used)")
    if not isinstance(argv, Sequence) or not argv:
        raise ConfigError(what, argv, "expected a non-empty list of arguments")
    out: list[str] = []
    for arg in argv:
        if not isinstance(arg, (str, os.PathLike)):
            raise ConfigError(what, argv, f"argument {arg!r} is not a string or path")
        out.append(os.fspath(arg))
    return out


def _seconds(value: object, what: str) -> float:
    """A time limit given by a test: a finite number of seconds above zero."""
    try:
        seconds = float(value)  # type: ignore[arg-type]  # checked by the except below
    except (TypeError, ValueError):
        raise ConfigError(what, value, "expected a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(what, value, "must be a finite number of seconds above 0")
    return seconds


def _fill(text: str, values: Mapping[str, str]) -> str:
    # Plain replacement, not str.format: JSON or other braces in arguments stay untouched.
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def _format_status(proc: Mapping[str, Any]) -> str:
    if proc.get("signal"):
        return f"was killed by signal {proc['signal']}"
    return f"exited with code {proc.get('exit_code')}"


# ------------------------------------------------------------------ the lifecycle verdict


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


def lifecycle_verdict(record: Mapping[str, Any]) -> dict[str, Any]:
    """Clean or not, and why, derived from a raw run record alone (pure; never trusts a
    verdict stored in the record).

    Clean iff at least one process was recorded, no run error or timeout, no leftovers,
    no process forced (no forced signal received), and every process ended well: exit
    code 0; or SIGTERM within the grace period after the non-forced stop SIGTERM we sent
    (a server using SIGTERM's default action, or a worker it forwarded the stop to); or,
    for a process whose exit status could not be observed because its own parent reaped
    it ("disappeared"), the parent that last held it (``ppid_last``) is in the record and
    itself ended well (it reaped the process and is accountable for it).
    """
    reasons: list[str] = []
    if not isinstance(record, Mapping):
        reasons.append("the run record is not a mapping")
        return _verdict(reasons, {"processes": 0, "forced": 0, "failed": 0, "leftovers": 0,
                                  "sigterm_stops": 0, "unobserved": 0, "exited_zero": 0})
    raw_procs = record.get("processes")
    procs = [p for p in raw_procs if isinstance(p, Mapping)] if isinstance(raw_procs, list) else []
    if isinstance(raw_procs, list) and len(procs) != len(raw_procs):
        reasons.append("a process entry is not a mapping")
    if not procs:
        reasons.append("no process was recorded: nothing ran, or the record is incomplete")
    if record.get("error"):
        reasons.append(f"the run failed: {record.get('error')}")
    if record.get("timed_out"):
        reasons.append(f"timed out after {record.get('timeout_seconds')} s")

    stop = record.get("stop")
    stop_sigterms = [s for s in _maps(record.get("signals"))
                     if s.get("signal") == "SIGTERM" and not s.get("forced")
                     and s.get("delivered")]
    grace = stop.get("grace_seconds") if isinstance(stop, Mapping) else None
    if record.get("kind") == "server" and "error" not in record:
        if not isinstance(stop, Mapping):
            reasons.append("the server was never stopped")
        elif stop.get("main_alive") is not True:
            reasons.append("the server had already exited before it was stopped")

    by_pid: dict[int, int] = {}
    for index, proc in enumerate(procs):
        if _is_int(proc.get("pid")):
            by_pid.setdefault(proc["pid"], index)

    def label(proc: Mapping[str, Any]) -> str:
        return f"{proc.get('role', 'process')} pid {proc.get('pid')} ({proc.get('comm', '?')})"

    def own(proc: Mapping[str, Any]) -> tuple[str, str | None]:
        """('ok'|'sigterm'|'unobserved'|'bad', problem)."""
        forced = [s for s in _maps(proc.get("signals_received")) if s.get("forced")]
        if proc.get("forced") is True or forced:
            names = ", ".join(f"{s.get('signal')} ({s.get('reason')})" for s in forced)
            return "bad", f"{label(proc)} was forced: {names or 'marked forced'}"
        observed = proc.get("observed")
        if observed == "alive":
            return "bad", f"{label(proc)} was still running when the record was closed"
        sig, code = proc.get("signal"), proc.get("exit_code")
        if sig:
            ended = proc.get("ended_seconds")
            if sig == "SIGTERM" and isinstance(grace, (int, float)) and isinstance(
                    ended, (int, float)) and any(
                    isinstance(s.get("at_seconds"), (int, float))
                    and s["at_seconds"] <= ended <= s["at_seconds"] + grace
                    for s in stop_sigterms):
                return "sigterm", None
            return "exit", f"{label(proc)} was killed by signal {sig}"
        if _is_int(code):
            if code == 0:
                return "ok", None
            return "exit", f"{label(proc)} exited with code {code}"
        if observed == "disappeared":
            return "unobserved", None
        return "bad", f"{label(proc)} has no recorded exit status"

    status: dict[int, tuple[str, str | None]] = {i: own(p) for i, p in enumerate(procs)}

    def vouched(index: int, seen: frozenset[int]) -> bool:
        ppid = procs[index].get("ppid_last", procs[index].get("ppid"))
        pindex = by_pid.get(ppid) if _is_int(ppid) else None
        if pindex is None or pindex in seen:
            return False
        kind = status[pindex][0]
        return kind in ("ok", "sigterm") or (
            kind == "unobserved" and vouched(pindex, seen | {index}))

    failed = forced_n = sigterm_n = unobserved_n = zero_n = 0
    handled: list[str] = []
    for index, proc in enumerate(procs):
        kind, problem = status[index]
        if kind == "exit":
            # A child that failed while a recorded parent, which ended cleanly, was there to
            # reap it is that parent's business. Whether we saw its exit status or not depends
            # only on how fast the parent reaped it; the verdict must not.
            if proc.get("role") == "descendant" and vouched(index, frozenset({index})):
                ppid = proc.get("ppid_last", proc.get("ppid"))
                handled.append(f"{problem}, handled by its parent pid {ppid}")
                continue
            kind = "bad"
        if kind == "unobserved":
            if vouched(index, frozenset({index})):
                unobserved_n += 1
                continue
            kind, problem = "bad", (
                f"{label(proc)} disappeared without an observable exit status and no parent "
                "in the record that ended cleanly accounts for it")
        if kind == "sigterm":
            sigterm_n += 1
        if kind == "ok":
            zero_n += 1
        if kind == "bad":
            reasons.append(problem or f"{label(proc)} did not end cleanly")
            if proc.get("forced") is True or any(
                    s.get("forced") for s in _maps(proc.get("signals_received"))):
                forced_n += 1
            else:
                failed += 1

    recorded = set(by_pid)
    for entry in _maps(record.get("signals")):
        if entry.get("forced") and entry.get("delivered"):
            strangers = [p for p in entry.get("receivers") or [] if p not in recorded]
            if strangers:
                reasons.append(f"forced {entry.get('signal')} ({entry.get('reason')}) reached "
                               f"pid {', '.join(map(str, strangers))}, which the record does "
                               "not account for")
                forced_n += len(strangers)

    raw_left = record.get("leftovers") or []
    leftovers = raw_left if isinstance(raw_left, list) else [raw_left]
    for left in leftovers:
        if isinstance(left, Mapping):
            reasons.append(f"leftover pid {left.get('pid')} ({left.get('comm', '?')}): "
                           f"{left.get('state', '?')}; {left.get('action', '?')}")
        else:
            reasons.append(f"leftover: {left!r}")
    expected = record.get("workers_expected")
    if _is_int(expected):
        workers = sum(1 for p in procs if p.get("role") == "descendant")
        if workers < expected:
            reasons.append(f"{expected} workers were expected but {workers} were observed")
    counts = {"processes": len(procs), "forced": forced_n, "failed": failed,
              "leftovers": len(leftovers), "sigterm_stops": sigterm_n,
              "unobserved": unobserved_n, "exited_zero": zero_n, "handled": len(handled)}
    return _verdict(reasons, counts, handled)


def _maps(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _verdict(reasons: list[str], counts: dict[str, int],
             handled: Sequence[str] = ()) -> dict[str, Any]:
    clean = not reasons
    tally = (f"{_count(counts['processes'], 'process')}: {counts['forced']} forced, "
             f"{counts['failed']} failed, {_count(counts['leftovers'], 'leftover')}")
    if clean:
        parts = [f"{counts['exited_zero']} exited 0"]
        if counts["sigterm_stops"]:
            parts.append(f"{counts['sigterm_stops']} ended by our stop SIGTERM within the grace")
        if counts["unobserved"]:
            parts.append(f"{counts['unobserved']} reaped by their own parent "
                         "(exit status not observable)")
        parts += list(handled)
        summary = f"clean ({tally}): " + ", ".join(parts)
    else:
        summary = f"not clean ({tally}): " + "; ".join(reasons)
    return {"clean": clean, "reasons": reasons, "summary": summary, "counts": counts}


# ------------------------------------------------------------------ results


class RunResult(Mapping[str, Path]):
    """One finished command: its declared outputs by name, exit status and raw record."""

    def __init__(self, record: dict[str, Any], outputs: dict[str, Path], returncode: int,
                 stdout_path: Path, stderr_path: Path) -> None:
        self.record = record
        self.outputs = outputs
        self.returncode = returncode
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path

    @property
    def measured_seconds(self) -> float:
        """Wall time of the main process, from spawn to reaping."""
        return float(self.record["wall_seconds"])

    @property
    def out_dir(self) -> Path:
        return Path(self.record["out_dir"])

    @property
    def lifecycle(self) -> dict[str, Any]:
        return lifecycle_verdict(self.record)

    def __getitem__(self, name: str) -> Path:
        try:
            return self.outputs[name]
        except KeyError:
            raise KeyError(f"{name!r} is not a declared output of this run; declared: "
                           f"{sorted(self.record.get('outputs', {}))}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def __repr__(self) -> str:
        return (f"RunResult(returncode={self.returncode}, seconds={self.measured_seconds:.3f}, "
                f"outputs={sorted(self.outputs)})")


@dataclass
class Response:
    """One timed HTTP response; large bodies live in ``body_path`` instead of ``body``."""

    status: int
    headers: dict[str, str]
    body: bytes | None
    body_path: Path | None
    seconds: float
    warmup: bool = False

    def content(self) -> bytes:
        if self.body is not None:
            return self.body
        assert self.body_path is not None
        return self.body_path.read_bytes()

    def text(self) -> str:
        return self.content().decode(errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content())


# ------------------------------------------------------------------ the launcher


class Launcher:
    """Starts the commands and servers of one test and keeps a raw record of each.

    ``on_record`` receives every finished record (commands when they end, servers when
    stopped); ``close()`` ends whatever is still running, and is registered on the
    allocation so device locks are released only after every process is gone.
    """

    def __init__(self, *, allocation: AllocationLike | None, out_dir: Path, run_timeout: float,
                 knobs: Sequence[str], clock: Clock = SYSTEM_CLOCK,
                 on_record: Callable[[dict[str, Any]], None] | None = None,
                 grace: float = DEFAULT_GRACE, sample_interval: float = SAMPLE_INTERVAL,
                 adopt_orphans: bool = True) -> None:
        self.allocation = allocation
        self.out_dir = Path(out_dir)
        self.run_timeout = float(run_timeout)
        self.knobs = tuple(knobs)
        self.clock = clock
        self.on_record = on_record
        self.grace = float(grace)
        self.sample_interval = float(sample_interval)
        self.adopt_orphans = adopt_orphans
        self.records: list[dict[str, Any]] = []
        self._servers: list[Server] = []
        self._groups: list[_ProcessGroup] = []
        self._count = 0
        self._subreaper_was: bool | None = None
        self._closed = False
        if allocation is not None:
            allocation.add_finalizer(self.close)

    # -- shared by commands and servers
    def _prepare(self, kind: str, argv: object, env: Mapping[str, str | None] | None,
                 cwd: str | os.PathLike[str] | None, port: int | None,
                 inputs: Mapping[str, str | os.PathLike[str]] | None,
                 ) -> tuple[dict[str, Any], list[str], dict[str, str], Path | None, Path]:
        if self._closed:
            raise RunError("model_run: this launcher is closed (the test is tearing down)")
        what = "model_run.server argv" if kind == "server" else "model_run argv"
        args = _check_argv(argv, what)
        self._count += 1
        name = f"{kind}-{self._count:02d}"
        run_dir = self.out_dir / name
        out = run_dir / "out"
        out.mkdir(parents=True, exist_ok=True)
        values = {"out": str(out)}
        if port is not None:
            values["port"] = str(port)
        elif any("{port}" in a for a in args) or any(
                "{port}" in str(v) for v in (env or {}).values() if v is not None):
            port = free_port()
            values["port"] = str(port)
        args = [_fill(a, values) for a in args]
        child_env = dict(os.environ)
        alloc_env = dict(self.allocation.env) if self.allocation is not None else {}
        child_env.update(alloc_env)
        child_env[RUN_TOKEN] = f"{name}-{uuid.uuid4().hex}"
        overrides = dict(env or {})
        for key, value in overrides.items():
            if value is None:
                child_env.pop(key, None)
            else:
                child_env[key] = _fill(str(value), values)
        run_cwd = Path(_fill(os.fspath(cwd), values)) if cwd is not None else None
        record: dict[str, Any] = {
            "kind": kind,
            "name": name,
            "argv": args,
            "cwd": str(run_cwd) if run_cwd is not None else os.getcwd(),
            "out_dir": str(out),
            "port": port,
            "env": {
                "allocation": alloc_env,
                "overrides": {k: (None if v is None else child_env.get(k))
                              for k, v in overrides.items()},
                "knobs": {k: child_env[k] for k in self.knobs if k in child_env},
                "knobs_unset": [k for k in self.knobs if k not in child_env],
            },
            "inputs": hash_inputs(inputs or {}),
            "orphans_adopted": False,
            "stdout_path": str(run_dir / "stdout.log"),
            "stderr_path": str(run_dir / "stderr.log"),
        }
        if self.adopt_orphans and self._subreaper_was is None:
            previous = _child_subreaper(None)
            if previous is not None and _child_subreaper(True):
                self._subreaper_was = previous
        record["orphans_adopted"] = bool(_child_subreaper(None))
        return record, args, child_env, run_cwd, run_dir

    def _spawn(self, record: dict[str, Any], args: list[str], env: dict[str, str],
               cwd: Path | None, run_dir: Path) -> _ProcessGroup:
        try:
            group = _ProcessGroup(args, env=env, cwd=cwd, stdout_path=run_dir / "stdout.log",
                                  stderr_path=run_dir / "stderr.log", clock=self.clock,
                                  interval=self.sample_interval)
        except OSError as exc:
            record.update({"started_at": utc_iso(self.clock.wall()), "processes": [],
                           "signals": [], "leftovers": [],
                           "error": f"could not start {args[0]!r}: {exc.strerror or exc}"})
            self._emit(record)
            raise RunError(f"model_run: could not start {args!r}: {exc.strerror or exc}. "
                           "Check that the program exists and is executable (argv[0] is "
                           f"looked up on PATH; cwd={cwd})", argv=args) from None
        self._groups.append(group)
        record["started_at"] = group.started_at
        record["pid"] = group.pid
        return group

    def _emit(self, record: dict[str, Any]) -> None:
        record["lifecycle"] = lifecycle_verdict(record)
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)

    @staticmethod
    def _close_record(record: dict[str, Any], group: _ProcessGroup) -> None:
        record["processes"] = group.processes()
        record["signals"] = list(group.signals)
        record["leftovers"] = list(group.leftovers)
        record["ended_at"] = utc_iso(group._clock.wall())

    # -- commands
    def __call__(self, argv: Sequence[str | os.PathLike[str]], *,
                 outputs: Mapping[str, str | os.PathLike[str]] | None = None,
                 timeout: float | None = None, env: Mapping[str, str | None] | None = None,
                 cwd: str | os.PathLike[str] | None = None, check: bool = True,
                 inputs: Mapping[str, str | os.PathLike[str]] | None = None,
                 grace: float | None = None) -> RunResult:
        """Run one command to completion; see the module docstring for what is recorded.

        ``outputs`` maps names to paths (``{out}`` is this run's own folder; relative paths
        are taken inside it); each must exist and be non-empty. ``inputs`` names files the
        run reads, hashed into the record before it starts. ``env`` values of None unset.
        ``grace`` (default: the launcher's) is the wait between SIGTERM and SIGKILL on timeout.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        limit = self.run_timeout if timeout is None else _seconds(timeout, "timeout")
        wait = self.grace if grace is None else float(grace)
        record, args, child_env, cwd_path, run_dir = self._prepare("command", argv, env, cwd,
                                                                   None, inputs)
        record["timeout_seconds"] = limit
        record["grace_seconds"] = wait
        out = Path(record["out_dir"])
        group = self._spawn(record, args, child_env, cwd_path, run_dir)
        finished = group.wait_main(limit)
        record["timed_out"] = not finished
        if not finished:
            group.send(signal.SIGTERM, forced=True, reason=f"timeout after {limit:g} s",
                       group=True)
            group.settle(wait)
            group.finish(reason=f"grace of {wait:g} s expired after the timeout")
        else:
            # Processes still running after the main one exited were left behind.
            group.settle(min(wait, 0.5))
            group.finish(reason="left running after the main process exited")
        self._groups.remove(group)
        self._close_record(record, group)
        main = record["processes"][0]
        record["wall_seconds"] = main["wall_seconds"]
        record["exit_code"], record["signal"] = main["exit_code"], main["signal"]
        declared, problems = self._collect_outputs(outputs or {}, out, record)
        self._emit(record)
        returncode = group.popen.returncode if group.popen.returncode is not None else -1
        result = RunResult(record, declared, returncode, run_dir / "stdout.log",
                           run_dir / "stderr.log")
        if check:
            if record["timed_out"]:
                killed = any(x["signal"] == "SIGKILL" for x in record["signals"])
                then = f", then SIGKILL after {wait:g} s" if killed else ""
                raise RunError(self._failure(record, f"timed out after {limit:g} s; sent SIGTERM "
                                             f"to its process group{then}"), record=record)
            if main["signal"] or main["exit_code"] != 0:
                raise RunError(self._failure(record, _format_status(main)), record=record)
            if problems:
                raise RunError(self._failure(record, "; ".join(problems)), record=record)
            lifecycle = lifecycle_verdict(record)
            if not lifecycle["clean"]:
                raise RunError(self._failure(record, "exited 0, but its lifecycle was not "
                                             f"clean: {lifecycle['summary']}"), record=record)
        return result

    def _collect_outputs(self, outputs: Mapping[str, str | os.PathLike[str]], out: Path,
                         record: dict[str, Any]) -> tuple[dict[str, Path], list[str]]:
        declared: dict[str, Path] = {}
        problems: list[str] = []
        entries: dict[str, dict[str, Any]] = {}
        for name, template in outputs.items():
            path = Path(_fill(os.fspath(template), {"out": str(out)}))
            if not path.is_absolute():
                path = out / path
            entry: dict[str, Any] = {"path": str(path)}
            if not path.is_file():
                entry["problem"] = "missing"
                problems.append(f"declared output {name!r} was not written: {path}")
            elif path.stat().st_size == 0:
                entry["problem"] = "empty"
                problems.append(f"declared output {name!r} is empty: {path}")
            else:
                entry["bytes"] = path.stat().st_size
                entry["sha256"] = sha256_file(path)
                declared[name] = path
            entries[name] = entry
        record["outputs"] = entries
        return declared, problems

    @staticmethod
    def _failure(record: Mapping[str, Any], what: str) -> str:
        stderr_path = Path(record["stderr_path"])
        text = tail(stderr_path)
        shown, other = ("stderr", "stdout") if text.strip() else ("stdout", "stderr")
        shown_path = Path(record[f"{shown}_path"])
        if shown == "stdout":  # an empty stderr: the stdout tail is the best clue
            text = tail(shown_path)
        quoted = "\n".join(f"    | {line}" for line in text.splitlines()) or "    (empty)"
        return (f"model_run: {record['name']} {what}\n  argv: {record['argv']}\n"
                f"  {shown} tail ({shown_path}):\n{quoted}\n"
                f"  {other}: {record[f'{other}_path']}\n  lifecycle: "
                f"{lifecycle_verdict(record)['summary']}")

    # -- servers
    def server(self, argv: Sequence[str | os.PathLike[str]], *, ready: str,
               startup_timeout: float | None = None,
               env: Mapping[str, str | None] | None = None,
               cwd: str | os.PathLike[str] | None = None, workers_expected: int | None = None,
               port: int | None = None,
               inputs: Mapping[str, str | os.PathLike[str]] | None = None) -> Server:
        """Start a server and wait until ``ready`` (a URL or a path, with ``{port}``) answers.

        Fails fast, with the stderr tail, when the server dies during startup or the
        readiness URL does not answer within ``startup_timeout``.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        port = free_port() if port is None else port
        record, args, child_env, cwd_path, run_dir = self._prepare("server", argv, env, cwd,
                                                                   port, inputs)
        url = _fill(ready, {"port": str(port), "out": record["out_dir"]})
        if url.startswith("/"):
            url = f"http://127.0.0.1:{port}{url}"
        if not url.startswith(("http://", "https://")):
            raise ConfigError("model_run.server(ready=...)", ready,
                              "give a URL such as http://127.0.0.1:{port}/health, or a path "
                              "such as /health")
        limit = (self.run_timeout if startup_timeout is None
                 else _seconds(startup_timeout, "startup_timeout"))
        record.update({"ready_url": url, "startup_timeout_seconds": limit,
                       "workers_expected": workers_expected, "startup_seconds": None,
                       "warmup_seconds": [], "measured_seconds": [], "requests": []})
        group = self._spawn(record, args, child_env, cwd_path, run_dir)
        server = Server(self, group, record, port, run_dir)
        self._servers.append(server)
        server._wait_ready(url, limit, workers_expected)
        return server

    def close(self) -> None:
        """End every process group still alive (servers get a graceful stop first)."""
        if self._closed:
            return
        self._closed = True
        first: BaseException | None = None
        # Every group is ended even when one stop fails: the device locks are released
        # right after this, and no process may outlive them.
        for server in list(self._servers):
            try:
                server.stop(reason="teardown")
            except BaseException as exc:
                first = first or exc
        for group in list(self._groups):
            try:
                group.send(signal.SIGTERM, forced=True, reason="teardown", group=True)
                group.wait_main(self.grace)
                group.settle(self.grace)
                group.finish(reason="teardown")
            except BaseException as exc:
                first = first or exc
            finally:
                if group in self._groups:
                    self._groups.remove(group)
        if self._subreaper_was is False:
            _child_subreaper(False)
            self._subreaper_was = None
        if first is not None:
            raise first


class Server:
    """A started server: timed requests, then ``stop()`` with a full lifecycle record."""

    def __init__(self, launcher: Launcher, group: _ProcessGroup, record: dict[str, Any],
                 port: int, run_dir: Path) -> None:
        self._launcher = launcher
        self._group = group
        self.record = record
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._run_dir = run_dir
        self._stopped = False

    @property
    def pid(self) -> int:
        return self._group.pid

    def _wait_ready(self, url: str, limit: float, workers_expected: int | None) -> None:
        clock = self._launcher.clock
        group = self._group
        polls = 0
        last_error = "no answer yet"
        while True:
            if group.main_done:
                self._fail_startup(f"died during startup ({self._main_status()}) after "
                                   f"{group.now():.2f} s")
            polls += 1
            try:
                with urllib.request.urlopen(url, timeout=1.0) as answer:
                    if 200 <= answer.status < 400:
                        break
                    last_error = f"HTTP {answer.status}"
            except urllib.error.HTTPError as exc:
                last_error = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                last_error = str(getattr(exc, "reason", exc))
            if group.now() >= limit:
                self._fail_startup(f"was not ready at {url} within {limit:g} s "
                                   f"(last probe: {last_error})")
            clock.sleep(0.05)
        self.record["startup_seconds"] = round(group.now(), 6)
        self.record["ready_polls"] = polls
        if workers_expected:
            while (len([p for p in group.alive() if p.role == "descendant"]) < workers_expected
                   and group.now() < limit and not group.main_done):
                group.sample()
                clock.sleep(0.02)
        group.sample()
        self.record["workers_at_ready"] = [p.pid for p in group.alive()
                                           if p.role == "descendant"]

    def _main_status(self) -> str:
        main = self._group.main
        return f"signal {main.signal}" if main.signal else f"exit code {main.exit_code}"

    def _fail_startup(self, what: str) -> None:
        self.record["error"] = f"startup failed: the server {what}"
        self._finish(grace=self._launcher.grace, reason="startup failed")
        raise RunError(Launcher._failure(self.record, what), record=self.record)

    def request(self, method: str, path: str, *, json: Any = None,
                files: Mapping[str, Any] | None = None,
                data: bytes | str | Mapping[str, str] | None = None,
                timeout: float | None = None, warmup: bool = False,
                headers: Mapping[str, str] | None = None) -> Response:
        """One request, timed from the start of the upload to the last byte of the response.

        ``json`` sends a JSON body; ``files`` (name -> path, or (filename, path or bytes,
        content type)) a multipart form, with ``data`` as extra fields; otherwise ``data``
        is sent as is (a mapping as a url-encoded form). Warmup requests are recorded apart.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        if self._stopped:
            raise RunError(f"model_run: {self.record['name']} is stopped; no more requests")
        limit = self._launcher.run_timeout if timeout is None else _seconds(timeout, "timeout")
        body, body_len, head = _encode_body(json=json, files=files, data=data)
        head.update(headers or {})
        index = len(self.record["requests"]) + 1
        entry: dict[str, Any] = {"index": index, "method": method, "path": path,
                                 "warmup": warmup, "bytes_sent": body_len,
                                 "started_seconds": round(self._group.now(), 6)}
        clock = self._launcher.clock
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=limit)
        body_path: Path | None = None
        try:
            conn.connect()
            start = clock.monotonic()
            conn.request(method, path, body=body, headers=head)
            answer = conn.getresponse()
            chunks: list[bytes] = []
            size = 0
            sink: IO[bytes] | None = None
            try:
                while True:
                    chunk = answer.read(_CHUNK)
                    if not chunk:
                        break
                    size += len(chunk)
                    if sink is None and size > STREAM_TO_FILE_ABOVE:
                        body_path = self._run_dir / f"response-{index:03d}.body"
                        sink = open(body_path, "wb")  # noqa: SIM115 - closed below
                        sink.writelines(chunks)
                        chunks = []
                    if sink is not None:
                        sink.write(chunk)
                    else:
                        chunks.append(chunk)
                seconds = clock.monotonic() - start
            finally:
                if sink is not None:
                    sink.close()
        except (OSError, http.client.HTTPException) as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            self.record["requests"].append(entry)
            self._group.sample()
            state = (f"the server {self._main_status()}" if self._group.main_done
                     else "the server is still running")
            raise RunError(Launcher._failure(self.record, f"request {method} {path} failed: "
                                             f"{entry['error']} ({state})"),
                           record=self.record) from None
        finally:
            conn.close()
        entry.update({"status": answer.status, "seconds": round(seconds, 6),
                      "bytes_received": size,
                      "body_path": str(body_path) if body_path is not None else None})
        self.record["requests"].append(entry)
        self.record["warmup_seconds" if warmup else "measured_seconds"].append(entry["seconds"])
        return Response(answer.status, {k.lower(): v for k, v in answer.getheaders()},
                        None if body_path is not None else b"".join(chunks), body_path,
                        seconds, warmup)

    def stop(self, grace: float | None = None, *, reason: str = "stop") -> dict[str, Any]:
        """SIGTERM the server, wait ``grace`` s, SIGKILL the group if needed; return the record.

        The record lists the exit of the server and every descendant it had, each signal
        (forced or not) and any leftover; idempotent.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        if self._stopped:
            return self.record
        return self._finish(grace=self._launcher.grace if grace is None else float(grace),
                            reason=reason)

    def _finish(self, *, grace: float, reason: str) -> dict[str, Any]:
        self._stopped = True
        group = self._group
        group.sample()
        main_alive = not group.main_done
        started = group.now()
        self.record["stop"] = {"reason": reason, "grace_seconds": grace,
                               "requested_seconds": round(started, 6), "main_alive": main_alive}
        if main_alive:
            group.send(signal.SIGTERM, forced=False, reason=reason, group=False)
            if not group.wait_main(grace):
                group.send(signal.SIGKILL, forced=True,
                           reason=f"grace of {grace:g} s expired after SIGTERM", group=True)
                group.wait_main(5.0)
                group.settle(1.0)
        # Workers get what is left of the grace to wind down after the server exited.
        group.settle(max(0.0, grace - (group.now() - started)))
        group.finish(reason="left running after the server exited")
        if group in self._launcher._groups:
            self._launcher._groups.remove(group)
        if self in self._launcher._servers:
            self._launcher._servers.remove(self)
        Launcher._close_record(self.record, group)
        main = self.record["processes"][0]
        self.record["exit_code"], self.record["signal"] = main["exit_code"], main["signal"]
        self.record["wall_seconds"] = main["wall_seconds"]
        self._launcher._emit(self.record)
        return self.record


def _encode_body(*, json: Any, files: Mapping[str, Any] | None,
                 data: bytes | str | Mapping[str, str] | None,
                 ) -> tuple[Iterable[bytes] | bytes | None, int, dict[str, str]]:
    """The request body (streamed for files), its length and its content headers."""
    if json is not None:
        if files is not None or data is not None:
            raise ConfigError("server.request", "json=", "give json, or files/data, not both")
        payload = jsonlib.dumps(json).encode()
        return payload, len(payload), {"Content-Type": "application/json",
                                       "Content-Length": str(len(payload))}
    if files is not None:
        boundary = f"lossless-{uuid.uuid4().hex}"
        parts: list[tuple[bytes, Path | bytes]] = []
        fields = data if isinstance(data, Mapping) else {}
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError("server.request", "data=", "with files=, data must be a mapping")
        for name, value in fields.items():
            head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n")
            parts.append((head.encode(), str(value).encode()))
        for name, spec in files.items():
            if isinstance(spec, tuple):
                filename, content, ctype = (*spec, "application/octet-stream")[:3]
            else:
                filename, content, ctype = Path(spec).name, spec, "application/octet-stream"
            payload_obj: Path | bytes = (content if isinstance(content, bytes)
                                         else Path(content))
            head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; "
                    f"filename=\"{filename}\"\r\nContent-Type: {ctype}\r\n\r\n")
            parts.append((head.encode(), payload_obj))
        closing = f"--{boundary}--\r\n".encode()
        total = len(closing)
        for head_bytes, part in parts:
            size = len(part) if isinstance(part, bytes) else part.stat().st_size
            total += len(head_bytes) + size + 2

        def stream() -> Iterator[bytes]:
            for head_bytes, part in parts:
                yield head_bytes
                if isinstance(part, bytes):
                    yield part
                else:
                    with open(part, "rb") as handle:
                        yield from iter(lambda: handle.read(_CHUNK), b"")
                yield b"\r\n"
            yield closing

        return stream(), total, {"Content-Type": f"multipart/form-data; boundary={boundary}",
                                 "Content-Length": str(total)}
    if data is None:
        return None, 0, {"Content-Length": "0"}
    if isinstance(data, Mapping):
        encoded = urllib.parse.urlencode(dict(data)).encode()
        return encoded, len(encoded), {"Content-Type": "application/x-www-form-urlencoded",
                                       "Content-Length": str(len(encoded))}
    raw = data.encode() if isinstance(data, str) else bytes(data)
    return raw, len(raw), {"Content-Type": "application/octet-stream",
                           "Content-Length": str(len(raw))}


__all__ = ["DEFAULT_GRACE", "Launcher", "Response", "RunResult", "Server", "free_port",
           "hash_inputs", "lifecycle_verdict", "tail"]

