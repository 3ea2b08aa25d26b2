"""Unit tests of the speed gate's runner with a fake clock: arms advance it by chosen durations."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_lossless.core.clock import FakeClock
from pytest_lossless.errors import ConfigError
from pytest_lossless.speed import stats
from pytest_lossless.speed.runner import (
    SpeedVerdict,
    contradictions,
    measured_seconds,
    rederive,
    run_speed_gate,
)


def timed_arm(clock: FakeClock, durations: Iterator[float]) -> Callable[[], float]:
    """An arm that takes the next duration on the fake clock and reports what the clock saw."""

    def arm() -> float:
        start = clock.monotonic()
        clock.advance(next(durations))
        return clock.monotonic() - start

    return arm


def lognormal(base: float, sigma: float, seed: int) -> Iterator[float]:
    rng = random.Random(seed)
    while True:
        yield base * math.exp(rng.gauss(0.0, sigma))


def gate(ratio: float, *, sigma: float = 0.05, seed: int = 1234, **kwargs: Any) -> SpeedVerdict:
    clock = FakeClock()
    return run_speed_gate(
        timed_arm(clock, lognormal(2.0, sigma, seed + 1)),
        timed_arm(clock, lognormal(2.0 * ratio, sigma, seed + 2)),
        target=kwargs.pop("target", 0.30),
        seed=seed,
        clock=clock,
        **kwargs,
    )


# ------------------------------------------------------------------ verdicts


def test_half_time_candidate_passes_and_stops_at_the_first_look() -> None:
    verdict = gate(0.5, workload="5s")
    assert verdict.verdict == "PASS"
    assert verdict.blocks == 6
    assert len(verdict.samples) == 24  # stopped early: 6 blocks of A B B A
    assert verdict.ratio == pytest.approx(0.5, rel=0.05)
    assert verdict.ci is not None
    assert verdict.ci[1] <= 0.70
    assert verdict.workload == "5s"


def test_equal_times_fail_a_thirty_percent_claim() -> None:
    verdict = gate(1.0)
    assert verdict.verdict == "FAIL"
    assert verdict.ci is not None
    assert verdict.ci[0] > 0.70


@given(st.integers(min_value=0, max_value=2**31 - 1), st.floats(min_value=0.0, max_value=0.2))
@settings(max_examples=40, deadline=None)
def test_a_a_is_never_reported_as_a_gain(seed: int, sigma: float) -> None:
    assert gate(1.0, sigma=sigma, seed=seed).verdict != "PASS"


def test_ratio_exactly_at_the_target_rarely_passes() -> None:
    """The planned false-PASS rate at the boundary is 3.9%: 100 seeded sessions stay near it."""
    verdicts = [gate(0.70, sigma=0.05, seed=seed).verdict for seed in range(100)]
    assert verdicts.count("PASS") <= 10
    assert verdicts.count("INCONCLUSIVE") >= 80


def test_an_arm_that_raises_makes_the_verdict_inconclusive_and_stops() -> None:
    clock = FakeClock()
    calls = {"candidate": 0}

    def candidate() -> float:
        calls["candidate"] += 1
        if calls["candidate"] == 3:
            raise RuntimeError("server exited with signal 9")
        clock.advance(1.0)
        return 1.0

    verdict = run_speed_gate(
        timed_arm(clock, lognormal(2.0, 0.0, 0)), candidate, target=0.3, seed=5, clock=clock
    )
    assert verdict.verdict == "INCONCLUSIVE"
    assert verdict.samples[-1].error == "RuntimeError: server exited with signal 9"
    assert verdict.samples[-1].seconds is None
    assert calls["candidate"] == 3  # nothing ran after the error
    assert "server exited with signal 9" in verdict.message()
    assert verdict.errors


def test_base_exceptions_are_not_swallowed() -> None:
    def interrupted() -> float:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_speed_gate(interrupted, interrupted, target=0.3, seed=1, clock=FakeClock())


def test_too_few_pairs_are_refused_before_any_arm_runs() -> None:
    ran: list[str] = []

    def control() -> float:
        ran.append("control")
        return 1.0

    with pytest.raises(ConfigError, match="needs at least 5 pairs"):
        run_speed_gate(control, lambda: 1.0, target=0.3, pairs=4)
    assert ran == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target": 1.0}, "target"),
        ({"target": 0.3, "design": "BAAB"}, "design"),
        ({"target": 0.3, "pairs": 0}, "pairs"),
    ],
)
def test_bad_arguments_name_themselves(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        run_speed_gate(lambda: 1.0, lambda: 1.0, **kwargs)


def test_min_blocks_smaller_lets_five_pairs_decide() -> None:
    verdict = gate(0.5, pairs=5)
    assert verdict.verdict == "PASS"
    assert verdict.blocks == 5


def test_ab_design_runs_one_pair_per_block() -> None:
    verdict = gate(0.5, design="AB")
    assert verdict.verdict == "PASS"
    assert len(verdict.samples) == 2 * verdict.blocks
    arms = [s.arm for s in verdict.samples]
    # One arm of each build per block; each block's opener is drawn from the seed (#20), so
    # two blocks may meet on the same build.
    assert all(a != b for a, b in zip(arms[::2], arms[1::2], strict=True))
    schedule = stats.block_schedule(verdict.pairs, design="AB", seed=verdict.seed)
    assert tuple(arms) == tuple(a for block in schedule.blocks for a in block)[: len(arms)]


# ------------------------------------------------------------------ samples and schedule


def test_samples_follow_the_seeded_abba_schedule_in_order() -> None:
    verdict = gate(1.0)
    schedule = stats.block_schedule(verdict.pairs, design="ABBA", seed=verdict.seed)
    assert verdict.openers == schedule.openers
    for index, sample in enumerate(verdict.samples):
        assert sample.index == index
        assert sample.block == index // 4
        assert sample.position == index % 4
        assert sample.arm == schedule.blocks[sample.block][sample.position]
        assert sample.seconds > 0
        assert sample.arm_seconds == pytest.approx(sample.seconds)


def test_a_random_seed_is_drawn_and_recorded() -> None:
    clock = FakeClock()
    verdict = run_speed_gate(
        timed_arm(clock, lognormal(1.0, 0.05, 1)),
        timed_arm(clock, lognormal(0.5, 0.05, 2)),
        target=0.3,
        clock=clock,
    )
    assert isinstance(verdict.seed, int)
    assert f"seed {verdict.seed}" in verdict.message()
    assert rederive(verdict.to_json()) == verdict.verdict


@dataclass
class FakeRunResult:
    """What the launcher's RunResult offers: measured, startup and warmup times apart."""

    measured_seconds: float
    startup_seconds: float
    warmup_seconds: list[float]


