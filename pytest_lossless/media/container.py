"""Fingerprints of media containers (mp4, mkv, mp3, ...): every video and audio stream decoded
and hashed frame by frame by ffmpeg's framehash muxer, in the stream's own format; every other
stream (subtitles, data, attachments) by its packets, copied as they are, in the same run.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Literal

from ..core.digests import Fingerprint, digest_frames, file_digest, raw_stripes
from ..core.records import Record, spec
from ..errors import ArtifactError
from .ffmpeg import (
    OTHER_STREAM_TYPES,
    RAW_PIPE_BYTES,
    FFmpegRun,
    OutputPipe,
    audio_framehash_args,
    container_framehash_args,
    fast_video_args,
    frame_limit_error,
    frame_limit_note,
    opened,
    probe_declared,
    refuse_references,
    run_ffmpeg,
    stderr_tail,
)
from .limits import MediaLimits, refuse
from .probe import (
    SAMPLE_FORMATS,
    FramehashStream,
    ProbeInfo,
    StreamInfo,
    layout_channels,
    packed_sample_format,
    parse_framehash,
    parse_output_stream,
    parse_probe,
    raw_frame_bytes,
)


def _frac_str(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


# ------------------------------------------------------------------ the fingerprint, typed


#: The container fingerprint's layout version (``fingerprint_version``): 2 records each video
#: frame's pts exactly, in the stream's own time base (``pts_time_base``); version 1 (the
#: layout of every other kind) recorded it rounded to 1 / the frame rate, the raw frames'
#: encoder time base, which hid a frame shown up to half a frame period early or late.
EXACT_PTS_VERSION = 2


def round_half_away(value: Fraction) -> int:
    """``value`` rounded to the nearest integer, a half away from zero: how ffmpeg rescales a
    frame's pts into a coarser time base (``av_rescale_q``)."""
    whole, rest = divmod(abs(value.numerator), value.denominator)
    up = whole + (2 * rest >= value.denominator)
    return up if value >= 0 else -up


def rounded_pts(pts: int, time_base: Fraction, coarse: Fraction) -> int:
    """A pts in ``time_base`` units rescaled to ``coarse`` units as ffmpeg rescales it."""
    return round_half_away(pts * time_base / coarse)


@dataclass(frozen=True, slots=True)
class FrameDigest(Record):
    """One decoded video frame: its presentation time (in ``pts_time_base`` units) and the
    SHA-256 of its bytes in the stream's own pixel format."""

    pts: int
    sha256: str


@dataclass(frozen=True, slots=True)
class AudioPacket(Record):
    """One decoded audio frame: its first sample's time, how many samples, and their SHA-256."""

    pts: int
    samples: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Packet(Record):
    """One copied (not decoded) packet of a subtitle, data or attachment stream."""

    pts: int
    duration: int
    sha256: str


@dataclass(frozen=True, slots=True)
class VideoStream(Record):
    """A video stream: how ffmpeg describes it and one :class:`FrameDigest` per decoded frame.
    ``frame_rate`` is exact (1 / the raw frames' time base), unlike ffmpeg's ``fps`` text, and
    ``duration`` is counted in frames of that rate, from the first frame's start to the last
    one's end. ``pts_time_base``: the time base of the frames' pts, the stream's own (from
    :data:`EXACT_PTS_VERSION` on; 1 / ``frame_rate`` before)."""

    index: int
    type: Literal["video"] = field(default="video", kw_only=True)
    codec: str | None
    pix_fmt: str | None
    width: int | None
    height: int | None
    sar: str | None
    frame_rate: str | None
    time_base: str | None
    pts_time_base: str | None
    frame_count: int
    duration: float
    frame_bytes: int | None
    attached_pic: bool
    frames: tuple[FrameDigest, ...]

    def times(self) -> list[Fraction] | None:
        """Each frame's presentation time in seconds, exactly (None: no time base known)."""
        if not self.pts_time_base:
            return None
        tb = Fraction(self.pts_time_base)
        return [frame.pts * tb for frame in self.frames]

    def with_pts_rounded(self) -> VideoStream:
        """As a fingerprint made before :data:`EXACT_PTS_VERSION` had it: each pts rounded to
        1 / ``frame_rate`` (the raw frames' time base) and ``pts_time_base`` naming that."""
        if not self.frame_rate or not self.pts_time_base:
            return self
        coarse = 1 / Fraction(self.frame_rate)
        tb = Fraction(self.pts_time_base)
        frames = tuple(replace(f, pts=rounded_pts(f.pts, tb, coarse)) for f in self.frames)
        return replace(self, pts_time_base=_frac_str(coarse), frames=frames)


