"""NumPy files: ``.npy`` headers and ``.npz`` members read and checked against the limits before
any data is (object arrays refused: never unpickled), and the arrays loaded for the comparers.
The tensor kind's fingerprint (:mod:`~..kinds.tensor`) reads through these.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ..core.artifact import read_head
from ..errors import ArtifactError, TruncatedArtifact
from .detect import NPY_MAGIC
from .limits import MediaLimits, refuse

#: The compression methods numpy writes into an ``.npz``; no other is read (bzip2 and lzma
#: decompress a whole read at once, so their output cannot be bounded as it comes).
_NPZ_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}


def read_npy_header(
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


def element_count(shape: tuple[int, ...]) -> int:
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


def check_npy_member(
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
    count = element_count(shape)
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
        truncated_tensor(path, f"member {name!r}: ", count, present)


def descr(dtype: np.dtype[Any]) -> Any:
    """The dtype with its byte order, JSON-normalised (structured dtypes become lists)."""
    descr = np.lib.format.dtype_to_descr(dtype)
    return json.loads(json.dumps(descr))


def truncated_tensor(path: Path, label: str, declared: int, present: int) -> None:
    raise TruncatedArtifact(
        path,
        f"truncated tensor: {label}the .npy header declares {declared} elements but the file "
        f"holds only {present}. Re-run the producer or restore the file",
    )


def _check_npz(path: Path, limits: MediaLimits) -> None:
    """Every member of an ``.npz`` checked from its headers alone, before numpy loads any."""
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            check_npz_member(path, info, limits)
            with zf.open(info) as member:
                shape, _fortran, dtype = read_npy_header(
                    path, member, f"member {info.filename!r}: "
                )
                check_npy_member(path, info, shape, dtype, member.tell(), limits)


def check_declared_tensor(path: Path, limits: MediaLimits) -> None:
    """Refuse, from its headers alone, a tensor file that declares more than it holds (``.npy``)
    or more than ``limits`` allow (``.npz`` members)."""
    path = Path(path)
    if read_head(path, 8).startswith(NPY_MAGIC):
        with open(path, "rb") as fh:
            shape, _fortran, dtype = read_npy_header(path, fh, "")
            offset = fh.tell()
            size = os.fstat(fh.fileno()).st_size
        count = element_count(shape)
        if offset + count * dtype.itemsize > size:
            truncated_tensor(path, "", count, max(0, size - offset) // max(1, dtype.itemsize))
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
                shape, _fortran, dtype = read_npy_header(path, fh, "")
            if element_count(shape) * dtype.itemsize == 0:
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
