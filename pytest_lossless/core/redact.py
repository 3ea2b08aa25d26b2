"""Secret values kept out of what CI uploads: receipts, the stored diff, messages, JUnit.

A name looks secret when one of its words (split at ``_``, ``-``, ``.`` and camelCase) matches
:data:`SECRET_WORDS` (``OPENAI_API_KEY``, ``--hf-token``, ``apiKey``, ``DB_PASSWORD``), or the
whole name matches a pattern of the ``lossless_redact`` setting. Words, not substrings, so that
``--max-tokens``, ``--tokenizer`` and ``TOKENIZERS_PARALLELISM`` stay readable.

The value of such a name is replaced by :func:`marker`: ``<redacted sha256:XXXXXXXXXXXX>``, the
first 12 hex digits of the value's SHA-256, so two runs can still be compared (same value, same
marker) without the value being written. Names are never redacted. Redaction is idempotent: a
marker is never redacted again.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

#: Hex digits of the SHA-256 kept in a marker: enough to tell values apart, not to print them.
HASH_DIGITS = 12
MARKER_RE = re.compile(r"<redacted sha256:[0-9a-f]{12}>")
#: Secrets shorter than this are not searched for in free text (a log tail), only redacted
#: where their name says what they are: replacing every "on" or "1" would garble the text.
SCRUB_MIN = 4
#: Values of secret-named variables of the session's environment at least this long are
#: scrubbed from everything captured, wherever they appear (shorter ones are too common).
ENVIRON_MIN = 8
#: Authorization schemes whose credential follows a space: the bare credential is a secret too.
_SCHEME = re.compile(r"(?i)(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+(?P<cred>\S{4,})")

#: Globs over one word of a name (upper case). ``*KEY`` catches ``APIKEY`` and ``KEY``;
#: ``TOKEN`` and ``*TOKEN`` leave ``TOKENS`` and ``TOKENIZER`` alone; ``AUTH`` leaves ``AUTHOR``.
SECRET_WORDS = (
    "*KEY",
    "*KEYS",
    "TOKEN",
    "*TOKEN",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "PASS",
    "*PASSPHRASE*",
    "*CREDENTIAL*",
    "*AUTH",
    "AUTHORIZATION",
    "AUTHENTICATION",
    "COOKIE",
    "COOKIES",
)
#: Words too common in code to mean a credential on their own: ``key = "name"`` and
#: ``token = f"..."`` in a .py file are kept; ``api_key = "..."`` and ``password = "..."`` are not.
CODE_GENERIC = frozenset({"KEY", "KEYS", "TOKEN", "PASS", "AUTH", "COOKIE", "COOKIES"})
#: Files whose right-hand sides are expressions, not literals: in them only quoted values (and
#: assignments written inside string literals) are redacted, so ``token = tok(x)`` stays.
CODE_SUFFIXES = frozenset(
    {
        *(".py", ".pyi", ".pyx", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".cu", ".cuh"),
        *(".js", ".jsx", ".mjs", ".ts", ".tsx", ".go", ".rs", ".java", ".kt", ".scala", ".rb"),
        *(".php", ".swift", ".m", ".mm", ".cs", ".lua", ".jl", ".r"),
    }
)

_PATTERN_CHARS = re.compile(r"[A-Z0-9_.*?\[\]!]+")
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_OPTION = re.compile(r"(-{1,2})([A-Za-z][A-Za-z0-9_.-]*)(?:=(.*))?", re.DOTALL)
_FLAG = re.compile(r"--.*|-[A-Za-z]", re.DOTALL)
_M = MARKER_RE.pattern.replace(" ", r"\ ")  # also usable in re.VERBOSE
_QUOTED = r"""[rRbBuUfF]{0,2}"[^"\n]*"|[rRbBuUfF]{0,2}'[^'\n]*'"""
_NAME = r"-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*"
# name = value, name: value, "name": "value", name := value, --name=value; an unquoted value
# after ":" runs to the end of the line (headers, YAML), after "=" to the next blank.
# Unquoted values end at quotes, backticks (Markdown, shell) and separators.
_WORD_VALUE = r"""[^\s"'`&,;)\]}]+"""
_LINE_VALUE = r"""[^\s"'`&,;)\]}](?:(?![ \t]+\#|[ \t]*$)[^"'`&,;)\]}\r\n])*"""
_ASSIGN = re.compile(
    rf"""(?<![A-Za-z0-9_.\-])(?P<q>["']?)(?P<name>{_NAME})(?P=q)\]?[ \t]*
    (?:(?P<sep>:=|=>|=(?!=))[ \t]*(?P<value>{_M}|{_QUOTED}|{_WORD_VALUE})
    |:(?!:)[ \t]*(?P<value2>{_M}|{_QUOTED}|{_LINE_VALUE}))""",
    re.VERBOSE | re.MULTILINE,
)
# "--api-key", "value" and ("API_KEY", "value"): a secret name and its value as two literals.
_PAIR = re.compile(rf"""(?P<q>["'])(?P<name>{_NAME})(?P=q)\s*,\s*(?P<value>{_QUOTED})""")
# --api-key value, inside a line of text (a shell line, a CI config, a command in a string).
_SPACED = re.compile(
    rf"""(?<![\w-])(?P<name>--?[A-Za-z][A-Za-z0-9_.\-]*)[ \t]+"""
    rf"""(?P<value>{_M}|{_QUOTED}|[^\s"'\-][^\s"']*)"""
)
_USERINFO = re.compile(
    r"""(?P<pre>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@'"]*:)(?P<value>[^\s/@'"]+)@"""
)
_BEARER = re.compile(r"(?i)\bbearer[ \t]+(?P<value>[A-Za-z0-9._~+/=\-]{8,})")
_EQ_SCHEME = re.compile(
    r"(?i)(?<==)(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+(?P<cred>[^\s\"'`&,;<]{4,})"
)
_SCHEME_WORD = re.compile(r"(?i)bearer|basic|token|digest|negotiate|apikey")
_SCHEMED_MARKER = re.compile(rf"(?i)[A-Za-z-]+[ \t]+{_M}")
_LITERAL = re.compile(r""""(?P<d>[^"\n]*)"|'(?P<s>[^'\n]*)'""")


