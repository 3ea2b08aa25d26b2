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
from pytest_lossless.goldens.checks import Golden
from pytest_lossless.goldens.folder import (
    GoldenFolder,
    artifact_name,
    read_manifest,
    safe_component,
)
from pytest_lossless.kinds.registry import KindRegistry


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


# ---------------------------------------------------------------- request coverage (expect=)


def _wav_file(path: Path, seconds: float, rate: int = 48000) -> Path:
    import soundfile

    soundfile.write(path, np.zeros((round(seconds * rate), 2), np.int16), rate, subtype="PCM_16")
    return path


def _five() -> object:
    from pytest_lossless import Media

    return Media(5, sample_rate=48000)


def test_a_truncated_producer_is_refused_as_a_golden_naming_every_run(tmp_path, kinds):
    folder = _folder(tmp_path / "goldens", kinds)
    golden = Golden(folder, update=True, workdir=tmp_path / "work")
    runs = iter(range(5))

    def producer() -> Path:
        return _wav_file(tmp_path / f"audio{next(runs)}.wav", 4.975)

    assert golden.check("audio.wav", producer, expect=_five()) is None
    assert golden.staged == []
    assert [m.run for m in golden.misses] == ["run 1", "run 2"]
    assert golden.misses[0].result.gate == "coverage"
    assert golden.misses[0].result.passed is False
    assert golden.misses[0].result.metadata_diffs == [
        "request coverage: audio samples: requested 240000 (5 s at 48000 Hz), obtained 238800 "
        "(4.9750 s)"
    ]
    assert golden.commit() == []
    assert not folder.path.exists()


def test_a_truncated_file_under_update_is_never_committed(tmp_path, kinds):
    folder = _folder(tmp_path / "goldens", kinds)
    golden = Golden(folder, update=True, workdir=tmp_path / "work")
    golden.check("audio.wav", _wav_file(tmp_path / "a.wav", 4.975), expect=_five())
    golden.check("whole.wav", _wav_file(tmp_path / "b.wav", 5), expect=_five())
    assert [m.result.artifact for m in golden.misses] == ["audio.wav"]
    assert golden.commit() == []
    assert not folder.path.exists()


def test_a_truncated_output_fails_coverage_even_against_an_equally_truncated_golden(
    tmp_path, kinds
):
    short = _wav_file(tmp_path / "a.wav", 4.975)
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("audio.wav", short, None, {})
    folder.commit()
    golden = Golden(_folder(tmp_path / "goldens", kinds), update=False, workdir=tmp_path / "w")
    result = golden.check("audio.wav", short, expect={"audio.wav": _five()})
    assert result is not None
    assert result.passed
    assert [(m.run, m.result.gate) for m in golden.misses] == [("obtained", "coverage")]


def test_an_expectation_for_an_artifact_the_run_did_not_produce_is_an_error(tmp_path, kinds):
    from pytest_lossless.errors import ConfigError

    golden = Golden(_folder(tmp_path / "g", kinds), update=True, workdir=tmp_path / "w")
    run = {"audio.wav": _wav_file(tmp_path / "a.wav", 5)}
    with pytest.raises(ConfigError, match=r"names no artifact of the run \(it produced audio"):
        golden.stage_run(lambda: run, expect={"auido.wav": _five()})
    with pytest.raises(ConfigError, match="names no artifact"):
        golden.stage_run(run, expect={"auido.wav": _five()})
    with pytest.raises(ConfigError, match="expected a Media"):
        golden.check("audio.wav", run["audio.wav"], expect={"audio.wav": 5})  # type: ignore[dict-item]


# ---------------------------------------------------------------- LFS pointer stubs

LFS_POINTER = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    b"size 12345\n"
)


def test_pointer_stubs_are_recognised_and_real_files_are_not():
    from pytest_lossless.media.detect import stub_problem

    assert stub_problem(LFS_POINTER, len(LFS_POINTER)) == ("a Git LFS pointer file", "git lfs pull")
    annex = b"/annex/objects/SHA256E-s12--abc.wav\n"
    assert stub_problem(annex, len(annex)) == ("a git-annex pointer file", "git annex get")
    assert stub_problem(b"RIFF....WAVE", 12) is None
    assert stub_problem(LFS_POINTER, 5000) is None  # too large to be a pointer


