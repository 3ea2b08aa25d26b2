"""End to end: an export accepted on another checkout, and the refusals of accept.

A changed model's ``--lossless --lossless-export`` on checkout A fails and exports its new
outputs; ``python -m pytest_lossless accept`` on checkout B (the same change, the old goldens)
writes them as ``--update-goldens`` would have on A, so ``--lossless`` passes on B. An export
from a producer whose runs disagree, or whose files or receipts were changed, is refused and
the exit status says so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_lossless.__main__ import accept_command
from pytest_lossless.goldens.accept import keyword_matcher
from tests.e2e.alone import run_pytest
from tests.e2e.mediagen import gray_frames, write_video

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

MODEL = """
import itertools

import numpy as np

VERSION = {version}
RUNS = itertools.count()

def model():
    latent = np.arange(16, dtype=np.float32) * VERSION
    return {{"latent.npy": latent, "tokens.bin": b"v%d" % VERSION}}

def flaky():
    return {{"noise.npy": np.full(4, next(RUNS), dtype=np.int32)}}
"""

SUITE = """
import pytest

from model import flaky, model

@pytest.mark.lossless
def test_model(golden):
    golden.check_all(model)

@pytest.mark.lossless
def test_flaky(golden):
    golden.check("noise.npy", lambda: flaky()["noise.npy"])

@pytest.mark.lossless
def test_file(golden, tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"file %d" % __import__("model").VERSION)
    golden.check("out.bin", path)
"""


def _checkout(root: Path, version: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "model.py").write_text(MODEL.format(version=version))
    (root / "test_suite.py").write_text(SUITE)
    return root


def _run_alone(root: Path, basetemp: Path, *args: str) -> pytest.RunResult:
    """``_run`` from a module-scoped fixture, where no pytester exists."""
    return run_pytest(root.parent, basetemp, str(root), "-p", "no:cacheprovider", *args)


def _set_version(root: Path, version: int) -> None:
    (root / "model.py").write_text(MODEL.format(version=version))
    for cached in root.rglob("__pycache__"):
        shutil.rmtree(cached)


def _run(pytester: pytest.Pytester, root: Path, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(str(root), "-p", "no:cacheprovider", *args)


@pytest.fixture(scope="module")
def exported_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Checkout A: goldens of version 1, the model changed to version 2, run with an export;
    checkout B: the same change, with A's goldens of version 1. Made once per module (two
    pytest sessions): each test gets a copy (``exported``), so what one changes no other sees."""
    top = tmp_path_factory.mktemp("exported")
    a = _checkout(top / "a", 1)
    # test_flaky cannot write its golden (its runs disagree): it is new in the export too.
    _run_alone(a, top / "tmp1", "--update-goldens").assert_outcomes(passed=2, failed=1)
    b = _checkout(top / "b", 2)
    shutil.copytree(a / "goldens", b / "goldens")
    _set_version(a, 2)
    result = _run_alone(a, top / "tmp2", "--lossless", "--lossless-export", "export")
    result.assert_outcomes(failed=3)
    assert "pytest-lossless export: export (" in result.stdout.str()
    for scratch in ("tmp1", "tmp2"):
        shutil.rmtree(top / scratch)
    return top


@pytest.fixture
def exported(exported_once: Path, pytester: pytest.Pytester) -> tuple[Path, Path]:
    """A copy of ``exported_once`` in this test's own folder: (A's export, checkout B)."""
    for name in ("a", "b"):
        shutil.copytree(exported_once / name, pytester.path / name, symlinks=True)
    return pytester.path / "a" / "export", pytester.path / "b"


def _accept(
    export: Path, checkout: Path, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str]:
    import io

    monkeypatch.chdir(checkout)
    out = io.StringIO()
    keyword = args[1] if args[:1] == ("-k",) else None
    code = accept_command(export, keyword=keyword, out=out, entry_points=False)
    return code, out.getvalue()


