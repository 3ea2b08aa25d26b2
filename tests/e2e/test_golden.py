"""End to end: the ``golden`` fixture through real pytest runs, real ffmpeg, real libsndfile."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.mediagen import gray_frames, lying_wav, tone, write_video, write_wav

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

GOLDEN_TEST = """
import numpy as np
import pytest
from pathlib import Path

HERE = Path(__file__).parent

@pytest.mark.lossless
def test_media(golden):
    golden.check("clip.mp4", HERE / "clip.mp4")
    golden.check("audio.wav", HERE / "audio.wav")
    golden.check("latent.npy", np.load(HERE / "latent.npy", allow_pickle=False))
    golden.check("notes.txt", (HERE / "notes.txt").read_bytes())
"""


@pytest.fixture
def media_project(pytester: pytest.Pytester) -> Path:
    root = pytester.path
    write_video(root / "clip.mp4", gray_frames())
    write_wav(root / "audio.wav", tone())
    np.save(root / "latent.npy", np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
    (root / "notes.txt").write_bytes(b"seed=7 steps=4\n")
    pytester.makepyfile(test_media=GOLDEN_TEST)
    return root


def _manifest(root: Path) -> dict:
    return json.loads((root / "goldens/test_media/test_media/manifest.json").read_text())


def test_missing_golden_fails_with_hint_and_writes_nothing(pytester, media_project):
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*GoldenMissing*no golden 'clip.mp4'*--update-goldens*"])
    assert not (media_project / "goldens").exists()


def test_create_then_pass(pytester, media_project):
    result = pytester.runpytest("--update-goldens")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*golden updates*", "created: 4*"])
    manifest = _manifest(media_project)
    assert manifest["schema"] == 1
    kinds = {name: entry["kind"] for name, entry in manifest["artifacts"].items()}
    assert kinds == {
        "clip.mp4": "video",
        "audio.wav": "audio",
        "latent.npy": "tensor",
        "notes.txt": "bytes",
    }
    gates = {name: entry["gate"] for name, entry in manifest["artifacts"].items()}
    assert gates == {
        "clip.mp4": "decoded",
        "audio.wav": "decoded",
        "latent.npy": "elementwise",
        "notes.txt": "bytes",
    }
    provenance = manifest["artifacts"]["clip.mp4"]["provenance"]
    assert provenance["plugin_version"]
    assert "--update-goldens" in provenance["command"]

    result = pytester.runpytest("--lossless")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*gates and verdicts*", "*4 PASS*"])

    result = pytester.runpytest("--update-goldens")
    result.stdout.fnmatch_lines(["unchanged: 4"])


def test_without_lossless_flag_is_skipped_naming_the_flag(pytester, media_project):
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*--lossless*"])


def test_one_pixel_of_one_frame_is_caught_and_named(pytester, media_project):
    assert pytester.runpytest("--update-goldens").ret == 0
    frames = gray_frames()
    frames[5, 10 * 64 + 20] ^= 1  # one luma sample of frame 5
    write_video(media_project / "clip.mp4", frames)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "clip.mp4" in text
    assert "first differing frame: 5" in text
    assert "decoded" in text


def test_short_wav_names_both_sample_counts(pytester, media_project):
    assert pytester.runpytest("--update-goldens").ret == 0
    write_wav(media_project / "audio.wav", tone()[:-1])
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*audio.wav*"])
    text = result.stdout.str()
    assert "1600" in text
    assert "1599" in text


def test_truncated_wav_is_reported_as_truncation(pytester, media_project):
    assert pytester.runpytest("--update-goldens").ret == 0
    lying_wav(media_project / "audio.wav", tone(), declared_extra=400)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Truncat*audio.wav*"])


def test_corrupted_golden_is_an_integrity_error_not_a_mismatch(pytester, media_project):
    assert pytester.runpytest("--update-goldens").ret == 0
    stored = media_project / "goldens/test_media/test_media/notes.txt"
    stored.write_bytes(b"seed=8 steps=4\n")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*GoldenIntegrityError*notes.txt*"])


def test_changed_gate_is_refused(pytester, media_project):
    assert pytester.runpytest("--update-goldens").ret == 0
    pytester.makepyfile(
        test_media=GOLDEN_TEST.replace(
            'golden.check("notes.txt", (HERE / "notes.txt").read_bytes())',
            'golden.check("notes.txt", (HERE / "notes.txt").read_bytes())\n'
            '    golden.check("latent.npy", np.load(HERE / "latent.npy"), gate="bytes")',
        ).replace(
            '    golden.check("latent.npy", np.load(HERE / "latent.npy", allow_pickle=False))\n', ""
        )
    )
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*GateChanged*gate changed*'elementwise'*'bytes'*--update-goldens*"]
    )
    # No traceback and no "During handling of the above exception" echo of the same error.
    assert "During handling" not in result.stdout.str()
    assert "Traceback" not in result.stdout.str()


TENSOR_TEST = """
import numpy as np
import pytest
from pytest_lossless import tolerance

