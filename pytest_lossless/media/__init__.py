"""Media: what an artifact is, its fingerprint, and loaders for diagnostics.

Kinds are found from the content (container signatures and an ffmpeg probe, RIFF/RF64/FLAC
headers, the ``.npy`` magic), never only from the extension. Fingerprints are JSON-able dicts of
metadata plus SHA-256 digests; they are what a digest-only golden keeps. Video goes through the
ffmpeg bundled with imageio-ffmpeg (there is no ffprobe): one SHA-256 per decoded frame in the
stream's own pixel format with passthrough timing, the same digests as
``ffmpeg -i FILE -map 0:v -f framehash -hash sha256 -``. Audio files go through libsndfile
(soundfile), read losslessly; tensors through numpy with ``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import struct
import subprocess
import zipfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ..core.digests import sha256_file
from ..errors import ArtifactError, LosslessError, TruncatedArtifact

#: Version of the fingerprint layout, stored in every fingerprint.
FINGERPRINT_VERSION = 1
#: Bytes read at the start of a file for content detection.
HEAD_BYTES = 4096
#: Chunk size of the per-chunk digests of bytes and tensors (localisation in digest-only goldens).
CHUNK_BYTES = 1 << 20

BUILTIN_KINDS = ("video", "audio", "tensor", "bytes")

# Decoded audio sample format -> (pcm encoder, bytes per sample, numpy dtype, raw muxer).
# Planar formats are interleaved by the encoder: a change of layout, never of value.
_SAMPLE_FORMATS: dict[str, tuple[str, int, str]] = {
    "u8": ("pcm_u8", 1, "u1"),
    "s16": ("pcm_s16le", 2, "<i2"),
    "s32": ("pcm_s32le", 4, "<i4"),
    "s64": ("pcm_s64le", 8, "<i8"),
    "flt": ("pcm_f32le", 4, "<f4"),
    "dbl": ("pcm_f64le", 8, "<f8"),
}

_STRONG_CONTAINER_BRANDS = (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip", b"pnot")
_WEAK_CONTAINER_SUFFIXES = frozenset(
    {
        ".mp4",
        ".m4v",
        ".m4a",
        ".mov",
        ".mkv",
        ".webm",
        ".avi",
        ".ts",
        ".mts",
        ".m2ts",
        ".mpg",
        ".mpeg",
        ".ogg",
        ".ogv",
        ".oga",
        ".opus",
        ".flv",
        ".mp3",
        ".aac",
        ".3gp",
    }
)


# ------------------------------------------------------------------ ffmpeg


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


def _run_ffmpeg(
    args: Sequence[str], *, input_bytes: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run ffmpeg with ``args`` (a list, never a shell string), capturing both streams."""
    cmd = [ffmpeg_exe(), "-hide_banner", "-nostdin", *args]
    if input_bytes is not None:
        cmd.remove("-nostdin")
    return subprocess.run(cmd, input=input_bytes, capture_output=True, check=False)


def _stderr_tail(stderr: bytes, lines: int = 4) -> str:
    """The last lines of ffmpeg's stderr, without its memory addresses, for error messages."""
    text = stderr.decode("utf-8", "replace").strip().splitlines()
    tail = [re.sub(r" @ 0x[0-9a-f]+", "", line.strip()) for line in text[-lines:]]
    return " | ".join(tail) or "(no message)"


# ------------------------------------------------------------------ probe (stream info text)


@dataclass(frozen=True)
class StreamInfo:
    """One stream as ffmpeg describes it when opening the input (``ffmpeg -i FILE``)."""

    index: int
    type: str  # "video", "audio", "subtitle", "data", "attachment"
    codec: str
    pix_fmt: str | None = None
    width: int | None = None
    height: int | None = None
    fps: str | None = None
    time_base: str | None = None
    sample_rate: int | None = None
    channel_layout: str | None = None
    sample_fmt: str | None = None
    attached_pic: bool = False
    line: str = ""


@dataclass(frozen=True)
class ProbeInfo:
    """What ffmpeg reports about an input before decoding anything."""

    container: str
    duration: float | None
    streams: tuple[StreamInfo, ...]

    def of_type(self, kind: str) -> list[StreamInfo]:
        return [s for s in self.streams if s.type == kind]


