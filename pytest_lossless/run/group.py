"""One process group under watch: the started command in its own session and group, and
every descendant it has, observed until the last one is gone.

The raw material of a lifecycle record (who ran, how each ended, which signals we sent and
why, peak memory) is gathered here; :mod:`.lifecycle` judges it. Linux only (``/proc``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.clock import Clock, utc_iso
from ..core.procfs import ProcStat, process_stat, read_cmdline, read_memory_kib, scan_proc

#: Seconds between two samples of ``/proc`` while a process group runs.
SAMPLE_INTERVAL = 0.05
#: Every this many samples, processes known not to be ours are read again (pid reuse).
FULL_SCAN_EVERY = 40

#: Set in every child's environment to a token of its run, so that processes which leave the
#: run's session and process group (daemons) can still be told apart as its own.
RUN_TOKEN = "PYTEST_LOSSLESS_RUN"

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def child_subreaper(on: bool | None) -> bool | None:
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


@dataclass
class ObservedProcess:
    """What we observed of one process: the raw material of a lifecycle record."""

    pid: int
    starttime: int
    role: str
    ppid: int
    pgrp: int
    comm: str
    argv: list[str]
    first_seen: float
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


class ProcessGroup:
    """One started process in its own session and group, and every descendant seen.

    The direct child is reaped by a waiter thread with ``os.wait4`` (exit status and
    ``ru_maxrss``); descendants are found by sampling ``/proc`` (same session or group,
    or a parent already known), their memory read from ``VmHWM``; a zombie's exit status
    is read from ``/proc/<pid>/stat``; orphans re-parented to us are reaped by us.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | None,
        stdout_path: Path,
        stderr_path: Path,
        clock: Clock,
        interval: float,
    ) -> None:
        self.clock = clock
        self._interval = interval
        self._lock = threading.Lock()
        self._main_done = threading.Event()
        self._stop_sampling = threading.Event()
        self.signals: list[dict[str, Any]] = []
        self.procs: dict[int, ObservedProcess] = {}
        self._gone: list[ObservedProcess] = []
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
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
        self.pid = self.popen.pid
        self.pgid = self.pid
        stat = process_stat(self.pid)
        self.main = ObservedProcess(
            self.pid,
            stat.starttime if stat else 0,
            "main",
            self._me,
            self.pgid,
            stat.comm if stat else Path(argv[0]).name[:15],
            list(argv)[:16],
            0.0,
        )
        self.procs[self.pid] = self.main
        self._waiter = threading.Thread(
            target=self._wait_main, name=f"lossless-wait-{self.pid}", daemon=True
        )
        self._sampler = threading.Thread(
            target=self._sample_loop, name=f"lossless-sample-{self.pid}", daemon=True
        )
        self._waiter.start()
        self._sampler.start()

    # -- time
    def now(self) -> float:
        return self.clock.monotonic() - self.t0

    @property
    def main_done(self) -> bool:
        return self._main_done.is_set()

    def wait_main(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the direct child to be reaped."""
        deadline = self.clock.monotonic() + max(0.0, seconds)
        while not self._main_done.is_set():
            left = deadline - self.clock.monotonic()
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
            members = {
                pid for pid, st in stats.items() if st.session == self.pgid or st.pgrp == self.pgid
            }
            # A known pid stays ours only while it is the same process (same start time).
            members |= {
                pid
                for pid in known
                if pid in stats and self.procs[pid].starttime in (0, stats[pid].starttime)
            }
            # Orphans handed to us (the subreaper) are ours only if they carry this run's
            # token: a double-forked daemon in a new session is still accounted for.
            members |= {
                pid
                for pid, st in stats.items()
                if st.ppid == self._me
                and pid != self.pid
                and pid not in members
                and self._carries_token(pid)
            }
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
                    proc = ObservedProcess(
                        pid,
                        st.starttime,
                        "descendant",
                        st.ppid,
                        st.pgrp,
                        st.comm,
                        read_cmdline(pid),
                        now,
                    )
                    self.procs[pid] = proc
                if proc.ended is not None:
                    continue
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

    def _note_zombie(self, proc: ObservedProcess, st: ProcStat, now: float) -> None:
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

    def _vanish(self, proc: ObservedProcess, now: float) -> None:
        if proc.observed == "alive":
            proc.observed = "disappeared"
        if proc.ended is None:
            proc.ended = now
        if self.procs.get(proc.pid) is proc and proc is not self.main:
            self._gone.append(proc)
            del self.procs[proc.pid]

    def alive(self, *, group_only: bool = False) -> list[ObservedProcess]:
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
        receivers = (
            self.alive(group_only=True) if group else ([self.main] if not self.main_done else [])
        )
        delivered = bool(receivers)
        if delivered:
            try:
                if group:
                    os.killpg(self.pgid, sig)
                else:
                    os.kill(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                delivered = False
        entry = {
            "signal": sig.name,
            "target": "group" if group else "process",
            "pid": self.pid,
            "at_seconds": round(at, 6),
            "forced": forced,
            "reason": reason,
            "delivered": delivered,
            "receivers": [p.pid for p in receivers] if delivered else [],
        }
        with self._lock:
            self.signals.append(entry)
            if delivered:
                for proc in receivers:
                    proc.signals_received.append(
                        {k: entry[k] for k in ("signal", "forced", "reason", "at_seconds")}
                    )

    def _kill_one(self, proc: ObservedProcess, reason: str) -> None:
        at = self.now()
        try:
            os.kill(proc.pid, signal.SIGKILL)
            delivered = True
        except (ProcessLookupError, PermissionError):
            delivered = False
        entry = {
            "signal": "SIGKILL",
            "target": "process",
            "pid": proc.pid,
            "at_seconds": round(at, 6),
            "forced": True,
            "reason": reason,
            "delivered": delivered,
            "receivers": [proc.pid] if delivered else [],
        }
        with self._lock:
            self.signals.append(entry)
            if delivered:
                proc.signals_received.append(
                    {k: entry[k] for k in ("signal", "forced", "reason", "at_seconds")}
                )

    def settle(self, seconds: float) -> bool:
        """Sample quickly until no member is alive or ``seconds`` passed; True when none is."""
        deadline = self.clock.monotonic() + seconds
        while True:
            self.sample()
            if self.main_done and not self.alive():
                return True
            if self.clock.monotonic() >= deadline:
                return False
            self.clock.sleep(0.01)

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
                    self.leftovers.append(
                        {
                            "pid": proc.pid,
                            "comm": proc.comm,
                            "state": "alive outside the process group",
                            "action": "SIGKILL to the process",
                        }
                    )
        self.settle(2.0)
        stats = scan_proc()
        for proc in self.alive():
            st = stats.get(proc.pid)
            state = (
                "zombie, not reaped by its parent"
                if st and st.state == "Z"
                else ("alive after SIGKILL")
            )
            with self._lock:
                self.leftovers.append(
                    {"pid": proc.pid, "comm": proc.comm, "state": state, "action": "none possible"}
                )
        self._stop_sampling.set()
        self._sampler.join(timeout=5.0)
        self._waiter.join(timeout=1.0)

    def processes(self) -> list[dict[str, Any]]:
        with self._lock:
            everyone = [
                self.main,
                *self._gone,
                *(p for p in self.procs.values() if p is not self.main),
            ]
        everyone.sort(key=lambda p: (p.role != "main", p.first_seen, p.pid))
        return [p.to_dict() for p in everyone]
