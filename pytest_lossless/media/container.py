"""Fingerprints of media containers (mp4, mkv, mp3, ...): every video and audio stream decoded
and hashed frame by frame by ffmpeg's framehash muxer, in the stream's own format.
"""

from __future__ import annotations

import math
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..errors import ArtifactError
from .ffmpeg import (
    audio_framehash_args,
    container_framehash_args,
    frame_limit_note,
    opened,
    probe_declared,
    run_ffmpeg,
    stderr_tail,
)
from .hashing import FINGERPRINT_VERSION, file_digest
from .limits import MediaLimits, refuse
from .probe import (
    SAMPLE_FORMATS,
    FramehashStream,
    ProbeInfo,
    StreamInfo,
    layout_channels,
    packed_sample_format,
    parse_framehash,
)


def _frac_str(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def _video_stream_fp(stream: StreamInfo, fh: FramehashStream) -> dict[str, Any]:
    """A video stream's fingerprint from its framehash lines and ffmpeg's description of it."""
    tb = Fraction(fh.header.get("tb", "1/1"))
    dims = fh.header.get("dimensions", "")
    width, height = (
        (int(v) for v in dims.split("x")) if "x" in dims else (stream.width, stream.height)
    )
    frames = [{"pts": pts, "sha256": digest} for pts, _dur, _size, digest in fh.lines]
    if fh.lines:
        first, last = fh.lines[0], fh.lines[-1]
        duration = float((last[0] + last[1] - first[0]) * tb)
    else:
        duration = 0.0
    return {
        "index": stream.index,
        "type": "video",
        "codec": stream.codec,
        "pix_fmt": stream.pix_fmt,
        "width": width,
        "height": height,
        "sar": fh.header.get("sar"),
        # ffmpeg's encoder time base for raw frames is 1/frame rate: exact, unlike the "fps" text.
        "frame_rate": _frac_str(1 / tb) if tb else None,
        "time_base": stream.time_base,
        "pts_time_base": _frac_str(tb),
        "frame_count": len(frames),
        "duration": round(duration, 6),
        "frame_bytes": fh.lines[0][2] if fh.lines else 0,
        "attached_pic": stream.attached_pic,
        "frames": frames,
    }


def _audio_stream_fp(stream: StreamInfo, fh: FramehashStream, width: int) -> dict[str, Any]:
    """An audio stream's fingerprint from its framehash lines (``width``: bytes per sample)."""
    tb = Fraction(fh.header.get("tb", "1/1"))
    sample_rate = int(fh.header.get("sample_rate", stream.sample_rate or 0))
    packets = []
    total_bytes = 0
    samples = 0
    channels = 0
    for pts, duration, size, digest in fh.lines:
        packets.append({"pts": pts, "samples": duration, "sha256": digest})
        total_bytes += size
        samples += duration
        if not channels and duration:
            channels = size // (duration * width)
    sample_count = total_bytes // (width * channels) if channels else samples
    return {
        "index": stream.index,
        "type": "audio",
        "codec": stream.codec,
        "sample_fmt": stream.sample_fmt,
        "sample_rate": sample_rate,
        "channels": channels,
        "channel_layout": fh.header.get("channel_layout_name", stream.channel_layout),
        "sample_count": sample_count,
        "duration": round(sample_count / sample_rate, 6) if sample_rate else 0.0,
        "time_base": _frac_str(tb),
        "packets": packets,
    }


def _fps(stream: StreamInfo) -> float | None:
    """The frame rate ffmpeg's description declares (``25``, ``29.97``, ``1k``), if any."""
    text = stream.fps or ""
    try:
        return float(text[:-1]) * 1000 if text.endswith("k") else float(text)
    except ValueError:
        return None


def declared_decode_bytes(info: ProbeInfo, *, video: bool = True) -> int | None:
    """The least a container decodes to, from what its headers declare: duration x frame rate x
    width x height at one byte a pixel, plus duration x sample rate x channels at one byte a
    sample. None when the duration is not declared (the decode is then counted as it runs)."""
    if not info.duration or not math.isfinite(info.duration):
        return None
    total = 0
    for stream in info.streams:
        if stream.type == "video" and video:
            fps = _fps(stream)
            if stream.attached_pic or not fps:
                total += (stream.width or 0) * (stream.height or 0)
            else:
                frames = math.ceil(info.duration * fps)
                total += frames * (stream.width or 0) * (stream.height or 0)
        elif stream.type == "audio":
            samples = math.ceil(info.duration * (stream.sample_rate or 0))
            total += samples * layout_channels(stream.channel_layout)
    return total


def check_declared_container(
    path: Path, limits: MediaLimits, *, video: bool = True
) -> ProbeInfo | None:
    """Refuse a container whose headers declare frames larger than ``limits.frame_pixels`` or
    more decoded data than ``limits.decode_limit``, before a single frame is decoded (ffmpeg
    opens it with ``-skip_frame all``). None when ffmpeg cannot open it: the decode says why."""
    path = Path(path)
    info = probe_declared(path, limits)
    if info is None:
        return None
    for stream in info.of_type("video") if video else []:
        pixels = (stream.width or 0) * (stream.height or 0)
        if pixels > limits.frame_pixels:
            raise refuse(
                path,
                f"video stream #{stream.index} declares {stream.width}x{stream.height} frames of",
                pixels,
                limits.frame_pixels,
                limits.frame_basis,
                unit="pixels",
            )
    declared = declared_decode_bytes(info, video=video)
    if declared is not None and declared > limits.decode_limit:
        raise refuse(
            path,
            f"its streams declare {info.duration:g} s, which decode to at least",
            declared,
            limits.decode_limit,
            limits.decode_basis,
        )
    return info


class FramehashBudget:
    """Counts the decoded bytes ffmpeg's framehash lines report as they come (the size field of
    each line) and stops the decode once they pass ``limits.decode_limit``: a file that lies
    about its duration is still bounded."""

    def __init__(self, path: Path, limits: MediaLimits) -> None:
        self.path = path
        self.limits = limits
        self.decoded = 0
        self._partial = b""

    def __call__(self, chunk: bytes) -> None:
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            if line.startswith(b"#"):
                continue
            parts = line.split(b",")
            if len(parts) == 6 and parts[4].strip().isdigit():
                self.decoded += int(parts[4])
        if self.decoded > self.limits.decode_limit:
            raise refuse(
                self.path,
                "it",
                self.decoded,
                self.limits.decode_limit,
                self.limits.decode_basis,
                decoding=True,
            )


def fingerprint_container(
    path: Path, *, video: bool = True, limits: MediaLimits | None = None
) -> dict[str, Any]:
    """Fingerprint every video and audio stream of a container through ffmpeg's framehash.

    ``-xerror`` and the exit status are checked: a damaged or truncated file raises
    :class:`ArtifactError` naming it, it is never fingerprinted as a shorter video. The sizes
    its headers declare are checked against ``limits`` first, and the decode is counted and
    timed as it runs (:class:`~.limits.DecodeLimitExceeded`, :class:`~.limits.FFmpegTimeout`).
    """
    path = Path(path)
    limits = limits or MediaLimits.from_env()
    check_declared_container(path, limits, video=video)
    # One ffmpeg run decodes and hashes everything; its own stream description (-v info) tells
    # the sample formats. Audio is first hashed as float, the native format of most audio
    # decoders (aac, opus, vorbis, mp3); streams in another format are hashed again, natively.
    proc = run_ffmpeg(
        container_framehash_args(path, limits.frame_pixels, video=video),
        path=path,
        limits=limits,
        what="framehash decode",
        on_output=FramehashBudget(path, limits),
    )
    info = opened(path, proc.stderr)
    audio = info.of_type("audio")
    chosen = (info.of_type("video") if video else []) + audio
    if not chosen:
        raise ArtifactError(
            path, f"holds no {'video or ' if video else ''}audio stream ffmpeg can decode"
        )
    _check_decoded(path, proc, limits)
    hashed = parse_framehash(proc.stdout.decode("ascii", "replace"))
    formats = {stream.index: _sample_format(path, stream) for stream in audio}
    native = [stream for stream in audio if formats[stream.index] != "flt"]
    if native:
        encoders = [(s.index, SAMPLE_FORMATS[formats[s.index]][0]) for s in native]
        again = run_ffmpeg(
            audio_framehash_args(path, limits.frame_pixels, encoders),
            path=path,
            limits=limits,
            what="framehash decode of native audio",
            on_output=FramehashBudget(path, limits),
        )
        _check_decoded(path, again, limits)
        rehashed = parse_framehash(again.stdout.decode("ascii", "replace"))
        for pos, stream in enumerate(native):
            hashed[chosen.index(stream)] = rehashed.get(pos, FramehashStream(pos, {}, []))
    streams: list[dict[str, Any]] = []
    for pos, stream in enumerate(chosen):
        fh = hashed.get(pos, FramehashStream(pos, {}, []))
        if stream.type == "video":
            streams.append(_video_stream_fp(stream, fh))
        else:
            width = SAMPLE_FORMATS[formats[stream.index]][1]
            streams.append(_audio_stream_fp(stream, fh, width))
    size, sha = file_digest(path)
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "format": "container",
        "size": size,
        "sha256": sha,
        "container": info.container,
        "container_duration": info.duration,
        "ignored_streams": [
            f"#{s.index} {s.type} {s.codec}"
            for s in info.streams
            if s.type not in ("video", "audio") or (s.type == "video" and not video)
        ],
        "streams": streams,
    }


def _sample_format(path: Path, stream: StreamInfo) -> str:
    """The packed sample format of an audio stream; ArtifactError when ffmpeg's text names none."""
    fmt = packed_sample_format(stream)
    if fmt is None:
        raise ArtifactError(
            path,
            f"cannot tell the sample format of audio stream #{stream.index} from ffmpeg's "
            f"description {stream.line!r}; it cannot be fingerprinted exactly",
        )
    return fmt


def _check_decoded(
    path: Path, proc: subprocess.CompletedProcess[bytes], limits: MediaLimits
) -> None:
    if proc.returncode != 0:
        raise ArtifactError(
            path,
            f"ffmpeg failed to decode it (exit status {proc.returncode}): "
            f"{stderr_tail(proc.stderr)}. The file is damaged or truncated; it is not "
            "fingerprinted as a shorter video. Re-run the producer or restore the file"
            + (f"; {note}" if (note := frame_limit_note(proc.stderr, limits)) else ""),
        )
