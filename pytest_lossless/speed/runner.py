"""The speed gate's runner: schedules the arms, records every raw sample, builds the verdict.

:func:`run_speed_gate` runs control and candidate arms one at a time in blocks (``ABBA`` by
default, the opening arm of each block drawn from a recorded seed), stops at the first decisive
planned look, and returns a :class:`SpeedVerdict`. The verdict is always derived from the raw
samples by :func:`derive`, the same function :func:`rederive` uses to recompute it from a
receipt, so the recorded verdict and its re-derivation cannot drift apart.

A ``pair`` here is one paired block: under ``ABBA`` a block is two control and two candidate
arms (A B B A), under ``AB`` one of each. ``pairs=8`` thus runs at most 32 arms under ABBA.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..compare import proof as dispatch
from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.records import Record, meta, spec, to_json
from ..core.verdict import Verdict
from ..errors import ConfigError
from ..run import RunRecord, lifecycle_verdict
from . import before_arm as before
from . import stats

_ERROR_TEXT_LIMIT = 2000


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def _numbers(value: object) -> list[float] | None:
    """A non-empty list of numbers (a server's measured request times), else None."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        return None
    found = [_number(v) for v in value]
    return [v for v in found if v is not None] if all(v is not None for v in found) else None


def _run_of(result: object) -> RunRecord | None:
    """The model run an arm returned: a run result's or a server's ``run``, or a record."""
    run = getattr(result, "run", None)
    if isinstance(run, RunRecord):
        return run
    if isinstance(result, RunRecord):
        return result
    if isinstance(result, Mapping) and result.get("kind") in ("command", "server"):
        return RunRecord.from_json(result)  # a server's stop(): the record as JSON
    return None


def _lookup(result: object, name: str) -> object:
    """``result.name``, else ``result[name]`` for a mapping, else the field of its model
    run's record (a server's timings)."""
    if hasattr(result, name):
        return getattr(result, name)
    if isinstance(result, Mapping) and name in result:
        return result[name]
    run = _run_of(result)
    if run is not None and run.server is not None and hasattr(run.server, name):
        return getattr(run.server, name)
    return None


def measured_seconds(result: object) -> float:
    """The measured time of one arm: a number of seconds, or a run result's ``measured_seconds``.

    A server record's ``measured_seconds`` is a list of measured request times: their sum is
    the arm's time (each element is kept in the sample as ``measured_requests``).

    Raises ``TypeError``/``ValueError`` naming what came back, so an errored arm's record says
    what to return instead.
    """
    seconds = _number(result)
    if seconds is None:
        raw = _lookup(result, "measured_seconds")
        if raw is None:
            raise TypeError(
                f"the arm returned {type(result).__name__} {short(repr(result))}: return the "
                "measured seconds (a float) or a model_run result with measured_seconds"
            )
        seconds = _number(raw)
        if seconds is None and _numbers(raw):
            seconds = sum(_numbers(raw) or [])  # a server record: its measured requests
        if seconds is None:
            raise TypeError(
                f"measured_seconds is {short(repr(raw), 200)}, not a number of seconds "
                "(nor a list of measured request times)"
            )
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"the arm measured {seconds!r} s: a time must be finite and above 0")
    return seconds


def _timing(value: object) -> float | tuple[float, ...] | None:
    number = _number(value)
    if number is not None:
        return number
    listed = _numbers(value)
    return tuple(listed) if listed is not None else None


def sample_extras(sample: Sample, result: object) -> Sample:
    """``sample`` with the startup and warmup times the arm's result carries, kept apart from
    the measured time, and the run it timed."""
    if _number(result) is not None:
        return sample
    requests = _numbers(_lookup(result, "measured_seconds"))
    run = _run_of(result)
    return replace(
        sample,
        startup_seconds=_timing(_lookup(result, "startup_seconds")),
        warmup_seconds=_timing(_lookup(result, "warmup_seconds")),
        measured_requests=tuple(requests) if requests is not None else None,
        # The run record this sample timed: verify checks one against the other.
        run=run.name if run is not None and run.kind in ("command", "server") else None,
    )


