"""Configuration of the repository's own tests: the deep tier's bounds (#24).

- The hypothesis state machines run under a settings profile registered here: bounded in CI
  (``lossless-machines-ci``), thorough with ``PYTEST_LOSSLESS_FULL_HARNESS=1``
  (``lossless-machines-full``). Other hypothesis tests keep hypothesis's own defaults.
- The fault harness's covering design is seeded once per session, here, so that every
  pytest-xdist worker collects the cases the controller did; the header says how to run them
  again (see ``tests/faults/tiers.py`` and docs/faults.md).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil

import pytest
from hypothesis import settings

import pytest_lossless
from pytest_lossless.core import faults
from tests.faults import tiers

for _name, _examples in tiers.MACHINE_EXAMPLES.items():
    settings.register_profile(_name, max_examples=_examples, deadline=None, print_blob=True)


def pytest_configure(config: pytest.Config) -> None:
    # Fixed before xdist starts its workers: they inherit it, so a run that crosses midnight
    # still collects one set of cases everywhere.
    os.environ.setdefault(tiers.SEED_ENV, str(tiers.seed()))


def pytest_sessionstart(session: pytest.Session) -> None:
    if session.config.pluginmanager.hasplugin("dsession"):
        return  # an xdist controller runs no test
    for module in pkgutil.walk_packages(pytest_lossless.__path__, "pytest_lossless."):
        if module.name.startswith("pytest_lossless.plugin") or module.name.endswith("__main__"):
            continue  # the pytest adapter is loaded by pytest itself; __main__ is a command
        with contextlib.suppress(ImportError):  # an optional dependency missing (torch)
            importlib.import_module(module.name)


def pytest_report_header(config: pytest.Config) -> str:
    points, actions = list(faults.SESSION_POINTS), faults.ACTIONS
    total = len(points) * len(actions)
    # The commands harness (test_commands.py): each command's points, a design of its own.
    steps = [f"{c}:{p}" for c, found in faults.COMMANDS.items() for p in found]
    commands = len(steps) * len(actions)
    if tiers.full():
        return (
            f"deep tier: the full fault harness ({total} cases, {tiers.FULL_ENV} set), the "
            f"commands harness ({commands}); machines: {tiers.MACHINES_FULL}"
        )
    chosen = len(tiers.cases(points, actions))
    seed = tiers.seed()
    return (
        f"deep tier: fault harness covering design, {chosen} of {total} cases (each point once, "
        f"each action at least once), commands harness {len(tiers.cases(steps, actions))} of "
        f"{commands}, seed {seed}: {tiers.SEED_ENV}={seed} runs the same cases, "
        f"{tiers.FULL_ENV}=1 all; machines: {tiers.MACHINES_CI}"
    )