def test_an_export_accepted_on_another_checkout_makes_it_pass(exported, pytester, monkeypatch):
    export, b = exported
    before = _run(pytester, b, "--lossless")
    before.assert_outcomes(failed=3)
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    assert code == 0, out
    assert "CHANGED goldens/test_suite/test_model/latent.npy" in out
    assert "CHANGED goldens/test_suite/test_model/tokens.bin" in out
    after = _run(pytester, b, "--lossless", "-k", "model")
    after.assert_outcomes(passed=1)
    # The manifest entries are those --update-goldens wrote on A (provenance included).
    manifest = json.loads((b / "goldens/test_suite/test_model/manifest.json").read_text())
    entry = manifest["artifacts"]["latent.npy"]
    assert entry["provenance"]["command"][0] == "pytest"
    assert "--lossless-export" in entry["provenance"]["command"]
    # Accepting again changes nothing.
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    assert code == 0, out
    assert "UNCHANGED goldens/test_suite/test_model/latent.npy" in out, out


def test_a_non_repeatable_producer_and_a_plain_file_are_refused(exported, monkeypatch):
    export, b = exported
    code, out = _accept(export, b, monkeypatch)
    assert code == 1, out
    flaky = [line for line in out.splitlines() if "noise.npy" in line]
    assert flaky, out
    assert flaky[0].startswith("REFUSED"), out
    assert "runs did not agree" in flaky[0]
    plain = [line for line in out.splitlines() if "out.bin" in line]
    assert plain, out
    assert plain[0].startswith("REFUSED"), out
    assert "not a producer" in plain[0], out
    # What may be accepted still is, in the same call.
    assert "CHANGED goldens/test_suite/test_model/latent.npy" in out
    assert not (b / "goldens/test_suite/test_flaky").exists()


def test_the_export_records_the_runs_and_whether_they_agreed(exported):
    export, _ = exported
    document = json.loads((export / "export.json").read_text())
    entries = {(e["test"].split("::")[-1], e["artifact"]): e for e in document["entries"]}
    model = entries[("test_model", "latent.npy")]
    assert model["status"] == "changed"
    assert model["agreed"] is True
    assert [r["name"] for r in model["runs"]] == ["run 1", "run 2", "checked"]
    assert (export / model["file"]).is_file()
    assert (export / model["receipt"]).is_file()
    assert model["location"]["file"] == "test_suite.py"
    flaky = entries[("test_flaky", "noise.npy")]
    assert flaky["status"] == "new"
    assert flaky["agreed"] is False
    assert "run 1 vs run 2" in flaky["varied"]
    plain = entries[("test_file", "out.bin")]
    assert plain["producer"] is False
    assert len(plain["runs"]) == 1
    assert (export / "report" / "index.html").is_file()


def test_a_changed_file_or_receipt_in_the_export_is_refused(exported, monkeypatch):
    export, b = exported
    document = json.loads((export / "export.json").read_text())
    model = next(e for e in document["entries"] if e["artifact"] == "latent.npy")
    (export / model["file"]).write_bytes(b"\x93NUMPY tampered")
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    assert code == 1
    assert "was changed after the export was written" in out
    tokens = next(e for e in document["entries"] if e["artifact"] == "tokens.bin")
    receipt = export / tokens["receipt"]
    data = json.loads(receipt.read_text())
    data["gates"][0]["passed"] = True
    receipt.write_text(json.dumps(data))
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    assert code == 1
    assert "does not pass verify" in out
    for entry in document["entries"]:
        entry["file"] = "../../outside.npy"
    (export / "export.json").write_text(json.dumps(document))
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    assert code == 1
    assert "REFUSED" in out
    assert not (b / "goldens/test_suite/test_model/outside.npy").exists()


def test_the_command_line(exported):
    export, b = exported
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_lossless",
            "accept",
            str(export),
            "-k",
            "model and not flaky",
        ],
        cwd=b,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 of 2 artifacts accepted" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "accept", str(b / "nowhere")],
        cwd=b,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "no such export folder" in result.stderr


