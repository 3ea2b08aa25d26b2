"""Orphans: processes that an earlier allocation of a device started and that still run.

They are found from the runs records (:mod:`.runs`), whatever happened to the pytest process
that held the allocation, and believed only by ``/proc``: a listed process counts while the
same pid has the same start time and belongs to the uid that owns the record file (so a
co-tenant cannot block a device by naming someone else's process). Once the allocation's
holder is gone (or released it), what its listed processes became is looked for too: their
descendants, by parent links, and the unlisted members of their sessions and process groups
(started since), in case one was born after the last update of the record.

A later session names each orphan (pid, command, the test that started it, since when) and
waits for it, or ends it (``--lossless-orphans=kill``: SIGTERM to its process group, a grace,
then SIGKILL), and its receipt records what was found and done.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..core.clock import SYSTEM_CLOCK, Clock, utc_iso
from ..core.procfs import ProcStat, proc_numbers, process_stat, scan_proc
from ..core.records import Record, meta
from .locks import _shown
from .runs import RunsRecord

#: Seconds an orphan gets between SIGTERM and SIGKILL under ``--lossless-orphans=kill``.
ORPHAN_GRACE = 5.0
#: Seconds to wait for an orphan to be gone after SIGKILL.
KILL_WAIT = 5.0
#: Orphans an error message or wait line names one by one; the rest are counted.
NAMED = 6
#: Seconds a full read of ``/proc`` (for unlisted members) serves a waiter before it is read
#: again; listed processes are checked at every attempt.
SCAN_EVERY = 0.5


def living(pid: int, start: int) -> ProcStat | None:
    """The process ``pid`` if it still runs and is the one that started at ``start`` (clock
    ticks since boot); None when it ended (a zombie has ended: its descriptors are closed)."""
    stat_ = process_stat(pid)
    if stat_ is None or stat_.starttime != start or stat_.state in ("Z", "X", "x"):
        return None
    return stat_


def is_alive(pid: int, start: int) -> bool:
    return living(pid, start) is not None


def process_uid(pid: int) -> int | None:
    """The real uid of ``pid`` (``/proc/<pid>/status``), or None where it cannot be read."""
    return proc_numbers(f"/proc/{pid}/status", ("Uid:",)).get("Uid:")


def started_at(ticks: int) -> str:
    """A start time in clock ticks since boot, as a UTC timestamp ("?" where unknown)."""
    boot = proc_numbers("/proc/stat", ("btime",)).get("btime")
    if boot is None:
        return "?"
    try:
        hertz = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        hertz = 100
    return utc_iso(boot + ticks / hertz)


@dataclass(frozen=True)
class Orphan(Record):
    """One live process of an earlier allocation on a device: what the record and ``/proc``
    say of it. ``holder`` is ``"gone"`` (the pytest process that held the allocation died),
    ``"released"`` (it let the devices go with this still running) or ``"alive"`` (its
    holder still runs, though the lock is free); ``found_by`` says how it was found."""

    pid: int
    start: int = field(metadata=meta(key="start_ticks"))
    uid: int
    pgid: int
    sid: int
    comm: str
    command: str
    started_at: str
    test: str
    run: str | None
    holder_pid: int | None
    holder: str
    record: str
    found_by: str

    @property
    def identity(self) -> tuple[int, int]:
        return self.pid, self.start

    @property
    def endable(self) -> bool:
        """Whether ``--lossless-orphans=kill`` may end it: its allocation is over, and this
        account may signal it."""
        me = os.geteuid()
        return self.holder != "alive" and (me == 0 or self.uid == me)

    def describe(self) -> str:
        what = self.command or self.comm
        where = f", {self.run}" if self.run else ""
        found = "" if self.found_by == "runs record" else f", {self.found_by}"
        return f"pid {self.pid} ({what}{where}{found}, running since {self.started_at})"


@dataclass(frozen=True)
class SignalSent(Record):
    """One signal sent to end an orphan: to its process group or to the process itself,
    ``at_seconds`` after the first, and whether the kernel took it."""

    signal: str
    target: str
    pid: int
    at_seconds: float
    delivered: bool


@dataclass(frozen=True)
class Ending:
    """What :func:`end_orphans` did to one orphan: the signals sent and the outcome."""

    signals: tuple[SignalSent, ...]
    outcome: str
    ended_seconds: float | None


@dataclass(frozen=True)
class OrphanEntry(Record):
    """One entry of the receipt's ``allocation.orphans``: an orphan an acquisition found
    (on ``devices``, at ``found_at``), what was done (``action``: waited or ended, and the
    ``signals``), its ``outcome``, and when it was seen gone."""

    orphan: Orphan = field(metadata=meta(flatten=True))
    devices: tuple[str, ...] = field(metadata=meta(absent=()))
    found_at: str
    action: str = "waited"
    signals: tuple[SignalSent, ...] = ()
    outcome: str | None = None
    gone_at: str | None = None
    waited_seconds: float | None = None


def _holder_state(record: RunsRecord) -> str:
    if record.released:
        return "released"
    pid, start = record.holder_pid, record.holder_start
    if pid is not None and pid > 0 and start is not None and is_alive(pid, start):
        return "alive"
    return "gone"


class _Collector:
    """The orphans of one device, by identity, each made from the record that names it."""

    def __init__(self) -> None:
        self.found: dict[tuple[int, int], Orphan] = {}
        self.record: RunsRecord | None = None
        self.holder = "gone"

    def add(self, st: ProcStat, found_by: str, command: str = "", run: str | None = None) -> None:
        record = self.record
        if record is None or (st.pid, st.starttime) in self.found or st.pid == os.getpid():
            return
        self.found[(st.pid, st.starttime)] = Orphan(
            pid=st.pid,
            start=st.starttime,
            uid=record.owner,
            pgid=st.pgrp,
            sid=st.session,
            comm=_shown(st.comm, 64),  # a process names itself: shown, never trusted
            command=command,
            started_at=started_at(st.starttime),
            test=record.test,
            run=run,
            holder_pid=record.holder_pid,
            holder=self.holder,
            record=str(record.path),
            found_by=found_by,
        )


class ProcScan:
    """``/proc`` read at most every ``every`` seconds (one waiter's attempts share it)."""

    def __init__(self, clock: Clock, every: float = SCAN_EVERY) -> None:
        self.clock = clock
        self.every = every
        self._stats: dict[int, ProcStat] | None = None
        self._at = 0.0

    def stats(self, *, fresh: bool = False) -> tuple[dict[int, ProcStat], bool]:
        """(every process, whether that read is older than this call)."""
        now = self.clock.monotonic()
        if fresh or self._stats is None or now - self._at >= self.every:
            self._stats, self._at = scan_proc(), now
            return self._stats, False
        return self._stats, True

    def forget(self) -> None:
        self._stats = None


def find_orphans(
    records: Sequence[RunsRecord],
    host: str,
    *,
    include_live_holders: bool,
    scan: ProcScan | None = None,
) -> list[Orphan]:
    """The live processes of ``records`` (runs records of one device), believed by ``/proc``.

    A record of a live, unreleased allocation counts only with ``include_live_holders`` (for
    a device whose lock is free although its holder still runs); its listed processes alone
    are read. Otherwise the listed processes, their descendants and the unlisted members of
    their sessions and groups count. Records of another host are not read (their pids name
    nothing here). A device is found free only on a fresh read of ``/proc``.
    """
    scan = scan if scan is not None else ProcScan(SYSTEM_CLOCK, every=0.0)
    found, cached = _find(records, host, include_live_holders, scan, fresh=False)
    if not found and cached:
        found, _ = _find(records, host, include_live_holders, scan, fresh=True)
    return found


def _find(
    records: Sequence[RunsRecord],
    host: str,
    include_live_holders: bool,
    scan: ProcScan,
    *,
    fresh: bool,
) -> tuple[list[Orphan], bool]:
    collector = _Collector()
    stats: dict[int, ProcStat] | None = None
    cached = False
    for record in records:
        if record.host != host:
            continue
        holder = _holder_state(record)
        if holder == "alive" and not include_live_holders:
            continue
        collector.record, collector.holder = record, holder
        roots: list[ProcStat] = []
        for listed in record.processes:
            st = living(listed.pid, listed.start)
            if st is not None and process_uid(listed.pid) == record.owner:
                roots.append(st)
                collector.add(st, "runs record", listed.command, listed.run)
        if holder == "alive" or not record.processes:
            continue
        if stats is None:
            stats, cached = scan.stats(fresh=fresh)
        _unlisted(record, roots, stats, collector)
    return sorted(collector.found.values(), key=lambda o: (o.start, o.pid)), cached


def _unlisted(
    record: RunsRecord,
    roots: Sequence[ProcStat],
    stats: Mapping[int, ProcStat],
    collector: _Collector,
) -> None:
    """Processes the record does not list that belong to it: members of its listed sessions
    and groups started since its first process, and every descendant of those and of the
    listed ones that still run (all of the record owner's uid)."""
    floor = record.first_start or 0
    mine = {os.getsid(0), os.getpgrp(), 0, 1}
    starts = {p.pid: p.start for p in record.processes}

    def still_ours(number: int) -> bool:
        # Linux reuses no pid while a process is in the session or group it names: a live
        # process of that pid that is not the one recorded means the number is another's now.
        st = stats.get(number)
        if st is None or st.state in ("Z", "X", "x"):
            return True
        return st.starttime == starts[number] if number in starts else st.starttime >= floor

    sessions = {p.sid for p in record.processes if p.sid is not None and still_ours(p.sid)}
    groups = {p.pgid for p in record.processes if p.pgid is not None and still_ours(p.pgid)}
    sessions -= mine
    groups -= mine
    children: dict[int, list[ProcStat]] = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st)

    def owned(st: ProcStat) -> bool:
        # ``stats`` may be a little old: the process is believed as it is now.
        return living(st.pid, st.starttime) is not None and process_uid(st.pid) == record.owner

    todo: list[ProcStat] = list(roots)
    for st in stats.values():
        if st.starttime < floor or not (st.session in sessions or st.pgrp in groups):
            continue
        if owned(st):
            where = f"session {st.session}" if st.session in sessions else f"group {st.pgrp}"
            collector.add(st, f"not listed: in its {where}")
            todo.append(st)
    seen = {st.pid for st in todo}
    while todo:
        parent = todo.pop()
        for child in children.get(parent.pid, []):
            if child.pid in seen or child.starttime < parent.starttime:
                continue
            seen.add(child.pid)
            if owned(child):
                collector.add(child, f"not listed: a child of pid {parent.pid}")
                todo.append(child)


