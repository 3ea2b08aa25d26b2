"""The image kind: PNG, JPEG and GIF compared by decoded pixels through ffmpeg (#22)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from pytest_lossless.gates import parse_gate
from pytest_lossless.kinds.canary import Canary
from pytest_lossless.kinds.registry import KindRegistry
from pytest_lossless.media.ffmpeg import ffmpeg_exe

pytestmark = pytest.mark.slow


def _encode(pixels: np.ndarray, out: Path, *args: str) -> Path:
    height, width = pixels.shape[:2]
    subprocess.run(
        [
            ffmpeg_exe(),
            *("-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}"),
            *("-i", "-", *args, "-y", str(out)),
        ],
        input=np.ascontiguousarray(pixels, dtype=np.uint8).tobytes(),
        check=True,
    )
    return out


def _picture(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8)


def test_the_same_pixels_saved_with_other_png_compression_pass(tmp_path: Path) -> None:
    pixels = _picture()
    fast = _encode(pixels, tmp_path / "fast.png", "-compression_level", "0")
    small = _encode(pixels, tmp_path / "small.png", "-compression_level", "9")
    assert fast.read_bytes() != small.read_bytes()
    registry = KindRegistry()
    expected, obtained = registry.artifact("a.png", fast), registry.artifact("a.png", small)
    assert (expected.kind, expected.fingerprint["image_format"]) == ("image", "png")
    assert registry.default_gate("image").spec == "decoded"
    assert registry.compare(None, expected, obtained).passed
    assert not registry.compare("bytes", expected, obtained).passed


def test_one_changed_pixel_fails_with_pictures_of_the_frame(tmp_path: Path) -> None:
    pixels = _picture()
    changed = pixels.copy()
    changed[5, 7, 1] ^= 1
    a = _encode(pixels, tmp_path / "a.png")
    b = _encode(changed, tmp_path / "b.png")
    registry = KindRegistry()
    result = registry.compare(
        None,
        registry.artifact("a.png", a),
        registry.artifact("a.png", b),
        diagnostics_dir=tmp_path / "diag",
    )
    assert not result.passed
    assert result.unit == "frame"
    assert result.location["frame"] == 0
    pictures = [Path(p).name for p in result.diagnostic_files]
    assert pictures == [f"a.png.frame0.{w}.png" for w in ("expected", "obtained", "diff")]


def test_a_jpeg_saved_again_differs_and_says_jpeg_is_lossy_by_design(tmp_path: Path) -> None:
    pixels = _picture()
    first = _encode(pixels, tmp_path / "first.jpg", "-q:v", "5")
    decoded = tmp_path / "decoded.png"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(first), "-y", str(decoded)], check=True)
    again = tmp_path / "again.jpg"
    subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", str(first), "-q:v", "9", "-y", str(again)], check=True
    )
    registry = KindRegistry()
    expected = registry.artifact("p.jpg", first)
    assert (expected.kind, expected.fingerprint["image_format"]) == ("image", "jpeg")
    result = registry.compare(None, expected, registry.artifact("p.jpg", again))
    assert not result.passed
    assert "JPEG is lossy by design" in result.message()
    assert registry.compare(None, expected, registry.artifact("p.jpg", first)).passed


def test_an_animated_gif_is_compared_frame_by_frame(tmp_path: Path) -> None:
    frames = np.stack([_picture(seed) for seed in range(4)])
    height, width = frames.shape[1:3]
    a, b = tmp_path / "a.gif", tmp_path / "b.gif"
    for out, data in ((a, frames), (b, np.concatenate([frames[:2], frames[:1], frames[3:]]))):
        subprocess.run(
            [
                ffmpeg_exe(),
                *("-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24"),
                *("-s", f"{width}x{height}", "-r", "5", "-i", "-", "-y", str(out)),
            ],
            input=data.tobytes(),
            check=True,
        )
    registry = KindRegistry()
    expected = registry.artifact("a.gif", a)
    assert (expected.kind, expected.fingerprint["image_format"]) == ("image", "gif")
    assert expected.fingerprint["streams"][0]["frame_count"] == 4
    result = registry.compare(None, expected, registry.artifact("a.gif", b))
    assert not result.passed
    assert result.location["frame"] == 2


@pytest.mark.parametrize("gate", ["decoded", "bytes"])
def test_the_canary_of_an_image_changes_one_byte_of_its_pixels(tmp_path: Path, gate: str) -> None:
    path = _encode(_picture(), tmp_path / "a.png")
    registry = KindRegistry()
    artifact = registry.artifact("a.png", path)
    parsed = parse_gate(gate)
    assert parsed is not None
    record = Canary(registry).run("image", parsed, artifact)
    assert (record.status, record.verdict, record.located) == ("proved", "FAIL", True), record
