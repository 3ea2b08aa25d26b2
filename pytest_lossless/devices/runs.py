"""The runs record of an allocation: every process known to belong to it, kept beside each
lock, so that a later session sees what an earlier allocation left running on a device.

A flock dies with the descriptors that hold it, and a daemon may close every descriptor it
has: the lock alone cannot say that a device is still in use. The launcher therefore reports
each run's processes (the main one, and every descendant its sampler finds by ancestry) to the
allocation, which rewrites this record atomically whenever the set changes. Nothing here is
trusted by a reader: a listed process counts only while ``/proc`` shows the same pid, start
time and owner as the record file's owner (:mod:`.orphans`).

One file per lock and per account, ``<lock stem>.runs.<uid>.json``: in a sticky folder nobody
can replace another account's file, so each account writes its own name, and a file whose
owner is not the uid its name says is planted, and is ignored and named.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.clock import utc_iso
from ..core.records import JsonObject, Record, meta
from ..errors import AllocationError
from .locks import (
    FULL,
    HolderRecord,
    LockDir,
    LockFileError,
    _file_stem,
    _kind,
    _shown,
    _write_json_atomic,
    read_owned_record,
)

RUNS_SCHEMA = "pytest-lossless.runs"
#: A runs record lists at most this many processes (the live ones); it stays far below
#: :data:`RUNS_LIMIT`, the most a reader reads.
MAX_LISTED = 512
RUNS_LIMIT = 256 * 1024
COMMAND_LIMIT = 160
#: A folder holding more entries than this is a flood: nothing is granted from it (fail closed).
SCAN_LIMIT = 20000

_NAME = re.compile(r"(?P<stem>.+)\.runs\.(?P<uid>[0-9]{1,10})\.json\Z")


def runs_path(lock_dir: LockDir, lock_key: str, uid: int) -> Path:
    """Where account ``uid`` keeps the runs record of the lock ``lock_key``."""
    return lock_dir.path / f"{_file_stem(lock_key)}.runs.{uid}.json"


def runs_problem(lock_dir: LockDir, lock_key: str) -> tuple[Path, str] | None:
    """(path, problem) when this account could not write its runs record of ``lock_key``
    (another account planted a file under its name), else None."""
    path = runs_path(lock_dir, lock_key, os.geteuid())
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return path, f"cannot be checked ({exc.strerror})"
    if info.st_uid != os.geteuid():
        return path, (
            f"is {'a file' if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)} owned by "
            f"uid {info.st_uid}, planted under your name: the runs of this device could not "
            "be recorded"
        )
    if stat.S_ISDIR(info.st_mode):
        return path, "is a folder: the runs of this device could not be recorded"
    return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Listed:
    """One process a runs record names (nothing believed yet)."""

    pid: int
    start: int
    pgid: int | None
    sid: int | None
    comm: str
    command: str
    run: str | None


@dataclass(frozen=True)
class ListedRun(Record):
    """One process this account's allocation lists in its runs record (as written: its
    run, its role there, and the command it runs), and what the receipt's ``left_running``
    names when it outlived its allocation."""

    pid: int
    start: int
    pgid: int | None
    sid: int | None
    ppid: int | None
    comm: str = field(metadata=meta(absent="?"))
    command: str = field(metadata=meta(absent=""))
    run: str = field(metadata=meta(absent=""))
    role: str = field(metadata=meta(absent="descendant"))


@dataclass(frozen=True, slots=True)
class Member:
    """A live process of a run, as the launcher reports it to the runs record (pgid, sid and
    ppid None where not known)."""

    pid: int
    start: int
    pgid: int | None
    sid: int | None
    ppid: int | None
    comm: str = "?"
    argv: tuple[str, ...] = ()
    role: str = "descendant"


@dataclass(frozen=True)
class RunsHolder(Record):
    """The process that holds the allocation a runs record belongs to."""

    pid: int
    pid_start: int | None


@dataclass(frozen=True)
class RunsDocument(Record):
    """A runs record as this account writes it (read back by :func:`parse_runs`, which trusts
    none of it)."""

    host: str
    holder: RunsHolder
    test: str
    since: str
    locks: tuple[str, ...]
    uid: int
    released_at: str | None
    processes: tuple[ListedRun, ...]
    not_listed: int
    schema: str = RUNS_SCHEMA
    version: int = 1


@dataclass(frozen=True)
class RunsRecord:
    """A runs record as read: who wrote it (``owner``, the file's uid), for which test, and
    the processes it lists. ``released``: the allocation ended (its leftovers stay listed)."""

    path: Path
    owner: int
    host: str
    holder_pid: int | None
    holder_start: int | None
    test: str
    since: str
    released: bool
    processes: tuple[Listed, ...]

    @property
    def first_start(self) -> int | None:
        starts = [p.start for p in self.processes]
        return min(starts) if starts else None


def _listed(entry: object) -> Listed | None:
    if not isinstance(entry, Mapping):
        return None
    pid, start = _int(entry.get("pid")), _int(entry.get("start"))
    if pid is None or start is None or pid <= 0:
        return None
    run = entry.get("run")
    # Every string is shown as a message may show it: a record is anyone's to forge.
    return Listed(
        pid,
        start,
        _int(entry.get("pgid")),
        _int(entry.get("sid")),
        _shown(str(entry.get("comm", "?")), 64),
        _shown(str(entry.get("command", "")), COMMAND_LIMIT),
        _shown(run, 64) if isinstance(run, str) else None,
    )


def parse_runs(path: Path, owner: int, value: JsonObject) -> RunsRecord | str:
    """A :class:`RunsRecord` from a record's JSON, or why it is not one."""
    if value.get("schema") != RUNS_SCHEMA:
        return f"is not a runs record (schema {value.get('schema')!r})"
    holder = value.get("holder")
    holder = holder if isinstance(holder, Mapping) else {}
    raw = value.get("processes")
    if not isinstance(raw, list):
        return "lists no processes"
    listed = [p for p in (_listed(e) for e in raw[: MAX_LISTED * 2]) if p is not None]
    return RunsRecord(
        path=path,
        owner=owner,
        host=str(value.get("host", "")),
        holder_pid=_int(holder.get("pid")),
        holder_start=_int(holder.get("pid_start")),
        test=_shown(str(value.get("test", "?")), 1024),
        since=_shown(str(value.get("since", "?")), 64),
        released=value.get("released_at") is not None,
        processes=tuple(listed),
    )


def read_runs(
    lock_dir: LockDir, lock_keys: Iterable[str]
) -> tuple[dict[str, list[RunsRecord]], list[str]]:
    """Every account's runs record of each of ``lock_keys``, by key, and one line per file
    that is ignored (planted, not a regular file, unreadable, malformed)."""
    by_stem = {_file_stem(key): key for key in lock_keys}
    found: dict[str, list[RunsRecord]] = {key: [] for key in by_stem.values()}
    problems: list[str] = []
    try:
        entries = os.scandir(lock_dir.path)
    except OSError:
        return found, problems
    with entries:
        for count, entry in enumerate(entries):
            if count >= SCAN_LIMIT:
                # Fail closed: an unread runs record may name a process still running on a
                # device. A co-tenant can flood a sticky folder; only they (or root) can empty it.
                raise AllocationError(
                    f"the device lock folder {lock_dir.path} holds over {SCAN_LIMIT} entries, so "
                    "the runs records of earlier allocations cannot all be read: no device is "
                    "granted from it (a process an earlier session left running could be missed). "
                    "Ask whoever owns the extra files to remove them (ls -la shows them), or "
                    "choose another folder with --lossless-lock-dir",
                    lock_dir=str(lock_dir.path),
                )
            match = _NAME.match(entry.name)
            if match is None or match["stem"] not in by_stem:
                continue
            key = by_stem[match["stem"]]
            path = Path(entry.path)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            named = int(match["uid"])
            if not stat.S_ISREG(info.st_mode):
                problems.append(f"{entry.name} is {_kind(info.st_mode)}; ignored")
                continue
            if info.st_uid != named:
                problems.append(
                    f"{entry.name} belongs to uid {info.st_uid}, not uid {named} as its name "
                    "says (planted); ignored"
                )
                continue
            value, problem, owner = read_owned_record(path, RUNS_LIMIT)
            if problem is not None:
                problems.append(f"{entry.name} {problem}; ignored")
                continue
            if value is None or owner is None:
                continue  # removed meanwhile
            if owner != named:
                problems.append(f"{entry.name} changed owner while read; ignored")
                continue
            record = parse_runs(path, owner, value)
            if isinstance(record, str):
                problems.append(f"{entry.name} {record}; ignored")
            else:
                found[key].append(record)
    return found, problems


def clear_stale(records: Sequence[RunsRecord]) -> None:
    """Remove this account's records among ``records`` (of a device whose lock this process
    holds, in which nothing runs any more): stale, they would be searched again and again."""
    me = os.geteuid()
    for record in records:
        if record.owner == me:
            with contextlib.suppress(OSError):
                record.path.unlink()


class RunsLedger:
    """Writes the runs record of one allocation, one file per lock, and keeps it true.

    :meth:`open` writes the first (empty) record while the locks are being granted: a device
    whose record cannot be written cannot be protected, and is refused like an unusable
    lock file. :meth:`note` replaces one run's list of live processes (called from the
    launcher's sampler threads) and rewrites the files when it changed. :meth:`close`, at
    release, keeps only what still runs: the files are removed when nothing does, else they
    stay, marked released, so that no later allocation is granted while it lives.
    """

    def __init__(
        self,
        lock_dir: LockDir,
        keys: Sequence[str],
        holder: HolderRecord,
        *,
        alive: Callable[[int, int], bool],
    ) -> None:
        self.lock_dir = lock_dir
        self.keys = tuple(keys)
        self.uid = os.geteuid()
        self.paths = tuple(runs_path(lock_dir, key, self.uid) for key in self.keys)
        self._holder = holder
        self._alive = alive
        self._runs: dict[str, list[ListedRun]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._released_at: str | None = None
        self.problems: list[str] = []

    def _document(self) -> RunsDocument:
        listed: list[ListedRun] = []
        seen: set[tuple[int, int]] = set()
        size = 0
        left_out = 0
        for entries in self._runs.values():
            for entry in entries:
                identity = (entry.pid, entry.start)
                if identity in seen:
                    continue
                seen.add(identity)
                # A reader reads at most RUNS_LIMIT bytes: past half of it, processes are
                # counted, not listed (their sessions and groups are still searched).
                size += len(json.dumps(entry.to_json())) + 2
                if len(listed) >= MAX_LISTED or size > RUNS_LIMIT // 2:
                    left_out += 1
                else:
                    listed.append(entry)
        holder = self._holder
        return RunsDocument(
            host=holder.host,
            holder=RunsHolder(holder.pid, holder.pid_start),
            test=holder.test,
            since=holder.since,
            locks=self.keys,
            uid=self.uid,
            released_at=self._released_at,
            processes=tuple(listed),
            not_listed=left_out,
        )

    def _write(self, *, strict: bool) -> None:
        document = self._document()
        for path in self.paths:
            try:
                _write_json_atomic(path, document)
            except OSError as exc:
                problem = _write_problem(path, exc)
                if strict:
                    raise LockFileError(path, problem, full=exc.errno in FULL) from None
                if f"{path} {problem}" not in self.problems:
                    self.problems.append(f"{path} {problem}")

    def open(self) -> None:
        """Write the first record; :class:`LockFileError` when a file cannot be written."""
        with self._lock:
            self._write(strict=True)

    def note(self, run: str, processes: Sequence[Member]) -> None:
        """Replace the live processes of ``run`` (pid, start, pgid, sid, comm, argv)."""
        entries = [_entry(run, p) for p in processes]
        with self._lock:
            if self._closed or self._runs.get(run, []) == entries:
                return
            if entries:
                self._runs[run] = entries
            else:
                self._runs.pop(run, None)
            self._write(strict=False)

    def close(self) -> tuple[ListedRun, ...]:
        """At release: the listed processes still alive (kept in the files, marked released),
        or none (the files are removed)."""
        with self._lock:
            self._closed = True
            for run, entries in list(self._runs.items()):
                living = [e for e in entries if self._alive(e.pid, e.start)]
                if living:
                    self._runs[run] = living
                else:
                    del self._runs[run]
            left = tuple(e for entries in self._runs.values() for e in entries)
            if left:
                self._released_at = utc_iso()
                self._write(strict=False)
            else:
                for path in self.paths:
                    with contextlib.suppress(OSError):
                        path.unlink()
            return left


def _write_problem(path: Path, exc: OSError) -> str:
    try:
        owner = os.lstat(path).st_uid
    except OSError:
        return f"cannot be written ({exc.strerror})"
    if owner != os.geteuid():
        return (
            f"is owned by uid {owner}: planted under your name, it cannot be replaced "
            f"({exc.strerror})"
        )
    return f"cannot be written ({exc.strerror})"


def _entry(run: str, process: Member) -> ListedRun:
    return ListedRun(
        pid=process.pid,
        start=process.start,
        pgid=process.pgid,
        sid=process.sid,
        ppid=process.ppid,
        comm=process.comm[:64],
        command=" ".join(process.argv)[:COMMAND_LIMIT],
        run=run,
        role=process.role,
    )