_INPUT_RE = re.compile(r"^Input #0, (?P<fmt>.+?), from '")
_DURATION_RE = re.compile(r"^\s*Duration: (?:(?P<h>\d+):(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)|N/A)")
_STREAM_RE = re.compile(
    r"^\s*Stream #0:(?P<idx>\d+)(?:\[[^\]]*\])?(?:\([^)]*\))?: (?P<type>[A-Za-z]+): (?P<rest>.*)$"
)
_SIZE_RE = re.compile(r"^(?P<w>\d+)x(?P<h>\d+)\b")
_RATE_RE = re.compile(r"^(?P<v>\d+(?:\.\d+)?)(?P<k>k?) (?P<unit>fps|tbr|tbn|tbc)$")
_FMT_TOKEN_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def _split_top_level(text: str) -> list[str]:
    """Split ffmpeg's comma-separated stream description, keeping ``(a, b)`` groups intact."""
    fields: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "([":
            depth += 1
        elif char in ")]" and depth:
            depth -= 1
        if char == "," and depth == 0:
            fields.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    fields.append("".join(current).strip())
    return [f for f in fields if f]


def _rate_to_tb(value: str, k: str) -> str:
    """``12288`` -> ``1/12288``, ``90k`` -> ``1/90000``; a non-integer rate stays approximate."""
    rate = Fraction(value) * (1000 if k else 1)
    return str(1 / rate) if rate else "0"


def _parse_stream(line: str, match: re.Match[str]) -> StreamInfo:
    kind = match["type"].lower()
    rest = match["rest"]
    attached = "(attached pic)" in rest
    fields = _split_top_level(rest)
    codec = fields[0].split()[0] if fields and fields[0].split() else "unknown"
    info: dict[str, Any] = {
        "index": int(match["idx"]),
        "type": kind,
        "codec": codec,
        "attached_pic": attached,
        "line": line.strip(),
    }
    if kind == "video":
        for pos, field in enumerate(fields[1:], start=1):
            size = _SIZE_RE.match(field)
            if size and info.get("width") is None:
                info["width"], info["height"] = int(size["w"]), int(size["h"])
                # The pixel format is the field just before the size, when the codec has one.
                if pos >= 2:
                    token = fields[pos - 1].split("(")[0].strip()
                    if _FMT_TOKEN_RE.match(token):
                        info["pix_fmt"] = token
            for part in field.split(","):
                rate = _RATE_RE.match(part.strip().split(" (")[0].strip())
                if rate and rate["unit"] == "fps":
                    info["fps"] = rate["v"] + rate["k"]
                elif rate and rate["unit"] == "tbn":
                    info["time_base"] = _rate_to_tb(rate["v"], rate["k"])
        if info.get("pix_fmt") is None and len(fields) > 1:
            token = fields[1].split("(")[0].strip()
            if _FMT_TOKEN_RE.match(token) and not _SIZE_RE.match(token):
                info["pix_fmt"] = token
    elif kind == "audio":
        for pos, field in enumerate(fields[1:], start=1):
            hz = re.match(r"^(\d+) Hz$", field)
            if hz:
                info["sample_rate"] = int(hz[1])
                if pos + 1 < len(fields):
                    info["channel_layout"] = fields[pos + 1]
                if pos + 2 < len(fields):
                    token = fields[pos + 2].split(" ")[0].split("(")[0]
                    if token.rstrip("p") in _SAMPLE_FORMATS:
                        info["sample_fmt"] = token
        if info.get("sample_fmt") is None:
            for field in fields[1:]:
                token = field.split(" ")[0].split("(")[0]
                if token.rstrip("p") in _SAMPLE_FORMATS:
                    info["sample_fmt"] = token
                    break
    return StreamInfo(**info)


def parse_probe(text: str) -> ProbeInfo | None:
    """Parse the stream description ffmpeg prints when it opens an input.

    Returns ``None`` when the text holds no ``Input #0`` (ffmpeg could not open the file).
    """
    container: str | None = None
    duration: float | None = None
    streams: list[StreamInfo] = []
    for line in text.splitlines():
        head = _INPUT_RE.match(line)
        if head:
            container = head["fmt"]
            continue
        if container is None:
            continue
        if line.startswith(("Input #", "Output #", "Stream mapping")):
            break
        dur = _DURATION_RE.match(line)
        if dur:
            if dur["h"] is not None:
                duration = int(dur["h"]) * 3600 + int(dur["m"]) * 60 + float(dur["s"])
            continue
        stream = _STREAM_RE.match(line)
        if stream:
            streams.append(_parse_stream(line, stream))
    if container is None:
        return None
    return ProbeInfo(container=container, duration=duration, streams=tuple(streams))


def _opened(path: Path, stderr: bytes) -> ProbeInfo:
    """The streams ffmpeg described on stderr; ArtifactError when it could not open the file."""
    info = parse_probe(stderr.decode("utf-8", "replace"))
    if info is None:
        raise ArtifactError(
            path,
            "ffmpeg cannot open it as a media container (damaged, truncated, or not media): "
            f"{_stderr_tail(stderr)}",
        )
    return info


