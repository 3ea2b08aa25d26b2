"""End to end, from outside (#20): ``accept`` and request coverage. An output that misses what
its run was asked for (``expect=Media(...)``: here half the audio) is never written as a golden
by ``--update-goldens``; exported from a failing CI session, ``accept`` wrote it (its runs
agreed, its receipt passed verify), and the truncated track became the golden. ``accept`` now
refuses an artifact whose receipt records a failed request coverage for it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SUITE = """
import os

import numpy as np
import pytest
import soundfile as sf

from pytest_lossless import Media

SAMPLES = int(os.environ.get("PROBE_SAMPLES", "1600"))


@pytest.mark.lossless
def test_track(golden, tmp_path):
    def run():
        path = tmp_path / "a.wav"
        sf.write(path, (np.arange(SAMPLES) % 100).astype(np.int16), 16000, subtype="PCM_16")
        return {"a.wav": path}

    golden.check_all(run, expect=Media(seconds=0.1, sample_rate=16000))
"""


def test_a_truncated_output_is_not_accepted(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    golden = pytester.path / "goldens/test_suite/test_track/a.wav"
    assert pytester.runpytest("--update-goldens").ret == 0
    whole = golden.read_bytes()
    monkeypatch.setenv("PROBE_SAMPLES", "800")  # every run now stops halfway, repeatably
    result = pytester.runpytest("--lossless", "--lossless-export", "exp")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*request coverage: audio samples: requested 1600*800*"])

    done = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "accept", "exp"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "REFUSED" in done.stdout
    assert "requested 1600" in done.stdout
    assert golden.read_bytes() == whole
