"""Unit tests of kinds.py: the registry, the built-in kinds plugin and hook precedence."""

from __future__ import annotations

import hashlib
import json
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pluggy
import pytest
import soundfile

from pytest_lossless import hookspecs, media
from pytest_lossless.errors import ArtifactError, LosslessError
from pytest_lossless.gates import Gate, GateResult, tolerance
from pytest_lossless.hookspecs import hookimpl
from pytest_lossless.kinds.registry import (
    Artifact,
    KindRegistry,
    builtin_kinds,
    register_builtin_kinds,
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    video = tmp_path / "v.mp4"
    subprocess.run(
        [
            media.ffmpeg_exe(),
            "-hide_banner",
            "-nostdin",
            "-v",
            "error",
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=32x32:rate=10:duration=0.3",
            "-c:v",
            "libx264",
            "-threads",
            "1",
            "-pix_fmt",
            "yuv420p",
            str(video),
        ],
        check=True,
    )
    audio = tmp_path / "a.wav"
    soundfile.write(audio, np.zeros((100, 1), np.int16), 8000, subtype="PCM_16")
    tensor = tmp_path / "t.npy"
    np.save(tensor, np.arange(6, dtype=np.float32))
    blob = tmp_path / "b.bin"
    blob.write_bytes(b"\x00\x01payload")
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"b": 1, "a": [1, 2]}))
    return {"video": video, "audio": audio, "tensor": tensor, "bytes": blob, "json": config}


def test_builtin_kinds_detect_fingerprint_and_default_gates(files: dict[str, Path]) -> None:
    registry = KindRegistry()
    for kind in ("video", "audio", "tensor", "bytes"):
        assert registry.detect(files[kind]) == kind
        artifact = registry.artifact(kind, files[kind])
        assert artifact.kind == kind
        assert artifact.path == files[kind]
        digest = hashlib.sha256(files[kind].read_bytes()).hexdigest()
        assert artifact.fingerprint["sha256"] == digest
        json.dumps(artifact.fingerprint)  # JSON-able, for manifests
        assert registry.compare(registry.default_gate(kind), artifact, artifact).passed
    assert registry.default_gate("video") == Gate("decoded")
    assert registry.default_gate("audio") == Gate("decoded")
    assert registry.default_gate("tensor") == Gate("elementwise")
    assert registry.default_gate("bytes") == Gate("bytes")
    assert registry.default_gate("unknown-kind") == Gate("bytes")


def test_gate_given_as_spec_string_and_none(files: dict[str, Path]) -> None:
    registry = KindRegistry()
    artifact = registry.artifact("t", files["tensor"])
    assert registry.compare("tolerance(atol=0.1)", artifact, artifact).gate == (
        "tolerance(atol=0.1, rtol=0)"
    )
    assert registry.compare(None, artifact, artifact).gate == "elementwise"  # type: ignore[arg-type]


def test_invalid_gate_for_kind_is_an_error(files: dict[str, Path]) -> None:
    registry = KindRegistry()
    video = registry.artifact("clip", files["video"])
    with pytest.raises(LosslessError, match="'elementwise' does not apply to the video artifact"):
        registry.compare("elementwise", video, video)
    blob = registry.artifact("blob", files["bytes"])
    with pytest.raises(LosslessError, match="does not apply to the bytes artifact 'blob'"):
        registry.compare(tolerance(atol=1), blob, blob)


def test_tolerance_result_is_never_lossless(files: dict[str, Path]) -> None:
    registry = KindRegistry()
    artifact = registry.artifact("t", files["tensor"])
    result = registry.compare(tolerance(), artifact, artifact)
    assert result.passed
    assert result.lossless is False


def test_kind_mismatch_fails(files: dict[str, Path]) -> None:
    registry = KindRegistry()
    tensor = registry.artifact("x", files["tensor"])
    blob = registry.artifact("x", files["bytes"])
    result = registry.compare("elementwise", tensor, blob)
    assert not result.passed
    assert result.metadata_diffs == ["kind: expected tensor, obtained bytes"]


def test_missing_artifact_is_named(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="'out' does not exist"):
        KindRegistry().artifact("out", tmp_path / "gone.mp4")


