"""Paths inside the project stay inside it; files are opened without following or blocking,
written whole or not at all (:func:`write_atomic`, :func:`write_new`, with the fsyncs that make
a rename durable), and named safely (:func:`safe_name`).

A pull request can commit symbolic links: a module folder under ``goldens/`` that points at
``../../../elsewhere``, a ``lossless-receipts`` that points at a folder outside. Before the
plugin reads, writes or deletes under the rootdir, :func:`inside_root` walks the path and
refuses any component that is a link resolving outside it, naming the link and its target.
:func:`open_regular` opens with ``O_NOFOLLOW | O_NONBLOCK`` and checks the result is a regular
file, so a FIFO planted where the plugin reads or locks is an error, not a hang.

What is not defended: a path that a setting names outside the rootdir on purpose (an absolute
``--lossless-receipts``) is the user's choice and is not checked; a race in which another
process swaps a folder for a link between the check and the write (whoever can do that can
write the project's files directly).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..errors import LosslessError
from .text import printable

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
)


class PathOutsideRoot(LosslessError):
    """A component of a path the plugin would use is a symbolic link that leaves the rootdir.

    ``path`` is the path asked for, ``link`` its component that is a link, ``target`` what
    the link says (as ``readlink`` gives it), ``resolved`` where it leads, ``root`` the folder
    it leaves, ``what`` the path's role (``golden folder``, ``receipts folder``).
    """

    def __init__(
        self, path: Path, *, link: Path, target: str, resolved: Path, root: Path, what: str
    ) -> None:
        self.path = path
        self.link = link
        self.target = target
        self.resolved = resolved
        self.root = root
        self.what = what
        super().__init__(
            printable(
                f"{what} {path}: {link} is a symbolic link to {target!r} ({resolved}), which "
                f"leaves {root}. pytest-lossless never reads, writes or deletes through a link "
                "out of the project (a link committed in a pull request can point anywhere): "
                "replace the link with a real folder, or name the real place in the setting "
                "itself"
            )
        )


def is_under(path: Path | str, root: Path | str) -> bool:
    """Whether ``path`` is ``root`` or below it, lexically (``..`` resolved, links not)."""
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root))


def inside_root(path: Path | str, root: Path | str, *, what: str) -> Path:
    """``path`` made absolute, after proving that no existing component of it below ``root`` is
    a symbolic link that resolves outside ``root``; :class:`PathOutsideRoot` otherwise.

    Links that stay inside ``root`` are allowed. Components that do not exist yet end the walk:
    the plugin creates them as real folders. A ``path`` that is not below ``root`` at all was
    named so by a setting and is returned as it is.
    """
    base = Path(os.path.abspath(root))
    target = Path(os.path.abspath(path))
    if not target.is_relative_to(base):
        return target
    real_root = Path(os.path.realpath(base))
    current = base
    for part in target.relative_to(base).parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            break
        except NotADirectoryError:
            break  # creating below it fails with its own error
        if not stat.S_ISLNK(mode):
            continue
        resolved = Path(os.path.realpath(current))
        if not resolved.is_relative_to(real_root):
            raise PathOutsideRoot(
                target,
                link=current,
                target=os.readlink(current),
                resolved=resolved,
                root=base,
                what=what,
            )
    return target


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` is, in words (``a FIFO``, ``a directory``)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def open_regular(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
    """A descriptor of the regular file at ``path``, opened without following a final link and
    without blocking (a FIFO would block ``open`` until a writer comes). Raises ``OSError``
    with a plain reason for a link, a FIFO, a socket or a device; the caller closes the fd.
    """
    name = str(path)
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(name):
            raise OSError(exc.errno, "is a symbolic link, which is not followed", name) from None
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing
            raise OSError(exc.errno, "not a regular file", name) from None
        raise
    try:
        found = os.fstat(fd).st_mode
        if not stat.S_ISREG(found):
            raise OSError(errno.EINVAL, f"not a regular file ({file_kind(found)})", name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path | str, *, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (see :func:`open_regular`), at most ``limit``
    of them: a larger file is an ``OSError`` before anything is read."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise OSError(
                errno.EFBIG, f"larger than the limit of {_size(limit)} ({size} bytes)", str(path)
            )
        chunks, total = [], 0
        while block := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(block)
            total += len(block)
            if total > limit:  # it grew while being read
                raise OSError(errno.EFBIG, f"larger than the limit of {_size(limit)}", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count} bytes"


def folder_problem(path: Path | str, *, write: bool, create: bool = False) -> str | None:
    """Why ``path`` cannot serve as a folder the plugin reads (and, with ``write``, writes), in
    words, or None when it can.

    A missing folder is fine when it could be made: its nearest existing parent is a folder
    (writable, with ``write``); with ``create`` it is made now (parents too). Nothing else is
    created: writability is asked of the kernel (``access``), which also knows a read-only
    file system.
    """
    target = Path(os.path.abspath(path))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:
        mode = None  # a parent is a file: named below
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if mode is not None:
        if not stat.S_ISDIR(mode):
            return f"is {_what(mode)}, not a folder"
        return _access_problem(target, write=write)
    existing = target.parent
    while True:
        try:
            mode = os.stat(existing).st_mode
            break
        except (FileNotFoundError, NotADirectoryError):
            if existing == existing.parent:
                return "cannot be made: no part of it exists"
            existing = existing.parent
        except OSError as exc:
            return f"cannot be made: {existing}: {exc.strerror}"
    if not stat.S_ISDIR(mode):
        return f"cannot be made: {existing} is {_what(mode)}, not a folder"
    if create:
        try:
            os.makedirs(target, exist_ok=True)
        except OSError as exc:
            return f"cannot be made ({exc.strerror})"
        return _access_problem(target, write=write)
    problem = _access_problem(existing, write=write) if write else None
    return None if problem is None else f"cannot be made: {existing} {problem}"


def _what(mode: int) -> str:
    return "a file" if stat.S_ISREG(mode) else file_kind(mode)


def _access_problem(folder: Path, *, write: bool) -> str | None:
    wanted = os.R_OK | os.X_OK | (os.W_OK if write else 0)
    effective = os.access in os.supports_effective_ids
    if os.access(folder, wanted, effective_ids=effective):
        return None
    if write and os.access(folder, os.R_OK | os.X_OK, effective_ids=effective):
        try:
            read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        if read_only:
            return "is not writable (read-only file system)"
        return f"is not writable by uid {os.geteuid()}"
    return f"cannot be read (uid {os.geteuid()})"


def flock_problem(folder: Path | str) -> str | None:
    """Why ``flock(2)`` cannot lock files in ``folder``, in words, or None when it works.

    A probe file is made (``O_EXCL``, never through a link), locked through one descriptor and
    refused through a second (a lock that excludes nobody is no lock: some network file
    systems accept every ``flock`` and enforce none), then removed.
    """
    probe = Path(folder) / f".probe-{os.getpid()}-{secrets.token_hex(4)}.lock"
    flags = os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        first = os.open(probe, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.EROFS:
            return "is not writable (read-only file system)"
        if exc.errno in (errno.EACCES, errno.EPERM):
            return f"is not writable by uid {os.geteuid()} ({exc.strerror})"
        return f"cannot hold a lock file ({exc.strerror})"
    second = -1
    try:
        try:
            fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            return f"is on a file system without working flock ({exc.strerror or exc})"
        second = os.open(probe, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            return f"is on a file system without working flock ({exc.strerror or exc})"
        return "is on a file system whose flock does not exclude a second holder"
    finally:
        if second >= 0:
            os.close(second)
        with contextlib.suppress(OSError):
            os.unlink(probe)
        os.close(first)


def safe_name(text: str, *, default: str = "_", max_length: int = 150) -> str:
    """A file name for ``text``: letters, digits, ``.``, ``_`` and ``-`` only, never hidden.

    Runs of other characters become one ``_``; a name longer than ``max_length`` keeps its
    start and gains a hash of the whole text, so distinct texts keep distinct names.
    """
    stem = _UNSAFE.sub("_", text).strip("._") or default
    if len(stem) > max_length:
        stem = f"{stem[: max_length - 20]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return stem


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, rename it into place.

    A reader sees the old file or the whole new one, never half of it; a failure leaves no
    temporary file behind. The file is private (0600, as the temporary file is made) unless
    ``mode`` says otherwise (0644 for what is committed beside the goldens).
    """
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed before the rename
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    )
    try:
        with handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)  # replaces a link or FIFO at ``path``, never follows it
    except OSError as exc:
        Path(handle.name).unlink(missing_ok=True)
        if exc.filename is None:  # a write's error names no file: name the one meant
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_new(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Create ``path`` (never an existing file, never through a link) with ``data``, flushed to
    disk: a file of a folder being staged, which is renamed into place whole afterwards."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        if exc.filename is None:  # a write's error names no file: name the one meant
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    finally:
        os.close(fd)


def fsync_file(path: Path | str) -> None:
    """Flush a file just written (a copy) to disk before it is renamed or swapped into place."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (best effort: some file systems refuse)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(
    path: Path, value: Any, *, indent: int | None = 2, default: Any = None
) -> None:
    """:func:`write_atomic` of ``value`` as JSON with sorted keys and a final newline."""
    text = json.dumps(value, indent=indent, sort_keys=True, default=default)
    write_atomic(path, (text + "\n").encode("utf-8"))
