"""Probe 10 (#20): the speed gate's statistics under adversarial timings, by seeded simulation.

Each simulated gate is a real schedule (``stats.block_schedule`` from a seed), arm times made
by a scripted timing model, block differences by ``stats.block_difference`` and the verdict by
``stats.decide`` with the plan the runner uses. The true candidate/control ratio sits exactly at
the target (0.70 for a 30% target), the worst case for a false PASS and a false FAIL: each must
stay within the plan's exact error (5/128 = 3.91% for 8 pairs), up to sampling noise.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable

import pytest

from pytest_lossless.speed import stats

GATES = 1500
TARGET = 0.30
#: The exact error of the default plan plus four binomial standard deviations at GATES.
LIMIT = 5 / 128 + 4 * math.sqrt(5 / 128 * (1 - 5 / 128) / GATES)

#: effect(session index, arm, previous arm) -> a factor on the arm's time
Effect = Callable[[int, str, "str | None"], float]

EFFECTS: dict[str, Effect] = {
    "none": lambda i, arm, prev: 1.0,
    # warm cache: the second arm of each consecutive pair 30% faster
    "second-in-pair": lambda i, arm, prev: 0.7 if i % 2 else 1.0,
    # warm cache per build: an arm right after an arm of its own build 30% faster
    "warm-same-build": lambda i, arm, prev: 0.7 if prev == arm else 1.0,
    "cold-start-5x": lambda i, arm, prev: 5.0 if i == 0 else 1.0,
    "thermal-drift-1pct": lambda i, arm, prev: 1.01**i,
}


def simulate(
    design: str,
    effect: Effect,
    *,
    ratio: float = 1 - TARGET,
    gates: int = GATES,
    seed: int = 20,
    ab_openers: str = stats.DEFAULT_AB_OPENERS,
    noise: float = 0.05,
    target: float = TARGET,
    candidate: Callable[[random.Random, float], float] | None = None,
    mean_check: bool = True,
) -> dict[str, int]:
    """Verdict counts of ``gates`` simulated gates. ``candidate(rng, block_draw)``, when given,
    scripts each candidate arm's factor (a bimodal build) instead of the fixed ``ratio``."""
    rng = random.Random(seed)
    plan = stats.plan_looks(8, ab_openers=ab_openers, mean_check=mean_check)
    theta = stats.boundary(target)
    counts = {"PASS": 0, "FAIL": 0, "INCONCLUSIVE": 0}
    for _ in range(gates):
        schedule = stats.block_schedule(
            8, design=design, seed=rng.randrange(2**31), ab_openers=ab_openers
        )
        index, prev = 0, None
        diffs: list[float] = []
        totals: list[tuple[float, float]] = []
        for block in schedule.blocks:
            draw = rng.random()
            times: dict[str, list[float]] = {stats.CONTROL: [], stats.CANDIDATE: []}
            for arm in block:
                base = 1.0
                if arm == stats.CANDIDATE:
                    base = ratio if candidate is None else candidate(rng, draw)
                times[arm].append(base * effect(index, arm, prev) * math.exp(rng.gauss(0, noise)))
                index, prev = index + 1, arm
            diffs.append(stats.block_difference(times[stats.CONTROL], times[stats.CANDIDATE]))
            totals.append((sum(times[stats.CONTROL]), sum(times[stats.CANDIDATE])))
            if plan.look_at(len(diffs)) and stats.decide(diffs, theta, plan, totals).stopped:
                break
        counts[str(stats.decide(diffs, theta, plan, totals).verdict)] += 1
    return counts


@pytest.mark.parametrize("design", stats.DESIGNS)
@pytest.mark.parametrize("effect", sorted(EFFECTS))
def test_order_effects_keep_false_pass_and_false_fail_within_alpha(
    design: str, effect: str
) -> None:
    counts = simulate(design, EFFECTS[effect])
    assert counts["PASS"] / GATES <= LIMIT, counts
    assert counts["FAIL"] / GATES <= LIMIT, counts


def test_the_first_ab_schedule_let_a_warm_second_arm_pass_equal_builds() -> None:
    """Proof the simulation can fail: one opener per session put the same build second in
    every block, so the warm second arm made a 30% claim PASS in about half the sessions."""
    counts = simulate("AB", EFFECTS["second-in-pair"], ab_openers="session", gates=400)
    assert counts["PASS"] / 400 > 0.3, counts


