"""Replacing a golden folder whole, one writer at a time, and recovering what a killed writer left.

While ``goldens/<module>/<test>/`` is updated, the module folder holds, hidden::

    .<test>.lock              an flock: one update (or recovery) of the folder at a time
    .<test>.tmp-<pid>-<hex>/  the work folder of one update
        owner.json            who made it: pid, process start time, boot id, host
        new/                  the staged golden folder, swapped into place whole
        old/                  the retired golden, only between the two renames of the fallback

The swap is one ``renameat2(RENAME_EXCHANGE)`` of ``new/`` and the live folder, so the live path
names a whole golden at every moment; where the kernel or the file system has no exchange, two
renames (live to ``old/``, ``new/`` to live) with recovery. The lock file is removed by its
holder before it unlocks; a waiter that then locks the removed file sees that the path no longer
names it and locks anew, so nothing is left among the goldens once an update is done.

What a killed writer leaves is recovered by the next run that touches the test, under the lock:
a retired golden whose live folder is missing is put back; work folders of owners that no longer
run are removed; each is one :class:`UpdateEvent` (``restored``, ``cleaned``, or ``kept`` with
the reason). Earlier versions left ``.<test>.tmp-<pid>-<hex>`` staging folders and
``.<test>.old-<pid>-<hex>`` retired folders or links, with the owner only in the name: recovered
alike.

Test only: ``PYTEST_LOSSLESS_FAULT`` names comma-separated points at which the process SIGKILLs
itself (``golden-staged``, ``golden-retired``, ``golden-swapped``), and ``no-exchange`` forces the
two-rename fallback; the fault suite (``tests/faults/``) uses it to kill real updates at each step.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import platform
import re
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import faults
from ..core.clock import utc_iso
from ..core.paths import fsync_dir, open_regular, read_regular
from ..core.procfs import process_stat
from ..core.records import Record, from_json, loads_bounded
from ..core.text import printable
from ..errors import GoldenError

#: Test only: where to stop this process during an update (see the module's docstring).
FAULT_ENV = faults.FAULT_ENV
#: The owner marker inside a work folder.
OWNER = "owner.json"
_OWNER_LIMIT = 4096
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
#: ``renameat2``'s system call number, for a C library that lacks the wrapper (glibc < 2.28).
_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "riscv64": 276, "ppc64le": 357, "s390x": 347}
_UNSUPPORTED = frozenset({errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


@dataclass
class UpdateEvent:
    """What ``--update-goldens`` did to one artifact (``created``, ``changed``, ``unchanged``,
    ``removed``, ``conflict``), or recovery did to one golden folder (``restored``, ``cleaned``,
    ``kept``; ``name`` is then empty)."""

    test: str
    folder: str
    name: str
    action: str
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "test": self.test,
            "folder": self.folder,
            "name": self.name,
            "action": self.action,
            "detail": self.detail,
        }


class GoldenUpdateError(GoldenError):
    """A golden folder that cannot be updated: its lock file, its module folder, or the
    replacement itself failed (``path``: the file or folder, ``problem``: what is wrong)."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(printable(f"{self.path} {problem}"))


class GoldenConflict(GoldenError):
    """Another session changed the golden folder while this test ran: nothing was written.

    ``started`` and ``found``: the state of its ``manifest.json`` when the test started and
    right before the swap (a SHA-256, None when absent); ``events``: one ``conflict`` per
    artifact the test staged.
    """

    def __init__(
        self, folder: Path, started: str | None, found: str | None, events: Sequence[UpdateEvent]
    ) -> None:
        self.folder = folder
        self.started = started
        self.found = found
        self.events = list(events)
        super().__init__(
            printable(
                f"golden folder {folder} was changed by another session while this test ran: its "
                f"manifest.json was {_state(started)} when the test started and is "
                f"{_state(found)} now. Nothing was written, so the other session's goldens stay "
                "as they are: review them, and run --update-goldens again for this test if they "
                "are not the ones to keep"
            )
        )


def _state(value: str | None) -> str:
    if value is None:
        return "absent"
    return f"sha256 {value[:12]}..." if re.fullmatch(r"[0-9a-f]{64}", value) else value


# ------------------------------------------------------------------ fault injection (test only)


def fault(point: str) -> None:
    """Test only: the fault point ``point`` of :mod:`pytest_lossless.core.faults`."""
    faults.point(point)


# ------------------------------------------------------------------ the lock


