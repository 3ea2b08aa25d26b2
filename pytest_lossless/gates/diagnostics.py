"""Diagnostics of a mismatch, never gates: max error and PSNR, diff pictures of the first differing
frame, and listings of the first differing samples or elements, written for a person to look at.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import media
from ..core.artifact import Artifact
from ..core.digests import safe_name
from ..errors import LosslessError
from .arrays import Sides, bits_differ, index_text, load_arrays, sides, unravel, value_text
from .result import GateResult

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
    try:
        frames = [
            media.load_video_frames(
                p,
                stream_index=loc.get("stream"),
                indices=[loc["frame"]],
                frame_bytes=loc.get("frame_bytes"),
                limits=side,
            )
            for p, side in zip((epath, opath), limits, strict=True)
        ]
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


def write_diagnostics(
    result: GateResult,
    expected: Artifact,
    obtained: Artifact,
    directory: Path,
    *,
    limits: media.MediaLimits | None = None,
) -> list[str]:
    """Write diff pictures / listings of the first mismatch into ``directory``; return paths.

    Video: the first differing frame, expected and obtained as PNG, and an amplified difference
    picture. Audio and tensors: a text listing of the first differing positions. Files are
    decoded within ``limits`` (the obtained one within limits derived from its golden).
    """
    if result.passed or expected.path is None or obtained.path is None:
        return []
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    base = directory / safe_name(expected.name, default="artifact")
    written: list[str] = []
    loc = result.location
    pair = sides(limits, expected)
    if "frame" in loc:
        written += _write_frame_pictures(base, expected.path, obtained.path, loc, pair)
    elif result.kind in ("tensor", "audio") and ("index" in loc or "sample" in loc):
        written += _write_listing(base, result, expected.path, obtained.path, pair)
    result.diagnostic_files.extend(written)
    return written


def _write_frame_pictures(
    base: Path, epath: Path, opath: Path, loc: dict[str, Any], limits: Sides
) -> list[str]:
    n = int(loc["frame"])
    try:
        pictures = [
            media.load_video_frames(
                p, stream_index=loc.get("stream"), pix_fmt="rgb24", indices=[n], limits=side
            ).get(n)
            for p, side in zip((epath, opath), limits, strict=True)
        ]
    except LosslessError:
        return []
    a, b = pictures
    if a is None or b is None or a.shape != b.shape:
        return []
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=2)
    peak = int(diff.max())
    # Amplified so that a one-level change is visible: any change is at least mid-grey.
    scaled = np.where(diff > 0, 128 + (diff.astype(np.int32) * 127) // max(peak, 1), 0)
    picture = np.repeat(scaled.astype(np.uint8)[:, :, None], 3, axis=2)
    paths = [
        media.write_png(base.with_name(f"{base.name}.frame{n}.{what}.png"), data, limits=limits[0])
        for what, data in (("expected", a), ("obtained", b), ("diff", picture))
    ]
    return [str(p) for p in paths]


def _write_listing(
    base: Path, result: GateResult, epath: Path, opath: Path, limits: Sides
) -> list[str]:
    if result.kind == "tensor":
        ea, oa = load_arrays(epath, limits[0]), load_arrays(opath, limits[1])
        name = str(result.location.get("member", ""))
        if name not in ea or name not in oa:
            return []
        a, b = np.asarray(ea[name]), np.asarray(oa[name])
    else:
        a, _ = media.load_audio(epath, limits=limits[0])
        b, _ = media.load_audio(opath, limits=limits[1])
        n = min(len(a), len(b))
        a, b = a[:n], b[:n]
    if a.shape != b.shape or a.dtype != b.dtype:
        return []
    differ = bits_differ(a, b)
    if not differ.any():
        return []
    lines = [
        f"# first differing positions of {result.artifact!r} under gate {result.gate}",
        "# index\texpected\tobtained",
    ]
    for flat in np.flatnonzero(differ.reshape(-1))[:_LISTED]:
        index = unravel(int(flat), a.shape)
        lines.append(f"{index_text(index)}\t{value_text(a, index)}\t{value_text(b, index)}")
    path = base.with_name(f"{base.name}.diff.txt")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [str(path)]
