"""Each video frame's presentation time is part of the ``decoded`` gate (#20): fingerprints
record each frame's pts exactly, in the stream's own time base, and the gate compares times as
exact rationals; a fingerprint made before (pts rounded to 1 / the frame rate) is still read,
still passes against the unchanged clip, and is as blind to a sub-frame shift as it was.

Real ffmpeg (the bundled one, or the floor's under the CI's floors step): the same 12 frames
written losslessly with chosen presentation times.
"""

from __future__ import annotations

import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from pytest_lossless import kinds
from pytest_lossless.core.artifact import Artifact
from pytest_lossless.gates.gate import GateResult, parse_gate
from pytest_lossless.kinds.video import compare_container
from pytest_lossless.media.container import (
    ContainerFingerprint,
    round_half_away,
    rounded_pts,
)
from tests.e2e.mediagen import FFMPEG, gray_frames, write_video


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("timing")
    return write_video(folder / "source.mp4", gray_frames(12))


def timed(source: Path, out: Path, time_base: str, late: str = "0") -> Path:
    """``source``'s frames at 24 fps (each time rounded to the millisecond), frame 5 shown
    ``late`` seconds late, written losslessly (FFV1) with their pts in ``time_base``."""
    pts = f"setpts=round(N*1000/24)/1000/TB+eq(N\\,5)*{late}/TB"
    command = [FFMPEG, "-y", "-v", "error", "-i", str(source), "-vf", pts, "-fps_mode", "vfr"]
    command += ["-enc_time_base", time_base, "-c:v", "ffv1", "-bitexact", "-map_metadata", "-1"]
    subprocess.run([*command, str(out)], check=True)
    return out


def decoded(
    expected: Path, obtained: Path, *, old_expected: bool = False
) -> tuple[GateResult, ContainerFingerprint, ContainerFingerprint]:
    efp = ContainerFingerprint.from_json(kinds.fingerprint("video", expected))
    ofp = ContainerFingerprint.from_json(kinds.fingerprint("video", obtained))
    if old_expected:
        efp = efp.with_pts_rounded()
    gate = parse_gate("decoded")
    assert gate is not None
    result = compare_container(
        gate,
        Artifact(name="clip", kind="video", fingerprint=efp.to_json(), path=expected),
        Artifact(name="clip", kind="video", fingerprint=ofp.to_json(), path=obtained),
        "video",
    )
    return result, efp, ofp


def test_pts_are_recorded_exactly_in_the_streams_own_time_base(
    source: Path, tmp_path: Path
) -> None:
    late = timed(source, tmp_path / "late.mkv", "1:1000", "0.02")
    fp = ContainerFingerprint.from_json(kinds.fingerprint("video", late))
    assert fp.fingerprint_version == 2
    (video,) = fp.video()
    assert video.pts_time_base == "1/1000"
    assert video.frame_count == 12
    assert [f.pts for f in video.frames][4:7] == [167, 228, 250]  # frame 5: 208 ms + 20 ms
    # The frame rate is ffmpeg's guess, as before (ffmpeg 7.0 guesses 48 here, 9.0 24); in
    # the earlier form each pts is rounded to 1 / that rate, and pts_time_base names it.
    assert video.frame_rate in ("24/1", "48/1")
    rate = Fraction(video.frame_rate)
    old = fp.with_pts_rounded()
    assert old.fingerprint_version == 1
    assert old.video()[0].pts_time_base == str(1 / rate)
    assert [f.pts for f in old.video()[0].frames] == [
        round_half_away(Fraction(f.pts, 1000) * rate) for f in video.frames
    ]
    steady = ContainerFingerprint.from_json(
        kinds.fingerprint("video", timed(source, tmp_path / "steady.mkv", "1:1000"))
    )
    assert steady.video()[0].frame_rate == "24/1"
    assert [f.pts for f in steady.with_pts_rounded().video()[0].frames] == list(range(12))


def test_one_frame_shown_late_fails_naming_the_frame_and_both_times(
    source: Path, tmp_path: Path
) -> None:
    steady = timed(source, tmp_path / "steady.mkv", "1:1000")
    late = timed(source, tmp_path / "late.mkv", "1:1000", "0.02")
    result, _, _ = decoded(steady, late)
    assert not result.passed
    assert result.mismatch_count == 1
    assert result.location["frame"] == 5
    assert result.first_mismatch == (
        "5: pixels identical, timing differs: expected pts 208 = 0.208000 s, "
        "obtained pts 228 = 0.228000 s: shown 0.02 s late"
    )
    # And the other way round: early.
    back, _, _ = decoded(late, steady)
    assert not back.passed
    assert back.first_mismatch is not None
    assert back.first_mismatch.endswith("shown 0.02 s early")


def test_a_shift_of_one_tick_of_a_fine_time_base_fails(source: Path, tmp_path: Path) -> None:
    """Half a millisecond, in a 1/2000 s time base: far below half a frame period."""
    steady = timed(source, tmp_path / "steady.nut", "1:2000")
    shifted = timed(source, tmp_path / "shifted.nut", "1:2000", "0.0005")
    result, _, _ = decoded(steady, shifted)
    assert not result.passed
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("5: pixels identical, timing differs")
    assert "shown 0.0005 s late" in result.first_mismatch


