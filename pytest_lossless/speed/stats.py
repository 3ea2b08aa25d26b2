"""Paired speed statistics: pure functions, no I/O, no clock.

The speed gate compares a candidate with its control in *blocks*. Under the ``ABBA`` design a
block is four arms in the order A B B A or B A A B (the opening arm drawn from a seeded RNG), so
a linear drift across the session cancels inside every block. Each completed block gives one
number, the difference of the two builds' log times in it (candidate minus control), each build
summarised by its mean log time, or by its lowest when its two arms are more than 25% apart (a
spike in one arm cannot move the block; :func:`block_difference`); the ratio estimate is
``exp(median)`` of those differences.

Confidence intervals come from sign-test order statistics: with ``n`` blocks and rank ``k`` the
interval ``[d_(k), d_(n+1-k)]`` misses the true median on each side with probability at most
``P(Binomial(n, 1/2) <= k - 1)``, for *any* continuous distribution of the block differences
(distribution-free: no normality, no equal variances). The price is discreteness: the smallest
one-sided error with ``n`` blocks is ``2**-n``, so 4 blocks can never give a 95% bound on either
side (6.25%), and 5 blocks are the least that can.

The claim ``target`` (e.g. 0.30 = "at least 30% lower") sets the boundary ``theta =
log(1 - target)``. The verdict is PASS when the upper bound is at or below ``theta`` (the whole
interval meets the target), FAIL when the lower bound is above it (the whole interval misses
it), INCONCLUSIVE otherwise. PASS and FAIL each test one direction, so each bound is one-sided:
``confidence=0.95`` means P(PASS) <= 5% when the true ratio is exactly at the target (the worst
case for a false PASS) and P(FAIL) <= 5% when it is exactly at the target from the other side.

Early stopping: the gate looks at the data after a few planned block counts and stops at the
first decisive look. Repeated looks inflate error rates when each look spends the full alpha, so
:func:`plan_looks` uses a Pocock-like split -- one common nominal per-look level, the largest for
which the *exact* probability of a false PASS over all looks stays within ``1 - confidence``.
Under the boundary null each block is above or below ``theta`` with probability 1/2,
independently, whatever the noise distribution, so that probability is computed exactly by a
small dynamic programme over the count of blocks above the boundary (:func:`sequential_error`),
rather than bounded by Bonferroni (which would be needlessly conservative with overlapping
looks). With the default 8 blocks the looks are at 6 and 8 blocks, ranks 1 and 2, and the exact
error per direction is 3.9%. A first look at 4 or 5 blocks would spend most of the budget at once
(2**-4 = 6.25% alone breaks 5%; 2**-5 = 3.1% leaves no room for a rank-2 look later), which is
why the default first look is at 6.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median  # the mean of the two middle values for an even count
from typing import Literal

from ..core.records import Record, spec
from ..core.verdict import Verdict

ArmName = Literal["control", "candidate"]

CONTROL: ArmName = "control"
CANDIDATE: ArmName = "candidate"
DESIGNS = ("ABBA", "AB")
DEFAULT_CONFIDENCE = 0.95
DEFAULT_MIN_BLOCKS = 6
LOOK_EVERY = 2
BOOTSTRAP_MIN_BLOCKS = 6
BOOTSTRAP_RESAMPLES = 2000

#: Fewest samples that support a tail percentile at 99% confidence (MLPerf early stopping).
PERCENTILE_MIN_SAMPLES: dict[int, int] = {90: 64, 95: 130, 99: 662}
INSUFFICIENT = "insufficient samples"


# ------------------------------------------------------------------ schedule


@dataclass(frozen=True)
class Schedule:
    """The planned order of arms: one tuple of arm names per block, and each block's opener."""

    design: str
    seed: int
    blocks: tuple[tuple[ArmName, ...], ...]

    @property
    def openers(self) -> tuple[ArmName, ...]:
        return tuple(block[0] for block in self.blocks)


