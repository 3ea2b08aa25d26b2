"""Media: what an artifact is, its fingerprint, and loaders for diagnostics.

Kinds are found from the content (container signatures and an ffmpeg probe, RIFF/RF64/FLAC
headers, the ``.npy`` magic), never only from the extension. Fingerprints are JSON-able dicts of
metadata plus SHA-256 digests; they are what a digest-only golden keeps. Video goes through the
ffmpeg bundled with imageio-ffmpeg (there is no ffprobe): one SHA-256 per decoded frame in the
stream's own pixel format with passthrough timing, the same digests as
``ffmpeg -i FILE -map 0:v -f framehash -hash sha256 -``. Audio files go through libsndfile
(soundfile), read losslessly; tensors through numpy with ``allow_pickle=False``.

The modules follow the data: ``limits`` (how much work one untrusted file may cost), ``probe``
(parsers of ffmpeg's text) and ``ffmpeg`` (the runner, under the time limit, and every command
line), ``detect``, then one module per medium: ``container``, ``video``, ``audio``, ``tensor``,
with the shared digests in ``hashing``. Every reader takes ``limits``
(:class:`~.limits.MediaLimits`); without them it reads the defaults and the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LosslessError

if TYPE_CHECKING:
    from .audio import (
        WavLayout,
        check_declared_audio_file,
        check_wav_complete,
        fingerprint_audio,
        fingerprint_audio_file,
        load_audio,
        load_container_audio,
        lossless_dtype,
        parse_wav_layout,
    )
    from .container import check_declared_container, fingerprint_container
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
    from .limits import DecodeLimitExceeded, FFmpegTimeout, MediaLimits
    from .probe import FramehashStream, ProbeInfo, StreamInfo, parse_framehash, parse_probe
    from .probe import _split_top_level as _split_top_level  # for the parser's unit tests
    from .tensor import check_declared_tensor, check_npz_member, fingerprint_tensor, load_tensor
    from .video import (
        fingerprint_video,
        iter_video_frames,
        load_video_frames,
        sample_dtype,
        sample_peak,
        write_png,
    )

#: Where each public name lives: the submodules load on first use (PEP 562), so that importing
#: one light module (``media.detect``, ``media.limits``) does not load numpy and soundfile.
_LAZY = {
    "WavLayout": "audio",
    "check_declared_audio_file": "audio",
    "check_wav_complete": "audio",
    "fingerprint_audio": "audio",
    "fingerprint_audio_file": "audio",
    "load_audio": "audio",
    "load_container_audio": "audio",
    "lossless_dtype": "audio",
    "parse_wav_layout": "audio",
    "check_declared_container": "container",
    "fingerprint_container": "container",
    "HEAD_BYTES": "detect",
    "detect_kind": "detect",
    "has_container_signature": "detect",
    "is_audio_header": "detect",
    "is_tensor_file": "detect",
    "read_head": "detect",
    "ffmpeg_exe": "ffmpeg",
    "probe": "ffmpeg",
    "CHUNK_BYTES": "hashing",
    "FINGERPRINT_VERSION": "hashing",
    "file_digest": "hashing",
    "fingerprint_bytes": "hashing",
    "DecodeLimitExceeded": "limits",
    "FFmpegTimeout": "limits",
    "MediaLimits": "limits",
    "FramehashStream": "probe",
    "ProbeInfo": "probe",
    "StreamInfo": "probe",
    "parse_framehash": "probe",
    "parse_probe": "probe",
    "_split_top_level": "probe",
    "check_declared_tensor": "tensor",
    "check_npz_member": "tensor",
    "fingerprint_tensor": "tensor",
    "load_tensor": "tensor",
    "fingerprint_video": "video",
    "iter_video_frames": "video",
    "load_video_frames": "video",
    "sample_dtype": "video",
    "sample_peak": "video",
    "write_png": "video",
}
_SUBMODULES = frozenset(
    [
        "artifacts",
        "audio",
        "container",
        "detect",
        "ffmpeg",
        "hashing",
        "limits",
        "probe",
        "tensor",
        "video",
    ]
)


def __getattr__(name: str) -> Any:
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BUILTIN_KINDS",
    "CHUNK_BYTES",
    "FINGERPRINT_VERSION",
    "HEAD_BYTES",
    "DecodeLimitExceeded",
    "FFmpegTimeout",
    "FramehashStream",
    "MediaLimits",
    "ProbeInfo",
    "StreamInfo",
    "WavLayout",
    "check_declared",
    "check_declared_audio_file",
    "check_declared_container",
    "check_declared_tensor",
    "check_npz_member",
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


def fingerprint(kind: str, path: Path, *, limits: MediaLimits | None = None) -> dict[str, Any]:
    """The fingerprint of a built-in kind, its work bounded by ``limits`` (see :mod:`.limits`)."""
    from .audio import fingerprint_audio
    from .detect import read_head
    from .hashing import fingerprint_bytes
    from .tensor import fingerprint_tensor
    from .video import fingerprint_video

    path = Path(path)
    read_head(path, 1)  # a missing file is named as such, whatever the kind
    if kind == "video":
        return fingerprint_video(path, limits=limits)
    if kind == "audio":
        return fingerprint_audio(path, limits=limits)
    if kind == "tensor":
        return fingerprint_tensor(path, limits=limits)
    if kind == "bytes":
        return fingerprint_bytes(path)
    raise LosslessError(
        f"no built-in fingerprint for kind {kind!r} (built-ins: {', '.join(BUILTIN_KINDS)})"
    )


def check_declared(kind: str, path: Path, limits: MediaLimits) -> None:
    """Refuse, from its headers alone and before anything is decoded, a file of a built-in kind
    that declares more than ``limits`` allow: frames too large or too much decoded data (video,
    audio), ``.npz`` members that expand too far or ``.npy`` data the file does not hold. An
    obtained file is checked against limits derived from its golden
    (:meth:`MediaLimits.for_golden`); other kinds are not checked."""
    from .audio import check_declared_audio_file
    from .container import check_declared_container
    from .detect import is_audio_header, read_head
    from .tensor import check_declared_tensor

    path = Path(path)
    if kind == "video":
        check_declared_container(path, limits, video=True)
    elif kind == "audio":
        if is_audio_header(read_head(path, 12)):
            check_declared_audio_file(path, limits)
        else:
            check_declared_container(path, limits, video=False)
    elif kind == "tensor":
        check_declared_tensor(path, limits)