def describe_orphans(orphans: Sequence[Orphan]) -> str:
    """What blocks a device, for a wait line or an error: per test, what still runs."""
    parts = []
    by_test: dict[tuple[str, str, int | None], list[Orphan]] = {}
    for orphan in orphans:
        by_test.setdefault((orphan.test, orphan.holder, orphan.holder_pid), []).append(orphan)
    for (test, holder, holder_pid), group in by_test.items():
        if holder == "gone":
            why = f"its pytest process (pid {holder_pid}) is gone"
        elif holder == "released":
            why = "left running when its allocation was released"
        else:
            why = f"its pytest process (pid {holder_pid}) runs but no longer holds the lock"
        named = "; ".join(o.describe() for o in group[:NAMED])
        more = f"; and {len(group) - NAMED} more" if len(group) > NAMED else ""
        count = f"{len(group)} process{'es' if len(group) != 1 else ''}"
        verb = "runs" if len(group) == 1 else "run"
        parts.append(f"{count} started by {test} still {verb} ({why}): {named}{more}")
    return "; ".join(parts)


@dataclass
class _Ending:
    """:class:`Ending` while it is being decided."""

    signals: list[SignalSent] = field(default_factory=list)
    outcome: str | None = None
    ended_seconds: float | None = None


def end_orphans(
    orphans: Sequence[Orphan], *, grace: float, clock: Clock
) -> dict[tuple[int, int], Ending]:
    """End ``orphans``: SIGTERM to each one's process group, up to ``grace`` seconds for
    them to end, then SIGKILL to the groups and each process left. Per orphan: the signals
    sent and the outcome. An orphan this account may not signal, or whose allocation still
    runs, is left alone (and its outcome says why)."""
    done: dict[tuple[int, int], _Ending] = {}
    targets: list[Orphan] = []
    for orphan in orphans:
        entry = _Ending()
        done[orphan.identity] = entry
        if orphan.holder == "alive":
            entry.outcome = "left alone: its allocation's pytest process still runs"
        elif not orphan.endable:
            entry.outcome = f"left alone: it belongs to uid {orphan.uid}, not to you"
        else:
            targets.append(orphan)
    if not targets:
        return _ended(done)
    t0 = clock.monotonic()
    own = {os.getpgrp(), 0, 1}

    def send(sig: signal.Signals) -> None:
        alive = [o for o in targets if is_alive(*o.identity)]
        groups = sorted({o.pgid for o in alive} - own)
        for pgid in groups:
            # A live orphan of the group keeps the pgid from being reused: the number is ours.
            members = [o for o in alive if o.pgid == pgid]
            try:
                os.killpg(pgid, sig)
                delivered = True
            except (ProcessLookupError, PermissionError):
                delivered = False
            for o in members:
                done[o.identity].signals.append(_sent(sig, "group", pgid, clock, t0, delivered))
        for o in alive:
            if o.pgid in groups and sig == signal.SIGTERM:
                continue
            if not is_alive(*o.identity):
                continue  # never signal a pid that may have been reused since
            try:
                os.kill(o.pid, sig)
                delivered = True
            except (ProcessLookupError, PermissionError):
                delivered = False
            done[o.identity].signals.append(_sent(sig, "process", o.pid, clock, t0, delivered))

    def wait(seconds: float, after: str) -> None:
        deadline = clock.monotonic() + seconds
        while True:
            for o in targets:
                entry = done[o.identity]
                if entry.outcome is None and not is_alive(*o.identity):
                    entry.ended_seconds = round(clock.monotonic() - t0, 3)
                    entry.outcome = f"ended after {after} ({entry.ended_seconds:g} s)"
            if all(done[o.identity].outcome is not None for o in targets):
                return
            if clock.monotonic() >= deadline:
                return
            clock.sleep(0.02)

    send(signal.SIGTERM)
    wait(grace, "SIGTERM to its process group")
    if any(done[o.identity].outcome is None for o in targets):
        send(signal.SIGKILL)
        wait(KILL_WAIT, f"SIGKILL, {grace:g} s after SIGTERM")
    for o in targets:
        if done[o.identity].outcome is None:
            done[o.identity].outcome = "still alive after SIGKILL"
    return _ended(done)