VALUE = {value}

@pytest.mark.lossless
@pytest.mark.parametrize("gate", ["elementwise", tolerance(atol=1e-6)], ids=["exact", "tol"])
def test_tensor(golden, gate):
    golden.check("t.npy", np.array(VALUE, dtype=np.float32), gate=gate)
"""


def test_signed_zero_fails_elementwise_and_passes_tolerance(pytester):
    pytester.makepyfile(test_tensor=TENSOR_TEST.format(value="[1.0, 0.0, 2.0]"))
    assert pytester.runpytest("--update-goldens").ret == 0
    pytester.makepyfile(test_tensor=TENSOR_TEST.format(value="[1.0, -0.0, 2.0]"))
    result = pytester.runpytest("--lossless", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_tensor?exact? FAILED*", "*test_tensor?tol? PASSED*"])
    result.stdout.fnmatch_lines(["*LOSSY-PASS*"])


def test_changed_nan_payload_is_caught(pytester):
    source = """
import numpy as np
import pytest

@pytest.mark.lossless
def test_nan(golden):
    bits = np.array([0x7FC00000, {payload}], dtype=np.uint32)
    golden.check("nan.npy", bits.view(np.float32))
"""
    pytester.makepyfile(test_nan=source.format(payload="0x7FC00001"))
    assert pytester.runpytest("--update-goldens").ret == 0
    pytester.makepyfile(test_nan=source.format(payload="0x7FC00002"))
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*nan.npy*"])


def test_update_goldens_under_xdist_writes_every_folder_whole(pytester):
    pytester.makepyfile(
        test_many="""
import numpy as np
import pytest

@pytest.mark.lossless
@pytest.mark.parametrize("i", range(16))
def test_many(golden, i):
    golden.check("a.npy", np.full((64, 64), i, dtype=np.int32))
    golden.check("b.bin", bytes([i]) * 1000)
"""
    )
    result = pytester.runpytest_subprocess("--update-goldens", "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=16)
    folders = sorted((pytester.path / "goldens/test_many").iterdir())
    assert [f.name for f in folders] == sorted(f"test_many[{i}]" for i in range(16))
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text())
        assert sorted(manifest["artifacts"]) == ["a.npy", "b.bin"]
        index = int(folder.name.split("[")[1].rstrip("]"))
        assert np.load(folder / "a.npy")[0, 0] == index
    assert pytester.runpytest_subprocess("--lossless", "-p", "xdist", "-n", "2").ret == 0


def test_nondeterministic_producer_is_refused_and_nothing_written(pytester):
    pytester.makepyfile(
        test_flaky="""
import os
import pytest

@pytest.mark.lossless
def test_flaky(golden):
    golden.check("noise.bin", lambda: os.urandom(32))
"""
    )
    result = pytester.runpytest("--update-goldens")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*NondeterministicProducer*noise.bin*Nothing was written*"])
    assert not (pytester.path / "goldens").exists()


def test_large_artifacts_are_kept_as_digests_only(pytester, media_project):
    result = pytester.runpytest("--update-goldens", "--lossless-digest-above=200")
    assert result.ret == 0
    folder = media_project / "goldens/test_media/test_media"
    manifest = _manifest(media_project)
    stored = {name: entry["stored"] for name, entry in manifest["artifacts"].items()}
    assert stored["audio.wav"] == "digest"
    assert stored["notes.txt"] == "full"
    assert not (folder / "audio.wav").exists()
    assert pytester.runpytest("--lossless").ret == 0
    write_wav(media_project / "audio.wav", tone()[:-1])
    assert pytester.runpytest("--lossless").ret == 1


def test_failed_update_leaves_the_old_golden(pytester, media_project):
    assert pytester.runpytest("--update-goldens").ret == 0
    before = _manifest(media_project)
    shutil.copy(media_project / "notes.txt", media_project / "notes.bak")
    pytester.makepyfile(test_media=GOLDEN_TEST + "\n    raise RuntimeError('model crashed')\n")
    (media_project / "notes.txt").write_bytes(b"other")
    result = pytester.runpytest("--update-goldens")
    result.assert_outcomes(failed=1)
    assert _manifest(media_project) == before


def test_a_lossless_test_that_compares_nothing_fails(pytester):
    pytester.makepyfile(
        test_empty="""
