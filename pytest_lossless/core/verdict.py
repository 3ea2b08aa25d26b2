"""The one vocabulary: verdicts (PASS, LOSSY-PASS, INCONCLUSIVE, FAIL, in order of severity),
row statuses (a verdict, ERROR or UNCHECKED, each possibly expected) and golden updates.

Every place that compares, combines or summarises verdicts uses :class:`Verdict`, so "the worst
of its parts" means the same thing in the terminal, the receipt, SUMMARY.md and JUnit; a row's
status is derived once (:func:`status_of`) and read as an enum everywhere after, never parsed
back out of the text a table shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any


class _Word(str, Enum):
    """An enum equal to, printed as and formatted as its word."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Verdict(_Word):
    """A verdict, equal to its word (``Verdict.PASS == "PASS"``) and ordered by severity."""

    PASS = "PASS"
    #: Passed a declared lossy gate (``tolerance``, ``ulp``): never reported as lossless.
    LOSSY_PASS = "LOSSY-PASS"
    INCONCLUSIVE = "INCONCLUSIVE"
    FAIL = "FAIL"

    @property
    def severity(self) -> int:
        """0 for PASS up to 3 for FAIL: the worse, the larger."""
        return _SEVERITY[self]

    @property
    def passed(self) -> bool:
        """PASS or LOSSY-PASS."""
        return self in (Verdict.PASS, Verdict.LOSSY_PASS)

    @classmethod
    def parse(cls, word: object) -> Verdict | None:
        """The verdict a word names, or None for anything else (a forged or unknown word)."""
        if isinstance(word, Verdict):
            return word
        if isinstance(word, str):
            try:
                return cls(word)
            except ValueError:
                return None
        return None

    @classmethod
    def worst(cls, verdicts: Iterable[object]) -> Verdict | None:
        """The worst of ``verdicts``; an unknown word counts as FAIL; None when there are none."""
        worst: Verdict | None = None
        for word in verdicts:
            verdict = cls.parse(word) or cls.FAIL
            if worst is None or verdict.severity > worst.severity:
                worst = verdict
        return worst


_SEVERITY = {Verdict.PASS: 0, Verdict.LOSSY_PASS: 1, Verdict.INCONCLUSIVE: 2, Verdict.FAIL: 3}

#: The words of :class:`Verdict`, from best to worst.
VERDICT_WORDS = tuple(v.value for v in sorted(Verdict, key=lambda v: v.severity))


class Status(_Word):
    """What one row of the verdict table says about one check: a verdict, or that the check
    could not run (ERROR) or was not made (UNCHECKED). Equal to its word."""

    PASS = "PASS"
    LOSSY_PASS = "LOSSY-PASS"
    INCONCLUSIVE = "INCONCLUSIVE"
    FAIL = "FAIL"
    #: The check raised (a missing golden, an integrity error, a changed gate).
    ERROR = "ERROR"
    #: A golden in the manifest, or a frozen plan, the test did not check.
    UNCHECKED = "UNCHECKED"

    @property
    def severity(self) -> int:
        """As :attr:`Verdict.severity`; ERROR and UNCHECKED weigh as FAIL."""
        return self.verdict.severity

    @property
    def verdict(self) -> Verdict:
        """The verdict this status counts as in "the worst of its parts"."""
        return Verdict.parse(self.value) or Verdict.FAIL


class Update(_Word):
    """What ``--update-goldens`` did to one artifact: a row status of its own, not a verdict."""

    #: Compared within the test, written when the test passes.
    STAGED = "STAGED"
    CREATED = "CREATED"
    CHANGED = "CHANGED"
    UNCHANGED = "UNCHANGED"
    REMOVED = "REMOVED"
    #: Another session changed the golden meanwhile: nothing was written.
    CONFLICT = "CONFLICT"
    REFUSED = "REFUSED"

    @property
    def failing(self) -> bool:
        return self in (Update.CONFLICT, Update.REFUSED)

    @classmethod
    def of_action(cls, action: str) -> Update | None:
        """The update an event's ``action`` (``created``...) names; None for a folder's
        recovery (``restored``, ``cleaned``, ``kept``), which is no artifact's row."""
        try:
            return cls(action.upper())
        except ValueError:
            return None


def status_of(
    verdict: object, *, lossy: bool = False, expect: Iterable[object] | None = None
) -> tuple[Status, bool]:
    """A row's status, derived once from a verdict, its lossiness and ``expect=``: the status
    and whether the test asserted it (``expect=("FAIL",)`` and a FAIL: an expected FAIL).

    A PASS of a lossy gate is LOSSY-PASS, never PASS; an unknown word is a FAIL."""
    found = Verdict.parse(verdict) or Verdict.FAIL
    status = Status(found.value)
    if status is Status.PASS and lossy:
        status = Status.LOSSY_PASS
    wanted = None if expect is None else {Verdict.parse(w) for w in expect}
    return status, wanted is not None and found in wanted


#: A pytest phase outcome as the receipt records it, and the verdict it adds to the overall
#: one (None: nothing). A test that failed, errored or was interrupted is never a PASS.
OUTCOME_VERDICT: dict[str, Verdict | None] = {
    "passed": None,
    "skipped": None,
    "inconclusive": Verdict.INCONCLUSIVE,
    "failed": Verdict.FAIL,
    "interrupted": Verdict.FAIL,
}


def outcome_verdict(outcome: object) -> Verdict | None:
    """The verdict a test's phase outcomes (``{"call": "failed", ...}``) add to its overall
    verdict: the worst of its phases; an unknown word counts as FAIL."""
    if not isinstance(outcome, Mapping):
        return None
    parts = [OUTCOME_VERDICT.get(str(word), Verdict.FAIL) for word in outcome.values()]
    return Verdict.worst(v for v in parts if v is not None)


def judged_entries(
    receipt: Mapping[str, Any],
) -> list[tuple[str, Mapping[str, Any], Verdict | None]]:
    """Each judged entry of a receipt as recorded, in its order: ``(block, entry, verdict)``
    for every golden gate (``gates``: PASS, LOSSY-PASS when it passed within tolerance, FAIL
    when it failed or could not compare), ``lossless.compare`` (``lossless``: its verdict,
    LOSSY-PASS for a PASS within tolerance) and ``speed_gate`` (``speed``: its verdict); None
    for a word that is no verdict. Entries that are not JSON objects are left out. What a
    reader makes of ``expect=`` and errors is its own (``bisect``, the attestation)."""
    found: list[tuple[str, Mapping[str, Any], Verdict | None]] = []
    for block in ("gates", "lossless", "speed"):
        for entry in receipt.get(block) or []:
            if not isinstance(entry, Mapping):
                continue
            if block == "gates":
                passed, lossless = entry.get("passed") is True, entry.get("lossless") is True
                verdict = Verdict.FAIL if not passed else Verdict.PASS if lossless else None
                found.append((block, entry, verdict or Verdict.LOSSY_PASS))
                continue
            verdict = Verdict.parse(entry.get("verdict"))
            if block == "lossless" and verdict is Verdict.PASS and entry.get("lossy"):
                verdict = Verdict.LOSSY_PASS
            found.append((block, entry, verdict))
    return found