@dataclass(frozen=True, slots=True)
class AudioStream(Record):
    """An audio stream, decoded in its own sample format: its description and one
    :class:`AudioPacket` per decoded audio frame."""

    index: int
    type: Literal["audio"] = field(default="audio", kw_only=True)
    codec: str | None
    sample_fmt: str | None
    sample_rate: int
    channels: int
    channel_layout: str | None
    sample_count: int
    duration: float
    time_base: str | None
    packets: tuple[AudioPacket, ...]


@dataclass(frozen=True, slots=True)
class OtherStream(Record):
    """A subtitle, data or attachment stream, by its copied packets: each packet's time and
    payload SHA-256, ``sha256`` (of those digests in order) and ``extradata_sha256`` (what the
    stream carries beside its packets, when anything)."""

    index: int
    codec_type: str
    codec_name: str | None
    time_base: str | None
    extradata_sha256: str | None
    packet_count: int
    sha256: str
    packets: tuple[Packet, ...]

    @property
    def label(self) -> str:
        """``#2 subtitle mov_text``, as ``ignored_streams`` names a stream."""
        return f"#{self.index} {self.codec_type} {self.codec_name}"


#: A decoded stream of a container fingerprint (told apart by its ``type``).
Stream = VideoStream | AudioStream


@dataclass(frozen=True, slots=True)
class ContainerFingerprint(Fingerprint):
    """A container (video, image, or audio in a container): the file's size and SHA-256, what
    ffmpeg calls the container, its declared duration, the streams left out (named), every
    decoded stream, and the other streams by their packets. ``other_streams`` is None in a
    fingerprint made before those were recorded (they are then named in ``ignored_streams``),
    and left out of the JSON of a file that has none; ``image_format`` is the image kind's."""

    fingerprint_version: int = field(default=EXACT_PTS_VERSION, kw_only=True)
    format: Literal["container"] = field(default="container", kw_only=True)
    size: int
    sha256: str
    container: str | None
    container_duration: float | None
    ignored_streams: tuple[str, ...]
    streams: tuple[Stream, ...]
    other_streams: tuple[OtherStream, ...] | None = spec(None, omit="empty")
    image_format: str | None = spec(None, omit="none")

    def video(self) -> list[VideoStream]:
        """The video streams, in file order."""
        return [s for s in self.streams if isinstance(s, VideoStream)]

    def audio(self) -> list[AudioStream]:
        """The audio streams, in file order."""
        return [s for s in self.streams if isinstance(s, AudioStream)]

    @property
    def exact_pts(self) -> bool:
        """Whether its video frames' pts are exact (:data:`EXACT_PTS_VERSION`), not rounded to
        1 / the frame rate as fingerprints made before recorded them."""
        return self.fingerprint_version >= EXACT_PTS_VERSION

    def with_pts_rounded(self) -> ContainerFingerprint:
        """As it was made before frames' pts were recorded exactly (version 1): each video
        frame's pts rounded to 1 / its stream's frame rate, as ffmpeg rounded it then. A golden
        written then is checked against its stored file, and compared, in this form."""
        if not self.exact_pts:
            return self
        streams = tuple(
            s.with_pts_rounded() if isinstance(s, VideoStream) else s for s in self.streams
        )
        return replace(self, fingerprint_version=1, streams=streams)

    def as_made_like(self, earlier: ContainerFingerprint) -> ContainerFingerprint:
        """This fingerprint in the form the code that made ``earlier`` made fingerprints: pts
        rounded (:meth:`with_pts_rounded`) for one made before they were exact, no
        ``other_streams`` (:meth:`legacy`) for one made before those were recorded."""
        found = self if earlier.exact_pts else self.with_pts_rounded()
        return found if earlier.other_streams is not None else found.legacy()

    def legacy(self) -> ContainerFingerprint:
        """As it was made before streams other than video and audio were recorded: no
        ``other_streams``, those streams named in ``ignored_streams`` (in file order). A
        golden's manifest written then is checked against its stored file in this form."""
        if self.other_streams is None:
            return self
        ignored = [*self.ignored_streams, *(s.label for s in self.other_streams)]
        return replace(
            self,
            other_streams=None,
            ignored_streams=tuple(sorted(ignored, key=lambda text: int(text[1:].split()[0]))),
        )


