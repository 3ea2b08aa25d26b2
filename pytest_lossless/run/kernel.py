"""What the kernel says of processes: wait statuses, signal names, the child-subreaper flag."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def child_subreaper(on: bool | None) -> bool | None:
    """Read (``on=None``) or set this process's child-subreaper flag; None where unsupported.

    As a subreaper, orphaned descendants of our runs are re-parented to us instead of to
    init, so we can reap them and record their real exit status.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if on is None:
            value = ctypes.c_int(0)
            if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
                return None
            return bool(value.value)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            return None
        return on
    except (OSError, AttributeError):
        return None


def describe_status(status: int) -> tuple[int | None, str | None, bool]:
    """A wait status as (exit code, signal name, core dumped)."""
    if os.WIFSIGNALED(status):
        return None, signal_name(os.WTERMSIG(status)), os.WCOREDUMP(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None, False
    return None, None, False


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"
