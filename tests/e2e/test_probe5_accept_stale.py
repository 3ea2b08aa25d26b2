"""End to end, from outside (#20): ``accept`` of an export older than the goldens. An export
says what its session compared with (the receipt's golden evidence: the golden's SHA-256, or
none for a new one); a golden committed since (a teammate's regeneration, merged while the
export waited for review) was overwritten without a word, printed as an ordinary ``CHANGED``.
``accept`` now refuses an artifact whose golden on this checkout is neither the one the
export compared with nor already the exported one, naming both; accepting twice is
``UNCHANGED``.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SUITE = """
import os

import numpy as np
import pytest

V = int(os.environ.get("PROBE_VERSION", "0"))


@pytest.mark.lossless
def test_old(golden):
    golden.check("a.npy", lambda: np.arange(4) + V)


@pytest.mark.lossless
def test_new(golden):
    golden.check("n.npy", lambda: np.arange(3) * (V + 1))
"""


def _accept(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "accept", "exp", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_golden_committed_after_the_export_is_not_overwritten(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    old = pytester.path / "goldens/test_suite/test_old/a.npy"
    new = pytester.path / "goldens/test_suite/test_new/n.npy"
    monkeypatch.setenv("PROBE_VERSION", "0")
    assert pytester.runpytest("--update-goldens", "-k", "test_old").ret == 0
    monkeypatch.setenv("PROBE_VERSION", "1")  # the change under review: test_new has no golden
    assert pytester.runpytest("--lossless", "--lossless-export", "exp").ret != 0
    monkeypatch.setenv("PROBE_VERSION", "2")  # meanwhile, both goldens regenerated and merged
    assert pytester.runpytest("--update-goldens").ret == 0
    merged = {old: _sha(old), new: _sha(new)}

    done = _accept(pytester.path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    text = done.stdout + done.stderr
    assert text.count("REFUSED") == 2, text
    assert "changed since the export" in text
    assert "a golden was written since the export" in text
    assert {path: _sha(path) for path in merged} == merged

    # An export made against the current goldens is accepted, and accepting it twice is a no-op.
    monkeypatch.setenv("PROBE_VERSION", "1")
    assert pytester.runpytest("--lossless", "--lossless-export", "exp").ret != 0
    first = _accept(pytester.path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("CHANGED") == 2, first.stdout
    again = _accept(pytester.path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("UNCHANGED") == 2, again.stdout
    pytester.runpytest("--lossless").assert_outcomes(passed=2)