def short(text: str, limit: int = _ERROR_TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


DEFAULT_PAIRS = 8
SCHEMA = "pytest-lossless/speed-verdict/1"

Arm = Callable[[], object]


# ------------------------------------------------------------------ the records


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample(Record):
    """One timed arm: where it stands in the schedule, what ran before it, its measured
    seconds (None: it raised, ``error``), the timings its result carried apart, the run it
    timed (``run``; ``runs``: every run it started, noted by the plugin) and its proof.

    Reading, a missing or mistyped place in the schedule is a :class:`RecordError` (the
    verdict cannot be re-derived); a hand-written sample may leave out its index, position and
    start."""

    index: int = field(metadata=meta(absent=0))
    block: int
    position: int = field(metadata=meta(absent=0))
    arm: str
    before_arm: tuple[before.HookResult, ...] | None = spec(None, omit="none")
    started_at: float = field(metadata=meta(absent=0.0))
    seconds: float | None = None
    startup_seconds: float | tuple[float, ...] | None = spec(None, omit="none")
    warmup_seconds: float | tuple[float, ...] | None = spec(None, omit="none")
    measured_requests: tuple[float, ...] | None = spec(None, omit="none")
    run: str | None = spec(None, omit="none")
    proof: dispatch.Finding | None = spec(None, omit="none")
    error: str | None = spec(None, omit="none")
    arm_seconds: float | None = spec(None, omit="none")
    runs: tuple[str, ...] | None = spec(None, omit="none")


@dataclass(frozen=True, slots=True)
class Bootstrap(Record):
    """The percentile-bootstrap cross-check of the median block difference (never the verdict)."""

    blocks: int
    resamples: int
    seed: int
    ci: tuple[float, float]
    verdict: Verdict
    agrees: bool


# ------------------------------------------------------------------ the verdict


@dataclass(frozen=True, kw_only=True)
class SpeedVerdict(Record):
    """One workload's speed verdict with every raw sample it was derived from."""

    verdict: Verdict
    ratio: float | None
    ci: tuple[float, float] | None
    confidence: float
    target: float
    workload: str | None
    design: str
    pairs: int
    blocks: int
    seed: int
    openers: tuple[str, ...] = field(metadata=meta(absent=()))
    plan: stats.Plan
    looks: tuple[stats.LookResult, ...] = ()
    reason: str = ""
    bootstrap: Bootstrap | None = None
    errors: tuple[str, ...] = ()
    #: The dispatch-proof rule each candidate arm was examined with (None: none was given).
    proof: str | None = None
    samples: tuple[Sample, ...] = field(metadata=meta(absent=()))

    @property
    def target_ratio(self) -> float:
        """The candidate/control ratio the claim allows at most (``1 - target``)."""
        return 1 - self.target

    def message(self) -> str:
        """One readable paragraph for the CI log."""
        head = f"workload {self.workload}: " if self.workload else ""
        if self.ratio is None:
            estimate = "candidate/control = n/a"
        elif self.ci is None:
            estimate = f"candidate/control = {self.ratio:.2f} (no interval)"
        else:
            estimate = (
                f"candidate/control = {self.ratio:.2f} [{self.ci[0]:.2f}, {self.ci[1]:.2f}] "
                f"({self.confidence:.0%} one-sided bounds)"
            )
        used = (
            f"{self.blocks} pairs"
            if self.blocks == self.pairs
            else f"{self.blocks} of {self.pairs} pairs"
        )
        text = (
            f"{head}{estimate}, target <= {self.target_ratio:.2f}: {self.verdict} "
            f"({used}, {self.design}, seed {self.seed})"
        )
        if self.reason:
            text += f". {self.reason[:1].upper()}{self.reason[1:]}"
        if self.bootstrap is not None and not self.bootstrap.agrees:
            low, high = self.bootstrap.ci
            text += (
                f". Bootstrap cross-check [{low:.2f}, {high:.2f}] alone would say "
                f"{self.bootstrap.verdict}; the verdict follows the distribution-free sign test"
            )
        return text + "."

    def __str__(self) -> str:
        return self.message()

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the raw samples, the settings that define the rule, and the verdict.
        Custom: the keys derived from the fields (``schema``, ``target_ratio``,
        ``percentiles``, ``message``), which ``verify`` checks, sit among them."""
        fields = to_json(self)
        samples = fields.pop("samples")
        data: dict[str, Any] = {"schema": SCHEMA}
        for key, value in fields.items():
            data[key] = value
            if key == "target":
                data["target_ratio"] = self.target_ratio
        data.update(percentiles=self.percentiles(), samples=samples, message=self.message())
        return data

    def percentiles(self) -> dict[str, dict[str, float | str]]:
        """p50/p90/p95/p99 of each arm's measured seconds; a percentile without the samples
        to support it at 99% confidence (64/130/662) says so instead of a number."""
        table: dict[str, dict[str, float | str]] = {}
        for arm in (stats.CONTROL, stats.CANDIDATE):
            seconds = [s.seconds for s in self.samples if s.arm == arm and s.seconds is not None]
            row: dict[str, float | str] = {}
            for p in (50, 90, 95, 99):
                value = stats.percentile(seconds, p) if seconds else None
                row[f"p{p}"] = (
                    value.value
                    if value is not None and value.value is not None
                    else str(value)
                    if value is not None
                    else "no samples"
                )
            table[arm] = row
        return table


# ------------------------------------------------------------------ derivation (shared)


def _plan(
    pairs: int,
    confidence: float,
    min_blocks: int | None,
    looks: Sequence[int] | None,
    summary: str = stats.DEFAULT_BLOCK_SUMMARY,
    ab_openers: str = stats.DEFAULT_AB_OPENERS,
    mean_check: bool = True,
) -> stats.Plan:
    try:
        return stats.plan_looks(
            pairs,
            confidence=confidence,
            min_blocks=min_blocks,
            looks=looks,
            summary=summary,
            ab_openers=ab_openers,
            mean_check=mean_check,
        )
    except ValueError as exc:
        raise ConfigError("speed_gate(pairs/looks)", pairs, str(exc)) from None


def _block_diffs(
    samples: Sequence[Sample], design: str, summary: str = stats.DEFAULT_BLOCK_SUMMARY
) -> list[float]:
    """Differences of the complete blocks, in block order (a block missing an arm is dropped)."""
    return [stats.block_difference(c, d, summary) for c, d in _complete_blocks(samples, design)]


def _block_totals(samples: Sequence[Sample], design: str) -> list[tuple[float, float]]:
    """Each complete block's total control and candidate seconds (for the mean check)."""
    return [(sum(c), sum(d)) for c, d in _complete_blocks(samples, design)]


def _complete_blocks(
    samples: Sequence[Sample], design: str
) -> list[tuple[list[float], list[float]]]:
    """The control and candidate seconds of each complete block, in block order."""
    per_arm = 2 if design == "ABBA" else 1
    blocks: dict[int, dict[str, list[float]]] = {}
    for sample in samples:
        if sample.error is not None or sample.seconds is None:
            continue
        arms = blocks.setdefault(sample.block, {stats.CONTROL: [], stats.CANDIDATE: []})
        arms[sample.arm].append(sample.seconds)
    complete: list[tuple[list[float], list[float]]] = []
    for index in sorted(blocks):
        arms = blocks[index]
        if len(arms[stats.CONTROL]) != per_arm or len(arms[stats.CANDIDATE]) != per_arm:
            break
        complete.append((arms[stats.CONTROL], arms[stats.CANDIDATE]))
    return complete


def derive(
    samples: Sequence[Sample],
    *,
    target: float,
    pairs: int,
    design: str,
    seed: int,
    confidence: float = stats.DEFAULT_CONFIDENCE,
    min_blocks: int | None = None,
    looks: Sequence[int] | None = None,
    workload: str | None = None,
    proof: str | None = None,
    block_summary: str = stats.DEFAULT_BLOCK_SUMMARY,
    ab_openers: str = stats.DEFAULT_AB_OPENERS,
    mean_check: bool = True,
) -> SpeedVerdict:
    """The verdict from raw samples alone: used by the runner and by :func:`rederive`.

    With a ``proof`` rule, a PASS needs every completed candidate arm proven (its sample's
    ``proof`` finding); otherwise it is INCONCLUSIVE.
    """
    theta = stats.boundary(target)
    plan = _plan(pairs, confidence, min_blocks, looks, block_summary, ab_openers, mean_check)
    diffs = _block_diffs(samples, design, plan.summary)
    decision = stats.decide(diffs, theta, plan, _block_totals(samples, design))
    errors = [
        f"{s.arm} arm (block {s.block + 1}, position {s.position + 1}) raised: {s.error}"
        for s in samples
        if s.error is not None
    ]
    verdict: Verdict = decision.verdict
    reason = decision.reason
    if errors:
        verdict = Verdict.INCONCLUSIVE
        reason = f"{errors[0]}; a speed verdict needs every arm to complete"
    if proof is not None:
        findings = [
            s.proof or dispatch.Finding(s.run, False, "not examined")
            for s in samples
            if s.arm == stats.CANDIDATE and s.error is None
        ]
        proven = dispatch.apply(verdict, findings)
        if proven != verdict:
            verdict, reason = proven, dispatch.reason(findings)
    bootstrap: Bootstrap | None = None
    used = diffs[: decision.blocks]
    if len(used) >= stats.BOOTSTRAP_MIN_BLOCKS:
        low, high = stats.bootstrap_median_interval(used, confidence=confidence, seed=seed)
        boot_verdict = stats.classify(low, high, theta)
        bootstrap = Bootstrap(
            blocks=len(used),
            resamples=stats.BOOTSTRAP_RESAMPLES,
            seed=seed,
            ci=(math.exp(low), math.exp(high)),
            verdict=boot_verdict,
            agrees=boot_verdict == decision.verdict,
        )
    openers = tuple(
        stats.block_schedule(pairs, design=design, seed=seed, ab_openers=plan.ab_openers).openers
    )
    return SpeedVerdict(
        verdict=verdict,
        ratio=decision.ratio,
        ci=decision.ci,
        confidence=confidence,
        target=target,
        workload=workload,
        design=design,
        pairs=pairs,
        blocks=decision.blocks,
        samples=tuple(samples),
        seed=seed,
        openers=openers,
        plan=plan,
        looks=decision.looks,
        reason=reason,
        bootstrap=bootstrap,
        errors=tuple(errors),
        proof=proof,
    )


def _recorded(d: Mapping[str, Any]) -> SpeedVerdict:
    """The verdict a recorded speed gate's raw samples give under its recorded rule."""
    plan = d.get("plan") or {}
    return derive(
        [Sample.from_json(s) for s in d.get("samples", [])],
        target=float(d["target"]),
        pairs=int(d["pairs"]),
        design=str(d["design"]),
        seed=int(d["seed"]),
        confidence=float(d.get("confidence", stats.DEFAULT_CONFIDENCE)),
        min_blocks=plan.get("min_blocks"),
        looks=[int(lk["blocks"]) for lk in plan["looks"]] if plan.get("looks") else None,
        # Receipts written before the robust block summary were derived with the mean.
        block_summary=str(plan.get("block_summary", stats.LEGACY_BLOCK_SUMMARY)),
        # Receipts written before per-block AB openers alternated from one opener.
        ab_openers=str(plan.get("ab_openers", stats.LEGACY_AB_OPENERS)),
        # Receipts written before the mean check were decided by the sign test alone.
        mean_check=plan.get("mean_check") is True,
        proof=d.get("proof"),
        workload=d.get("workload"),
    )


def rederive(d: Mapping[str, Any]) -> str:
    """Recompute the verdict of a recorded speed gate (``to_json`` form) from its raw samples."""
    return _recorded(d).verdict


def _same_value(a: Any, b: Any) -> bool:
    """Equal as JSON, with floats compared to a relative 1e-9 (a receipt's round trip)."""
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def contradictions(d: Mapping[str, Any]) -> list[str]:
    """What a recorded speed gate says that its raw samples do not support (empty: consistent)."""
    found: list[str] = []
    try:
        again = _recorded(d)
    except (KeyError, TypeError, ValueError, ConfigError) as exc:
        return [f"speed verdict cannot be re-derived: {exc}"]
    label = f"speed gate {d.get('workload')!r}" if d.get("workload") else "speed gate"
    if again.verdict != d.get("verdict"):
        found.append(
            f"{label}: recorded verdict {d.get('verdict')} but the raw samples give {again.verdict}"
        )
    recorded_ratio = d.get("ratio")
    if (again.ratio is None) != (recorded_ratio is None) or (
        again.ratio is not None
        and recorded_ratio is not None
        and not math.isclose(again.ratio, float(recorded_ratio), rel_tol=1e-9)
    ):
        found.append(
            f"{label}: recorded ratio {recorded_ratio} but the raw samples give {again.ratio}"
        )
    # Every derived field, not only the verdict: an edited interval or look is a contradiction.
    derived = again.to_json()
    if "block_summary" not in (d.get("plan") or {}):
        derived["plan"].pop("block_summary", None)  # a receipt from before the field
    for key in ("ab_openers", "mean_check"):
        if key not in (d.get("plan") or {}):
            derived["plan"].pop(key, None)  # a receipt from before the field
    if "ab_openers" not in (d.get("plan") or {}):
        derived["plan"].pop("ab_openers", None)  # a receipt from before the field
    for key in (
        "ci",
        "blocks",
        "looks",
        "reason",
        "errors",
        "openers",
        "plan",
        "bootstrap",
        "percentiles",
        "message",
    ):
        if key in d and not _same_value(derived.get(key), d.get(key)):
            found.append(
                f"{label}: recorded {key} {d.get(key)!r} but the raw samples give "
                f"{derived.get(key)!r}"
            )
    schedule = stats.block_schedule(
        again.pairs, design=again.design, seed=again.seed, ab_openers=again.plan.ab_openers
    )
    for sample in d.get("samples", []):
        try:
            planned = schedule.blocks[int(sample["block"])][int(sample["position"])]
        except (IndexError, KeyError, ValueError):
            found.append(f"{label}: sample {sample!r} lies outside the seeded schedule")
            break
        if planned != sample.get("arm"):
            found.append(
                f"{label}: sample #{sample.get('index')} is a {sample.get('arm')} arm where the "
                f"seeded schedule (seed {again.seed}) puts a {planned} arm"
            )
            break
    return found


# ------------------------------------------------------------------ the runner


def run_speed_gate(
    control: Arm,
    candidate: Arm,
    *,
    target: float,
    pairs: int | None = None,
    design: str = "ABBA",
    workload: str | None = None,
    seed: int | None = None,
    clock: Clock = SYSTEM_CLOCK,
    confidence: float = stats.DEFAULT_CONFIDENCE,
    min_blocks: int | None = None,
    looks: Sequence[int] | None = None,
    on_sample: Callable[[Sample], Sample] | None = None,
    proof: dispatch.Proof | None = None,
    before_arm: before.BeforeArm | Sequence[before.BeforeArm] | None = None,
) -> SpeedVerdict:
    """Time ``control`` and ``candidate`` arms in paired blocks and judge ``target``.

    ``target=0.30`` claims "candidate time at least 30% lower" (ratio at most 0.70); a target
    of zero or below claims no gain and is refused (:class:`ConfigError`). ``pairs`` is the most
    blocks to run (default :data:`DEFAULT_PAIRS`); the gate stops early at the first decisive
    planned look. Arms run one at a time; an arm that raises is recorded with its error, no
    further arm runs, and the verdict is INCONCLUSIVE. ``on_sample`` sees every sample as soon
    as it is recorded, and returns the sample to keep (the plugin notes the runs it started).
    ``proof`` (a pattern searched in each candidate run's output, or a callable given its
    result) must hold for every candidate arm, or a PASS is INCONCLUSIVE. ``before_arm`` runs
    before each arm and is recorded in its sample (:mod:`.arms`).
    """
    rule = dispatch.check_rule(proof, "speed_gate(proof)")
    hooks = before.hooks_of(before_arm)
    if design not in stats.DESIGNS:
        raise ConfigError("speed_gate(design)", design, f"expected one of {stats.DESIGNS}")
    try:
        theta = stats.boundary(target)
    except ValueError as exc:
        raise ConfigError("speed_gate(target)", target, str(exc)) from None
    if not target > 0:
        raise ConfigError(
            "speed_gate(target)",
            target,
            "expected the fraction of time saved, above 0 and below 1 (0.30 = candidate at "
            "least 30% lower): a target of zero or below claims no gain, so its PASS would "
            "prove nothing",
        )
    max_blocks = DEFAULT_PAIRS if pairs is None else pairs
    if isinstance(max_blocks, bool) or not isinstance(max_blocks, int) or max_blocks < 1:
        raise ConfigError("speed_gate(pairs)", pairs, "expected a whole number of pairs >= 1")
    plan = _plan(max_blocks, confidence, min_blocks, looks)
    if not any(look.k >= 1 for look in plan.looks):
        raise ConfigError(
            "speed_gate(pairs)",
            max_blocks,
            f"{max_blocks} pairs can never reach {confidence:.0%} confidence: the sign test "
            f"needs at least {stats.minimum_blocks(confidence)} pairs (default "
            f"{DEFAULT_PAIRS}); raise pairs or --lossless-speed-pairs",
        )
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    schedule = stats.block_schedule(
        max_blocks, design=design, seed=seed, ab_openers=plan.ab_openers
    )
    arms: dict[str, Arm] = {stats.CONTROL: control, stats.CANDIDATE: candidate}
    samples: list[Sample] = []
    diffs: list[float] = []
    totals: list[tuple[float, float]] = []
    for block, order in enumerate(schedule.blocks):
        times: dict[str, list[float]] = {stats.CONTROL: [], stats.CANDIDATE: []}
        for position, arm in enumerate(order):
            sample = _run_arm(
                arms[arm],
                arm,
                len(samples),
                block,
                position,
                clock,
                rule if arm == stats.CANDIDATE else None,
                hooks,
            )
            if on_sample is not None:
                sample = on_sample(sample)
            samples.append(sample)
            if sample.error is not None or sample.seconds is None:
                break
            times[arm].append(sample.seconds)
        if samples and samples[-1].error is not None:
            break
        diffs.append(
            stats.block_difference(times[stats.CONTROL], times[stats.CANDIDATE], plan.summary)
        )
        totals.append((sum(times[stats.CONTROL]), sum(times[stats.CANDIDATE])))
        look = plan.look_at(len(diffs))
        if look is not None and stats.decide(diffs, theta, plan, totals).stopped:
            break
    return derive(
        samples,
        target=target,
        pairs=max_blocks,
        design=design,
        seed=seed,
        confidence=confidence,
        min_blocks=plan.min_blocks,
        looks=[lk.blocks for lk in plan.looks],
        workload=workload,
        proof=dispatch.describe(rule),
        block_summary=plan.summary,
    )


def _run_arm(
    arm: Arm,
    name: str,
    index: int,
    block: int,
    position: int,
    clock: Clock,
    proof: dispatch.Proof | None = None,
    hooks: Sequence[before.BeforeArm] = (),
) -> Sample:
    """Run one arm and record it; an ``Exception`` (of the arm or of a ``before_arm`` hook,
    which then keeps the arm from running) becomes the sample's ``error``."""
    try:
        ran_before = before.run_before(hooks, name, index)  # outside the arm's time
    except before.HookFailed as exc:
        return Sample(
            index=index,
            block=block,
            position=position,
            arm=name,
            started_at=clock.wall(),
            error=short(str(exc)),
        )
    sample = Sample(
        index=index,
        block=block,
        position=position,
        arm=name,
        started_at=clock.wall(),
        before_arm=ran_before,
    )
    start = clock.monotonic()
    try:
        result = arm()
        sample = sample_extras(replace(sample, seconds=measured_seconds(result)), result)
        run = _run_of(result)
        if run is not None and run.ended_at is not None:
            # A run that crashed, was signalled or forced (``check=False``) measured no arm.
            lifecycle = lifecycle_verdict(run)
            if not lifecycle.clean:
                raise RuntimeError(f"its run {run.name} did not end cleanly: {lifecycle.summary}")
        if proof is not None:
            sample = replace(sample, proof=dispatch.examine(proof, result))
    except Exception as exc:  # any failure of the user's arm is recorded, never raised
        sample = replace(sample, seconds=None, error=short(f"{type(exc).__name__}: {exc}"))
    return replace(sample, arm_seconds=clock.monotonic() - start)