def marker(value: str) -> str:
    """``<redacted sha256:XXXXXXXXXXXX>``: what is written instead of a secret value."""
    digest = hashlib.sha256(value.encode("utf-8", errors="surrogateescape")).hexdigest()
    return f"<redacted sha256:{digest[:HASH_DIGITS]}>"


def is_marker(text: str) -> bool:
    return MARKER_RE.fullmatch(text) is not None


def normal_name(name: str) -> str:
    """A name as patterns see it: no leading dashes, upper case, ``-`` as ``_``."""
    return name.lstrip("-").upper().replace("-", "_")


def parse_patterns(text: str) -> tuple[str, ...]:
    """The ``lossless_redact`` setting: name globs separated by blanks or commas.

    ``*_DSN``, ``--license-file`` and ``LICENSE_FILE`` are the same kind of pattern: each is
    matched against environment names and argv option names alike (see :func:`normal_name`).
    """
    patterns = []
    for raw in (p for p in re.split(r"[\s,]+", text.strip()) if p):
        pattern = normal_name(raw)
        if not _PATTERN_CHARS.fullmatch(pattern) or not re.search(r"[A-Z0-9]", pattern):
            raise ValueError(
                f"{raw!r} is not a name pattern: use letters, digits, _ - . and the "
                "wildcards * ? [ ], with at least one letter or digit"
            )
        patterns.append(pattern)
    return tuple(patterns)