def test_the_same_times_in_another_time_base_pass(source: Path, tmp_path: Path) -> None:
    """Frame times in milliseconds (Matroska) and the same times in NUT's finer time base:
    other pts, equal as exact rationals, so equal; the time bases differ only in a note."""
    mkv = timed(source, tmp_path / "clip.mkv", "1:1000", "0.02")
    nut = timed(source, tmp_path / "clip.nut", "1:2000", "0.02")
    result, efp, ofp = decoded(mkv, nut)
    assert efp.video()[0].pts_time_base != ofp.video()[0].pts_time_base
    assert [f.pts for f in ofp.video()[0].frames] != [f.pts for f in efp.video()[0].frames]
    assert ofp.video()[0].times() == efp.video()[0].times()
    assert result.passed, result.message()
    assert any("time base differs" in note for note in result.notes), result.notes


def test_an_old_fingerprint_still_passes_against_the_unchanged_clip(
    source: Path, tmp_path: Path
) -> None:
    """A golden made before times were exact (pts in 1/24 s units): today's fingerprint of the
    same clip, its times rounded as that golden's were made, passes; and the golden stays as
    blind as it was (a 20 ms shift, under half a frame, passes) until ``--update-goldens``
    upgrades it; a shift past half a frame fails, naming it."""
    late = timed(source, tmp_path / "late.mkv", "1:1000", "0.02")
    steady = timed(source, tmp_path / "steady.mkv", "1:1000")
    same, old, _ = decoded(late, late, old_expected=True)
    assert old.fingerprint_version == 1
    assert same.passed, same.message()
    blind, _, _ = decoded(steady, late, old_expected=True)
    # Its frames compare equal (228 ms rounds to frame 5); ffmpeg 7.0 guesses another frame
    # rate for the late clip (metadata the old gate compared too), ffmpeg 9.0 the same one.
    assert blind.mismatch_count == 0, blind.message()
    assert blind.passed or blind.metadata_diffs
    frame_late = timed(source, tmp_path / "frame_late.mkv", "1:1000", "0.03")
    caught, _, _ = decoded(steady, frame_late, old_expected=True)
    assert not caught.passed
    assert caught.first_mismatch is not None
    assert caught.first_mismatch.startswith(
        "5: pixels identical, timing differs: expected pts 5 = 0.208333 s, "
        "obtained pts 238 = 0.238000 s: shown 0.0416666667 s late; the expected fingerprint "
        "keeps times rounded to 1/24 s"
    ), caught.first_mismatch


def test_rounding_to_an_old_time_base_is_ffmpegs_half_away_from_zero() -> None:
    assert [round_half_away(Fraction(n, 2)) for n in (-3, -1, 1, 3, 5)] == [-2, -1, 1, 2, 3]
    assert round_half_away(Fraction(149, 100)) == 1
    assert round_half_away(Fraction(-151, 100)) == -2
    # 228 ms at 24 fps is frame 5.472: 5; a tie (1/48 s, in 1/4800 units) goes up.
    assert rounded_pts(228, Fraction(1, 1000), Fraction(1, 24)) == 5
    assert rounded_pts(100, Fraction(1, 4800), Fraction(1, 24)) == 1


def _tone(out: Path, gap: str) -> Path:
    """One second of a 48 kHz tone in Matroska, the audio frames from sample 24576 on shown
    ``gap`` seconds later."""
    shift = f"asetpts='N/SR/TB+gte(N\\,24576)*{gap}/TB'"
    source = "sine=f=440:r=48000:d=1:samples_per_frame=1024"
    command = [FFMPEG, "-y", "-v", "error", "-f", "lavfi", "-i", source, "-af", shift]
    subprocess.run([*command, "-c:a", "pcm_s16le", "-bitexact", str(out)], check=True)
    return out


def test_audio_shown_later_fails_naming_the_audio_frame_and_both_times(tmp_path: Path) -> None:
    """Audio pts are kept in 1 / the sample rate (exact to the sample): a 20 ms gap in the
    audio is caught and named, though every sample is the same."""
    steady, late = _tone(tmp_path / "steady.mka", "0"), _tone(tmp_path / "late.mka", "0.02")
    efp, ofp = kinds.fingerprint("audio", steady), kinds.fingerprint("audio", late)
    gate = parse_gate("decoded")
    assert gate is not None
    result = compare_container(
        gate,
        Artifact(name="tone", kind="audio", fingerprint=efp, path=steady),
        Artifact(name="tone", kind="audio", fingerprint=ofp, path=late),
        "audio",
    )
    assert not result.passed
    assert result.first_mismatch == (
        "decoded audio frame 24: samples identical, timing differs: expected pts 24576 = "
        "0.512000 s, obtained pts 25536 = 0.532000 s"
    )
