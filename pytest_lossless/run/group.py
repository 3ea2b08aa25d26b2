"""One process group under watch: the started command in its own session and group, and
every descendant it has, observed until the last one is gone.

The raw material of a lifecycle record (who ran, how each ended, which signals we sent and
why, peak memory) is gathered here; :mod:`.lifecycle` judges it. Linux only (``/proc``).

Descendants are found by ancestry, never by what a process carries: members of the run's
session or group, children of known members (parent links in ``/proc``), and orphans
re-parented to this process (a child subreaper) that cannot be a child of its own; which
run such an orphan came from is decided by :class:`Adoptions`. The environment token is only
a hint among runs: a daemon may clear its environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.clock import Clock, utc_iso
from ..core.procfs import ProcStat, process_stat, read_cmdline, read_memory_kib, scan_proc
from ..devices.backends import DeviceMemory, DeviceMemoryMeter
from ..devices.runs import Member
from .kernel import describe_status
from .record import Leftover, ProcessRecord, SignalReceived, SignalSent

#: Seconds between two samples of ``/proc`` while a process group runs.
SAMPLE_INTERVAL = 0.05
#: Every this many samples, processes known not to be ours are read again (pid reuse).
FULL_SCAN_EVERY = 40

#: Set in every child's environment to a token of its run: among several runs, it tells which
#: one an orphan that kept its environment came from (ancestry decides the rest).
RUN_TOKEN = "PYTEST_LOSSLESS_RUN"


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
    signals_received: list[SignalReceived] = field(default_factory=list)
    session: int = 0

    def note_memory(self, kib: int | None, source: str) -> None:
        if kib is not None and (self.peak_rss_kib is None or kib > self.peak_rss_kib):
            self.peak_rss_kib = kib
            self.memory_source = source

    def to_record(self) -> ProcessRecord:
        wall = None if self.ended is None else round(self.ended - self.first_seen, 6)
        return ProcessRecord(
            pid=self.pid,
            role=self.role,
            ppid=self.ppid,
            ppid_last=self.ppid_last or self.ppid,
            pgid=self.pgrp,
            comm=self.comm,
            argv=tuple(self.argv),
            observed=self.observed,
            exit_code=self.exit_code,
            signal=self.signal,
            core_dumped=self.core_dumped,
            forced=any(s.forced for s in self.signals_received),
            signals_received=tuple(self.signals_received),
            started_seconds=round(self.first_seen, 6),
            ended_seconds=None if self.ended is None else round(self.ended, 6),
            wall_seconds=wall,
            peak_rss_kib=self.peak_rss_kib,
            peak_rss_source=self.memory_source,
        )

    def member(self) -> Member:
        """This live process as the allocation's runs record lists it."""
        return Member(
            self.pid,
            self.starttime,
            self.pgrp,
            self.session,
            self.ppid_last or self.ppid,
            self.comm,
            tuple(self.argv),
            self.role,
        )