class JsonKind:
    """A custom kind: JSON documents compared by their canonical form."""

    @hookimpl
    def pytest_lossless_detect_kind(self, path: Path, head: bytes) -> str | None:
        return "json" if head.lstrip().startswith((b"{", b"[")) else None

    @hookimpl
    def pytest_lossless_fingerprint(self, kind: str, path: Path) -> dict[str, Any] | None:
        if kind != "json":
            return None
        canonical = json.dumps(json.loads(path.read_text()), sort_keys=True)
        return {
            "canonical_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "size": path.stat().st_size,
        }

    @hookimpl
    def pytest_lossless_default_gate(self, kind: str) -> str | None:
        return "decoded" if kind == "json" else None

    @hookimpl
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        if kind != "json" or gate.name != "decoded":
            return None
        same = expected.fingerprint["canonical_sha256"] == obtained.fingerprint["canonical_sha256"]
        return GateResult(
            artifact=expected.name,
            kind=kind,
            gate=gate.spec,
            lossless=True,
            passed=same,
            unit="byte",
            first_mismatch=None if same else "canonical JSON differs",
        )


def test_custom_kind_takes_precedence(files: dict[str, Path], tmp_path: Path) -> None:
    registry = KindRegistry()
    assert registry.detect(files["json"]) == "bytes"  # before: the built-ins call it bytes
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(JsonKind())
    assert registry.detect(files["json"]) == "json"
    assert registry.detect(files["tensor"]) == "tensor"  # the built-ins still answer the rest
    assert registry.default_gate("json") == Gate("decoded")
    expected = registry.artifact("config", files["json"])
    assert "canonical_sha256" in expected.fingerprint
    reordered = tmp_path / "c2.json"
    reordered.write_text(json.dumps({"a": [1, 2], "b": 1}, indent=2))
    changed = tmp_path / "c3.json"
    changed.write_text(json.dumps({"a": [1, 3], "b": 1}))
    assert registry.compare("decoded", expected, registry.artifact("config", reordered)).passed
    failed = registry.compare("decoded", expected, registry.artifact("config", changed))
    assert not failed.passed
    assert failed.first_mismatch == "canonical JSON differs"
    # The bytes gate works for any kind whose fingerprint has the file digest.
    assert not registry.compare("bytes", expected, registry.artifact("config", reordered)).passed
    # A gate no plugin implements for the kind is an error, never a pass.
    with pytest.raises(LosslessError, match="no plugin compares artifacts of kind 'json'"):
        registry.compare("elementwise", expected, expected)


def test_custom_kind_overrides_a_builtin(files: dict[str, Path]) -> None:
    class LabelTensors:
        @hookimpl
        def pytest_lossless_detect_kind(self, path: Path, head: bytes) -> str | None:
            return "labels" if head.startswith(b"\x93NUMPY") else None

    registry = KindRegistry()
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(LabelTensors())
    assert registry.detect(files["tensor"]) == "labels"
    with pytest.raises(LosslessError, match="no plugin fingerprints artifacts of kind 'labels'"):
        registry.fingerprint("labels", files["tensor"])


def test_registry_over_a_foreign_hook_relay(files: dict[str, Path]) -> None:
    """Like pytest's config.hook: the built-in kinds are plugins registered there."""
    pm = pluggy.PluginManager("pytest")
    pm.add_hookspecs(hookspecs)
    register_builtin_kinds(pm)
    register_builtin_kinds(pm)  # twice is once
    assert len(pm.get_plugins()) == 5  # tensor, image, video, audio, bytes
    registry = KindRegistry(pm.hook)
    assert registry.plugin_manager is None
    artifact = registry.artifact("a", files["audio"])
    assert artifact.kind == "audio"
    assert registry.compare("decoded", artifact, artifact).passed
    # No fallback copy: without the built-ins registered, nothing answers for their kinds.
    bare = pluggy.PluginManager("pytest")
    bare.add_hookspecs(hookspecs)
    with pytest.raises(LosslessError, match="no plugin fingerprints artifacts of kind 'audio'"):
        KindRegistry(bare.hook).fingerprint("audio", files["audio"])


def test_each_builtin_kind_is_one_trylast_plugin_answering_only_for_itself(
    files: dict[str, Path],
) -> None:
    names = [kind.name for kind in builtin_kinds()]
    assert names == ["tensor", "image", "video", "audio", "bytes"]
    for kind in builtin_kinds():
        for hook in (
            "pytest_lossless_detect_kind",
            "pytest_lossless_fingerprint",
            "pytest_lossless_default_gate",
            "pytest_lossless_compare",
            "pytest_lossless_perturb",
            "pytest_lossless_pictures",
        ):
            assert getattr(type(kind), hook).pytest_impl["trylast"] is True
        other = "video" if kind.name != "video" else "audio"
        assert kind.pytest_lossless_default_gate(other) is None
        assert kind.pytest_lossless_fingerprint(other, files["audio"]) is None