import pytest

@pytest.mark.lossless
def test_nothing():
    pass

@pytest.mark.lossless
def test_asks_for_golden_but_never_checks(golden):
    pass
"""
    )
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*marked lossless but compared nothing*"])


def test_a_golden_the_test_stopped_checking_fails(pytester, media_project):
    assert pytester.runpytest("--update-goldens").ret == 0
    pytester.makepyfile(
        test_media=GOLDEN_TEST.replace('    golden.check("audio.wav", HERE / "audio.wav")\n', "")
    )
    result = pytester.runpytest("--lossless")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*golden 'audio.wav' in *manifest.json was not checked*"])
    result.stdout.fnmatch_lines(["UNCHECKED*audio.wav*"])
    receipt = json.loads(max((media_project / "lossless-receipts").rglob("*__*.json")).read_text())
    assert {
        "artifact": "audio.wav",
        "error": "Unchecked",
        "passed": False,
        "message": "in the golden's manifest, but not checked",
    } in receipt["gates"]
    assert receipt["verdicts"]["overall"] == "FAIL"


RUN_TEST = """
import os
import numpy as np
import pytest

def run():
    return {{"latent.npy": np.arange(6, dtype=np.float32), "log.bin": {log}}}

@pytest.mark.lossless
def test_run(golden):
    golden.check_all(run)
"""


def test_check_all_takes_a_producer_and_refuses_a_flaky_one(pytester):
    pytester.makepyfile(test_run=RUN_TEST.format(log="b'ok'"))
    result = pytester.runpytest("--update-goldens")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["created: 2", "*CREATED*latent.npy*"])
    assert pytester.runpytest("--lossless").ret == 0
    pytester.makepyfile(test_run=RUN_TEST.format(log="os.urandom(8)"))
    result = pytester.runpytest("--update-goldens")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*NondeterministicProducer*Nothing was written*",
            "*What varied between its runs:*",
            "*run 1 vs run 2:*",
            "*log.bin*",
        ]
    )
    manifest = json.loads((pytester.path / "goldens/test_run/test_run/manifest.json").read_text())
    assert manifest["artifacts"]["log.bin"]["sha256"] == hashlib.sha256(b"ok").hexdigest()


def test_update_goldens_skips_gates_that_write_no_golden(pytester):
    pytester.makepyfile(
        test_mixed="""
import numpy as np
import pytest

@pytest.mark.lossless
def test_writes(golden):
    golden.check("a.npy", np.zeros(3))

@pytest.mark.lossless
def test_compares_only(lossless):
    lossless.compare(lambda: {"a.npy": np.zeros(3)}, lambda: {"a.npy": np.zeros(3)})
"""
    )
    result = pytester.runpytest("--update-goldens", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*--update-goldens: this gate has no golden to write*"])
    result = pytester.runpytest("--update-goldens", "--lossless")
    result.assert_outcomes(passed=2)


CUSTOM_KIND_CONFTEST = """
import hashlib
from pytest_lossless import hookimpl
from pytest_lossless.gates import GateResult

def pytest_lossless_detect_kind(path, head):
    return "csv" if path.suffix == ".csv" else None

def pytest_lossless_fingerprint(kind, path):
    if kind != "csv":
        return None
    rows = path.read_bytes().splitlines()
    return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "size": path.stat().st_size,
            "rows": [hashlib.sha256(r).hexdigest() for r in rows]}

def pytest_lossless_default_gate(kind):
    return "decoded" if kind == "csv" else None

def pytest_lossless_compare(kind, gate, expected, obtained):
    if kind != "csv":
        return None
    a, b = expected.fingerprint["rows"], obtained.fingerprint["rows"]
    differing = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    result = GateResult(artifact=expected.name, kind=kind, gate=gate.spec, lossless=True,
                        passed=a == b, unit="row", total=len(a))
    if len(a) != len(b):
        result.metadata_diffs.append(f"row count: {len(a)} vs {len(b)}")
    if differing:
        result.first_mismatch = f"row {differing[0]}"
        result.mismatch_count = len(differing)
    return result
