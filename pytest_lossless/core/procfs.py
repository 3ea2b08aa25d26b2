"""Reads of ``/proc``: a process's state, parents, start time, memory and command line.

Linux only. Both the allocator (is a lock holder still alive, and the same process?) and the
launcher (which descendants does a run have?) read processes here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int
    session: int
    starttime: int
    exit_status: int | None  # the wait status of a zombie (field 52), else None


def process_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed (state, parents, start time, a zombie's exit status)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    left, right = text.find("("), text.rfind(")")
    if left < 0 or right < 0:
        return None
    rest = text[right + 2 :].split()
    try:
        state = rest[0]
        exit_status = int(rest[49]) if state == "Z" and len(rest) > 49 else None
        return ProcStat(
            pid,
            text[left + 1 : right],
            state,
            int(rest[1]),
            int(rest[2]),
            int(rest[3]),
            int(rest[19]),
            exit_status,
        )
    except (IndexError, ValueError):
        return None


def scan_proc(skip: set[int] | frozenset[int] = frozenset()) -> dict[int, ProcStat]:
    """``/proc/<pid>/stat`` of every process, except the pids in ``skip``."""
    stats: dict[int, ProcStat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return stats
    for name in names:
        if name.isdigit() and int(name) not in skip:
            stat = process_stat(int(name))
            if stat is not None:
                stats[stat.pid] = stat
    return stats


def proc_numbers(path: str, keys: tuple[str, ...]) -> dict[str, int]:
    """The number after each of ``keys`` (``"Uid:"``, ``"btime"``) that begins a line of the
    ``/proc`` file ``path``; a key that is missing or unreadable is left out."""
    found: dict[str, int] = {}
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) > 1 and parts[0] in keys:
                    found[parts[0]] = int(parts[1])
    except (OSError, ValueError):
        pass
    return found


def read_memory_kib(pid: int) -> tuple[int | None, int | None]:
    """(VmHWM, VmRSS) in KiB; both None for zombies and vanished processes."""
    found = proc_numbers(f"/proc/{pid}/status", ("VmHWM:", "VmRSS:"))
    return found.get("VmHWM:"), found.get("VmRSS:")


def read_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace")[:200] for part in raw.split(b"\0") if part][:16]
