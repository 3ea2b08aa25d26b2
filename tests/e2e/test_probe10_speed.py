"""Probe 10 (#20): the ``speed_gate`` fixture against arms whose durations a test scripts.

Each arm returns a scripted number of seconds (the fixture's contract: an arm returns the
seconds it measured), so the verdict's statistics are probed without a clock's noise.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

JITTERY = """
import itertools


def scripted(*seconds):
    times = itertools.cycle(seconds)
    return lambda: next(times)


def test_jittery_candidate_is_not_thirty_percent_faster(speed_gate):
    # Control: 1.0 s every run. Candidate: 0.3 s then 2.0 s, again and again: its mean is
    # 1.15 s (15% SLOWER), its median run as slow as its slow mode. Each ABBA block holds two
    # candidate arms in a row, so every block sees one fast and one slow candidate arm.
    verdict = speed_gate(
        scripted(1.0), scripted(0.3, 2.0), target=0.30, workload="jitter", act=False
    )
    print("VERDICT", verdict.verdict, verdict.message())
    assert verdict.verdict != "PASS", verdict.message()
"""


def test_a_candidate_fast_on_half_its_runs_is_never_passed(pytester: pytest.Pytester) -> None:
    """Class: the per-block summary favoured the more variable build (the lower of two arms
    more than 25% apart), so a candidate 15% slower on average PASSed a 30% gain claim."""
    pytester.makepyfile(test_jitter=JITTERY)
    result = pytester.runpytest_subprocess(
        "-s", "--lossless-speed-seed=5", "--lossless-receipts=receipts"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*VERDICT INCONCLUSIVE *the ratio of mean times is 1.15 *"])
    path = next((pytester.path / "receipts").rglob("*test_jittery*.json"))
    entry = json.loads(path.read_text())["speed"][0]
    assert entry["verdict"] == "INCONCLUSIVE"
    verify = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", "receipts"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


EDGES = """
import itertools
import math

import pytest


def scripted(*seconds):
    times = itertools.cycle(seconds)
    return lambda: next(times)


@pytest.mark.parametrize("bad", [float("nan"), -0.5, 0.0, float("inf")])
def test_a_hook_time_that_is_no_time(speed_gate, bad):
    verdict = speed_gate(scripted(1.0), scripted(0.5, 0.5, bad), target=0.30, act=False)
    print("EDGE", repr(bad), verdict.verdict, verdict.reason)
    assert verdict.verdict == "INCONCLUSIVE"


def test_a_timer_coarser_than_the_runs(speed_gate):
    # Both builds read 1.0 s on a one-second timer: no gain can be claimed.
    verdict = speed_gate(scripted(1.0), scripted(1.0), target=0.30, act=False)
    print("EDGE coarse", verdict.verdict)
    assert verdict.verdict == "FAIL"


def test_one_hundredfold_outlier_in_the_control_is_not_a_gain(speed_gate):
    verdict = speed_gate(
        scripted(100.0, *[1.0] * 40), scripted(1.0), target=0.30, act=False
    )
    print("EDGE outlier", verdict.verdict)
    assert verdict.verdict != "PASS"


def test_a_before_arm_that_treats_the_builds_apart_is_recorded(speed_gate):
    def clear_for_candidate(arm, index):
        return "cache cleared" if arm == "candidate" else "kept"
    verdict = speed_gate(
        scripted(1.0), scripted(0.5), target=0.30, before_arm=clear_for_candidate, act=False
    )
    seen = {(s.arm, s.before_arm[0].result) for s in verdict.samples}
    assert seen == {("control", "kept"), ("candidate", "cache cleared")}
"""


def test_times_that_are_no_times_and_coarse_timers(pytester: pytest.Pytester) -> None:
    """Class: measurement. NaN, negative, zero or infinite seconds from an arm make the gate
    INCONCLUSIVE, never a verdict; equal times from a coarse timer never PASS; a 100x control
    outlier never makes equal builds PASS; a before_arm hook's per-arm result is recorded."""
    pytester.makepyfile(test_edges=EDGES)
    result = pytester.runpytest_subprocess("-s", "--lossless-speed-seed=9")
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*EDGE nan INCONCLUSIVE *a time must be finite and above 0*"])
