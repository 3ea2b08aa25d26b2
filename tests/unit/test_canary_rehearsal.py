"""The canary of a golden check runs while the obtained file is decoded (#21): its copies are
made and judged from the golden's fingerprint, and used only when the file turns out to equal
its golden; otherwise it runs again, after the comparison, on the file's own fingerprint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_lossless.core.artifact import Artifact
from pytest_lossless.kinds.registry import KindRegistry
from tests.e2e.mediagen import gray_frames, write_video


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("rehearsal")
    frames = gray_frames(12)
    same = write_video(folder / "a.mp4", frames)
    changed = frames.copy()
    changed[7].flat[100] ^= 0x10
    return same, write_video(folder / "b.mp4", changed)


def _check(registry: KindRegistry, golden: Path, obtained: Path, gate: str | None = None) -> bool:
    fingerprint = KindRegistry().fingerprint("video", golden)
    expected = Artifact("clip.mp4", "video", fingerprint, golden)
    got = registry.artifact("clip.mp4", obtained, "video", golden=fingerprint)
    return registry.compare(gate, expected, got).passed


def test_a_file_equal_to_its_golden_takes_the_rehearsed_canary(
    clips: tuple[Path, Path], tmp_path: Path
) -> None:
    registry = KindRegistry(canary="on")
    assert registry.canary is not None
    registry.canary.workdir = tmp_path / "work"
    fingerprint = KindRegistry().fingerprint("video", clips[0])
    registry.artifact("clip.mp4", clips[0], "video", golden=fingerprint)
    assert list(registry.canary._rehearsals) == [("video", "decoded")]  # started at once
    expected = Artifact("clip.mp4", "video", fingerprint, None)
    obtained = registry.artifact("clip.mp4", clips[0], "video", golden=fingerprint)
    assert registry.compare(None, expected, obtained).passed
    [record] = registry.canary.take()
    assert record.status == "proved", record
    assert record.unit is not None
    assert record.unit.startswith("frame 6:")
    assert not registry.canary._rehearsals
    assert list((tmp_path / "work").iterdir()) == []  # its copies are gone


def test_a_file_that_differs_gets_a_canary_of_its_own(
    clips: tuple[Path, Path], tmp_path: Path
) -> None:
    """The rehearsal was made from the golden's fingerprint; the file differs, so the canary
    runs again on the file's own (the same verdict here, made the slow way)."""
    registry = KindRegistry(canary="on")
    assert registry.canary is not None
    registry.canary.workdir = tmp_path / "work"
    assert not _check(registry, clips[0], clips[1])
    [record] = registry.canary.take()
    assert record.status == "proved", record
    assert list((tmp_path / "work").iterdir()) == []


def test_a_rehearsal_for_another_gate_is_dropped(clips: tuple[Path, Path], tmp_path: Path) -> None:
    registry = KindRegistry(canary="on")
    assert registry.canary is not None
    registry.canary.workdir = tmp_path / "work"
    assert _check(registry, clips[0], clips[0], gate="tolerance(atol=1)")
    [record] = registry.canary.take()
    assert record.gate == "tolerance(atol=1, rtol=0)", record
    assert record.status == "proved", record
    assert not registry.canary._rehearsals
    assert list((tmp_path / "work").iterdir()) == []


def test_the_rehearsed_and_the_plain_canary_say_the_same(
    clips: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    rehearsed = KindRegistry(canary="on")
    assert _check(rehearsed, clips[0], clips[0])
    plain = KindRegistry(canary="on")
    assert plain.canary is not None
    monkeypatch.setattr(plain.canary, "rehearse", lambda gate, artifact: None)
    assert _check(plain, clips[0], clips[0])
    assert rehearsed.canary is not None
    a, b = rehearsed.canary.take(), plain.canary.take()
    strip = [{k: v for k, v in r.to_json().items() if k != "seconds"} for r in (*a, *b)]
    assert strip[0] == strip[1]
    assert np.all([r.status == "proved" for r in (*a, *b)])
