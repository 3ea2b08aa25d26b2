"""Text that is safe to print: control characters, ANSI escapes included, made visible.

A manifest key, a test id, a file name or a tag read from a media file can hold an escape
sequence that recolours, moves the cursor, rewrites a CI log line or sets the terminal title.
Everything the plugin prints from such sources goes through :func:`printable` first.
"""

from __future__ import annotations

import re

#: C0 controls, DEL, C1 controls (U+0080-U+009F, which include the one-byte CSI), the line and
#: paragraph separators, and the bidirectional overrides and isolates that reorder what is shown.
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object, *, newlines: bool = False) -> str:
    """``str(text)`` with every control character escaped (``\\x1b``, ``\\u202e``, ``\\n``).

    ``newlines`` keeps line feeds as they are, for messages of several lines; a carriage
    return is always escaped, since it lets a line overwrite the one before it.
    """
    value = str(text)
    if newlines:
        return "\n".join(_CONTROL.sub(_escape, line) for line in value.split("\n"))
    return _CONTROL.sub(_escape, value)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character that :func:`printable` would escape."""
    return _CONTROL.search(text) is not None
