"""What a speed arm returned: its measured time, and what is kept beside it in the sample.

An arm returns a number of seconds, or a model run's result (a command or server record, or a
mapping) whose ``measured_seconds`` is the time (a server's: the list of its measured requests,
summed). Startup and warmup times and the name of the run it timed are kept in the sample apart
from the measured time, so that ``verify`` can check each sample against its run.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

_ERROR_TEXT_LIMIT = 2000
_EXTRA_FIELDS = ("startup_seconds", "warmup_seconds")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def _numbers(value: object) -> list[float] | None:
    """A non-empty list of numbers (a server's measured request times), else None."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        return None
    found = [_number(v) for v in value]
    return [v for v in found if v is not None] if all(v is not None for v in found) else None


def _lookup(result: object, name: str) -> object:
    """``result.name``, else ``result[name]`` for a mapping, else ``result.record[name]``."""
    if hasattr(result, name):
        return getattr(result, name)
    if isinstance(result, Mapping) and name in result:
        return result[name]
    record = getattr(result, "record", None)
    if isinstance(record, Mapping) and name in record:
        return record[name]
    return None


def measured_seconds(result: object) -> float:
    """The measured time of one arm: a number of seconds, or a run result's ``measured_seconds``.

    A server record's ``measured_seconds`` is a list of measured request times: their sum is
    the arm's time (each element is kept in the sample as ``measured_requests``).

    Raises ``TypeError``/``ValueError`` naming what came back, so an errored arm's record says
    what to return instead.
    """
    seconds = _number(result)
    if seconds is None:
        raw = _lookup(result, "measured_seconds")
        if raw is None:
            raise TypeError(
                f"the arm returned {type(result).__name__} {short(repr(result))}: return the "
                "measured seconds (a float) or a model_run result with measured_seconds"
            )
        seconds = _number(raw)
        if seconds is None and _numbers(raw):
            seconds = sum(_numbers(raw) or [])  # a server record: its measured requests
        if seconds is None:
            raise TypeError(
                f"measured_seconds is {short(repr(raw), 200)}, not a number of seconds "
                "(nor a list of measured request times)"
            )
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"the arm measured {seconds!r} s: a time must be finite and above 0")
    return seconds


def sample_extras(result: object) -> dict[str, Any]:
    """Startup and warmup times the arm's result carries, kept apart from the measured time."""
    found: dict[str, Any] = {}
    if _number(result) is not None:
        return found
    for name in _EXTRA_FIELDS:
        value = _lookup(result, name)
        number = _number(value)
        if number is not None:
            found[name] = number
        elif (listed := _numbers(value)) is not None:
            found[name] = listed
    requests = _numbers(_lookup(result, "measured_seconds"))
    if requests is not None:
        found["measured_requests"] = requests
    run = _run_name(result)
    if run is not None:
        found["run"] = run  # the run record this sample timed: verify checks one against other
    return found


def _run_name(result: object) -> str | None:
    """The receipt name of the model run an arm returned (``command-03``), if it was one."""
    record = getattr(result, "record", None)
    if not isinstance(record, Mapping):
        record = result if isinstance(result, Mapping) else None
    if record is None or record.get("kind") not in ("command", "server"):
        return None
    name = record.get("name")
    return name if isinstance(name, str) else None


def short(text: str, limit: int = _ERROR_TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
