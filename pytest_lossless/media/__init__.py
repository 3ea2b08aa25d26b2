"""Media: what an artifact is, its fingerprint, and loaders for diagnostics.

Kinds are found from the content (container signatures and an ffmpeg probe, RIFF/RF64/FLAC
headers, the ``.npy`` magic), never only from the extension. Fingerprints are JSON-able dicts of
metadata plus SHA-256 digests; they are what a digest-only golden keeps. Video goes through the
ffmpeg bundled with imageio-ffmpeg (there is no ffprobe): one SHA-256 per decoded frame in the
stream's own pixel format with passthrough timing, the same digests as
``ffmpeg -i FILE -map 0:v -f framehash -hash sha256 -``. Audio files go through libsndfile
(soundfile), read losslessly; tensors through numpy with ``allow_pickle=False``.

The modules follow the data: ``probe`` (parsers of ffmpeg's text) and ``ffmpeg`` (the runner and
every command line), ``detect``, then one module per medium: ``container``, ``video``, ``audio``,
``tensor``, with the shared digests in ``hashing``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import LosslessError
from .audio import (
    WavLayout,
    check_wav_complete,
    fingerprint_audio,
    fingerprint_audio_file,
    load_audio,
    load_container_audio,
    lossless_dtype,
    parse_wav_layout,
)
from .container import fingerprint_container
from .detect import (
    HEAD_BYTES,
    detect_kind,
    has_container_signature,
    is_audio_header,
    is_tensor_file,
    read_head,
)
from .ffmpeg import ffmpeg_exe, probe
from .hashing import CHUNK_BYTES, FINGERPRINT_VERSION, file_digest, fingerprint_bytes
from .probe import FramehashStream, ProbeInfo, StreamInfo, parse_framehash, parse_probe
from .probe import _split_top_level as _split_top_level  # for the parser's unit tests
from .tensor import fingerprint_tensor, load_tensor
from .video import (
    fingerprint_video,
    iter_video_frames,
    load_video_frames,
    sample_dtype,
    sample_peak,
    write_png,
)

__all__ = [
    "BUILTIN_KINDS",
    "CHUNK_BYTES",
    "FINGERPRINT_VERSION",
    "HEAD_BYTES",
    "FramehashStream",
    "ProbeInfo",
    "StreamInfo",
    "WavLayout",
    "check_wav_complete",
    "detect_kind",
    "ffmpeg_exe",
    "file_digest",
    "fingerprint",
    "fingerprint_audio",
    "fingerprint_audio_file",
    "fingerprint_bytes",
    "fingerprint_container",
    "fingerprint_tensor",
    "fingerprint_video",
    "has_container_signature",
    "is_audio_header",
    "is_tensor_file",
    "iter_video_frames",
    "load_audio",
    "load_container_audio",
    "load_tensor",
    "load_video_frames",
    "lossless_dtype",
    "parse_framehash",
    "parse_probe",
    "parse_wav_layout",
    "probe",
    "read_head",
    "sample_dtype",
    "sample_peak",
    "write_png",
]

BUILTIN_KINDS = ("video", "audio", "tensor", "bytes")


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