def test_a_file_compared_many_times_is_fingerprinted_once(tmp_path: Path) -> None:
    """A candidate judged against several control runs and a golden is decoded once: the
    registry keeps fingerprints by file identity, and a file changed since is read again."""
    calls: list[str] = []

    class Counting:
        @hookimpl(tryfirst=True)
        def pytest_lossless_fingerprint(self, kind: str, path: Path) -> dict[str, Any] | None:
            calls.append(Path(path).name)
            return None  # the built-in kind answers

    registry = KindRegistry()
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(Counting())
    path = tmp_path / "out.npy"
    np.save(path, np.arange(8, dtype=np.float32))
    first = registry.fingerprint("tensor", path)
    for _ in range(3):
        assert registry.fingerprint("tensor", path) == first
    assert calls == ["out.npy"]
    np.save(path, np.arange(8, dtype=np.float64))  # changed: read again, never served stale
    assert registry.fingerprint("tensor", path) != first
    assert calls == ["out.npy", "out.npy"]


# ------------------------------------------------------------------ typed fingerprints (#19)

#: Fingerprints as a manifest of an earlier version holds them, written by hand: the typed
#: records read them and write them back unchanged, key for key and in the same order.
_OLD_BYTES = {
    "fingerprint_version": 1,
    "size": 3,
    "sha256": hashlib.sha256(b"abc").hexdigest(),
    "chunk_bytes": 1 << 20,
    "chunk_sha256": [hashlib.sha256(b"abc").hexdigest()],
}
_OLD_NPY = {
    "fingerprint_version": 1,
    "size": 136,
    "sha256": "a" * 64,
    "format": "npy",
    "dtype": "<f4",
    "shape": [2, 3],
    "element_count": 6,
    "data_sha256": "b" * 64,
    "chunk_elements": 262144,
    "chunk_sha256": ["b" * 64],
}
_OLD_NPZ = {
    "fingerprint_version": 1,
    "size": 500,
    "sha256": "c" * 64,
    "format": "npz",
    "members": {
        "x": {
            k: v
            for k, v in _OLD_NPY.items()
            if k not in ("fingerprint_version", "size", "sha256", "format")
        },
    },
}


def test_typed_fingerprints_read_and_write_old_manifests_unchanged() -> None:
    from pytest_lossless.kinds.bytes import BytesFingerprint
    from pytest_lossless.kinds.tensor import TensorFingerprint

    for old, record in (
        (_OLD_BYTES, BytesFingerprint),
        (_OLD_NPY, TensorFingerprint),
        (_OLD_NPZ, TensorFingerprint),
    ):
        typed = record.from_json(json.loads(json.dumps(old)))
        assert json.dumps(typed.to_json()) == json.dumps(old)
    npz = TensorFingerprint.from_json(_OLD_NPZ)
    assert npz.members["x"].shape == (2, 3)
    assert npz.members["x"].element_count == 6


def test_the_kinds_fingerprints_are_their_typed_records_as_json(tmp_path: Path) -> None:
    from pytest_lossless import kinds
    from pytest_lossless.kinds.bytes import BytesFingerprint
    from pytest_lossless.kinds.tensor import TensorFingerprint, fingerprint_tensor

    raw = tmp_path / "a.bin"
    raw.write_bytes(b"abc")
    assert kinds.fingerprint("bytes", raw) == _OLD_BYTES
    assert BytesFingerprint.of(raw) == BytesFingerprint.from_json(_OLD_BYTES)
    np.save(tmp_path / "t.npy", np.arange(6, dtype="<f4").reshape(2, 3))
    np.savez(tmp_path / "t.npz", x=np.arange(6, dtype="<f4").reshape(2, 3))
    for name in ("t.npy", "t.npz"):
        found = kinds.fingerprint("tensor", tmp_path / name)
        assert list(found) == list(_OLD_NPY if name == "t.npy" else _OLD_NPZ)
        assert TensorFingerprint.from_json(found) == fingerprint_tensor(tmp_path / name)


#: Media files and the fingerprints the code before the typed container and audio records made
#: of them (``made_before_typed_records.json``, in the order it wrote their keys): a clip with
#: video, AAC audio and a subtitle stream, audio in a container, an animated GIF, a WAV, a FLAC
#: and the PNG of ``fixtures/ref2va``.
_FINGERPRINTS = Path(__file__).parent / "fingerprints"
_ROOT = Path(__file__).parents[2]


