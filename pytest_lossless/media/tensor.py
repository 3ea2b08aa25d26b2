"""Tensors: ``.npy`` and ``.npz`` fingerprinted from their headers and raw bytes (dtype, shape,
per-chunk digests of the C-order data) and loaded for diagnostics, never unpickled.
"""

from __future__ import annotations

import hashlib
import json
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


def _descr(dtype: np.dtype[Any]) -> Any:
    """The dtype with its byte order, JSON-normalised (structured dtypes become lists)."""
    descr = np.lib.format.dtype_to_descr(dtype)
    return json.loads(json.dumps(descr))


def _tensor_fp_from_stream(path: Path, fh: IO[bytes], label: str) -> dict[str, Any]:
    """The array fingerprint of one ``.npy`` read as a stream (a file or an ``.npz`` member)."""
    shape, fortran, dtype = _read_npy_header(path, fh, label)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
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
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
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


def fingerprint_tensor(path: Path) -> dict[str, Any]:
    """Fingerprint a ``.npy`` (dtype, shape, raw C-order bytes) or every member of a ``.npz``."""
    path = Path(path)
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
                with zf.open(info) as member:
                    members[name] = _tensor_fp_from_stream(path, member, f"member {name!r}: ")
    except zipfile.BadZipFile as exc:
        raise ArtifactError(path, f"damaged .npz archive: {exc}") from None
    return {**base, "format": "npz", "members": members}


def load_tensor(path: Path) -> npt.NDArray[Any] | dict[str, npt.NDArray[Any]]:
    """The array of a ``.npy`` (memory-mapped) or the arrays of a ``.npz``; never unpickles."""
    path = Path(path)
    head = read_head(path, 8)
    try:
        if head.startswith(NPY_MAGIC):
            with open(path, "rb") as fh:
                shape, _fortran, dtype = _read_npy_header(path, fh, "")
            if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize == 0:
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
