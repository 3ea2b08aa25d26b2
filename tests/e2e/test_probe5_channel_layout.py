"""End to end, from outside (#20): metadata that matters, the channel layout of WAV and FLAC.
Audio in a container (an MP4, an MKV) was compared with its channel layout, but a WAV or FLAC
file read through libsndfile by its samples, rate, channel count and sample type only: a
stereo track (front left, front right) rewritten as ``FC+LFE`` (centre and subwoofer, the same
samples) passed ``decoded``. The layout a file declares (``WAVE_FORMAT_EXTENSIBLE``'s channel
mask, FLAC's ``WAVEFORMATEXTENSIBLE_CHANNEL_MASK``) is now part of the fingerprint when it is
not the default of its channel count, so a plain stereo WAV and a WAVEX one still agree.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.e2e.mediagen import FFMPEG, tone

pytestmark = [pytest.mark.slow]

SUITE = """
import os
import shutil
from pathlib import Path

import pytest

MEDIA = Path({media!r})


@pytest.mark.parametrize("ext", ["wav", "flac"])
def test_track(golden, ext, tmp_path):
    name = os.environ.get("PROBE_TRACK", "stereo")
    out = tmp_path / f"out.{{ext}}"
    shutil.copy(MEDIA / f"{{name}}.{{ext}}", out)
    golden.check(f"out.{{ext}}", out)
"""


def _media(folder: Path) -> Path:
    folder.mkdir()
    samples = np.stack([tone(), tone()[::-1]], axis=1)
    sf.write(folder / "stereo.wav", samples, 16000, subtype="PCM_16")
    sf.write(folder / "stereo.flac", samples, 16000, subtype="PCM_16")
    sf.write(folder / "wavex.wav", samples, 16000, subtype="PCM_16", format="WAVEX")
    sf.write(folder / "wavex.flac", samples, 16000, subtype="PCM_16")
    for ext, codec in (("wav", "pcm_s16le"), ("flac", "flac")):
        remap = "channelmap=map=FL-FC|FR-LFE:channel_layout=FC+LFE"
        source, out = str(folder / "stereo.wav"), str(folder / f"fclfe.{ext}")
        command = [FFMPEG, "-y", "-v", "error", "-i", source, "-af", remap, "-c:a", codec]
        subprocess.run([*command, "-bitexact", "-map_metadata", "-1", out], check=True)
    for ext in ("wav", "flac"):  # the same samples: only the declared layout differs
        a, _ = sf.read(folder / f"stereo.{ext}", dtype="int16")
        b, _ = sf.read(folder / f"fclfe.{ext}", dtype="int16")
        assert np.array_equal(a, b)
    return folder


def test_a_changed_channel_layout_fails_decoded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    media = _media(pytester.path / "media")
    pytester.makepyfile(test_layout=SUITE.format(media=str(media)))
    monkeypatch.setenv("PROBE_TRACK", "stereo")
    assert pytester.runpytest("--update-goldens").ret == 0

    monkeypatch.setenv("PROBE_TRACK", "wavex")  # the default layout, said explicitly
    pytester.runpytest("--lossless").assert_outcomes(passed=2)

    monkeypatch.setenv("PROBE_TRACK", "fclfe")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*channel layout: expected *, obtained *0xc*"])
    assert "Traceback" not in result.stdout.str()


def _as_written_before(manifest: Path) -> None:
    """Rewrite a manifest as a version without ``channel_mask`` wrote it, hashes included."""
    from pytest_lossless.core.digests import canonical_sha256

    data = json.loads(manifest.read_text())
    for name, entry in data["artifacts"].items():
        entry["fingerprint"].pop("channel_mask")
        entry["fingerprint_sha256"] = canonical_sha256(entry["fingerprint"])
        fields = {k: v for k, v in entry.items() if k not in ("provenance", "entry_sha256")}
        entry["entry_sha256"] = canonical_sha256({"name": name, **fields})
    manifest.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def test_a_golden_written_before_the_layout_was_recorded_still_reads(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not an integrity error (its stored file, fingerprinted in the earlier form, agrees), and
    its layout, never recorded, is named as changed: ``--update-goldens`` records it."""
    media = _media(pytester.path / "media")
    pytester.makepyfile(test_layout=SUITE.format(media=str(media)))
    monkeypatch.setenv("PROBE_TRACK", "fclfe")
    assert pytester.runpytest("--update-goldens").ret == 0
    for manifest in (pytester.path / "goldens").rglob("manifest.json"):
        _as_written_before(manifest)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert "GoldenIntegrityError" not in text
    result.stdout.fnmatch_lines(["*channel layout: expected the default of 2 channel*"])
    assert pytester.runpytest("--update-goldens").ret == 0
    pytester.runpytest("--lossless").assert_outcomes(passed=2)
