"""The limits of the work spent on one untrusted artifact: how long one ffmpeg call may run, how
much decoded data a file may declare or produce, how large one video frame may be, and how far a
compressed member may expand when it is loaded. Goldens arrive in pull requests and outputs come
from the code under test, so every decode is bounded before it starts and while it runs.

The limits are a value passed down to every reader, never module state. The plugin builds them
from its settings (``--lossless-ffmpeg-timeout``, ``--lossless-decode-limit``); a direct caller of
:mod:`pytest_lossless.media` that passes none gets :meth:`MediaLimits.from_env`, read at call time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.records import JsonValue
from ..errors import ArtifactError, ConfigError
from ..settings import OPTIONS, Settings

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

#: An obtained artifact may declare or decode this many times what its golden does.
GOLDEN_FACTOR = 4
#: ... and always at least this much (so that a tiny golden still leaves room to report a FAIL).
GOLDEN_FLOOR_BYTES = 64 * MIB
GOLDEN_FLOOR_PIXELS = 1920 * 1088


def size_text(size: int) -> str:
    """``2147483648`` -> ``2.0 GiB (2147483648 bytes)``."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size >= scale:
            return f"{size / scale:.1f} {unit} ({size} bytes)"
    return f"{size} bytes"


@dataclass(frozen=True)
class MediaLimits:
    """How much work one artifact may cost; each field names the setting that changes it."""

    #: Seconds one ffmpeg call (probe, framehash, raw decode, PNG) may run before it is killed.
    ffmpeg_timeout: float = 600.0
    #: Decoded bytes one artifact may declare (checked before decoding) or produce (counted).
    decode_limit: int = 64 * GIB
    #: Where ``decode_limit`` comes from, for messages.
    decode_basis: str = "the decode limit, --lossless-decode-limit"
    #: Pixels (width x height) of one video frame.
    frame_pixels: int = 8192 * 8192
    #: Where ``frame_pixels`` comes from, for messages.
    frame_basis: str = "the frame-size limit, 8192x8192"
    #: A compressed ``.npz`` member or audio loaded in memory may expand this many times...
    expansion: int = 1000
    #: ... or to this size, whichever is more (never beyond ``decode_limit``).
    expansion_floor: int = 64 * MIB

    def __post_init__(self) -> None:
        if not self.ffmpeg_timeout > 0:
            raise ConfigError("ffmpeg_timeout", self.ffmpeg_timeout, "must be more than 0 seconds")
        for name in ("decode_limit", "frame_pixels", "expansion", "expansion_floor"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "must be at least 1")

    @classmethod
    def from_settings(cls, settings: Settings) -> MediaLimits:
        """The limits a session resolved (command line > environment > ini > default)."""
        return cls(ffmpeg_timeout=settings.ffmpeg_timeout, decode_limit=settings.decode_limit)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MediaLimits:
        """The defaults, overridden by ``PYTEST_LOSSLESS_FFMPEG_TIMEOUT`` and
        ``PYTEST_LOSSLESS_DECODE_LIMIT`` when set (read now, at each call: no global state)."""
        import os

        env = os.environ if env is None else env
        limits = cls()
        for spec in OPTIONS:
            if spec.dest in ("ffmpeg_timeout", "decode_limit") and spec.env and env.get(spec.env):
                try:
                    limits = replace(limits, **{spec.dest: spec.parse(env[spec.env])})
                except ValueError as exc:
                    raise ConfigError(f"environment {spec.env}", env[spec.env], str(exc)) from None
        return limits

    def in_memory(self, stored: int) -> int:
        """The decoded bytes a file or member of ``stored`` bytes may expand to when loaded."""
        return min(self.decode_limit, max(self.expansion * stored, self.expansion_floor))

    def in_memory_text(self, stored: int) -> str:
        """How :meth:`in_memory` came about, for messages."""
        return (
            f"{self.expansion}x its {size_text(stored)} stored, or "
            f"{size_text(self.expansion_floor)}, whichever is more, and at most "
            f"{size_text(self.decode_limit)}, {self.decode_basis}"
        )

    def for_golden(self, fingerprint: Mapping[str, JsonValue]) -> MediaLimits:
        """Tighter limits for an obtained artifact compared with a golden of ``fingerprint``: it
        may declare or decode at most :data:`GOLDEN_FACTOR` times what the golden does (and at
        least :data:`GOLDEN_FLOOR_BYTES` / :data:`GOLDEN_FLOOR_PIXELS`). A fingerprint that says
        nothing of decoded sizes (a tensor, bytes, a plugin's kind) leaves the limits as they are.
        """
        decoded, pixels, frame = golden_decoded_size(fingerprint)
        limits = self
        if decoded is not None:
            allowed = max(GOLDEN_FACTOR * decoded, GOLDEN_FLOOR_BYTES)
            if allowed < limits.decode_limit:
                limits = replace(
                    limits,
                    decode_limit=allowed,
                    decode_basis=(
                        f"{GOLDEN_FACTOR}x the {size_text(decoded)} its golden decodes, at least "
                        f"{size_text(GOLDEN_FLOOR_BYTES)}"
                    ),
                )
        if pixels is not None:
            allowed = max(GOLDEN_FACTOR * pixels, GOLDEN_FLOOR_PIXELS)
            if allowed < limits.frame_pixels:
                limits = replace(
                    limits,
                    frame_pixels=allowed,
                    frame_basis=(
                        f"{GOLDEN_FACTOR}x its golden's {frame} frames, at least "
                        f"{GOLDEN_FLOOR_PIXELS} pixels"
                    ),
                )
        return limits


