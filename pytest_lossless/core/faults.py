"""Named fault points: every place where the fault harness (``tests/faults/``) stops a session.

Test only, and the one mechanism for it: ``PYTEST_LOSSLESS_FAULT`` arms points as a
comma-separated list of ``POINT`` or ``POINT:ACTION``; when a process reaches an armed point it
does the action to itself (default ``SIGKILL``): ``SIGINT``, ``SIGTERM``, ``SIGHUP`` and
``SIGKILL`` are sent to this process, ``exit`` is ``os._exit(3)`` (what pytest-timeout's
thread method does). :data:`SWITCHES` are not stop points but behaviours the harness forces.
Unset (always, in normal use), :func:`point` costs one environment lookup.

The harness parametrizes over :data:`POINTS` x :data:`ACTIONS`, so a point added here is
covered by every invariant at once; a point named in the code but not here is an error.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "PYTEST_LOSSLESS_FAULT"

#: Every stop point, in the order a session reaches them, and what has happened by then.
POINTS: dict[str, str] = {
    "allocation": "devices locked and their records written, before the test gets them",
    "run-start": "a run's process started and its members reported",
    "server-ready": "a server answered its readiness check",
    "compare": "an obtained artifact is about to be compared with its golden",
    "golden-staged": "a golden update staged its new folder, nothing swapped yet",
    "golden-retired": "the two-rename fallback moved the old golden aside (between renames)",
    "golden-swapped": "the new golden folder swapped into place, not yet cleaned up",
    "receipt-write": "a test's receipt is about to be written",
    "session-finish": "every test ran; the session's index and summary are about to be written",
}
#: What an armed point does to its process.
ACTIONS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGKILL", "exit")
#: Behaviours forced by name, not stops: ``no-exchange`` makes golden swaps use two renames.
SWITCHES = ("no-exchange",)


def armed(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The armed points and switches: name -> action (``SIGKILL`` when none is given)."""
    text = (os.environ if environ is None else environ).get(FAULT_ENV, "")
    found: dict[str, str] = {}
    for part in text.split(","):
        name, _, action = part.strip().partition(":")
        if name:
            found[name] = action or "SIGKILL"
    return found


def switch(name: str) -> bool:
    """Whether the behaviour ``name`` (one of :data:`SWITCHES`) is forced."""
    if name not in SWITCHES:
        raise ValueError(f"unknown fault switch {name!r}; known: {', '.join(SWITCHES)}")
    return name in armed()


def point(name: str) -> None:
    """A stop point: does nothing unless ``PYTEST_LOSSLESS_FAULT`` arms ``name``."""
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}: register it in core/faults.POINTS")
    if FAULT_ENV not in os.environ:
        return
    action = armed().get(name)
    if action is None:
        return
    if action == "exit":
        os._exit(3)
    if action not in ACTIONS:
        raise ValueError(f"{FAULT_ENV}: unknown action {action!r}; known: {', '.join(ACTIONS)}")
    os.kill(os.getpid(), getattr(signal, action))