def test_run_results_keep_startup_and_warmup_apart() -> None:
    clock = FakeClock()

    def arm(base: float) -> Callable[[], FakeRunResult]:
        def run() -> FakeRunResult:
            clock.advance(5.0 + 1.0 + base)
            return FakeRunResult(base, 5.0, [1.0])

        return run

    verdict = run_speed_gate(arm(2.0), arm(1.0), target=0.3, seed=3, clock=clock)
    assert verdict.verdict == "PASS"
    sample = verdict.samples[0]
    assert sample.startup_seconds == 5.0
    assert sample.warmup_seconds == (1.0,)
    assert sample.arm_seconds == pytest.approx(sample.seconds + 6.0)


def test_mappings_with_measured_seconds_are_accepted() -> None:
    assert measured_seconds({"measured_seconds": 0.25, "startup_seconds": 3}) == 0.25


@pytest.mark.parametrize("returned", [None, "1.0", True, 0.0, -2.0, math.nan, {"x": 1}])
def test_an_arm_returning_no_time_is_an_errored_arm(returned: object) -> None:
    verdict = run_speed_gate(lambda: returned, lambda: 1.0, target=0.3, seed=1, clock=FakeClock())
    assert verdict.verdict == "INCONCLUSIVE"
    assert "return the measured seconds" in verdict.samples[0].error or "finite" in (
        verdict.samples[0].error
    )


