"""PCM samples: WAV/RF64 and FLAC files read losslessly through libsndfile (with the RIFF layout
checked so a truncated file is never taken for shorter audio), audio in other containers decoded
through ffmpeg. The audio kind's fingerprint (:mod:`~..kinds.audio`) reads through these.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ..core.artifact import read_head
from ..errors import ArtifactError, TruncatedArtifact
from .detect import RIFF_IDS
from .ffmpeg import pcm_args, probe, run_ffmpeg, stderr_tail
from .limits import MediaLimits, refuse
from .probe import SAMPLE_FORMATS, layout_channels, packed_sample_format


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


#: The channel mask a file of that many channels has when it declares none (mono: front
#: centre; stereo: front left and right). A declared mask equal to it is not recorded.
DEFAULT_CHANNEL_MASKS = {1: 0x4, 2: 0x3}
#: A FLAC file's tag for a layout other than its channel count's default, as ffmpeg writes it.
FLAC_MASK_TAG = b"WAVEFORMATEXTENSIBLE_CHANNEL_MASK="
_WAVE_FORMAT_EXTENSIBLE = 0xFFFE


def declared_channel_mask(path: Path, channels: int) -> int | None:
    """The speaker layout a WAV (``WAVE_FORMAT_EXTENSIBLE``'s ``dwChannelMask``) or FLAC
    (its ``WAVEFORMATEXTENSIBLE_CHANNEL_MASK`` tag) file declares, None when it declares none
    or the default of its channel count: which speaker each channel feeds is part of the
    output, as it is for audio in a container (libsndfile does not report it)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
            if head[:4] in RIFF_IDS:
                mask = _riff_mask(fh)
            elif head[:4] == b"fLaC":
                fh.seek(4)
                mask = _flac_mask(fh)
            else:
                return None
    except (OSError, struct.error, ValueError):
        return None  # the PCM reader names a damaged file; the layout is only metadata
    if not mask or DEFAULT_CHANNEL_MASKS.get(channels) == mask:
        return None
    return mask


def _riff_mask(fh: IO[bytes]) -> int | None:
    for _ in range(64):  # the fmt chunk comes before the data chunk, near the start
        header = fh.read(8)
        if len(header) < 8 or header[:4] == b"data":
            return None
        chunk_id, size = header[:4], struct.unpack("<I", header[4:])[0]
        if chunk_id == b"fmt ":
            body = fh.read(min(size, 40))
            if len(body) >= 24 and struct.unpack("<H", body[:2])[0] == _WAVE_FORMAT_EXTENSIBLE:
                return int(struct.unpack("<I", body[20:24])[0])
            return None
        fh.seek(size + (size & 1), 1)
    return None


def _flac_mask(fh: IO[bytes]) -> int | None:
    for _ in range(128):  # metadata blocks, each read within its 16 MiB bound
        header = fh.read(4)
        if len(header) < 4:
            return None
        last, kind, size = header[0] & 0x80, header[0] & 0x7F, int.from_bytes(header[1:], "big")
        if kind == 4:  # VORBIS_COMMENT: little-endian lengths
            body = fh.read(size)
            at = 4 + struct.unpack("<I", body[:4])[0]
            count = struct.unpack("<I", body[at : at + 4])[0]
            at += 4
            for _ in range(min(count, 10000)):
                length = struct.unpack("<I", body[at : at + 4])[0]
                comment = body[at + 4 : at + 4 + length]
                at += 4 + length
                if comment.upper().startswith(FLAC_MASK_TAG):
                    return int(comment[len(FLAC_MASK_TAG) :].decode("ascii").strip(), 0)
            return None
        fh.seek(size, 1)
        if last:
            return None
    return None


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


def open_sound(path: Path) -> Any:
    import soundfile

    try:
        return soundfile.SoundFile(str(path))
    except (RuntimeError, soundfile.LibsndfileError) as exc:
        raise ArtifactError(path, f"libsndfile cannot read it: {exc}") from None


def _declared_pcm_bytes(snd: Any, dtype: str) -> int:
    """The decoded size libsndfile's header declares: frames x channels x sample size."""
    return max(0, int(snd.frames)) * max(1, int(snd.channels)) * np.dtype(dtype).itemsize


def check_declared_pcm(path: Path, snd: Any, dtype: str, limits: MediaLimits) -> None:
    declared = _declared_pcm_bytes(snd, dtype)
    if declared > limits.decode_limit:
        raise refuse(
            path,
            f"its header declares {int(snd.frames)} samples x {int(snd.channels)} channels:",
            declared,
            limits.decode_limit,
            limits.decode_basis,
        )


def check_declared_audio_file(path: Path, limits: MediaLimits) -> None:
    """Refuse a WAV/FLAC file whose header declares more decoded PCM than ``limits`` allow."""
    path = Path(path)
    with open_sound(path) as snd:
        check_declared_pcm(path, snd, lossless_dtype(str(snd.subtype)), limits)


def load_audio(path: Path, *, limits: MediaLimits | None = None) -> tuple[npt.NDArray[Any], int]:
    """A WAV/FLAC file's samples, ``(frames, channels)``, in its lossless dtype, and its rate.

    They are loaded in memory, so the size the header declares may be at most what
    ``limits.in_memory`` allows for the file's size (refused before reading otherwise)."""
    path = Path(path)
    limits = limits or MediaLimits.from_env()
    if read_head(path, 12)[:4] in RIFF_IDS:
        check_wav_complete(path)
    with open_sound(path) as snd:
        dtype = lossless_dtype(str(snd.subtype))
        declared = _declared_pcm_bytes(snd, dtype)
        stored = path.stat().st_size
        if declared > limits.in_memory(stored):
            raise refuse(
                path,
                f"its header declares {int(snd.frames)} samples x {int(snd.channels)} channels "
                "to load in memory:",
                declared,
                limits.in_memory(stored),
                limits.in_memory_text(stored),
            )
        data = snd.read(dtype=dtype, always_2d=True)
        return data, int(snd.samplerate)


def load_container_audio(
    path: Path, stream_index: int | None = None, *, limits: MediaLimits | None = None
) -> tuple[npt.NDArray[Any], int]:
    """One audio stream of a container decoded in its own sample format: ``(frames, channels)``.

    The samples are loaded in memory: what the stream declares, and what ffmpeg produces as it
    runs, may be at most what ``limits.in_memory`` allows for the file's size."""
    path = Path(path)
    limits = limits or MediaLimits.from_env()
    info = probe(path, limits)
    audio = info.of_type("audio")
    chosen = [s for s in audio if stream_index is None or s.index == stream_index]
    if not chosen:
        which = "" if stream_index is None else f" #{stream_index}"
        raise ArtifactError(path, f"has no audio stream{which}")
    stream = chosen[0]
    fmt = packed_sample_format(stream)
    if fmt is None:
        raise ArtifactError(path, f"unknown sample format in {stream.line!r}")
    encoder, width, dtype = SAMPLE_FORMATS[fmt]
    channels = layout_channels(stream.channel_layout)
    stored = path.stat().st_size
    allowed = limits.in_memory(stored)
    if info.duration:
        declared = int(info.duration * (stream.sample_rate or 0)) * channels * width
        if declared > allowed:
            raise refuse(
                path,
                f"audio stream #{stream.index} declares {info.duration:g} s to load in memory:",
                declared,
                allowed,
                limits.in_memory_text(stored),
            )
    produced = 0

    def budget(chunk: bytes) -> None:
        nonlocal produced
        produced += len(chunk)
        if produced > allowed:
            raise refuse(
                path,
                f"audio stream #{stream.index} in memory",
                produced,
                allowed,
                limits.in_memory_text(stored),
                decoding=True,
            )

    proc = run_ffmpeg(
        pcm_args(path, limits.frame_pixels, stream.index, encoder),
        path=path,
        limits=limits,
        what="audio decode",
        on_output=budget,
    )
    if proc.returncode != 0:
        raise ArtifactError(path, f"ffmpeg failed to decode its audio: {stderr_tail(proc.stderr)}")
    flat = np.frombuffer(proc.stdout, dtype=dtype)
    frames = flat.reshape(-1, channels) if flat.size % channels == 0 else flat[:, None]
    return frames, int(stream.sample_rate or 0)
