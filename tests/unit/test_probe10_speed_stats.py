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
) -> dict[str, int]:
    rng = random.Random(seed)
    plan = stats.plan_looks(8, ab_openers=ab_openers)
    theta = stats.boundary(TARGET)
    counts = {"PASS": 0, "FAIL": 0, "INCONCLUSIVE": 0}
    for _ in range(gates):
        schedule = stats.block_schedule(
            8, design=design, seed=rng.randrange(2**31), ab_openers=ab_openers
        )
        index, prev, diffs = 0, None, []
        for block in schedule.blocks:
            times: dict[str, list[float]] = {stats.CONTROL: [], stats.CANDIDATE: []}
            for arm in block:
                base = ratio if arm == stats.CANDIDATE else 1.0
                times[arm].append(base * effect(index, arm, prev) * math.exp(rng.gauss(0, noise)))
                index, prev = index + 1, arm
            diffs.append(stats.block_difference(times[stats.CONTROL], times[stats.CANDIDATE]))
        counts[str(stats.decide(diffs, theta, plan).verdict)] += 1
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
