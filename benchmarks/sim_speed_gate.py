"""Monte-Carlo simulation of the speed gate itself, beside pytest-benchmark-style thresholding.

Each trial is one gate session: 8 ABBA blocks (32 arms) of a control with true time 1 and a
candidate with true time ``ratio``, each arm multiplied by 5% lognormal noise, optionally with a
slow linear drift across the session or occasional 3x spikes. The gate's verdict comes from the
real decision code (``stats.decide`` with the plan ``speed.run_speed_gate`` uses, early stopping
included); a replay of a subset through ``run_speed_gate`` itself with a fake clock checks that
the fast path gives identical verdicts. The threshold rule sees the same samples (all 32 arms):
it flags a regression when the candidate mean is more than 5% above the control mean, and
"claims" a gain when the candidate mean is at most ``1 - target`` times the control mean. A
second threshold column runs the control session first and the candidate session after (how a
saved baseline is compared), with the same noise.

Run: ``python benchmarks/sim_speed_gate.py`` (seeded; about 30 s on one core).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pytest_lossless.core.clock import FakeClock
from pytest_lossless.speed import runner as speed
from pytest_lossless.speed import stats

PAIRS = 8
NOISE = 0.05  # sd of log time per arm: 5% lognormal noise
DRIFT = math.log(1.30)  # drift scenario: +30% slower by the end of the session, linear in log time
SPIKE_P = 0.03  # outlier scenario: each arm 3x slower with this probability
SPIKE = math.log(3.0)
TARGET = 0.30
EXTRA_PAIRS = 12  # the outlier scenario again with a longer session: one more tolerated block
NO_SLOWER = -0.05  # "candidate at most 5% slower": the gate's counterpart of the 5% threshold


@dataclass(frozen=True)
class Scenario:
    name: str
    drift: float
    spike_p: float
    noise: float = NOISE


SCENARIOS = (
    Scenario("clean", 0.0, 0.0),
    Scenario("drift", DRIFT, 0.0),
    Scenario("outliers", 0.0, SPIKE_P),
    # The worst of all: three times the noise, the drift and the spikes together.
    Scenario("noisy", DRIFT, SPIKE_P, 3 * NOISE),
)


def session_noise(
    rng: np.random.Generator, trials: int, scenario: Scenario, pairs: int = PAIRS
) -> np.ndarray:
    """Log-time noise per session position, shape (trials, 4 * pairs): noise + drift + spikes."""
    arms = 4 * pairs
    noise = rng.normal(0.0, scenario.noise, size=(trials, arms))
    noise += scenario.drift * np.arange(arms) / (arms - 1)
    if scenario.spike_p:
        noise += SPIKE * (rng.random((trials, arms)) < scenario.spike_p)
    return noise


def abba_is_candidate(openers_candidate: np.ndarray) -> np.ndarray:
    """(trials, 4 * pairs) booleans: True where the arm at that position is the candidate."""
    pattern = np.array([False, True, True, False])  # control-opened block: A B B A
    blocks = np.where(openers_candidate[:, :, None], ~pattern, pattern)
    return blocks.reshape(len(openers_candidate), -1)


def block_diffs(
    log_times: np.ndarray, is_candidate: np.ndarray, summary: str = stats.DEFAULT_BLOCK_SUMMARY
) -> np.ndarray:
    """(trials, pairs) per-block difference, each build summarised as ``stats.block_difference``
    does: the mean log time, or under ``robust-log`` the lowest when its two arms are more than
    ``stats.SPIKE_GAP`` apart."""
    lt = log_times.reshape(len(log_times), -1, 4)
    cand = is_candidate.reshape(len(log_times), -1, 4)
    # Each block holds two arms of each build: sort them to the front per build.
    both = np.sort(np.where(cand, lt, np.inf), -1)[..., :2]
    ctrl = np.sort(np.where(~cand, lt, np.inf), -1)[..., :2]

    def per_build(pair: np.ndarray) -> np.ndarray:
        mean = pair.mean(-1)
        if summary == "mean-log":
            return np.asarray(mean)
        return np.asarray(
            np.where(pair[..., 1] - pair[..., 0] > stats.SPIKE_GAP, pair[..., 0], mean)
        )

    return np.asarray(per_build(both) - per_build(ctrl))


def gate(diffs: np.ndarray, target: float, plan: stats.Plan) -> tuple[np.ndarray, np.ndarray]:
    """Verdicts and blocks used, from the gate's real decision function."""
    theta = stats.boundary(target)
    verdicts = np.empty(len(diffs), dtype=object)
    used = np.empty(len(diffs), dtype=np.int64)
    for i, row in enumerate(diffs.tolist()):
        decision = stats.decide(row, theta, plan)
        verdicts[i] = decision.verdict
        used[i] = decision.blocks
    return verdicts, used