"""


def test_a_conftest_adds_an_artifact_kind_through_our_hooks(pytester):
    pytester.makeconftest(CUSTOM_KIND_CONFTEST)
    table = pytester.path / "t.csv"
    table.write_text("a,b\n1,2\n3,4\n")
    pytester.makepyfile(
        test_csv="""
import pytest
from pathlib import Path

@pytest.mark.lossless
def test_csv(golden):
    golden.check("t.csv", Path(__file__).parent / "t.csv")
"""
    )
    assert pytester.runpytest("--update-goldens").ret == 0
    manifest = json.loads((pytester.path / "goldens/test_csv/test_csv/manifest.json").read_text())
    assert manifest["artifacts"]["t.csv"]["kind"] == "csv"
    assert manifest["artifacts"]["t.csv"]["gate"] == "decoded"
    assert pytester.runpytest("--lossless").ret == 0
    table.write_text("a,b\n1,2\n3,5\n")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*artifact 't.csv' (csv), gate decoded*", "*first differing row: row 2*"]
    )


def test_an_empty_or_garbage_output_is_named_never_a_gate_change(pytester, media_project):
    """D4: the test named no gate, so an empty clip is "empty file", not "gate changed", and
    following any advice cannot store it as the golden."""
    assert pytester.runpytest("--update-goldens").ret == 0
    before = _manifest(media_project)
    (media_project / "clip.mp4").write_bytes(b"")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*clip.mp4: empty file (0 bytes), but the golden is a video*"])
    assert "gate changed" not in result.stdout.str()
    (media_project / "clip.mp4").write_bytes(b"\x00garbage" * 100)
    result = pytester.runpytest("--lossless")
    result.stdout.fnmatch_lines(["*clip.mp4: not a video: no stream ffmpeg can decode*"])
    (media_project / "clip.mp4").write_bytes(b"")
    result = pytester.runpytest("--update-goldens")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*empty file (0 bytes): refusing to store it as the golden*"])
    assert _manifest(media_project) == before


def test_an_expected_empty_output_can_be_a_golden(pytester):
    pytester.makepyfile(
        test_empty="""
import pytest

@pytest.mark.lossless
def test_empty(golden):
    golden.check("log.txt", b"", allow_empty=True)
"""
    )
    assert pytester.runpytest("--update-goldens").ret == 0
    assert pytester.runpytest("--lossless").ret == 0


LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 43210\n"
)


def test_goldens_checked_out_as_lfs_pointers_name_git_lfs_pull(pytester, media_project):
    assert pytester.runpytest("--update-goldens").ret == 0
    folder = media_project / "goldens/test_media/test_media"
    (folder / "audio.wav").write_text(LFS_POINTER)  # what a clone without git-lfs holds
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*GoldenStub: *audio.wav: is a Git LFS pointer file, not the golden*`git lfs pull`*"]
    )
    text = result.stdout.str()
    assert "Traceback" not in text
    assert "RIFF" not in text
    assert "integrity" not in text
    (folder / "manifest.json").write_text(LFS_POINTER)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*GoldenStub: *manifest.json: is a Git LFS pointer*git lfs pull*"])


COUNTED_TEST = """
import os
from pathlib import Path
import numpy as np
import pytest

CALLS = Path(__file__).parent / "calls.txt"

def noise():
    with CALLS.open("a") as calls:
        calls.write("x")
    return os.urandom(8) if os.environ.get("FLAKY") else b"ok"

@pytest.mark.lossless
def test_one(golden):
    golden.check("noise.bin", noise)

@pytest.mark.lossless
def test_all(golden):
    golden.check_all(lambda: {"noise.bin": noise(), "a.npy": np.arange(3)})
