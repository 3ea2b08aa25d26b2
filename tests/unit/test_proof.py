"""Dispatch proof: what counts as evidence that a candidate's path ran, and how it composes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.compare import proof
from pytest_lossless.core.verdict import Verdict
from pytest_lossless.errors import ConfigError


class _Run:
    def __init__(self, folder: Path, stdout: str, stderr: str = "") -> None:
        self.stdout_path = folder / "stdout.txt"
        self.stderr_path = folder / "stderr.txt"
        self.stdout_path.write_text(stdout)
        self.stderr_path.write_text(stderr)
        self.record = {"kind": "command", "name": "command-07"}


def test_a_pattern_is_found_in_stderr_with_its_line(tmp_path: Path) -> None:
    run = _Run(tmp_path, "generated 5 s\n", "warming up\nref2va: dispatch batched chunk=4\n")
    finding = proof.examine(r"dispatch batched", run)
    assert finding.found is True
    assert finding.run == "command-07"
    assert finding.evidence == "stderr.txt: ref2va: dispatch batched chunk=4"
    assert proof.examine(re.compile(r"chunk=\d+"), run).found is True


def test_a_missing_line_is_named(tmp_path: Path) -> None:
    finding = proof.examine(r"dispatch batched", _Run(tmp_path, "ref2va: dispatch reference\n"))
    assert finding.found is False
    assert "/dispatch batched/ not found" in finding.evidence


def test_a_result_without_output_proves_nothing() -> None:
    finding = proof.examine(r"x", {"clip.mp4": "/tmp/clip.mp4"})
    assert finding.found is False
    assert "no run with stdout/stderr" in finding.evidence


def test_callables_return_true_or_a_reason(tmp_path: Path) -> None:
    run = _Run(tmp_path, "")
    assert proof.examine(lambda r: True, run).found is True
    assert proof.examine(lambda r: "kernel counter stayed 0", run).evidence == (
        "kernel counter stayed 0"
    )
    assert proof.examine(lambda r: 1, run).found is False  # only True proves

    def broken(result: Any) -> bool:
        raise RuntimeError("no counters")

    assert "raised RuntimeError: no counters" in proof.examine(broken, run).evidence


def test_a_bad_rule_is_refused_when_stated() -> None:
    with pytest.raises(ConfigError, match="not a regular expression"):
        proof.check_rule("dispatch (", "lossless.compare(proof)")
    with pytest.raises(ConfigError, match="give a regular expression"):
        proof.check_rule(42, "speed_gate(proof)")


@pytest.mark.parametrize(
    ("verdict", "findings", "expected"),
    [
        (Verdict.PASS, None, Verdict.PASS),  # no rule given
        (Verdict.PASS, [{"found": True}], Verdict.PASS),
        (Verdict.PASS, [{"found": True}, {"found": False}], Verdict.INCONCLUSIVE),
        (Verdict.PASS, [], Verdict.INCONCLUSIVE),  # a rule, but nothing examined
        (Verdict.FAIL, [{"found": False}], Verdict.FAIL),  # a difference stands
        ("INCONCLUSIVE", [{"found": True}], Verdict.INCONCLUSIVE),
    ],
)
def test_an_unproven_pass_is_inconclusive(
    verdict: Verdict | str, findings: list[dict[str, Any]] | None, expected: Verdict
) -> None:
    found = None if findings is None else [proof.Finding.from_json(f) for f in findings]
    assert proof.apply(verdict, found) == expected