def test_an_lfs_pointer_checked_out_as_a_stored_golden_names_git_lfs_pull(tmp_path, kinds):
    from pytest_lossless.errors import GoldenError
    from pytest_lossless.media.detect import GoldenStub

    source = _array_file(tmp_path / "a.npy", [1.0, 2.0])
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("a.npy", source, None, {})
    folder.commit()
    (folder.path / "a.npy").write_bytes(LFS_POINTER)
    with pytest.raises(GoldenStub, match=r"a\.npy: is a Git LFS pointer file.*`git lfs pull`") as e:
        _folder(tmp_path / "goldens", kinds).compare("a.npy", source, None)
    assert isinstance(e.value, GoldenError)
    assert e.value.path == folder.path / "a.npy"


def test_an_lfs_pointer_checked_out_as_the_manifest_names_git_lfs_pull(tmp_path):
    from pytest_lossless.media.detect import GoldenStub

    (tmp_path / "manifest.json").write_bytes(LFS_POINTER)
    with pytest.raises(GoldenStub, match=r"manifest\.json: is a Git LFS pointer.*git lfs pull"):
        read_manifest(tmp_path)


def test_a_dangling_git_annex_link_names_git_annex_get(tmp_path, kinds):
    from pytest_lossless.media.detect import GoldenStub

    source = _array_file(tmp_path / "a.npy", [1.0])
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("a.npy", source, None, {})
    folder.commit()
    (folder.path / "a.npy").unlink()
    (folder.path / "a.npy").symlink_to("../../.git/annex/objects/Xx/Yy/SHA256E-s1--ab.npy")
    with pytest.raises(GoldenStub, match="git annex get"):
        _folder(tmp_path / "goldens", kinds).compare("a.npy", source, None)


def test_an_update_replaces_a_pointer_with_the_content_it_stood_for(tmp_path, kinds):
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage("a.npy", _array_file(tmp_path / "a.npy", [1.0]), None, {})
    folder.stage("b.npy", _array_file(tmp_path / "b.npy", [2.0]), None, {})
    folder.commit()
    real = (folder.path / "a.npy").read_bytes()
    (folder.path / "a.npy").write_bytes(LFS_POINTER)
    again = _folder(tmp_path / "goldens", kinds)
    again.stage("a.npy", _array_file(tmp_path / "a2.npy", [1.0]), None, {})  # unchanged
    again.stage("b.npy", _array_file(tmp_path / "b2.npy", [3.0]), None, {})  # changed
    assert {e.name: e.action for e in again.commit()} == {"a.npy": "unchanged", "b.npy": "changed"}
    assert (folder.path / "a.npy").read_bytes() == real  # the obtained bytes, never the pointer


# ---------------------------------------------------------------- scoped goldens

SMI = Path(__file__).resolve().parents[1] / "data" / "smi"
H200 = [{"id": "0", "backend": "cuda", "name": "NVIDIA H200", "uuid": "GPU-1"}]


def test_the_environment_class_of_an_h200_allocation():
    from pytest_lossless.goldens.scope import Environment, environment_of, parse_runtime

    header = (Path(__file__).resolve().parents[1] / "data/gpu/env.log").read_text()
    assert parse_runtime("cuda", header) == "CUDA 13"  # the table header of plain nvidia-smi
    assert parse_runtime("cuda", (SMI / "CAPTURED.txt").read_text()) == "CUDA 13"  # -q layout
    npu = (SMI / "npu_smi_info_910b3_x8.txt").read_text()
    assert parse_runtime("npu", npu) == "npu-smi 24"
    assert parse_runtime("cuda", "no header") is None
    env = environment_of("cuda", H200 * 2, "CUDA 13")
    assert env == Environment("cuda", "NVIDIA H200", "CUDA 13")
    assert env.label == "cuda / NVIDIA H200 / CUDA 13"
    assert env.folder == "cuda__NVIDIA_H200__CUDA_13"
    mixed = environment_of("cuda", [*H200, {"name": "NVIDIA L4"}], None)
    assert mixed.label == "cuda / NVIDIA H200 + NVIDIA L4 / runtime unknown"
    assert Environment.from_json(env.to_json()) == env
    assert Environment.checked({"backend": "cuda", "model": "x\x1b[2J"}) is None
    assert Environment.checked({"backend": "cuda", "model": "x\x1b[2J", "runtime": None}) is None


