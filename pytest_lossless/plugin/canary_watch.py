"""The built-in canary in a session: every gate is seen to fail once before its PASS counts.

The session's kinds registry runs the canary itself after each comparison
(:meth:`~..kinds.registry.KindRegistry.compare`), inside the test that made it: a gate that
cannot fail raises :class:`~..errors.CanaryError` there and in every later test that uses it.
This module only files the records: before each report of a test, the records made since are
put in that test's receipt and carried on its teardown report (to the xdist controller too,
whose summary has one line per (kind, gate)). Under xdist each worker runs its own canaries
(once per worker, not once per session). ``--lossless-no-canary`` records each (kind, gate) as
skipped instead.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from .config import KINDS_KEY
from .evidence import receipt_for

#: ``config.stash[CANARY_KEY]``: the records seen in this session.
CANARY_KEY = pytest.StashKey["CanaryState"]()
#: The report attribute that carries a test's canary records (to the xdist controller too).
REPORT_ATTRIBUTE = "lossless_canaries"


@dataclass
class CanaryState:
    """The records of this process's tests until their teardown report carries them, and every
    record the reports carried (the workers' too): the summary's."""

    pending: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    gathered: list[dict[str, Any]] = field(default_factory=list)


_PLUGIN_NAME = "lossless-canary"


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    state = CanaryState()
    config.stash[CANARY_KEY] = state
    if not config.pluginmanager.has_plugin(_PLUGIN_NAME):
        config.pluginmanager.register(CanaryPlugin(state), _PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _PLUGIN_NAME)
    if CANARY_KEY in config.stash:
        del config.stash[CANARY_KEY]


class CanaryPlugin:
    """Files the canary records of each test in its receipt and on its teardown report."""

    def __init__(self, state: CanaryState) -> None:
        self.state = state

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Before each phase's report: the records its comparisons made, into the receipt."""
        registry = item.config.stash.get(KINDS_KEY, None)
        canary = registry.canary if registry is not None else None
        for record in canary.take(item.nodeid) if canary is not None else []:
            data = record.to_json()
            receipt_for(item).add_canary(data)
            self.state.pending.setdefault(item.nodeid, []).append(data)
        return (yield)

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
    if state is None or not state.gathered:
        return []  # no comparison in this session (nor on a worker): nothing was loaded
    from ..kinds.canary import summary_lines as lines

    return lines(state.gathered)
