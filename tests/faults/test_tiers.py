"""The deep tier's bounds (#24): the fault harness's covering design and the machines' profiles."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import settings

from pytest_lossless.core import faults
from tests.faults import tiers

POINTS = list(faults.SESSION_POINTS)


@pytest.mark.parametrize("seed", [0, 1, 7, 20261201, 20261202, 2**40 + 3])
def test_the_covering_design_has_each_point_once_and_each_action_at_least_once(seed):
    pairs = tiers.covering(POINTS, faults.ACTIONS, seed)
    assert [point for point, _ in pairs] == POINTS
    assert set(faults.ACTIONS) <= {action for _, action in pairs}
    assert tiers.covering(POINTS, faults.ACTIONS, seed) == pairs  # the seed reproduces it


def test_the_pairing_rotates_with_the_seed_and_covers_every_pair_over_days():
    days = [datetime.date(2026, 12, 1) + datetime.timedelta(days=d) for d in range(120)]
    designs = [tiers.covering(POINTS, faults.ACTIONS, tiers.date_seed(day)) for day in days]
    assert len({tuple(d) for d in designs[:7]}) == 7  # a week: seven different designs
    seen = {pair for design in designs for pair in design}
    assert seen == {(p, a) for p in POINTS for a in faults.ACTIONS}


def test_more_actions_than_points_still_covers_both():
    pairs = tiers.covering(["a", "b"], ["x", "y", "z"], 5)
    assert {p for p, _ in pairs} == {"a", "b"}
    assert sorted(a for _, a in pairs) == ["x", "y", "z"]


def test_the_full_harness_is_the_whole_product_on_request():
    full = tiers.cases(POINTS, faults.ACTIONS, {tiers.FULL_ENV: "1"})
    assert len(full) == len(POINTS) * len(faults.ACTIONS) == len(set(full))
    ci = tiers.cases(POINTS, faults.ACTIONS, {tiers.SEED_ENV: "42"})
    assert ci == tiers.covering(POINTS, faults.ACTIONS, 42)
    assert tiers.cases(POINTS, faults.ACTIONS, {tiers.FULL_ENV: "0", tiers.SEED_ENV: "42"}) == ci


def test_a_seed_that_is_no_integer_is_named():
    with pytest.raises(ValueError, match="PYTEST_LOSSLESS_HARNESS_SEED='monday' is not an"):
        tiers.seed({tiers.SEED_ENV: "monday"})


def test_the_session_fixed_the_seed_and_registered_the_machine_profiles():
    # tests/conftest.py: the seed is set before xdist's workers start; both profiles exist.
    assert tiers.seed() == int(__import__("os").environ[tiers.SEED_ENV])
    assert (
        settings.get_profile(tiers.MACHINES_CI).max_examples
        < settings.get_profile(tiers.MACHINES_FULL).max_examples
    )
    assert settings.get_profile(tiers.MACHINES_CI).deadline is None
    assert tiers.machine_profile({tiers.FULL_ENV: "1"}) == tiers.MACHINES_FULL
    assert tiers.machine_profile({}) == tiers.MACHINES_CI


@pytest.mark.parametrize("seed", [0, 20261202])
def test_the_full_disk_design_fills_at_every_write_point_with_both_actions(seed):
    pairs = tiers.covering(list(faults.WRITES), faults.WRITE_ACTIONS, seed)
    assert [point for point, _ in pairs] == list(faults.WRITES)
    assert {action for _, action in pairs} == set(faults.WRITE_ACTIONS)


@pytest.mark.parametrize("seed", [0, 20261202])
def test_the_commands_design_stops_each_command_at_each_of_its_points(seed):
    steps = [f"{c}:{p}" for c, found in faults.COMMANDS.items() for p in found]
    assert len(steps) == len(set(steps))
    assert "accept:golden-swapped" in steps
    pairs = tiers.covering(steps, faults.ACTIONS, seed)
    assert [step for step, _ in pairs] == steps
    assert {action for _, action in pairs} == set(faults.ACTIONS)
