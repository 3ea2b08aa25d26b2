"""The one verdict vocabulary: PASS, LOSSY-PASS, INCONCLUSIVE, FAIL, in order of severity.

Every place that compares, combines or summarises verdicts uses :class:`Verdict`, so "the worst
of its parts" means the same thing in the terminal, the receipt, SUMMARY.md and JUnit.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class Verdict(str, Enum):
    """A verdict, equal to its word (``Verdict.PASS == "PASS"``) and ordered by severity."""

    PASS = "PASS"
    #: Passed a declared lossy gate (``tolerance``, ``ulp``): never reported as lossless.
    LOSSY_PASS = "LOSSY-PASS"
    INCONCLUSIVE = "INCONCLUSIVE"
    FAIL = "FAIL"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

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