def _count(value: JsonValue) -> int:
    """A non-negative whole number from a fingerprint field (anything else counts as 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def golden_decoded_size(fp: Mapping[str, JsonValue]) -> tuple[int | None, int | None, str]:
    """What a fingerprint (of any kind: its values narrowed as read) says its file decodes to:
    bytes, the largest frame's pixels, and that frame as ``WxH``; None where it says nothing
    (audio is counted as 4-byte samples, as the container framehash decodes it)."""
    streams = fp.get("streams")
    if isinstance(streams, list):
        decoded = 0
        pixels: int | None = None
        frame = ""
        for stream in streams:
            if not isinstance(stream, Mapping):
                continue
            if stream.get("type") == "video":
                decoded += _count(stream.get("frame_count")) * _count(stream.get("frame_bytes"))
                width, height = _count(stream.get("width")), _count(stream.get("height"))
                if pixels is None or width * height > pixels:
                    pixels, frame = width * height, f"{width}x{height}"
            elif stream.get("type") == "audio":
                decoded += _count(stream.get("sample_count")) * _count(stream.get("channels")) * 4
        return decoded, pixels, frame
    if "sample_count" in fp and "channels" in fp:
        width = 8 if str(fp.get("dtype", "")).endswith("8") else 4
        return _count(fp.get("sample_count")) * _count(fp.get("channels")) * width, None, ""
    return None, None, ""


class DecodeLimitExceeded(ArtifactError):
    """An artifact declares (or decodes) more than a limit allows; nothing more is decoded.

    ``declared`` and ``allowed`` are in ``unit`` (bytes or pixels); ``limit`` names the limit.
    """

    def __init__(
        self, path: Path | str, problem: str, *, declared: int, allowed: int, limit: str, unit: str
    ) -> None:
        self.declared = declared
        self.allowed = allowed
        self.limit = limit
        self.unit = unit
        super().__init__(path, problem)


class FFmpegTimeout(ArtifactError):
    """An ffmpeg call ran past the ffmpeg time limit and was killed (``timeout``: seconds)."""

    def __init__(self, path: Path | str, timeout: float, what: str) -> None:
        self.timeout = timeout
        super().__init__(
            path,
            f"ffmpeg ({what}) did not finish within {timeout:g} s and was killed: the ffmpeg "
            "time limit (--lossless-ffmpeg-timeout, ini lossless_ffmpeg_timeout, environment "
            "PYTEST_LOSSLESS_FFMPEG_TIMEOUT). A file that takes this long to decode is too "
            "large for a test, or built to stall the decoder; raise the limit if it is genuine",
        )


def refuse(
    path: Path | str,
    subject: str,
    declared: int,
    allowed: int,
    basis: str,
    *,
    unit: str = "bytes",
    decoding: bool = False,
) -> DecodeLimitExceeded:
    """The error for an artifact over a limit: ``subject`` (``"member 'x' declares"``) and
    ``declared`` against ``allowed`` (in ``unit``: bytes or pixels), where the limit comes from
    (``basis``), and whether it was found before decoding or counted while decoding."""
    if unit == "bytes":
        amount, room = size_text(declared), size_text(allowed)
    else:
        amount, room = f"{declared} {unit}", f"{allowed} {unit}"
    if decoding:
        head = (
            f"decoding {subject} produced more than the {room} allowed ({basis}); the decode "
            "was stopped there"
        )
    else:
        head = (
            f"{subject} {amount}, more than the {room} allowed ({basis}); it is refused before "
            "anything is decoded"
        )
    if "stored" in basis:
        hint = (
            "data this compressible is refused when it is loaded in memory; a genuine file can "
            "be stored uncompressed (np.savez or np.save, WAV), where only the decode limit "
            "applies"
        )
    elif "golden" in basis:
        hint = (
            f"an obtained file may decode at most {GOLDEN_FACTOR}x what its golden does: if the "
            "output grew on purpose, review it and run with --update-goldens"
        )
    elif unit == "pixels":
        hint = "frames this large are not decoded: a decode bomb, or an output gone wrong"
    else:
        hint = (
            "if the file is genuine, raise the limit (--lossless-decode-limit, ini "
            "lossless_decode_limit, environment PYTEST_LOSSLESS_DECODE_LIMIT)"
        )
    return DecodeLimitExceeded(
        path,
        f"{head}. An untrusted file may not make a test decode without bound; {hint}",
        declared=declared,
        allowed=allowed,
        limit=basis,
        unit=unit,
    )
