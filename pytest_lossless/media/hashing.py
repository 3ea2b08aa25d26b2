"""The digests every fingerprint is made of (whole file, per chunk, in parallel over a memory map),
and the fingerprint of the ``bytes`` kind, which is nothing but digests.
"""

from __future__ import annotations

import copy
import hashlib
import mmap
import os
import queue
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.digests import sha256_file
from ..errors import ArtifactError

#: Version of the fingerprint layout, stored in every fingerprint.
FINGERPRINT_VERSION = 1
#: Chunk size of the per-chunk digests of bytes and tensors (localisation in digest-only goldens).
CHUNK_BYTES = 1 << 20


#: Frames smaller than this are hashed by the reading thread itself (a hand-over costs more).
PARALLEL_FRAME_BYTES = 256 << 10
#: The frame buffers in flight between the reader and the hashing threads take at most this.
FRAME_BUFFER_BYTES = 64 << 20
#: At most this many hashing threads (SHA-256 runs at 1-2 GB/s a core; a decoder rarely feeds more).
MAX_HASH_THREADS = 8


def hash_threads() -> int:
    """Hashing threads for raw frames: none (hash while reading) on one core, else half the
    cores this process may use, at most :data:`MAX_HASH_THREADS` (the decoder needs the rest)."""
    cores = _cores()
    return 0 if cores < 2 else max(1, min(MAX_HASH_THREADS, cores // 2))


def raw_stripes() -> int:
    """Raw pipes for one decode: one per four cores, at most four (one ffmpeg writer thread
    and one reading thread each); one below eight cores, where the CPU, not the pipe, binds."""
    return max(1, min(4, _cores() // 4))


def _fill(read_into: Callable[[memoryview], int], view: memoryview) -> int:
    """Read into all of ``view`` unless the stream ends first; the bytes read."""
    got = 0
    while got < len(view):
        n = read_into(view[got:])
        if not n:
            break
        got += n
    return got


def digest_frames(
    read_into: Callable[[memoryview], int],
    frame_bytes: int,
    *,
    threads: int | None = None,
    on_frame: Callable[[int], None] | None = None,
) -> tuple[list[str], int]:
    """The SHA-256 of each consecutive ``frame_bytes`` of a stream read with ``read_into`` (a
    raw pipe's ``readinto``), and how many bytes were left after the last whole frame.

    Frames are read into a few reused buffers (never one ``bytes`` object per frame) and hashed
    on ``threads`` threads (:func:`hash_threads` when None): hashlib releases the GIL on large
    buffers, so reading and hashing overlap the decoder and each other. ``on_frame(size)`` is
    called before each frame is hashed and may raise to stop (a decode budget). The buffers in
    flight take at most :data:`FRAME_BUFFER_BYTES` (or two frames), whatever the clip's length.
    """
    workers = hash_threads() if threads is None else threads
    if workers < 1 or frame_bytes < PARALLEL_FRAME_BYTES:
        return _digest_inline(read_into, frame_bytes, on_frame)
    slots = max(2, min(2 * workers + 1, FRAME_BUFFER_BYTES // frame_bytes))
    free: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
    for _ in range(slots):
        free.put(bytearray(frame_bytes))

    def digest(buffer: bytearray) -> str:
        try:
            return hashlib.sha256(buffer).hexdigest()
        finally:
            free.put(buffer)

    pending: list[Future[str]] = []
    with ThreadPoolExecutor(max_workers=min(workers, slots - 1)) as pool:
        while True:
            buffer = free.get()
            got = _fill(read_into, memoryview(buffer))
            if got < frame_bytes:
                break
            if on_frame is not None:
                on_frame(frame_bytes)
            pending.append(pool.submit(digest, buffer))
    return [future.result() for future in pending], got


def _digest_inline(
    read_into: Callable[[memoryview], int],
    frame_bytes: int,
    on_frame: Callable[[int], None] | None,
) -> tuple[list[str], int]:
    view = memoryview(bytearray(frame_bytes))
    digests: list[str] = []
    while (got := _fill(read_into, view)) == frame_bytes:
        if on_frame is not None:
            on_frame(frame_bytes)
        digests.append(hashlib.sha256(view).hexdigest())
    return digests, got


def sha256_hex(data: Any) -> str:
    """Hex SHA-256 of a bytes-like object."""
    return hashlib.sha256(data).hexdigest()


def block_digests(data: memoryview, block: int, *, threads: int = 1) -> list[str]:
    """SHA-256 of each ``block`` bytes of ``data``, in order, on up to ``threads`` threads
    (each takes a run of whole blocks)."""
    starts = range(0, len(data), block)
    if threads <= 1 or len(starts) < 2 * threads:
        return [sha256_hex(data[i : i + block]) for i in starts]
    per = -(-len(starts) // threads)
    runs = [starts[k : k + per] for k in range(0, len(starts), per)]
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        parts = pool.map(lambda run: [sha256_hex(data[i : i + block]) for i in run], runs)
        return [digest for part in parts for digest in part]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def parallel_digests(
    data: memoryview, block: int, file_view: memoryview
) -> tuple[str, list[str], str]:
    """SHA-256 of ``data``, of each ``block`` bytes of it, and of the whole file.

    hashlib releases the GIL on large buffers, so the passes overlap on several cores: each
    whole digest is one thread (SHA-256 is sequential), the blocks share the other cores."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        whole = pool.submit(sha256_hex, data)
        file_sha = pool.submit(sha256_hex, file_view)
        blocks = block_digests(data, block, threads=max(1, _cores() - 2))
        return whole.result(), blocks, file_sha.result()


def whole_and_blocks(data: memoryview, block: int) -> tuple[str, list[str]]:
    """SHA-256 of ``data`` and of each ``block`` bytes of it, in parallel as
    :func:`parallel_digests` (for a file that is all data: the bytes kind)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        whole = pool.submit(sha256_hex, data)
        blocks = block_digests(data, block, threads=max(1, _cores() - 1))
        return whole.result(), blocks


def file_digest(path: Path) -> tuple[int, str]:
    """Size and SHA-256 of the file's bytes."""
    try:
        return path.stat().st_size, sha256_file(path, CHUNK_BYTES)
    except OSError as exc:
        raise ArtifactError(path, f"cannot be read: {exc.strerror or exc}") from None


def fingerprint_bytes(path: Path, *, limits: object = None) -> dict[str, Any]:
    """Size, SHA-256, and one SHA-256 per MiB (so a digest-only golden can localise a change).

    The file is memory-mapped and its digests computed in parallel (:func:`parallel_digests`).
    ``limits`` is accepted like every fingerprint's and unused: bytes are read as they are
    (work in proportion to the file), never decoded."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            chunks: list[str] = []
            if size == 0:
                whole = sha256_hex(b"")
            else:
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    view = memoryview(mm)
                    try:
                        whole, chunks = whole_and_blocks(view, CHUNK_BYTES)
                    finally:
                        view.release()
    except (OSError, ValueError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ArtifactError(path, f"cannot be read: {text}") from None
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "size": size,
        "sha256": whole,
        "chunk_bytes": CHUNK_BYTES,
        "chunk_sha256": chunks,
    }


# ------------------------------------------------------------------ a session's fingerprints


@dataclass(frozen=True)
class FileIdentity:
    """What ``stat`` says of one file's content: the same inode with the same size, mtime and
    ctime (which no ``touch`` can set back) has not been written since."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity | None:
        """The identity of the regular file at ``path``; None when there is none."""
        try:
            info = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        return cls(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class FingerprintCache:
    """The fingerprints one session computed, so that a file is decoded once however many
    times it is compared (a candidate against several control runs and a golden).

    An entry is keyed by the kind, the resolved path, ``key`` (the limits it was computed
    under) and the file's :class:`FileIdentity`; it is used only when the file's identity,
    taken again just before, is unchanged, and stored only when the identity did not change
    while it was computed. Callers get a copy. At most ``entries`` are kept (least recently
    used go first); a session object, never module state."""

    def __init__(self, entries: int = 512) -> None:
        self.entries = entries
        self.hits = 0
        self.misses = 0
        self._store: OrderedDict[Hashable, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def fingerprint(
        self,
        kind: str,
        path: Path,
        compute: Callable[[], dict[str, Any]],
        *,
        key: Hashable = None,
    ) -> dict[str, Any]:
        """The fingerprint of ``path`` as ``kind``: cached, or ``compute()`` (and kept)."""
        before = FileIdentity.of(path)
        if before is None:
            return compute()
        entry = (kind, str(Path(path).resolve()), key, before)
        with self._lock:
            hit = self._store.get(entry)
            if hit is not None:
                self._store.move_to_end(entry)
        if hit is not None and FileIdentity.of(path) == before:
            self.hits += 1
            return copy.deepcopy(hit)
        self.misses += 1
        result = compute()
        if FileIdentity.of(path) == before:
            with self._lock:
                self._store[entry] = copy.deepcopy(result)
                while len(self._store) > self.entries:
                    self._store.popitem(last=False)
        return result

    def clear(self) -> None:
        with self._lock:
            self._store.clear()