def test_a_frozen_gate_is_not_changed_by_accept(pytester, monkeypatch):
    """Checkout B froze another gate than the one A's test asks for: accept refuses to change
    it (a gate is changed by --update-goldens only)."""
    gated = SUITE.replace(
        "golden.check_all(model)",
        "golden.check_all(lambda: {'t.npy': model()['latent.npy']}, gate)",
    )
    a = _checkout(pytester.path / "a", 1)
    (a / "test_suite.py").write_text("gate = 'elementwise'\n" + gated)
    _run(pytester, a, "--update-goldens", "-k", "model").assert_outcomes(passed=1)
    b = _checkout(pytester.path / "b", 2)
    (b / "test_suite.py").write_text("gate = 'bytes'\n" + gated)
    _run(pytester, b, "--update-goldens", "-k", "model").assert_outcomes(passed=1)
    _set_version(a, 2)
    _run(pytester, a, "--lossless", "--lossless-export", "export", "-k", "model")
    code, out = _accept(a / "export", b, monkeypatch)
    assert code == 1, out
    assert "frozen as bytes" in out, out
    assert "asks for elementwise" in out, out


def test_a_video_round_trips(pytester, monkeypatch):
    """A real video through export and accept: the decoded gate passes after."""
    suite = """
import pytest
from pathlib import Path
HERE = Path(__file__).parent

@pytest.mark.lossless
def test_clip(golden):
    golden.check("clip.mp4", lambda: HERE / "clip.mp4")
"""
    a, b = pytester.path / "a", pytester.path / "b"
    for root in (a, b):
        root.mkdir()
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "test_clip.py").write_text(suite)
    frames = gray_frames()
    write_video(a / "clip.mp4", frames)
    _run(pytester, a, "--update-goldens").assert_outcomes(passed=1)
    shutil.copytree(a / "goldens", b / "goldens")
    frames[3][100] += 4
    write_video(a / "clip.mp4", frames)
    shutil.copy(a / "clip.mp4", b / "clip.mp4")
    _run(pytester, a, "--lossless", "--lossless-export", "export").assert_outcomes(failed=1)
    code, out = _accept(a / "export", b, monkeypatch)
    assert code == 0, out
    assert "CHANGED goldens/test_clip/test_clip/clip.mp4" in out, out
    _run(pytester, b, "--lossless").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("expression", "test_id", "expected"),
    [
        ("model", "t.py::test_model", True),
        ("MODEL", "t.py::test_model", True),
        ("model and not flaky", "t.py::test_model", True),
        ("model and not flaky", "t.py::test_model_flaky", False),
        ("flaky or clip", "t.py::test_clip", True),
        ("not (a or b)", "x.py::test_ab", False),
        ("not (a or b)", "x.py::test_c", True),
        ("(clip)", "x.py::test_model", False),
    ],
)
def test_keyword_expressions_read_like_pytest(expression, test_id, expected):
    assert keyword_matcher(expression)(test_id) is expected


@pytest.mark.parametrize("expression", ["and", "model and", "(model", "model)"])
def test_a_bad_keyword_expression_is_an_error(expression):
    with pytest.raises(ValueError, match="-k"):
        keyword_matcher(expression)


SCOPED = """
import numpy as np
import pytest

VERSION = {version}

@pytest.mark.npu
@pytest.mark.lossless
def test_scoped(golden, devices):
    golden.check("out.npy", lambda: np.full(4, VERSION, dtype=np.float32), scope="device")
"""


def test_a_device_scoped_golden_is_accepted_into_its_class(pytester, monkeypatch):
    a, b = pytester.path / "a", pytester.path / "b"
    for root in (a, b):
        root.mkdir()
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "test_scoped.py").write_text(SCOPED.format(version=1))
    cpu = ("--lossless-backend", "cpu")
    _run(pytester, a, "--update-goldens", *cpu).assert_outcomes(passed=1)
    shutil.copytree(a / "goldens", b / "goldens")
    for root in (a, b):
        (root / "test_scoped.py").write_text(SCOPED.format(version=2))
    _run(pytester, a, "--lossless", "--lossless-export", "export", *cpu).assert_outcomes(failed=1)
    (entry,) = json.loads((a / "export" / "export.json").read_text())["entries"]
    assert entry["scope"] == "device"
    code, out = _accept(a / "export", b, monkeypatch)
    assert code == 0, out
    assert "CHANGED goldens/test_scoped/test_scoped@device/cpu__" in out
    _run(pytester, b, "--lossless", *cpu).assert_outcomes(passed=1)