def probe(path: Path) -> ProbeInfo:
    """Open ``path`` with ffmpeg and describe its streams; ArtifactError if it cannot be opened."""
    proc = _run_ffmpeg(["-i", str(path)])
    info = _opened(path, proc.stderr)
    return info


# ------------------------------------------------------------------ framehash


@dataclass
class FramehashStream:
    """One output stream of ffmpeg's ``framehash`` muxer: header fields and per-frame lines."""

    index: int
    header: dict[str, str]
    lines: list[tuple[int, int, int, str]]  # (pts, duration, size, digest)


def parse_framehash(text: str) -> dict[int, FramehashStream]:
    """Parse ``-f framehash`` output (format version 2) into streams keyed by output index."""
    streams: dict[int, FramehashStream] = {}
    header_re = re.compile(r"^#(?P<key>[a-z_]+) (?P<idx>\d+): (?P<value>.*)$")
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            head = header_re.match(line)
            if head:
                idx = int(head["idx"])
                streams.setdefault(idx, FramehashStream(idx, {}, []))
                streams[idx].header[head["key"]] = head["value"].strip()
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6:
            raise LosslessError(f"unexpected framehash line from ffmpeg: {line!r}")
        idx = int(parts[0])
        streams.setdefault(idx, FramehashStream(idx, {}, []))
        streams[idx].lines.append((int(parts[2]), int(parts[3]), int(parts[4]), parts[5]))
    return streams


# ------------------------------------------------------------------ detection


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of ``path``; ArtifactError naming the file if it is unreadable."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except FileNotFoundError:
        raise ArtifactError(path, "the artifact does not exist (was it written?)") from None
    except IsADirectoryError:
        raise ArtifactError(path, "is a folder, not an artifact file") from None
    except OSError as exc:
        raise ArtifactError(path, f"cannot be read: {exc.strerror or exc}") from None


def is_audio_header(head: bytes) -> bool:
    """RIFF/WAVE, RF64/BW64 WAVE, or a FLAC stream marker."""
    if len(head) >= 12 and head[:4] in (b"RIFF", b"RF64", b"BW64") and head[8:12] == b"WAVE":
        return True
    return head[:4] == b"fLaC"


def is_tensor_file(path: Path, head: bytes) -> bool:
    """A ``.npy`` file (``\\x93NUMPY``) or a zip whose members are all ``.npy`` (``.npz``)."""
    if head.startswith(b"\x93NUMPY"):
        return True
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except (zipfile.BadZipFile, OSError):
            # A damaged .npz is still a tensor artifact: fingerprinting will say what is wrong.
            return path.suffix.lower() == ".npz"
        return bool(names) and all(n.endswith(".npy") for n in names)
    return False


def has_container_signature(head: bytes) -> bool:
    """ISO BMFF (mp4/mov: ``ftyp``, ``moov``...) or EBML (mkv/webm) at the start of the file."""
    if len(head) >= 8 and head[4:8] in _STRONG_CONTAINER_BRANDS:
        return True
    return head[:4] == b"\x1a\x45\xdf\xa3"


def _maybe_container(path: Path, head: bytes) -> bool:
    """Weaker hints worth an ffmpeg probe: AVI, Ogg, FLV, MPEG-TS/PS, MP3, or a media suffix."""
    if head[:4] == b"RIFF" and head[8:12] in (b"AVI ", b"AVIX"):
        return True
    if head[:4] in (b"OggS", b"\x00\x00\x01\xba") or head[:3] in (b"FLV", b"ID3"):
        return True
    if len(head) > 188 and head[0] == 0x47 and head[188] == 0x47:
        return True
    return path.suffix.lower() in _WEAK_CONTAINER_SUFFIXES


def detect_kind(path: Path, head: bytes | None = None) -> str:
    """The built-in kind of ``path`` from its content: video, audio, tensor or bytes."""
    path = Path(path)
    if head is None:
        head = read_head(path)
    if is_tensor_file(path, head):
        return "tensor"
    if is_audio_header(head):
        return "audio"
    strong = has_container_signature(head)
    if strong or _maybe_container(path, head):
        proc = _run_ffmpeg(["-i", str(path)])
        info = parse_probe(proc.stderr.decode("utf-8", "replace"))
        if info is None:
            # A damaged mp4/mkv stays video so that fingerprinting reports the damage.
            return "video" if strong else "bytes"
        if info.of_type("video"):
            return "video"
        if info.of_type("audio"):
            return "audio"
        if strong:
            return "video"
    return "bytes"


# ------------------------------------------------------------------ hashing helpers