class Adoptions:
    """Which run an orphan re-parented to this process (the child subreaper) belongs to.

    Shared by the process groups of one launcher. A process whose parent is this one is a
    re-parented orphan, never a child of ours, when its session is neither ours nor its
    own: a child we start is in our session or leads its own (``setsid``). Such an orphan
    belongs to the run whose token it carries; else to the run whose group, or a known
    member of which, leads its session or group (a double fork's dead middle); else to the
    run that started last before it. A session leader re-parented to us is adopted only
    by its token: it could be a child of ours (ffmpeg, in its own session).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: list[ProcessGroup] = []
        self._owner: dict[tuple[int, int], ProcessGroup] = {}
        self._me = os.getpid()
        self._session = os.getsid(0)

    def join(self, group: ProcessGroup) -> None:
        with self._lock:
            self._groups.append(group)

    def leave(self, group: ProcessGroup) -> None:
        with self._lock:
            self._groups = [g for g in self._groups if g is not group]
            self._owner = {k: g for k, g in self._owner.items() if g is not group}

    def claims(self, group: ProcessGroup, stats: Mapping[int, ProcStat]) -> set[int]:
        """The orphans re-parented to us in ``stats`` that belong to ``group``."""
        mine: set[int] = set()
        with self._lock:
            groups = list(self._groups)
            mains = {g.pid for g in groups}
            for pid, st in stats.items():
                if st.ppid != self._me or pid in mains:
                    continue
                key = (pid, st.starttime)
                owner = self._owner.get(key)
                if owner is None:
                    owner = self._decide(pid, st, groups)
                    if owner is None:
                        continue
                    self._owner[key] = owner
                if owner is group:
                    mine.add(pid)
        return mine

    def _decide(
        self, pid: int, st: ProcStat, groups: Sequence[ProcessGroup]
    ) -> ProcessGroup | None:
        token = _read_token(pid)
        if token is not None:
            for candidate in groups:
                if candidate.token == token:
                    return candidate
        if st.session in (self._session, pid):
            return None  # possibly a child of ours: only its token would say otherwise
        for candidate in groups:
            if candidate.knows(st.session) or candidate.knows(st.pgrp):
                return candidate
        earlier = [g for g in groups if g.main.starttime <= st.starttime]
        return max(earlier, key=lambda g: g.main.starttime) if earlier else None


def _read_token(pid: int) -> bytes | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((item for item in environ if item.startswith(RUN_TOKEN.encode() + b"=")), None)


class ProcessGroup:
    """One started process in its own session and group, and every descendant seen.

    The direct child is reaped by a waiter thread with ``os.wait4`` (exit status and
    ``ru_maxrss``); descendants are found by sampling ``/proc`` (same session or group,
    or a parent already known), their memory read from ``VmHWM``; a zombie's exit status
    is read from ``/proc/<pid>/stat``; orphans re-parented to us are adopted by ancestry
    (:class:`Adoptions`) and reaped by us.

    ``pass_fds`` (the allocation's lock descriptors) are inherited by the run, so its locks
    stay held while any of its processes keeps them; ``on_members`` is told the live
    members (pid, start time, group, session, command) each time they change, so the
    allocation's runs record lists them even if this process is killed. ``device_memory``,
    where the backend can read it, is ticked by the sampler with the live members' pids.
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
        pass_fds: Sequence[int] = (),
        adoptions: Adoptions | None = None,
        on_members: Callable[[list[Member]], None] | None = None,
        device_memory: DeviceMemoryMeter | None = None,
    ) -> None:
        self.clock = clock
        self._meter = device_memory
        #: The ``device_memory`` record, once :meth:`finish` closed the meter.
        self.device_memory: DeviceMemory | None = None
        self._interval = interval
        self._adoptions = adoptions if adoptions is not None else Adoptions()
        self._on_members = on_members
        self._reported: frozenset[tuple[int, int]] | None = None
        self._report_lock = threading.Lock()
        #: Every pid ever a member: an orphan whose session or group one of them leads is ours.
        self._seen: set[int] = set()
        self._lock = threading.Lock()
        self._main_done = threading.Event()
        self._stop_sampling = threading.Event()
        self.signals: list[SignalSent] = []
        self.procs: dict[int, ObservedProcess] = {}
        self._gone: list[ObservedProcess] = []
        self.leftovers: list[Leftover] = []
        self._me = os.getpid()
        token = env.get(RUN_TOKEN)
        self.token = f"{RUN_TOKEN}={token}".encode() if token else None
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
                pass_fds=tuple(pass_fds),
            )
        self.pid = self.popen.pid
        self.pgid = self.pid
        self._seen.add(self.pid)
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
            session=self.pid,
        )
        self.procs[self.pid] = self.main
        self._adoptions.join(self)
        self._report()  # the main process is listed before anything can kill us
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
        code, sig, core = describe_status(status)
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
            if self._meter is not None and self._meter.reading:  # one read a tick at most
                self._meter.tick([p.pid for p in self.alive()], self.now())
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
            # Orphans handed to us (the subreaper), by ancestry: a double-forked daemon in a
            # new session, with its environment cleared and its descriptors closed, is ours.
            members |= self._adoptions.claims(self, stats) - members
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
                        session=st.session,
                    )
                    self.procs[pid] = proc
                    self._seen.add(pid)
                if proc.ended is not None:
                    continue
                proc.comm, proc.pgrp, proc.session = st.comm, st.pgrp, st.session
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
            # Our direct children are re-read every sample: one may become an orphan of ours.
            self._strangers.update(
                pid for pid, st in stats.items() if pid not in members and st.ppid != self._me
            )
        self._report()

    def knows(self, pid: int) -> bool:
        """Whether ``pid`` is (or was) a process of this run."""
        return pid == self.pgid or pid in self._seen

    def _report(self) -> None:
        """Tell ``on_members`` the live members when they changed since the last report."""
        if self._on_members is None:
            return
        with self._report_lock:
            with self._lock:
                live = [p for p in self.procs.values() if p.ended is None]
                identity = frozenset((p.pid, p.starttime) for p in live)
                if identity == self._reported:
                    return
                members = [p.member() for p in live if p.starttime]
            self._reported = identity
            try:
                self._on_members(members)
            except Exception:  # the record is protection, not the run: never stop sampling
                self._reported = None

    def _note_zombie(self, proc: ObservedProcess, st: ProcStat, now: float) -> None:
        if proc is self.main:
            return  # the waiter thread reaps it
        if st.ppid == self._me:
            try:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == proc.pid:
                proc.exit_code, proc.signal, proc.core_dumped = describe_status(status)
                proc.observed = "adopted"
                proc.ended = now
                proc.note_memory(int(usage.ru_maxrss), "wait4 ru_maxrss")
                return
        if proc.observed == "alive" and st.exit_status is not None:
            proc.exit_code, proc.signal, proc.core_dumped = describe_status(st.exit_status)
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
        entry = SignalSent(
            signal=sig.name,
            target="group" if group else "process",
            pid=self.pid,
            at_seconds=round(at, 6),
            forced=forced,
            reason=reason,
            delivered=delivered,
            receivers=tuple(p.pid for p in receivers) if delivered else (),
        )
        self._note_signal(entry, receivers)

    def _note_signal(self, entry: SignalSent, receivers: Sequence[ObservedProcess]) -> None:
        with self._lock:
            self.signals.append(entry)
            if entry.delivered:
                for proc in receivers:
                    proc.signals_received.append(entry.received())

    def _kill_one(self, proc: ObservedProcess, reason: str) -> None:
        at = self.now()
        try:
            os.kill(proc.pid, signal.SIGKILL)
            delivered = True
        except (ProcessLookupError, PermissionError):
            delivered = False
        entry = SignalSent(
            signal="SIGKILL",
            target="process",
            pid=proc.pid,
            at_seconds=round(at, 6),
            forced=True,
            reason=reason,
            delivered=delivered,
            receivers=(proc.pid,) if delivered else (),
        )
        self._note_signal(entry, [proc])

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
                        Leftover(
                            proc.pid,
                            proc.comm,
                            "alive outside the process group",
                            "SIGKILL to the process",
                        )
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
                self.leftovers.append(Leftover(proc.pid, proc.comm, state, "none possible"))
        self._stop_sampling.set()
        self._sampler.join(timeout=5.0)
        self._waiter.join(timeout=1.0)
        if self._meter is not None and self.device_memory is None:
            self.device_memory = self._meter.close()
        self._adoptions.leave(self)
        self._report()  # what is left (leftovers) stays listed; an empty run is cleared

    def processes(self) -> list[ProcessRecord]:
        with self._lock:
            everyone = [
                self.main,
                *self._gone,
                *(p for p in self.procs.values() if p is not self.main),
            ]
        everyone.sort(key=lambda p: (p.role != "main", p.first_seen, p.pid))
        return [p.to_record() for p in everyone]
