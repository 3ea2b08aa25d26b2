"""The ``lossless`` fixture: a candidate compared with a control that first proves repeatable."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .. import report
from ..core.digests import safe_name
from ..settings import Settings
from .config import kinds, settings
from .outcomes import (
    expected_verdicts,
    failing_on_errors,
    is_media_expectation,
    record_verdict,
)
from .receipts import receipt_for

if TYPE_CHECKING:
    from ..core.expect import Media
    from ..gates import Gate
    from ..judge.proof import Proof
    from ..judge.repeatability import LosslessVerdict
    from ..kinds import KindRegistry


class LosslessFixture:
    """The ``lossless`` fixture: ``lossless.compare(control, candidate, *, runs, gate)``."""

    def __init__(
        self, item: pytest.Item, settings: Settings, kinds: KindRegistry, workdir: Path
    ) -> None:
        self._item = item
        self._settings = settings
        self._kinds = kinds
        self._workdir = workdir
        self._count = 0

    def compare(
        self,
        control: Callable[[], Any],
        candidate: Callable[[], Any],
        *,
        runs: int | None = None,
        gate: Gate | str | Mapping[str, Gate | str] | None = None,
        label: str | None = None,
        act: bool = True,
        expect: str | tuple[str, ...] | Media | Mapping[str, Media] | None = None,
        proof: Proof | None = None,
    ) -> LosslessVerdict:
        """Run the control ``runs`` times, then the candidate; PASS, FAIL or INCONCLUSIVE.

        ``act=False`` only returns the verdict; ``expect="FAIL"`` makes the test assert it;
        ``expect=Media(...)`` (or ``{name: Media}``) states what every run was asked for, and
        an output that misses it makes the verdict FAIL.
        ``proof`` (a pattern searched in the candidate run's stdout and stderr, or a callable
        given its result) must show that the candidate's path ran, or a PASS is INCONCLUSIVE.
        """
        __tracebackhide__ = True
        media = expect if is_media_expectation(expect) else None
        wanted = None if media is not None else expected_verdicts(expect)  # type: ignore[arg-type]
        from ..gates import parse_gate
        from ..judge.repeatability import compare_control_candidate

        self._count += 1
        name = label or f"compare#{self._count}"
        if isinstance(gate, Mapping):
            gates: Gate | Mapping[str, Gate] | None = {
                k: g for k, v in gate.items() if (g := parse_gate(v)) is not None
            }
        else:
            gates = parse_gate(gate)
        with failing_on_errors(f"lossless.compare {name}: "):
            verdict = compare_control_candidate(
                control,
                candidate,
                runs=runs or self._settings.control_runs,
                kinds=self._kinds,
                workdir=self._workdir / safe_name(name, default="compare"),
                gate=gates,
                label=name,
                proof=proof,
                expect=media,  # type: ignore[arg-type]
            )
        gate_text = ", ".join(sorted(set(verdict.gates.values())))
        receipt_for(self._item).add_lossless(verdict.to_dict())
        row = report.Row(self._item.nodeid, name, gate_text, verdict.verdict, verdict.summary())
        record_verdict(self._item, row, verdict, act=act, expect=wanted, lossy=verdict.lossy)
        return verdict


@pytest.fixture
def lossless(request: pytest.FixtureRequest, tmp_path: Path) -> LosslessFixture:
    """Compare a candidate with a control that must first prove itself repeatable."""
    return LosslessFixture(
        request.node, settings(request.config), kinds(request.config), tmp_path / "lossless"
    )