def file_digest(path: Path) -> tuple[int, str]:
    """Size and SHA-256 of the file's bytes."""
    try:
        return path.stat().st_size, sha256_file(path, CHUNK_BYTES)
    except OSError as exc:
        raise ArtifactError(path, f"cannot be read: {exc.strerror or exc}") from None


def _frac_str(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def fingerprint_bytes(path: Path) -> dict[str, Any]:
    """Size, SHA-256, and one SHA-256 per MiB (so a digest-only golden can localise a change)."""
    whole = hashlib.sha256()
    chunks: list[str] = []
    size = 0
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK_BYTES):
                whole.update(chunk)
                chunks.append(_sha(chunk))
                size += len(chunk)
    except OSError as exc:
        raise ArtifactError(path, f"cannot be read: {exc.strerror or exc}") from None
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "size": size,
        "sha256": whole.hexdigest(),
        "chunk_bytes": CHUNK_BYTES,
        "chunk_sha256": chunks,
    }


# ------------------------------------------------------------------ video (and container audio)


def _container_command(
    path: Path, info: ProbeInfo, *, video: bool
) -> tuple[list[str], list[StreamInfo]]:
    """The framehash command: every video stream (if ``video``) then every audio stream."""
    chosen: list[StreamInfo] = []
    args = ["-v", "error", "-xerror", "-i", str(path)]
    if video:
        chosen += info.of_type("video")
    audio = info.of_type("audio")
    chosen += audio
    for stream in chosen:
        args += ["-map", f"0:{stream.index}"]
    for pos, stream in enumerate(audio):
        fmt = (stream.sample_fmt or "").rstrip("p")
        if fmt not in _SAMPLE_FORMATS:
            raise ArtifactError(
                path,
                f"cannot tell the sample format of audio stream #{stream.index} from ffmpeg's "
                f"description {stream.line!r}; it cannot be fingerprinted exactly",
            )
        args += [f"-c:a:{pos}", _SAMPLE_FORMATS[fmt][0]]
    if video and info.of_type("video"):
        args += ["-c:v", "rawvideo", "-fps_mode", "passthrough"]
    args += ["-f", "framehash", "-hash", "sha256", "-format_version", "2", "-"]
    return args, chosen


def _video_stream_fp(stream: StreamInfo, fh: FramehashStream) -> dict[str, Any]:
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


def _audio_stream_fp(stream: StreamInfo, fh: FramehashStream) -> dict[str, Any]:
    fmt = (stream.sample_fmt or "").rstrip("p")
    width = _SAMPLE_FORMATS[fmt][1]
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


def fingerprint_container(path: Path, *, video: bool = True) -> dict[str, Any]:
    """Fingerprint every video and audio stream of a container through ffmpeg's framehash.

    ``-xerror`` and the exit status are checked: a damaged or truncated file raises
    :class:`ArtifactError` naming it, it is never fingerprinted as a shorter video.
    """
    path = Path(path)
    # One ffmpeg run decodes and hashes everything; its own stream description (-v info) tells
    # the sample formats. Audio is first hashed as float, the native format of most audio
    # decoders (aac, opus, vorbis, mp3); streams in another format are hashed again, natively.
    args = ["-v", "info", "-nostats", "-xerror", "-i", str(path)]
    if video:
        args += ["-map", "0:v?"]
    args += ["-map", "0:a?", "-c:a", "pcm_f32le"]
    if video:
        args += ["-c:v", "rawvideo", "-fps_mode", "passthrough"]
    args += ["-f", "framehash", "-hash", "sha256", "-format_version", "2", "-"]
    proc = _run_ffmpeg(args)
    info = _opened(path, proc.stderr)
    chosen = (info.of_type("video") if video else []) + info.of_type("audio")
    if not chosen:
        raise ArtifactError(
            path, f"holds no {'video or ' if video else ''}audio stream ffmpeg can decode"
        )
    _check_decoded(path, proc)
    hashed = parse_framehash(proc.stdout.decode("ascii", "replace"))
    native = [s for s in info.of_type("audio") if (s.sample_fmt or "").rstrip("p") != "flt"]
    if native:
        audio_args, _ = _container_command(
            path, ProbeInfo(info.container, None, tuple(native)), video=False
        )
        again = _run_ffmpeg(audio_args)
        _check_decoded(path, again)
        rehashed = parse_framehash(again.stdout.decode("ascii", "replace"))
        for pos, stream in enumerate(native):
            hashed[chosen.index(stream)] = rehashed.get(pos, FramehashStream(pos, {}, []))
    streams: list[dict[str, Any]] = []
    for pos, stream in enumerate(chosen):
        fh = hashed.get(pos, FramehashStream(pos, {}, []))
        if stream.type == "video":
            streams.append(_video_stream_fp(stream, fh))
        else:
            streams.append(_audio_stream_fp(stream, fh))
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


