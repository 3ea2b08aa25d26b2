"""Arrays compared as bits and shown as text: the one place that decides what "same element"
means (unsigned views, so NaN payloads and the sign of zero count) and how an element is shown;
and the figures of a mismatch (max error and PSNR), labelled diagnostics, never gates.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import media
from ..core.artifact import Artifact

#: The limits on decoding the expected side and the obtained side of one comparison.
Sides = tuple[media.MediaLimits, media.MediaLimits]


def _unsigned_view(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The array's bits as unsigned integers, one row per element for odd item sizes."""
    array = np.ascontiguousarray(array)
    size = array.dtype.itemsize
    if size in (1, 2, 4, 8):
        return array.view(f"u{size}").reshape(array.shape)
    return array.view(np.uint8).reshape((*array.shape, size))


def bits_differ(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Elementwise: do the bits of ``a`` and ``b`` (same dtype and shape) differ?"""
    ua, ub = _unsigned_view(a), _unsigned_view(b)
    differ: npt.NDArray[np.bool_] = np.asarray(ua != ub, dtype=np.bool_)
    if differ.ndim > a.ndim:
        differ = np.asarray(differ.any(axis=-1), dtype=np.bool_)
    return differ


def value_text(array: npt.NDArray[Any], index: tuple[int, ...]) -> str:
    """One element as text; floats also as bits, so -0.0 and NaN payloads are visible."""
    item = array[index]
    dtype = array.dtype
    if dtype.kind in "fc" and dtype.itemsize in (2, 4, 8):
        bits = (
            np.asarray(item).reshape(1).view(f"u{dtype.itemsize}")[0] if dtype.kind == "f" else None
        )
        text = repr(item.item()) if hasattr(item, "item") else repr(item)
        if bits is not None:
            return f"{text} (bits 0x{int(bits):0{2 * dtype.itemsize}x})"
        return text
    if hasattr(item, "item"):
        return repr(item.item())
    return repr(item)


def index_text(index: tuple[int, ...]) -> str:
    """``[7]`` for one axis, ``(1, 2)`` for several, ``()`` for a scalar."""
    return "(" + ", ".join(str(i) for i in index) + ")" if len(index) != 1 else f"[{index[0]}]"


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of flat position ``flat`` in an array of ``shape`` (``()`` for a scalar)."""
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def sides(limits: media.MediaLimits | None, expected: Artifact) -> Sides:
    """The limits of each side: the golden's are the session's (or the defaults), the obtained
    file's are tightened from the golden's own fingerprint (it may not decode much more)."""
    base = limits or media.MediaLimits.from_env()
    return base, base.for_golden(expected.fingerprint)


def load_arrays(path: Path, limits: media.MediaLimits | None = None) -> dict[str, npt.NDArray[Any]]:
    """A tensor file's arrays by member name; a lone ``.npy`` array is member ``""``."""
    loaded = media.load_tensor(path, limits=limits)
    return loaded if isinstance(loaded, dict) else {"": loaded}


def error_stats(a: npt.NDArray[Any], b: npt.NDArray[Any], peak: float) -> dict[str, float]:
    """Max absolute error and PSNR over finite values: labelled diagnostics, never gates."""
    kind = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    with np.errstate(all="ignore"):
        err = np.abs(np.asarray(a, dtype=kind) - np.asarray(b, dtype=kind)).astype(np.float64)
        finite = np.isfinite(err)
        if not finite.any():
            return {}
        max_err = float(err[finite].max())
        mse = float(np.mean(np.square(err[finite])))
    stats: dict[str, float] = {"max_abs_error": max_err}
    if mse == 0:
        stats["psnr_db"] = math.inf
    elif math.isfinite(mse) and peak > 0:
        stats["psnr_db"] = round(10 * math.log10(peak * peak / mse), 3)
    return stats
