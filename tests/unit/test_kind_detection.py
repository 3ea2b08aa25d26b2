"""Detection through the registry (#21, #19): kinds whose declared signatures rule a file out are
not asked, and the answer is the one the full hook gives."""

from __future__ import annotations

import subprocess
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile

from pytest_lossless import media
from pytest_lossless.kinds.audio import AudioKind
from pytest_lossless.kinds.image import SIGNATURES as IMAGE_SIGNATURES
from pytest_lossless.kinds.image import ImageKind
from pytest_lossless.kinds.registry import KindRegistry
from pytest_lossless.kinds.tensor import TensorKind
from pytest_lossless.kinds.video import VideoKind
from pytest_lossless.media import detect


def _ffmpeg(*args: str) -> None:
    head = [media.ffmpeg_exe(), "-hide_banner", "-nostdin", "-v", "error", "-y"]
    subprocess.run([*head, *args], check=True)


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One file of each kind and of each near miss, named by what the full hook says it is."""
    folder = tmp_path_factory.mktemp("detect")
    out: dict[str, Path] = {}
    out["video.mp4"] = folder / "v.mp4"
    _ffmpeg("-f", "lavfi", "-i", "testsrc=size=32x32:rate=10:duration=0.2", str(out["video.mp4"]))
    out["audio.m4a"] = folder / "a.m4a"
    _ffmpeg("-f", "lavfi", "-i", "sine=duration=0.1", "-c:a", "aac", str(out["audio.m4a"]))
    out["audio.mkv"] = folder / "a.mkv"
    _ffmpeg("-f", "lavfi", "-i", "sine=duration=0.1", "-c:a", "flac", str(out["audio.mkv"]))
    out["audio.wav"] = folder / "a.wav"
    soundfile.write(out["audio.wav"], np.zeros((50, 1), np.int16), 8000, subtype="PCM_16")
    out["audio.flac"] = folder / "a.flac"
    soundfile.write(out["audio.flac"], np.zeros((50, 1), np.int16), 8000, format="FLAC")
    out["tensor.npy"] = folder / "t.npy"
    np.save(out["tensor.npy"], np.arange(4))
    out["tensor.npz"] = folder / "t.npz"
    np.savez(out["tensor.npz"], a=np.arange(3))
    out["bytes.zip"] = folder / "other.zip"
    with zipfile.ZipFile(out["bytes.zip"], "w") as zf:
        zf.writestr("readme.txt", "not a tensor")
    out["image.png"] = folder / "i.png"
    _ffmpeg("-f", "lavfi", "-i", "testsrc=size=8x8", "-frames:v", "1", str(out["image.png"]))
    out["bytes.bin"] = folder / "b.bin"
    out["bytes.bin"].write_bytes(b"abc" * 10)
    out["bytes.txt"] = folder / "empty.txt"
    out["bytes.txt"].write_bytes(b"")
    out["bytes.mp3"] = folder / "not-really.mp3"  # a media suffix: probed, and found no media
    out["bytes.mp3"].write_bytes(b"plain text, named as an mp3")
    out["bytes.G"] = folder / "g.dat"  # starts with an MPEG-TS sync byte, and is not one
    out["bytes.G"].write_bytes(b"G" * 400)
    return out


def test_the_shortcut_answers_what_the_full_hook_answers(samples: dict[str, Path]) -> None:
    registry = KindRegistry()
    for label, path in samples.items():
        full = registry.hook.pytest_lossless_detect_kind(path=path, head=detect.read_head(path))
        assert registry.detect(path) == (full or "bytes") == label.split(".")[0], label


def test_a_plain_file_is_not_asked_of_the_media_kinds(
    samples: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: object, path: Path, head: bytes) -> bool:
        raise AssertionError(f"{type(self).__name__} was asked about {path.name}")

    for kind in (TensorKind, ImageKind, VideoKind, AudioKind):
        monkeypatch.setattr(kind, "detect", refuse)
    assert KindRegistry().detect(samples["bytes.bin"]) == "bytes"
    assert KindRegistry().detect(samples["bytes.txt"]) == "bytes"
    with pytest.raises(AssertionError, match="TensorKind was asked"):  # the checker can fail
        KindRegistry().detect(samples["tensor.npy"])


def test_a_hook_function_still_answers_first(samples: dict[str, Path]) -> None:
    registry = KindRegistry()
    plugin = types.SimpleNamespace(pytest_lossless_detect_kind=lambda path, head: "text")
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(plugin, "text-kind")
    assert registry.detect(samples["bytes.bin"]) == "text"
    assert registry.detect(samples["video.mp4"]) == "text"


def test_the_kinds_signatures_cover_what_media_detection_looks_for() -> None:
    """Every signature and suffix that makes media.detect say yes must leave the kind possible
    (the container tables live once, in media.signatures; the others are checked here)."""
    assert detect.CONTAINER_SUFFIXES <= VideoKind.suffixes == AudioKind.suffixes
    brands = {(4, brand) for brand in detect.CONTAINER_BRANDS}
    assert brands <= set(VideoKind.signatures or ()) <= set(AudioKind.signatures or ())
    assert {(0, riff) for riff in detect.RIFF_IDS} <= set(AudioKind.signatures or ())
    assert (0, detect.NPY_MAGIC) in (TensorKind.signatures or ())
    # Where detection says video whatever its probe finds (media.detect.has_container_signature)
    assert set(VideoKind.decided_by_fingerprint) == brands | {(0, b"\x1a\x45\xdf\xa3")}
    assert set(ImageKind.signatures or ()) == {(0, magic) for _name, magic in IMAGE_SIGNATURES}


def test_a_file_expected_to_be_a_video_is_not_probed_and_its_fingerprint_decides(
    samples: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A golden check of a video leaves the question to the video fingerprint (one pass): an
    obtained file that holds only audio is refused there, as detection would have refused it."""
    from pytest_lossless.errors import ArtifactError

    golden = KindRegistry().fingerprint("video", samples["video.mp4"])

    def no_probe(self: object, path: Path, head: bytes) -> bool:
        raise AssertionError(f"probed {path.name}")

    monkeypatch.setattr(VideoKind, "detect", no_probe)
    registry = KindRegistry()
    assert registry.detect(samples["video.mp4"], expected="video") == "video"
    found = registry.artifact("v", samples["video.mp4"], "video", golden=golden)
    assert found.fingerprint["streams"][0]["type"] == "video"
    assert registry.detect(samples["audio.m4a"], expected="video") == "video"
    with pytest.raises(ArtifactError, match=r"not a video: .* read as audio"):
        registry.artifact("v", samples["audio.m4a"], "video", golden=golden)
    assert registry.detect(samples["bytes.bin"], expected="video") == "bytes"  # no signature
    with pytest.raises(AssertionError, match="probed"):  # without expected, detection probes
        registry.detect(samples["audio.m4a"])


def test_a_hook_that_fingerprints_videos_keeps_answering_golden_checks(
    samples: dict[str, Path],
) -> None:
    """The one-pass golden check is the built-in kind's own: a plugin or conftest that
    fingerprints videos itself still answers first, and detection probes again."""
    golden = KindRegistry().fingerprint("video", samples["video.mp4"])
    registry = KindRegistry()
    plugin = types.SimpleNamespace(
        pytest_lossless_fingerprint=lambda kind, path: {"mine": True} if kind == "video" else None
    )
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(plugin, "my-video-fingerprint")
    found = registry.artifact("v", samples["video.mp4"], "video", golden=golden)
    assert found.fingerprint == {"mine": True}
    assert registry.detect(samples["audio.m4a"], expected="video") == "audio"  # probed
