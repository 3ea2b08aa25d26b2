"""End to end (#20 leftovers): an output that lost everything (a video none of whose frames
decodes, audio with no sample, a tensor with no element) compared with a golden that has them is
a FAIL naming both counts, never an ERROR: in the table, the receipt and JUnit. A shortened audio
track inside a container FAILS naming its samples and duration."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.e2e.mediagen import FFMPEG, gray_frames, mux, tone, write_video, write_wav

pytestmark = pytest.mark.slow

CHECKS = """
import numpy as np
import pytest
from pathlib import Path

HERE = Path(__file__).parent

@pytest.mark.lossless
def test_clip(golden):
    golden.check("clip.mp4", HERE / "clip.mp4")

@pytest.mark.lossless
def test_audio(golden):
    golden.check("audio.wav", HERE / "audio.wav")

@pytest.mark.lossless
def test_tensor(golden):
    golden.check("latent.npy", np.load(HERE / "latent.npy", allow_pickle=False))
"""


def no_frame_decodes(source: Path, out: Path) -> Path:
    """``source`` remuxed with its index first (faststart) and cut just after the media data
    began: ffmpeg opens it and finds its video stream, but no frame of it decodes."""
    moved = out.with_name("faststart.mp4")
    args = ["-y", "-v", "error", "-i", str(source), "-c", "copy", "-movflags", "+faststart"]
    subprocess.run([FFMPEG, *args, str(moved)], check=True)
    data = moved.read_bytes()
    out.write_bytes(data[: data.index(b"mdat") + 12])
    moved.unlink()
    return out


def _receipt(root: Path, name: str) -> dict[str, Any]:
    """The latest session's receipt of the test whose id ends with ``name``."""
    session = max(p for p in (root / "lossless-receipts").iterdir() if p.is_dir())
    for path in session.glob("*.json"):
        data: dict[str, Any] = json.loads(path.read_text())
        if str(data.get("test_id", "")).endswith(name):
            return data
    raise AssertionError(f"no receipt of {name} in {session}")