# ------------------------------------------------------------------ records and re-derivation


def test_message_reads_as_one_paragraph() -> None:
    text = gate(0.5, workload="15s").message()
    assert text.startswith("workload 15s: candidate/control = 0.")
    assert "(95% one-sided bounds), target <= 0.70: PASS (6 of 8 pairs, ABBA, seed 1234)" in text
    assert "\n" not in text


def test_round_trip_through_json() -> None:
    verdict = gate(0.6)
    data = json.loads(json.dumps(verdict.to_json()))
    again = SpeedVerdict.from_json(data)
    assert again.to_json() == verdict.to_json()
    assert rederive(data) == verdict.verdict
    assert contradictions(data) == []


@pytest.mark.parametrize("ratio", [0.5, 0.7, 1.0])
def test_rederive_agrees_with_the_runner(ratio: float) -> None:
    verdict = gate(ratio, seed=int(ratio * 100))
    assert rederive(verdict.to_json()) == verdict.verdict


def test_a_doctored_verdict_is_a_contradiction() -> None:
    data = gate(1.0).to_json()
    data["verdict"] = "PASS"
    found = contradictions(data)
    assert any("recorded verdict PASS" in line for line in found)


def test_doctored_samples_change_the_rederived_verdict() -> None:
    data = gate(0.5).to_json()
    for sample in data["samples"]:
        if sample["arm"] == "candidate":
            sample["seconds"] *= 3
    assert rederive(data) == "FAIL"
    assert contradictions(data)


def test_swapped_arms_contradict_the_seeded_schedule() -> None:
    data = gate(0.5).to_json()
    first = data["samples"][0]
    first["arm"] = "candidate" if first["arm"] == "control" else "control"
    assert any("seeded schedule" in line for line in contradictions(data))


def test_bootstrap_cross_check_is_recorded_once_there_are_enough_blocks() -> None:
    verdict = gate(0.5)
    assert verdict.bootstrap is not None
    assert verdict.bootstrap.blocks == 6
    assert verdict.bootstrap.agrees is True
    assert verdict.bootstrap.ci[1] <= 0.70


def test_a_server_record_counts_its_measured_requests() -> None:
    record = {"startup_seconds": 4.0, "warmup_seconds": [0.5], "measured_seconds": [0.25]}
    verdict = run_speed_gate(
        lambda: dict(record, measured_seconds=[1.0]),
        lambda: record,
        target=0.3,
        seed=2,
        clock=FakeClock(),
    )
    assert verdict.verdict == "PASS"
    candidate = next(s for s in verdict.samples if s.arm == "candidate")
    assert candidate.seconds == 0.25
    assert candidate.measured_requests == (0.25,)
    assert candidate.startup_seconds == 4.0
    assert candidate.warmup_seconds == (0.5,)


@pytest.mark.parametrize(
    ("key", "value"),
    [("ci", [0.1, 0.2]), ("blocks", 3), ("looks", []), ("message", "PASS, trust me")],
)
def test_an_edited_derived_field_is_a_contradiction(key: str, value: Any) -> None:
    recorded = json.loads(json.dumps(gate(0.5).to_json()))
    assert contradictions(recorded) == []
    recorded[key] = value
    assert any(f"recorded {key}" in c for c in contradictions(recorded))


def test_percentiles_are_refused_without_the_samples_to_support_them() -> None:
    table = gate(0.5).to_json()["percentiles"]
    assert isinstance(table["control"]["p50"], float)
    for p in ("p90", "p95", "p99"):
        assert "insufficient samples" in str(table["candidate"][p])


# ------------------------------------------------------------------ before_arm


