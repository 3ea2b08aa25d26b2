"""The lifecycle verdict: "clean or not, and why", derived from a raw run record alone.

Pure and stdlib only (no I/O, nothing else of ``run/``), so receipts, ``verify`` and the
launcher all reach the same verdict from the same record, and a summary can never contradict it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard


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
        return _verdict(
            reasons,
            {
                "processes": 0,
                "forced": 0,
                "failed": 0,
                "leftovers": 0,
                "sigterm_stops": 0,
                "unobserved": 0,
                "exited_zero": 0,
            },
        )
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
    stop_sigterms = [
        s
        for s in _maps(record.get("signals"))
        if s.get("signal") == "SIGTERM" and not s.get("forced") and s.get("delivered")
    ]
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
        """('ok'|'sigterm'|'unobserved'|'exit'|'bad', problem) of one process alone."""
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
            if (
                sig == "SIGTERM"
                and isinstance(grace, (int, float))
                and isinstance(ended, (int, float))
                and any(
                    isinstance(s.get("at_seconds"), (int, float))
                    and s["at_seconds"] <= ended <= s["at_seconds"] + grace
                    for s in stop_sigterms
                )
            ):
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
            kind == "unobserved" and vouched(pindex, seen | {index})
        )

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
            kind, problem = (
                "bad",
                (
                    f"{label(proc)} disappeared without an observable exit status and no parent "
                    "in the record that ended cleanly accounts for it"
                ),
            )
        if kind == "sigterm":
            sigterm_n += 1
        if kind == "ok":
            zero_n += 1
        if kind == "bad":
            reasons.append(problem or f"{label(proc)} did not end cleanly")
            if proc.get("forced") is True or any(
                s.get("forced") for s in _maps(proc.get("signals_received"))
            ):
                forced_n += 1
            else:
                failed += 1

    recorded = set(by_pid)
    for entry in _maps(record.get("signals")):
        if entry.get("forced") and entry.get("delivered"):
            strangers = [p for p in entry.get("receivers") or [] if p not in recorded]
            if strangers:
                reasons.append(
                    f"forced {entry.get('signal')} ({entry.get('reason')}) reached "
                    f"pid {', '.join(map(str, strangers))}, which the record does "
                    "not account for"
                )
                forced_n += len(strangers)

    raw_left = record.get("leftovers") or []
    leftovers = raw_left if isinstance(raw_left, list) else [raw_left]
    for left in leftovers:
        if isinstance(left, Mapping):
            reasons.append(
                f"leftover pid {left.get('pid')} ({left.get('comm', '?')}): "
                f"{left.get('state', '?')}; {left.get('action', '?')}"
            )
        else:
            reasons.append(f"leftover: {left!r}")
    expected = record.get("workers_expected")
    if _is_int(expected):
        workers = sum(1 for p in procs if p.get("role") == "descendant")
        if workers < expected:
            reasons.append(f"{expected} workers were expected but {workers} were observed")
    counts = {
        "processes": len(procs),
        "forced": forced_n,
        "failed": failed,
        "leftovers": len(leftovers),
        "sigterm_stops": sigterm_n,
        "unobserved": unobserved_n,
        "exited_zero": zero_n,
        "handled": len(handled),
    }
    return _verdict(reasons, counts, handled)


def _maps(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _verdict(
    reasons: list[str], counts: dict[str, int], handled: Sequence[str] = ()
) -> dict[str, Any]:
    clean = not reasons
    tally = (
        f"{_count(counts['processes'], 'process')}: {counts['forced']} forced, "
        f"{counts['failed']} failed, {_count(counts['leftovers'], 'leftover')}"
    )
    if clean:
        parts = [f"{counts['exited_zero']} exited 0"]
        if counts["sigterm_stops"]:
            parts.append(f"{counts['sigterm_stops']} ended by our stop SIGTERM within the grace")
        if counts["unobserved"]:
            parts.append(
                f"{counts['unobserved']} reaped by their own parent (exit status not observable)"
            )
        parts += list(handled)
        summary = f"clean ({tally}): " + ", ".join(parts)
    else:
        summary = f"not clean ({tally}): " + "; ".join(reasons)
    return {"clean": clean, "reasons": reasons, "summary": summary, "counts": counts}
