"""How every comparer records what it finds: a result started for a gate, metadata differences,
positions read out of fingerprints, and pass/fail settled from what was noted.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from itertools import zip_longest
from typing import Any

from ..core.artifact import Artifact
from .result import GateResult
from .spec import Gate

#: Metadata keys of fingerprints as a reader says them.
META_LABELS = {
    "frame_count": "frame count",
    "sample_count": "sample count",
    "pix_fmt": "pixel format",
    "sample_fmt": "sample format",
    "frame_rate": "frame rate",
    "time_base": "time base",
    "sample_rate": "sample rate",
    "channel_layout": "channel layout",
}


def new_result(expected: Artifact, gate: Gate, kind: str, unit: str) -> GateResult:
    """A failing result for ``expected`` under ``gate``, until :func:`settle` says otherwise."""
    return GateResult(
        artifact=expected.name,
        kind=kind,
        gate=gate.spec,
        lossless=gate.lossless,
        passed=False,
        unit=unit,
    )


def note_meta(diffs: list[str], label: str, exp: Any, obt: Any, prefix: str = "") -> None:
    """Add ``label: expected X, obtained Y`` to ``diffs`` when the two differ."""
    if exp != obt:
        diffs.append(f"{prefix}{label}: expected {exp}, obtained {obt}")


def settle(result: GateResult) -> GateResult:
    """Passed when no metadata, no count and no first mismatch were noted."""
    result.passed = (
        not result.metadata_diffs and not result.mismatch_count and (result.first_mismatch is None)
    )
    return result


def streams(fp: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The streams of type ``kind`` (``video``, ``audio``) of a container fingerprint."""
    return [s for s in fp.get("streams", []) if s.get("type") == kind]


def pts_time(pts: int, tb: str | None) -> str:
    """``pts 7 = 0.291667 s``, or ``pts 7`` when the time base is unknown."""
    if tb is None:
        return f"pts {pts}"
    return f"pts {pts} = {float(pts * Fraction(tb)):.6f} s"


def frame_location(stream: dict[str, Any], frame: int, pts: Any) -> dict[str, Any]:
    """Where a frame mismatch is, with the frame size so diagnostics need not probe for it."""
    return {
        "stream": stream.get("index"),
        "frame": frame,
        "pts": pts,
        "pix_fmt": stream.get("pix_fmt"),
        "frame_bytes": stream.get("frame_bytes"),
    }


def first_difference(exp: Sequence[str], obt: Sequence[str]) -> int | None:
    """The index of the first differing digest (a missing one differs), or None."""
    for i, (a, b) in enumerate(zip_longest(exp, obt)):
        if a != b:
            return i
    return None
