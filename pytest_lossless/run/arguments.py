"""What a test passes to ``model_run``, checked and filled before anything starts: argv as a
list (never a shell string), time limits in seconds, and the ``{out}``/``{port}`` placeholders.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

from ..core.redact import Redactor
from ..errors import ConfigError


def _shown(argv: object, redactor: Redactor) -> object:
    """``argv`` as an error may quote it: secrets hidden, whatever its type."""
    if isinstance(argv, bytes):
        argv = argv.decode(errors="replace")
    if isinstance(argv, str):
        return redactor.text(argv)[0]
    if isinstance(argv, Sequence):
        return redactor.argv([a if isinstance(a, str) else repr(a) for a in argv])[0]
    return argv


def check_argv(argv: object, what: str, redactor: Redactor | None = None) -> list[str]:
    """``argv`` as a list of strings; a shell string or an empty list is a ConfigError (which
    quotes ``argv`` with its secrets hidden by ``redactor``)."""
    rules = redactor if redactor is not None else Redactor()
    if isinstance(argv, (str, bytes)):
        raise ConfigError(
            what,
            _shown(argv, rules),
            "pass a list of arguments such as ['python', 'run.py'], "
            "never a shell string (no shell is used)",
        )
    if not isinstance(argv, Sequence) or not argv:
        raise ConfigError(what, argv, "expected a non-empty list of arguments")
    out: list[str] = []
    for arg in argv:
        if not isinstance(arg, (str, os.PathLike)):
            raise ConfigError(
                what, _shown(argv, rules), f"argument {arg!r} is not a string or path"
            )
        out.append(os.fspath(arg))
    return out


def check_seconds(value: object, what: str) -> float:
    """A time limit given by a test: a finite number of seconds above zero."""
    try:
        seconds = float(value)  # type: ignore[arg-type]  # checked by the except below
    except (TypeError, ValueError):
        raise ConfigError(what, value, "expected a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(what, value, "must be a finite number of seconds above 0")
    return seconds


def fill_placeholders(text: str, values: Mapping[str, str]) -> str:
    """``{key}`` replaced by its value for each key in ``values``; other braces left alone."""
    # Plain replacement, not str.format: JSON or other braces in arguments stay untouched.
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text
