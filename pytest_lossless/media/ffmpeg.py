"""The ffmpeg bundled with imageio-ffmpeg: finding it, running it, and the one place that builds
every ffmpeg command line, so that each decode is written once and always the same way.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import ArtifactError, LosslessError
from .probe import ProbeInfo, parse_probe

#: ffmpeg's framehash muxer, format version 2, on stdout: one SHA-256 line per decoded frame.
_FRAMEHASH_OUTPUT = ("-f", "framehash", "-hash", "sha256", "-format_version", "2", "-")
#: Raw video frames, each passed through with its own timestamp (none dropped or duplicated).
_RAW_FRAMES = ("-c:v", "rawvideo", "-fps_mode", "passthrough")


def ffmpeg_exe() -> str:
    """The ffmpeg executable bundled with imageio-ffmpeg (or named by IMAGEIO_FFMPEG_EXE)."""
    try:
        import imageio_ffmpeg
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise LosslessError(
            "imageio-ffmpeg is not installed: pip install imageio-ffmpeg (pytest-lossless "
            "decodes video with the ffmpeg it bundles)"
        ) from exc
    try:
        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except RuntimeError as exc:
        raise LosslessError(f"no ffmpeg executable found by imageio-ffmpeg: {exc}") from exc


# ------------------------------------------------------------------ command lines


def _command(args: Sequence[str], *, stdin: bool = False) -> list[str]:
    """The whole command: the executable, no banner, no keyboard input unless fed on stdin."""
    return [ffmpeg_exe(), "-hide_banner", *(() if stdin else ("-nostdin",)), *args]


def _decode_input(path: Path, *, log: str = "error", xerror: bool = True) -> list[str]:
    """Read ``path`` at log level ``log``; with ``xerror`` the first decoding error is fatal."""
    args = ["-v", log]
    if log == "info":
        args.append("-nostats")  # the stream description is wanted on stderr, not the progress
    if xerror:
        args.append("-xerror")
    return [*args, "-i", str(path)]


def _maps(selectors: Iterable[str]) -> list[str]:
    return [arg for selector in selectors for arg in ("-map", selector)]


def probe_args(path: Path) -> list[str]:
    """Open ``path`` and stop: ffmpeg describes the input on stderr and exits (no output)."""
    return ["-i", str(path)]


def container_framehash_args(path: Path, *, video: bool) -> list[str]:
    """One pass over a container: every audio stream as float PCM and (with ``video``) every
    video stream as raw frames, hashed frame by frame, with the stream description on stderr."""
    maps = ["0:v?", "0:a?"] if video else ["0:a?"]
    codecs = ["-c:a", "pcm_f32le", *(_RAW_FRAMES if video else ())]
    return [*_decode_input(path, log="info"), *_maps(maps), *codecs, *_FRAMEHASH_OUTPUT]


def audio_framehash_args(path: Path, streams: Sequence[tuple[int, str]]) -> list[str]:
    """Audio streams, given as ``(stream index, pcm encoder)``, hashed in their own format."""
    codecs = [arg for pos, (_index, enc) in enumerate(streams) for arg in (f"-c:a:{pos}", enc)]
    maps = _maps(f"0:{index}" for index, _enc in streams)
    return [*_decode_input(path), *maps, *codecs, *_FRAMEHASH_OUTPUT]


def first_frame_framehash_args(path: Path, selector: str) -> list[str]:
    """The first frame of one video stream, hashed raw: the framehash header gives its
    dimensions, its line the size of one native raw frame."""
    return [
        *_decode_input(path, xerror=False),
        *_maps([selector]),
        *("-frames:v", "1", "-c:v", "rawvideo"),
        *_FRAMEHASH_OUTPUT,
    ]


def rawvideo_args(path: Path, selector: str, *, rgb24: bool = False) -> list[str]:
    """One video stream's raw frames on stdout, natively or (``rgb24``) converted for pictures."""
    convert = ("-pix_fmt", "rgb24") if rgb24 else ()
    return [
        *_decode_input(path),
        *_maps([selector]),
        *("-fps_mode", "passthrough"),
        *convert,
        *("-f", "rawvideo", "-"),
    ]


def pcm_args(path: Path, index: int, encoder: str) -> list[str]:
    """One audio stream's samples on stdout through the pcm ``encoder`` (no container)."""
    return [*_decode_input(path), *_maps([f"0:{index}"]), "-c:a", encoder, "-f", "data", "-"]


def png_args(target: Path, width: int, height: int) -> list[str]:
    """One ``width`` x ``height`` rgb24 picture read from stdin, written to ``target`` as PNG."""
    return [
        *("-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}"),
        *("-i", "-", "-frames:v", "1", "-y", str(target)),
    ]


# ------------------------------------------------------------------ running


def run_ffmpeg(
    args: Sequence[str], *, input_bytes: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run ffmpeg with ``args`` (a list, never a shell string), capturing both streams."""
    cmd = _command(args, stdin=input_bytes is not None)
    return subprocess.run(cmd, input=input_bytes, capture_output=True, check=False)


def popen_ffmpeg(args: Sequence[str]) -> subprocess.Popen[bytes]:
    """Start ffmpeg with ``args``, its stdout and stderr as pipes (for output read as it comes)."""
    return subprocess.Popen(_command(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def stderr_tail(stderr: bytes, lines: int = 4) -> str:
    """The last lines of ffmpeg's stderr, without its memory addresses, for error messages."""
    text = stderr.decode("utf-8", "replace").strip().splitlines()
    tail = [re.sub(r" @ 0x[0-9a-f]+", "", line.strip()) for line in text[-lines:]]
    return " | ".join(tail) or "(no message)"


def opened(path: Path, stderr: bytes) -> ProbeInfo:
    """The streams ffmpeg described on stderr; ArtifactError when it could not open the file."""
    info = parse_probe(stderr.decode("utf-8", "replace"))
    if info is None:
        raise ArtifactError(
            path,
            "ffmpeg cannot open it as a media container (damaged, truncated, or not media): "
            f"{stderr_tail(stderr)}",
        )
    return info


def probe(path: Path) -> ProbeInfo:
    """Open ``path`` with ffmpeg and describe its streams; ArtifactError if it cannot be opened."""
    return opened(path, run_ffmpeg(probe_args(path)).stderr)


def try_probe(path: Path) -> ProbeInfo | None:
    """Open ``path`` with ffmpeg and describe its streams; None if it cannot be opened."""
    return parse_probe(run_ffmpeg(probe_args(path)).stderr.decode("utf-8", "replace"))