"""


def _calls(root: Path) -> int:
    calls = root / "calls.txt"
    count = len(calls.read_text()) if calls.exists() else 0
    calls.unlink(missing_ok=True)
    return count


def test_repeat_producers_makes_a_flaky_producer_inconclusive_not_a_fail(pytester, monkeypatch):
    """#25: under --lossless a producer runs once (a flaky output is a FAIL against its golden);
    with --lossless-repeat-producers it runs --lossless-control-runs times, and runs that differ
    are INCONCLUSIVE, recorded as a lossless entry whose control is not repeatable."""
    pytester.makepyfile(test_counted=COUNTED_TEST)
    root = pytester.path
    assert pytester.runpytest("--update-goldens").ret == 0
    _calls(root)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(passed=2)
    assert _calls(root) == 2  # once per producer: today's compare mode, unchanged
    result = pytester.runpytest("--lossless", "--lossless-repeat-producers")
    result.assert_outcomes(passed=2)
    assert _calls(root) == 4  # twice per producer (the default control runs)
    result = pytester.runpytest(
        "--lossless", "--lossless-repeat-producers", "--lossless-control-runs=3"
    )
    result.assert_outcomes(passed=2)
    assert _calls(root) == 6
    monkeypatch.setenv("FLAKY", "1")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=2)  # without repeats a flaky output looks like a change
    result = pytester.runpytest("--lossless", "--lossless-repeat-producers")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*INCONCLUSIVE*golden 'noise.bin' producer*not repeatable*", "*noise.bin*"]
    )
    assert result.stdout.str().count("INCONCLUSIVE: ") == 2
    session = max(p for p in (root / "lossless-receipts").iterdir() if p.is_dir())
    for name in ("test_counted.py__test_one.json", "test_counted.py__test_all.json"):
        receipt = json.loads((session / name).read_text())
        assert receipt["verdicts"]["overall"] == "INCONCLUSIVE"
        assert receipt["gates"] == []  # nothing was compared with the golden
        (entry,) = receipt["lossless"]
        assert entry["control_repeatable"] is False
        assert entry["verdict"] == "INCONCLUSIVE"
    index = json.loads((session / "INDEX.json").read_text())
    assert {t["outcome"] for t in index["tests"]} == {"failed"}
    verified = pytester.run(sys.executable, "-m", "pytest_lossless", "verify", str(session))
    assert verified.ret == 0, verified.stdout.str()


# ------------------------------------------------------------------ layout (#20)

DUP_TEST = """
import pytest

@pytest.mark.lossless
def test_out(golden):
    golden.check("out.txt", b"made by %s")
"""


def test_two_modules_of_one_name_never_share_goldens(pytester):
    """tests/a/test_dup.py and tests/b/test_dup.py: each its own folder, neither overwritten."""
    for name in ("a", "b"):
        folder = pytester.path / "tests" / name
        folder.mkdir(parents=True)
        (folder / "test_dup.py").write_text(DUP_TEST % name)
    pytester.makeini("[pytest]\naddopts = --import-mode=importlib\n")
    pytester.runpytest("--update-goldens").assert_outcomes(passed=2)
    for name in ("a", "b"):
        manifest = pytester.path / "goldens" / "tests" / name / "test_dup" / "test_out"
        data = json.loads((manifest / "manifest.json").read_text())
        assert data["test"] == f"tests/{name}/test_dup.py::test_out"
        assert (manifest / "out.txt").read_bytes() == f"made by {name}".encode()
    assert not (pytester.path / "goldens" / "test_dup").exists()
    pytester.runpytest("--lossless").assert_outcomes(passed=2)
    # One of them changes: only its own golden fails.
    (pytester.path / "tests" / "b" / "test_dup.py").write_text(DUP_TEST % "another")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*FAILED tests/b/test_dup.py::test_out*"])


def test_goldens_of_the_old_layout_are_moved_on_the_next_run(pytester):
    """A folder an earlier version wrote at goldens/<file name>/<test>/ is moved, once, to
    goldens/<module path>/<test>/ and compared there."""
    folder = pytester.path / "tests" / "a"
    folder.mkdir(parents=True)
    (folder / "test_dup.py").write_text(DUP_TEST % "x")
    pytester.runpytest("--update-goldens").assert_outcomes(passed=1)
    new = pytester.path / "goldens/tests/a/test_dup/test_out"
    old = pytester.path / "goldens/test_dup/test_out"
    old.parent.mkdir(parents=True)
    new.rename(old)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*migrated: 1*", "*goldens/tests/a/test_dup/test_out*moved from*"])
    assert (new / "manifest.json").is_file()
    assert not old.parent.exists()


def test_a_committed_link_under_goldens_to_a_project_folder_is_never_replaced(pytester):
    """goldens/test_links -> ../src: an update must not replace src/test_x (and delete the user's
    untracked file there); the link is named, and src is untouched."""
    pytester.makepyfile(
        test_links="""
import pytest

