"""Pure parsers of what ffmpeg prints: the stream description of ``ffmpeg -i`` and the lines
of its ``framehash`` muxer, tested against captured outputs; they run nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from ..errors import LosslessError

# ffmpeg's packed sample format -> (pcm encoder, bytes per sample, numpy dtype). A planar format
# (``fltp``, ``s16p``) is looked up without its ``p``: the pcm encoder interleaves it, a change of
# layout, never of value.
SAMPLE_FORMATS: dict[str, tuple[str, int, str]] = {
    "u8": ("pcm_u8", 1, "u1"),
    "s16": ("pcm_s16le", 2, "<i2"),
    "s32": ("pcm_s32le", 4, "<i4"),
    "s64": ("pcm_s64le", 8, "<i8"),
    "flt": ("pcm_f32le", 4, "<f4"),
    "dbl": ("pcm_f64le", 8, "<f8"),
}


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
        """The streams of one type (``"video"``, ``"audio"``...), in file order."""
        return [s for s in self.streams if s.type == kind]


# Planar pixel formats whose raw frame (ffmpeg's rawvideo encoder, no padding) is a sum of
# planes: (bytes per sample, log2 chroma width divisor, log2 chroma height divisor, chroma planes,
# full-size planes). Anything not listed has no known size here (the caller decodes it the
# general way).
_EIGHT_BIT_PLANAR: dict[str, tuple[int, int, int, int, int]] = {
    "yuv420p": (1, 1, 1, 2, 1),
    "yuvj420p": (1, 1, 1, 2, 1),
    "nv12": (1, 1, 1, 2, 1),
    "nv21": (1, 1, 1, 2, 1),
    "yuv422p": (1, 1, 0, 2, 1),
    "yuvj422p": (1, 1, 0, 2, 1),
    "yuv444p": (1, 0, 0, 2, 1),
    "yuvj444p": (1, 0, 0, 2, 1),
    "yuv440p": (1, 0, 1, 2, 1),
    "yuv411p": (1, 2, 0, 2, 1),
    "yuv410p": (1, 2, 2, 2, 1),
    "yuva420p": (1, 1, 1, 2, 2),
    "yuva422p": (1, 1, 0, 2, 2),
    "yuva444p": (1, 0, 0, 2, 2),
    "gbrp": (1, 0, 0, 0, 3),
    "gbrap": (1, 0, 0, 0, 4),
    "gray": (1, 0, 0, 0, 1),
    "rgb24": (3, 0, 0, 0, 1),
    "bgr24": (3, 0, 0, 0, 1),
    "rgba": (4, 0, 0, 0, 1),
    "bgra": (4, 0, 0, 0, 1),
    "argb": (4, 0, 0, 0, 1),
    "abgr": (4, 0, 0, 0, 1),
    "rgb0": (4, 0, 0, 0, 1),
    "bgr0": (4, 0, 0, 0, 1),
    "0rgb": (4, 0, 0, 0, 1),
    "0bgr": (4, 0, 0, 0, 1),
}


def _with_deep_formats(
    base: dict[str, tuple[int, int, int, int, int]],
) -> dict[str, tuple[int, int, int, int, int]]:
    """``base`` plus its 9- to 16-bit planar forms (two bytes a sample) and p010/p012/p016."""
    table = dict(base)
    for depth in ("9", "10", "12", "14", "16"):
        for endian in ("le", "be"):
            for name, (_, cw, ch, chroma, full) in base.items():
                if name.startswith(("yuv", "gbr", "gray")) and not name.startswith("yuvj"):
                    table[f"{name}{depth}{endian}"] = (2, cw, ch, chroma, full)
    for name in ("p010le", "p012le", "p016le", "p010be", "p012be", "p016be"):
        table[name] = (2, 1, 1, 2, 1)
    return table


_PLANAR = _with_deep_formats(_EIGHT_BIT_PLANAR)


def raw_frame_bytes(pix_fmt: str | None, width: int | None, height: int | None) -> int | None:
    """The size of one raw frame of ``pix_fmt`` as ffmpeg's rawvideo encoder writes it (planes
    back to back, no padding); None when the format is not one of the common ones known here."""
    if not pix_fmt or not width or not height or pix_fmt not in _PLANAR:
        return None
    sample, cw, ch, chroma, full = _PLANAR[pix_fmt]
    chroma_w = -(-width >> cw)
    chroma_h = -(-height >> ch)
    return sample * (full * width * height + chroma * chroma_w * chroma_h)


def packed_sample_format(stream: StreamInfo) -> str | None:
    """The key of :data:`SAMPLE_FORMATS` for an audio stream; None when ffmpeg's text names none."""
    fmt = (stream.sample_fmt or "").rstrip("p")
    return fmt if fmt in SAMPLE_FORMATS else None


def layout_channels(layout: str | None) -> int:
    """The channel count of an ffmpeg channel layout name (``stereo``, ``5.1``, ``3 channels``)."""
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


