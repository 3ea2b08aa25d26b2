"""The image kind: PNG, JPEG and GIF (stills and animations), compared by their decoded pixels.

Detection reads the file's signature; the fingerprint is the one the video kind makes, through
the same ffmpeg path (one SHA-256 per decoded frame in the image's own pixel format), so the
same pixels saved with other compression (another PNG level, other chunk sizes) are the same
image under the default gate ``decoded``. A JPEG that differs is said to be lossy by design.
The canary and the report's pictures are the video kind's (:func:`~.video.plan_frames`,
:func:`~.video.frame_pictures`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from .interface import BuiltinKind

if TYPE_CHECKING:
    from ..core.artifact import Artifact
    from ..core.records import JsonObject
    from ..gates import Gate, GateResult
    from ..media.limits import MediaLimits
    from .canary import Plan

#: Signatures of the image formats this kind reads, by the name a fingerprint records.
SIGNATURES = (
    ("png", b"\x89PNG\r\n\x1a\n"),
    ("jpeg", b"\xff\xd8\xff"),
    ("gif", b"GIF87a"),
    ("gif", b"GIF89a"),
)

#: What a failing JPEG comparison says: its pixels change whenever it is saved again.
JPEG_NOTE = (
    "JPEG is lossy by design: saving a JPEG again (even at the same quality) changes its pixels, "
    "so a re-encoded JPEG differs from its golden. Keep the golden and the output losslessly "
    "(PNG), or compare with gate=tolerance(atol=...) (lossy, never reported as lossless) if a "
    "re-encode is intended"
)


def image_format(head: bytes) -> str | None:
    """``png``, ``jpeg`` or ``gif`` from the first bytes of a file, or None."""
    return next((name for name, magic in SIGNATURES if head.startswith(magic)), None)


class ImageKind(BuiltinKind):
    """PNG, JPEG and GIF: decoded pixels (every frame of an animation) compared exactly."""

    name = "image"
    default_gate = "decoded"
    gates = ("bytes", "decoded", "tolerance")
    hints: ClassVar[dict[str, str]] = {
        "elementwise": "decoded pixels are compared exactly by 'decoded'"
    }

    signatures = tuple((0, magic) for _name, magic in SIGNATURES)

    def detect(self, path: Path, head: bytes) -> bool:
        return image_format(head) is not None

    def fingerprint(self, path: Path) -> JsonObject:
        from ..core.artifact import read_head
        from ..media.container import fingerprint_container

        found = fingerprint_container(path, video=True, limits=self.limits())
        return replace(found, image_format=image_format(read_head(path, 8))).to_json()

    def check_declared(self, path: Path, limits: MediaLimits) -> None:
        from ..media.container import check_declared_container

        check_declared_container(path, limits, video=True)

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        from .video import compare_container

        result = compare_container(gate, expected, obtained, self.name, limits=self.limits())
        formats = {
            expected.fingerprint.get("image_format"),
            obtained.fingerprint.get("image_format"),
        }
        if not result.passed and "jpeg" in formats:
            result.notes.append(JPEG_NOTE)
        return result

    def compare_tolerance(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        from .video import compare_tolerance

        return compare_tolerance(gate, expected, obtained, self.name, limits=self.limits())

    def plan(self, gate: Gate, artifact: Artifact, folder: Path) -> Plan:
        from .video import plan_frames

        return plan_frames(self, gate, artifact, folder, self.limits())

    def pictures(
        self, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str]:
        from .video import frame_pictures

        return frame_pictures(result, expected, obtained, folder, self.limits())
