"""Host-wide device locks: one ``flock(2)`` per device in a shared folder, named by the
device's stable identity, with a JSON holder record beside each lock for humans to read.

Locks use ``fcntl.flock`` directly rather than :mod:`filelock`: the lock file is opened
read-only (so lock files created by another user of a shared host still lock), never
deleted (so every process always locks the same inode), and the descriptor is held for
exactly the allocation's lifetime; those are the only semantics needed, and they are the
same across every filelock release. The kernel drops a flock when its holder dies, even
by SIGKILL, so a killed holder frees its devices at once; the holder record is only a
description and never decides anything.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.clock import utc_iso
from ..core.procfs import process_stat
from ..errors import AllocationError


def _file_stem(lock_key: str) -> str:
    """The lock's file name stem: each character outside ``[A-Za-z0-9._-]`` becomes ``_``.

    Not :func:`~pytest_lossless.core.digests.safe_name`, which folds runs, strips ``_`` and
    trailing dots and shortens long names: every pytest-lossless on a host must name one
    device's lock file alike, or two releases would hold one device at once.
    """
    return re.sub(r"[^A-Za-z0-9._-]", "_", lock_key).lstrip(".") or "_"


class Flock:
    """One ``flock(2)`` held through one open file description (never inherited)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self, *, shared: bool = False) -> bool:
        try:
            # An existing file is opened without O_CREAT: with fs.protected_regular=1, O_CREAT
            # on another user's file in a world-writable folder fails even when it exists.
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        if not self._still_named(fd):
            # The file was deleted or replaced between open and flock: a lock on an unlinked
            # file excludes nobody. Try again on the file the path names now.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            return False
        with contextlib.suppress(OSError):  # only the creator may widen it; others need not
            if os.fstat(fd).st_uid == os.getuid():
                os.fchmod(fd, 0o666)
        self._fd = fd
        return True

    @property
    def held(self) -> bool:
        return self._fd is not None

    @property
    def inode(self) -> int | None:
        return os.fstat(self._fd).st_ino if self._fd is not None else None

    def _still_named(self, fd: int) -> bool:
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def _write_json_atomic(path: Path, record: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``record`` as one JSON line, readable by every user.

    Not :func:`~pytest_lossless.core.digests.write_json_atomic`: its temporary file, and so
    the record, is private to its owner (mode 0600), and other users' jobs on the host read
    these records to see who holds a device and whether a lock file was replaced.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{random.getrandbits(32):08x}.tmp")
    try:
        tmp.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot: with the pid, it names one
    process, even after the pid is reused."""
    stat = process_stat(pid)
    return stat.starttime if stat is not None else None


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists, by signal 0: unlike a read of ``/proc``, it still sees another
    user's process where ``/proc`` is mounted with ``hidepid``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_record(test: str, locks: Sequence[str], *, host: str, now: float) -> dict[str, Any]:
    """What a holder record says: this process (pid and start time), host, test, since when,
    and the locks it took."""
    return {
        "pid": os.getpid(),
        "pid_start": _process_start(os.getpid()),
        "host": host,
        "test": test,
        "since": utc_iso(now),
        "since_epoch": now,
        "locks": list(locks),
    }


class LockDir:
    """The host-wide folder of device locks and their holder records."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def ensure(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AllocationError(
                f"cannot create the device lock folder {self.path}: {exc.strerror}; "
                "choose another with --lossless-lock-dir",
                lock_dir=str(self.path),
            ) from None
        with contextlib.suppress(OSError):  # shared by every user's jobs on this host
            if self.path.stat().st_uid == os.getuid():
                # Not sticky: other users' jobs must be able to replace holder records here.
                # A lock file deleted while held is caught by the inode in its holder record.
                self.path.chmod(0o777)

    def lock(self, lock_key: str) -> Flock:
        return Flock(self.path / f"{_file_stem(lock_key)}.lock")

    def record_path(self, lock_key: str) -> Path:
        return self.path / f"{_file_stem(lock_key)}.holder.json"

    def write_record(self, lock_key: str, record: Mapping[str, Any]) -> None:
        with contextlib.suppress(OSError):  # a description only: never fail a test over it
            _write_json_atomic(self.record_path(lock_key), record)

    def clear_record(self, lock_key: str) -> None:
        with contextlib.suppress(OSError):
            self.record_path(lock_key).unlink()

    def replaced_under(self, lock_key: str, lock: Flock, host: str) -> bool:
        """True when a live holder's record names another lock file than the one just locked:
        the file was deleted while held (a tmp cleaner, say) and that holder still runs."""
        try:
            record = json.loads(self.record_path(lock_key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        pid, inode = record.get("pid"), record.get("lock_inode")
        if not (isinstance(pid, int) and isinstance(inode, int) and inode != lock.inode):
            return False
        if record.get("host") != host or not _pid_alive(pid):
            return False
        # A pid reused since the record was written is another process: the record is stale.
        started = record.get("pid_start")
        return started is None or started == _process_start(pid)

    def describe_holder(self, lock_key: str, host: str) -> str:
        """Who holds ``lock_key``, from its record, for a lock we just failed to take."""
        try:
            record = json.loads(self.record_path(lock_key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "held (no holder record yet)"
        pid = record.get("pid")
        where = f"pid {pid} on {record.get('host', '?')}"
        if record.get("host") == host and isinstance(pid, int) and not _pid_alive(pid):
            return f"held (record of {where} is stale: that process is gone)"
        return f"held by {where} ({record.get('test', '?')}, since {record.get('since', '?')})"