@pytest.mark.lossless
def test_x(golden):
    golden.check("t.txt", b"new")
"""
    )
    user = pytester.path / "src" / "test_x"
    user.mkdir(parents=True)
    (user / "notes.txt").write_text("the user's own file\n")
    (pytester.path / "goldens").mkdir()
    (pytester.path / "goldens" / "test_links").symlink_to("../src")
    result = pytester.runpytest("--update-goldens")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*PathOutsideRoot*goldens/test_links*symbolic link*"])
    assert (user / "notes.txt").read_text() == "the user's own file\n"
    assert sorted(p.name for p in (pytester.path / "src").iterdir()) == ["test_x"]
    assert sorted(p.name for p in user.iterdir()) == ["notes.txt"]
    # Comparing refuses it as well: nothing is read through it.
    result = pytester.runpytest("--lossless")
    result.stdout.fnmatch_lines(["*PathOutsideRoot*goldens/test_links*"])


UNDECODABLE_TEST = """
import os
import numpy as np
import pytest

NAME = os.fsdecode(b"out-\\xff.npy")

@pytest.mark.lossless
def test_one(golden):
    golden.check(NAME, np.zeros(3))

@pytest.mark.lossless
def test_all(golden):
    golden.check_all({NAME: np.zeros(3)})

@pytest.mark.lossless
def test_producer(golden):
    golden.check_all(lambda: {NAME: np.zeros(3)})
"""


@pytest.mark.parametrize("mode", ["--update-goldens", "--lossless"])
def test_an_artifact_name_that_is_not_utf8_is_named_never_an_internal_error(pytester, mode):
    pytester.makepyfile(test_u=UNDECODABLE_TEST)
    result = pytester.runpytest(mode)
    text = result.stdout.str()
    assert "INTERNALERROR" not in text
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        ["*ArtifactError*'out-\\udcff.npy' holds bytes that are not UTF-8*"]
    )
    assert not (pytester.path / "goldens" / "test_u" / "test_one").exists()


# ------------------------------------------------------------------ what a failure says (#22)

CHECK_ALL_TEST = """
import numpy as np
import pytest
from pathlib import Path

HERE = Path(__file__).parent

@pytest.mark.lossless
def test_run(golden):
    golden.check_all({
        "clip.mp4": HERE / "clip.mp4",
        "audio.wav": HERE / "audio.wav",
        "latent.npy": np.load(HERE / "latent.npy", allow_pickle=False),
    })
"""


def test_check_all_compares_every_artifact_reports_each_then_fails(pytester, media_project):
    """A changed frame, sample and float: all three are named, each a FAIL row, and the
    message ends with the command that accepts them; the versions the goldens were made with
    are in the manifest, and a different one is named; diagnostics go beside the report."""
    pytester.makepyfile(test_media=CHECK_ALL_TEST)
    assert pytester.runpytest("--update-goldens").ret == 0
    manifest_path = media_project / "goldens/test_media/test_run/manifest.json"
    manifest = json.loads(manifest_path.read_text())
    made = manifest["artifacts"]["clip.mp4"]["provenance"]["made_with"]
    assert set(made) == {"python", "numpy", "ffmpeg", "pytest-lossless"}
    assert all(made[key] for key in ("python", "numpy", "ffmpeg"))
    # As if made on another machine: provenance is not part of the entry's hash.
    manifest["artifacts"]["audio.wav"]["provenance"]["made_with"]["ffmpeg"] = "0.1-elsewhere"
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    frames = gray_frames()
    frames[5, 10 * 64 + 20] ^= 1
    write_video(media_project / "clip.mp4", frames)
    samples = tone()
    samples[100] += 1
    write_wav(media_project / "audio.wav", samples)
    latent = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    latent[3, 3] = np.nextafter(latent[3, 3], np.float32(2))
    np.save(media_project / "latent.npy", latent)

    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    result.stdout.fnmatch_lines(["*3 of 3 artifacts of the run failed their check*"])
    assert "first differing frame: 5" in text
    assert f"made with ffmpeg 0.1-elsewhere, now {made['ffmpeg']}" in text
    result.stdout.fnmatch_lines(
        [
            "*If the change is intended, accept it: "
            "pytest test_media.py --update-goldens -k test_run*"
        ]
    )
    rows = [line for line in text.splitlines() if line.startswith("FAIL ")]
    assert len(rows) == 3, rows
    assert sorted(row.split()[2] for row in rows) == ["audio.wav", "clip.mp4", "latent.npy"]
    # Diagnostics in the session folder, beside the report, not in pytest's temporary folder.
    sessions = list((media_project / "lossless-receipts").iterdir())
    diagnostics = [p for s in sessions for p in (s / "diagnostics").rglob("*") if p.is_file()]
    assert diagnostics, "no diagnostics in the session folder"
    assert "lossless-receipts/" in text


# ------------------------------------------------------------------ golden folders of no test (#20)

TWO_TESTS = """
import pytest