def _video_stream_fp(
    path: Path, stream: StreamInfo, fh: FramehashStream, timed: FramehashStream
) -> VideoStream:
    """A video stream's fingerprint from its framehash lines (raw frames: their digests, the
    frame rate, the duration), the lines of the same frames with their exact timing
    (``timed``: each frame's pts, and their time base) and ffmpeg's description of it."""
    tb = Fraction(fh.header.get("tb", "1/1"))
    dims = fh.header.get("dimensions", "")
    width, height = (
        (int(v) for v in dims.split("x")) if "x" in dims else (stream.width, stream.height)
    )
    if len(timed.lines) != len(fh.lines):
        raise ArtifactError(
            path,
            f"ffmpeg hashed {len(fh.lines)} frames of video stream #{stream.index} but timed "
            f"{len(timed.lines)}; its frames cannot be fingerprinted reliably. Report this file",
        )
    frames = tuple(
        FrameDigest(pts, digest)
        for (pts, _d, _s, _h), (_p, _dur, _size, digest) in zip(timed.lines, fh.lines, strict=True)
    )
    if fh.lines:
        first, last = fh.lines[0], fh.lines[-1]
        duration = float((last[0] + last[1] - first[0]) * tb)
    else:
        duration = 0.0
    return VideoStream(
        index=stream.index,
        codec=stream.codec,
        pix_fmt=stream.pix_fmt,
        width=width,
        height=height,
        sar=fh.header.get("sar"),
        # ffmpeg's encoder time base for raw frames is 1/frame rate: exact, unlike the "fps" text.
        frame_rate=_frac_str(1 / tb) if tb else None,
        time_base=stream.time_base,
        pts_time_base=_frac_str(Fraction(timed.header.get("tb", _frac_str(tb)))),
        frame_count=len(frames),
        duration=round(duration, 6),
        frame_bytes=fh.lines[0][2] if fh.lines else 0,
        attached_pic=stream.attached_pic,
        frames=frames,
    )


def _audio_stream_fp(stream: StreamInfo, fh: FramehashStream, width: int) -> AudioStream:
    """An audio stream's fingerprint from its framehash lines (``width``: bytes per sample)."""
    tb = Fraction(fh.header.get("tb", "1/1"))
    sample_rate = int(fh.header.get("sample_rate", stream.sample_rate or 0))
    packets = []
    total_bytes = 0
    samples = 0
    channels = 0
    for pts, duration, size, digest in fh.lines:
        packets.append(AudioPacket(pts, duration, digest))
        total_bytes += size
        samples += duration
        if not channels and duration:
            channels = size // (duration * width)
    sample_count = total_bytes // (width * channels) if channels else samples
    return AudioStream(
        index=stream.index,
        codec=stream.codec,
        sample_fmt=stream.sample_fmt,
        sample_rate=sample_rate,
        channels=channels,
        channel_layout=fh.header.get("channel_layout_name", stream.channel_layout),
        sample_count=sample_count,
        duration=round(sample_count / sample_rate, 6) if sample_rate else 0.0,
        time_base=_frac_str(tb),
        packets=tuple(packets),
    )


def other_streams(info: ProbeInfo) -> list[StreamInfo]:
    """The streams other than video and audio whose packets are hashed, in the order ffmpeg's
    command lines map them (:data:`~.ffmpeg.OTHER_STREAM_TYPES`, then file order)."""
    return [s for kind in OTHER_STREAM_TYPES for s in info.of_type(kind)]


