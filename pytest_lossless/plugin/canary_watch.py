"""The built-in canary in a session: every gate is seen to fail once before its PASS counts.

The session's kinds registry tells :func:`_observe` of every comparison; the first one of each
(kind, gate) runs :class:`~..compare.canary.Canary` there, inside the test that made it, and the
record goes into that test's receipt. A gate that cannot fail raises
:class:`~..errors.CanaryError` in that test and in every later test that uses it. Under xdist
each worker runs its own canaries (once per worker, not once per session); the records ride on
the teardown reports to the controller, whose summary has one line per (kind, gate).
``--lossless-no-canary`` records each (kind, gate) as skipped instead.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import pytest

from .config import on_kinds, settings
from .evidence import receipt_for

if TYPE_CHECKING:
    from ..compare.canary import Canary
    from ..core.artifact import Artifact
    from ..gates import Gate, GateResult
    from ..kinds.registry import KindRegistry

#: ``config.stash[CANARY_KEY]``: the session's canaries and where their records go.
CANARY_KEY = pytest.StashKey["CanaryState"]()
#: The report attribute that carries a test's canary records (to the xdist controller too).
REPORT_ATTRIBUTE = "lossless_canaries"


@dataclass
class CanaryState:
    """The session's :class:`Canary` (made with the session's kinds registry, when a test first
    needs one: a session that compares nothing never loads it), the test running now, and the
    records seen."""

    skip: bool
    canary: Canary | None = None
    item: pytest.Item | None = None
    #: Records of this process's tests, by test id, until their teardown report carries them.
    pending: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Every record the reports carried (the workers' too): the summary's.
    gathered: list[dict[str, Any]] = field(default_factory=list)
    observer: Any = None


_PLUGIN_NAME = "lossless-canary"


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    state = CanaryState(skip=settings(config).no_canary)
    config.stash[CANARY_KEY] = state
    on_kinds(config, partial(_attach, state))
    if not config.pluginmanager.has_plugin(_PLUGIN_NAME):
        config.pluginmanager.register(CanaryPlugin(state), _PLUGIN_NAME)


def _attach(state: CanaryState, registry: KindRegistry) -> None:
    """When the session's kinds registry is made: the canary watches its comparisons."""
    from ..compare.canary import Canary

    state.canary = Canary(registry, skip=state.skip)
    state.observer = partial(_observe, state)
    registry.observers.append(state.observer)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _PLUGIN_NAME)
    state = config.stash.get(CANARY_KEY, None)
    if state is None:
        return
    if state.canary is not None and state.observer in state.canary.registry.observers:
        state.canary.registry.observers.remove(state.observer)
    del config.stash[CANARY_KEY]


def _observe(
    state: CanaryState, gate: Gate, expected: Artifact, obtained: Artifact, result: GateResult
) -> None:
    """After each comparison inside a test: its (kind, gate)'s canary, run once."""
    item = state.item
    if item is None or state.canary is None:
        return  # not a test's comparison (a plugin's own, at collection): nothing to record
    record = state.canary.observe(gate, expected, obtained)
    if record is not None:
        record.test_id = item.nodeid
        data = record.to_dict()
        receipt_for(item).add_canary(data)
        state.pending.setdefault(item.nodeid, []).append(data)
    error = state.canary.error_for(gate, expected)
    if error is not None:
        raise error


class CanaryPlugin:
    """Knows which test is running (its comparisons are its canaries') and carries each test's
    records on its teardown report."""

    def __init__(self, state: CanaryState) -> None:
        self.state = state

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        self.state.item = item
        try:
            return (yield)
        finally:
            self.state.item = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """First of all (before xdist sends it on): the teardown report carries the test's
        records; then, wherever the report arrives, its records are gathered for the summary."""
        if report.when != "teardown":
            return
        pending = self.state.pending.pop(report.nodeid, None)
        if pending:
            setattr(report, REPORT_ATTRIBUTE, pending)
        records = getattr(report, REPORT_ATTRIBUTE, None)
        if isinstance(records, list):
            self.state.gathered.extend(r for r in records if isinstance(r, dict))


def summary_lines(config: pytest.Config) -> list[str]:
    """The session summary's canary lines (what ran, what was skipped, what cannot fail)."""
    state = config.stash.get(CANARY_KEY, None)
    if state is None or (not state.gathered and state.canary is None):
        return []  # no comparison in this session (nor on a worker): nothing was loaded
    from ..compare.canary import summary_lines as lines

    return lines(state.gathered)
