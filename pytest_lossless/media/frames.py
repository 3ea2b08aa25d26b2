"""Decoded video frames: a stream's frames as raw samples (to locate and measure a difference)
or rgb24 pictures, the sample type of a pixel format, and pictures written as PNG.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ArtifactError, LosslessError
from .ffmpeg import (
    FFmpegRun,
    first_frame_framehash_args,
    frame_limit_error,
    frame_limit_note,
    png_args,
    rawvideo_args,
    run_ffmpeg,
    stderr_tail,
)
from .limits import MediaLimits, refuse
from .probe import parse_framehash

#: The most bytes one pixel takes in any raw format ffmpeg has (gbrapf32: 4 x 32-bit floats).
MAX_PIXEL_BYTES = 16


def sample_dtype(pix_fmt: str | None) -> np.dtype[Any]:
    """The numpy dtype of one sample of a raw frame in ``pix_fmt`` (diagnostics only)."""
    if not pix_fmt:
        return np.dtype("u1")
    if pix_fmt.endswith(("f32le", "f32be")) or pix_fmt.endswith("f32"):
        return np.dtype("<f4" if not pix_fmt.endswith("be") else ">f4")
    if re.search(r"(9|10|12|14|16|48|64)(le|be)$", pix_fmt) or pix_fmt.startswith("p01"):
        return np.dtype("<u2" if pix_fmt.endswith("le") else ">u2")
    return np.dtype("u1")


def sample_peak(pix_fmt: str | None) -> float:
    """The largest sample value of ``pix_fmt`` (for PSNR)."""
    if not pix_fmt:
        return 255.0
    match = re.search(r"(9|10|12|14|16)(le|be)$", pix_fmt)
    if match:
        return float(2 ** int(match[1]) - 1)
    if re.search(r"(48|64)(le|be)$", pix_fmt):
        return 65535.0
    if pix_fmt.startswith("p01"):
        return 65535.0
    return 1.0 if "f32" in pix_fmt else 255.0


def iter_video_frames(
    path: Path,
    *,
    stream_index: int | None = None,
    pix_fmt: str | None = None,
    frame_bytes: int | None = None,
    dtype: npt.DTypeLike | None = None,
    limits: MediaLimits | None = None,
    seek: float | None = None,
    count: int | None = None,
) -> Generator[npt.NDArray[Any], None, None]:
    """Decode a video stream frame by frame, with passthrough timing.

    With ``pix_fmt=None`` frames come in the stream's own pixel format as 1-D arrays of
    ``dtype`` (bytes unless given; ``frame_bytes`` from the fingerprint, or found by decoding
    the first frame); with ``pix_fmt="rgb24"`` (for pictures) as ``(height, width, 3)`` uint8
    arrays. ffmpeg runs under ``limits``: its time limit, the frame-size limit, and the decode
    limit on the bytes read (a ``frame_bytes`` that no frame can have is refused). ``seek`` and
    ``count``: only ``count`` frames from the key frame at or before ``seek`` seconds
    (:func:`~.ffmpeg.rawvideo_args`).
    """
    path = Path(path)
    limits = limits or MediaLimits.from_env()
    if pix_fmt not in (None, "rgb24"):
        raise LosslessError(f"iter_video_frames: pix_fmt must be None or 'rgb24', not {pix_fmt!r}")
    rgb24 = pix_fmt == "rgb24"
    selector = f"0:{stream_index}" if stream_index is not None else "0:v:0"
    width = height = 0
    if rgb24 or frame_bytes is None:
        width, height, native_bytes = _first_frame_layout(path, selector, limits)
        frame_bytes = width * height * 3 if rgb24 else native_bytes
    most = limits.frame_pixels * MAX_PIXEL_BYTES
    if isinstance(frame_bytes, bool) or not isinstance(frame_bytes, int) or frame_bytes <= 0:
        raise ArtifactError(path, f"{frame_bytes!r} is not the size of a raw frame")
    if frame_bytes > most:
        raise refuse(
            path,
            "one raw frame of",
            frame_bytes,
            most,
            f"{MAX_PIXEL_BYTES} bytes a pixel of "
            f"the {limits.frame_pixels} pixels allowed, {limits.frame_basis}",
        )
    sample = np.dtype(np.uint8) if rgb24 or dtype is None else np.dtype(dtype)
    read = 0
    args = rawvideo_args(path, limits.frame_pixels, selector, rgb24=rgb24, seek=seek, count=count)
    with FFmpegRun(args, path=path, limits=limits, what="raw frame decode") as run:
        while True:
            raw = run.stdout.read(frame_bytes)
            if not raw:
                break
            run.check_expired()
            if len(raw) < frame_bytes:
                raise ArtifactError(path, "ffmpeg returned a partial raw frame")
            read += len(raw)
            if read > limits.decode_limit:
                raise refuse(
                    path, "it", read, limits.decode_limit, limits.decode_basis, decoding=True
                )
            frame = np.frombuffer(raw, dtype=sample)
            yield frame.reshape(height, width, 3) if rgb24 else frame
        code, stderr = run.finish()
    if code != 0:
        if (over := frame_limit_error(path, stderr, limits)) is not None:
            raise over
        note = frame_limit_note(stderr, limits)
        raise ArtifactError(
            path,
            f"ffmpeg failed to decode it (exit {code}): {stderr_tail(stderr)}"
            + (f"; {note}" if note else ""),
        )


def _first_frame_layout(path: Path, selector: str, limits: MediaLimits) -> tuple[int, int, int]:
    """Width, height and native raw size of the first frame of a stream (decodes one frame)."""
    proc = run_ffmpeg(
        first_frame_framehash_args(path, limits.frame_pixels, selector),
        path=path,
        limits=limits,
        what="first-frame decode",
    )
    streams = parse_framehash(proc.stdout.decode("ascii", "replace"))
    if proc.returncode != 0 or 0 not in streams or not streams[0].lines:
        if (over := frame_limit_error(path, proc.stderr, limits)) is not None:
            raise over
        note = frame_limit_note(proc.stderr, limits)
        raise ArtifactError(
            path,
            f"ffmpeg cannot decode a first frame: {stderr_tail(proc.stderr)}"
            + (f"; {note}" if note else ""),
        )
    width, height = (int(v) for v in streams[0].header["dimensions"].split("x"))
    return width, height, streams[0].lines[0][2]


def load_video_frames(
    path: Path,
    *,
    stream_index: int | None = None,
    pix_fmt: str | None = None,
    indices: Sequence[int] | None = None,
    frame_bytes: int | None = None,
    limits: MediaLimits | None = None,
    seek: float | None = None,
) -> dict[int, npt.NDArray[Any]]:
    """Decoded frames by index (all, or only ``indices``); see :func:`iter_video_frames`
    (``frame_bytes`` from the fingerprint spares the decode that would find it). With ``seek``
    the indices count from the key frame at or before ``seek`` seconds, and ffmpeg decodes no
    frame past the last one wanted."""
    wanted = set(indices) if indices is not None else None
    last = max(wanted) if wanted else None
    frames: dict[int, npt.NDArray[Any]] = {}
    decoded = iter_video_frames(
        path,
        stream_index=stream_index,
        pix_fmt=pix_fmt,
        frame_bytes=frame_bytes,
        limits=limits,
        seek=seek,
        count=None if seek is None or last is None else last + 1,
    )
    try:
        for n, frame in enumerate(decoded):
            if wanted is None or n in wanted:
                frames[n] = frame
            if last is not None and n >= last:
                break
    finally:
        decoded.close()  # stops ffmpeg now, not when the generator is collected
    return frames


def write_png(
    path: Path, picture: npt.NDArray[np.uint8], *, limits: MediaLimits | None = None
) -> Path:
    """Write an ``(height, width, 3)`` uint8 picture as PNG with ffmpeg (under the time limit)."""
    height, width = picture.shape[:2]
    proc = run_ffmpeg(
        png_args(path, width, height),
        path=path,
        limits=limits or MediaLimits.from_env(),
        what="PNG encode",
        input_bytes=np.ascontiguousarray(picture, dtype=np.uint8).tobytes(),
    )
    if proc.returncode != 0:
        raise LosslessError(f"ffmpeg could not write {path}: {stderr_tail(proc.stderr)}")
    return path