def words(name: str) -> list[str]:
    """The words of a name, upper case: ``OPENAI_API_KEY``, ``--api-key``, ``apiKey``."""
    found: list[str] = []
    for part in re.split(r"[^A-Za-z0-9]+", name):
        found += [w.upper() for w in _WORD.findall(part)]
    return found


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of a known secret value replaced by its marker.

    For free text (a log tail, an error) that may repeat a value already found by name; values
    shorter than :data:`SCRUB_MIN` are left alone, and markers are never touched.
    """
    values = sorted(
        {s for s in secrets if len(s) >= SCRUB_MIN and s.strip() and not is_marker(s)},
        key=len,
        reverse=True,
    )
    if not values or not text:
        return text
    pattern = re.compile("|".join([_M, *(re.escape(v) for v in values)]))
    return pattern.sub(lambda m: m[0] if is_marker(m[0]) else marker(m[0]), text)


def scrub_all(value: Any, secrets: Iterable[str]) -> Any:
    """:func:`scrub` over every string of a JSON-like value (a copy; keys are kept)."""
    known = set(secrets)
    if not known:
        return value
    if isinstance(value, str):
        return scrub(value, known)
    if isinstance(value, Mapping):
        return {k: scrub_all(v, known) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_all(v, known) for v in value]
    return value


def _code_path(path: str) -> bool:
    name = path.strip().strip('"').rsplit("/", 1)[-1].lower()
    return any(name.endswith(suffix) for suffix in CODE_SUFFIXES)


@dataclass(frozen=True)
class Redactor:
    """The redaction rules of a session: the built-in words plus ``patterns`` (normalised
    globs, see :func:`parse_patterns`). Each method returns what to show and the secret values
    it hid, so a caller can also :func:`scrub` them from free text."""

    patterns: tuple[str, ...] = ()
    #: Secret values known before any text is seen (the session environment's): scrubbed
    #: from every text, argument and value, wherever they appear.
    known: frozenset[str] = frozenset()

    @classmethod
    def with_patterns(
        cls, patterns: Iterable[str], *, environ: Mapping[str, str] | None = None
    ) -> Redactor:
        """The session's rules: the built-in words, ``patterns``, and the values (of
        :data:`ENVIRON_MIN` characters or more) of every secret-named variable of
        ``environ`` (default: this process's environment), which a model run inherits and
        may print even though no argument or ``env=`` named it."""
        rules = cls(tuple(normal_name(p) for p in patterns))
        source = os.environ if environ is None else environ
        known = frozenset(
            value
            for name, value in source.items()
            if len(value) >= ENVIRON_MIN and value.strip() and rules.is_secret(name)
        )
        return cls(rules.patterns, known)

    @cached_property
    def _builtin(self) -> re.Pattern[str]:
        return re.compile("|".join(fnmatch.translate(p) for p in SECRET_WORDS))

    @cached_property
    def _extra(self) -> re.Pattern[str] | None:
        if not self.patterns:
            return None
        return re.compile("|".join(fnmatch.translate(p) for p in self.patterns))

    def is_secret(self, name: str) -> bool:
        """Whether a name (environment variable, option, key, header) looks secret."""
        if self._extra is not None and self._extra.match(normal_name(name)):
            return True
        found = words(name)
        if not found or found[0] == "NO":  # --no-auth is a switch, not a credential
            return False
        return any(self._builtin.match(word) for word in found)

    @staticmethod
    def _hide(value: str, found: list[str]) -> str:
        if not value or is_marker(value) or _SCHEMED_MARKER.fullmatch(value):
            return value  # already hidden (a marker, or "Bearer <marker>")
        found.append(value)
        # "Bearer <token>": the bare token is a secret of its own, scrubbed wherever it is
        # printed alone (a server's log echoing what it was given).
        found.extend(m["cred"] for m in _SCHEME.finditer(value) if not is_marker(m["cred"]))
        return marker(value)

    # -- structured values
    def argv(self, args: Sequence[str]) -> tuple[list[str], list[str]]:
        """An argument list with secret option values hidden (``--opt=value`` and ``--opt
        value``), and secrets inside other arguments (headers, ``name=value``, URLs)."""
        found: list[str] = []
        shown: list[str] = []
        expecting = False
        for arg in args:
            if expecting:
                expecting = False
                if not _FLAG.fullmatch(arg):  # --token --verbose: the option had no value
                    shown.append(self._hide(arg, found))
                    continue
            if arg in self.known:
                shown.append(self._hide(arg, found))
                continue
            option = _OPTION.fullmatch(arg)
            if option and self.is_secret(option[2]):
                if option[3] is None:
                    shown.append(arg)
                    expecting = True
                else:
                    shown.append(f"{option[1]}{option[2]}={self._hide(option[3], found)}")
                continue
            shown.append(self._scan(arg, found, code=False))
        return shown, found

    def env(self, env: Mapping[str, str | None]) -> tuple[dict[str, str | None], list[str]]:
        """Environment variables with the values of secret-looking names hidden (names kept);
        other values are scanned like text (a password in a URL, a token in extra args)."""
        found: list[str] = []
        shown: dict[str, str | None] = {}
        for name, value in env.items():
            if value is None:
                shown[name] = None
            elif self.is_secret(name) or str(value) in self.known:
                shown[name] = self._hide(str(value), found)
            else:
                shown[name] = self._scan(str(value), found, code=False)
        return shown, found

    # -- text
    def text(self, text: str) -> tuple[str, list[str]]:
        """Free text (a log tail, a URL, a message) with secret assignments hidden."""
        found: list[str] = []
        return self._scan(text, found, code=False), found

    def diff(self, diff: str) -> tuple[str, int, list[str]]:
        """A unified diff with the values of secret-looking assignments hidden in its content
        lines (headers and binary patches are left whole, so hunks still line up).

        Returns the redacted diff, the number of values hidden (markers written, so a
        ``Bearer <token>`` hidden whole counts once, though its bare token is also among the
        values found) and the values."""
        found: list[str] = []
        already = len(MARKER_RE.findall(diff))
        lines = diff.split("\n")
        code = header = binary = False
        for index, line in enumerate(lines):
            if line.startswith("diff --git "):
                code, header, binary = _code_path(line.rsplit(" ", 1)[-1]), True, False
                continue
            if line == "GIT binary patch":
                binary = True
            if header and line.startswith("+++ "):
                code = _code_path(line[4:])
            if line.startswith("@@"):
                header = False
            elif header or binary or line[:1] not in ("+", "-", " "):
                continue
            lines[index] = self._scan(line, found, code=code)
        text = "\n".join(lines)
        return text, len(MARKER_RE.findall(text)) - already, found

    def _scan(self, text: str, found: list[str], *, code: bool) -> str:
        text = self._known(text)
        if code:
            # In code only literals are secrets: "value" after a secret name, and what is
            # written inside string literals ("--api-key=...", "Authorization: ...").
            text = self._assignments(text, found, code=True)
            text = self._named(_PAIR, text, found, code=True)
            return _LITERAL.sub(lambda m: self._literal(m, found), text)
        text = _USERINFO.sub(lambda m: m["pre"] + self._hide(m["value"], found) + "@", text)
        # "authorization=Bearer <token>": after "=" a value is one word (the scheme), so the
        # token after it is hidden first; "Authorization: Bearer <token>" is hidden whole below.
        text = _EQ_SCHEME.sub(lambda m: m[0].replace(m["cred"], self._hide(m["cred"], found)), text)
        text = self._assignments(text, found, code=False)
        text = self._named(_PAIR, text, found)
        text = self._named(_SPACED, text, found)
        return _BEARER.sub(lambda m: m[0].replace(m["value"], self._hide(m["value"], found)), text)

    def _known(self, text: str) -> str:
        return scrub(text, self.known) if self.known and text else text

    def _literal(self, match: re.Match[str], found: list[str]) -> str:
        quote = '"' if match["d"] is not None else "'"
        inner = match["d"] if match["d"] is not None else match["s"]
        return quote + self._scan(inner, found, code=False) + quote

    def _assignments(self, text: str, found: list[str], *, code: bool) -> str:
        def replace(m: re.Match[str]) -> str | None:
            group = "value" if m["value"] is not None else "value2"
            value = m[group]
            if not self._secret_here(m["name"], value, code=code):
                return None
            if _SCHEME_WORD.fullmatch(value) and MARKER_RE.match(text, m.end() + 1):
                return None  # "authorization=Bearer <marker>": the scheme is no secret
            return _replace_value(m, group, self._hide_quoted(value, found))

        return _each(_ASSIGN, text, replace)

    def _named(
        self, pattern: re.Pattern[str], text: str, found: list[str], *, code: bool = False
    ) -> str:
        def replace(m: re.Match[str]) -> str | None:
            if not self._secret_here(m["name"], m["value"], code=code):
                return None
            return _replace_value(m, "value", self._hide_quoted(m["value"], found))

        return _each(pattern, text, replace)

    def _secret_here(self, name: str, value: str, *, code: bool) -> bool:
        """Whether ``value`` after ``name`` is a secret to hide. In code only a literal is
        (not an expression, not an f-string with fields) and a lone generic word is no name
        of a credential."""
        if not self.is_secret(name):
            return False
        if not code:
            return True
        literal = re.fullmatch(r"""([rRbBuUfF]{0,2})(["']).*\2""", value, re.DOTALL)
        if literal is None or ("f" in literal[1].lower() and "{" in value):
            return False
        found = words(name)
        return not (len(found) == 1 and found[0] in CODE_GENERIC) or bool(
            self._extra is not None and self._extra.match(normal_name(name))
        )

    def _hide_quoted(self, value: str, found: list[str]) -> str:
        """A value as written, quotes (and a string prefix such as ``b``) kept around it."""
        match = re.fullmatch(r"""([rRbBuUfF]{0,2})(["'])(.*)\2""", value, re.DOTALL)
        if match:
            return match[1] + match[2] + self._hide(match[3], found) + match[2]
        return self._hide(value, found)


def _replace_value(match: re.Match[str], group: str, new: str) -> str:
    start, end = match.span(group)
    base = match.start()
    return match[0][: start - base] + new + match[0][end - base :]


def _each(
    pattern: re.Pattern[str], text: str, replace: Callable[[re.Match[str]], str | None]
) -> str:
    """Each match of ``pattern`` replaced by ``replace(match)``, or kept when it gives None.

    Unlike ``re.sub``, a kept match consumes only its name, so ``url: https://h/?token=x``
    still finds ``token=x`` inside the value of ``url``; matches inside a marker are kept.
    """
    spans = [m.span() for m in MARKER_RE.finditer(text)]
    parts: list[str] = []
    done = search = 0
    while (m := pattern.search(text, search)) is not None:
        new = None if any(a <= m.start() < b for a, b in spans) else replace(m)
        if new is None:
            search = max(m.end("name"), m.start() + 1)
            continue
        parts += [text[done : m.start()], new]
        done = search = max(m.end(), m.start() + 1)
    return "".join([*parts, text[done:]])


__all__ = [
    "MARKER_RE",
    "SECRET_WORDS",
    "Redactor",
    "is_marker",
    "marker",
    "normal_name",
    "parse_patterns",
    "scrub",
    "scrub_all",
    "words",
]
