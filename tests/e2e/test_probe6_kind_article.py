"""End to end, from outside (#20): a golden of one kind compared with an output of another said
"not a audio ... the golden is a audio" (and "a image", "a bytes"). Each kind is named with its
article: "not an audio", "the golden is an image", "a bytes file"."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

from pytest_lossless.kinds.registry import BUILTIN_KIND_NAMES
from pytest_lossless.media.detect import kind_noun, not_the_kind

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SUITE = """
from pathlib import Path

import pytest


@pytest.mark.lossless
def test_voice(golden):
    golden.check("voice.wav", Path(__file__).parent / "voice.wav")
"""


def _wav(path: Path) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x01\x00" * 800)


def test_an_audio_golden_against_an_error_page_says_an_audio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_voice=SUITE)
    _wav(pytester.path / "voice.wav")
    assert pytester.runpytest("--update-goldens").ret == 0
    (pytester.path / "voice.wav").write_bytes(b"<html>502 Bad Gateway</html>\n" * 20)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    text = " ".join(result.stdout.str().split())
    assert "not a audio" not in text
    assert "is a audio" not in text
    assert "voice.wav: not an audio: " in text
    assert "the golden is an audio, so the run wrote something else" in text
    (pytester.path / "voice.wav").write_bytes(b"")
    result = pytester.runpytest("--lossless")
    assert "empty file (0 bytes), but the golden is an audio:" in " ".join(
        result.stdout.str().split()
    )


@pytest.mark.parametrize("kind", [*BUILTIN_KIND_NAMES, "onnx", "mesh", "user-trace"])
def test_every_kind_is_named_with_its_article(tmp_path: Path, kind: str) -> None:
    garbage = tmp_path / "out"
    garbage.write_bytes(b"\x00garbage" * 10)
    message = not_the_kind(garbage, kind, "bytes")
    noun = kind_noun(kind)
    expected = {
        "tensor": "a tensor",
        "image": "an image",
        "video": "a video",
        "audio": "an audio",
        "bytes": "a bytes file",
        "onnx": "an onnx",
        "mesh": "a mesh",
        "user-trace": "a user-trace",
    }[kind]
    assert noun == expected
    assert message.startswith(f"not {noun}: ")
    assert f"the golden is {noun}, " in message


@pytest.mark.parametrize(("kind", "noun"), [("image", "an image"), ("tensor", "a tensor")])
def test_a_media_expectation_on_another_kind_names_it_with_its_article(
    kind: str, noun: str
) -> None:
    from pytest_lossless import Media
    from pytest_lossless.compare.coverage import misses
    from pytest_lossless.core.artifact import Artifact

    found = misses(Media(1, fps=24), Artifact("out", kind, {}))
    assert found == [f"{noun} artifact has no video or audio stream to check"]