def test_before_arm_runs_before_each_arm_and_is_recorded_in_its_sample() -> None:
    clock = FakeClock()
    calls: list[tuple[str, int, float]] = []

    def note(arm: str, index: int) -> dict[str, Any]:
        calls.append((arm, index, clock.monotonic()))
        return {"arm": arm, "index": index}

    verdict = gate(0.5, before_arm=note)
    assert [(a, i) for a, i, _ in calls] == [(s.arm, s.index) for s in verdict.samples]
    for sample in verdict.samples:
        assert sample.before_arm is not None
        assert [h.to_json() for h in sample.before_arm] == [
            {"name": note.__qualname__, "result": {"arm": sample.arm, "index": sample.index}}
        ]
    assert contradictions(json.loads(json.dumps(verdict.to_json()))) == []
    assert gate(0.5).samples[0].before_arm is None  # nothing recorded without hooks


def test_before_arm_takes_a_list_and_runs_outside_the_arms_time() -> None:
    from pytest_lossless.speed.before_arm import DropPageCache

    clock = FakeClock()
    durations = itertools.repeat(1.0)

    def slow_hook(arm: str, index: int) -> None:
        clock.advance(5.0)  # a hook's own time is not the arm's

    verdict = run_speed_gate(
        timed_arm(clock, durations),
        timed_arm(clock, itertools.repeat(0.5)),
        target=0.3,
        seed=3,
        clock=clock,
        before_arm=[slow_hook, DropPageCache(path="/nonexistent/drop_caches")],
    )
    assert verdict.verdict == "PASS"
    first = verdict.samples[0]
    assert first.before_arm is not None
    assert [r.name for r in first.before_arm] == [slow_hook.__qualname__, "drop_page_cache"]
    assert first.before_arm[0].result == "done"
    assert first.before_arm[1].result.startswith("not permitted: ")
    assert first.arm_seconds == pytest.approx(first.seconds)


def test_a_before_arm_that_raises_keeps_its_arm_from_running_and_is_inconclusive() -> None:
    ran: list[str] = []

    def refuse(arm: str, index: int) -> None:
        if index == 2:
            raise RuntimeError("GPU 0 still busy")

    def arm() -> float:
        ran.append("arm")
        return 1.0

    verdict = run_speed_gate(arm, arm, target=0.3, seed=1, clock=FakeClock(), before_arm=refuse)
    assert verdict.verdict == "INCONCLUSIVE"
    assert len(ran) == 2
    assert len(verdict.samples) == 3
    assert verdict.samples[-1].seconds is None
    assert "before_arm test_a_before_arm_that_raises" in verdict.samples[-1].error
    assert "raised RuntimeError: GPU 0 still busy" in verdict.reason


def test_before_arm_must_be_callable() -> None:
    with pytest.raises(ConfigError, match="before_arm"):
        gate(0.5, before_arm=["drop caches"])


def test_drop_page_cache_records_not_permitted_instead_of_failing(tmp_path: Any) -> None:
    from pytest_lossless import drop_page_cache
    from pytest_lossless.speed.before_arm import DropPageCache

    assert drop_page_cache.path == "/proc/sys/vm/drop_caches"
    assert drop_page_cache.name == "drop_page_cache"
    missing = DropPageCache(path=str(tmp_path / "no-such-dir" / "drop_caches"))
    assert missing("control", 0) == (
        f"not permitted: No such file or directory ({tmp_path / 'no-such-dir' / 'drop_caches'})"
    )
    assert DropPageCache(path=str(tmp_path))("control", 0).startswith("not permitted: Is a dir")
    target = tmp_path / "drop_caches"
    target.write_text("")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert DropPageCache(path=str(link))("control", 0).startswith("not permitted: ")
    assert DropPageCache(path=str(target))("control", 0) == "done"
    assert target.read_text() == "3"


@dataclass
class _Backend:
    """A backend that lists what it is told, as nvidia-smi would."""

    listed: list[list[dict[str, Any]]]
    name: str = "cuda"
    observes_usage: bool = True

    def foreign_processes(self, devices: Any) -> list[dict[str, Any]]:
        return self.listed.pop(0) if len(self.listed) > 1 else self.listed[0]


@dataclass
class _Allocation:
    devices: tuple[Any, ...]


def _allocation() -> _Allocation:
    from pytest_lossless.devices.base import Device

    return _Allocation((Device("0", uuid="GPU-1", backend="cuda"),))


