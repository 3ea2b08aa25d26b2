"""End to end, from outside (#20): a comparing session's goldens written while it ran. The
session's end asks whether the source tree is still what its receipts recorded, and left the
whole goldens folder out of the question, in every mode, since ``--update-goldens`` writes
there. So a test of a pull request that wrote its own golden during a comparing run (here by
running ``--update-goldens`` for itself first) PASSed with a clean tree and verified clean,
though its golden is in no commit: on a clone of that revision the golden does not exist.
Only an updating session's goldens are its own writes; a comparing session's goldens are
source like any other file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SELF_MADE = """
import os
import subprocess
import sys

import numpy as np

def test_self_made(golden):
    if not os.environ.get("NESTED"):  # writes its own golden, then compares with it
        subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--update-goldens",
             "--lossless-receipts", os.environ["ELSEWHERE"], __file__],
            env=dict(os.environ, NESTED="1"), check=True, capture_output=True,
        )
    golden.check("e.npy", np.arange(7))

def test_honest(golden):
    golden.check("h.npy", np.arange(3))
"""

FLAGGED = "changed during the session"


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, check=False, env={**os.environ, **env}
    )


def _git(cwd: Path, *args: str) -> None:
    done = _run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd)
    assert done.returncode == 0, done.stderr


def test_a_golden_written_during_a_comparing_session_is_a_source_change(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "test_self.py").write_text(SELF_MADE)
    (root / ".gitignore").write_text("lossless-receipts/\n")
    _git(root, "init", "-q", ".")
    made = _run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--update-goldens",
         "-k", "test_honest"], root, NESTED="1",
    )  # fmt: skip
    assert made.returncode == 0, made.stdout
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "base: test_self_made's golden is not committed")
    # An honest comparing session is clean.
    done = _run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-k", "honest",
         f"--basetemp={tmp_path}/bt"], root,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    assert FLAGGED not in done.stdout, done.stdout
    done = _run(  # pytest's default basetemp holds this project: another one, outside it
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--basetemp={tmp_path}/bt"],
        root,
        ELSEWHERE=str(tmp_path / "elsewhere"),
    )
    assert done.returncode == 0, done.stdout  # the test passed against the golden it wrote
    assert (root / "goldens/test_self/test_self_made/manifest.json").is_file()
    flagged = [line for line in done.stdout.splitlines() if FLAGGED in line]
    assert flagged, done.stdout
    verified = _run([sys.executable, "-m", "pytest_lossless", "verify", "lossless-receipts"], root)
    assert verified.returncode == 1, verified.stdout
    assert "the receipts do not describe one source state" in verified.stdout
