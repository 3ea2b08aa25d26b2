"""A pytest session in a subprocess where no ``pytester`` exists: for module-scoped fixtures
that make one expensive session which several tests then read, each from a copy (#24)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def run_pytest(cwd: Path, basetemp: Path, *args: str) -> pytest.RunResult:
    """``pytester.runpytest_subprocess(*args)`` run from ``cwd``, with the environment pytester
    gives it (no inherited PYTEST_ADDOPTS, a HOME of its own, no colours) and ``basetemp``
    (made here) for the session's temporary folders."""
    home = basetemp / "home"
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "TOX_ENV_DIR")}
    env.update(HOME=str(home), PY_COLORS="0")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", f"--basetemp={basetemp / 'run'}", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return pytest.RunResult(
        done.returncode,
        done.stdout.splitlines(),
        done.stderr.splitlines(),
        time.monotonic() - started,
    )
