"""End to end, from outside (#20): the command line given folders it cannot write. ``summary
--write`` on a folder whose ``.summary.lock`` cannot be opened (a read-only checkout of
downloaded receipts, or a name taken by a folder) ended in a Python traceback; every
subcommand's refusal is one line naming the file and the problem, with exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _lossless(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_lossless", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_summary_write_where_its_lock_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    receipts = tmp_path / "receipts"
    (receipts / ".summary.lock").mkdir(parents=True)  # the lock's name taken by a folder
    done = _lossless("summary", "--write", receipts, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("pytest-lossless summary: "), line
    assert str(receipts / ".summary.lock") in line, line
    assert "a directory" in line, line
    assert not (receipts / "SUMMARY.md").exists()


def _git(cwd: Path, *args: str) -> None:
    done = subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("where", ["a-file", "under-a-file"])
def test_bisect_out_that_cannot_be_a_folder_is_one_line(tmp_path: Path, where: str) -> None:
    """``bisect --out`` naming a file (or a folder below one) ended in a FileExistsError or
    NotADirectoryError traceback after GOOD and BAD were checked."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", ".")
    for n in (1, 2):
        (repo / "test_t.py").write_text(f"def test_t():\n    assert {n}\n")
        _git(repo, "add", ".")
        _git(repo, "commit", "-qm", f"c{n}")
    taken = tmp_path / "taken.txt"
    taken.write_text("not a folder\n")
    out = taken if where == "a-file" else taken / "log"
    done = _lossless("bisect", "HEAD~1", "HEAD", "--out", out, "--", "-q", cwd=repo)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"pytest-lossless bisect: --out {out}: "), line
    assert taken.read_text() == "not a folder\n"