def _check_decoded(path: Path, proc: subprocess.CompletedProcess[bytes]) -> None:
    if proc.returncode != 0:
        raise ArtifactError(
            path,
            f"ffmpeg failed to decode it (exit status {proc.returncode}): "
            f"{_stderr_tail(proc.stderr)}. The file is damaged or truncated; it is not "
            "fingerprinted as a shorter video. Re-run the producer or restore the file",
        )


def fingerprint_video(path: Path) -> dict[str, Any]:
    """Fingerprint a video container: stream metadata, per-frame and per-audio-frame digests."""
    return fingerprint_container(path, video=True)


# ------------------------------------------------------------------ audio files


@dataclass(frozen=True)
class WavLayout:
    """Where the PCM of a WAV/RF64 file lies, as its own chunks declare it."""

    block_align: int
    data_offset: int
    declared_bytes: int | None  # None: a streaming writer left the size open
    present_bytes: int


def parse_wav_layout(path: Path) -> WavLayout:
    """Walk the RIFF chunks of a WAV (or RF64/BW64) file up to its ``data`` chunk."""
    try:
        file_size = path.stat().st_size
        with open(path, "rb") as fh:
            return _walk_riff(path, fh, file_size)
    except OSError as exc:
        raise ArtifactError(path, f"cannot be read: {exc.strerror or exc}") from None


def _walk_riff(path: Path, fh: IO[bytes], file_size: int) -> WavLayout:
    head = fh.read(12)
    if len(head) < 12 or head[8:12] != b"WAVE":
        raise ArtifactError(path, "not a RIFF/WAVE file")
    rf64 = head[:4] in (b"RF64", b"BW64")
    ds64_data: int | None = None
    block_align: int | None = None
    while True:
        header = fh.read(8)
        if len(header) < 8:
            raise TruncatedArtifact(
                path,
                "the WAV file ends before its data chunk: it is truncated; re-run the "
                "producer or restore the file",
            )
        chunk_id, size = header[:4], struct.unpack("<I", header[4:])[0]
        start = fh.tell()
        if chunk_id == b"ds64" and rf64:
            body = fh.read(min(size, 28))
            if len(body) >= 16:
                ds64_data = struct.unpack("<Q", body[8:16])[0]
        elif chunk_id == b"fmt ":
            body = fh.read(min(size, 16))
            if len(body) < 14:
                raise TruncatedArtifact(path, "the WAV fmt chunk is cut short")
            block_align = struct.unpack("<H", body[12:14])[0]
        elif chunk_id == b"data":
            if block_align is None or block_align == 0:
                raise ArtifactError(path, "the WAV data chunk comes before a valid fmt chunk")
            declared: int | None = size
            if rf64 and size == 0xFFFFFFFF:
                declared = ds64_data
            elif size == 0xFFFFFFFF or (size == 0 and file_size > start):
                declared = None
            present = max(0, file_size - start)
            if declared is not None:
                present = min(present, declared)
            return WavLayout(block_align, start, declared, present)
        fh.seek(start + size + (size & 1))
        if start + size > file_size:
            raise TruncatedArtifact(
                path,
                f"the WAV chunk {chunk_id.decode('latin-1')!r} declares {size} bytes "
                "but the file ends first: it is truncated",
            )


def check_wav_complete(path: Path) -> WavLayout:
    """Raise :class:`TruncatedArtifact` when the data chunk holds less than its header declares.

    libsndfile silently reads what is there; a truncated track must never pass as shorter audio.
    """
    layout = parse_wav_layout(path)
    align = layout.block_align
    if layout.declared_bytes is not None and layout.present_bytes < layout.declared_bytes:
        declared = layout.declared_bytes // align
        present = layout.present_bytes // align
        raise TruncatedArtifact(
            path,
            f"truncated WAV: the data chunk declares {declared} samples per channel "
            f"({layout.declared_bytes} bytes) but the file holds only {present} "
            f"({layout.present_bytes} bytes). Re-run the producer or restore the file",
        )
    if layout.present_bytes % align:
        raise TruncatedArtifact(
            path,
            f"truncated WAV: the data chunk ends inside a sample frame ({layout.present_bytes} "
            f"bytes is not a multiple of the block size {align})",
        )
    return layout


def lossless_dtype(subtype: str) -> str:
    """The numpy dtype that reads a libsndfile subtype without losing anything."""
    if subtype in ("PCM_24", "PCM_32"):
        return "int32"
    if subtype == "FLOAT":
        return "float32"
    if subtype == "DOUBLE":
        return "float64"
    if subtype in ("PCM_16", "PCM_S8", "PCM_U8", "ULAW", "ALAW") or "ADPCM" in subtype:
        return "int16"
    if subtype in ("GSM610",) or subtype.startswith(("G72", "DWVW", "DPCM")):
        return "int16"
    return "float32"  # lossy codecs (Vorbis, Opus, MP3) decode to float in libsndfile