#: How the ``AB`` design picks each block's opener. ``per-block``: drawn from the seed for every
#: block, as ABBA does, so an order effect (the second arm of a pair warm, a drift) lands on
#: either build with probability 1/2, independently per block, and the sign test stays exact.
#: ``session``: one opener for the whole session, then strict alternation (the first version;
#: receipts without ``plan.ab_openers`` were scheduled so): the same build ran second in every
#: block, so "the second arm is 30% faster" made equal builds PASS a 30% target in half the
#: sessions (#20).
AB_OPENERS = ("per-block", "session")
DEFAULT_AB_OPENERS = "per-block"
LEGACY_AB_OPENERS = "session"


def block_schedule(
    blocks: int, *, design: str = "ABBA", seed: int, ab_openers: str = DEFAULT_AB_OPENERS
) -> Schedule:
    """Plan ``blocks`` blocks: ABBA or AB, each block's opener drawn from the seeded RNG.

    ``AB`` runs one arm of each build per block (A B or B A), cheaper than ABBA; it cancels a
    drift or an order effect only in distribution (each block's opener is random), not inside
    each block as ABBA does, so its blocks are noisier. ``ab_openers="session"`` replays the
    first version's AB schedule (one opener, then strict alternation) for old receipts.
    """
    if design not in DESIGNS:
        raise ValueError(f"design={design!r}: expected one of {', '.join(DESIGNS)}")
    if ab_openers not in AB_OPENERS:
        raise ValueError(f"ab_openers={ab_openers!r}: expected one of {', '.join(AB_OPENERS)}")
    if blocks < 1:
        raise ValueError(f"blocks={blocks}: a schedule needs at least one block")
    rng = random.Random(seed)
    plan: list[tuple[ArmName, ...]] = []
    if design == "ABBA":
        for _ in range(blocks):
            first, second = (CONTROL, CANDIDATE) if rng.random() < 0.5 else (CANDIDATE, CONTROL)
            plan.append((first, second, second, first))
    elif ab_openers == "per-block":
        for _ in range(blocks):
            first, second = (CONTROL, CANDIDATE) if rng.random() < 0.5 else (CANDIDATE, CONTROL)
            plan.append((first, second))
    else:
        first, second = (CONTROL, CANDIDATE) if rng.random() < 0.5 else (CANDIDATE, CONTROL)
        plan.extend((first, second) for _ in range(blocks))
    return Schedule(design=design, seed=seed, blocks=tuple(plan))


# ------------------------------------------------------------------ per-block statistic


#: How one build's arms in a block become one number. ``mean-log``: the mean log time (the
#: first version's rule; receipts without a ``block_summary`` were derived with it).
#: ``robust-log``: the same mean, unless the build's times in that block differ by more than
#: :data:`SPIKE_GAP`, in which case the lowest of them: one slow arm (a spike: a page fault
#: storm, a co-tenant, a GC pause) cannot move its block, and a spike in both arms of a build
#: still shows. Either rule summarises both builds with the same symmetric function, which is
#: what the sign test's guarantee needs (see :func:`block_difference`).
BLOCK_SUMMARIES = ("mean-log", "robust-log")
DEFAULT_BLOCK_SUMMARY = "robust-log"
LEGACY_BLOCK_SUMMARY = "mean-log"
#: Two arms of one build in one block more than 25% apart: the slower is taken for a spike.
SPIKE_GAP = math.log(1.25)


def _build_summary(log_times: Sequence[float], summary: str) -> float:
    mean = sum(log_times) / len(log_times)
    if summary == "robust-log" and max(log_times) - min(log_times) > SPIKE_GAP:
        return min(log_times)
    return mean


def block_difference(
    control: Sequence[float],
    candidate: Sequence[float],
    summary: str = DEFAULT_BLOCK_SUMMARY,
) -> float:
    """One block's log candidate time minus log control time, each build summarised alike.

    The guarantee: when the candidate's log times are the control's shifted by exactly the
    boundary, and the arms' noise is exchangeable (spikes included, whatever their
    distribution), swapping the builds' roles negates the difference, so it lies above the
    boundary with probability 1/2: the sign test's premise. That holds for any summary applied
    to both builds alike (``mean-log`` and ``robust-log``); a drift linear within the block is
    cancelled exactly by ``mean-log`` and, under ABBA with random openers, in expectation by
    ``robust-log`` (its lowest-time branch is taken only on a spike).
    """
    if summary not in BLOCK_SUMMARIES:
        raise ValueError(f"block summary {summary!r}: expected one of {', '.join(BLOCK_SUMMARIES)}")
    if not control or not candidate:
        raise ValueError("a block needs at least one control and one candidate time")
    for seconds in (*control, *candidate):
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(
                f"a measured time must be a finite number of seconds > 0, got {seconds!r}"
            )
    return _build_summary([math.log(t) for t in candidate], summary) - _build_summary(
        [math.log(t) for t in control], summary
    )


