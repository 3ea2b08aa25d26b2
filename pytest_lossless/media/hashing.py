"""The digests every fingerprint is made of (whole file, per chunk, in parallel over a memory map),
and the fingerprint of the ``bytes`` kind, which is nothing but digests.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..core.digests import sha256_file
from ..errors import ArtifactError

#: Version of the fingerprint layout, stored in every fingerprint.
FINGERPRINT_VERSION = 1
#: Chunk size of the per-chunk digests of bytes and tensors (localisation in digest-only goldens).
CHUNK_BYTES = 1 << 20


def sha256_hex(data: Any) -> str:
    """Hex SHA-256 of a bytes-like object."""
    return hashlib.sha256(data).hexdigest()


def parallel_digests(
    data: memoryview, block: int, file_view: memoryview
) -> tuple[str, list[str], str]:
    """SHA-256 of ``data``, of each ``block`` bytes of it, and of the whole file.

    hashlib releases the GIL on large buffers, so the three passes overlap on several cores.
    """
    with ThreadPoolExecutor(max_workers=2) as pool:
        whole = pool.submit(sha256_hex, data)
        file_sha = pool.submit(sha256_hex, file_view)
        blocks = [sha256_hex(data[i : i + block]) for i in range(0, len(data), block)]
        return whole.result(), blocks, file_sha.result()


def file_digest(path: Path) -> tuple[int, str]:
    """Size and SHA-256 of the file's bytes."""
    try:
        return path.stat().st_size, sha256_file(path, CHUNK_BYTES)
    except OSError as exc:
        raise ArtifactError(path, f"cannot be read: {exc.strerror or exc}") from None


def fingerprint_bytes(path: Path, *, limits: object = None) -> dict[str, Any]:
    """Size, SHA-256, and one SHA-256 per MiB (so a digest-only golden can localise a change).

    ``limits`` is accepted like every fingerprint's and unused: bytes are read as they are
    (work in proportion to the file), never decoded."""
    whole = hashlib.sha256()
    chunks: list[str] = []
    size = 0
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK_BYTES):
                whole.update(chunk)
                chunks.append(sha256_hex(chunk))
                size += len(chunk)
    except OSError as exc:
        raise ArtifactError(path, f"cannot be read: {exc.strerror or exc}") from None
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "size": size,
        "sha256": whole.hexdigest(),
        "chunk_bytes": CHUNK_BYTES,
        "chunk_sha256": chunks,
    }