def _ended(done: Mapping[tuple[int, int], _Ending]) -> dict[tuple[int, int], Ending]:
    return {
        identity: Ending(tuple(e.signals), e.outcome or "", e.ended_seconds)
        for identity, e in done.items()
    }


def _sent(
    sig: signal.Signals, target: str, pid: int, clock: Clock, t0: float, delivered: bool
) -> SignalSent:
    return SignalSent(sig.name, target, pid, round(clock.monotonic() - t0, 3), delivered)


class OrphanWatch:
    """What one acquisition found of earlier allocations' orphans, and did about them: the
    entries of the receipt's ``allocation.orphans``.

    :meth:`saw` takes each attempt's findings (and says which orphans are new, for a new
    wait line), notes those that ended meanwhile; :meth:`end` ends orphans once each under
    ``--lossless-orphans=kill``; :meth:`entries` is the record.
    """

    def __init__(self, policy: str, *, grace: float, clock: Clock) -> None:
        self.policy = policy
        self.grace = grace
        self.clock = clock
        self.scan = ProcScan(clock)
        self._entries: dict[tuple[int, int], OrphanEntry] = {}
        self._orphans: dict[tuple[int, int], Orphan] = {}
        self._found: dict[tuple[int, int], float] = {}

    def saw(self, found: Sequence[tuple[str, Sequence[Orphan]]]) -> list[Orphan]:
        """Record the orphans of one attempt (device id, orphans); return the new ones."""
        now = self.clock.monotonic()
        new: list[Orphan] = []
        for device, orphans in found:
            for orphan in orphans:
                entry = self._entries.get(orphan.identity)
                if entry is None:
                    entry = OrphanEntry(orphan, (), utc_iso(self.clock.wall()))
                    self._orphans[orphan.identity] = orphan
                    self._found[orphan.identity] = now
                    new.append(orphan)
                if device not in entry.devices:
                    entry = replace(entry, devices=(*entry.devices, device))
                self._entries[orphan.identity] = entry
        self._note_gone(now)
        return new

    def _note_gone(self, now: float) -> None:
        for identity, entry in self._entries.items():
            if entry.gone_at is None and not is_alive(*identity):
                self._entries[identity] = replace(
                    entry,
                    gone_at=utc_iso(self.clock.wall()),
                    waited_seconds=round(now - self._found[identity], 3),
                    outcome="ended while waited for" if entry.outcome is None else entry.outcome,
                )

    def endable(self, orphans: Iterable[Orphan]) -> list[Orphan]:
        """Those of ``orphans`` that :meth:`end` would try to end (each once)."""
        return [
            o
            for o in orphans
            if o.endable
            and (o.identity not in self._entries or self._entries[o.identity].action != "ended")
        ]

    def end(self, orphans: Sequence[Orphan]) -> None:
        """End ``orphans`` (:func:`end_orphans`) and record it."""
        results = end_orphans(orphans, grace=self.grace, clock=self.clock)
        self.scan.forget()  # what they may have started meanwhile is looked for afresh
        for identity, result in results.items():
            entry = self._entries.get(identity)
            if entry is None:
                continue
            self._entries[identity] = replace(
                entry,
                action="ended" if result.signals else "left alone",
                signals=result.signals,
                outcome=result.outcome,
            )
        self._note_gone(self.clock.monotonic())

    def entries(self) -> tuple[OrphanEntry, ...]:
        """The record: one entry per orphan seen, in the order found."""
        self._note_gone(self.clock.monotonic())
        for identity, entry in self._entries.items():
            if entry.outcome is None:
                self._entries[identity] = replace(
                    entry, outcome="still running (on devices not granted)"
                )
        return tuple(self._entries.values())
