"""The bytes kind: any file no other kind claims, compared byte for byte.

Its fingerprint (:class:`BytesFingerprint`) is the file's size, SHA-256 and one SHA-256 per MiB
(so a digest-only golden can localise a change). Also the ``bytes`` gate of every kind
(:func:`compare_bytes`): for a built-in kind, and for a plugin's kind whose fingerprint carries
the file's ``size`` and ``sha256``, it is answered here. The canary flips one bit of the middle
byte of a copy (:func:`~.canary.flip_byte`). This module loads no numpy until two files differ:
it is the whole path of a bytes golden.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.digests import CHUNK_BYTES, Fingerprint, sha256_hex, whole_and_blocks
from ..errors import ArtifactError
from ..gates.gate import first_difference, new_result, note_meta, settle
from ..hookspecs import hookimpl
from .interface import BuiltinKind

if TYPE_CHECKING:
    from ..core.artifact import Artifact
    from ..core.records import JsonObject
    from ..gates import Gate, GateResult


@dataclass(frozen=True, slots=True)
class BytesFingerprint(Fingerprint):
    """What the ``bytes`` gate compares: the file's size and SHA-256, and one SHA-256 per
    ``chunk_bytes``. Read from any kind's fingerprint (:meth:`from_json`), the fields it lacks
    are None or empty: a plugin's kind without them has no ``bytes`` gate."""

    size: int | None
    sha256: str | None
    chunk_bytes: int = CHUNK_BYTES
    chunk_sha256: tuple[str, ...] | None = None

    @classmethod
    def of(cls, path: Path) -> BytesFingerprint:
        """The file's digests: memory-mapped, the chunks hashed in parallel
        (:func:`~..core.digests.whole_and_blocks`); bytes are read as they are, never decoded."""
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
        return cls(size=size, sha256=whole, chunk_sha256=tuple(chunks))


def fingerprint_bytes(path: Path) -> JsonObject:
    """The bytes fingerprint of ``path`` as JSON: what a plugin's kind may start its own from
    (with ``size`` and ``sha256`` in it, the ``bytes`` gate works for that kind for free)."""
    return BytesFingerprint.of(Path(path)).to_json()


class BytesKind(BuiltinKind):
    """Any other file: identical bytes. Also answers the ``bytes`` gate for any kind whose
    fingerprint carries the file's size and SHA-256, so a user's kind gets it for free."""

    name = "bytes"
    default_gate = "bytes"
    gates = ("bytes",)

    def detect(self, path: Path, head: bytes) -> bool:
        return True

    def fingerprint(self, path: Path) -> JsonObject:
        return fingerprint_bytes(path)

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        return compare_bytes(gate, expected, obtained, self.name)

    @hookimpl(trylast=True)
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        if kind == self.name:
            self.check_gate(gate, expected.name)
            return compare_bytes(gate, expected, obtained, kind)
        if gate.name == "bytes" and _has_file_digest(expected) and _has_file_digest(obtained):
            return compare_bytes(gate, expected, obtained, kind)
        return None


def _has_file_digest(artifact: Artifact) -> bool:
    return "sha256" in artifact.fingerprint and "size" in artifact.fingerprint


def compare_bytes(gate: Gate, expected: Artifact, obtained: Artifact, kind: str) -> GateResult:
    """Identical file bytes: SHA-256 and size; the first differing byte when both are present."""
    result = new_result(expected, gate, kind, "byte")
    efp = BytesFingerprint.from_json(expected.fingerprint)
    ofp = BytesFingerprint.from_json(obtained.fingerprint)
    # Extra length counts as differing bytes, so the count is of the longer file's bytes.
    sizes = [n for n in (efp.size, ofp.size) if n is not None]
    result.total = max(sizes) if sizes else None
    if efp.sha256 == ofp.sha256 and efp.size == ofp.size and efp.sha256:
        result.mismatch_count = 0
        return settle(result)
    note_meta(result.metadata_diffs, "size (bytes)", efp.size, ofp.size)
    if expected.path is not None and obtained.path is not None:
        first, count, pair = _diff_files(expected.path, obtained.path)
        if first is not None:
            result.first_mismatch = f"offset {first} ({pair})"
            result.location = {"offset": first}
        result.mismatch_count = count
        if count == 0 and not result.metadata_diffs:  # digests disagreed with the bytes
            result.notes.append("file contents are identical; the recorded digests differ")
            result.first_mismatch = "SHA-256 of the file"
            result.mismatch_count = None
    else:
        chunk = first_difference(efp.chunk_sha256 or (), ofp.chunk_sha256 or ())
        step = efp.chunk_bytes
        if chunk is not None and efp.chunk_sha256 is not None:
            result.first_mismatch = (
                f"within bytes [{chunk * step}, {(chunk + 1) * step}) (only digests are kept: "
                "the exact offset is unknown)"
            )
            result.location = {"offset_range": [chunk * step, (chunk + 1) * step]}
        else:
            result.first_mismatch = (
                f"SHA-256 of the file: expected {efp.sha256}, obtained {ofp.sha256}"
            )
    return settle(result)


#: The files are read and compared in blocks of this size.
_READ_BYTES = 1 << 20


def _diff_files(a: Path, b: Path) -> tuple[int | None, int, str]:
    """First differing offset, number of differing bytes (extra length counts), and that pair."""
    import numpy as np  # only when the files differ

    first: int | None = None
    pair = ""
    count = 0
    offset = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            ca, cb = fa.read(_READ_BYTES), fb.read(_READ_BYTES)
            if not ca and not cb:
                break
            n = min(len(ca), len(cb))
            va = np.frombuffer(ca[:n], dtype=np.uint8)
            vb = np.frombuffer(cb[:n], dtype=np.uint8)
            where = np.flatnonzero(va != vb)
            count += int(where.size) + abs(len(ca) - len(cb))
            if first is None and where.size:
                i = int(where[0])
                first = offset + i
                pair = f"expected 0x{va[i]:02x}, obtained 0x{vb[i]:02x}"
            elif first is None and len(ca) != len(cb):
                first = offset + n
                pair = "expected " + ("end of file" if len(ca) == n else f"0x{ca[n]:02x}")
                pair += ", obtained " + ("end of file" if len(cb) == n else f"0x{cb[n]:02x}")
            offset += max(len(ca), len(cb))
    return first, count, pair
