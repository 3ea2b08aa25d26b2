"""Tensors: ``.npy`` and ``.npz`` fingerprinted from their headers and raw bytes (dtype, shape,
per-chunk digests of the C-order data) and loaded for diagnostics, never unpickled.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ..errors import ArtifactError, TruncatedArtifact
from .detect import NPY_MAGIC, read_head
from .hashing import CHUNK_BYTES, FINGERPRINT_VERSION, file_digest, parallel_digests, sha256_hex
from .limits import MediaLimits, refuse

#: The compression methods numpy writes into an ``.npz``; no other is read (bzip2 and lzma
#: decompress a whole read at once, so their output cannot be bounded as it comes).
_NPZ_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}


def _read_npy_header(
    path: Path, fh: IO[bytes], label: str
) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """Shape, Fortran order and dtype from a ``.npy`` header; object dtypes are refused."""
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    except ValueError as exc:
        raise ArtifactError(path, f"{label}is not a valid .npy array: {exc}") from None
    if dtype.hasobject:
        raise ArtifactError(
            path,
            f"{label}holds an object array ({dtype}), which needs pickle to load; pickle is "
            "refused (allow_pickle=False). Save plain numeric arrays instead",
        )
    return tuple(int(n) for n in shape), bool(fortran), dtype


def _element_count(shape: tuple[int, ...]) -> int:
    """The elements of ``shape``, in Python integers (a declared shape cannot overflow)."""
    return math.prod(shape) if shape else 1


def check_npz_member(path: Path, info: zipfile.ZipInfo, limits: MediaLimits) -> None:
    """Refuse an ``.npz`` member before reading it: one that is not stored or deflated, or whose
    zip header declares more than ``limits.in_memory`` allows for its compressed size."""
    name = info.filename
    if info.compress_type not in _NPZ_METHODS:
        raise ArtifactError(
            path,
            f"member {name!r} is compressed with method {info.compress_type}; numpy writes .npz "
            "members stored or deflated, and no other method is read (they cannot be "
            "decompressed within a bound). Save it with np.savez or np.savez_compressed",
        )
    allowed = limits.in_memory(info.compress_size)
    if info.file_size > allowed:
        raise refuse(
            path,
            f"member {name!r} declares in its zip header",
            info.file_size,
            allowed,
            limits.in_memory_text(info.compress_size),
        )


def _check_npy_member(
    path: Path,
    info: zipfile.ZipInfo,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    header: int,
    limits: MediaLimits,
) -> None:
    """Refuse a member whose ``.npy`` header (``header`` bytes long) declares more data than
    ``limits`` allow for its compressed size, or more than the member holds (truncated)."""
    name = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
    count = _element_count(shape)
    data = count * dtype.itemsize
    allowed = limits.in_memory(info.compress_size)
    if data > allowed:
        raise refuse(
            path,
            f"member {name!r} declares shape {shape} of {dtype}, that is",
            data,
            allowed,
            limits.in_memory_text(info.compress_size),
        )
    if header + data > info.file_size:
        present = max(0, info.file_size - header) // max(1, dtype.itemsize)
        _truncated_tensor(path, f"member {name!r}: ", count, present)


def _descr(dtype: np.dtype[Any]) -> Any:
    """The dtype with its byte order, JSON-normalised (structured dtypes become lists)."""
    descr = np.lib.format.dtype_to_descr(dtype)
    return json.loads(json.dumps(descr))


def _tensor_fp_from_stream(
    path: Path,
    fh: IO[bytes],
    label: str,
    member: tuple[zipfile.ZipInfo, MediaLimits] | None = None,
) -> dict[str, Any]:
    """The array fingerprint of one ``.npy`` read as a stream (a file or an ``.npz`` member,
    whose declared size is checked against the limits before its data is read)."""
    shape, fortran, dtype = _read_npy_header(path, fh, label)
    if member is not None:
        _check_npy_member(path, member[0], shape, dtype, fh.tell(), member[1])
    count = _element_count(shape)
    itemsize = dtype.itemsize
    expected = count * itemsize
    chunk_elements = max(1, CHUNK_BYTES // max(1, itemsize))
    whole = hashlib.sha256()
    chunks: list[str] = []
    if fortran and len(shape) > 1:
        raw = fh.read(expected)
        if len(raw) < expected:
            _truncated_tensor(path, label, count, len(raw) // max(1, itemsize))
        array = np.frombuffer(raw, dtype=dtype).reshape(shape, order="F")
        data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        step = chunk_elements * itemsize
        for offset in range(0, data.size, step):
            view = data[offset : offset + step].data
            whole.update(view)
            chunks.append(sha256_hex(view))
    else:
        remaining = expected
        step = chunk_elements * itemsize
        while remaining > 0:
            part = fh.read(min(step, remaining))
            if not part:
                break
            whole.update(part)
            chunks.append(sha256_hex(part))
            remaining -= len(part)
        if remaining > 0:
            _truncated_tensor(path, label, count, (expected - remaining) // max(1, itemsize))
    return {
        "dtype": _descr(dtype),
        "shape": list(shape),
        "element_count": count,
        "data_sha256": whole.hexdigest(),
        "chunk_elements": chunk_elements,
        "chunk_sha256": chunks,
    }


def _truncated_tensor(path: Path, label: str, declared: int, present: int) -> None:
    raise TruncatedArtifact(
        path,
        f"truncated tensor: {label}the .npy header declares {declared} elements but the file "
        f"holds only {present}. Re-run the producer or restore the file",
    )


def _npy_c_order_fp(path: Path) -> dict[str, Any] | None:
    """A C-order ``.npy``: its data digests straight from a memory map, in parallel threads.

    None for Fortran order and empty arrays (the streaming path handles them).
    """
    with open(path, "rb") as fh:
        shape, fortran, dtype = _read_npy_header(path, fh, "")
        offset = fh.tell()
        count = _element_count(shape)
        expected = count * dtype.itemsize
        if (fortran and len(shape) > 1) or expected == 0:
            return None
        size = os.fstat(fh.fileno()).st_size
        if size - offset < expected:
            _truncated_tensor(path, "", count, (size - offset) // max(1, dtype.itemsize))
        chunk_elements = max(1, CHUNK_BYTES // dtype.itemsize)
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            data = view[offset : offset + expected]
            try:
                whole, chunks, file_sha = parallel_digests(
                    data, chunk_elements * dtype.itemsize, view
                )
            finally:
                data.release()
                view.release()
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "size": size,
        "sha256": file_sha,
        "format": "npy",
        "dtype": _descr(dtype),
        "shape": list(shape),
        "element_count": count,
        "data_sha256": whole,
        "chunk_elements": chunk_elements,
        "chunk_sha256": chunks,
    }


def fingerprint_tensor(path: Path, *, limits: MediaLimits | None = None) -> dict[str, Any]:
    """Fingerprint a ``.npy`` (dtype, shape, raw C-order bytes) or every member of a ``.npz``.

    A ``.npy`` must hold the data its header declares (or it is truncated). Each ``.npz``
    member's declared size is checked before it is read (:func:`check_npz_member`)."""
    path = Path(path)
    limits = limits or MediaLimits.from_env()
    head = read_head(path, 8)
    if head.startswith(NPY_MAGIC):
        fast = _npy_c_order_fp(path)
        if fast is not None:
            return fast
    size, sha = file_digest(path)
    base: dict[str, Any] = {"fingerprint_version": FINGERPRINT_VERSION, "size": size, "sha256": sha}
    if head.startswith(NPY_MAGIC):
        with open(path, "rb") as fh:
            return {**base, "format": "npy", **_tensor_fp_from_stream(path, fh, "")}
    members: dict[str, Any] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    raise ArtifactError(
                        path, f"member {info.filename!r} is not a .npy array: not an .npz file"
                    )
                name = info.filename[: -len(".npy")]
                check_npz_member(path, info, limits)
                with zf.open(info) as member:
                    members[name] = _tensor_fp_from_stream(
                        path, member, f"member {name!r}: ", (info, limits)
                    )
    except zipfile.BadZipFile as exc:
        raise ArtifactError(path, f"damaged .npz archive: {exc}") from None
    return {**base, "format": "npz", "members": members}