def _other_stream_fp(path: Path, stream: StreamInfo, fh: FramehashStream) -> OtherStream:
    """A subtitle, data or attachment stream's fingerprint from the framehash lines of its
    copied packets: each packet's time and payload SHA-256, and ``sha256``, the SHA-256 of
    those payload digests in order (equal exactly when the payloads are, in the same order).
    ``extradata_sha256``: what the stream carries beside its packets (a subtitle's styles, an
    attachment's file), when it carries anything."""
    media_type = fh.header.get("media_type")
    if media_type is not None and media_type != stream.type:
        raise ArtifactError(
            path,
            f"ffmpeg hashed a {media_type} stream where its description has {stream.type} "
            f"stream #{stream.index}; it cannot be fingerprinted reliably. Report this file",
        )
    digests = [digest for _pts, _dur, _size, digest in fh.lines]
    return OtherStream(
        index=stream.index,
        codec_type=stream.type,
        codec_name=stream.codec,
        time_base=fh.header.get("tb"),
        extradata_sha256=fh.header.get("extradata"),
        packet_count=len(digests),
        sha256=hashlib.sha256("\n".join(digests).encode("ascii")).hexdigest(),
        packets=tuple(Packet(pts, dur, digest) for pts, dur, _size, digest in fh.lines),
    )


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
    if info is not None:
        check_declared_info(path, info, limits, video=video)
    return info


def check_declared_info(
    path: Path, info: ProbeInfo, limits: MediaLimits, *, video: bool = True
) -> None:
    """Refuse what ffmpeg's description of a container declares beyond ``limits``: frames
    larger than ``limits.frame_pixels``, more decoded data than ``limits.decode_limit``; a
    playlist or concat list (its media is other files: :func:`refuse_references`)."""
    refuse_references(path, info)
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


class DecodeCounter:
    """The decoded bytes of one fingerprint, counted from several threads (raw frames read, the
    size field of framehash lines); past ``limits.decode_limit`` it raises and the decode stops:
    a file that lies about its duration is still bounded."""

    def __init__(self, path: Path, limits: MediaLimits) -> None:
        self.path = path
        self.limits = limits
        self.decoded = 0
        self._lock = threading.Lock()

    def add(self, size: int) -> None:
        with self._lock:
            self.decoded += size
            decoded = self.decoded
        if decoded > self.limits.decode_limit:
            raise refuse(
                self.path,
                "it",
                decoded,
                self.limits.decode_limit,
                self.limits.decode_basis,
                decoding=True,
            )


class FramehashBudget:
    """Counts the decoded bytes ffmpeg's framehash lines report as they come (the size field of
    each line) on a :class:`DecodeCounter`, which stops the decode past the decode limit."""

    def __init__(
        self,
        path: Path,
        limits: MediaLimits,
        counter: DecodeCounter | None = None,
        *,
        timing_from: int | None = None,
    ) -> None:
        self.counter = counter or DecodeCounter(path, limits)
        self._partial = b""
        #: Output streams from this index on carry timing only (no decoded data to count).
        self._timing_from = timing_from

    @property
    def decoded(self) -> int:
        return self.counter.decoded

    def __call__(self, chunk: bytes) -> None:
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        size = 0
        for line in lines:
            if line.startswith(b"#"):
                continue
            parts = line.split(b",")
            if len(parts) == 6 and parts[4].strip().isdigit():
                if self._timing_from is not None and int(parts[0]) >= self._timing_from:
                    continue
                size += int(parts[4])
        self.counter.add(size)


