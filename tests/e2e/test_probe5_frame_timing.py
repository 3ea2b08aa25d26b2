"""End to end, from outside (#20): metadata that matters, one frame's presentation time. Two
videos with the same decoded frames, but frame 5 of the second shown 20 ms late (a variable
frame rate stream, a stall, audio and video drifting apart), pass ``decoded``: each frame's pts
is recorded from ffmpeg's framehash output, in the raw encoder's time base (1 / frame rate), so
a shift of less than half a frame period was rounded away. Fixed: a fingerprint records each
frame's pts exactly, in the stream's own time base, and the gate compares presentation times
as exact rationals; the failure names the frame and both times.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.mediagen import FFMPEG, gray_frames, write_video

pytestmark = [pytest.mark.slow]

SUITE = """
import os
import shutil

import pytest


@pytest.mark.lossless
def test_clip(golden, tmp_path):
    out = tmp_path / "clip.mkv"
    shutil.copy(os.environ["PROBE_CLIP"], out)
    golden.check("clip.mkv", out)
"""


def _timed(source: Path, out: Path, late_ms: int) -> Path:
    """``source``'s frames in a millisecond time base, frame 5 shown ``late_ms`` late."""
    pts = f"setpts=N/24/TB+eq(N\\,5)*{late_ms / 1000}/TB"
    command = [FFMPEG, "-y", "-v", "error", "-i", str(source), "-vf", pts, "-fps_mode", "vfr"]
    command += ["-enc_time_base", "1:1000", "-c:v", "ffv1", "-bitexact", "-map_metadata", "-1"]
    subprocess.run([*command, str(out)], check=True)
    return out


def test_one_frame_shown_late_fails_decoded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_video(pytester.path / "source.mp4", gray_frames(12))
    steady = _timed(source, pytester.path / "steady.mkv", 0)
    late = _timed(source, pytester.path / "late.mkv", 20)
    pytester.makepyfile(test_timing=SUITE)
    monkeypatch.setenv("PROBE_CLIP", str(steady))
    assert pytester.runpytest("--update-goldens").ret == 0
    monkeypatch.setenv("PROBE_CLIP", str(late))
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*5: pixels identical, timing differs: expected pts 208 = 0.208000 s, obtained pts 228"
            " = 0.228000 s: shown 0.02 s late*"
        ]
    )
    monkeypatch.setenv("PROBE_CLIP", str(steady))
    pytester.runpytest("--lossless").assert_outcomes(passed=1)


def test_golden_made_before_times_were_exact_still_checks_and_upgrades(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest whose fingerprint predates exact times (version 1: pts rounded to 1 / the
    frame rate; its stored file re-fingerprinted matches it in that form): no integrity error,
    the unchanged clip passes; ``--update-goldens`` upgrades it to exact times, after which the
    late frame fails. A fingerprint edited in any other way is still refused."""
    import json
    from dataclasses import replace

    from pytest_lossless.core.digests import canonical_sha256
    from pytest_lossless.goldens.manifest import ManifestEntry, entry_sha256
    from pytest_lossless.media.container import ContainerFingerprint

    source = write_video(pytester.path / "source.mp4", gray_frames(12))
    steady = _timed(source, pytester.path / "steady.mkv", 0)
    late = _timed(source, pytester.path / "late.mkv", 20)
    pytester.makepyfile(test_timing=SUITE)
    monkeypatch.setenv("PROBE_CLIP", str(steady))
    assert pytester.runpytest("--update-goldens").ret == 0
    where = pytester.path / "goldens/test_timing/test_clip/manifest.json"
    document = json.loads(where.read_text())
    data = document["artifacts"]["clip.mkv"]
    assert data["stored"] == "full"
    assert data["fingerprint"]["fingerprint_version"] == 2

    def write(fingerprint: dict[str, Any]) -> None:
        entry = replace(
            ManifestEntry.read("clip.mkv", data, where),
            fingerprint=fingerprint,
            fingerprint_sha256=canonical_sha256(fingerprint),
        )
        document["artifacts"]["clip.mkv"] = {**entry.to_json(), "entry_sha256": entry_sha256(entry)}
        where.write_text(json.dumps(document, indent=2))

    old = ContainerFingerprint.from_json(data["fingerprint"]).with_pts_rounded().to_json()
    assert old["fingerprint_version"] == 1
    assert [f["pts"] for f in old["streams"][0]["frames"]] == list(range(12))
    write(old)
    pytester.runpytest("--lossless").assert_outcomes(passed=1)
    # Edited otherwise (one pts moved): refused, as any edited fingerprint is.
    moved = json.loads(json.dumps(old))
    moved["streams"][0]["frames"][5]["pts"] = 6
    write(moved)
    refused = pytester.runpytest("--lossless")
    assert refused.ret != 0
    refused.stdout.fnmatch_lines(["*does not match the stored file*"])
    # Upgraded by --update-goldens: exact times, and the late frame is caught.
    write(old)
    updated = pytester.runpytest("--update-goldens")
    assert updated.ret == 0
    upgraded = json.loads(where.read_text())["artifacts"]["clip.mkv"]["fingerprint"]
    assert upgraded["fingerprint_version"] == 2
    assert upgraded["streams"][0]["pts_time_base"] == "1/1000"
    monkeypatch.setenv("PROBE_CLIP", str(late))
    pytester.runpytest("--lossless").assert_outcomes(failed=1)