def test_runtime_of_asks_the_backend_its_tool_or_the_machine():
    from pytest_lossless.devices.backends import CpuBackend, CudaBackend
    from pytest_lossless.devices.base import ToolError
    from pytest_lossless.goldens.scope import runtime_of

    header = (Path(__file__).resolve().parents[1] / "data/gpu/env.log").read_text()
    asked = []

    def smi(argv):
        asked.append(list(argv))
        return header

    assert runtime_of(CudaBackend(runner=smi)) == "CUDA 13"
    assert asked == [["nvidia-smi"]]

    def broken(argv):
        raise ToolError("nvidia-smi not found on PATH")

    assert runtime_of(CudaBackend(runner=broken)) is None
    assert runtime_of(CpuBackend(), machine=lambda: "aarch64") == "aarch64"

    class Own:
        name = "rocm"

        def runtime(self):
            return "ROCm 6"

    assert runtime_of(Own()) == "ROCm 6"
    assert runtime_of(object()) is None


def _scoped(root: Path, kinds: KindRegistry, env: object) -> GoldenFolder:
    return GoldenFolder(
        root, "test_mod", "test_y[a]", "m.py::test_y[a]", kinds, digest_above=1 << 20,
        environment=env,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_device_scoped_golden_has_its_own_folder_and_says_its_scope(tmp_path, kinds):
    from pytest_lossless.goldens.scope import Environment, scoped_path

    env = Environment("cuda", "NVIDIA H200", "CUDA 13")
    folder = _scoped(tmp_path / "goldens", kinds, env)
    assert folder.path == tmp_path / "goldens/test_mod/test_y[a]@device/cuda__NVIDIA_H200__CUDA_13"
    assert folder.default_path == tmp_path / "goldens/test_mod/test_y[a]"
    assert scoped_path(folder.default_path, None) == folder.default_path
    source = _array_file(tmp_path / "a.npy", [1.0])
    folder.stage("a.npy", source, None, {})
    folder.commit()
    entry = json.loads((folder.path / "manifest.json").read_text())["artifacts"]["a.npy"]
    assert entry["scope"] == "device"
    assert entry["environment"] == {"backend": "cuda", "model": "NVIDIA H200", "runtime": "CUDA 13"}
    assert _scoped(tmp_path / "goldens", kinds, env).compare("a.npy", source, None).passed
    # The default scope's entries say nothing new: manifests of before stay byte-identical.
    plain = _folder(tmp_path / "goldens", kinds)
    plain.stage("a.npy", source, None, {})
    plain.commit()
    assert (
        "scope" not in json.loads((plain.path / "manifest.json").read_text())["artifacts"]["a.npy"]
    )


def test_a_scoped_manifest_moved_to_another_class_or_scope_is_refused(tmp_path, kinds):
    import shutil

    from pytest_lossless.goldens.scope import Environment

    h200 = Environment("cuda", "NVIDIA H200", "CUDA 13")
    l4 = Environment("cuda", "NVIDIA L4", "CUDA 13")
    folder = _scoped(tmp_path / "goldens", kinds, h200)
    source = _array_file(tmp_path / "a.npy", [1.0])
    folder.stage("a.npy", source, None, {})
    folder.commit()
    other = _scoped(tmp_path / "goldens", kinds, l4)
    shutil.copytree(folder.path, other.path)
    with pytest.raises(
        ManifestError, match=r"NVIDIA H200.*folder of scope 'device' for cuda / NVIDIA L4"
    ):
        other.compare("a.npy", source, None)
    plain = _folder(tmp_path / "goldens", kinds)
    plain.path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(folder.path, _scoped(tmp_path / "goldens", kinds, None).path)
    with pytest.raises(ManifestError, match=r"scope 'device'.*folder of scope 'all'"):
        _scoped(tmp_path / "goldens", kinds, None).compare("a.npy", source, None)


def test_no_golden_of_this_class_names_the_classes_that_have_one(tmp_path, kinds):
    from pytest_lossless.goldens.scope import Environment, missing, parse_scope

    h200 = Environment("cuda", "NVIDIA H200", "CUDA 13")
    cpu = Environment("cpu", "cpu slot", "x86_64")
    folder = _scoped(tmp_path / "goldens", kinds, h200)
    folder.stage("a.npy", _array_file(tmp_path / "a.npy", [1.0]), None, {})
    folder.commit()
    here = _scoped(tmp_path / "goldens", kinds, cpu)
    with pytest.raises(GoldenMissing):
        here.compare("a.npy", tmp_path / "a.npy", None)
    error = missing(here.path, here.default_path, "a.npy", cpu, tmp_path)
    assert isinstance(error, GoldenMissing)
    assert error.others == ["cuda / NVIDIA H200 / CUDA 13"]
    text = str(error)
    assert "for this environment, cpu / cpu slot / x86_64" in text
    assert "exist for cuda / NVIDIA H200 / CUDA 13" in text
    assert "--update-goldens on a cpu / cpu slot / x86_64 machine" in text
    assert parse_scope(None) == "all"
    assert parse_scope("device") == "device"
    from pytest_lossless.errors import ConfigError

    with pytest.raises(ConfigError, match="'all' or 'device'"):
        parse_scope("gpu")


# ------------------------------------------------------------------ layout (#20)


def test_goldens_are_keyed_by_the_module_path_under_the_rootdir():
    from pytest_lossless.goldens.layout import folder_of, split_test_id

    root = Path("/g")
    module, name = split_test_id("tests/a/test_dup.py::test_out")
    assert (module, name) == ("tests/a/test_dup", "test_out")
    assert folder_of(root, module, name) == root / "tests/a/test_dup/test_out"
    assert folder_of(root, *split_test_id("test_f.py::test_x")) == root / "test_f/test_x"
    assert folder_of(root, *split_test_id("t/test_c.py::TestC::test_y[5s]")) == (
        root / "t/test_c/TestC.test_y[5s]"
    )
    a = folder_of(root, *split_test_id("tests/a/test_dup.py::test_out"))
    b = folder_of(root, *split_test_id("tests/b/test_dup.py::test_out"))
    assert a != b


def test_a_module_outside_the_rootdir_is_refused_with_advice():
    from pytest_lossless.goldens.layout import folder_of, split_test_id

    with pytest.raises(ArtifactError, match="outside the rootdir"):
        folder_of(Path("/g"), *split_test_id("../other/test_x.py::test_y"))


def _legacy(root: Path, test_id: str, value: bytes, kinds) -> Path:
    """A golden folder written where an earlier version kept it: ``goldens/<stem>/<test>/``."""
    from pytest_lossless.goldens.layout import split_test_id

    module, name = split_test_id(test_id)
    old = GoldenFolder(root, module.rsplit("/", 1)[-1], name, test_id, kinds, digest_above=1 << 20)
    source = root.parent / f"src-{value.hex()}.bin"
    source.write_bytes(value)
    old.stage("v.bin", source, None, {})
    old.commit()
    return old.path


def test_an_old_layout_folder_of_this_test_is_moved_whole(tmp_path, kinds):
    root = tmp_path / "goldens"
    old = _legacy(root, "tests/a/test_dup.py::test_out", b"one", kinds)
    manifest = (old / "manifest.json").read_bytes()
    folder = GoldenFolder(
        root,
        "tests/a/test_dup",
        "test_out",
        "tests/a/test_dup.py::test_out",
        kinds,
        digest_above=1 << 20,
        rootdir=tmp_path,
    )
    events = folder.migrate()
    assert [e.action for e in events] == ["migrated"]
    assert str(old) in events[0].detail
    assert not old.exists()
    assert not old.parent.exists(), "the old module folder is left"
    assert (folder.path / "manifest.json").read_bytes() == manifest
    source = tmp_path / "src-6f6e65.bin"
    assert folder.compare("v.bin", source, None).passed
    assert folder.migrate() == []


def test_an_old_layout_folder_of_a_same_named_module_elsewhere_is_left_for_it(tmp_path, kinds):
    root = tmp_path / "goldens"
    old = _legacy(root, "tests/b/test_dup.py::test_out", b"bee", kinds)
    folder = GoldenFolder(
        root,
        "tests/a/test_dup",
        "test_out",
        "tests/a/test_dup.py::test_out",
        kinds,
        digest_above=1 << 20,
        rootdir=tmp_path,
    )
    assert folder.migrate() == []
    assert old.is_dir()
    with pytest.raises(GoldenMissing):
        folder.compare("v.bin", tmp_path / "src-626565.bin", None)
    other = GoldenFolder(
        root,
        "tests/b/test_dup",
        "test_out",
        "tests/b/test_dup.py::test_out",
        kinds,
        digest_above=1 << 20,
        rootdir=tmp_path,
    )
    assert [e.action for e in other.migrate()] == ["migrated"]


def test_an_old_layout_folder_that_names_no_test_is_refused_with_the_git_mv(tmp_path, kinds):
    from pytest_lossless.goldens.layout import LegacyLayout

    root = tmp_path / "goldens"
    old = _legacy(root, "tests/a/test_dup.py::test_out", b"one", kinds)
    data = json.loads((old / "manifest.json").read_text())
    del data["test"]
    (old / "manifest.json").write_text(json.dumps(data))
    folder = GoldenFolder(
        root,
        "tests/a/test_dup",
        "test_out",
        "tests/a/test_dup.py::test_out",
        kinds,
        digest_above=1 << 20,
        rootdir=tmp_path,
    )
    with pytest.raises(LegacyLayout) as caught:
        folder.migrate()
    text = str(caught.value)
    assert f"git mv {old} {folder.path}" in text
    assert "names no test" in text
    assert old.is_dir()
    assert not folder.path.exists()


def test_device_scoped_goldens_move_with_their_test(tmp_path, kinds):
    from pytest_lossless.goldens.scope import Environment

    root = tmp_path / "goldens"
    env = Environment("cuda", "NVIDIA H200", "CUDA 13")
    old = GoldenFolder(
        root,
        "test_gpu",
        "test_g[5s]",
        "tests/gpu/test_gpu.py::test_g[5s]",
        kinds,
        digest_above=1 << 20,
        environment=env,
    )
    source = _array_file(tmp_path / "a.npy", [1.0])
    old.stage("a.npy", source, None, {})
    old.commit()
    folder = GoldenFolder(
        root,
        "tests/gpu/test_gpu",
        "test_g[5s]",
        "tests/gpu/test_gpu.py::test_g[5s]",
        kinds,
        digest_above=1 << 20,
        rootdir=tmp_path,
        environment=env,
    )
    assert [e.action for e in folder.migrate()] == ["migrated"]
    assert folder.path == root / "tests/gpu/test_gpu/test_g[5s]@device" / env.folder
    assert folder.compare("a.npy", source, None).passed


def test_the_committed_goldens_lie_where_their_tests_look_for_them():
    """This repository's goldens were moved to the new layout (git mv): each manifest and plan
    lies in the folder its own test id names, and still reads whole."""
    from pytest_lossless.goldens.layout import folder_of, split_test_id
    from pytest_lossless.goldens.plans import read_plans

    root = Path(__file__).resolve().parents[2] / "goldens"
    found = 0
    for path in sorted(root.rglob("*.json")):
        test = json.loads(path.read_text())["test"]
        folder = folder_of(root, *split_test_id(test))
        where = path.parent
        if where.parent.name.endswith("@device"):
            where = where.parent.with_name(where.parent.name.removesuffix("@device"))
        assert where == folder, f"{path} is not where {test} keeps its goldens"
        if path.name == "manifest.json":
            assert read_manifest(path.parent)
        else:
            assert read_plans(path.parent)
        found += 1
    assert found >= 16


def test_an_artifact_name_that_is_not_utf8_is_refused_by_name(tmp_path, kinds):
    import os

    name = os.fsdecode(b"out-\xff.npy")
    with pytest.raises(ArtifactError) as caught:
        artifact_name(name)
    message = str(caught.value)
    message.encode("utf-8")  # printable, and writable into a receipt
    assert "out-\\udcff.npy" in message
    assert "not UTF-8" in message
    # The same name in a manifest from a pull request: a ManifestError that can be printed.
    folder = tmp_path / "m" / "t"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(
        '{"schema": 1, "test": "m.py::t", "artifacts": {"out-\\udcff.npy": {}}}'
    )
    with pytest.raises(ManifestError) as caught_manifest:
        read_manifest(folder)
    str(caught_manifest.value).encode("utf-8")


def test_a_test_folder_that_is_also_a_module_folder_is_never_replaced(tmp_path, kinds):
    """tests/test_a.py::test_x and tests/test_a/test_x.py::test_y: the second's goldens lie
    inside the first's folder; updating the first must not delete them."""
    root = tmp_path / "goldens"
    source = _array_file(tmp_path / "a.npy", [1.0])
    inner = GoldenFolder(
        root,
        "tests/test_a/test_x",
        "test_y",
        "tests/test_a/test_x.py::test_y",
        kinds,
        digest_above=1 << 20,
        rootdir=tmp_path,
    )
    inner.stage("a.npy", source, None, {})
    inner.commit()
    outer = GoldenFolder(
        root,
        "tests/test_a",
        "test_x",
        "tests/test_a.py::test_x",
        kinds,
        digest_above=1 << 20,
        rootdir=tmp_path,
    )
    outer.stage("a.npy", source, None, {})
    from pytest_lossless.goldens.swap import GoldenUpdateError

    with pytest.raises(GoldenUpdateError, match="another test module"):
        outer.commit()
    assert (inner.path / "manifest.json").is_file()


def test_accept_writes_into_the_folder_of_the_module_path():
    from pytest_lossless.goldens.accept import golden_names
    from pytest_lossless.goldens.layout import folder_of

    module, name = golden_names("tests/sub/test_s.py::test_m[5s]")
    assert (module, name) == ("tests/sub/test_s", "test_m[5s]")
    assert folder_of(Path("/g"), module, name) == Path("/g/tests/sub/test_s/test_m[5s]")


def test_a_manifest_written_before_the_typed_entries_round_trips_byte_for_byte() -> None:
    """manifest.json keeps its exact format: a manifest written by the code before the entries
    were typed (``ManifestEntry`` with a plain environment dict) reads into typed entries,
    each passes its integrity hash, and writing them again gives the very same bytes."""
    import json

    from pytest_lossless.goldens.manifest import (
        Environment,
        entry_sha256,
        manifest_document,
        parse_manifest,
    )

    path = Path(__file__).parent.parent / "data" / "goldens" / "manifest-v1.json"
    raw = path.read_bytes()
    entries = parse_manifest(path, raw)
    assert entries["big.mp4"].environment == Environment("cuda", "NVIDIA H200", "CUDA 13")
    assert entries["a.bin"].environment is None
    for entry in entries.values():
        assert entry.entry_sha256 == entry_sha256(entry)
    again = json.dumps(
        manifest_document(entries, "tests/test_x.py::test_y"), indent=2, sort_keys=True
    )
    assert (again + "\n").encode() == raw


def test_an_export_written_before_the_typed_entries_round_trips() -> None:
    """export.json keeps its exact format: each entry of an export written by the code before
    the entries were typed (a changed producer, a changed file, a new golden, a failing
    lossless.compare) reads into an ``ExportEntry`` and writes back as the very same object."""
    from pytest_lossless.plugin.export import ExportEntry

    path = Path(__file__).parent.parent / "data" / "goldens" / "export-v1.json"
    entries = json.loads(path.read_text())["entries"]
    assert {(e["source"], e["status"]) for e in entries} == {
        ("golden", "changed"),
        ("golden", "new"),
        ("lossless", "failed"),
    }
    for entry in entries:
        typed = ExportEntry.from_json(entry)
        assert typed.to_json() == entry
        assert ExportEntry.from_json(typed.to_json()) == typed


def test_accept_reads_an_export_entry_as_written_and_an_unreadable_environment_as_none() -> None:
    """accept reads export.json's entries as the ``ExportEntry`` records the export wrote; an
    environment class that cannot be read refuses its entry alone (read as None), a malformed
    entry the export, naming it."""
    from pytest_lossless.goldens.accept import ExportEntry, ExportError

    path = Path(__file__).parent.parent / "data" / "goldens" / "export-v1.json"
    entries = json.loads(path.read_text())["entries"]
    for entry in entries:
        read = ExportEntry.read(entry, path)
        assert read == ExportEntry.from_json(entry)
        assert read.runs
        assert all(r.fingerprint_sha256 for r in read.runs)
        if read.source == "lossless":
            assert read.golden is None
            assert read.target.scope == "all"
    golden = next(e for e in entries if e["source"] == "golden")
    forged = ExportEntry.read({**golden, "scope": "device", "environment": "npu\n"}, path)
    assert forged.target.scope == "device"
    assert forged.target.environment is None
    with pytest.raises(ExportError, match="test must not be empty"):
        ExportEntry.read({**golden, "test": ""}, path)
    with pytest.raises(ExportError, match="malformed"):
        ExportEntry.read({**golden, "runs": [{"name": "run 1"}]}, path)
    with pytest.raises(ExportError, match="not an object"):
        ExportEntry.read([golden], path)