def _typed_record(fingerprint: dict[str, Any]) -> Any:
    from pytest_lossless.kinds.audio import AudioFingerprint
    from pytest_lossless.media.container import ContainerFingerprint

    if fingerprint.get("format") == "container":
        return ContainerFingerprint.from_json(fingerprint)
    return AudioFingerprint.from_json(fingerprint)


def test_container_and_audio_fingerprints_read_and_write_old_ones_unchanged() -> None:
    """Written by the code before them, and kept in committed goldens' manifests: the typed
    records read each fingerprint and write it back key for key, in the same order."""
    made = json.loads((_FINGERPRINTS / "made_before_typed_records.json").read_text())
    goldens = [
        entry["fingerprint"]
        for manifest in sorted((_ROOT / "goldens").rglob("manifest.json"))
        for entry in json.loads(manifest.read_text())["artifacts"].values()
        if entry["kind"] in ("video", "audio", "image")
    ]
    assert len(made) == 6, "the fingerprints this test reads are missing"
    assert goldens, "no committed golden of a media kind"
    for old in [case["fingerprint"] for case in made]:
        typed = _typed_record(old)
        assert typed.to_json() == old
        assert json.dumps(typed.to_json()) == json.dumps(old)  # the same keys, the same order
        assert _typed_record(typed.to_json()) == typed
    for old in goldens:  # a manifest sorts its keys
        typed = _typed_record(old)
        assert typed.to_json() == old
        assert json.dumps(typed.to_json(), sort_keys=True) == json.dumps(old, sort_keys=True)
    clip = _typed_record(made[0]["fingerprint"])
    assert [s.type for s in clip.streams] == ["video", "audio"]
    assert clip.other_streams[0].label == "#2 subtitle mov_text"
    assert clip.video()[0].frames[0].pts == 0
    assert _typed_record(made[2]["fingerprint"]).image_format == "gif"


#: The ffmpeg the fingerprints above were made with (imageio-ffmpeg 0.8.1). A lossy audio
#: decoder's samples (AAC) differ between ffmpeg releases (priming and padding), so those
#: files are compared only under this ffmpeg; every other file under any.
_MADE_WITH_FFMPEG = "n9.0.2"


def test_the_media_kinds_write_the_fingerprints_the_code_before_them_wrote() -> None:
    """Today's code fingerprints the same files into the very JSON the earlier code wrote: as
    it is for WAV and FLAC; for containers, in the form the earlier code made (#20: today's
    records each video frame's pts exactly, in the stream's own time base, and says so with
    ``fingerprint_version`` 2; rounded to 1 / the frame rate, it is the earlier JSON key for
    key, which is how a golden made then is checked and compared)."""
    import imageio_ffmpeg

    from pytest_lossless.media.container import ContainerFingerprint

    made = json.loads((_FINGERPRINTS / "made_before_typed_records.json").read_text())
    same_ffmpeg = imageio_ffmpeg.get_ffmpeg_version().startswith(_MADE_WITH_FFMPEG)
    registry = KindRegistry()
    compared = 0
    for case in made:
        decoded_aac = '"codec": "aac"' in json.dumps(case["fingerprint"])
        if decoded_aac and not same_ffmpeg:
            continue  # another ffmpeg's AAC decoder: other samples, not another serialiser
        path = _FINGERPRINTS / case["file"]
        if not path.exists():
            path = _ROOT / "fixtures" / "ref2va" / case["file"]
        found = registry.fingerprint(case["kind"], path)
        if found.get("format") == "container":
            today = ContainerFingerprint.from_json(found)
            then = ContainerFingerprint.from_json(case["fingerprint"])
            assert today.fingerprint_version == 2
            assert then.fingerprint_version == 1
            for new, old in zip(today.video(), then.video(), strict=True):
                assert [f.sha256 for f in new.frames] == [f.sha256 for f in old.frames]
                assert (new.frame_rate, new.duration) == (old.frame_rate, old.duration)
                exact, rounded = new.times(), old.times()
                assert exact is not None
                assert rounded is not None
                step = 1 / Fraction(old.frame_rate or "1")
                assert all(abs(a - b) <= step / 2 for a, b in zip(exact, rounded, strict=True))
            found = today.as_made_like(then).to_json()
        assert json.dumps(found) == json.dumps(case["fingerprint"]), case["file"]
        compared += 1
    assert compared >= (len(made) if same_ffmpeg else 4)