def threshold_ratio(log_times: np.ndarray, is_candidate: np.ndarray) -> np.ndarray:
    """Candidate mean / control mean on the same samples (pytest-benchmark compares means)."""
    t = np.exp(log_times)
    cand = np.where(is_candidate, t, 0).sum(1) / is_candidate.sum(1)
    ctrl = np.where(~is_candidate, t, 0).sum(1) / (~is_candidate).sum(1)
    return np.asarray(cand / ctrl)


def sequential_ratio(noise: np.ndarray, ratio: float) -> np.ndarray:
    """The same noise, control session first (first half), candidate after (second half)."""
    t = np.exp(noise)
    half = noise.shape[1] // 2
    return np.asarray(ratio * t[:, half:].mean(1) / t[:, :half].mean(1))


def run_cell(
    rng: np.random.Generator, trials: int, scenario: Scenario, ratio: float, plan: stats.Plan
) -> dict[str, float]:
    pairs = plan.max_blocks
    noise = session_noise(rng, trials, scenario, pairs)
    is_cand = abba_is_candidate(rng.random((trials, pairs)) < 0.5)
    log_times = noise + np.where(is_cand, math.log(ratio), 0.0)
    diffs = block_diffs(log_times, is_cand, plan.summary)
    verdicts, used = gate(diffs, TARGET, plan)
    row = {
        "pass": float(np.mean(verdicts == "PASS")),
        "fail": float(np.mean(verdicts == "FAIL")),
        "inconclusive": float(np.mean(verdicts == "INCONCLUSIVE")),
        "pairs": float(used.mean()),
        "thr_claim": float(np.mean(threshold_ratio(log_times, is_cand) <= 1 - TARGET)),
        "thr_flag": float(np.mean(threshold_ratio(log_times, is_cand) > 1.05)),
        "seq_flag": float(np.mean(sequential_ratio(noise, ratio) > 1.05)),
    }
    if ratio == 1.0:
        ns_verdicts, ns_used = gate(diffs, NO_SLOWER, plan)
        row["ns_fail"] = float(np.mean(ns_verdicts == "FAIL"))
        row["ns_pass"] = float(np.mean(ns_verdicts == "PASS"))
        row["ns_pairs"] = float(ns_used.mean())
    return row


def _replay_arms(
    log_times: np.ndarray, is_candidate: np.ndarray, clock: FakeClock
) -> tuple[Callable[[], float], Callable[[], float]]:
    """Control and candidate arms that play back the session's times in schedule order."""
    position = [0]

    def make(expect_candidate: bool) -> Callable[[], float]:
        def run() -> float:
            j = position[0]
            position[0] += 1
            if bool(is_candidate[j]) != expect_candidate:
                raise AssertionError(f"position {j}: the runner's schedule disagrees")
            seconds = float(math.exp(log_times[j]))
            clock.advance(seconds)
            return seconds

        return run

    return make(False), make(True)