def _junit_verdicts(path: Path) -> dict[str, str]:
    return {
        str(case.get("name")): str(prop.get("value"))
        for case in ET.parse(path).iter("testcase")
        for prop in case.iter("property")
        if prop.get("name") == "lossless_verdict"
    }


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    root = pytester.path
    write_video(root / "clip.mp4", gray_frames())
    write_wav(root / "audio.wav", tone())
    np.save(root / "latent.npy", np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
    pytester.makepyfile(test_empty=CHECKS)
    assert pytester.runpytest("--update-goldens").ret == 0
    return root


def test_an_output_that_lost_everything_is_a_fail_naming_both_counts(
    pytester: pytest.Pytester, project: Path
) -> None:
    no_frame_decodes(project / "clip.mp4", project / "cut.mp4")
    (project / "cut.mp4").replace(project / "clip.mp4")
    write_wav(project / "audio.wav", tone()[:0])
    np.save(project / "latent.npy", np.zeros((0, 8), dtype=np.float32))
    result = pytester.runpytest("--lossless", "--junitxml=junit.xml")
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert "frame count: expected 12, obtained 0" in out
    assert "sample count: expected 1600, obtained 0" in out
    assert "shape: expected (8, 8), obtained (0, 8)" in out
    table = out[out.index("gates and verdicts") :]
    result.stdout.fnmatch_lines_random(
        [
            "FAIL *test_clip*clip.mp4*",
            "FAIL *test_audio*audio.wav*",
            "FAIL *test_tensor*latent.npy*",
        ]
    )
    assert "ERROR" not in table, table
    # The canary copies the golden when the output has nothing to change: proved, not "not run".
    result.stdout.fnmatch_lines_random(
        [
            "*audio/decoded: FAIL as required ('audio.wav': sample * of channel 0*",
            "*tensor/elementwise: FAIL as required ('latent.npy': element *",
            "*video/decoded: FAIL as required ('clip.mp4': frame 6: *",
        ]
    )
    for name in ("test_clip", "test_audio", "test_tensor"):
        receipt = _receipt(project, name)
        (gate,) = receipt["gates"]
        assert "error" not in gate, gate
        assert gate["passed"] is False
        assert receipt["verdicts"]["overall"] == "FAIL"
    assert set(_junit_verdicts(project / "junit.xml").values()) == {"FAIL"}


TRACKS = """
import pytest
from pathlib import Path

HERE = Path(__file__).parent

@pytest.mark.lossless
@pytest.mark.parametrize("name", ["aac.mp4", "pcm.mov"])
def test_track(golden, name):
    golden.check(name, HERE / name)
"""


def test_a_shortened_audio_track_in_a_container_fails_naming_samples_and_duration(
    pytester: pytest.Pytester,
) -> None:
    """The mission's first audit failure: a validator that let a truncated audio track pass.
    The video is the same, the AAC (or PCM) track beside it lost its second half."""
    root = pytester.path
    clip = write_video(root / "frames.mp4", gray_frames())
    whole, half = tone(8000), tone(8000)[:4000]
    for name, codec in (("aac.mp4", "aac"), ("pcm.mov", "pcm_s16le")):
        mux(clip, write_wav(root / "whole.wav", whole), root / name, codec)
    pytester.makepyfile(test_tracks=TRACKS)
    assert pytester.runpytest("--update-goldens").ret == 0
    for name, codec in (("aac.mp4", "aac"), ("pcm.mov", "pcm_s16le")):
        mux(clip, write_wav(root / "half.wav", half), root / name, codec)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "audio stream 0: sample count: expected 8000, obtained 4000" in out
    assert "audio stream 0: duration: expected 0.5, obtained 0.25" in out
    for name in ("aac.mp4", "pcm.mov"):
        receipt = _receipt(root, f"test_track[{name}]")
        (gate,) = receipt["gates"]
        assert gate["passed"] is False
        assert "error" not in gate


ALLOWED = """
import numpy as np
import pytest
from pathlib import Path

HERE = Path(__file__).parent

@pytest.mark.lossless
def test_clip(golden):
    golden.check("clip.mp4", HERE / "clip.mp4", allow_empty=True)

@pytest.mark.lossless
def test_audio(golden):
    golden.check("audio.wav", HERE / "audio.wav", allow_empty=True)

@pytest.mark.lossless
def test_tensor(golden):
    golden.check("latent.npy", np.load(HERE / "latent.npy", allow_pickle=False), allow_empty=True)
"""


def test_an_empty_output_is_never_stored_as_a_golden_unless_allowed(
    pytester: pytest.Pytester,
) -> None:
    """A golden with no frame (no sample, no element) would let every later output that lost
    everything PASS: --update-goldens refuses it, naming the file and what it lacks, as it
    refuses an empty file; ``allow_empty=True`` says an empty output is what the test expects."""
    root = pytester.path
    no_frame_decodes(write_video(root / "whole.mp4", gray_frames()), root / "clip.mp4")
    write_wav(root / "audio.wav", tone()[:0])
    np.save(root / "latent.npy", np.zeros((0, 8), dtype=np.float32))
    pytester.makepyfile(test_empty=CHECKS)
    result = pytester.runpytest("--update-goldens")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines_random(
        [
            "*clip.mp4: no frame decodes (video stream #0: 0 frames): refusing to store it as "
            "the golden 'clip.mp4'. If an empty output is what the test expects, pass "
            "allow_empty=True*",
            "*audio.wav: no sample (0 samples): refusing to store it as the golden 'audio.wav'*",
            "*: no element (shape (0, 8)): refusing to store it as the golden 'latent.npy'*",
        ]
    )
    assert not (root / "goldens").exists()
    pytester.makepyfile(test_empty=ALLOWED)
    assert pytester.runpytest("--update-goldens").ret == 0
    assert pytester.runpytest("--lossless").ret == 0
