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