def replay_check(rng: np.random.Generator, trials: int, plan: stats.Plan) -> int:
    """Run ``trials`` sessions through the real ``run_speed_gate`` with a fake clock and the same
    noise, and count verdicts/blocks that differ from the fast path (must be 0)."""
    mismatches = 0
    scenario = SCENARIOS[2]  # outliers
    for trial in range(trials):
        ratio = (0.60, 0.70, 1.0)[trial % 3]
        seed = int(rng.integers(0, 2**31))
        noise = session_noise(rng, 1, scenario)[0]
        schedule = stats.block_schedule(PAIRS, design="ABBA", seed=seed)
        openers = np.array([[o == stats.CANDIDATE for o in schedule.openers]])
        is_cand = abba_is_candidate(openers)
        log_times = noise + np.where(is_cand[0], math.log(ratio), 0.0)
        fast, fast_used = gate(block_diffs(log_times[None, :], is_cand, plan.summary), TARGET, plan)
        clock = FakeClock()
        control, candidate = _replay_arms(log_times, is_cand[0], clock)
        real = speed.run_speed_gate(
            control, candidate, target=TARGET, pairs=PAIRS, seed=seed, clock=clock
        )
        if real.verdict != fast[0] or real.blocks != fast_used[0]:
            mismatches += 1
    return mismatches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000, help="sessions per cell")
    parser.add_argument("--replay", type=int, default=300, help="sessions replayed for real")
    parser.add_argument("--seed", type=int, default=20240607)
    parser.add_argument(
        "--block-summary",
        choices=stats.BLOCK_SUMMARIES,
        default=stats.DEFAULT_BLOCK_SUMMARY,
        help="how a block's arms become its difference (the gate's default: robust-log)",
    )
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    plan = stats.plan_looks(PAIRS, summary=args.block_summary)
    started = time.perf_counter()
    looks = ", ".join(f"{lk.blocks} blocks (rank {lk.k})" for lk in plan.looks)
    print(
        f"plan: looks at {looks}; exact P(false PASS) at the target = {plan.error:.4f} "
        f"(budget {1 - plan.confidence:.2f}); {args.trials} sessions per cell, seed {args.seed}"
    )
    print(
        f"noise {NOISE:.0%} lognormal per arm; drift +{math.exp(DRIFT) - 1:.0%} over the session; "
        f"outliers: 3x spike with p={SPIKE_P} per arm; target {TARGET} (ratio <= {1 - TARGET})"
    )
    print()
    print("### A/A (true ratio 1.00): false alarms")
    print()
    print(
        "| scenario | gate P(PASS), target 0.30 | gate P(FAIL), claim <=5% slower "
        "| gate pairs used | threshold P(flag >5% worse), same samples "
        "| threshold P(flag), control then candidate |"
    )
    print("|---|---|---|---|---|---|")
    for scenario in SCENARIOS:
        row = run_cell(rng, args.trials, scenario, 1.0, plan)
        print(
            f"| {scenario.name} | {row['pass']:.4f} | {row['ns_fail']:.4f} | {row['pairs']:.2f} "
            f"| {row['thr_flag']:.4f} | {row['seq_flag']:.4f} |"
        )
    print()
    print("### Candidate faster: P(PASS) for target 0.30 (ratio <= 0.70)")
    print()
    print(
        "| scenario | pairs (max) | true ratio | gate P(PASS) | gate P(FAIL) "
        "| gate P(INCONCLUSIVE) | mean pairs used | threshold P(claim: mean ratio <= 0.70) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for scenario in SCENARIOS:
        for ratio in (0.50, 0.55, 0.60, 0.65, 0.70):
            row = run_cell(rng, args.trials, scenario, ratio, plan)
            print(
                f"| {scenario.name} | {PAIRS} | {ratio:.2f} | {row['pass']:.4f} "
                f"| {row['fail']:.4f} | {row['inconclusive']:.4f} | {row['pairs']:.2f} "
                f"| {row['thr_claim']:.4f} |"
            )
    wide = stats.plan_looks(EXTRA_PAIRS, summary=args.block_summary)
    for ratio in (0.60, 0.70):
        row = run_cell(rng, args.trials, SCENARIOS[2], ratio, wide)
        print(
            f"| {SCENARIOS[2].name} | {EXTRA_PAIRS} | {ratio:.2f} | {row['pass']:.4f} "
            f"| {row['fail']:.4f} | {row['inconclusive']:.4f} | {row['pairs']:.2f} "
            f"| {row['thr_claim']:.4f} |"
        )
    print()
    print(f"block summary: {plan.summary}")
    mismatches = 0
    if plan.summary == stats.DEFAULT_BLOCK_SUMMARY:  # run_speed_gate uses the default
        mismatches = replay_check(rng, args.replay, plan)
        print(
            f"replay through run_speed_gate (fake clock, outlier scenario, ratios "
            f"0.60/0.70/1.00): {mismatches} of {args.replay} sessions differ from the fast path"
        )
    print(f"elapsed {time.perf_counter() - started:.1f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
