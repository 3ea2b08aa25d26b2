"""The content-addressed store: full artifacts kept by SHA-256, where a golden is digests only.

A golden above ``--lossless-digest-above`` keeps only its digests in ``goldens/``, so its pixels
and samples are not at hand when a reviewer wants to see what changed. ``lossless_store`` (ini)
or ``--lossless-store`` names a folder, shared storage say, where ``--update-goldens`` (and
``accept``) also put every artifact they write, whole, under its SHA-256::

    <store>/sha256/ab/cdef0123...   the artifact whose SHA-256 is abcdef0123...

A file is written beside its place and renamed in, so a reader sees a whole file or none; and
nothing read from the store is believed before it is hashed: a file whose bytes do not hash to
its name is refused with a :class:`StoreIntegrityError` naming it.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.paths import fsync_dir, open_regular
from ..core.text import printable
from ..errors import GoldenError

__all__ = ["SHA256", "ContentStore", "StoreError", "StoreIntegrityError"]

#: The folder of the store that holds SHA-256 addressed files.
SHA256 = "sha256"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


class StoreError(GoldenError):
    """The content-addressed store cannot be used (``path``: the store or one of its files,
    ``problem``: what is wrong)."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(printable(f"content store {self.path}: {problem}"))


class StoreIntegrityError(StoreError):
    """A file of the store whose bytes do not hash to its name: refused, never used."""

    def __init__(self, path: Path | str, expected: str, actual: str) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            path,
            f"its SHA-256 is {actual[:16]}... but its name says {expected[:16]}...: the file "
            "was changed or damaged after it was stored, so it is refused. Remove it; the next "
            "--update-goldens of its golden stores it again",
        )


class ContentStore:
    """Files kept by SHA-256 under ``<root>/sha256/ab/cdef...``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path_of(self, sha256: str) -> Path:
        """Where the file of ``sha256`` lies (or would lie)."""
        digest = _checked(sha256)
        return self.root / SHA256 / digest[:2] / digest[2:]

    def put(self, source: Path | str, sha256: str | None = None) -> Path:
        """Keep ``source`` in the store; returns its path there.

        ``sha256``: what the caller knows the file's SHA-256 to be; the bytes copied are hashed
        as they are copied, and a file that does not match it is not stored. A file already
        there with the right bytes is kept as it is; one with the wrong bytes is replaced.
        """
        source = Path(source)
        if sha256 is not None:
            target = self.path_of(sha256)
            if self._holds(target, sha256):
                return target
        folder = self.root / SHA256
        try:
            folder.mkdir(parents=True, exist_ok=True)
            temporary = folder / f".put-{os.getpid()}-{secrets.token_hex(6)}.tmp"
            actual = _copy_hashing(source, temporary)
        except OSError as exc:
            raise StoreError(
                self.root, f"{source} cannot be stored ({exc.strerror or exc})"
            ) from None
        try:
            if sha256 is not None and actual != _checked(sha256):
                raise StoreError(
                    source,
                    f"its SHA-256 is {actual[:16]}... but the golden says {sha256[:16]}...: the "
                    "file changed while it was stored; nothing was stored",
                )
            target = self.path_of(actual)
            if self._holds(target, actual):
                return target
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temporary, target)  # a reader sees the whole file or none
            fsync_dir(target.parent)
        except OSError as exc:
            raise StoreError(
                self.root, f"{source} cannot be stored ({exc.strerror or exc})"
            ) from None
        finally:
            temporary.unlink(missing_ok=True)
        return target

    def put_all(self, staged: Iterable[Any]) -> list[Path]:
        """Keep every staged artifact of a golden update (``.path`` and ``.entry.sha256``, as
        :class:`~.goldens.StagedArtifact` has them), digest-only ones included."""
        return [self.put(s.path, s.entry.sha256) for s in staged if s.path is not None]

    def get(self, sha256: str) -> Path | None:
        """The stored file of ``sha256`` after hashing it (None when the store has none);
        a file whose bytes do not match is a :class:`StoreIntegrityError`."""
        path = self.path_of(sha256)
        if not os.path.lexists(path):
            return None
        actual = _hash(path)
        if actual != sha256.lower():
            raise StoreIntegrityError(path, sha256.lower(), actual)
        return path

    def _holds(self, path: Path, sha256: str) -> bool:
        """Whether ``path`` is already the right file (a damaged one is to be replaced)."""
        if not os.path.lexists(path):
            return False
        try:
            return _hash(path) == sha256.lower()
        except StoreError:
            return False


def _checked(sha256: str) -> str:
    digest = str(sha256).lower()
    if not _HEX64.fullmatch(digest):
        raise StoreError("(store)", f"{printable(str(sha256))[:80]!r} is not a SHA-256")
    return digest


def _hash(path: Path) -> str:
    """SHA-256 of a stored file, read as a regular file (never through a link, never a FIFO)."""
    try:
        fd = open_regular(path)
    except OSError as exc:
        raise StoreError(path, f"cannot be read ({exc.strerror or exc})") from None
    digest = hashlib.sha256()
    try:
        while block := os.read(fd, _CHUNK):
            digest.update(block)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _copy_hashing(source: Path, target: Path) -> str:
    """Copy ``source`` into the new file ``target`` (flushed to disk); its SHA-256."""
    digest = hashlib.sha256()
    reader = open_regular(source)
    try:
        writer = os.open(
            target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444
        )
        try:
            while block := os.read(reader, _CHUNK):
                digest.update(block)
                view = memoryview(block)
                while view:
                    view = view[os.write(writer, view) :]
            os.fsync(writer)
        finally:
            os.close(writer)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    finally:
        os.close(reader)
    return digest.hexdigest()
