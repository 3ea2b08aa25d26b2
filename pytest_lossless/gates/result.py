"""The outcome of one gate on one artifact (:class:`GateResult`), as data for receipts and as
text for a CI log, and how every comparer builds it: a result started for a gate
(:func:`new_result`), metadata differences noted (:func:`note_meta`), and pass/fail settled from
what was noted (:func:`settle`).

Standard library only (with ``errors`` and ``core``), so that hook specifications and receipts
can carry results without loading numpy or media.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from itertools import zip_longest
from typing import TYPE_CHECKING, Any

from ..core.verdict import Verdict
from ..errors import LosslessError

if TYPE_CHECKING:
    from ..core.artifact import Artifact
    from .spec import Gate


@dataclass
class GateResult:
    """The outcome of one gate on one artifact, with the first mismatch and how many differ."""

    artifact: str
    kind: str
    gate: str
    lossless: bool
    passed: bool
    metadata_diffs: list[str] = field(default_factory=list)
    unit: str = "byte"
    first_mismatch: str | None = None
    mismatch_count: int | None = None
    total: int | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    diagnostic_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Where the first mismatch is, as data (``{"stream": 0, "frame": 7, "pts": 7}``), so that
    #: diagnostics (diff pictures) can be written after the comparison.
    location: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return Verdict.PASS if self.passed else Verdict.FAIL

    def message(self) -> str:
        """Text for a CI log: artifact, gate, metadata first, first difference, count, where."""
        mode = "lossless" if self.lossless else "LOSSY: never reported as lossless"
        lines = [
            f"artifact {self.artifact!r} ({self.kind}), gate {self.gate} ({mode}): {self.verdict}"
        ]
        if self.metadata_diffs:
            lines.append("  metadata differs:")
            lines += [f"    - {diff}" for diff in self.metadata_diffs]
        if self.first_mismatch is not None:
            lines.append(f"  first differing {self.unit}: {self.first_mismatch}")
        plural = f"{self.unit}s"
        if self.mismatch_count is not None and (self.mismatch_count or not self.passed):
            of = f" of {self.total}" if self.total is not None else ""
            lines.append(f"  differing {plural}: {self.mismatch_count}{of}")
        elif not self.passed and self.first_mismatch is not None:
            lines.append(f"  differing {plural}: unknown (only digests are kept on one side)")
        if self.passed and self.total is not None and not self.mismatch_count:
            same = "identical" if self.lossless else "within tolerance"
            lines.append(f"  {self.total} {plural} {same}")
        if self.diagnostics:
            shown = ", ".join(f"{k}={_show(v)}" for k, v in self.diagnostics.items())
            lines.append(f"  diagnostics (not gates): {shown}")
        if self.diagnostic_files:
            lines.append("  diagnostics written to:")
            lines += [f"    {path}" for path in self.diagnostic_files]
        elif not self.passed:
            lines.append("  no diagnostic files written")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GateResult:
        known = {f.name for f in fields(cls)}
        missing = {"artifact", "kind", "gate", "lossless", "passed"} - set(data)
        if missing:
            raise LosslessError(f"gate result lacks {sorted(missing)}: {data!r}")
        return cls(**{k: v for k, v in data.items() if k in known})


def _show(value: Any) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.6g}"
    return str(value)


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


def first_difference(exp: Sequence[str], obt: Sequence[str]) -> int | None:
    """The index of the first differing digest (a missing one differs), or None."""
    for i, (a, b) in enumerate(zip_longest(exp, obt)):
        if a != b:
            return i
    return None
