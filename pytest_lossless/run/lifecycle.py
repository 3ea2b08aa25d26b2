"""The lifecycle verdict: "clean or not, and why", derived from a raw run record alone.

Pure and stdlib only (no I/O), so receipts, ``verify`` and the launcher all reach the same
verdict from the same record, and a summary can never contradict it. A record read from JSON is
parsed once (:meth:`RunRecord.from_json`, lenient with a hand-edited one); the verdict judges
typed data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.records import Record
from .record import ProcessRecord, RunRecord

#: How one process ended, taken alone: well (``ok``: exit 0; ``sigterm``: our stop's SIGTERM
#: within the grace), ``unobserved`` (reaped by its own parent), or not (``exit``: a failure a
#: clean parent may have handled; ``bad``).
_WELL = ("ok", "sigterm")


@dataclass(frozen=True, slots=True)
class LifecycleCounts(Record):
    """The tally of a lifecycle verdict."""

    processes: int = 0
    forced: int = 0
    failed: int = 0
    leftovers: int = 0
    sigterm_stops: int = 0
    unobserved: int = 0
    exited_zero: int = 0
    handled: int = 0


@dataclass(frozen=True, slots=True)
class Lifecycle(Record):
    """Clean or not, the reasons (one sentence each), the generated summary and the tally."""

    clean: bool
    reasons: tuple[str, ...]
    summary: str
    counts: LifecycleCounts


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


def lifecycle_verdict(record: RunRecord | Mapping[str, Any]) -> Lifecycle:
    """Clean or not, and why, derived from a raw run record alone (pure; never trusts a
    verdict stored in the record; a mapping is read with :meth:`RunRecord.from_json`).

    Clean iff at least one process was recorded, no run error or timeout, no leftovers,
    no process forced (no forced signal received), and every process ended well: exit
    code 0; or SIGTERM within the grace period after the non-forced stop SIGTERM we sent
    (a server using SIGTERM's default action, or a worker it forwarded the stop to); or,
    for a process whose exit status could not be observed because its own parent reaped
    it ("disappeared"), the parent that last held it (``ppid_last``) is in the record and
    itself ended well (it reaped the process and is accountable for it).
    """
    run = record if isinstance(record, RunRecord) else RunRecord.from_json(record)
    return _Judge(run).verdict()


class _Judge:
    """One judgement of one record (the pieces the rules share)."""

    def __init__(self, run: RunRecord) -> None:
        self.run = run
        self.procs = run.processes
        self.by_pid: dict[int, int] = {}
        for index, proc in enumerate(self.procs):
            if proc.pid is not None:
                self.by_pid.setdefault(proc.pid, index)
        self.grace = run.stop.grace_seconds if run.stop is not None else None
        self.stop_sigterms = [
            s.at_seconds
            for s in run.signals
            if s.signal == "SIGTERM" and not s.forced and s.delivered and s.at_seconds is not None
        ]
        self.status = [self.own(p) for p in self.procs]

    def own(self, proc: ProcessRecord) -> tuple[str, str | None]:
        """('ok'|'sigterm'|'unobserved'|'exit'|'bad', problem) of one process alone."""
        if proc.was_forced:
            forced = [s for s in proc.signals_received if s.forced]
            names = ", ".join(f"{s.signal} ({s.reason})" for s in forced)
            return "bad", f"{proc.label} was forced: {names or 'marked forced'}"
        if proc.observed == "alive":
            return "bad", f"{proc.label} was still running when the record was closed"
        if proc.signal:
            ended, grace = proc.ended_seconds, self.grace
            if (
                proc.signal == "SIGTERM"
                and grace is not None
                and ended is not None
                and any(at <= ended <= at + grace for at in self.stop_sigterms)
            ):
                return "sigterm", None
            return "exit", f"{proc.label} was killed by signal {proc.signal}"
        if proc.exit_code is not None:
            if proc.exit_code == 0:
                return "ok", None
            return "exit", f"{proc.label} exited with code {proc.exit_code}"
        if proc.observed == "disappeared":
            return "unobserved", None
        return "bad", f"{proc.label} has no recorded exit status"

    def vouched(self, index: int, seen: frozenset[int]) -> bool:
        """Whether the parent that last held process ``index`` is recorded and ended well."""
        ppid = self.procs[index].ppid_last
        pindex = self.by_pid.get(ppid) if ppid is not None else None
        if pindex is None or pindex in seen:
            return False
        kind = self.status[pindex][0]
        return kind in _WELL or (kind == "unobserved" and self.vouched(pindex, seen | {index}))

    def verdict(self) -> Lifecycle:
        run = self.run
        reasons = list(run.problems)
        if not self.procs:
            reasons.append("no process was recorded: nothing ran, or the record is incomplete")
        if run.error:
            reasons.append(f"the run failed: {run.error}")
        if run.timed_out:
            reasons.append(f"timed out after {run.timeout_seconds} s")
        if run.kind == "server" and run.error is None:
            if run.stop is None:
                reasons.append("the server was never stopped")
            elif not run.stop.main_alive:
                reasons.append("the server had already exited before it was stopped")
        tally: dict[str, int] = dict.fromkeys(
            ("failed", "forced", "sigterm", "unobserved", "ok"), 0
        )
        handled: list[str] = []
        for index, proc in enumerate(self.procs):
            kind, problem = self.status[index]
            alone = frozenset({index})
            if kind == "exit":
                # A child that failed while a recorded parent, which ended cleanly, was there
                # to reap it is that parent's business. Whether we saw its exit status or not
                # depends only on how fast the parent reaped it; the verdict must not.
                if proc.role == "descendant" and self.vouched(index, alone):
                    handled.append(f"{problem}, handled by its parent pid {proc.ppid_last}")
                    continue
                kind = "bad"
            if kind == "unobserved":
                if self.vouched(index, alone):
                    tally["unobserved"] += 1
                    continue
                kind, problem = (
                    "bad",
                    (
                        f"{proc.label} disappeared without an observable exit status and no parent "
                        "in the record that ended cleanly accounts for it"
                    ),
                )
            if kind == "bad":
                reasons.append(problem or f"{proc.label} did not end cleanly")
                kind = "forced" if proc.was_forced else "failed"
            tally[kind] += 1
        for entry in run.signals:
            if entry.forced and entry.delivered:
                strangers = [p for p in entry.receivers if p not in self.by_pid]
                if strangers:
                    reasons.append(
                        f"forced {entry.signal} ({entry.reason}) reached "
                        f"pid {', '.join(map(str, strangers))}, which the record does "
                        "not account for"
                    )
                    tally["forced"] += len(strangers)
        for left in run.leftovers:
            reasons.append(
                f"leftover pid {left.pid} ({left.comm or '?'}): "
                f"{left.state or '?'}; {left.action or '?'}"
            )
        expected = run.server.workers_expected if run.server is not None else None
        if expected is not None:
            workers = sum(1 for p in self.procs if p.role == "descendant")
            if workers < expected:
                reasons.append(f"{expected} workers were expected but {workers} were observed")
        counts = LifecycleCounts(
            processes=len(self.procs),
            forced=tally["forced"],
            failed=tally["failed"],
            leftovers=len(run.leftovers),
            sigterm_stops=tally["sigterm"],
            unobserved=tally["unobserved"],
            exited_zero=tally["ok"],
            handled=len(handled),
        )
        return Lifecycle(not reasons, tuple(reasons), _summary(reasons, counts, handled), counts)


def _summary(reasons: list[str], counts: LifecycleCounts, handled: list[str]) -> str:
    tally = (
        f"{_count(counts.processes, 'process')}: {counts.forced} forced, "
        f"{counts.failed} failed, {_count(counts.leftovers, 'leftover')}"
    )
    if reasons:
        return f"not clean ({tally}): " + "; ".join(reasons)
    parts = [f"{counts.exited_zero} exited 0"]
    if counts.sigterm_stops:
        parts.append(f"{counts.sigterm_stops} ended by our stop SIGTERM within the grace")
    if counts.unobserved:
        parts.append(f"{counts.unobserved} reaped by their own parent (exit status not observable)")
    parts += handled
    return f"clean ({tally}): " + ", ".join(parts)
