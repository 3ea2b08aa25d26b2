"""Dispatch proof: evidence that a candidate run took the path it claims to take.

A candidate that silently falls back to the control's code path is bit-identical to it and
"faster" by noise alone, so a lossless or speed verdict of such a run says nothing. ``proof=`` is
a regular expression searched in each candidate run's stdout and stderr, or a callable given the
run's result that returns True (proven) or a reason (not proven). Each candidate run's finding is
recorded; a PASS whose candidate runs are not all proven is INCONCLUSIVE.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from ..core.records import Record, RecordError, from_json, spec
from ..core.verdict import Verdict
from ..errors import ConfigError

#: ``proof=``: a pattern (text or compiled), or a callable given the run result.
Proof = Union[str, "re.Pattern[str]", Callable[[Any], object]]

#: At most this much of each output stream is searched (the end of a longer one).
SEARCH_BYTES = 64 << 20
_EVIDENCE_CHARS = 200


def describe(proof: Proof | None) -> str | None:
    """How a rule is written in the receipt: ``regex <pattern>`` or ``callable <name>``."""
    if proof is None:
        return None
    if isinstance(proof, str):
        return f"regex {proof}"
    if isinstance(proof, re.Pattern):
        return f"regex {proof.pattern}"
    name = getattr(proof, "__qualname__", None) or type(proof).__name__
    return f"callable {name}"


def check_rule(proof: object, source: str) -> Proof | None:
    """``proof`` checked when the test states it: a bad pattern is a usage error, now."""
    if proof is None:
        return None
    if isinstance(proof, str):
        try:
            re.compile(proof)
        except re.error as exc:
            raise ConfigError(source, proof, f"not a regular expression: {exc}") from None
        return proof
    if isinstance(proof, re.Pattern) or callable(proof):
        return proof
    raise ConfigError(
        source, proof, "give a regular expression, or a callable given the run that returns True"
    )


def _streams(result: object) -> list[Path]:
    """The stdout and stderr files of a model_run result (or a server's record)."""
    found = []
    record = getattr(result, "record", None)
    for name in ("stdout_path", "stderr_path"):
        value = getattr(result, name, None)
        if value is None and isinstance(record, Mapping):
            value = record.get(name)
        if value is None and isinstance(result, Mapping):
            value = result.get(name)
        if isinstance(value, (str, Path)) and str(value):
            found.append(Path(value))
    return found


def _read_tail(path: Path) -> str:
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - SEARCH_BYTES))
        return handle.read().decode("utf-8", "replace")


def run_name(result: object) -> str | None:
    record = getattr(result, "record", None)
    if not isinstance(record, Mapping):
        record = result if isinstance(result, Mapping) else None
    name = record.get("name") if record is not None else None
    return name if isinstance(name, str) else None


@dataclass(frozen=True)
class Finding(Record):
    """One candidate run examined for its proof: ``found`` or not, and the ``evidence`` (the
    matching line, or why nothing was found); ``stream``: the file the line was found in."""

    run: str | None
    found: bool
    evidence: str
    stream: str | None = spec(None, omit="none")

    @classmethod
    def from_json(cls, data: object) -> Finding:
        """Read leniently (a receipt may be hand-edited): a value that does not fit reads as
        absent, so only ``found: true`` proves; what is no object is refused."""
        if not isinstance(data, Mapping):
            raise RecordError(f"Finding: expected an object, got {type(data).__name__}")
        return from_json(cls, data, problems=[])


@dataclass(frozen=True)
class ProofRecord(Record):
    """The receipt's ``proof`` of a ``lossless.compare``: the rule, as :func:`describe` writes
    it, and the finding of each candidate run."""

    rule: str
    runs: tuple[Finding, ...]

    @classmethod
    def from_json(cls, data: object) -> ProofRecord:
        """Read leniently, like its findings: a run that is no object is left out."""
        return from_json(cls, data, problems=[])


def examine(proof: Proof, result: object) -> Finding:
    """One candidate run's finding (evidence: the matching line, or why nothing was found)."""
    run = run_name(result)
    if isinstance(proof, (str, re.Pattern)):
        pattern = re.compile(proof) if isinstance(proof, str) else proof
        streams = _streams(result)
        if not streams:
            return Finding(
                run,
                False,
                "the candidate returned no run with stdout/stderr to search (return the "
                "model_run result, or give proof= a callable)",
            )
        evidence = ""
        for stream in streams:
            try:
                text = _read_tail(stream)
            except OSError as exc:
                evidence = f"{stream}: cannot be read: {exc.strerror or exc}"
                continue
            match = pattern.search(text)
            if match:
                start = text.rfind("\n", 0, match.start()) + 1
                end = text.find("\n", match.end())
                line = text[start : end if end >= 0 else len(text)]
                return Finding(
                    run, True, f"{stream.name}: {line[:_EVIDENCE_CHARS]}", stream=str(stream)
                )
        return Finding(
            run, False, evidence or f"/{pattern.pattern}/ not found in the run's stdout or stderr"
        )
    try:
        answer = proof(result)
    except Exception as exc:  # the user's check failing is a finding, not a crash
        return Finding(run, False, f"the proof callable raised {type(exc).__name__}: {exc}")
    if answer is True:
        return Finding(run, True, "the proof callable returned True")
    return Finding(
        run,
        False,
        str(answer)
        if isinstance(answer, str) and answer
        else f"the proof callable returned {answer!r}",
    )


def unproven(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if not f.found]


def apply(verdict: Verdict | str, findings: Iterable[Finding] | None) -> Verdict:
    """A PASS with an unproven candidate run is INCONCLUSIVE; FAIL and INCONCLUSIVE stand.

    ``findings`` is None when no rule was given; an empty list (a rule, but no candidate run
    examined) proves nothing either.
    """
    word = Verdict.parse(verdict) or Verdict.FAIL
    if findings is None or word != Verdict.PASS:
        return word
    listed = list(findings)
    return Verdict.INCONCLUSIVE if not listed or unproven(listed) else word


def reason(findings: Iterable[Finding]) -> str:
    """The sentence an INCONCLUSIVE verdict gives for missing proof."""
    missing = unproven(list(findings))
    if not missing:
        return "no candidate run was examined for its proof"
    first = missing[0]
    return (
        f"no evidence that the candidate's path ran: {len(missing)} candidate run(s) without "
        f"proof (first: {first.run or 'a run'}: {first.evidence})"
    )
