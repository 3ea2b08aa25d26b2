"""The digests, defined once and used by all: SHA-256 of files and JSON values, and those every
fingerprint is made of (whole file, per chunk, in parallel over a memory map; per frame, as the
frames come), with :class:`Fingerprint`, the base of a built-in kind's fingerprint (the kinds
put them together, :mod:`~..kinds`). Files are written atomically in :mod:`.paths`; JSON is
read with a bound on its depth in :mod:`.records`.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ArtifactError
from .records import Record, from_json

CHUNK = 1 << 20


def sha256_file(path: Path | str, chunk: int = CHUNK) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """A JSON value in canonical form (sorted keys, no spaces, ASCII); other values as str."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def canonical_sha256(value: Any) -> str:
    """Hex SHA-256 of a JSON value in canonical form."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


#: Version of the fingerprint layout, stored in every fingerprint.
FINGERPRINT_VERSION = 1
#: Chunk size of the per-chunk digests of bytes and tensors (localisation in digest-only goldens).
CHUNK_BYTES = 1 << 20

_F = TypeVar("_F", bound="Fingerprint")


@dataclass(frozen=True, slots=True)
class Fingerprint(Record):
    """A built-in kind's fingerprint, as a manifest keeps it: ``fingerprint_version`` first,
    then the kind's fields in their order (:mod:`.records`).

    Read leniently, as the code before the typed records read it: a gate reads any kind's
    fingerprint (a plugin's may lack fields) and a manifest's (checked for integrity before),
    so a missing or mistyped value reads as absent and the comparison names the difference."""

    fingerprint_version: int = field(default=FINGERPRINT_VERSION, kw_only=True)

    @classmethod
    def from_json(cls: type[_F], data: object) -> _F:
        return from_json(cls, data, problems=[])


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
