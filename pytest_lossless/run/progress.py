"""A progress line for long model runs and server startups: stage, elapsed, requests done.

Pure (a clock and a sink; no terminal, no pytest): the launcher tells a :class:`Progress` when a
stage begins, changes and ends, and calls :meth:`Progress.tick` from the thread that waits on
the run; the progress decides what to write, and hands the text to ``sink``.

Two renderings:

- interactive (a terminal): one line, redrawn in place (``"\\r"``, padded over the previous
  text) from ``show_after`` s (1) into the stage, at most every ``redraw`` s (0.5) unless the
  stage changes, and cleared when the stage ends (``"\\r"``, spaces, ``"\\r"``: the cursor
  back at the start of an empty line);
- a log (CI, not a terminal): one plain line (ending ``"\\n"``) when the stage has run
  ``first`` seconds (10), then every ``every`` seconds (30): at 10 s, 40 s, 70 s, ...; a stage
  shorter than ``first`` writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core.clock import SYSTEM_CLOCK, Clock

#: Seconds into a stage before the first line in a log.
FIRST_LINE = 10.0
#: Seconds between two lines in a log, after the first.
LINE_EVERY = 30.0
#: Seconds between two redraws on a terminal (the text changing redraws at once).
REDRAW_EVERY = 0.5
#: Seconds into a stage before it is drawn on a terminal (a quick run does not flash).
SHOW_AFTER = 1.0
#: Seconds the launcher waits between two ticks (so that a redraw is never late by more).
TICK_EVERY = 0.25
#: Longest line drawn on a terminal (a longer one is cut, so that it never wraps).
MAX_WIDTH = 120


class Progress:
    """The progress of one test's runs: at most one stage shown at a time (the latest).

    ``sink`` receives the text to write, exactly (carriage returns and newlines included), and
    returns False when it could not write it now (not the main thread, say): it is tried again.
    ``label`` (the test's short id) starts every line. Thread-safe: requests may be counted
    from several threads; whatever thread ticks writes.
    """

    def __init__(
        self,
        sink: Callable[[str], bool | None],
        *,
        interactive: bool,
        label: str = "",
        clock: Clock = SYSTEM_CLOCK,
        first: float = FIRST_LINE,
        every: float = LINE_EVERY,
        redraw: float = REDRAW_EVERY,
        show_after: float = SHOW_AFTER,
        width: int = MAX_WIDTH,
    ) -> None:
        self.sink = sink
        self.interactive = interactive
        self.label = label
        self.clock = clock
        self.first, self.every, self.redraw = float(first), float(every), float(redraw)
        self.show_after = float(show_after)
        self.width = max(20, int(width))
        self.tick_every = min(TICK_EVERY, self.redraw) if interactive else 1.0
        self._lock = threading.Lock()
        self._stage: str | None = None
        self._token = 0
        self._started = 0.0
        self._requests = 0
        self._failed = 0
        self._counting = False
        self._next_line = self.first
        self._drawn = ""  # the text on the terminal now ("" when none)
        self._drawn_at = 0.0
        self._drawn_stage: str | None = None

    # -- what the launcher says
    def begin(self, stage: str) -> int:
        """A new stage (``run 03``, ``server 01 starting``): elapsed counts from now. Returns
        its token: ``update`` and ``end`` with a token act only while that stage is shown."""
        with self._lock:
            self._token += 1
            self._stage = stage
            self._started = self.clock.monotonic()
            self._requests = self._failed = 0
            self._counting = False
            self._next_line = self.first
            return self._token

    def update(
        self,
        stage: str | None = None,
        *,
        requests: int | None = None,
        failed: int | None = None,
        token: int | None = None,
    ) -> None:
        """The stage goes on under a new name (``server 01 ready``), or counts requests."""
        with self._lock:
            if self._stage is None or token not in (None, self._token):
                return
            if stage is not None:
                self._stage = stage
            if requests is not None:
                self._requests, self._counting = int(requests), True
            if failed is not None:
                self._failed = int(failed)

    def end(self, token: int | None = None) -> None:
        """The stage is over: a drawn line is cleared; nothing more is written for it."""
        with self._lock:
            if token not in (None, self._token):
                return  # a later stage took the line over
            self._stage = None
            if self._drawn and self._write("\r" + " " * len(self._drawn) + "\r"):
                self._drawn, self._drawn_stage = "", None

    @property
    def active(self) -> bool:
        return self._stage is not None

    # -- what is written
    def text(self) -> str:
        """The line as it reads now (no carriage return, no newline); "" between stages."""
        with self._lock:
            return self._text(self.clock.monotonic())

    def _text(self, now: float) -> str:
        if self._stage is None:
            return ""
        parts = [self._stage]
        if self._counting:
            count = f"{self._requests} request{'' if self._requests == 1 else 's'}"
            parts.append(f"{count} ({self._failed} failed)" if self._failed else count)
        parts.append(f"{int(max(0.0, now - self._started))} s")  # whole seconds, floored
        prefix = f"{self.label}: " if self.label else ""
        return prefix + ", ".join(parts)

    def tick(self) -> None:
        """Write what is due now (called every ``tick_every`` s while a stage runs)."""
        with self._lock:
            if self._stage is None:
                return
            now = self.clock.monotonic()
            elapsed = now - self._started
            text = self._text(now)
            if not self.interactive:
                if elapsed >= self._next_line and self._write(text + "\n"):
                    while self._next_line <= elapsed:
                        self._next_line += self.every
                return
            text = text[: self.width]
            if elapsed < self.show_after or text == self._drawn:
                return
            if self._stage == self._drawn_stage and now - self._drawn_at < self.redraw:
                return  # only the figures changed: they wait their turn
            pad = " " * max(0, len(self._drawn) - len(text))
            if not self._write("\r" + text + pad + ("\b" * len(pad))):
                return
            self._drawn, self._drawn_at, self._drawn_stage = text, now, self._stage

    def _write(self, text: str) -> bool:
        """Hand ``text`` to the sink; False when it was not written (the sink said so, or
        failed: a progress line never fails a run)."""
        try:
            return self.sink(text) is not False
        except Exception:
            return False


def waiting(
    progress: Progress | None,
    stage: str,
    wait: Callable[[float], bool],
    limit: float,
    clock: Clock = SYSTEM_CLOCK,
) -> bool:
    """``wait(limit)`` (True when what it waits for is done), in slices of ``tick_every`` s
    with a tick after each, shown as ``stage`` from begin to end; plain ``wait`` without one."""
    if progress is None:
        return wait(limit)
    token = progress.begin(stage)
    try:
        deadline = clock.monotonic() + limit
        while True:
            left = deadline - clock.monotonic()
            if wait(max(0.0, min(left, progress.tick_every))):
                return True
            if left <= progress.tick_every:
                return False
            progress.tick()
    finally:
        progress.end(token)