class FolderLock:
    """An exclusive ``flock`` on the lock file beside a golden folder (or the folder ``of``
    names: the export folder's claim uses it too), waited for up to ``timeout`` seconds. The
    file is opened like a device lock (``O_NOFOLLOW | O_NONBLOCK``, a regular file or an
    error: a planted link or FIFO is named, never followed or waited on), and removed by its
    holder at release. ``writable``: opened for writing, so its holder can name itself in it
    (:attr:`fd`)."""

    def __init__(
        self,
        path: Path,
        *,
        timeout: float,
        writable: bool = False,
        of: str = "the golden folder beside it",
    ) -> None:
        self.path = path
        self.timeout = timeout
        self.writable = writable
        self.of = of
        self._fd: int | None = None

    @property
    def fd(self) -> int | None:
        """The held lock file's descriptor (None: not held)."""
        return self._fd

    def acquire(self, *, wait: bool = True) -> bool:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                mode = os.O_RDWR if self.writable else os.O_RDONLY
                fd = open_regular(self.path, mode | os.O_CREAT, 0o644)
            except OSError as exc:
                raise GoldenUpdateError(
                    self.path,
                    f"{exc.strerror or exc}: it is the lock file of {self.of}, "
                    "and pytest-lossless neither follows nor waits on what it finds there. "
                    "Remove it (it is made again)",
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise GoldenUpdateError(
                        self.path, f"cannot be locked ({exc.strerror or exc})"
                    ) from None
                if not wait:
                    return False
                if time.monotonic() >= deadline:
                    raise GoldenUpdateError(
                        self.path,
                        f"is held by another session for more than {self.timeout:g} s (it is "
                        "updating the same golden folder); let it finish, or end it",
                    ) from None
                time.sleep(0.02)
                continue
            if _names(self.path, fd):
                self._fd = fd
                return True
            os.close(fd)  # removed by its last holder after this open: lock the path anew

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if _names(self.path, fd):
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(fd)  # closing the descriptor drops the flock

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        named = os.lstat(path)
    except OSError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


# ------------------------------------------------------------------ the replacement


def exchange(a: Path, b: Path) -> bool:
    """Swap the entries ``a`` and ``b`` in one step (``renameat2(RENAME_EXCHANGE)``); False
    where the kernel or the file system has no such call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    left, right = os.fsencode(a), os.fsencode(b)
    wrapper = getattr(libc, "renameat2", None)
    if wrapper is not None:
        wrapper.argtypes = [
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_uint,
        ]
        result = wrapper(_AT_FDCWD, left, _AT_FDCWD, right, _RENAME_EXCHANGE)
    else:
        number = _RENAMEAT2.get(platform.machine())
        if number is None:
            return False
        libc.syscall.restype = ctypes.c_long
        result = libc.syscall(
            ctypes.c_long(number),
            ctypes.c_int(_AT_FDCWD),
            left,
            ctypes.c_int(_AT_FDCWD),
            right,
            ctypes.c_uint(_RENAME_EXCHANGE),
        )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


@dataclass(frozen=True, slots=True)
class FolderOwner(Record):
    """Who a work folder belongs to (its :data:`OWNER` marker): the process (pid and start
    time: with both, one process even after the pid is reused), the boot and the host."""

    pid: int
    start: int | None
    boot_id: str | None
    host: str
    since: str | None = None

    @classmethod
    def read(cls, path: Path) -> FolderOwner | None:
        """The owner marker at ``path``, or None when missing or not one."""
        try:
            found = from_json(
                cls, loads_bounded(read_regular(path, limit=_OWNER_LIMIT), max_depth=2)
            )
        except (OSError, ValueError):  # a RecordError is a ValueError
            return None
        return found if found.pid > 0 else None


def owner_record(pid: int | None = None) -> FolderOwner:
    """This process (or ``pid``) as the owner of a work folder it writes."""
    pid = os.getpid() if pid is None else pid
    found = process_stat(pid)
    start = found.starttime if found is not None else None
    return FolderOwner(pid, start, _boot_id(), socket.gethostname(), utc_iso())


def replace_folder(path: Path, fill: Callable[[Path], None]) -> None:
    """Put the folder that ``fill(folder)`` makes at ``path``, whole, in one step.

    The caller holds the folder's :class:`FolderLock`. A failure leaves the live folder as it
    was (put back if the fallback had retired it); a kill leaves a work folder that
    :func:`recover` restores from or removes.
    """
    work = path.parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(work)
    retired = work / "old"
    try:
        _write_owner(work / OWNER)
        staged = work / "new"
        os.mkdir(staged)
        fill(staged)
        fsync_dir(staged)
        fault("golden-staged")
        if not os.path.lexists(path):
            os.rename(staged, path)
        elif faults.switch("no-exchange") or not exchange(staged, path):
            os.rename(path, retired)  # the live folder or link itself, never a link's target
            fault("golden-retired")
            os.rename(staged, path)
        fsync_dir(path.parent)
        fault("golden-swapped")
    except BaseException:
        if os.path.lexists(retired) and not os.path.lexists(path):
            with contextlib.suppress(OSError):  # else left for recover(), which puts it back
                os.rename(retired, path)
        raise
    finally:
        if os.path.lexists(path) or not os.path.lexists(retired):  # else the only golden left
            with contextlib.suppress(OSError):  # else left for recover(), which removes it
                _remove(work)


def _write_owner(path: Path) -> None:
    data = json.dumps(owner_record().to_json(), sort_keys=True).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    """Remove a file, a link (never its target) or a folder tree (rmtree follows no link)."""
    if stat.S_ISDIR(os.lstat(path).st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


# ------------------------------------------------------------------ recovery


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(name)}\.(tmp|old)-([0-9]{{1,10}})-[0-9a-f]{{8}}")


def has_strays(path: Path) -> bool:
    """Whether anything a writer left lies beside the golden folder ``path`` (a cheap look)."""
    return bool(_strays(path)) or os.path.lexists(lock_path(path))


def lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def _strays(path: Path) -> list[tuple[str, str, int]]:
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    pattern, prefix = _pattern(path.name), f".{path.name}."
    found = []
    for name in names:
        match = pattern.fullmatch(name) if name.startswith(prefix) else None
        if match is not None:
            found.append((name, match.group(1), int(match.group(2))))
    return sorted(found)


@dataclass
class _Stray:
    path: Path
    kind: str  # "tmp": a work or staging folder; "old": a retired folder or link (earlier)
    pid: int
    owner: FolderOwner | None
    retired: Path | None
    mtime: float

    @classmethod
    def read(cls, path: Path, kind: str, pid: int) -> _Stray:
        info = os.lstat(path)
        owner, retired = None, None
        if kind == "old":
            retired = path
        elif stat.S_ISDIR(info.st_mode):  # never looked into through a link
            owner = FolderOwner.read(path / OWNER)
            if os.path.lexists(path / "old"):
                retired = path / "old"
        return cls(path, kind, pid, owner, retired, info.st_mtime)

    def judge(self) -> tuple[str, str]:
        """(``dead``, ``alive`` or ``unknown``; who left it, in words)."""
        owner = self.owner
        if owner is None:
            alive = self.pid != os.getpid() and _exists(self.pid)  # this one holds the lock
            return ("alive" if alive else "dead"), f"pid {self.pid}"
        pid, host = owner.pid, owner.host
        who = f"pid {pid} on {host}" + (f" (since {owner.since})" if owner.since else "")
        if host != socket.gethostname():
            return "unknown", who
        boot = _boot_id()
        if owner.boot_id and boot and owner.boot_id != boot:
            return "dead", who + " before a reboot"
        found = process_stat(pid)
        if not _exists(pid) or (found is not None and found.state == "Z"):
            return "dead", who
        if found is not None and owner.start not in (None, found.starttime):
            return "dead", who  # the pid now names another process
        if pid == os.getpid():
            return "dead", who  # this process: not writing it, since the caller holds the lock
        return "alive", who

    def what(self) -> str:
        if self.kind == "old":
            return "retired link" if os.path.islink(self.path) else "retired golden folder"
        if self.retired is not None:
            return "work folder with the retired golden"
        return "work folder" if self.owner is not None else "staging folder"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another account's process
    return True


def recover(path: Path, *, test: str) -> list[UpdateEvent]:
    """Restore or remove what killed writers left beside the golden folder ``path``: one event
    per stray. The caller holds the folder's :class:`FolderLock`."""
    strays = []
    for name, kind, pid in _strays(path):
        try:
            strays.append(_Stray.read(path.parent / name, kind, pid))
        except OSError:
            continue  # gone meanwhile
    # A retired golden is put back first (the newest), while the live folder is missing.
    strays.sort(key=lambda s: (s.retired is None, -s.mtime))
    events = []
    for stray in strays:
        state, who = stray.judge()
        what, name = stray.what(), stray.path.name
        if state != "dead":
            why = (
                "still runs"
                if state == "alive"
                else "ran on another host, where this one cannot check it"
            )
            events.append(UpdateEvent(test, str(path), "", "kept", f"{name}: left by {who}, {why}"))
            continue
        restored = False
        try:
            if stray.retired is not None and not os.path.lexists(path):
                os.rename(stray.retired, path)
                restored = True
            if os.path.lexists(stray.path):
                _remove(stray.path)
        except OSError as exc:
            detail = f"{name}: {what} left by {who}, which no longer runs, cannot be recovered"
            events.append(
                UpdateEvent(test, str(path), "", "kept", f"{detail} ({exc.strerror or exc})")
            )
            continue
        if restored:
            detail = (
                f"the folder was missing: put back from {name}, where an update by {who} was "
                "killed between its two renames"
            )
            events.append(UpdateEvent(test, str(path), "", "restored", detail))
        else:
            detail = f"removed {name}, the {what} of an update by {who}, which no longer runs"
            events.append(UpdateEvent(test, str(path), "", "cleaned", detail))
    return events