def fingerprint_container(
    path: Path, *, video: bool = True, limits: MediaLimits | None = None, declared: bool = True
) -> ContainerFingerprint:
    """Fingerprint every video and audio stream of a container through ffmpeg's framehash.

    ``-xerror`` and the exit status are checked: a damaged or truncated file raises
    :class:`ArtifactError` naming it, it is never fingerprinted as a shorter video. The sizes
    its headers declare are checked against ``limits`` first, and the decode is counted and
    timed as it runs (:class:`~.limits.DecodeLimitExceeded`, :class:`~.limits.FFmpegTimeout`).

    With ``video``, the first video stream goes the fast way (:func:`_fast_fingerprint`): its
    raw frames are hashed here on several threads, the same digests ffmpeg's framehash gives;
    whatever that way cannot vouch for is decoded again the general way.

    ``declared=False`` skips the probe of the declared sizes (ffmpeg's own description of the
    input is still checked): for a file this process has just written from frames it holds,
    the canary's copies, whose sizes are known.
    """
    path = Path(path)
    limits = limits or MediaLimits.from_env()
    if video:
        fast = _fast_fingerprint(path, limits, declared=declared)
        if fast is not None:
            return fast
    known = check_declared_container(path, limits, video=video) if declared else None
    if video and not declared:
        known = probe_declared(path, limits)
    # One ffmpeg run decodes and hashes everything; its own stream description (-v info) tells
    # the sample formats. Audio is first hashed as float, the native format of most audio
    # decoders (aac, opus, vorbis, mp3); streams in another format are hashed again, natively.
    # The video streams are mapped once more, last, for their frames' exact timing: how many
    # there are is known before (a map of none would let ffmpeg choose streams).
    timed = len(known.of_type("video")) if video and known is not None else 0
    mapped = _mapped_count(known, video=video) if known is not None else None
    proc = run_ffmpeg(
        container_framehash_args(path, limits.frame_pixels, video=video, timed=timed),
        path=path,
        limits=limits,
        what="framehash decode",
        on_output=FramehashBudget(path, limits, timing_from=mapped),
    )
    info = opened(path, proc.stderr)
    _check_decoded(path, proc, limits, nothing_ok=True)
    hashed = parse_framehash(proc.stdout.decode("ascii", "replace"))
    if video and (len(info.of_type("video")) != timed or _mapped_count(info, video=True) != mapped):
        raise ArtifactError(
            path,
            f"ffmpeg describes {len(info.of_type('video'))} video streams when decoding it, "
            f"{timed} when opening it; its frames cannot be timed reliably. Report this file",
        )
    base = _mapped_count(info, video=video)
    timing = {n: hashed.pop(base + n, FramehashStream(base + n, {}, [])) for n in range(timed)}
    return _assemble(path, info, hashed, limits, video=video, timing=timing)


def _mapped_count(info: ProbeInfo, *, video: bool) -> int:
    """How many streams :func:`~.ffmpeg.container_framehash_args` hashes before the timing
    of the video streams: the video streams (with ``video``), the audio, the others."""
    chosen = len(info.of_type("video")) if video else 0
    return chosen + len(info.of_type("audio")) + len(other_streams(info))


