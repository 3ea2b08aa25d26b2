"""Host-wide device locks: one ``flock(2)`` per device in a shared folder, named by the
device's stable identity, with a JSON holder record beside each lock for humans to read.

Locks use ``fcntl.flock`` directly rather than :mod:`filelock`: the lock file is opened
read-only (so lock files created by another user of a shared host still lock), never
deleted (so every process always locks the same inode), and the descriptor is held for
exactly the allocation's lifetime. The kernel drops a flock when the last descriptor of it is
closed: the holder's, and those of the runs it started (which inherit it), so a SIGKILLed
holder frees its devices at once unless something it started still runs; what such a process
may have closed, the allocation's runs record still names (:mod:`.runs`, :mod:`.orphans`).

The folder is shared with every account on the host, so nothing in it is trusted
(docs/security.md): the folder must be sticky (like ``/tmp``) when others may write it, and
owned by the user or root; every lock and record file is opened with ``O_NOFOLLOW`` and
``O_NONBLOCK`` and checked to be a regular file; a mode is only ever set on a file just
created, through its descriptor. The lock is the truth and a holder record only a
description: a record is believed only while ``/proc/locks`` shows its process holding the
lock it names, and one that is not a small, well-formed JSON object is ignored and named.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pwd
import random
import re
import socket
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.clock import utc_iso
from ..core.procfs import process_stat
from ..core.records import JsonObject, Record, spec
from ..errors import AllocationError

#: Every open of a lock file or record: never through a symlink, never waiting on a FIFO,
#: close-on-exec (a held lock's descriptor reaches a run only when the launcher passes it).
_SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: ``flock`` needs only a read-only descriptor: every account reads a lock file, none writes.
LOCK_MODE = 0o644
RECORD_MODE = 0o644
#: The folder the plugin creates: like ``/tmp``, anyone may add a file, only its owner delete it.
FOLDER_MODE = 0o1777
#: A holder record is a few hundred bytes; anything past these bounds is not one.
RECORD_LIMIT = 64 * 1024
RECORD_DEPTH = 16
_TEST_LIMIT = 4096


#: errnos that say the lock folder's file system has no room: advice about space, not a file.
FULL = (errno.ENOSPC, errno.EDQUOT)


class LockFileError(AllocationError):
    """A lock file that cannot be used as one: a symlink, a FIFO or other non-regular file,
    or one that cannot be opened (``path``: the file, ``problem``: what is wrong with it).
    ``full``: it could not be made or written because the file system is full; the advice
    is then about space (the file does not exist, so there is nothing to remove)."""

    def __init__(self, path: Path, problem: str, *, full: bool = False) -> None:
        self.path = path
        self.problem = problem
        self.full = full
        if full:
            advice = (
                f"the file system of the lock folder {path.parent} is full (or over quota): "
                f"free space there (`df {path.parent}`), or choose another folder with "
                "--lossless-lock-dir"
            )
        else:
            advice = (
                "pytest-lossless neither follows nor waits on it. Remove it (in a sticky folder "
                "only its owner or root can), or choose another folder with --lossless-lock-dir"
            )
        super().__init__(f"lock file {path} {problem}: {advice}", lock_dir=str(path.parent))


def _file_stem(lock_key: str) -> str:
    """The lock's file name stem: each character outside ``[A-Za-z0-9._-]`` becomes ``_``.

    Not :func:`~pytest_lossless.core.paths.safe_name`, which folds runs, strips ``_`` and
    trailing dots and shortens long names: every pytest-lossless on a host must name one
    device's lock file alike, or two releases would hold one device at once.
    """
    return re.sub(r"[^A-Za-z0-9._-]", "_", lock_key).lstrip(".") or "_"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _open_problem(path: Path, exc: OSError) -> str:
    """Why ``open(path, O_NOFOLLOW | O_NONBLOCK)`` failed, in words."""
    if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: O_NOFOLLOW on a link, on BSDs
        try:
            # Whose link it is: in a sticky folder only that account (or root) can remove it.
            owner = _account(os.lstat(path).st_uid)
            return f"is a symbolic link to {os.readlink(path)}, planted by {owner}"
        except OSError:
            return "is a symbolic link"
    if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):
        return "is a socket or device, not a regular file"
    return f"cannot be opened ({exc.strerror})"


def _set_mode(fd: int, mode: int) -> None:
    """``mode`` on a file this process has just created (whatever the umask), by descriptor."""
    with contextlib.suppress(OSError):
        os.fchmod(fd, mode)


def _open_lock(path: Path) -> int:
    """A read-only descriptor of the regular file ``path``, made (``O_EXCL``) if missing."""
    for _ in range(8):
        try:
            fd = os.open(path, os.O_RDONLY | _SAFE)
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | _SAFE, LOCK_MODE)
            except FileExistsError:
                continue  # another job made it (or planted something) first: open that
            except OSError as exc:
                raise LockFileError(
                    path, f"cannot be created ({exc.strerror})", full=exc.errno in FULL
                ) from None
            _set_mode(fd, LOCK_MODE)
            return fd
        except OSError as exc:
            raise LockFileError(path, _open_problem(path, exc)) from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise LockFileError(path, f"is {_kind(mode)}, not a regular file")
        return fd
    raise LockFileError(path, "keeps appearing and disappearing")


#: The abstract socket names of guards start so (Linux's abstract namespace: no file at all).
GUARD_PREFIX = "pytest-lossless-guard-"


def guard_name(path: Path) -> str:
    """The abstract socket name that guards the lock file ``path``: a hash of its real path,
    so a folder deleted and made again at the same place (a tmp cleaner, then the next
    session) gets the same names, and two lock folders never share one."""
    real = os.path.realpath(path.parent) + "/" + path.name
    return GUARD_PREFIX + hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:40]


class Guard:
    """A name that no file system operation can take away: a Unix socket bound to an
    abstract name (Linux) for as long as a device lock is held, by every descriptor of it
    (the holder's, and the runs' that inherit it). A second bind fails while any is open,
    so a lock file deleted or replaced under its holder (a tmp cleaner) still excludes the
    next session: the new file's flock succeeds, the guard does not. Not Linux: no guard
    (``supported`` False), the lock file alone decides, as before."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._sock: socket.socket | None = None
        self.supported = True

    def try_acquire(self) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind("\0" + self.name)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                return False
            self.supported = False  # no abstract namespace here: the lock file decides
            return True
        self._sock = sock
        return True

    @property
    def fileno(self) -> int | None:
        return self._sock.fileno() if self._sock is not None else None

    def release(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sock.close()


def guard_holders(name: str, proc: Path = Path("/proc")) -> list[int] | None:
    """The pids (that this account may inspect) with a descriptor of the guard socket
    ``name``; None when ``/proc/net/unix`` cannot be read."""
    try:
        text = (proc / "net" / "unix").read_text(errors="replace")
    except OSError:
        return None
    inodes = {
        parts[6]
        for line in text.splitlines()[1:]
        if len(parts := line.split()) >= 8 and parts[7] == "@" + name
    }
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    pids: list[int] = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(proc / entry / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(proc / entry / "fd" / fd) in wanted:
                    pids.append(int(entry))
                    break
            except OSError:
                continue
    return sorted(pids)


class Flock:
    """One ``flock(2)`` held through one open file description.

    The descriptor is close-on-exec; the launcher hands it to each run it starts
    (:attr:`fileno`), so the flock stays held while any process of the run keeps it, even
    after this process died. :meth:`release` unlocks the description for all of them.

    The lock file's device and inode are recorded when it is taken: :meth:`check` says
    whether the path still names that file (a lock on a deleted file excludes nobody).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._guard: Guard | None = None
        #: Why the last :meth:`try_acquire` failed though the file's flock was free: its guard
        #: is still held (the file was deleted or replaced under a holder), or None.
        self.guarded: str | None = None

    def try_acquire(self, *, shared: bool = False) -> bool:
        """Take the lock without waiting: False when someone holds it.

        An exclusive lock also binds its :class:`Guard`: when the file's flock is free but
        the guard is not, the file was deleted or replaced while a holder held it, and the
        lock is refused (:attr:`guarded` says so): closed, never open, to a second holder.

        Raises :class:`LockFileError` when the path is not a regular file that can be opened.
        """
        self.guarded = None
        fd = _open_lock(self.path)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        held = os.fstat(fd)
        if not self._names(held):
            # The file was deleted or replaced between open and flock: a lock on an unlinked
            # file excludes nobody. Try again on the file the path names now.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            return False
        if not shared:
            guard = Guard(guard_name(self.path))
            if not guard.try_acquire():
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                holders = guard_holders(guard.name) or []
                who = f"pid {','.join(map(str, holders))}" if holders else "a process"
                who += self._recorded(holders)
                self.guarded = (
                    f"{self.path.name} was deleted or replaced while held: {who} still holds "
                    f"the device through its guard (abstract socket @{guard.name}); it is "
                    "free once that holder and every process it started have ended"
                )
                return False
            self._guard = guard
        self._fd = fd
        self._identity = (held.st_dev, held.st_ino)
        return True

    def _recorded(self, holders: Sequence[int]) -> str:
        """`` (test, since ...)`` from the holder record beside the lock, when its pid is
        among ``holders`` (a forged record names nobody who holds the guard)."""
        record, _ = read_record(self.path.with_name(self.path.name[:-5] + ".holder.json"))
        if record is None or record.get("pid") not in holders:
            return ""
        return f" ({_shown(record.get('test', '?'))}, since {_shown(record.get('since', '?'))})"

    @property
    def held(self) -> bool:
        return self._fd is not None

    @property
    def fileno(self) -> int | None:
        """The descriptor through which the lock is held, or None."""
        return self._fd

    @property
    def filenos(self) -> tuple[int, ...]:
        """Every descriptor that holds the lock (the file's and its guard's): a run inherits
        them all, so both stay held while any of its processes keeps them."""
        guard = self._guard.fileno if self._guard is not None else None
        return tuple(fd for fd in (self._fd, guard) if fd is not None)

    @property
    def inode(self) -> int | None:
        """The locked file's inode, recorded when it was taken."""
        return self._identity[1] if self._identity is not None else None

    @property
    def device(self) -> int | None:
        """The locked file's ``st_dev``, recorded when it was taken."""
        return self._identity[0] if self._identity is not None else None

    def _names(self, held: os.stat_result) -> bool:
        try:
            named = os.lstat(self.path)
        except FileNotFoundError:
            return False
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def check(self) -> str | None:
        """What happened to the held lock file: None while its path still names it."""
        if self._identity is None:
            return None
        device, inode = self._identity
        try:
            named = os.lstat(self.path)
        except FileNotFoundError:
            return f"{self.path} was deleted while held (the locked file was inode {inode})"
        except OSError as exc:
            return f"{self.path} cannot be checked ({exc.strerror})"
        if (named.st_dev, named.st_ino) != (device, inode):
            return (
                f"{self.path} was replaced while held (inode {inode} was locked; the path now "
                f"names inode {named.st_ino})"
            )
        return None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._identity = None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
                if self._guard is not None:
                    guard, self._guard = self._guard, None
                    guard.release()


# ------------------------------------------------------------------ holder records


def _write_json_atomic(path: Path, record: Record) -> None:
    """Replace ``path`` with ``record`` as one JSON line, readable by every user.

    Not :func:`~pytest_lossless.core.paths.write_json_atomic`: its temporary file, and so
    the record, is private to its owner (mode 0600), and other users' jobs on the host read
    these records to see who holds a device and whether a lock file was replaced. The
    temporary file is made with ``O_EXCL``; the rename replaces a planted link, never
    follows it.
    """
    data = (json.dumps(record.to_json(), sort_keys=True) + "\n").encode("utf-8")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{random.getrandbits(32):08x}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _SAFE, RECORD_MODE)
    try:
        try:
            _set_mode(fd, RECORD_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _nesting(text: str) -> int:
    """How deep the arrays and objects of JSON ``text`` nest (strings skipped), in one pass."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


_JSON_KIND = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


def read_record(path: Path) -> tuple[JsonObject | None, str | None]:
    """(record, None), (None, None) when there is none, or (None, why it is ignored). The
    record is another process's JSON, anyone's to forge: each value is checked where used.

    Bounded: a FIFO is never waited on, no more than :data:`RECORD_LIMIT` bytes are read, and
    nesting past :data:`RECORD_DEPTH` is refused before it reaches the JSON parser.
    """
    value, problem, _ = read_owned_record(path)
    return value, problem


def read_owned_record(
    path: Path, limit: int = RECORD_LIMIT
) -> tuple[JsonObject | None, str | None, int | None]:
    """:func:`read_record`, up to ``limit`` bytes, with the uid that owns the file read (by
    its descriptor, so the owner is the one of the bytes read)."""
    try:
        fd = os.open(path, os.O_RDONLY | _SAFE)
    except FileNotFoundError:
        return None, None, None
    except OSError as exc:
        return None, _open_problem(path, exc), None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, f"is {_kind(info.st_mode)}, not a regular file", info.st_uid
        if info.st_size > limit:
            return None, f"has {info.st_size} bytes, over the {limit} bytes of a record", None
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})", None
    finally:
        os.close(fd)
    if len(data) > limit:
        return None, f"has more than the {limit} bytes of a record", info.st_uid
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "is not UTF-8 text", info.st_uid
    if text.count("[") + text.count("{") > RECORD_DEPTH and _nesting(text) > RECORD_DEPTH:
        return None, f"is nested deeper than {RECORD_DEPTH} levels", info.st_uid
    try:
        value = json.loads(text)
    except ValueError as exc:
        return None, f"is not JSON ({getattr(exc, 'msg', exc)})", info.st_uid
    if not isinstance(value, dict):
        kind = _JSON_KIND.get(type(value), "a JSON value")
        return None, f"is {kind}, not a JSON object", info.st_uid
    return value, None, info.st_uid


def _shown(value: object, limit: int = 200) -> str:
    """A value from a record, as a message may show it: control characters escaped, short."""
    text = value if isinstance(value, str) else repr(value)
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[: limit + 1])
    return text if len(text) <= limit else text[:limit] + "..."


def _account(uid: int | None) -> str:
    """``user probeA (uid 1001)``, or ``uid 1001`` where the name is unknown."""
    if uid is None:
        return "an unknown account"
    try:
        return f"user {_shown(pwd.getpwuid(uid).pw_name, 64)} (uid {uid})"
    except (KeyError, OverflowError):
        return f"uid {uid}"


def _pids(pids: Iterable[int]) -> str:
    """``pid 8512 (user probeA (uid 1001))``: on a shared host, whom to ask is the point."""
    parts = []
    for pid in sorted(pids):
        uid = _proc_uid(pid)
        parts.append(f"{pid} ({_account(uid)})" if uid is not None else str(pid))
    return "pid " + ", ".join(parts)


def _proc_uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot: with the pid, it names one
    process, even after the pid is reused."""
    stat_ = process_stat(pid)
    return stat_.starttime if stat_ is not None else None


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists, by signal 0: unlike a read of ``/proc``, it still sees another
    user's process where ``/proc`` is mounted with ``hidepid``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def flock_holders(inode: int, proc_locks: Path = Path("/proc/locks")) -> set[int] | None:
    """The pids that hold a ``flock`` on a file of inode ``inode``, by ``/proc/locks``; None
    where it cannot be read (not Linux). Blocked waiters (``->``) hold nothing."""
    try:
        fd = os.open(proc_locks, os.O_RDONLY | _SAFE)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as stream:
            text = stream.read().decode("ascii", "replace")
    except OSError:
        return None
    pids: set[int] = set()
    for line in text.splitlines():
        # 1: FLOCK  ADVISORY  WRITE 21224 fe:00:2146386 0 EOF
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        where = parts[5].split(":")
        if len(where) == 3 and where[2] == str(inode) and parts[4].lstrip("-").isdigit():
            pids.add(int(parts[4]))
    return pids


@dataclass(frozen=True)
class HolderRecord(Record):
    """What a holder record (``<lock>.holder.json``) says: the process holding the lock
    (pid and start time), host, test, since when, the locks it took, and, for a device lock,
    the inode and device of the lock file it holds (so that a later taker sees that the file
    was replaced). Written by this process only; what is read back is another process's
    JSON, checked field by field where it is used (:meth:`LockDir.describe_holder`)."""

    pid: int
    pid_start: int | None
    host: str
    test: str
    since: str
    since_epoch: float
    locks: tuple[str, ...]
    lock_inode: int | None = spec(None, omit="none")
    lock_dev: int | None = spec(None, omit="none")


def holder_record(test: str, locks: Sequence[str], *, host: str, now: float) -> HolderRecord:
    """What a holder record says: this process (pid and start time), host, test, since when,
    and the locks it took."""
    return HolderRecord(
        pid=os.getpid(),
        pid_start=_process_start(os.getpid()),
        host=host,
        test=test[:_TEST_LIMIT],
        since=utc_iso(now),
        since_epoch=now,
        locks=tuple(locks),
    )


# ------------------------------------------------------------------ the folder


def _unsafe(path: Path, info: os.stat_result, me: int) -> str | None:
    """Why another account could delete or swap files in the folder ``path``, or None."""
    if info.st_uid not in (me, 0):
        you = "not root, who runs this" if me == 0 else f"neither you (uid {me}) nor root"
        return f"is owned by uid {info.st_uid}, {you}"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:
        who = "others" if mode & 0o002 else "its group"
        return f"is writable by {who} without the sticky bit (mode {mode:04o})"
    return None


class LockDir:
    """The host-wide folder of device locks and their holder records."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _refuse(self, problem: str, fix: str) -> AllocationError:
        return AllocationError(
            f"the device lock folder {self.path} {problem}: {fix}, or choose another folder "
            "with --lossless-lock-dir",
            lock_dir=str(self.path),
        )

    def ensure(self) -> None:
        """Check the folder (as ssh's StrictModes does) and make it, sticky, if missing.

        Refused: a folder that is a symlink, is owned by another account, or that another
        account may write without the sticky bit, and one inside such a folder.
        """
        path = Path(os.path.abspath(self.path))
        me = os.geteuid()
        self._check_parents(path, me)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            self._create(path, me)
            info = os.lstat(path)
        except OSError as exc:
            raise self._refuse(f"cannot be read ({exc.strerror})", "fix its parent") from None
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(path)
            raise self._refuse(
                f"is a symbolic link (to {target}); a lock folder must be a real folder",
                "remove the link",
            )
        if not stat.S_ISDIR(info.st_mode):
            raise self._refuse(f"is {_kind(info.st_mode)}, not a folder", "remove it")
        problem = _unsafe(path, info, me)
        if problem is not None and info.st_uid not in (me, 0):
            # The first account to run on a host made the default folder: a sticky bit does
            # not stop its owner deleting others' files, and only its owner or root can fix it.
            raise self._refuse(
                f"{problem}: its owner could delete your lock files and runs records while "
                "they are held",
                f"ask {_account(info.st_uid)} to remove it while none of their sessions runs "
                f"(pytest-lossless makes it again), or root to take it over (`chown root:root "
                f"{path}`; its mode stays {stat.S_IMODE(info.st_mode):04o}), or set up a group "
                "folder as docs/security.md says",
            )
        if problem is not None:
            raise self._refuse(
                f"{problem}: another account could delete a lock file while it is held",
                f"run `chmod +t {path}` as its owner (or remove it: pytest-lossless makes it "
                "again with mode 1777), or set up a group folder as docs/security.md says",
            )

    def _check_parents(self, path: Path, me: int) -> None:
        real = Path(os.path.realpath(path.parent))
        for parent in (real, *real.parents):
            try:
                info = os.stat(parent)
            except FileNotFoundError:
                continue  # made below, by us
            except OSError as exc:
                raise self._refuse(
                    f"cannot be reached: {parent}: {exc.strerror}", "fix that folder"
                ) from None
            problem = _unsafe(parent, info, me)
            if problem is not None:
                raise self._refuse(
                    f"is inside {parent}, which {problem}: another account could swap the "
                    "lock folder for its own",
                    "choose a folder whose parents only you or root may change",
                )

    def _create(self, path: Path, me: int) -> None:
        try:
            os.makedirs(path.parent, mode=0o755, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            return  # another job made it first: checked like any existing folder
        except OSError as exc:
            raise self._refuse(f"cannot be created ({exc.strerror})", "fix its parent") from None
        # The mode is set on the folder just made, through a descriptor of it.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _SAFE)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == me:
                os.fchmod(fd, FOLDER_MODE)
        finally:
            os.close(fd)

    def lock(self, lock_key: str) -> Flock:
        return Flock(self.path / f"{_file_stem(lock_key)}.lock")

    def record_path(self, lock_key: str) -> Path:
        return self.path / f"{_file_stem(lock_key)}.holder.json"

    def write_record(self, lock_key: str, record: HolderRecord) -> None:
        with contextlib.suppress(OSError):  # a description only: never fail a test over it
            _write_json_atomic(self.record_path(lock_key), record)

    def clear_record(self, lock_key: str) -> None:
        with contextlib.suppress(OSError):
            self.record_path(lock_key).unlink()

    def _holds(self, record: JsonObject, inode: int, host: str) -> bool:
        """Whether ``record``'s process, on this host, holds a flock on file ``inode`` now:
        by ``/proc/locks`` where it can be read, else by its pid and start time."""
        pid = record.get("pid")
        if record.get("host") != host or not isinstance(pid, int) or isinstance(pid, bool):
            return False
        if pid <= 0 or not _pid_alive(pid):
            return False
        started = record.get("pid_start")
        now = _process_start(pid)
        if started is not None and now is not None and started != now:
            return False  # the pid was reused since: another process
        holders = flock_holders(inode)
        # Without /proc/locks (not Linux), a live pid of the right start time is believed:
        # exclusivity first, where the lock cannot be checked.
        return holders is None or pid in holders

    def replaced_under(self, lock_key: str, lock: Flock, host: str) -> bool:
        """True when a live holder's record names another lock file than the one just locked,
        and that holder still locks it: the file was deleted while held (a tmp cleaner, say).
        A record whose process holds no such lock is forged or stale, and not believed."""
        record, _ = read_record(self.record_path(lock_key))
        if record is None:
            return False
        inode = record.get("lock_inode")
        if not isinstance(inode, int) or isinstance(inode, bool) or inode == lock.inode:
            return False
        return self._holds(record, inode, host)

    def describe_holder(self, lock_key: str, host: str) -> str:
        """Who holds ``lock_key``, for a lock we just failed to take: the record where
        ``/proc/locks`` confirms it, else the pid that does hold it, and why the record is
        not believed."""
        path = self.record_path(lock_key)
        try:
            inode: int | None = os.lstat(self.lock(lock_key).path).st_ino
        except OSError:
            inode = None
        holders = flock_holders(inode) if inode is not None else None
        real = _pids(holders) if holders else None
        record, problem, owner = read_owned_record(path)
        if problem is not None:
            return f"held{f' by {real}' if real else ''} ({path.name} {problem}; ignored)"
        if record is None:
            return f"held{f' by {real}' if real else ''} (no holder record yet)"
        pid = record.get("pid")
        where = f"pid {_shown(pid)} on {_shown(record.get('host', '?'))}"
        what = f"{_shown(record.get('test', '?'))}, since {_shown(record.get('since', '?'))}"
        alive = isinstance(pid, int) and pid > 0 and _pid_alive(pid)
        if record.get("host") == host and isinstance(pid, int) and not alive:
            # A stale record is not the holder: another account's stays (only its owner can
            # remove it from a sticky folder, and the new holder cannot replace it), so the
            # holder is named from /proc/locks, never hidden behind a dead pid.
            return (
                f"held{f' by {real}' if real else ''} (record of {where} is stale: that "
                f"process is gone; {path.name} is owned by {_account(owner)}, who can "
                "remove it)"
            )
        claimed = record.get("lock_inode", inode)
        if inode is not None and claimed == inode and self._holds(record, inode, host):
            return f"held by {where} ({_account(owner)}: {what})"
        if holders is None and record.get("host") != host:
            return f"held by {where} ({what}), by its record: another host's, not checked"
        return (
            f"held{f' by {real}' if real else ''} ({path.name} names {where} ({what}), "
            "which does not hold this lock; ignored)"
        )
