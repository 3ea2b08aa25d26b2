"""The ``speed_gate`` fixture: paired, interleaved timing of a control and a candidate.

Each call is one workload's verdict, recorded in the test's receipt and the summary table;
gains are never added up across calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from .. import report
from ..settings import Settings
from .config import settings
from .outcomes import expected_verdicts, failing_on_errors, record_verdict
from .receipts import receipt_for

if TYPE_CHECKING:
    from ..judge.proof import Proof
    from ..judge.speed import SpeedVerdict


class SpeedGateFixture:
    """The ``speed_gate`` fixture: ``speed_gate(control, candidate, *, target, pairs, ...)``."""

    def __init__(self, item: pytest.Item, settings: Settings) -> None:
        self._item = item
        self._settings = settings
        self._count = 0

    def __call__(
        self,
        control: Callable[[], Any],
        candidate: Callable[[], Any],
        *,
        target: float,
        pairs: int | None = None,
        design: str = "ABBA",
        workload: str | None = None,
        act: bool = True,
        seed: int | None = None,
        confidence: float = 0.95,
        expect: str | tuple[str, ...] | None = None,
        proof: Proof | None = None,
    ) -> SpeedVerdict:
        """Time control and candidate arms in blocks of A B B A; PASS, FAIL or INCONCLUSIVE.

        ``target=0.30`` claims "candidate time at least 30% lower" (ratio at most 0.70).
        ``pairs`` defaults to ``--lossless-speed-pairs``, ``seed`` to ``--lossless-speed-seed``
        (else random, recorded). With ``act=False`` the verdict is only returned; with
        ``expect=("FAIL", "INCONCLUSIVE")`` the test asserts the verdict (an A/A check).
        ``proof`` must hold for every candidate arm (see ``lossless.compare``), or a PASS is
        INCONCLUSIVE.
        """
        __tracebackhide__ = True
        wanted = expected_verdicts(expect)
        from ..judge.speed import run_speed_gate

        self._count += 1
        name = workload or f"speed#{self._count}"
        receipt = receipt_for(self._item)
        seen = len(receipt.runs)

        def note_runs(sample: dict[str, Any]) -> None:
            # The runs each arm started, so that verify can tell a dropped sample by its runs.
            nonlocal seen
            sample["runs"] = [str(run.get("name")) for run in receipt.runs[seen:]]
            seen = len(receipt.runs)

        with failing_on_errors(f"speed gate {name}: "):
            verdict = run_speed_gate(
                control,
                candidate,
                target=target,
                pairs=pairs if pairs is not None else self._settings.speed_pairs,
                design=design,
                workload=workload,
                seed=seed if seed is not None else self._settings.speed_seed,
                confidence=confidence,
                on_sample=note_runs,
                proof=proof,
            )
        receipt.add_speed(verdict.to_dict())
        row = report.speed_row(self._item.nodeid, name, verdict)
        record_verdict(self._item, row, verdict, act=act, expect=wanted)
        return verdict


@pytest.fixture
def speed_gate(request: pytest.FixtureRequest) -> SpeedGateFixture:
    """Paired, interleaved timing of a control and a candidate against a stated target."""
    return SpeedGateFixture(request.node, settings(request.config))