def _check_npz(path: Path, limits: MediaLimits) -> None:
    """Every member of an ``.npz`` checked from its headers alone, before numpy loads any."""
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            check_npz_member(path, info, limits)
            with zf.open(info) as member:
                shape, _fortran, dtype = _read_npy_header(
                    path, member, f"member {info.filename!r}: "
                )
                _check_npy_member(path, info, shape, dtype, member.tell(), limits)


def check_declared_tensor(path: Path, limits: MediaLimits) -> None:
    """Refuse, from its headers alone, a tensor file that declares more than it holds (``.npy``)
    or more than ``limits`` allow (``.npz`` members)."""
    path = Path(path)
    if read_head(path, 8).startswith(NPY_MAGIC):
        with open(path, "rb") as fh:
            shape, _fortran, dtype = _read_npy_header(path, fh, "")
            offset = fh.tell()
            size = os.fstat(fh.fileno()).st_size
        count = _element_count(shape)
        if offset + count * dtype.itemsize > size:
            _truncated_tensor(path, "", count, max(0, size - offset) // max(1, dtype.itemsize))
        return
    try:
        _check_npz(path, limits)
    except zipfile.BadZipFile as exc:
        raise ArtifactError(path, f"damaged .npz archive: {exc}") from None


def load_tensor(
    path: Path, *, limits: MediaLimits | None = None
) -> npt.NDArray[Any] | dict[str, npt.NDArray[Any]]:
    """The array of a ``.npy`` (memory-mapped) or the arrays of a ``.npz``; never unpickles.

    A ``.npy`` must hold what its header declares; an ``.npz`` is loaded in memory, so each
    member's declared size is checked against ``limits`` first (:func:`check_npz_member`)."""
    path = Path(path)
    limits = limits or MediaLimits.from_env()
    head = read_head(path, 8)
    try:
        check_declared_tensor(path, limits)
        if head.startswith(NPY_MAGIC):
            with open(path, "rb") as fh:
                shape, _fortran, dtype = _read_npy_header(path, fh, "")
            if _element_count(shape) * dtype.itemsize == 0:
                return np.load(path, allow_pickle=False)  # type: ignore[no-any-return]
            return np.load(path, mmap_mode="r", allow_pickle=False)  # type: ignore[no-any-return]
        arrays: dict[str, npt.NDArray[Any]] = {}
        with np.load(path, allow_pickle=False) as npz:
            for name in npz.files:
                arrays[name] = npz[name]
        return arrays
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise ArtifactError(
                path,
                "holds an object array, which needs pickle; pickle is refused "
                "(allow_pickle=False). Save plain numeric arrays instead",
            ) from None
        raise ArtifactError(path, f"cannot be loaded as a tensor: {exc}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArtifactError(path, f"cannot be loaded as a tensor: {exc}") from None
