"""Request coverage: Media's rules, and a miss named with requested and obtained numbers."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_lossless import Media
from pytest_lossless.compare import coverage
from pytest_lossless.core.artifact import Artifact
from pytest_lossless.errors import ConfigError


def _wav(samples: int, rate: int = 48000, channels: int = 2) -> Artifact:
    fp = {"sample_count": samples, "sample_rate": rate, "channels": channels}
    return Artifact("audio.wav", "audio", fp)


def _clip(frames: int, samples: int | None = None, fps: str = "24/1") -> Artifact:
    streams = [{"type": "video", "frame_count": frames, "frame_rate": fps}]
    if samples is not None:
        streams.append({"type": "audio", "sample_count": samples, "sample_rate": 48000,
                        "channels": 2})  # fmt: skip
    return Artifact("clip.mp4", "video", {"streams": streams})


def test_the_rules() -> None:
    assert Media(5, fps=24).frames() == 120
    assert Media(5).frames(Fraction(24000, 1001)) == 120  # round(119.88)
    assert Media(5, sample_rate=48000).samples() == 240000
    # A 40 Hz latent rate: 4.99 s is rounded up to 5.0 s of whole 25 ms quanta.
    assert Media(4.99, sample_rate=48000, audio_quantum=Fraction(1, 40)).samples() == 240000
    assert Media(4.975, sample_rate=48000).samples() == 238800


def test_a_truncated_audio_track_is_named_with_both_counts() -> None:
    missed = coverage.misses(Media(5, sample_rate=48000), _wav(238800))
    assert missed == [
        "audio samples: requested 240000 (5 s at 48000 Hz), obtained 238800 (4.9750 s)"
    ]
    assert coverage.misses(Media(5, sample_rate=48000), _wav(240000)) == []


def test_rate_channels_frames_and_av_sync() -> None:
    assert "sample rate: requested 48000 Hz, obtained 44100 Hz" in coverage.misses(
        Media(5, sample_rate=48000), _wav(220500, rate=44100)
    )
    assert "channels: requested 1, obtained 2" in coverage.misses(
        Media(5, channels=1), _wav(240000)
    )
    assert coverage.misses(Media(5, fps=24), _clip(119)) == [
        "frames: requested 120 (5 s at 24 fps), obtained 119 (4.958 s)"
    ]
    out_of_sync = coverage.misses(Media(5), _clip(120, samples=200000))
    assert "video 5.000 s and audio 4.1667 s differ by more than one frame" in out_of_sync
    assert coverage.misses(Media(5, fps=24, sample_rate=48000), _clip(120, 240000)) == []


def test_a_result_is_a_failed_gate_named_coverage() -> None:
    result = coverage.result(Media(5, sample_rate=48000), _wav(238800))
    assert result is not None
    assert (result.gate, result.passed) == ("coverage", False)
    assert "request coverage: audio samples: requested 240000" in result.message()


@pytest.mark.parametrize("bad", [{"seconds": 0}, {"seconds": 5, "fps": -1},
                                 {"seconds": 5, "sample_rate": 44.1}])  # fmt: skip
def test_bad_expectations_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        Media(**bad)  # type: ignore[arg-type]


@given(st.integers(1, 600), st.sampled_from([16000, 44100, 48000]), st.integers(-3, 3))
def test_one_sample_short_or_long_is_always_caught(seconds: int, rate: int, delta: int) -> None:
    expect = Media(seconds, sample_rate=rate)
    missed = coverage.misses(expect, _wav(seconds * rate + delta, rate=rate))
    assert bool(missed) is (delta != 0)


def test_one_media_for_a_run_checks_its_clip_and_track_not_its_tensors() -> None:
    """One ``Media`` for a whole run (clip, track and latent) covers the media artifacts; a
    tensor has no duration to check. A run with no media artifact at all is still a miss."""
    latent = Artifact("latent.npy", "tensor", {"dtype": "<f4", "shape": [4, 4]})
    asked = Media(5, fps=24, sample_rate=48000, channels=2)
    run = {"clip.mp4": _clip(120, 240000), "audio.wav": _wav(240000), "latent.npy": latent}
    assert coverage.run_misses(asked, run, "control#1") == []
    short = {**run, "audio.wav": _wav(238800)}
    assert [m.result.artifact for m in coverage.run_misses(asked, short, "control#1")] == [
        "audio.wav"
    ]
    alone = coverage.run_misses(asked, {"latent.npy": latent}, "control#1")
    assert [m.result.artifact for m in alone] == ["latent.npy"]
    # Named explicitly, a tensor is checked as asked (and misses).
    named = coverage.run_misses({"latent.npy": asked}, run, "control#1")
    assert [m.result.artifact for m in named] == ["latent.npy"]


def test_a_clip_at_another_frame_rate_is_a_miss() -> None:
    # 120 frames at 48 fps is 2.5 s: not the 5 s at 24 fps asked for.
    missed = coverage.misses(Media(seconds=5, fps=24), _clip(120, fps="48/1"))
    assert "frame rate: requested 24 fps, obtained 48 fps" in missed
    assert any(m.startswith("duration: requested 5 s") for m in missed), missed
    assert coverage.misses(Media(seconds=5, fps=24), _clip(120, fps="24/1")) == []
    # NTSC rates given as a float are the stream's rational rate.
    assert coverage.misses(Media(seconds=5, fps=24000 / 1001), _clip(120, fps="24000/1001")) == []
    assert coverage.misses(Media(seconds=5), _clip(240, fps="48/1")) == []


@pytest.mark.parametrize("bad", [True, False, "5", float("inf"), float("nan"), -1.0, 0])
def test_seconds_must_be_a_finite_positive_number(bad: object) -> None:
    with pytest.raises(ConfigError) as caught:
        Media(seconds=bad)  # type: ignore[arg-type]
    assert "Media(seconds)" in str(caught.value)


@pytest.mark.parametrize("bad", [True, "24", float("inf"), float("nan")])
def test_fps_must_be_a_finite_positive_number(bad: object) -> None:
    with pytest.raises(ConfigError) as caught:
        Media(seconds=5, fps=bad)  # type: ignore[arg-type]
    assert "Media(fps)" in str(caught.value)
