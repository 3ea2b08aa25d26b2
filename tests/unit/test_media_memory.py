"""The memory a decoded check takes does not grow with the clip: frames are hashed as they come
(a few reused buffers), never kept. Measured in fresh processes (VmHWM of the checking process,
ru_maxrss of its ffmpeg children), not timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_lossless import media

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

#: The fingerprint of a 15 s 640x480 clip (460,800 bytes a frame, 216 MB decoded) in a fresh
#: interpreter; the frame buffers in flight take at most core.digests.FRAME_BUFFER_BYTES.
_PEAK = """
import json, resource, sys
from pathlib import Path
from pytest_lossless import kinds
fp = kinds.fingerprint("video", Path(sys.argv[1]))
status = Path("/proc/self/status").read_text()
hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
print(json.dumps({
    "self_kib": hwm,
    "ffmpeg_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    "frames": fp["streams"][0]["frame_count"],
}))
"""
#: Fixed bounds, whatever the length: the interpreter with numpy and the frame buffers, and
#: ffmpeg's decoder (its reference frames and threads), for 640x480.
SELF_BOUND_KIB = 96 << 10
FFMPEG_BOUND_KIB = 192 << 10


def _clip(path: Path, seconds: int) -> Path:
    source = ["-f", "lavfi", "-i", f"testsrc2=s=640x480:r=24:d={seconds}"]
    encode = ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(path)]
    subprocess.run([media.ffmpeg_exe(), "-v", "error", "-y", *source, *encode], check=True)
    return path


def _peak(clip: Path) -> dict[str, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(clip)], check=True, capture_output=True, env=env
    )
    return dict(json.loads(out.stdout))


def test_peak_memory_of_a_15_s_check_has_a_bound_that_does_not_scale(tmp_path: Path) -> None:
    short = _peak(_clip(tmp_path / "short.mp4", 2))
    long = _peak(_clip(tmp_path / "long.mp4", 15))
    assert (short["frames"], long["frames"]) == (48, 360)
    decoded = 360 * 640 * 480 * 3 // 2 // 1024
    assert long["self_kib"] < SELF_BOUND_KIB < decoded, long
    assert long["ffmpeg_kib"] < FFMPEG_BOUND_KIB, long
    # 7.5x the frames; the checking process grows by the fingerprint alone (about 150 bytes a
    # frame), far less than one frame.
    assert long["self_kib"] - short["self_kib"] < 8 << 10, (short, long)
