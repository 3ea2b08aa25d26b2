"""The one clock.

Every duration the plugin measures goes through a :class:`Clock`, so statistics and
schedulers can be tested with :class:`FakeClock` instead of real sleeps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wall(self) -> float: ...


class SystemClock:
    """Real time: ``perf_counter`` for durations, ``time.time`` for timestamps."""

    def monotonic(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wall(self) -> float:
        return time.time()


@dataclass
class FakeClock:
    """A clock that only moves when told to (``advance``) or when slept on."""

    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(0.0, seconds)

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


SYSTEM_CLOCK: Clock = SystemClock()


def utc_iso(ts: float | None = None) -> str:
    """An ISO-8601 UTC timestamp, for receipts and holder records."""
    moment = datetime.fromtimestamp(time.time() if ts is None else ts, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
