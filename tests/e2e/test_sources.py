"""End to end: ``model_run(sources=...)`` records which revision of each arm's source tree ran."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True,
                          check=True, env={**os.environ, **GIT})  # fmt: skip
    return done.stdout.strip()


def test_each_arm_records_its_source_revision(pytester: pytest.Pytester) -> None:
    engine = pytester.path / "engine"
    engine.mkdir()
    _git(engine, "init", "-q")
    (engine / "kernel.py").write_text("FAST = True\n")
    _git(engine, "add", "kernel.py")
    _git(engine, "commit", "-q", "-m", "fast kernel")
    revision = _git(engine, "rev-parse", "HEAD")
    (engine / "kernel.py").write_text("FAST = False\n")  # the candidate runs a dirty tree
    pytester.makepyfile(
        test_src=f"""
import sys
import pytest

def test_arm(model_run):
    model_run([sys.executable, "-c", "pass"], sources=[{str(engine)!r}])

def test_not_a_folder(model_run):
    model_run([sys.executable, "-c", "pass"], sources=[{str(engine / "kernel.py")!r}])
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*model_run(sources=...)=*kernel.py*not a folder*"])
    receipt = json.loads(
        next((pytester.path / "lossless-receipts").rglob("*test_arm.json")).read_text()
    )
    source = receipt["runs"][0]["sources"][str(engine.resolve())]
    assert source["revision"] == revision
    assert source["dirty"] is True
    assert source["publication"] == "unpublished"