# ------------------------------------------------------------------ forged exports (review H1, H2)


def _document(export: Path) -> dict:
    return json.loads((export / "export.json").read_text())


def _save(export: Path, document: dict) -> None:
    (export / "export.json").write_text(json.dumps(document))


def _entry(document: dict, artifact: str) -> dict:
    return next(e for e in document["entries"] if e["artifact"] == artifact)


def _write_receipt(path: Path, data: dict) -> None:
    """A receipt edited consistently (its integrity hash recomputed, as a forger would)."""
    from pytest_lossless.evidence.receipts import derive_verdicts, raw_sha256

    data["verdicts"] = derive_verdicts(data)
    data["integrity"]["raw_sha256"] = raw_sha256(data)
    path.write_text(json.dumps(data))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_the_receipt_records_the_runs_of_the_export(exported):
    export, _ = exported
    model = _entry(_document(export), "latent.npy")
    receipt = json.loads((export / model["receipt"]).read_text())
    (block,) = [b for b in receipt["export"] if b["artifact"] == "latent.npy"]
    assert block["agreed"] is True
    assert block["runs"] == model["runs"]
    assert "export" in receipt["integrity"]["covers"]


def test_a_forged_producer_claim_is_refused(exported, monkeypatch):
    """export.json edited to say a plain file came from a producer whose two runs agreed: the
    receipt records no such runs, so nothing is written."""
    export, b = exported
    document = _document(export)
    plain = _entry(document, "out.bin")
    run = dict(plain["runs"][0])
    plain.update(
        producer=True, agreed=True, runs=[{**run, "name": "run 1"}, {**run, "name": "run 2"}]
    )
    _save(export, document)
    code, out = _accept(export, b, monkeypatch, "-k", "test_file")
    assert code == 1, out
    (line,) = [line for line in out.splitlines() if "out.bin" in line]
    assert line.startswith("REFUSED"), out
    assert "the receipt does not vouch for these runs" in line, out
    assert not (b / "goldens/test_suite/test_file/out.bin").read_bytes().startswith(b"file 2")


def test_a_swapped_file_with_a_matching_export_json_is_refused(exported, monkeypatch):
    """The artifact replaced, and export.json's SHA-256, fingerprint and runs updated to match
    it: accept fingerprints the file itself and the receipt's runs do not name it."""
    import numpy as np

    from pytest_lossless.core.digests import canonical_sha256, sha256_file
    from pytest_lossless.kinds.registry import KindRegistry, plugin_manager

    export, b = exported
    before = _snapshot(b / "goldens/test_suite/test_model")
    document = _document(export)
    model = _entry(document, "latent.npy")
    path = export / model["file"]
    with open(path, "wb") as handle:
        np.save(handle, np.full(16, 42.0, dtype=np.float32))
    kinds = KindRegistry(plugin_manager((), entry_points=False).hook)
    forged = kinds.artifact("latent.npy", path)
    model.update(sha256=sha256_file(path), fingerprint=forged.fingerprint)
    model["runs"] = [
        {
            "name": f"run {i}",
            "sha256": sha256_file(path),
            "fingerprint_sha256": canonical_sha256(forged.fingerprint),
        }
        for i in (1, 2)
    ]
    _save(export, document)
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    assert code == 1, out
    (line,) = [line for line in out.splitlines() if "latent.npy" in line]
    assert line.startswith("REFUSED"), out
    assert "another fingerprint" in line or "does not vouch for these runs" in line, out
    # With the receipt's gate block silent on it, the receipt's runs still refuse it.
    receipt = export / model["receipt"]
    data = json.loads(receipt.read_text())
    data["gates"] = [g for g in data["gates"] if g.get("artifact") != "latent.npy"]
    _write_receipt(receipt, data)
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    (line,) = [line for line in out.splitlines() if "latent.npy" in line]
    assert line.startswith("REFUSED"), out
    assert "does not vouch for these runs" in line, out
    after = _snapshot(b / "goldens/test_suite/test_model")
    latent = [json.loads(s["manifest.json"])["artifacts"]["latent.npy"] for s in (before, after)]
    assert latent[0] == latent[1]  # tokens.bin was accepted: only latent.npy is compared
    assert after.get("latent.npy") == before.get("latent.npy")


