"""Unit and property tests of the paired speed statistics (pure functions, no clock)."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_lossless.speed import stats

# ------------------------------------------------------------------ schedule


def test_abba_blocks_mirror_and_openers_follow_the_seed() -> None:
    schedule = stats.block_schedule(8, design="ABBA", seed=1234)
    assert len(schedule.blocks) == 8
    for block in schedule.blocks:
        first, second, third, fourth = block
        assert {first, second} == {stats.CONTROL, stats.CANDIDATE}
        assert (third, fourth) == (second, first)
    assert schedule.openers == tuple(b[0] for b in schedule.blocks)
    assert stats.block_schedule(8, design="ABBA", seed=1234) == schedule


def test_openers_are_random_across_seeds_not_fixed() -> None:
    openers = {stats.block_schedule(8, seed=seed).openers for seed in range(40)}
    assert len(openers) > 20
    flat = [o for seq in openers for o in seq]
    assert 0.3 < flat.count(stats.CONTROL) / len(flat) < 0.7


def test_ab_design_alternates_from_a_seeded_start() -> None:
    # The first version's AB schedule, kept for receipts without plan.ab_openers (#20: the
    # default now draws each block's opener, tests/unit/test_probe10_speed_stats.py).
    starts = set()
    for seed in range(20):
        schedule = stats.block_schedule(5, design="AB", seed=seed, ab_openers="session")
        arms = [arm for block in schedule.blocks for arm in block]
        assert all(a != b for a, b in itertools.pairwise(arms))
        starts.add(arms[0])
    assert starts == {stats.CONTROL, stats.CANDIDATE}


def test_unknown_design_is_refused() -> None:
    with pytest.raises(ValueError, match="design"):
        stats.block_schedule(4, design="ABAB", seed=1)


# ------------------------------------------------------------------ per-block statistic


def test_block_difference_is_mean_log_candidate_minus_control() -> None:
    d = stats.block_difference([2.0, 8.0], [1.0, 4.0], "mean-log")
    assert d == pytest.approx(math.log(0.5))
    # Within 25% the robust summary is the same mean.
    d = stats.block_difference([2.0, 2.2], [1.0, 1.1])
    assert d == pytest.approx(math.log(0.5))


@pytest.mark.parametrize("build", ["control", "candidate"])
def test_one_spiked_arm_cannot_move_its_block(build: str) -> None:
    """A 3x spike in one arm of either build leaves the robust block difference where the
    unspiked arms put it; under the mean it moves the block by log(3)/2."""
    quiet = ([1.0, 1.02], [0.6, 0.61])
    spiked = list(quiet)
    which = 0 if build == "control" else 1
    spiked[which] = [spiked[which][0], spiked[which][1] * 3]
    base = stats.block_difference(*quiet)
    robust = stats.block_difference(*spiked)
    assert abs(robust - base) < 0.02
    mean = stats.block_difference(*spiked, "mean-log")
    assert abs(mean - base) > 0.5


def test_a_build_slow_in_both_arms_still_shows() -> None:
    assert stats.block_difference([1.0, 1.0], [3.0, 3.1]) == pytest.approx(math.log(3.05), rel=0.01)


def test_block_summary_is_antisymmetric() -> None:
    """Swapping the builds negates the difference: the sign test's premise under the null."""
    rng = random.Random(7)
    for _ in range(500):
        a = [math.exp(rng.gauss(0, 0.3)) for _ in range(2)]
        b = [math.exp(rng.gauss(0, 0.3)) for _ in range(2)]
        assert stats.block_difference(a, b) == pytest.approx(-stats.block_difference(b, a))


def test_unknown_block_summary_is_refused() -> None:
    with pytest.raises(ValueError, match="block summary"):
        stats.block_difference([1.0], [1.0], "median")
    with pytest.raises(ValueError, match="block summary"):
        stats.plan_looks(8, summary="median")


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_block_difference_refuses_impossible_times(bad: float) -> None:
    with pytest.raises(ValueError, match="finite number of seconds"):
        stats.block_difference([1.0, bad], [1.0, 1.0])


@pytest.mark.parametrize("target", [1.0, 1.5, math.nan])
def test_boundary_refuses_targets_that_leave_no_time(target: float) -> None:
    with pytest.raises(ValueError, match="target"):
        stats.boundary(target)


def test_boundary_of_a_no_slower_claim_is_above_one() -> None:
    assert math.exp(stats.boundary(-0.05)) == pytest.approx(1.05)


# ------------------------------------------------------------------ sign-test plan


def test_binomial_tail_exact_values() -> None:
    assert stats.binomial_tail(4, 0) == 1 / 16
    assert stats.binomial_tail(8, 1) == 9 / 256
    assert stats.binomial_tail(5, 5) == 1.0
    assert stats.binomial_tail(5, -1) == 0.0


