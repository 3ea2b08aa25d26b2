"""Which built-in kind a file is, found from its content (signatures, then an ffmpeg probe where
only a probe can tell), never from the extension alone; and what a file that stands in for a
golden is when it is not one (a Git LFS or git-annex pointer checked out instead of its content).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from ..core.artifact import read_head
from ..core.paths import read_regular
from ..errors import GoldenError
from .ffmpeg import try_probe
from .limits import MediaLimits
from .signatures import CONTAINER_BRANDS, CONTAINER_SUFFIXES

#: The first four bytes of a RIFF file and of its 64-bit forms (RF64, BW64).
RIFF_IDS = (b"RIFF", b"RF64", b"BW64")
#: The magic string that starts every ``.npy`` file.
NPY_MAGIC = b"\x93NUMPY"

#: The first line of a Git LFS pointer file (and of the pre-1.0 "hawser" pointers).
LFS_POINTER_LINES = (
    b"version https://git-lfs.github.com/spec/v1",
    b"version https://hawser.github.com/spec/v1",
)
#: The largest pointer file recognised: the LFS spec keeps pointers under 1024 bytes.
POINTER_MAX_BYTES = 1024


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
    if len(head) >= 8 and head[4:8] in CONTAINER_BRANDS:
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
    return path.suffix.lower() in CONTAINER_SUFFIXES


def may_be_container(path: Path, head: bytes) -> bool:
    """Whether :func:`detect_kind` would probe ``path`` (a container's signature or a media
    suffix): without either, a file is neither video nor container audio, and costs nothing."""
    return has_container_signature(head) or _maybe_container(path, head)


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


def stub_problem(head: bytes, size: int) -> tuple[str, str] | None:
    """``(what it is, what to run)`` when a file of ``size`` bytes starting with ``head`` is a
    pointer that was checked out instead of the content it names; None otherwise."""
    if size > POINTER_MAX_BYTES:
        return None
    first = head.split(b"\n", 1)[0].rstrip(b"\r")
    if first in LFS_POINTER_LINES:
        return "a Git LFS pointer file", "git lfs pull"
    if first.startswith(b"/annex/objects/") or b".git/annex/objects/" in first:
        return "a git-annex pointer file", "git annex get"
    return None


class GoldenStub(GoldenError):
    """A stored golden or a manifest is a pointer stub (Git LFS, git-annex), not its content."""

    def __init__(self, path: Path, what: str, fix: str) -> None:
        self.path = path
        self.what = what
        self.fix = fix
        super().__init__(
            f"{path}: is {what}, not the golden it stands for: the repository keeps it in "
            f"large-file storage and this checkout has only the pointer. Run `{fix}` (in the "
            "repository, on this machine or in the CI checkout step) and run the tests again"
        )


def refuse_stub(path: Path, data: bytes | None = None) -> None:
    """Raise :class:`GoldenStub` when ``path`` (or ``data``, its bytes when already read) is a
    pointer stub. Read as a regular file of at most :data:`POINTER_MAX_BYTES` (a link is
    followed: the caller proved it stays inside its root); what cannot be read so is left to
    the caller's own error."""
    path = Path(path)
    if data is None:
        try:
            target = os.readlink(path) if os.path.islink(path) else ""
            if "annex/objects/" in target and not os.path.exists(path):
                raise GoldenStub(path, "a git-annex link to content not present", "git annex get")
            data = read_regular(os.path.realpath(path), limit=POINTER_MAX_BYTES)
        except OSError:
            return
    found = stub_problem(data[:POINTER_MAX_BYTES], len(data))
    if found is not None:
        raise GoldenStub(path, *found)


#: Kinds whose name alone is no noun in a sentence ("a bytes").
_KIND_NOUNS = {"bytes": "bytes file"}
#: Words that begin with a vowel letter but not a vowel sound ("a user-trace"), and the reverse.
_A_BEFORE = ("uni", "use", "usu", "uti", "ure", "eu", "ewe", "one", "once")
_AN_BEFORE = ("hour", "honest", "honour", "honor", "heir")


def with_article(word: str) -> str:
    """``word`` after its indefinite article, by its first sound: ``an audio``, ``a video``,
    ``a user-trace``, ``an onnx`` (#20: "not a audio")."""
    low = word.lower()
    if low.startswith(_A_BEFORE):
        return f"a {word}"
    vowel = low[:1] in ("a", "e", "i", "o", "u") or low.startswith(_AN_BEFORE)
    return f"{'an' if vowel else 'a'} {word}"


def kind_noun(kind: str) -> str:
    """A kind named with its article, as a sentence says it: ``an audio``, ``an image``,
    ``a video``, ``a bytes file``."""
    return with_article(_KIND_NOUNS.get(kind, kind))


def not_the_kind(path: Path, expected: str, found: str) -> str:
    """What an obtained file is, when it is not of its golden's kind: said plainly."""
    size = path.stat().st_size if path.is_file() else None
    golden = kind_noun(expected)
    if size == 0:
        return f"empty file (0 bytes), but the golden is {golden}: the run wrote nothing"
    what = {
        "video": "no stream ffmpeg can decode",
        "audio": "no audio stream or header a decoder can read",
        "tensor": "no .npy/.npz header",
    }.get(expected, f"its content reads as {found}")
    return (
        f"not {golden}: {what} ({size} bytes, read as {found}); the golden is {golden}, "
        "so the run wrote something else (check its logs)"
    )