def _fast_fingerprint(
    path: Path, limits: MediaLimits, *, stripes: int | None = None, declared: bool = True
) -> ContainerFingerprint | None:
    """The fingerprint with the first video stream's raw frames hashed here, on several threads
    (:func:`~.ffmpeg.fast_video_args`), and the audio streams hashed by a second ffmpeg run at
    the same time; or None where this way cannot vouch for the result: a run failed (the
    general way reports why), the file has several video streams, the frame size is not known
    in advance, or the frames ffmpeg timed differ in size from those read. The declared sizes
    are checked while ffmpeg starts, before a frame is read. ``stripes``: raw pipes
    (:func:`~..core.digests.raw_stripes` when None)."""
    raws = [OutputPipe(size=RAW_PIPE_BYTES, drain=False) for _ in range(stripes or raw_stripes())]
    timing = OutputPipe()
    exact = OutputPipe()
    counter = DecodeCounter(path, limits)
    args = fast_video_args(
        path, limits.frame_pixels, [raw.write_fd for raw in raws], timing.write_fd, exact.write_fd
    )
    # Left in reverse order: the decode is killed (if it still runs) before the audio is awaited.
    with (
        ThreadPoolExecutor(max_workers=1) as audio_pool,
        FFmpegRun(
            args,
            path=path,
            limits=limits,
            what="framehash decode",
            outputs=(*raws, timing, exact),
        ) as run,
    ):
        # The declared sizes are checked by a probe that decodes nothing, while this decode
        # starts: it cannot write more than the pipe holds until its frames are read. Its own
        # description of the input (which names the decoded pixel format, where the probe may
        # not) comes before its first frame, and is checked against the limits too.
        if declared:
            check_declared_container(path, limits, video=True)
        described = parse_probe(run.stderr_until(b"Stream mapping:").decode("utf-8", "replace"))
        run.check_expired()
        if described is None:
            return None
        check_declared_info(path, described, limits, video=True)
        videos = described.of_type("video")
        frame_bytes = (
            raw_frame_bytes(videos[0].pix_fmt, videos[0].width, videos[0].height)
            if len(videos) == 1
            else None
        )
        if frame_bytes is None:
            return None
        audio_streams = described.of_type("audio")
        others = other_streams(described)
        audio = None
        if audio_streams or others:
            # The audio decoded, and the packets of the other streams copied, by one run.
            audio = audio_pool.submit(
                run_ffmpeg,
                audio_framehash_args(
                    path,
                    limits.frame_pixels,
                    [(s.index, "pcm_f32le") for s in audio_streams],
                    [s.index for s in others],
                ),
                path=path,
                limits=limits,
                what="framehash decode",
                on_output=FramehashBudget(path, limits, counter),
            )
        try:
            striped = _read_stripes(run, raws, frame_bytes, counter)
        finally:
            run.check_expired()
        code, stderr = run.finish()
        sound = audio.result() if audio is not None else None
    if code != 0 or striped is None or (sound is not None and sound.returncode != 0):
        return None
    digests = striped
    info = opened(path, stderr)
    timed = parse_framehash(timing.data.decode("ascii", "replace")).get(0)
    exactly = parse_framehash(exact.data.decode("ascii", "replace")).get(0)
    written = parse_output_stream(stderr.decode("utf-8", "replace"), 0)
    if timed is None or written is None or len(timed.lines) != len(digests) or not digests:
        return None
    if exactly is None or len(exactly.lines) != len(digests):
        return None
    # The raw frames are all of the size announced (ffmpeg scales any later frame to the first
    # one's size), and the count of frames and bytes read says the same.
    if raw_frame_bytes(written.pix_fmt, written.width, written.height) != frame_bytes:
        return None
    if (
        len(info.of_type("video")) != 1
        or len(info.of_type("audio")) != len(audio_streams)
        or other_streams(info) != others
    ):
        return None
    header = {**timed.header, "dimensions": f"{written.width}x{written.height}"}
    hashed = {
        0: FramehashStream(
            0,
            header,
            [
                (pts, dur, frame_bytes, sha)
                for (pts, dur, _size, _adler), sha in zip(timed.lines, digests, strict=True)
            ],
        )
    }
    if sound is not None:
        for pos, stream in parse_framehash(sound.stdout.decode("ascii", "replace")).items():
            hashed[pos + 1] = FramehashStream(pos + 1, stream.header, stream.lines)
    return _assemble(path, info, hashed, limits, video=True, timing={0: exactly})


