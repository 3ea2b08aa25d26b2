"""The message a failed run's :class:`~pytest_lossless.errors.RunError` carries: what went
wrong, the tail of its stderr (or stdout, when stderr is empty), where the logs are, and the
lifecycle summary, so a CI log at night shows the cause without opening a file. Secrets in it
are hidden by the launcher's ``clean`` (see :mod:`pytest_lossless.core.redact`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .lifecycle import lifecycle_verdict
from .record import ProcessRecord, RunRecord

#: How much of stdout/stderr a failure message shows.
TAIL_BYTES = 4000
TAIL_LINES = 25


def tail(path: Path, *, max_bytes: int = TAIL_BYTES, max_lines: int = TAIL_LINES) -> str:
    """The last lines of a log file, for failure messages."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    lines = data.decode(errors="replace").splitlines()[-max_lines:]
    return "\n".join(lines)


def format_status(proc: ProcessRecord) -> str:
    """How a recorded process ended, as the end of a sentence about it."""
    if proc.signal:
        return f"was killed by signal {proc.signal}"
    return f"exited with code {proc.exit_code}"


def failure_message(record: RunRecord, what: str, clean: Callable[[str], str] | None = None) -> str:
    """``model_run: <name> <what>``, then argv, a log tail, the other log's path, the lifecycle.

    ``clean`` hides secrets in the message (the launcher's: a log tail may echo a token).
    """
    paths = {"stdout": Path(str(record.stdout_path)), "stderr": Path(str(record.stderr_path))}
    text = tail(paths["stderr"])
    shown, other = ("stderr", "stdout") if text.strip() else ("stdout", "stderr")
    shown_path = paths[shown]
    if shown == "stdout":  # an empty stderr: the stdout tail is the best clue
        text = tail(shown_path)
    quoted = "\n".join(f"    | {line}" for line in text.splitlines()) or "    (empty)"
    message = (
        f"model_run: {record.name} {what}\n  argv: {list(record.argv)}\n"
        f"  {shown} tail ({shown_path}):\n{quoted}\n"
        f"  {other}: {paths[other]}\n  lifecycle: "
        f"{lifecycle_verdict(record).summary}"
    )
    return message if clean is None else clean(message)
