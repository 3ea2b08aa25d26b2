"""The progress line's cadence (pure, on a FakeClock), and the launcher driving it."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.core.clock import FakeClock
from pytest_lossless.run.progress import Progress


def make(interactive: bool, **kwargs: float) -> tuple[Progress, FakeClock, list[str]]:
    clock = FakeClock()
    out: list[str] = []
    progress = Progress(out.append, interactive=interactive, label="test_a", clock=clock, **kwargs)
    return progress, clock, out


def run_for(progress: Progress, clock: FakeClock, seconds: float, step: float = 0.25) -> None:
    """Tick as the launcher does, every ``step`` s, for ``seconds``."""
    for _ in range(round(seconds / step)):
        clock.advance(step)
        progress.tick()


def test_log_lines_at_10_40_70_seconds() -> None:
    progress, clock, out = make(interactive=False)
    progress.begin("run 03")
    run_for(progress, clock, 75, step=1.0)
    progress.end()
    assert out == ["test_a: run 03, 10 s\n", "test_a: run 03, 40 s\n", "test_a: run 03, 70 s\n"]
    assert all("\r" not in line for line in out)


def test_log_run_shorter_than_10_seconds_prints_nothing() -> None:
    progress, clock, out = make(interactive=False)
    progress.begin("run 01")
    run_for(progress, clock, 5, step=1.0)
    progress.end()
    assert out == []


def test_log_sparse_ticks_do_not_catch_up() -> None:
    """A tick late by a minute writes one line, and the cadence goes on from there."""
    progress, clock, out = make(interactive=False)
    progress.begin("run 01")
    clock.advance(75)
    progress.tick()
    clock.advance(4)
    progress.tick()
    clock.advance(12)  # 91 s: the next line is due at 100 s (70 + 30)
    progress.tick()
    assert out == ["test_a: run 01, 75 s\n"]
    clock.advance(9)
    progress.tick()
    assert out[-1] == "test_a: run 01, 100 s\n"


def test_log_new_stage_restarts_the_cadence() -> None:
    progress, clock, out = make(interactive=False)
    progress.begin("run 01")
    run_for(progress, clock, 12, step=1.0)
    progress.end()
    progress.begin("run 02")
    run_for(progress, clock, 9, step=1.0)
    assert out == ["test_a: run 01, 10 s\n"]


def test_tty_redraws_in_place_and_clears() -> None:
    progress, clock, out = make(interactive=True)
    progress.begin("run 03")
    run_for(progress, clock, 0.75)
    assert out == []  # a quick run does not flash
    run_for(progress, clock, 2.5)
    assert out, "drawn after a second"
    assert all(w.startswith("\r") and "\n" not in w for w in out)
    assert out[0] == "\rtest_a: run 03, 1 s"
    assert out[-1] == "\rtest_a: run 03, 3 s"
    assert len(out) == 3  # once per change of figures, never more often than redraw allows
    progress.end()
    assert out[-1] == "\r" + " " * len("test_a: run 03, 3 s") + "\r"
    run_for(progress, clock, 5)
    assert out[-1].strip() == ""  # nothing after the end


def test_tty_shorter_text_is_padded_over_the_longer_one() -> None:
    progress, clock, out = make(interactive=True)
    token = progress.begin("server 01 starting")
    run_for(progress, clock, 1.25)
    progress.update("server 01 ready", requests=0, token=token)
    progress.tick()
    long, short = "test_a: server 01 starting, 1 s", "test_a: server 01 ready, 0 requests, 1 s"
    assert out[0] == "\r" + long
    assert out[1] == "\r" + short  # the new stage is drawn at once
    progress.update(requests=12, failed=1, token=token)
    clock.advance(0.5)
    progress.tick()
    assert out[-1] == "\rtest_a: server 01 ready, 12 requests (1 failed), 1 s"
    # Shorter than what is drawn: padded with spaces, the cursor back after the text.
    progress.begin("run 02")
    clock.advance(1.0)
    progress.tick()
    drawn = "test_a: run 02, 1 s"
    pad = len("test_a: server 01 ready, 12 requests (1 failed), 1 s") - len(drawn)
    assert out[-1] == "\r" + drawn + " " * pad + "\b" * pad


def test_tty_end_of_an_older_stage_leaves_the_newer_line() -> None:
    progress, clock, out = make(interactive=True)
    server = progress.begin("server 01 ready")
    progress.begin("run 02")
    progress.end(server)  # not shown any more: nothing to clear
    clock.advance(1.5)
    progress.tick()
    assert out == ["\rtest_a: run 02, 1 s"]
    progress.update(requests=3, token=server)
    assert progress.text() == "test_a: run 02, 1 s"


def test_sink_refusal_is_retried_and_a_failing_sink_is_harmless() -> None:
    clock = FakeClock()
    calls: list[str] = []
    answers = [False, None]

    def sink(text: str) -> bool | None:
        calls.append(text)
        return answers.pop(0) if answers else None

    progress = Progress(sink, interactive=False, clock=clock)
    progress.begin("run 01")
    clock.advance(10)
    progress.tick()  # refused
    progress.tick()  # written
    clock.advance(1)
    progress.tick()  # not due
    assert calls == ["run 01, 10 s\n", "run 01, 10 s\n"]

    def broken(text: str) -> None:
        raise OSError("terminal gone")

    failing = Progress(broken, interactive=True, clock=clock)
    failing.begin("run 02")
    clock.advance(2)
    failing.tick()
    failing.end()  # no exception


def test_counts_from_threads() -> None:
    progress, _clock, _ = make(interactive=False)
    token = progress.begin("server 01 ready")

    def count(n: int) -> None:
        progress.update(requests=n, token=token)

    threads = [threading.Thread(target=count, args=(n,)) for n in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert "request" in progress.text()


def test_off_is_no_progress_at_all(tmp_path: Path) -> None:
    """``--lossless-progress=off``: the plugin passes no Progress; the launcher waits as before."""
    from pytest_lossless.plugin.terminal_progress import progress_mode

    assert progress_mode("off", tty=True, verbosity=0, worker=False) is None
    assert progress_mode("auto", tty=True, verbosity=0, worker=False) == "tty"
    assert progress_mode("auto", tty=False, verbosity=0, worker=False) == "log"
    assert progress_mode("auto", tty=True, verbosity=-2, worker=False) is None
    assert progress_mode("always", tty=True, verbosity=-2, worker=False) == "tty"
    assert progress_mode("auto", tty=True, verbosity=0, worker=True) is None
    assert progress_mode("always", tty=False, verbosity=0, worker=True) is None


def test_settings_option() -> None:
    from pytest_lossless.errors import ConfigError
    from pytest_lossless.settings import resolve

    assert resolve({}, {}, {}, rootdir=Path("/r")).progress == "auto"
    assert resolve({"progress": "off"}, {}, {}, rootdir=Path("/r")).progress == "off"
    assert resolve({}, {"progress": "always"}, {}, rootdir=Path("/r")).progress == "always"
    with pytest.raises(ConfigError):
        resolve({"progress": "sometimes"}, {}, {}, rootdir=Path("/r"))


@pytest.mark.slow
def test_launcher_draws_a_command_and_a_server(tmp_path: Path) -> None:
    from pytest_lossless.run import Launcher

    out: list[str] = []
    progress = Progress(out.append, interactive=True, label="t", show_after=0.3, redraw=0.1)
    launcher = Launcher(
        allocation=None, out_dir=tmp_path, run_timeout=30, knobs=(), progress=progress
    )
    try:
        launcher([sys.executable, "-c", "import time; time.sleep(0.8)"])
        assert any(w.startswith("\rt: run 01, ") for w in out), out
        assert out[-1].startswith("\r ")  # cleared
        assert out[-1].endswith("\r")
        out.clear()
        server = launcher.server(
            [
                sys.executable,
                "-c",
                "import time, http.server as h; time.sleep(0.8); "
                "h.HTTPServer(('127.0.0.1', {port}), h.SimpleHTTPRequestHandler).serve_forever()",
            ],
            ready="/",
            cwd=tmp_path,
        )
        assert any("server 02 starting" in w for w in out), out
        assert "server 02 ready, 0 requests" in out[-1]
        server.request("GET", "/")
        server.request("GET", "/missing")
        assert progress.text().startswith("t: server 02 ready, 2 requests (1 failed), ")
        server.stop()
        assert out[-1].endswith("\r")
        assert not out[-1].strip()
    finally:
        launcher.close()


class FakeReporter:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.currentfspath: str | None = "tests/test_a.py"

    def ensure_newline(self) -> None:
        if self.currentfspath:
            self.events.append("newline")
            self.currentfspath = None

    def write(self, text: str, *, flush: bool = False) -> None:
        self.events.append(f"write {text!r} flush={flush}")


class FakeCapture:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    @contextlib.contextmanager
    def global_and_fixture_disabled(self) -> Iterator[None]:
        self.events.append("suspend")
        yield
        self.events.append("resume")


def test_terminal_sink_writes_between_pytest_outputs_with_capture_suspended() -> None:
    from pytest_lossless.plugin.terminal_progress import terminal_sink

    reporter = FakeReporter()
    sink = terminal_sink(reporter, FakeCapture(reporter.events))
    assert sink("\rt: run 01, 1 s") is True
    assert sink("\rt: run 01, 2 s") is True
    assert reporter.events == [
        "suspend",
        "newline",  # pytest's open line ("tests/test_a.py ") ends first, once
        "write '\\rt: run 01, 1 s' flush=True",
        "resume",
        "suspend",
        "write '\\rt: run 01, 2 s' flush=True",
        "resume",
    ]
    # From another thread (a test's load generator): not written, retried by the main thread.
    answers: list[bool] = []
    worker = threading.Thread(target=lambda: answers.append(sink("\rt: x")))
    worker.start()
    worker.join()
    assert answers == [False]
    assert len(reporter.events) == 7
    assert (
        terminal_sink(FakeReporter(), None)("line\n") is True
    )  # no capture plugin (-p no:capture)


def test_short_id() -> None:
    from pytest_lossless.plugin.terminal_progress import short_id

    assert short_id("tests/e2e/test_x.py::TestA::test_b[1]") == "test_x.py::TestA::test_b[1]"
    assert short_id("test_x.py") == "test_x.py"


def test_launcher_ticks_a_command_and_clears(tmp_path: Path) -> None:
    """A real (idle) command through the launcher: drawn while it runs, cleared when it ends."""
    from pytest_lossless.run import Launcher

    out: list[str] = []
    progress = Progress(out.append, interactive=True, label="t", show_after=0.2, redraw=0.1)
    launcher = Launcher(
        allocation=None, out_dir=tmp_path, run_timeout=30, knobs=(), progress=progress
    )
    try:
        launcher(["sleep", "0.6"])
    finally:
        launcher.close()
    assert out[0] == "\rt: run 01, 0 s"
    assert out[-1] == "\r" + " " * len("t: run 01, 0 s") + "\r"
    assert not progress.active


def test_drawn_line_ends_before_pytest_reports_the_call() -> None:
    """A server still serving when the call ends: its line is cleared before pytest writes the
    call's status; a passing setup (which pytest does not write) leaves it."""
    from types import SimpleNamespace

    from pytest_lossless.plugin.terminal_progress import ACTIVE_KEY, pytest_report_teststatus

    progress, clock, out = make(interactive=True)
    config: Any = SimpleNamespace(stash=pytest.Stash())
    config.stash[ACTIVE_KEY] = progress
    progress.begin("server 01 ready")
    clock.advance(2)
    progress.tick()
    setup: Any = SimpleNamespace(when="setup", passed=True)
    call: Any = SimpleNamespace(when="call", passed=True)
    pytest_report_teststatus(setup, config)
    assert progress.active
    pytest_report_teststatus(call, config)
    assert not progress.active
    assert out[-1] == "\r" + " " * len("test_a: server 01 ready, 2 s") + "\r"
    empty: Any = SimpleNamespace(stash=pytest.Stash())
    pytest_report_teststatus(call, empty)  # no model_run in this test: nothing to end
