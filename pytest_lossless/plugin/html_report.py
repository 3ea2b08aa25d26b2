"""The HTML report: every ``--lossless`` or ``--update-goldens`` session writes one beside its
receipts (``<receipts dir>/<session id>/report/index.html``), and names it in the terminal
summary.

The rows come from every report, the workers' too under xdist: :mod:`.outcomes` attaches them
(``lossless_rows``) and :mod:`.receipts` the path of the test's receipt (the
``lossless_receipt`` user property) to each teardown report, which pytest-xdist carries to the
controller; only the controller writes the page (:func:`pytest_lossless.report.html.write_report`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import pytest

from .. import report
from ..core import faults
from ..errors import LosslessError
from ..report import events_from as report_events
from .config import runs_no_test, settings
from .evidence import session_folder, source_state

if TYPE_CHECKING:
    from ..evidence.provenance import SourceState
    from ..goldens.swap import UpdateEvent

_PLUGIN_NAME = "lossless-html-report"
_LINK_NAME = "lossless-pytest-html-link"
#: ``config.stash[REPORT_KEY]``: the session's report, on the controller of a gate session.
REPORT_KEY = pytest.StashKey["HtmlReport"]()


def pytest_configure(config: pytest.Config) -> None:
    resolved = settings(config)
    if hasattr(config, "workerinput") or not (resolved.lossless or resolved.update_goldens):
        return  # workers attach to their reports; the controller writes the page
    if runs_no_test(config):
        return  # nothing ran (--collect-only, --setup-plan, ...): no page, no session folder
    plugin = config.stash[REPORT_KEY] = HtmlReport(config)
    config.pluginmanager.register(plugin, _PLUGIN_NAME)
    if config.pluginmanager.hasplugin("html") and getattr(config.option, "htmlpath", None):
        # pytest-html's hook exists only where pytest-html is loaded: registered only then.
        config.pluginmanager.register(PytestHtmlLink(plugin), _LINK_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    link = config.pluginmanager.get_plugin(_LINK_NAME)
    if link is not None:
        config.pluginmanager.unregister(link, _LINK_NAME)
    plugin = config.stash.get(REPORT_KEY, None)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _PLUGIN_NAME)
        del config.stash[REPORT_KEY]


def report_folder(config: pytest.Config) -> Path:
    """Where the session's report goes: ``report/`` in the session folder, beside its receipts,
    ``INDEX.json`` and ``SUMMARY.md`` (``<receipts dir>/<session id>/report/``)."""
    from ..report.html import REPORT_DIR

    return session_folder(config) / REPORT_DIR


def _row_from(data: Any) -> report.Row:
    return report.Row.from_dict(data)


@final
class HtmlReport:
    """Gathers rows, golden updates and receipt paths; writes the page at the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: list[report.Row] = []
        self.events: list[UpdateEvent] = []
        #: The receipt of each test, by test id (the last one written, if a test ran twice).
        self.receipts: dict[str, str] = {}
        self.path: Path | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.rows += [_row_from(data) for data in getattr(report, "lossless_rows", None) or []]
        self.events += report_events(getattr(report, "lossless_golden_events", None))
        for key, value in report.user_properties:
            if key == "lossless_receipt":
                self.receipts[report.nodeid] = str(value)

    def write(self) -> Path:
        """Write the report now (receipts read back, pictures drawn); returns index.html."""
        from ..evidence.receipts import ReceiptRecord, load
        from ..media import MediaLimits
        from ..report.details import needs_receipt
        from ..report.html import write_report

        resolved = settings(self.config)
        wanted = {row.test for row in self.rows if needs_receipt(row)}
        receipts: dict[str, ReceiptRecord] = {}
        unread: list[str] = []
        for test in sorted(wanted):
            path = self.receipts.get(test)
            if path is None:
                continue
            try:
                receipts[test] = load(path)
            except LosslessError as exc:
                unread.append(str(exc))
        source = source_state(self.config)
        revision = (source.revision or "")[:12] or "no git revision"
        context = [("receipts", str(resolved.receipts)), ("source", _source(revision, source))]
        context += [("receipt not read", text) for text in unread]
        missing = sorted({row.test for row in self.rows} - set(self.receipts))
        if missing:  # their rows are the session's own: no receipt backs them
            noun = "test wrote no receipt" if len(missing) == 1 else "tests wrote no receipt"
            context.append((f"{len(missing)} {noun}", ", ".join(missing)))
        self.path = write_report(
            report_folder(self.config),
            self.rows,
            receipts,
            events=self.events,
            context=context,
            limits=MediaLimits.from_settings(resolved),
            root=resolved.rootdir,
            store=resolved.store,
        )
        return self.path

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        try:
            path = self.write()
        except (OSError, LosslessError, ValueError) as exc:
            where = report_folder(self.config) / "index.html"  # what a write_text leaves out
            why = (
                faults.write_failed(exc, exc.filename2 or exc.filename or where)
                if isinstance(exc, OSError)
                else exc
            )
            terminalreporter.write_line(
                f"pytest-lossless: the HTML report could not be written: {why}", red=True
            )
            session = getattr(terminalreporter, "_session", None)  # a missing report fails it
            if session is not None and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        rootdir = settings(self.config).rootdir
        shown = path.relative_to(rootdir) if path.is_relative_to(rootdir) else path
        terminalreporter.write_line(f"pytest-lossless report: {shown}")


@final
class PytestHtmlLink:
    """With pytest-html: a link to this session's lossless report in pytest-html's summary."""

    def __init__(self, report: HtmlReport) -> None:
        self.report = report

    def pytest_html_results_summary(
        self, prefix: list[Any], summary: list[Any], postfix: list[Any], session: Any
    ) -> None:
        import html
        import os

        from ..report.html import INDEX

        config = self.report.config
        if not (self.report.rows or self.report.events):
            return  # no lossless report is written for this session
        target = report_folder(config) / INDEX
        page = Path(os.path.expandvars(str(config.option.htmlpath))).expanduser()
        base = (Path.cwd() / page).parent
        href = Path(os.path.relpath(target, base)).as_posix()
        prefix.append(
            f'<p>pytest-lossless: <a href="{html.escape(href, quote=True)}">the lossless '
            f"report</a> (verdicts, frames and charts of this session: "
            f"{html.escape(report.counts_line(self.report.rows) or 'golden updates')})</p>"
        )


def _source(revision: str, source: SourceState) -> str:
    if source.diff_bytes or source.dirty:
        return f"{revision} (dirty)"
    return revision
