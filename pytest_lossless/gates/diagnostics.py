"""Diagnostics of a mismatch, never gates: max error and PSNR of the first differing frame, as
labelled figures. The pictures and listings a person looks at are each kind's own
(``pytest_lossless_pictures``: :mod:`~..kinds.video`, :mod:`~..kinds.tensor`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .. import media
from ..errors import LosslessError
from .arrays import Sides
from .result import GateResult

if TYPE_CHECKING:
    from ..media.limits import MediaLimits

#: How many differing positions a diagnostics text file lists.
_LISTED = 20


def error_stats(a: npt.NDArray[Any], b: npt.NDArray[Any], peak: float) -> dict[str, Any]:
    """Max absolute error and PSNR over finite values: labelled diagnostics, never gates."""
    kind = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    with np.errstate(all="ignore"):
        err = np.abs(np.asarray(a, dtype=kind) - np.asarray(b, dtype=kind)).astype(np.float64)
        finite = np.isfinite(err)
        if not finite.any():
            return {}
        max_err = float(err[finite].max())
        mse = float(np.mean(np.square(err[finite])))
    stats: dict[str, Any] = {"max_abs_error": max_err}
    if mse == 0:
        stats["psnr_db"] = math.inf
    elif math.isfinite(mse) and peak > 0:
        stats["psnr_db"] = round(10 * math.log10(peak * peak / mse), 3)
    return stats


def pcm_peak(dtype: np.dtype[Any]) -> float:
    """The full-scale value of a PCM sample type, the peak of its PSNR (1.0 for floats)."""
    if dtype.kind in "iu":
        return float(np.iinfo(dtype).max)
    return 1.0


def frame_diagnostics(result: GateResult, epath: Path, opath: Path, limits: Sides) -> None:
    """PSNR and max error of the first differing frame, in its own pixel format (each side
    decoded within its ``limits``)."""
    loc = result.location
    if "frame" not in loc:
        return
    from concurrent.futures import ThreadPoolExecutor

    def load(p: Path, side: MediaLimits) -> dict[int, npt.NDArray[Any]]:
        return media.load_video_frames(
            p,
            stream_index=loc.get("stream"),
            indices=[loc["frame"]],
            frame_bytes=loc.get("frame_bytes"),
            limits=side,
        )

    try:
        # Both sides decode at the same time: two short ffmpeg runs, mostly start-up.
        with ThreadPoolExecutor(max_workers=2) as pool:
            frames = list(pool.map(load, (epath, opath), limits))
    except LosslessError:
        return
    if loc["frame"] not in frames[0] or loc["frame"] not in frames[1]:
        return
    a, b = frames[0][loc["frame"]], frames[1][loc["frame"]]
    dtype = media.sample_dtype(loc.get("pix_fmt"))
    if a.size * a.itemsize % dtype.itemsize or a.shape != b.shape:
        return
    a, b = a.view(dtype), b.view(dtype)
    stats = error_stats(a, b, media.sample_peak(loc.get("pix_fmt")))
    result.diagnostics.update({f"frame_{k}": v for k, v in stats.items()})
    result.diagnostics["frame_differing_samples"] = int(np.count_nonzero(a != b))