def boundary(target: float) -> float:
    """``log(1 - target)``: the log ratio a candidate must stay at or below to meet ``target``."""
    if (
        isinstance(target, bool)
        or not isinstance(target, numbers.Real)  # "0.3" from a config file: named, not a trace
        or not math.isfinite(target)
        or target >= 1
    ):
        raise ValueError(
            f"target={target!r}: expected the fraction of time saved, below 1 "
            "(0.30 = at least 30% lower; -0.05 = at most 5% slower)"
        )
    return math.log(1 - target)


# ------------------------------------------------------------------ sign-test plan


def binomial_tail(n: int, j: int) -> float:
    """``P(Binomial(n, 1/2) <= j)``, exactly (integer arithmetic, then one division)."""
    if j < 0:
        return 0.0
    hits: int = sum(math.comb(n, i) for i in range(min(j, n) + 1))
    return hits / (1 << n)


def sign_bounds(diffs: Sequence[float], k: int) -> tuple[float, float]:
    """Order statistics ``(d_(k), d_(n+1-k))``; each side misses w.p. <= binomial_tail(n, k-1)."""
    n = len(diffs)
    if not 1 <= k <= (n + 1) // 2:
        raise ValueError(f"rank k={k} needs 1 <= k <= (n+1)/2 with n={n} blocks")
    ordered = sorted(diffs)
    return ordered[k - 1], ordered[n - k]


@dataclass(frozen=True)
class Look:
    """One planned look: after ``blocks`` blocks, bounds of rank ``k`` (0: no decision possible)."""

    blocks: int
    k: int
    tail: float  # one-sided error of either bound at this look taken alone


@dataclass(frozen=True)
class Plan(Record):
    """The planned looks and the exact sequential error per claim direction (<= 1 - confidence)."""

    max_blocks: int
    min_blocks: int
    confidence: float
    looks: tuple[Look, ...]
    error: float
    #: How a block's arms become its difference (:data:`BLOCK_SUMMARIES`); a plan recorded
    #: before the field was derived with the mean.
    summary: str = spec(DEFAULT_BLOCK_SUMMARY, key="block_summary", absent=LEGACY_BLOCK_SUMMARY)
    #: How the AB design drew its openers (:data:`AB_OPENERS`); absent: the first version's.
    #: Written only when not the legacy value, so an old receipt round-trips unchanged.
    ab_openers: str = spec(
        DEFAULT_AB_OPENERS,
        key="ab_openers",
        absent=LEGACY_AB_OPENERS,
        omit=lambda plan: plan.ab_openers == LEGACY_AB_OPENERS,
    )
    #: Whether a decisive look must agree with the ratio of mean times (:func:`decide`);
    #: absent (a receipt from before the check): it was not applied.
    mean_check: bool = spec(True, key="mean_check", absent=False, omit=lambda p: not p.mean_check)

    def look_at(self, blocks: int) -> Look | None:
        for look in self.looks:
            if look.blocks == blocks:
                return look
        return None


def sequential_error(looks: Sequence[tuple[int, int]]) -> float:
    """Exact P(PASS) of the early-stopping rule when the true median difference is the boundary.

    ``looks`` are ``(blocks, k)`` pairs in increasing ``blocks``. At a look, PASS when at most
    ``k - 1`` blocks lie above the boundary, FAIL when at most ``k - 1`` lie at or below it; a
    decisive look stops the gate. Each block is above with probability 1/2 independently, so
    this is a dynamic programme over the count above. By symmetry it is also the exact P(FAIL)
    when the true ratio sits exactly at the target.
    """
    alive: dict[int, float] = {0: 1.0}
    done = 0
    false_pass = 0.0
    for blocks, k in looks:
        step = blocks - done
        if step < 0:
            raise ValueError("looks must be in increasing order of blocks")
        done = blocks
        grown: dict[int, float] = {}
        for above, p in alive.items():
            for j in range(step + 1):
                grown[above + j] = grown.get(above + j, 0.0) + p * math.comb(step, j) / 2**step
        alive = {}
        for above, p in grown.items():
            if k >= 1 and above <= k - 1:
                false_pass += p
            elif not (k >= 1 and blocks - above <= k - 1):
                alive[above] = p
    return false_pass


