"""Which comparer answers for a built-in kind under a gate: the one switch from (kind, gate) to
the exact or the lossy comparison.
"""

from __future__ import annotations

from ..core.artifact import Artifact
from ..errors import LosslessError
from .exact import compare_audio_file, compare_bytes, compare_container, compare_tensor
from .lossy import compare_tolerance
from .result import GateResult
from .spec import Gate, check_gate_applies


def compare(kind: str, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
    """Compare two artifacts of a built-in ``kind`` under ``gate``."""
    check_gate_applies(kind, gate, expected.name)
    if gate.name == "bytes":
        return compare_bytes(gate, expected, obtained, kind)
    if gate.name == "tolerance":
        return compare_tolerance(gate, expected, obtained, kind)
    if kind == "video":
        return compare_container(gate, expected, obtained, kind)
    if kind == "audio":
        return compare_audio_file(gate, expected, obtained, kind)
    if kind == "tensor":
        return compare_tensor(gate, expected, obtained, kind)
    raise LosslessError(f"no built-in comparison of kind {kind!r} under gate {gate.spec}")