@pytest.mark.lossless
def test_x(golden):
    golden.check("x.txt", b"x")

@pytest.mark.lossless
def test_%s(golden):
    golden.check("y.txt", b"y")
"""


def _manifest_of(folder: Path, test: str) -> None:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"schema": 1, "test": test, "artifacts": {}}))


def test_golden_folders_of_renamed_or_deleted_tests_are_reported_then_removed(pytester):
    pytester.makepyfile(test_a=TWO_TESTS % "y", test_b=TWO_TESTS % "w")
    pytester.runpytest("--update-goldens").assert_outcomes(passed=4)
    goldens = pytester.path / "goldens"
    # A device's goldens of a deleted module, and goldens of a module skipped at import.
    _manifest_of(goldens / "test_c/test_d@device/cpu__slot__x86_64", "test_c.py::test_d")
    pytester.makepyfile(
        test_skipped="import pytest\npytest.skip('no such device', allow_module_level=True)\n"
    )
    _manifest_of(goldens / "test_skipped/test_s", "test_skipped.py::test_s")
    # test_a.py::test_y renamed to test_z; test_b.py deleted.
    pytester.makepyfile(test_a=TWO_TESTS % "z")
    (pytester.path / "test_b.py").unlink()

    result = pytester.runpytest("--update-goldens", "-k", "test_x")
    result.stdout.fnmatch_lines(
        [
            "*golden folders of no test*",
            "kept: goldens/test_a/test_y (test_a.py no longer has this test*",
            "kept: goldens/test_b/test_w (test_b.py no longer exists)",
            "kept: goldens/test_b/test_x (test_b.py no longer exists)",
            "kept: goldens/test_c/test_d@device (test_c.py no longer exists; device-scoped*",
            "not removed: the session was filtered (-k, deselection)",
        ]
    )
    assert (goldens / "test_a/test_y").is_dir()
    assert "test_skipped" not in result.stdout.str()

    result = pytester.runpytest("--update-goldens")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "removed: goldens/test_a/test_y*",
            "removed: goldens/test_b/test_w*",
            "removed: goldens/test_b/test_x*",
            "kept: goldens/test_c/test_d@device*",
        ]
    )
    assert sorted(p.name for p in (goldens / "test_a").iterdir()) == ["test_x", "test_z"]
    assert not (goldens / "test_b").exists()
    assert (goldens / "test_c/test_d@device").is_dir()
    assert (goldens / "test_skipped/test_s/manifest.json").is_file()
    # A session stopped early (-x after a failure) removes nothing.
    pytester.makepyfile(test_a=TWO_TESTS % "q", test_0="def test_fails():\n    assert False\n")
    result = pytester.runpytest("--update-goldens", "-x")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["kept: goldens/test_a/test_z*", "not removed: the session did not finish"]
    )
    assert (goldens / "test_a/test_z").is_dir()


PRODUCER_FAILS = """
import pytest

def producer():
    raise RuntimeError("ffmpeg could not put PCM audio in an MP4")

@pytest.mark.lossless
def test_run(golden):
    golden.check_all(producer)
"""


@pytest.mark.parametrize("mode", ["--lossless", "--update-goldens"])
def test_a_producer_that_fails_is_named_never_no_gate_compared_anything(pytester, mode):
    """#22: a producer that fails (an ffmpeg too old to mux the audio) is an ERROR row saying
    that the producer failed, not "no gate compared anything (check -m and -k)"."""
    pytester.makepyfile(test_p=PRODUCER_FAILS)
    result = pytester.runpytest(*dict.fromkeys([mode, "--lossless"]))
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "no gate compared anything" not in text
    result.stdout.fnmatch_lines(
        ["ERROR*test_p.py::test_run*(run)*", "*ProducerFailed: the producer failed*"]
    )
    assert "ffmpeg could not put PCM audio in an MP4" in text