def _open_sound(path: Path) -> Any:
    import soundfile

    try:
        return soundfile.SoundFile(str(path))
    except (RuntimeError, soundfile.LibsndfileError) as exc:
        raise ArtifactError(path, f"libsndfile cannot read it: {exc}") from None


def _canonical(block: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Little-endian, C-contiguous: the canonical bytes every digest is taken of."""
    if block.dtype.byteorder == ">" or (block.dtype.byteorder == "=" and not _LITTLE):
        block = block.astype(block.dtype.newbyteorder("<"))
    return np.ascontiguousarray(block)


_LITTLE = np.little_endian


# WAV subtypes whose data chunk holds exactly the canonical little-endian PCM that a lossless
# read gives (proved equal in the tests): hashed straight from the file, no decode needed.
_RAW_WAV_SUBTYPES = {"PCM_16": "<i2", "PCM_32": "<i4", "FLOAT": "<f4", "DOUBLE": "<f8"}


def _sha(data: Any) -> str:
    return hashlib.sha256(data).hexdigest()


def _parallel_digests(
    data: memoryview, block: int, file_view: memoryview
) -> tuple[str, list[str], str]:
    """SHA-256 of ``data``, of each ``block`` bytes of it, and of the whole file.

    hashlib releases the GIL on large buffers, so the three passes overlap on several cores.
    """
    with ThreadPoolExecutor(max_workers=2) as pool:
        whole = pool.submit(_sha, data)
        file_sha = pool.submit(_sha, file_view)
        blocks = [_sha(data[i : i + block]) for i in range(0, len(data), block)]
        return whole.result(), blocks, file_sha.result()


def _audio_fp(
    path: Path, snd: Any, dtype: str, count: int, pcm: str, blocks: list[str], size: int, sha: str
) -> dict[str, Any]:
    rate = int(snd.samplerate)
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "format": str(snd.format),
        "size": size,
        "sha256": sha,
        "subtype": str(snd.subtype),
        "sample_rate": rate,
        "channels": int(snd.channels),
        "sample_count": count,
        "duration": round(count / rate, 6) if rate else 0.0,
        "dtype": np.dtype(dtype).newbyteorder("<").str,
        "pcm_sha256": pcm,
        "block_frames": max(1, rate),
        "block_sha256": blocks,
    }


def fingerprint_audio_file(path: Path) -> dict[str, Any]:
    """Fingerprint a WAV/FLAC file: format, PCM digest and one digest per second of samples."""
    path = Path(path)
    head = read_head(path, 12)
    layout = check_wav_complete(path) if head[:4] in (b"RIFF", b"RF64", b"BW64") else None
    with _open_sound(path) as snd:
        subtype = str(snd.subtype)
        dtype = lossless_dtype(subtype)
        block_frames = max(1, int(snd.samplerate))
        raw = _RAW_WAV_SUBTYPES.get(subtype)
        if (
            layout is not None
            and raw is not None
            and np.dtype(raw).itemsize * int(snd.channels) == layout.block_align
            and layout.present_bytes // layout.block_align == int(snd.frames)
        ):
            count = int(snd.frames)
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                size = len(mm)
                view = memoryview(mm)
                data = view[layout.data_offset : layout.data_offset + count * layout.block_align]
                try:
                    pcm, blocks, sha = _parallel_digests(
                        data, block_frames * layout.block_align, view
                    )
                finally:
                    data.release()
                    view.release()
            return _audio_fp(path, snd, raw, count, pcm, blocks, size, sha)
        with ThreadPoolExecutor(max_workers=1) as pool:
            whole_file = pool.submit(file_digest, path)
            count, pcm, blocks = _decode_pcm_digests(path, snd, dtype, block_frames)
            size, sha = whole_file.result()
        return _audio_fp(path, snd, dtype, count, pcm, blocks, size, sha)


def _decode_pcm_digests(
    path: Path, snd: Any, dtype: str, block_frames: int
) -> tuple[int, str, list[str]]:
    """Decode with libsndfile block by block: sample count, PCM digest, per-block digests."""
    declared = int(snd.frames)
    whole = hashlib.sha256()
    blocks: list[str] = []
    read = 0
    try:
        while True:
            block = snd.read(block_frames, dtype=dtype, always_2d=True)
            if not len(block):
                break
            data = _canonical(block)
            whole.update(data.data)
            blocks.append(_sha(data.data))
            read += len(block)
    except RuntimeError as exc:
        raise ArtifactError(
            path,
            f"libsndfile failed while decoding it ({exc}): the file is damaged or truncated; "
            "re-run the producer or restore the file",
        ) from None
    if read < declared:
        raise TruncatedArtifact(
            path,
            f"truncated audio: the header declares {declared} samples per channel but only "
            f"{read} could be decoded. Re-run the producer or restore the file",
        )
    return read, whole.hexdigest(), blocks


def fingerprint_audio(path: Path) -> dict[str, Any]:
    """Fingerprint audio: WAV/FLAC through libsndfile, other containers through ffmpeg."""
    path = Path(path)
    if is_audio_header(read_head(path, 12)):
        return fingerprint_audio_file(path)
    return fingerprint_container(path, video=False)


def load_audio(path: Path) -> tuple[npt.NDArray[Any], int]:
    """A WAV/FLAC file's samples, ``(frames, channels)``, in its lossless dtype, and its rate."""
    path = Path(path)
    if read_head(path, 12)[:4] in (b"RIFF", b"RF64", b"BW64"):
        check_wav_complete(path)
    with _open_sound(path) as snd:
        data = snd.read(dtype=lossless_dtype(str(snd.subtype)), always_2d=True)
        return data, int(snd.samplerate)


def load_container_audio(
    path: Path, stream_index: int | None = None
) -> tuple[npt.NDArray[Any], int]:
    """One audio stream of a container decoded in its own sample format: ``(frames, channels)``."""
    path = Path(path)
    info = probe(path)
    audio = info.of_type("audio")
    chosen = [s for s in audio if stream_index is None or s.index == stream_index]
    if not chosen:
        which = "" if stream_index is None else f" #{stream_index}"
        raise ArtifactError(path, f"has no audio stream{which}")
    stream = chosen[0]
    fmt = (stream.sample_fmt or "").rstrip("p")
    if fmt not in _SAMPLE_FORMATS:
        raise ArtifactError(path, f"unknown sample format in {stream.line!r}")
    encoder, _width, dtype = _SAMPLE_FORMATS[fmt]
    proc = _run_ffmpeg(
        [
            "-v",
            "error",
            "-xerror",
            "-i",
            str(path),
            "-map",
            f"0:{stream.index}",
            "-c:a",
            encoder,
            "-f",
            "data",
            "-",
        ]
    )
    if proc.returncode != 0:
        raise ArtifactError(path, f"ffmpeg failed to decode its audio: {_stderr_tail(proc.stderr)}")
    flat = np.frombuffer(proc.stdout, dtype=dtype)
    channels = _layout_channels(stream.channel_layout)
    frames = flat.reshape(-1, channels) if flat.size % channels == 0 else flat[:, None]
    return frames, int(stream.sample_rate or 0)


def _layout_channels(layout: str | None) -> int:
    named = {
        "mono": 1,
        "stereo": 2,
        "2.1": 3,
        "3.0": 3,
        "quad": 4,
        "4.0": 4,
        "5.0": 5,
        "5.1": 6,
        "5.1(side)": 6,
        "6.1": 7,
        "7.1": 8,
        "7.1(wide)": 8,
    }
    if not layout:
        return 1
    if layout in named:
        return named[layout]
    match = re.match(r"^(\d+) channels", layout)
    return int(match[1]) if match else 1


# ------------------------------------------------------------------ tensors


def _read_npy_header(
    path: Path, fh: IO[bytes], label: str
) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
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
            chunks.append(_sha(view))
    else:
        remaining = expected
        step = chunk_elements * itemsize
        while remaining > 0:
            part = fh.read(min(step, remaining))
            if not part:
                break
            whole.update(part)
            chunks.append(_sha(part))
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
                whole, chunks, sha = _parallel_digests(data, chunk_elements * dtype.itemsize, view)
            finally:
                data.release()
                view.release()
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "size": size,
        "sha256": sha,
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
    if head.startswith(b"\x93NUMPY"):
        fast = _npy_c_order_fp(path)
        if fast is not None:
            return fast
    size, sha = file_digest(path)
    base: dict[str, Any] = {"fingerprint_version": FINGERPRINT_VERSION, "size": size, "sha256": sha}
    if head.startswith(b"\x93NUMPY"):
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
        if head.startswith(b"\x93NUMPY"):
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


# ------------------------------------------------------------------ video frames for diagnostics


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
) -> Iterator[npt.NDArray[Any]]:
    """Decode a video stream frame by frame, with passthrough timing.

    With ``pix_fmt=None`` frames come in the stream's own pixel format as 1-D sample arrays
    (``frame_bytes`` from the fingerprint, or found by decoding the first frame); with
    ``pix_fmt="rgb24"`` (for pictures) as ``(height, width, 3)`` uint8 arrays.
    """
    path = Path(path)
    selector = f"0:{stream_index}" if stream_index is not None else "0:v:0"
    width = height = 0
    if pix_fmt == "rgb24" or frame_bytes is None:
        layout = _first_frame_layout(path, selector)
        width, height, native_bytes = layout
        frame_bytes = width * height * 3 if pix_fmt == "rgb24" else native_bytes
    elif pix_fmt not in (None, "rgb24"):
        raise LosslessError(f"iter_video_frames: pix_fmt must be None or 'rgb24', not {pix_fmt!r}")
    args = [
        ffmpeg_exe(),
        "-hide_banner",
        "-nostdin",
        "-v",
        "error",
        "-xerror",
        "-i",
        str(path),
        "-map",
        selector,
        "-fps_mode",
        "passthrough",
    ]
    if pix_fmt == "rgb24":
        args += ["-pix_fmt", "rgb24"]
    args += ["-f", "rawvideo", "-"]
    sample = np.dtype(dtype) if dtype is not None else np.dtype("u1")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    finished = False
    try:
        while True:
            raw = proc.stdout.read(frame_bytes)
            if not raw:
                break
            if len(raw) < frame_bytes:
                raise ArtifactError(path, "ffmpeg returned a partial raw frame")
            frame = np.frombuffer(raw, dtype=sample if pix_fmt != "rgb24" else np.uint8)
            yield frame.reshape(height, width, 3) if pix_fmt == "rgb24" else frame
        finished = True
    finally:
        if not finished and proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.stderr.close()
        code = proc.wait()
    if finished and code != 0:
        raise ArtifactError(
            path, f"ffmpeg failed to decode it (exit {code}): {_stderr_tail(stderr)}"
        )


