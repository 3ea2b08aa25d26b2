"""Media: generic reading and decoding of artifacts, for the kinds (:mod:`~..kinds`) to use.

Kinds are found from the content (container signatures and an ffmpeg probe, RIFF/RF64/FLAC
headers, the ``.npy`` magic), never only from the extension. Video goes through the ffmpeg
bundled with imageio-ffmpeg (there is no ffprobe): one SHA-256 per decoded frame in the stream's
own pixel format with passthrough timing, the same digests as
``ffmpeg -i FILE -map 0:v -f framehash -hash sha256 -`` (:mod:`.container`). Audio files go
through libsndfile (soundfile), read losslessly (:mod:`.pcm`); tensors through numpy with
``allow_pickle=False`` (:mod:`.npy`). What is specific to one kind (its fingerprint, its side of
each gate, its pictures) is that kind's module in :mod:`~..kinds`.

The modules follow the data: ``limits`` (how much work one untrusted file may cost), ``probe``
(parsers of ffmpeg's text) and ``ffmpeg`` (the runner, under the time limit, and every command
line), ``signatures`` and ``detect``, then the readers: ``container`` (the framehash of every
stream), ``frames`` (decoded video frames, PNG), ``pcm`` (audio samples), ``npy`` (arrays),
each reading the head of a file with :func:`..core.artifact.read_head` and its digests with
:mod:`..core.digests`. Every reader takes ``limits`` (:class:`~.limits.MediaLimits`); without
them it reads the defaults and the environment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .container import check_declared_container, fingerprint_container
    from .detect import detect_kind, has_container_signature, is_audio_header, is_tensor_file
    from .ffmpeg import ffmpeg_exe, probe
    from .frames import iter_video_frames, load_video_frames, sample_dtype, sample_peak, write_png
    from .limits import DecodeLimitExceeded, FFmpegTimeout, MediaLimits
    from .npy import check_declared_tensor, check_npz_member, load_tensor
    from .pcm import (
        WavLayout,
        check_declared_audio_file,
        check_wav_complete,
        load_audio,
        load_container_audio,
        lossless_dtype,
        parse_wav_layout,
    )
    from .probe import FramehashStream, ProbeInfo, StreamInfo, parse_framehash, parse_probe
    from .probe import _split_top_level as _split_top_level  # for the parser's unit tests

#: Where each public name lives: the submodules load on first use (PEP 562), so that importing
#: one light module (``media.detect``, ``media.limits``) does not load numpy and soundfile.
_LAZY = {
    "WavLayout": "pcm",
    "check_declared_audio_file": "pcm",
    "check_wav_complete": "pcm",
    "load_audio": "pcm",
    "load_container_audio": "pcm",
    "lossless_dtype": "pcm",
    "parse_wav_layout": "pcm",
    "check_declared_container": "container",
    "fingerprint_container": "container",
    "detect_kind": "detect",
    "has_container_signature": "detect",
    "is_audio_header": "detect",
    "is_tensor_file": "detect",
    "ffmpeg_exe": "ffmpeg",
    "probe": "ffmpeg",
    "DecodeLimitExceeded": "limits",
    "FFmpegTimeout": "limits",
    "MediaLimits": "limits",
    "FramehashStream": "probe",
    "ProbeInfo": "probe",
    "StreamInfo": "probe",
    "parse_framehash": "probe",
    "parse_probe": "probe",
    "_split_top_level": "probe",
    "check_declared_tensor": "npy",
    "check_npz_member": "npy",
    "load_tensor": "npy",
    "iter_video_frames": "frames",
    "load_video_frames": "frames",
    "sample_dtype": "frames",
    "sample_peak": "frames",
    "write_png": "frames",
}
_SUBMODULES = frozenset({*_LAZY.values(), "signatures"})


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
    "DecodeLimitExceeded",
    "FFmpegTimeout",
    "FramehashStream",
    "MediaLimits",
    "ProbeInfo",
    "StreamInfo",
    "WavLayout",
    "check_declared_audio_file",
    "check_declared_container",
    "check_declared_tensor",
    "check_npz_member",
    "check_wav_complete",
    "detect_kind",
    "ffmpeg_exe",
    "fingerprint_container",
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
    "sample_dtype",
    "sample_peak",
    "write_png",
]