def test_four_blocks_can_never_decide_at_95_percent() -> None:
    plan = stats.plan_looks(4)
    assert all(look.k == 0 for look in plan.looks)
    assert stats.minimum_blocks(0.95) == 5


def test_default_plan_is_six_then_eight_blocks_with_exact_error() -> None:
    plan = stats.plan_looks(8)
    assert [(lk.blocks, lk.k) for lk in plan.looks] == [(6, 1), (8, 2)]
    assert plan.error == pytest.approx(5 / 128)  # 1/64 at 6 blocks + 6/64 * 1/4 at 8
    assert plan.error <= 0.05


def _brute_force_false_pass(looks: list[tuple[int, int]]) -> float:
    """Enumerate every sign pattern: the reference for the dynamic programme."""
    n = looks[-1][0]
    passes = 0
    for pattern in itertools.product((0, 1), repeat=n):  # 1 = block above the boundary
        for blocks, k in looks:
            above = sum(pattern[:blocks])
            if k >= 1 and above <= k - 1:
                passes += 1
                break
            if k >= 1 and blocks - above <= k - 1:
                break
    return passes / (1 << n)


@given(
    st.lists(st.integers(min_value=1, max_value=11), min_size=1, max_size=4, unique=True),
    st.data(),
)
@settings(max_examples=60, deadline=None)
def test_sequential_error_matches_enumeration(blocks: list[int], data: st.DataObject) -> None:
    blocks.sort()
    looks = [(n, data.draw(st.integers(min_value=0, max_value=(n + 1) // 2))) for n in blocks]
    assert stats.sequential_error(looks) == pytest.approx(_brute_force_false_pass(looks))


@given(
    st.integers(min_value=1, max_value=24),
    st.sampled_from([0.90, 0.95, 0.99]),
)
@settings(max_examples=60, deadline=None)
def test_every_plan_keeps_the_error_budget(max_blocks: int, confidence: float) -> None:
    plan = stats.plan_looks(max_blocks, confidence=confidence)
    assert plan.error <= 1 - confidence + 1e-12
    assert plan.error == pytest.approx(
        stats.sequential_error([(lk.blocks, lk.k) for lk in plan.looks])
    )


def test_decide_at_the_boundary_passes_exactly_as_often_as_planned() -> None:
    """Every sign pattern at the boundary, through ``decide`` itself: P(PASS) == plan.error."""
    plan = stats.plan_looks(8)
    theta = math.log(0.7)
    passes = fails = 0
    for pattern in itertools.product((-1e-3, 1e-3), repeat=8):
        verdict = stats.decide([theta + e for e in pattern], theta, plan).verdict
        passes += verdict == "PASS"
        fails += verdict == "FAIL"
    assert passes / 256 == pytest.approx(plan.error)
    assert fails / 256 == pytest.approx(plan.error)


# ------------------------------------------------------------------ decide


def _noisy(ratio: float, n: int, sigma: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [math.log(ratio) + rng.gauss(0, sigma) for _ in range(n)]


def test_half_time_candidate_passes_at_the_first_look() -> None:
    plan = stats.plan_looks(8)
    decision = stats.decide(_noisy(0.5, 8, 0.05, seed=1), math.log(0.7), plan)
    assert decision.verdict == "PASS"
    assert decision.blocks == 6
    assert decision.ci is not None
    assert decision.ci[1] <= 0.7
    assert decision.ratio == pytest.approx(0.5, rel=0.1)


def test_equal_times_fail_a_thirty_percent_claim() -> None:
    decision = stats.decide(_noisy(1.0, 8, 0.05, seed=2), math.log(0.7), stats.plan_looks(8))
    assert decision.verdict == "FAIL"
    assert decision.ci is not None
    assert decision.ci[0] > 0.7


@given(st.integers(min_value=0, max_value=10_000), st.floats(min_value=0.0, max_value=0.3))
@settings(max_examples=100, deadline=None)
def test_equal_times_never_pass_a_thirty_percent_claim(seed: int, sigma: float) -> None:
    decision = stats.decide(_noisy(1.0, 8, sigma, seed), math.log(0.7), stats.plan_looks(8))
    assert decision.verdict != "PASS"


@given(st.integers(min_value=0, max_value=5))
def test_too_few_blocks_are_inconclusive(blocks: int) -> None:
    decision = stats.decide([math.log(0.3)] * blocks, math.log(0.7), stats.plan_looks(8))
    assert decision.verdict == "INCONCLUSIVE"
    assert decision.ci is None
    assert "first look that can decide needs 6" in decision.reason


def test_straddling_interval_is_inconclusive_after_the_last_look() -> None:
    theta = math.log(0.7)
    diffs = [theta - 0.1, theta + 0.1] * 4
    decision = stats.decide(diffs, theta, stats.plan_looks(8))
    assert decision.verdict == "INCONCLUSIVE"
    assert decision.blocks == 8
    assert [lk.blocks for lk in decision.looks] == [6, 8]
    assert "straddles" in decision.reason


@given(
    st.floats(min_value=0.05, max_value=3.0),
    st.integers(min_value=6, max_value=16),
)
def test_noiseless_interval_contains_the_true_ratio(ratio: float, blocks: int) -> None:
    diffs = [stats.block_difference([1.7, 1.7], [1.7 * ratio, 1.7 * ratio])] * blocks
    decision = stats.decide(diffs, math.log(0.7), stats.plan_looks(blocks))
    assert decision.ci is not None
    assert decision.ci[0] <= ratio * (1 + 1e-9)
    assert decision.ci[1] >= ratio * (1 - 1e-9)
    assert decision.ratio == pytest.approx(ratio)


@given(st.lists(st.floats(min_value=-2, max_value=2), min_size=6, max_size=16))
def test_interval_brackets_the_median(diffs: list[float]) -> None:
    decision = stats.decide(diffs, math.log(0.7), stats.plan_looks(len(diffs)))
    assert decision.ci is not None
    assert decision.ratio is not None
    assert decision.ci[0] <= decision.ratio * (1 + 1e-12)
    assert decision.ratio <= decision.ci[1] * (1 + 1e-12)


# ------------------------------------------------------------------ bootstrap


def test_bootstrap_is_seeded_and_brackets_the_median() -> None:
    diffs = _noisy(0.6, 8, 0.05, seed=3)
    first = stats.bootstrap_median_interval(diffs, seed=7)
    assert stats.bootstrap_median_interval(diffs, seed=7) == first
    assert first[0] <= stats.median(diffs) <= first[1]
    assert min(diffs) <= first[0]
    assert first[1] <= max(diffs)


def test_bootstrap_needs_two_blocks() -> None:
    with pytest.raises(ValueError, match="two blocks"):
        stats.bootstrap_median_interval([0.1], seed=1)


# ------------------------------------------------------------------ percentiles


@pytest.mark.parametrize(("p", "needed"), [(90, 64), (95, 130), (99, 662)])
def test_tail_percentiles_are_refused_below_mlperf_counts(p: int, needed: int) -> None:
    samples = [float(i) for i in range(1, needed + 1)]
    refused = stats.percentile(samples[:-1], p)
    assert not refused.sufficient
    assert refused.value is None
    assert stats.INSUFFICIENT in str(refused)
    reported = stats.percentile(samples, p)
    assert reported.sufficient
    assert reported.value == math.ceil(p / 100 * needed)  # nearest rank


def test_median_needs_one_sample_and_p100_is_refused() -> None:
    assert stats.percentile([3.0], 50).value == 3.0
    assert stats.required_samples(80) == 64
    assert stats.required_samples(97) == 662
    with pytest.raises(ValueError, match="above p99"):
        stats.required_samples(99.9)


def test_receipts_say_which_block_summary_derived_them() -> None:
    """A receipt re-derives with the summary it records; one from before the robust summary
    (no ``block_summary``) with the mean, so old receipts stay consistent under verify."""
    from pytest_lossless.speed import runner as speed

    samples = []
    schedule = stats.block_schedule(8, seed=3)
    for block, order in enumerate(schedule.blocks):
        for position, arm in enumerate(order):
            seconds = 1.0 if arm == stats.CONTROL else 0.6
            if block in (1, 3, 5) and arm == stats.CANDIDATE and order.index(arm) == position:
                seconds *= 3  # the first candidate arm of three blocks spikes
            samples.append(
                {
                    "index": len(samples),
                    "block": block,
                    "position": position,
                    "arm": arm,
                    "seconds": seconds * (1 + 0.001 * len(samples)),
                }
            )
    # The block summaries alone, without the mean check (#20, probe 10): three of the twelve
    # candidate arms of the first six blocks 3x slower make its mean time 0.9 of the control's
    # there, so with the check
    # (the default, below) a 30% claim is INCONCLUSIVE whatever the summary.
    rule = {"target": 0.3, "pairs": 8, "design": "ABBA", "seed": 3, "mean_check": False}
    typed = [speed.Sample.from_json(sample) for sample in samples]
    robust = speed.derive(typed, **rule)
    mean = speed.derive(typed, **rule, block_summary="mean-log")
    checked = speed.derive(typed, target=0.3, pairs=8, design="ABBA", seed=3)
    assert checked.verdict == "INCONCLUSIVE"
    assert "ratio of mean times is 0.9 " in checked.reason
    assert speed.contradictions(checked.to_json()) == []
    assert robust.verdict == "PASS"
    assert mean.verdict != "PASS"
    assert robust.to_json()["plan"]["block_summary"] == "robust-log"
    legacy = mean.to_json()
    del legacy["plan"]["block_summary"]
    assert speed.rederive(legacy) == mean.verdict
    assert speed.contradictions(legacy) == []
    assert speed.contradictions(robust.to_json()) == []
