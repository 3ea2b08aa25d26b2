"""Which built-in kind a file is, found from its content (signatures, then an ffmpeg probe where
only a probe can tell), never from the extension alone.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from ..errors import ArtifactError
from .ffmpeg import try_probe
from .limits import MediaLimits

#: Bytes read at the start of a file for content detection.
HEAD_BYTES = 4096
#: The first four bytes of a RIFF file and of its 64-bit forms (RF64, BW64).
RIFF_IDS = (b"RIFF", b"RF64", b"BW64")
#: The magic string that starts every ``.npy`` file.
NPY_MAGIC = b"\x93NUMPY"

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
    if len(head) >= 12 and head[:4] in RIFF_IDS and head[8:12] == b"WAVE":
        return True
    return head[:4] == b"fLaC"


def is_tensor_file(path: Path, head: bytes) -> bool:
    """A ``.npy`` file (``\\x93NUMPY``) or a zip whose members are all ``.npy`` (``.npz``)."""
    if head.startswith(NPY_MAGIC):
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


def detect_kind(path: Path, head: bytes | None = None, *, limits: MediaLimits | None = None) -> str:
    """The built-in kind of ``path`` from its content: video, audio, tensor or bytes (a probe
    runs under ``limits``: the ffmpeg time limit and the frame-size limit)."""
    path = Path(path)
    if head is None:
        head = read_head(path)
    if is_tensor_file(path, head):
        return "tensor"
    if is_audio_header(head):
        return "audio"
    strong = has_container_signature(head)
    if strong or _maybe_container(path, head):
        info = try_probe(path, limits or MediaLimits.from_env())
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
