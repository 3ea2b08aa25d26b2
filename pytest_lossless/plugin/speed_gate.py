"""The ``speed_gate`` fixture: paired, interleaved timing of a control and a candidate.

Each call is one workload's verdict, recorded in the test's receipt and the summary table;
gains are never added up across calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .. import report
from ..core.records import JsonObject
from ..settings import Settings
from .config import settings
from .evidence import receipt_for
from .lossless import check_plan, plan_error_row
from .outcomes import expected_verdicts, failing_on_errors, record_verdict

if TYPE_CHECKING:
    from ..compare.proof import Proof
    from ..speed.before_arm import BeforeArm
    from ..speed.runner import Sample, SpeedVerdict


class SpeedGateFixture:
    """The ``speed_gate`` fixture: ``speed_gate(control, candidate, *, target, pairs, ...)``."""

    def __init__(self, item: pytest.Item, settings: Settings, workdir: Path) -> None:
        self._item = item
        self._settings = settings
        self._workdir = workdir
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
        before_arm: BeforeArm | Sequence[BeforeArm] | None = None,
        trace: bool = False,
    ) -> SpeedVerdict:
        """Time control and candidate arms in blocks of A B B A; PASS, FAIL or INCONCLUSIVE.

        ``target=0.30`` claims "candidate time at least 30% lower" (ratio at most 0.70).
        ``pairs`` defaults to ``--lossless-speed-pairs``, ``seed`` to ``--lossless-speed-seed``
        (else random, recorded). With ``act=False`` the verdict is only returned; with
        ``expect=("FAIL", "INCONCLUSIVE")`` the test asserts the verdict (an A/A check).
        ``proof`` must hold for every candidate arm (see ``lossless.compare``), or a PASS is
        INCONCLUSIVE. ``before_arm`` (a callable given the arm's name and sample index, or a list
        of them: ``drop_page_cache``, ``devices_idle(devices)``) runs before each arm; what it
        returns is recorded in the arm's sample. The target, pairs, design, confidence and
        workload are frozen with the goldens (``plan.json``) by ``--update-goldens``.
        ``trace=True`` first runs each arm once more, traced and untimed, and records one row
        per ``trace.stage`` (control against candidate seconds) in the receipt and the report:
        where the time went, never what the verdict is made of.
        """
        __tracebackhide__ = True
        wanted = expected_verdicts(expect)
        from ..speed.runner import run_speed_gate

        self._count += 1
        name = workload or f"speed#{self._count}"
        receipt = receipt_for(self._item)
        seen = len(receipt.runs)

        def note_runs(sample: Sample) -> Sample:
            # The runs each arm started, so that verify can tell a dropped sample by its runs.
            nonlocal seen
            runs = tuple(str(run.get("name")) for run in receipt.runs[seen:])
            seen = len(receipt.runs)
            return replace(sample, runs=runs)

        from ..compare.proof import check_rule, describe
        from ..goldens.plans import speed_plan
        from ..speed.before_arm import hooks_of

        chosen_pairs = pairs if pairs is not None else self._settings.speed_pairs
        with failing_on_errors(
            f"speed gate {name}: ", on_error=plan_error_row(self._item, name, "plan")
        ):
            hooks = self._bound(hooks_of(before_arm))
            asked = speed_plan(
                target=target,
                pairs=chosen_pairs,
                design=design,
                confidence=confidence,
                workload=workload,
                proof=describe(check_rule(proof, "speed_gate(proof)")),
                verdicts=wanted,
            )
            plan = check_plan(self._item, "speed", name, asked)
        stages = None
        if trace:  # before the timed arms, so that no sample counts a traced run
            from ..compare.divergence import traced_stage_times
            from ..core.paths import safe_name

            with failing_on_errors(f"speed gate {name}: "):
                stages = traced_stage_times(
                    control, candidate, self._workdir / safe_name(name, default="speed")
                )
            seen = len(receipt.runs)
        with failing_on_errors(f"speed gate {name}: "):
            verdict = run_speed_gate(
                control,
                candidate,
                target=target,
                pairs=chosen_pairs,
                design=design,
                workload=workload,
                seed=seed if seed is not None else self._settings.speed_seed,
                confidence=confidence,
                on_sample=note_runs,
                proof=proof,
                before_arm=hooks,
            )
        asserted: JsonObject = {} if wanted is None else {"expect_verdict": [*sorted(wanted)]}
        receipt.add_speed(
            {
                **verdict.to_json(),
                "gate_plan": plan.to_json(),
                **asserted,
                **({"stages": stages.to_json()} if stages else {}),
            }
        )
        row = report.speed_row(self._item.nodeid, name, verdict)  # its status: record_verdict
        record_verdict(self._item, row, verdict, act=act, expect=wanted)
        return verdict

    def _bound(self, hooks: tuple[BeforeArm, ...]) -> tuple[BeforeArm, ...]:
        """``devices_idle(devices)`` asks the session's backend when it names none."""
        from ..speed.before_arm import DevicesIdle, bind_backend

        if not any(isinstance(h, DevicesIdle) and h.backend is None for h in hooks):
            return hooks
        from .devices import allocator

        return bind_backend(hooks, allocator(self._item.config).chosen)


@pytest.fixture
def speed_gate(request: pytest.FixtureRequest, tmp_path: Path) -> SpeedGateFixture:
    """Paired, interleaved timing of a control and a candidate against a stated target."""
    return SpeedGateFixture(request.node, settings(request.config), tmp_path / "speed_gate")
