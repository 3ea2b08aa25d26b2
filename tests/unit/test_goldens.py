"""The golden store without pytest: layout, manifest, integrity, atomic update."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytest_lossless.errors import (
    ArtifactError,
    GateChanged,
    GoldenIntegrityError,
    GoldenMissing,
    ManifestError,
    NondeterministicProducer,
)
from pytest_lossless.gates import parse_gate
from pytest_lossless.judge.goldens import (
    Golden,
    GoldenFolder,
    artifact_name,
    read_manifest,
    safe_component,
)
from pytest_lossless.kinds import KindRegistry


def _folder(root: Path, kinds: KindRegistry, digest_above: int = 1 << 20) -> GoldenFolder:
    return GoldenFolder(
        root,
        "test_mod",
        "TestX::test_y[a/b]",
        "m.py::TestX::test_y[a/b]",
        kinds,
        digest_above=digest_above,
    )


def _array_file(path: Path, values: list[float]) -> Path:
    np.save(path, np.array(values, dtype=np.float32), allow_pickle=False)
    return path


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", ".hidden", "manifest.json"])
def test_artifact_names_cannot_escape(bad):
    with pytest.raises(ArtifactError):
        artifact_name(bad)


def test_folder_names_are_sanitised_and_stay_inside(tmp_path, kinds):
    folder = _folder(tmp_path, kinds)
    assert folder.path.parent.parent == tmp_path
    assert folder.path.name == "TestX.test_y[a_b]"
    with pytest.raises(ArtifactError):
        safe_component("..", "test name")


def test_stage_commit_compare_roundtrip(tmp_path, kinds):
    source = _array_file(tmp_path / "x.npy", [1.0, 2.0, 3.0])
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("latent.npy", source, None, {"when": "now"})
    events = folder.commit()
    assert [(e.name, e.action) for e in events] == [("latent.npy", "created")]
    manifest = read_manifest(folder.path)
    assert manifest["latent.npy"].gate == "elementwise"
    assert manifest["latent.npy"].stored == "full"
    assert folder.compare("latent.npy", source, None).passed
    changed = _array_file(tmp_path / "y.npy", [1.0, 2.0, 4.0])
    result = folder.compare("latent.npy", changed, None)
    assert not result.passed
    assert result.mismatch_count == 1


def test_unchanged_update_keeps_old_provenance_and_writes_nothing(tmp_path, kinds):
    source = _array_file(tmp_path / "x.npy", [1.0])
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("a.npy", source, None, {"when": "first"})
    folder.commit()
    manifest_path = folder.path / "manifest.json"
    before = manifest_path.stat().st_mtime_ns
    again = _folder(tmp_path / "goldens", kinds)
    again.stage("a.npy", source, None, {"when": "second"})
    assert [e.action for e in again.commit()] == ["unchanged"]
    assert manifest_path.stat().st_mtime_ns == before
    assert read_manifest(folder.path)["a.npy"].provenance == {"when": "first"}


def test_removed_and_changed_are_reported(tmp_path, kinds):
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("a.npy", _array_file(tmp_path / "a.npy", [1.0]), None, {})
    folder.stage("b.npy", _array_file(tmp_path / "b.npy", [2.0]), None, {})
    folder.commit()
    again = _folder(tmp_path / "goldens", kinds)
    again.stage("a.npy", _array_file(tmp_path / "a2.npy", [1.5]), None, {})
    actions = {e.name: e.action for e in again.commit()}
    assert actions == {"a.npy": "changed", "b.npy": "removed"}
    assert sorted(read_manifest(folder.path)) == ["a.npy"]
    assert not (folder.path / "b.npy").exists()
    leftovers = [p.name for p in folder.path.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_missing_golden_hints_update(tmp_path, kinds):
    folder = _folder(tmp_path / "goldens", kinds)
    with pytest.raises(GoldenMissing, match="--update-goldens"):
        folder.compare("a.npy", _array_file(tmp_path / "a.npy", [1.0]), None)


def test_integrity_errors(tmp_path, kinds):
    source = _array_file(tmp_path / "a.npy", [1.0, 2.0])
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("a.npy", source, None, {})
    folder.commit()
    stored = folder.path / "a.npy"
    original = stored.read_bytes()
    stored.write_bytes(original[:-1] + b"\x00")
    with pytest.raises(GoldenIntegrityError, match="SHA-256"):
        _folder(tmp_path / "goldens", kinds).compare("a.npy", source, None)
    stored.write_bytes(original)
    document = json.loads((folder.path / "manifest.json").read_text())
    document["artifacts"]["a.npy"]["fingerprint"]["shape"] = [3]
    (folder.path / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(GoldenIntegrityError, match="edited"):
        _folder(tmp_path / "goldens", kinds).compare("a.npy", source, None)
    stored.unlink()
    document["artifacts"]["a.npy"]["fingerprint"]["shape"] = [2]
    (folder.path / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(GoldenIntegrityError, match="missing"):
        _folder(tmp_path / "goldens", kinds).compare("a.npy", source, None)


def test_gate_is_frozen(tmp_path, kinds):
    source = _array_file(tmp_path / "a.npy", [1.0])
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("a.npy", source, None, {})
    folder.commit()
    with pytest.raises(GateChanged, match=r"'elementwise'.*'bytes'"):
        folder.compare("a.npy", source, parse_gate("bytes"))


@pytest.mark.parametrize("text", ["{", '{"artifacts": {}}', '{"schema": 99, "artifacts": {}}'])
def test_bad_manifest_names_the_file(tmp_path, text):
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(ManifestError, match=r"manifest\.json"):
        read_manifest(tmp_path)


def test_digest_only_above_the_threshold(tmp_path, kinds):
    big = _array_file(tmp_path / "big.npy", list(range(100)))
    folder = _folder(tmp_path / "goldens", kinds, digest_above=64)
    folder.stage("big.npy", big, None, {})
    folder.commit()
    assert not (folder.path / "big.npy").exists()
    assert read_manifest(folder.path)["big.npy"].stored == "digest"
    assert folder.compare("big.npy", big, None).passed
    other = _array_file(tmp_path / "other.npy", [*range(99), 0])
    assert not folder.compare("big.npy", other, None).passed


def test_golden_producer_must_repeat(tmp_path, kinds):
    folder = _folder(tmp_path / "goldens", kinds)
    golden = Golden(folder, update=True, workdir=tmp_path / "work", producer_runs=3)
    values = iter(range(10))
    with pytest.raises(NondeterministicProducer, match="Nothing was written"):
        golden.check("n.npy", lambda: np.array([next(values)], dtype=np.int64))
    assert golden.commit() == []
    assert not folder.path.exists()
    steady = Golden(folder, update=True, workdir=tmp_path / "work2")
    steady.check("n.npy", lambda: np.array([7], dtype=np.int64))
    assert [e.action for e in steady.commit()] == ["created"]


def test_control_characters_are_refused():
    with pytest.raises(ArtifactError, match="control characters"):
        artifact_name("a\x00b")


def test_a_manifest_file_that_escapes_its_folder_is_refused(tmp_path, kinds):
    source = _array_file(tmp_path / "a.npy", [1.0])
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("a.npy", source, None, {})
    folder.commit()
    document = json.loads((folder.path / "manifest.json").read_text())
    document["artifacts"]["a.npy"]["file"] = "../../../../etc/passwd"
    (folder.path / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(ManifestError, match=r"a\.npy"):
        read_manifest(folder.path)
