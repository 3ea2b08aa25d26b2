"""End to end: the receipts folder keeps the last ``lossless_receipts_keep`` sessions; older
finished sessions of this host are pruned at the session's end and the terminal says which,
but never a signed session, nor under a scheduler (its folder is shared by other shards)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

PROJECT = """
import pytest

@pytest.mark.lossless
def test_gate(lossless):
    lossless.compare(lambda: {"x": b"same"}, lambda: {"x": b"same"}, runs=2, label="c")
"""


def _sessions(receipts: Path) -> list[str]:
    return sorted(p.name for p in receipts.iterdir() if p.is_dir())


@pytest.fixture
def project(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> pytest.Pytester:
    monkeypatch.setenv("PYTEST_LOSSLESS_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    pytester.makepyfile(test_project=PROJECT)
    pytester.makeini("[pytest]\nlossless_receipts_keep = 2\n")
    return pytester


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    result = pytester.runpytest("--lossless", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    return result


@pytest.mark.slow
def test_the_last_sessions_are_kept_and_the_pruned_named(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    receipts = project.path / "lossless-receipts"
    _run(project)
    _run(project)
    first, second = _sessions(receipts)
    third = _run(project)
    assert first not in _sessions(receipts)
    assert len(_sessions(receipts)) == 2
    third.stdout.fnmatch_lines(
        [f"pytest-lossless: pruned 1 old session folder of this host (keeping the last 2*{first}"]
    )
    # The merged summary no longer names the pruned session.
    assert first not in (receipts / "SUMMARY.md").read_text()
    # A session that sign wrote Statements for (unsigned, for a CI's signer) is never pruned.
    out = project.path / "lossless-attestation" / second
    out.mkdir(parents=True)
    (out / "test-result.statement.json").write_text(json.dumps({"_type": "x"}))
    fourth = _run(project)
    assert second in _sessions(receipts)
    assert len(_sessions(receipts)) == 2 + 1
    assert "pytest-lossless: pruned" not in fourth.stdout.str()
    # Under a scheduler the folder is shared with other shards: nothing is pruned.
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    _run(project)
    assert len(_sessions(receipts)) == 4


@pytest.mark.slow
def test_keep_zero_keeps_every_session(project: pytest.Pytester) -> None:
    for _ in range(3):
        _run(project, "-o", "lossless_receipts_keep=0")
    assert len(_sessions(project.path / "lossless-receipts")) == 3