def _read_stripes(
    run: FFmpegRun, raws: list[OutputPipe], frame_bytes: int, counter: DecodeCounter
) -> list[str] | None:
    """The SHA-256 of every raw frame, in order, read from one pipe or from several (frame
    ``n`` from pipe ``n`` modulo their number, each read and hashed by a thread of its own);
    None when what came is not whole frames dealt out so."""
    if len(raws) == 1:
        digests, left = digest_frames(raws[0].readinto, frame_bytes, on_frame=counter.add)
        return None if left else digests

    def read(pipe: OutputPipe) -> tuple[list[str], int]:
        try:
            return digest_frames(pipe.readinto, frame_bytes, threads=0, on_frame=counter.add)
        except BaseException:
            run.kill()  # the other readers see their pipes end
            raise

    with ThreadPoolExecutor(max_workers=len(raws)) as pool:
        parts = list(pool.map(read, raws))
    counts = [len(digests) for digests, _left in parts]
    total = sum(counts)
    n = len(raws)
    if any(left for _digests, left in parts) or counts != [
        (total - k + n - 1) // n for k in range(n)
    ]:
        return None
    return [parts[i % n][0][i // n] for i in range(total)]


def _assemble(
    path: Path,
    info: ProbeInfo,
    hashed: dict[int, FramehashStream],
    limits: MediaLimits,
    *,
    video: bool,
    timing: dict[int, FramehashStream],
) -> ContainerFingerprint:
    """The fingerprint from ffmpeg's description of the streams and their framehash lines
    (keyed by output position: video streams in file order, then audio streams, then the
    :func:`other_streams`), and the exact timing of each video stream's frames (``timing``,
    keyed by its position among the video streams). ``other_streams`` is there only when the
    file has any: the fingerprint of a file of video and audio alone is what it was before
    they were recorded."""
    audio = info.of_type("audio")
    chosen = (info.of_type("video") if video else []) + audio
    if not chosen:
        raise ArtifactError(
            path, f"holds no {'video or ' if video else ''}audio stream ffmpeg can decode"
        )
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
        _check_decoded(path, again, limits, nothing_ok=True)
        rehashed = parse_framehash(again.stdout.decode("ascii", "replace"))
        for pos, stream in enumerate(native):
            hashed[chosen.index(stream)] = rehashed.get(pos, FramehashStream(pos, {}, []))
    streams: list[Stream] = []
    for pos, stream in enumerate(chosen):
        fh = hashed.get(pos, FramehashStream(pos, {}, []))
        if stream.type == "video":
            timed = timing.get(pos, FramehashStream(pos, {}, []))
            streams.append(_video_stream_fp(path, stream, fh, timed))
        else:
            width = SAMPLE_FORMATS[formats[stream.index]][1]
            streams.append(_audio_stream_fp(stream, fh, width))
    recorded = other_streams(info)
    others = tuple(
        _other_stream_fp(path, stream, hashed.get(pos, FramehashStream(pos, {}, [])))
        for pos, stream in enumerate(recorded, start=len(chosen))
    )
    size, sha = file_digest(path)
    return ContainerFingerprint(
        size=size,
        sha256=sha,
        container=info.container,
        container_duration=info.duration,
        ignored_streams=tuple(
            f"#{s.index} {s.type} {s.codec}"
            for s in info.streams
            if s not in recorded
            and (s.type not in ("video", "audio") or (s.type == "video" and not video))
        ),
        streams=tuple(streams),
        other_streams=others or None,
    )


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


#: What ffmpeg says when the file ends before its first frame: the MP4 demuxer's "partial
#: file" (no byte of the frame is there), "corrupt input packet" (the frame is cut short), and
#: the filter graph's "... after EOF" (the stream ended before one frame came: Matroska).
_CUT_BEFORE_FIRST_FRAME = (b": partial file", b"corrupt input packet", b"after EOF")
#: What ffmpeg says when a decoder refused a packet it was given: damage, not an end.
_DECODER_ERRORS = (b"Decoding error", b"Error while decoding", b"Error processing packet")


def nothing_decoded(proc: subprocess.CompletedProcess[bytes], limits: MediaLimits) -> bool:
    """Whether a failed decode failed because the file ends before its first frame (an output
    truncated, or written with no frame, though its streams are described): ffmpeg wrote
    nothing and its demuxer found the file cut short, and no decoder refused a packet, no
    frame was beyond the pixel limit. A file damaged inside a frame is not this."""
    return (
        proc.returncode != 0
        and not proc.stdout.strip()
        and any(words in proc.stderr for words in _CUT_BEFORE_FIRST_FRAME)
        and not any(words in proc.stderr for words in _DECODER_ERRORS)
        and not frame_limit_note(proc.stderr, limits)
    )


def _check_decoded(
    path: Path,
    proc: subprocess.CompletedProcess[bytes],
    limits: MediaLimits,
    *,
    nothing_ok: bool = False,
) -> None:
    """Raise :class:`ArtifactError` for a decode that failed. ``nothing_ok``: a file that ends
    before its first frame (:func:`nothing_decoded`) is no failure: its streams are
    fingerprinted with no frame, so that a comparison with a golden that has frames FAILS
    naming both counts (the output lost everything), and an update refuses it as an empty
    output. A file cut after some frames, or damaged, still raises: it is never fingerprinted
    as a shorter video."""
    if nothing_ok and nothing_decoded(proc, limits):
        return
    if proc.returncode != 0:
        if (over := frame_limit_error(path, proc.stderr, limits)) is not None:
            raise over
        raise ArtifactError(
            path,
            f"ffmpeg failed to decode it (exit status {proc.returncode}): "
            f"{stderr_tail(proc.stderr)}. The file is damaged or truncated; it is not "
            "fingerprinted as a shorter video. Re-run the producer or restore the file"
            + (f"; {note}" if (note := frame_limit_note(proc.stderr, limits)) else ""),
        )
