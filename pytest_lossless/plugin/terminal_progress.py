"""The progress line of ``model_run``, written through pytest's terminal reporter.

``--lossless-progress`` (ini ``lossless_progress``): ``auto`` (the default) redraws one line on
a terminal and writes a plain line after 10 s, then every 30 s, when the output is not a
terminal (a CI log); nothing under ``-q -q``, nor on a pytest-xdist worker (whose output is not
shown: the controller sees only the worker's reports); ``always`` also under ``-q -q``; ``off``.
With live logs on (``log_cli``) a terminal gets the sparse lines too, never a line drawn under
the log records.

Written only from the main thread (the one running the test, waiting in the launcher), with
pytest's capture suspended for the moment of the write (as pytest's live logging does), after a
newline if pytest's own line is open; a line drawn on a terminal is cleared before pytest
reports the test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .config import settings

if TYPE_CHECKING:
    from ..run.progress import Progress

#: The progress of the test running now in this process (cleared before its reports).
ACTIVE_KEY = pytest.StashKey["Progress"]()


def progress_mode(setting: str, *, tty: bool, verbosity: int, worker: bool) -> str | None:
    """``"tty"`` (redrawn), ``"log"`` (sparse lines) or None (no progress) for a session."""
    if setting == "off" or worker:
        return None
    if setting == "auto" and verbosity <= -2:
        return None
    return "tty" if tty else "log"


def short_id(nodeid: str) -> str:
    """``tests/e2e/test_x.py::TestA::test_b[1]`` -> ``test_x.py::TestA::test_b[1]``."""
    path, sep, rest = nodeid.partition("::")
    return f"{Path(path).name}{sep}{rest}"


def progress_for(item: pytest.Item) -> Progress | None:
    """The progress line of ``item``'s runs, or None where none is shown."""
    config = item.config
    reporter: Any = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return None
    # Live logs (log_cli) write under a drawn line: beside them, sparse lines instead.
    live_logs: Any = config.pluginmanager.get_plugin("logging-plugin")
    live = bool(getattr(live_logs, "_log_cli_enabled", lambda: False)())
    # pytest 7 has ``isatty`` as a value and no ``get_verbosity``; pytest 8 and later, methods.
    isatty = reporter.isatty
    tty = bool(isatty() if callable(isatty) else isatty)
    verbosity = (
        config.get_verbosity() if hasattr(config, "get_verbosity") else config.option.verbose
    )
    mode = progress_mode(
        settings(config).progress,
        tty=tty and not live,
        verbosity=int(verbosity),
        worker=hasattr(config, "workerinput"),
    )
    if mode is None:
        return None
    from ..run.progress import Progress

    progress = Progress(
        terminal_sink(reporter, config.pluginmanager.get_plugin("capturemanager")),
        interactive=mode == "tty",
        label=short_id(item.nodeid),
        width=max(20, int(reporter._tw.fullwidth) - 1),
    )
    config.stash[ACTIVE_KEY] = progress
    return progress


def terminal_sink(reporter: Any, capman: Any) -> Callable[[str], bool]:
    """Write progress text through pytest's terminal ``reporter``, capture suspended."""

    def sink(text: str) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # a request from a test's thread: the next tick of the main one writes
        uncaptured: AbstractContextManager[Any] = (
            capman.global_and_fixture_disabled() if capman is not None else nullcontext()
        )
        with uncaptured:
            reporter.ensure_newline()  # pytest's own line stays whole; ours starts a new one
            reporter.write(text, flush=True)
        return True

    return sink


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> None:
    """Before pytest writes a test's status (its call, or a setup or teardown that did not
    pass), end whatever progress is shown: a server still serving then is stopped at teardown,
    unseen, and pytest's line is never written after a drawn one."""
    progress = config.stash.get(ACTIVE_KEY, None)
    if progress is None or not progress.active:
        return
    if report.when == "call" or not report.passed:
        progress.end()