def _first_frame_layout(path: Path, selector: str) -> tuple[int, int, int]:
    """Width, height and native raw size of the first frame of a stream (decodes one frame)."""
    proc = _run_ffmpeg(
        [
            "-v",
            "error",
            "-i",
            str(path),
            "-map",
            selector,
            "-frames:v",
            "1",
            "-c:v",
            "rawvideo",
            "-f",
            "framehash",
            "-hash",
            "sha256",
            "-format_version",
            "2",
            "-",
        ]
    )
    streams = parse_framehash(proc.stdout.decode("ascii", "replace"))
    if proc.returncode != 0 or 0 not in streams or not streams[0].lines:
        raise ArtifactError(
            path, f"ffmpeg cannot decode a first frame: {_stderr_tail(proc.stderr)}"
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
) -> dict[int, npt.NDArray[Any]]:
    """Decoded frames by index (all, or only ``indices``); see :func:`iter_video_frames`
    (``frame_bytes`` from the fingerprint spares the decode that would find it)."""
    wanted = set(indices) if indices is not None else None
    last = max(wanted) if wanted else None
    frames: dict[int, npt.NDArray[Any]] = {}
    decoded = iter_video_frames(path, stream_index=stream_index, pix_fmt=pix_fmt,
                                frame_bytes=frame_bytes)
    for n, frame in enumerate(decoded):
        if wanted is None or n in wanted:
            frames[n] = frame
        if last is not None and n >= last:
            break
    return frames


