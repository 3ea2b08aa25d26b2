"""End to end, from outside (#20): ``python -O -m pytest`` strips ``assert`` statements. The
plugin's ``assert``s narrow types for mypy; one of them was the only check of a user's value:
``Media(seconds=None)`` ended in a bare ``AssertionError`` from ``core/expect.py`` (a
``TypeError`` under ``-O``), reported as "the producer failed" for a plain path. It is a
``ConfigError`` naming ``Media(seconds)`` when the ``Media`` is made, with or without ``-O``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent

TEST = """
from pytest_lossless import Media
from mediagen import tone, write_wav

def test_media(golden, tmp_path):
    wav = write_wav(tmp_path / "a.wav", tone())
    golden.check("a.wav", wav, expect=Media(seconds=None, sample_rate=16000))
"""


@pytest.mark.slow
@pytest.mark.parametrize("optimize", [[], ["-O"]])
def test_media_without_seconds_is_named_with_and_without_asserts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, optimize: list[str]
) -> None:
    pytester.makeini("[pytest]\nlossless_backend = cpu\n")
    pytester.makepyfile(test_m=TEST)
    path = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))  # mediagen, in the child
    result = pytester.run(
        sys.executable, *optimize, "-m", "pytest", "-p", "no:cacheprovider", "--update-goldens"
    )
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "Media(seconds)" in out, out
    assert "AssertionError" not in out, out
    assert "TypeError" not in out, out
    assert not (pytester.path / "goldens" / "test_m" / "test_media").exists()
