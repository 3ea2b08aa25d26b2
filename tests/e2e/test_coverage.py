"""End to end: an output truncated in every run is identical to itself, and still FAILs against
the request it was made for."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import sys
import pytest
from pytest_lossless import Media

WAV = (
    "import sys, numpy as np, soundfile as sf; n = round(float(sys.argv[2]) * 48000); "
    "sf.write(sys.argv[1] + '/audio.wav', np.zeros((n, 2), np.int16), 48000, subtype='PCM_16')"
)

def run(model_run, seconds):
    return lambda: model_run([sys.executable, "-c", WAV, "{out}", seconds],
                             outputs={"audio.wav": "{out}/audio.wav"})

@pytest.mark.lossless
def test_truncated_in_every_run(model_run, lossless):
    lossless.compare(run(model_run, "4.975"), run(model_run, "4.975"),
                     expect=Media(5, sample_rate=48000))

@pytest.mark.lossless
def test_whole(model_run, lossless):
    lossless.compare(run(model_run, "5"), run(model_run, "5"),
                     expect={"audio.wav": Media(5, sample_rate=48000, channels=2)})
"""


def test_a_track_truncated_in_every_run_fails_with_the_numbers(pytester):
    pytester.makepyfile(test_cov=PROJECT)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*an output does not hold what the run was asked for*",
            "*control#1 audio.wav: request coverage: audio samples: requested 240000 (5 s at "
            "48000 Hz), obtained 238800 (4.9750 s)*",
        ]
    )
    folder = pytester.path / "lossless-receipts"
    receipt = json.loads(next(folder.rglob("*test_truncated*.json")).read_text())
    assert receipt["lossless"][0]["verdict"] == "FAIL"
    assert {m["run"] for m in receipt["lossless"][0]["coverage"]} == {
        "control#1",
        "control#2",
        "candidate",
    }


GOLDEN_PROJECT = """
import os
import sys
import pytest
from pytest_lossless import Media

WAV = (
    "import sys, numpy as np, soundfile as sf; n = round(float(sys.argv[2]) * 48000); "
    "sf.write(sys.argv[1] + '/audio.wav', np.zeros((n, 2), np.int16), 48000, subtype='PCM_16')"
)

def generate(model_run):
    return model_run([sys.executable, "-c", WAV, "{out}", os.environ["SECONDS_MADE"]],
                     outputs={"audio.wav": "{out}/audio.wav"})

@pytest.mark.lossless
def test_clip(model_run, golden):
    golden.check_all(lambda: generate(model_run), expect={"audio.wav": Media(5, sample_rate=48000)})
"""


def test_a_truncated_run_is_refused_as_a_golden_and_fails_against_one(pytester, monkeypatch):
    pytester.makepyfile(test_gold=GOLDEN_PROJECT)
    monkeypatch.setenv("SECONDS_MADE", "4.975")
    result = pytester.runpytest("--update-goldens")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*nothing was written: an output does not hold what the run was asked for (expect=):",
            "*run 1 audio.wav: request coverage: audio samples: requested 240000 (5 s at 48000 "
            "Hz), obtained 238800 (4.9750 s)",
            "*run 2 audio.wav: request coverage: audio samples: requested 240000*",
        ]
    )
    assert not (pytester.path / "goldens").exists()

    monkeypatch.setenv("SECONDS_MADE", "5")
    assert pytester.runpytest("--update-goldens").ret == 0
    assert (pytester.path / "goldens/test_gold/test_clip/manifest.json").is_file()
    assert pytester.runpytest("--lossless").ret == 0

    monkeypatch.setenv("SECONDS_MADE", "4.975")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*an output does not hold what the run was asked for (expect=):",
            "*obtained audio.wav: request coverage: audio samples: requested 240000*",
            "*and it differs from its golden:*",
        ]
    )
    path = max((pytester.path / "lossless-receipts").rglob("*test_clip*.json"))
    receipt = json.loads(path.read_text())
    entries = [(g["artifact"], g["gate"], g["passed"]) for g in receipt["gates"]]
    assert entries == [("audio.wav", "decoded", False), ("audio.wav", "coverage", False)]
    assert receipt["gates"][1]["run"] == "obtained"
    assert receipt["verdicts"]["overall"] == "FAIL"
    # The coverage entry is raw evidence verify reads like lossless.compare's: consistent.
    # (This session's only: the earlier ones' outputs were overwritten by the later runs.)
    done = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(path.parent)],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of 1 receipts consistent" in done.stdout
    assert "verdict FAIL" in done.stdout


def test_one_media_for_a_run_with_a_tensor_checks_the_clip_and_track(
    pytester: pytest.Pytester,
) -> None:
    """golden.check_all(run, expect=Media(...)) over a clip, a track and a latent: the media
    are checked, the tensor is not held to a duration; a short track still fails."""
    pytester.makepyfile(
        test_outputs="""
        import numpy as np, soundfile as sf
        from pytest_lossless import Media

        def run(tmp_path, samples):
            wav = tmp_path / f"audio-{samples}.wav"
            sf.write(wav, np.zeros((samples, 2), dtype=np.int16), 48000, subtype="PCM_16")
            return {"audio.wav": wav, "latent.npy": np.arange(6, dtype=np.float32)}

        def test_full(golden, tmp_path):
            golden.check_all(run(tmp_path, 240000), expect=Media(5, sample_rate=48000))

        def test_short(golden, tmp_path):
            golden.check_all(run(tmp_path, 238800), expect=Media(5, sample_rate=48000))
        """
    )
    result = pytester.runpytest("--update-goldens", "-p", "no:cacheprovider", "-k", "test_full")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "test_full")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest("--update-goldens", "-p", "no:cacheprovider", "-k", "test_short")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*audio samples: requested 240000*obtained 238800*"])
