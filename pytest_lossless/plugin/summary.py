"""The session's summary: verdict rows and golden updates gathered from every report.

Under xdist the workers attach their rows to their reports and the controller gathers them
here, so the terminal table, the INCONCLUSIVE section and SUMMARY.md cover the whole session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from .. import report
from ..core.verdict import Verdict
from ..errors import LosslessError
from .config import settings
from .receipts import source_revision

_PLUGIN_NAME = "lossless-summary"


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if not config.pluginmanager.has_plugin(_PLUGIN_NAME):
        config.pluginmanager.register(SummaryPlugin(config), _PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _PLUGIN_NAME)


def _row_from(data: Mapping[str, Any]) -> report.Row:
    # Module level: inside pytest_runtest_logreport the name ``report`` is the TestReport.
    return report.Row.from_dict(data)


class SummaryPlugin:
    """Gathers verdict rows and golden updates from every report (workers' too, under xdist)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: list[report.Row] = []
        self.events: list[dict[str, str]] = []
        self.inconclusive: list[tuple[str, str]] = []
        self.receipts = 0
        #: Why lossless gates were skipped, with how many: a skipped gate compared nothing.
        self.skipped: dict[str, int] = {}

    @property
    def all_gates_skipped(self) -> bool:
        """--lossless was given, gates were selected, and every one of them was skipped."""
        return settings(self.config).lossless and bool(self.skipped) and not self.rows

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.all_gates_skipped and session.exitstatus == pytest.ExitCode.OK:
            # A green run in which no gate compared anything would read as "lossless".
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if getattr(report, "lossless_verdict", None) == Verdict.INCONCLUSIVE:
            self.inconclusive.append((report.nodeid, str(report.longrepr)))
        if (
            report.skipped
            and getattr(report, "lossless_gate", False)
            and not hasattr(report, "wasxfail")
        ):
            reason = (
                report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            )
            reason = reason.removeprefix("Skipped: ")
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
        for row in getattr(report, "lossless_rows", None) or []:
            self.rows.append(_row_from(row))
        self.events.extend(getattr(report, "lossless_golden_events", None) or [])
        if report.when == "teardown":
            self.receipts += sum(
                1 for key, _ in report.user_properties if key == "lossless_receipt"
            )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        resolved = settings(self.config)
        write = terminalreporter.write_line
        if self.inconclusive:
            # pytest shows failures only for its own categories: show these apart, in full.
            terminalreporter.write_sep("=", "INCONCLUSIVE (not a pass)", yellow=True)
            for nodeid, text in self.inconclusive:
                terminalreporter.write_sep("_", nodeid)
                write(text)
        if self.events or resolved.update_goldens:
            terminalreporter.write_sep("=", "pytest-lossless: golden updates")
            for line in report.update_lines(self.events) or ["no golden was written"]:
                write(line)
        if self.rows:
            terminalreporter.write_sep("=", "pytest-lossless: gates and verdicts")
            width = max(80, terminalreporter._tw.fullwidth)
            for line in report.verdict_table(self.rows, width=width):
                write(line)
        elif resolved.lossless:
            # Never let a green run be read as "the gates passed" when none ran.
            terminalreporter.write_sep("=", "pytest-lossless: gates and verdicts")
            write(
                "no gate compared anything: --lossless was given, but no test that ran called "
                "golden.check, lossless.compare or speed_gate (check -m and -k)",
                yellow=True,
            )
            if self.all_gates_skipped and not hasattr(self.config, "workerinput"):
                write("every selected lossless gate was skipped, so this session fails", red=True)
        for reason, count in sorted(self.skipped.items()):
            gates = "gate" if count == 1 else "gates"
            write(f"{count} lossless {gates} skipped: {reason}", yellow=True)
        if self.receipts and not hasattr(self.config, "workerinput"):
            from ..evidence.summary import write_summary

            try:
                summary = write_summary(resolved.receipts, root=resolved.rootdir)
                written = f"; summary {summary}"
            except (OSError, LosslessError) as exc:
                written = f"; the summary could not be written: {exc}"
            line = report.evidence_line(
                self.receipts, str(resolved.receipts), source_revision(self.config)
            )
            write(line + written)