def test_a_redirect_to_another_tests_golden_is_ignored_or_refused(exported, monkeypatch):
    """test_name and module edited to another test's folder (and a path out of the goldens):
    the folder comes from the test id; a test id or artifact name edited is refused."""
    export, b = exported
    other = b / "goldens/test_suite/test_file"
    before = _snapshot(other)
    document = _document(export)
    for entry in document["entries"]:
        if entry["test"].endswith("::test_model"):
            entry.update(test_name="test_file", module="../../../evil")
    _save(export, document)
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    assert code == 0, out
    assert "CHANGED goldens/test_suite/test_model/latent.npy" in out, out
    assert _snapshot(other) == before
    assert not (b.parent / "evil").exists()
    assert not (b / "evil").exists()
    # The test id itself edited to the other test's: its receipt names test_model.
    document = _document(export)
    entry = _entry(document, "tokens.bin")
    entry["test"] = entry["test"].replace("test_model", "test_file")
    _save(export, document)
    code, out = _accept(export, b, monkeypatch, "-k", "test_file")
    assert code == 1, out
    assert "its receipt is the receipt of" in out, out
    # The artifact renamed to the other test's: the receipt records no re-run of it.
    document = _document(export)
    entry = _entry(document, "latent.npy")
    entry.update(artifact="out.bin")
    _save(export, document)
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    assert "REFUSED" in out, out
    assert "does not vouch for these runs" in out, out
    assert _snapshot(other) == before


@pytest.mark.parametrize("where", ["absolute", "dotdot"])
def test_the_exports_goldens_folder_is_ignored(exported, monkeypatch, tmp_path, where):
    export, b = exported
    outside = tmp_path / "outside_goldens"
    document = _document(export)
    document["settings"]["goldens"] = str(outside) if where == "absolute" else "../outside2"
    _save(export, document)
    code, out = _accept(export, b, monkeypatch, "-k", "model")
    assert code == 0, out
    assert "CHANGED goldens/test_suite/test_model/latent.npy" in out, out
    assert "writing this project's, goldens" in out, out
    assert not outside.exists()
    assert not (b.parent / "outside2").exists()


def test_the_goldens_folder_is_the_projects_and_inside_it(tmp_path, monkeypatch):
    import io

    from pytest_lossless.__main__ import local_goldens
    from pytest_lossless.errors import ConfigError

    root = tmp_path / "project"
    root.mkdir()
    assert local_goldens(root, None) == root / "goldens"
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\nlossless_goldens = "g/p"\n')
    assert local_goldens(root, None) == root / "g" / "p"
    (root / "pytest.ini").write_text("[pytest]\nlossless_goldens = data/goldens\n")
    assert local_goldens(root, None) == root / "data" / "goldens"
    assert local_goldens(root, Path("mine")) == root / "mine"
    for bad in (Path("../x"), tmp_path / "elsewhere", Path(".")):
        with pytest.raises(ConfigError, match="not inside the project"):
            local_goldens(root, bad)
    (root / "pytest.ini").write_text("[pytest]\nlossless_goldens = ../out\n")
    with pytest.raises(ConfigError, match="lossless_goldens"):
        local_goldens(root, None)
    # Through the command: exit 2, nothing written.
    monkeypatch.chdir(root)
    (root / "export").mkdir()
    (root / "export" / "export.json").write_text('{"schema": 1, "entries": []}')
    out = io.StringIO()
    assert accept_command(root / "export", out=out, entry_points=False) == 2
    assert not (tmp_path / "out").exists()