def write_png(path: Path, picture: npt.NDArray[np.uint8]) -> Path:
    """Write an ``(height, width, 3)`` uint8 picture as PNG with ffmpeg."""
    height, width = picture.shape[:2]
    proc = _run_ffmpeg(
        [
            "-v",
            "error",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-s",
            f"{width}x{height}",
            "-i",
            "-",
            "-frames:v",
            "1",
            "-y",
            str(path),
        ],
        input_bytes=np.ascontiguousarray(picture, dtype=np.uint8).tobytes(),
    )
    if proc.returncode != 0:
        raise LosslessError(f"ffmpeg could not write {path}: {_stderr_tail(proc.stderr)}")
    return path


# ------------------------------------------------------------------ dispatch


def fingerprint(kind: str, path: Path) -> dict[str, Any]:
    """The fingerprint of a built-in kind."""
    path = Path(path)
    read_head(path, 1)  # a missing file is named as such, whatever the kind
    if kind == "video":
        return fingerprint_video(path)
    if kind == "audio":
        return fingerprint_audio(path)
    if kind == "tensor":
        return fingerprint_tensor(path)
    if kind == "bytes":
        return fingerprint_bytes(path)
    raise LosslessError(
        f"no built-in fingerprint for kind {kind!r} (built-ins: {', '.join(BUILTIN_KINDS)})"
    )