_INPUT_RE = re.compile(r"^Input #0, (?P<fmt>.+?), from '")
_DURATION_RE = re.compile(r"^\s*Duration: (?:(?P<h>\d+):(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)|N/A)")
_STREAM_RE = re.compile(
    r"^\s*Stream #0:(?P<idx>\d+)(?:\[[^\]]*\])?(?:\([^)]*\))?: (?P<type>[A-Za-z]+): (?P<rest>.*)$"
)
_SIZE_RE = re.compile(r"^(?P<w>\d+)x(?P<h>\d+)\b")
_RATE_RE = re.compile(r"^(?P<v>\d+(?:\.\d+)?)(?P<k>k?) (?P<unit>fps|tbr|tbn|tbc)$")
_FMT_TOKEN_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_FRAMEHASH_HEADER_RE = re.compile(r"^#(?P<key>[a-z_]+) (?P<idx>\d+): (?P<value>.*)$")
#: ``#extradata 2,   68, <hash>``: the digest of a stream's extradata (a subtitle's styles, an
#: attachment's file), which framehash prints for streams that have any.
_FRAMEHASH_EXTRADATA_RE = re.compile(r"^#extradata (?P<idx>\d+),\s*(?P<size>\d+),\s*(?P<hash>\S+)$")


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
    fields = _split_top_level(rest)
    codec = fields[0].split()[0] if fields and fields[0].split() else "unknown"
    width = height = sample_rate = None
    pix_fmt = fps = time_base = channel_layout = sample_fmt = None
    if kind == "video":
        for pos, field in enumerate(fields[1:], start=1):
            size = _SIZE_RE.match(field)
            if size and width is None:
                width, height = int(size["w"]), int(size["h"])
                # The pixel format is the field just before the size, when the codec has one.
                if pos >= 2:
                    token = fields[pos - 1].split("(")[0].strip()
                    if _FMT_TOKEN_RE.match(token):
                        pix_fmt = token
            for part in field.split(","):
                rate = _RATE_RE.match(part.strip().split(" (")[0].strip())
                if rate and rate["unit"] == "fps":
                    fps = rate["v"] + rate["k"]
                elif rate and rate["unit"] == "tbn":
                    time_base = _rate_to_tb(rate["v"], rate["k"])
        if pix_fmt is None and len(fields) > 1:
            token = fields[1].split("(")[0].strip()
            if _FMT_TOKEN_RE.match(token) and not _SIZE_RE.match(token):
                pix_fmt = token
    elif kind == "audio":
        for pos, field in enumerate(fields[1:], start=1):
            hz = re.match(r"^(\d+) Hz$", field)
            if hz:
                sample_rate = int(hz[1])
                if pos + 1 < len(fields):
                    channel_layout = fields[pos + 1]
                if pos + 2 < len(fields):
                    token = fields[pos + 2].split(" ")[0].split("(")[0]
                    if token.rstrip("p") in SAMPLE_FORMATS:
                        sample_fmt = token
        if sample_fmt is None:
            for field in fields[1:]:
                token = field.split(" ")[0].split("(")[0]
                if token.rstrip("p") in SAMPLE_FORMATS:
                    sample_fmt = token
                    break
    return StreamInfo(
        index=int(match["idx"]),
        type=kind,
        codec=codec,
        pix_fmt=pix_fmt,
        width=width,
        height=height,
        fps=fps,
        time_base=time_base,
        sample_rate=sample_rate,
        channel_layout=channel_layout,
        sample_fmt=sample_fmt,
        attached_pic="(attached pic)" in rest,
        line=line.strip(),
    )


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


_OUTPUT_RE = re.compile(r"^Output #(?P<n>\d+), ")


def parse_output_stream(text: str, output: int = 0) -> StreamInfo | None:
    """The first stream of output ``output`` as ffmpeg describes it on stderr (``-v info``)
    when it writes that output's header: the frames as they are written (after autorotation,
    say); None when the text has no such description."""
    inside = False
    for line in text.splitlines():
        head = _OUTPUT_RE.match(line)
        if head:
            inside = int(head["n"]) == output
            continue
        if inside:
            stream = _STREAM_RE.match(line.replace(f"Stream #{output}:", "Stream #0:", 1))
            if stream:
                return _parse_stream(line, stream)
            if not line.startswith(" "):
                inside = False
    return None


@dataclass
class FramehashStream:
    """One output stream of ffmpeg's ``framehash`` muxer: header fields and per-frame lines."""

    index: int
    header: dict[str, str]
    lines: list[tuple[int, int, int, str]]  # (pts, duration, size, digest)


def parse_framehash(text: str) -> dict[int, FramehashStream]:
    """Parse ``-f framehash`` output (format version 2) into streams keyed by output index."""
    streams: dict[int, FramehashStream] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            extra = _FRAMEHASH_EXTRADATA_RE.match(line)
            if extra:
                idx = int(extra["idx"])
                header = streams.setdefault(idx, FramehashStream(idx, {}, [])).header
                header["extradata"] = extra["hash"]
                continue
            head = _FRAMEHASH_HEADER_RE.match(line)
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
