"""End to end, from outside (#20): two sessions given one ``--lossless-export DIR`` at once.
``export.json`` names one session (its settings, its host, its receipts), so two sessions cannot
share it: the second is refused at its start, naming the folder and the pid of the session
writing it, and the first session's export lists all it exported. Once that session ended, the
folder is free again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import os
import time
from pathlib import Path

import numpy as np

def test_a(golden):
    gate = Path(os.environ["PROBE_GATE"])
    (gate / "started").write_text("")
    deadline = time.monotonic() + 60
    while not (gate / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    golden.check("a.npy", np.arange(3))

def test_b(golden):
    golden.check("b.npy", np.arange(4))
"""


def _wait(path: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, "the first session ended before its test started"
        assert time.monotonic() < deadline, "the first session never started its test"
        time.sleep(0.05)


def test_a_second_session_is_refused_while_the_first_writes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_e=PROJECT)
    gate = pytester.path / "gate"
    gate.mkdir()
    monkeypatch.setenv("PROBE_GATE", str(gate))
    export = pytester.path / "shared-export"
    args = ["-p", "no:cacheprovider", "--lossless", "--lossless-export", str(export)]
    first = pytester.popen(
        [sys.executable, "-m", "pytest", *args, "-k", "test_a"],
        stdout=(pytester.path / "first.out").open("wb"),
        stderr=(pytester.path / "first.err").open("wb"),
    )
    try:
        _wait(gate / "started", first)
        second = pytester.runpytest_subprocess(*args, "-k", "test_b")
        assert second.ret == pytest.ExitCode.USAGE_ERROR, second.stdout.str()
        text = second.stderr.str()
        assert "is being written by another session" in text, text
        assert f"pid {first.pid}" in text, text
        assert "Traceback" not in text
    finally:
        (gate / "go").write_text("")
        first.wait(timeout=120)
    assert first.returncode == 1, (pytester.path / "first.out").read_text()
    listed = json.loads((export / "export.json").read_text())["entries"]
    assert [e["test"] for e in listed] == ["test_e.py::test_a"]
    artifacts = sorted(p.parent.parent.name for p in (export / "artifacts").rglob("*.npy"))
    assert len(artifacts) == len(listed), artifacts
    assert not [p.name for p in export.iterdir() if p.name.startswith(".")]
    # Free again once the first session ended: the next one replaces the export.
    third = pytester.runpytest_subprocess(*args, "-k", "test_b")
    third.assert_outcomes(failed=1)
    listed = json.loads((export / "export.json").read_text())["entries"]
    assert [e["test"] for e in listed] == ["test_e.py::test_b"]