def test_ab_openers_are_drawn_per_block() -> None:
    openers = stats.block_schedule(40, design="AB", seed=7).openers
    assert {stats.CONTROL, stats.CANDIDATE} <= set(openers)
    assert any(a == b for a, b in itertools.pairwise(openers))


def test_an_ab_receipt_of_the_first_schedule_still_verifies() -> None:
    """A receipt written before ``plan.ab_openers`` was scheduled by strict alternation: it
    reads back with that schedule, and verify finds no contradiction."""
    from pytest_lossless.speed.runner import Sample, contradictions, derive

    schedule = stats.block_schedule(8, design="AB", seed=3, ab_openers="session")
    samples = [
        Sample(
            index=2 * b + p,
            block=b,
            position=p,
            arm=arm,
            started_at=0.0,
            seconds=1.0 if arm == stats.CONTROL else 0.5,
        )
        for b, block in enumerate(schedule.blocks[:6])
        for p, arm in enumerate(block)
    ]
    old = derive(samples, target=TARGET, pairs=8, design="AB", seed=3, ab_openers="session")
    recorded = old.to_json()
    assert "ab_openers" not in recorded["plan"]
    assert recorded["verdict"] == "PASS"
    assert contradictions(recorded) == []


#: Candidates whose claim is false by their mean time (and by their median arm for the first
#: and last), but whose median block, on log times, the sign test could put below the target.
#: name: (candidate factor per arm given (rng, block draw), target, its mean ratio)
BIMODAL: dict[str, tuple[Callable[[random.Random, float], float], float]] = {
    # each arm 0.3 (40%) or 1.5 (60%): mean 1.02, 2% slower; median arm 1.5
    "arm-bimodal-slower-on-average": (lambda r, b: 0.3 if r.random() < 0.4 else 1.5, 0.30),
    # each arm 0.5 or 1.0: mean 0.75, 25% faster, claimed 30%
    "arm-bimodal-25pct": (lambda r, b: 0.5 if r.random() < 0.5 else 1.0, 0.30),
    # whole blocks: 0.5 on 70% of them, 1.5 on the rest: mean 0.80, claimed 0.70
    "block-bimodal": (lambda r, b: 0.5 if b < 0.7 else 1.5, 0.30),
    # same median as the control, 50% log-normal jitter: mean 1.13, claimed 10% faster
    "jitter-same-median": (lambda r, b: math.exp(r.gauss(0, 0.5)), 0.10),
}


ROBUST_BIAS = (
    "robust-log summarises a build whose two arms in a block are >25% apart by the lower one, "
    "so the more variable build is favoured: a candidate 0.5 s or 1.0 s per run (mean 0.75) "
    "PASSes a 0.70 claim in 21% of gates with the mean check (37% without; mean-log: 2.3%). "
    "Fixing it means a mean-type default summary (#20, probe 10: for the lead)"
)
ESTIMAND = (
    "the sign test bounds the median block: 70% of blocks 2x faster is a median ratio of 0.5, "
    "and all six first blocks are fast in 0.7**6 = 12% of gates, so no test on 6-8 blocks "
    "can bound the mean (0.80) at 5%; documented as the claim's meaning"
)


@pytest.mark.parametrize(
    "case",
    [
        "arm-bimodal-slower-on-average",
        "jitter-same-median",
        pytest.param("arm-bimodal-25pct", marks=pytest.mark.xfail(strict=True, reason=ROBUST_BIAS)),
        pytest.param("block-bimodal", marks=pytest.mark.xfail(strict=True, reason=ESTIMAND)),
    ],
)
def test_a_candidate_fast_on_some_runs_only_is_not_passed(case: str) -> None:
    """Class: the estimand. The sign test bounds the median block on log times; the lower
    arm of a build (robust-log) favours the more variable build. A claim false for the
    candidate's mean time must not PASS beyond the documented error; before the mean check
    these PASSed in 17-38% (robust-log) and 27% (block-bimodal) of 4,000 gates."""
    candidate, target = BIMODAL[case]
    counts = simulate("ABBA", EFFECTS["none"], candidate=candidate, target=target)
    assert counts["PASS"] / GATES <= LIMIT, counts


def test_without_the_mean_check_a_jittery_candidate_passes() -> None:
    """Proof the bimodal simulation can fail: the sign test alone passes them."""
    candidate, target = BIMODAL["arm-bimodal-25pct"]
    counts = simulate(
        "ABBA", EFFECTS["none"], candidate=candidate, target=target, mean_check=False, gates=400
    )
    assert counts["PASS"] / 400 > 0.25, counts
