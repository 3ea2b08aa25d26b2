"""End to end (#22): the line saying that a test waits for devices is a line of its own and
never breaks pytest's progress line: the dots before it end their line, and the waiting test's
file is written again after it, so its result and the percentage land where pytest puts them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

HOLDER = """
import sys, time
from pathlib import Path
from pytest_lossless.devices import Allocator, CpuBackend
allocation = Allocator(
    [CpuBackend()], backend="cpu", pool=("0",), lock_dir=Path(sys.argv[1]), timeout=30
).acquire(1, "holder")
Path(sys.argv[2]).write_text("held")
time.sleep(float(sys.argv[3]))
allocation.release()
"""

TESTS = """
import pytest

def test_before():
    pass

@pytest.mark.npu(devices=1)
def test_waits(devices):
    pass

def test_after():
    pass
"""


def _hold(locks: Path, seconds: float) -> subprocess.Popen[str]:
    held = locks.parent / "held"
    held.unlink(missing_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(locks), str(held), str(seconds)], text=True
    )
    deadline = time.monotonic() + 30
    while not held.exists():
        assert holder.poll() is None, "the holder ended early"
        assert time.monotonic() < deadline, "the holder never took the device"
        time.sleep(0.05)
    return holder


@pytest.mark.slow
@pytest.mark.parametrize("verbosity", ["", "-q", "-v"])
def test_the_wait_line_keeps_the_progress_line_whole(
    pytester: pytest.Pytester, tmp_path: Path, verbosity: str
) -> None:
    locks = tmp_path / "locks"
    pytester.makepyfile(test_wait=TESTS)
    holder = _hold(locks, 5.0)
    try:
        args = ["-p", "no:cacheprovider", "--lossless-backend=cpu", "--lossless-devices=0"]
        result = pytester.runpytest_subprocess(
            *args, f"--lossless-lock-dir={locks}", *([verbosity] if verbosity else [])
        )
    finally:
        holder.wait(30)
    result.assert_outcomes(passed=3)
    lines = result.outlines
    (at,) = [i for i, line in enumerate(lines) if "waits for 1 cpu device(s)" in line]
    assert lines[at].startswith("pytest-lossless: test_wait.py::test_waits waits for"), lines
    before, after = lines[at - 1], lines[at + 1]
    if verbosity == "-v":
        assert before.strip() == "test_wait.py::test_waits"  # as under pytest's live logs
        assert after.startswith("test_wait.py::test_waits PASSED")
    elif verbosity == "-q":
        assert before == "."
        assert after.startswith("..")
        assert after.endswith("[100%]")
    else:
        assert before == "test_wait.py ."
        assert after.startswith("test_wait.py ..")
        assert after.endswith("[100%]")