def test_devices_idle_records_idle_devices_and_counts_this_tests_own_processes() -> None:
    import os

    from pytest_lossless import devices_idle

    own = {"device": "0", "pid": os.getpid(), "process": "python"}
    check = devices_idle(_allocation(), backend=_Backend([[own]]))
    assert check("control", 0).to_json() == {
        "observed": True,
        "idle": True,
        "devices": ["0"],
        "own_processes": 1,
    }


def test_devices_idle_names_a_foreign_process_and_makes_the_verdict_inconclusive() -> None:
    from pytest_lossless import devices_idle

    foreign = {"device": "0", "pid": 1, "process": "other-job"}
    clock = FakeClock()
    check = devices_idle(_allocation(), backend=_Backend([[foreign]]), wait=1.0)
    check = dataclasses.replace(check, clock=clock)
    verdict = run_speed_gate(
        lambda: 1.0, lambda: 1.0, target=0.3, seed=1, clock=FakeClock(), before_arm=check
    )
    assert verdict.verdict == "INCONCLUSIVE"
    assert "before_arm devices_idle raised AllocationError" in verdict.samples[0].error
    assert "pid 1 (other-job) on device 0" in verdict.samples[0].error
    assert sum(clock.sleeps) >= 1.0  # it waited for the foreign process first


def test_devices_idle_waits_for_a_process_that_goes() -> None:
    from pytest_lossless import devices_idle

    foreign = {"device": "0", "pid": 1, "process": "other-job"}
    check = dataclasses.replace(
        devices_idle(_allocation(), backend=_Backend([[foreign], []]), wait=5.0),
        clock=FakeClock(),
    )
    assert check("candidate", 1).idle is True


def test_devices_idle_says_when_it_cannot_observe() -> None:
    from pytest_lossless.speed.before_arm import bind_backend, devices_idle

    blind = _Backend([[]], name="cpu", observes_usage=False)
    assert devices_idle(_allocation(), backend=blind)("control", 0).to_json() == {
        "observed": False,
        "devices": ["0"],
        "note": "cpu devices report no processes",
    }
    unbound = devices_idle(_allocation())
    assert unbound("control", 0).observed is False
    (bound,) = bind_backend([unbound], blind)
    assert bound("control", 0).note == "cpu devices report no processes"


def _committed_speed_entries() -> list[dict[str, Any]]:
    data = Path(__file__).resolve().parent.parent / "data" / "gpu" / "ref2va"
    found = []
    for path in sorted(data.glob("*/*.json")):
        receipt = json.loads(path.read_text())
        if isinstance(receipt, dict):
            found += receipt.get("speed") or []
    return found


def test_a_speed_verdict_written_before_the_types_round_trips_exactly() -> None:
    """#19: the receipt's ``speed`` entries of a committed GPU session (written before samples,
    looks, the plan and the bootstrap were typed) read back and write out unchanged."""
    entries = _committed_speed_entries()
    assert entries, "the committed receipts hold no speed gate"
    for entry in entries:
        # What the plugin adds beside the verdict (the frozen plan, expect=, trace stages).
        own = {k: v for k, v in entry.items() if k not in ("gate_plan", "expect_verdict", "stages")}
        assert SpeedVerdict.from_json(own).to_json() == own
        assert contradictions(entry) == []


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("block", "3", "Sample.block: expected int, got str '3'"),
        ("seconds", "1.5", "Sample.seconds: expected float or null, got str '1.5'"),
        ("arm", None, "Sample.arm: expected str, got NoneType None"),
    ],
)
def test_a_sample_of_the_wrong_type_cannot_be_rederived_and_names_the_field(
    key: str, value: object, named: str
) -> None:
    data = json.loads(json.dumps(gate(0.5).to_json()))
    data["samples"][2][key] = value
    assert any(named in line for line in contradictions(data)), contradictions(data)


def test_a_sample_without_its_block_names_the_missing_key() -> None:
    data = json.loads(json.dumps(gate(0.5).to_json()))
    del data["samples"][0]["block"]
    found = contradictions(data)
    assert any("Sample.block: the key 'block' is missing" in line for line in found), found