def _rank_for(blocks: int, level: float) -> int:
    """The largest rank whose one-sided tail is within ``level`` (0 when even rank 1 is not)."""
    best = 0
    for k in range(1, (blocks + 1) // 2 + 1):
        if binomial_tail(blocks, k - 1) <= level:
            best = k
    return best


def minimum_blocks(confidence: float = DEFAULT_CONFIDENCE) -> int:
    """The fewest blocks whose extreme order statistic gives a one-sided bound at ``confidence``."""
    return max(1, math.ceil(math.log2(1 / (1 - confidence)) - 1e-12))


def plan_looks(
    max_blocks: int,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    min_blocks: int | None = None,
    looks: Sequence[int] | None = None,
    summary: str = DEFAULT_BLOCK_SUMMARY,
    ab_openers: str = DEFAULT_AB_OPENERS,
    mean_check: bool = True,
) -> Plan:
    """Plan the looks of a gate running at most ``max_blocks`` blocks.

    Looks default to every :data:`LOOK_EVERY` blocks from ``min_blocks`` (default
    :data:`DEFAULT_MIN_BLOCKS`) up to ``max_blocks``, always including ``max_blocks``. Each look
    gets the rank allowed by one common nominal level, the largest whose exact sequential error
    (:func:`sequential_error`) stays within ``1 - confidence`` (Pocock-like).
    """
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence={confidence!r}: expected a level between 0.5 and 1")
    if summary not in BLOCK_SUMMARIES:
        raise ValueError(f"block summary {summary!r}: expected one of {', '.join(BLOCK_SUMMARIES)}")
    if ab_openers not in AB_OPENERS:
        raise ValueError(f"ab_openers={ab_openers!r}: expected one of {', '.join(AB_OPENERS)}")
    alpha = 1 - confidence
    if min_blocks is None:
        min_blocks = min(DEFAULT_MIN_BLOCKS, max_blocks)
    if looks is None:
        planned = list(range(min_blocks, max_blocks + 1, LOOK_EVERY))
        if not planned or planned[-1] != max_blocks:
            planned.append(max_blocks)
    else:
        planned = sorted(set(looks))
    if not planned or planned[0] < 1 or planned[-1] > max_blocks or planned[0] < min_blocks:
        raise ValueError(
            f"looks={planned} must lie between min_blocks={min_blocks} and max_blocks={max_blocks}"
        )
    levels = sorted({binomial_tail(n, j) for n in planned for j in range((n + 1) // 2)})
    chosen: tuple[Look, ...] = tuple(Look(n, 0, 0.0) for n in planned)
    error = 0.0
    for level in levels:
        trial = tuple(
            Look(n, k, binomial_tail(n, k - 1) if k else 0.0)
            for n, k in ((n, _rank_for(n, level)) for n in planned)
        )
        trial_error = sequential_error([(lk.blocks, lk.k) for lk in trial])
        if trial_error <= alpha + 1e-12:
            chosen, error = trial, trial_error
    return Plan(
        max_blocks=max_blocks,
        min_blocks=min_blocks,
        confidence=confidence,
        looks=chosen,
        error=error,
        summary=summary,
        ab_openers=ab_openers,
        mean_check=mean_check,
    )


# ------------------------------------------------------------------ decision


def _no_bounds(look: LookResult) -> bool:
    return look.low is None or look.high is None


@dataclass(frozen=True, slots=True, kw_only=True)
class LookResult(Record):
    """What one planned look saw: its bounds of rank ``k`` (none when ``k`` is 0) and verdict."""

    blocks: int
    k: int
    low: float | None = spec(None, omit=_no_bounds)
    high: float | None = spec(None, omit=_no_bounds)
    verdict: Verdict
    #: The candidate/control ratio of mean times over the look's blocks, where the plan's
    #: mean check applied to it (a decisive sign test); absent otherwise.
    mean_ratio: float | None = spec(None, omit="none")


@dataclass(frozen=True)
class Decision:
    """The statistical verdict from the block differences (errored arms are the runner's)."""

    verdict: Verdict
    blocks: int  # blocks used: the deciding look, or every completed block
    ratio: float | None
    ci: tuple[float, float] | None  # ratio scale
    look: Look | None  # the look whose bounds are reported
    reason: str
    looks: tuple[LookResult, ...] = ()
    #: The gate stops here: a decisive look, or one whose mean check vetoed it.
    stopped: bool = False


def mean_log_ratio(totals: Sequence[tuple[float, float]]) -> float:
    """``log(candidate seconds / control seconds)`` summed over blocks of ``(control,
    candidate)`` totals: the ratio of the builds' mean times (both run equally often)."""
    return math.log(sum(c for _, c in totals)) - math.log(sum(a for a, _ in totals))


def decide(
    diffs: Sequence[float],
    theta: float,
    plan: Plan,
    totals: Sequence[tuple[float, float]] | None = None,
) -> Decision:
    """Walk the planned looks over the completed blocks; stop at the first decisive one.

    PASS when the upper bound is at or below ``theta``; FAIL when the lower bound is above it;
    otherwise go on to the next look, and INCONCLUSIVE after the last one reached.

    The mean check (``plan.mean_check``, with ``totals``: each block's control and candidate
    seconds): the sign test bounds the *median* block, on log times; a candidate fast on some
    runs and slow on others can have a median block below the target while its mean time is
    not (#20: 0.3 s and 2.0 s in turn against 1.0 s gave "ratio 0.30 [0.30, 0.30] PASS", the
    lower arm summarising each block, for a candidate 15% slower on average). So a decisive
    look must agree with the ratio of the builds' mean times over the same blocks: a PASS
    whose mean ratio misses the target, or a FAIL whose mean ratio meets it, is INCONCLUSIVE,
    and the gate stops there. Stopping keeps the guarantee exact: every PASS (FAIL) is one the
    sign test alone would have given at the same look, so the error stays ``plan.error``.
    """
    n = len(diffs)
    trail: list[LookResult] = []
    last: tuple[Look, float, float] | None = None
    for look in plan.looks:
        if look.blocks > n:
            break
        if look.k < 1:
            trail.append(LookResult(blocks=look.blocks, k=0, verdict=Verdict.INCONCLUSIVE))
            continue
        low, high = sign_bounds(diffs[: look.blocks], look.k)
        verdict: Verdict = Verdict.INCONCLUSIVE
        if high <= theta:
            verdict = Verdict.PASS
        elif low > theta:
            verdict = Verdict.FAIL
        mean: float | None = None
        if verdict != Verdict.INCONCLUSIVE and plan.mean_check and totals is not None:
            mean = mean_log_ratio(totals[: look.blocks])
        disagree = mean is not None and (verdict == Verdict.PASS) != (mean <= theta)
        trail.append(
            LookResult(
                blocks=look.blocks,
                k=look.k,
                low=low,
                high=high,
                verdict=Verdict.INCONCLUSIVE if disagree else verdict,
                mean_ratio=None if mean is None else math.exp(mean),
            )
        )
        if mean is not None and disagree:  # the sign test and the mean disagree: no claim
            return Decision(
                verdict=Verdict.INCONCLUSIVE,
                blocks=look.blocks,
                ratio=math.exp(median(diffs[: look.blocks])),
                ci=(math.exp(low), math.exp(high)),
                look=look,
                reason=(
                    f"the sign test's interval [{math.exp(low):.3g}, {math.exp(high):.3g}] "
                    f"says {verdict} after {look.blocks} blocks, but the ratio of mean "
                    f"times is {math.exp(mean):.3g} against the target ratio "
                    f"{math.exp(theta):.3g}: the median block and the mean disagree "
                    "(a candidate fast on some runs only, or a spike), so no claim is made"
                ),
                looks=tuple(trail),
                stopped=True,
            )
        last = (look, low, high)
        if verdict != Verdict.INCONCLUSIVE:
            return Decision(
                verdict=verdict,
                blocks=look.blocks,
                ratio=math.exp(median(diffs[: look.blocks])),
                ci=(math.exp(low), math.exp(high)),
                look=look,
                reason="",
                looks=tuple(trail),
                stopped=True,
            )
    ratio = math.exp(median(diffs)) if diffs else None
    if last is None:
        first = next((lk.blocks for lk in plan.looks if lk.k >= 1), None)
        reason = (
            f"only {n} complete block(s); the first look that can decide needs {first}"
            if first is not None
            else f"no planned look can reach {plan.confidence:.0%} with at most "
            f"{plan.max_blocks} blocks"
        )
        return Decision(Verdict.INCONCLUSIVE, n, ratio, None, None, reason, tuple(trail))
    look, low, high = last
    reason = (
        f"the interval [{math.exp(low):.3g}, {math.exp(high):.3g}] straddles the target "
        f"ratio {math.exp(theta):.3g} after {look.blocks} blocks"
    )
    return Decision(
        verdict=Verdict.INCONCLUSIVE,
        blocks=n,
        ratio=ratio,
        ci=(math.exp(low), math.exp(high)),
        look=look,
        reason=reason,
        looks=tuple(trail),
    )


# ------------------------------------------------------------------ bootstrap cross-check


def bootstrap_median_interval(
    diffs: Sequence[float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float]:
    """Percentile-bootstrap bounds of the median difference, one-sided at ``confidence`` each.

    Seeded with Python's own Mersenne Twister (``random.Random(seed).random()``), whose stream
    is stable across Python versions, so a receipt's cross-check can be recomputed exactly.
    """
    n = len(diffs)
    if n < 2:
        raise ValueError("a bootstrap needs at least two blocks")
    rng = random.Random(seed)
    medians = sorted(
        median([diffs[int(rng.random() * n)] for _ in range(n)]) for _ in range(resamples)
    )
    alpha = 1 - confidence
    low_index = max(0, math.floor(alpha * resamples))
    high_index = min(resamples - 1, math.ceil(confidence * resamples) - 1)
    return medians[low_index], medians[high_index]


def classify(low: float, high: float, theta: float) -> Verdict:
    """PASS / FAIL / INCONCLUSIVE for an interval of log ratios against the boundary."""
    if high <= theta:
        return Verdict.PASS
    if low > theta:
        return Verdict.FAIL
    return Verdict.INCONCLUSIVE


# ------------------------------------------------------------------ percentiles


@dataclass(frozen=True)
class Percentile:
    """A latency percentile, or the refusal to report one from too few samples."""

    p: float
    n: int
    required: int
    value: float | None

    @property
    def sufficient(self) -> bool:
        return self.value is not None

    def __str__(self) -> str:
        if self.value is None:
            return (
                f"p{self.p:g}: {INSUFFICIENT} ({self.n} of the {self.required} needed "
                "at 99% confidence)"
            )
        return f"p{self.p:g}: {self.value:.6g} s ({self.n} samples)"


def required_samples(p: float) -> int:
    """Samples needed before ``p`` may be reported.

    p90, p95 and p99 need 64, 130 and 662 samples (MLPerf's early-stopping rule at 99%
    confidence); any other percentile above 50 needs the count of the next listed one above it
    (p80 -> 64, p97 -> 662); p50 and below need one. Above p99 no rule is listed: refused.
    """
    if not 0 < p < 100:
        raise ValueError(f"p={p!r}: expected a percentile between 0 and 100")
    if p <= 50:
        return 1
    for listed in sorted(PERCENTILE_MIN_SAMPLES):
        if p <= listed:
            return PERCENTILE_MIN_SAMPLES[listed]
    raise ValueError(f"p={p!r}: percentiles above p99 have no supported sample count")


def percentile(samples: Sequence[float], p: float) -> Percentile:
    """The nearest-rank ``p``-th percentile, or ``insufficient samples`` below the minimum."""
    need = required_samples(p)
    n = len(samples)
    if n < need or n == 0:
        return Percentile(p=p, n=n, required=need, value=None)
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * n))
    return Percentile(p=p, n=n, required=need, value=ordered[rank - 1])
