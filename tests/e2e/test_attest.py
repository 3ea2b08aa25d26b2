"""End to end: a session signed outside pytest (``python -m pytest_lossless sign``) as in-toto
Statements in DSSE envelopes; ``verify --attestation --key`` passes on what was signed and names
each way the evidence can be changed after signing; the envelope verifies with the in-toto
project's own library, and a policy written against the public Test Result schema accepts it."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import sys
import numpy as np
import pytest

WRITE = (
    "import sys, pathlib; pathlib.Path(sys.argv[1], 'out.bin').write_bytes(sys.argv[2].encode())"
)

def _run(model_run, text):
    return lambda: model_run([sys.executable, "-c", WRITE, "{out}", text],
                             outputs={"out.bin": "{out}/out.bin"})

@pytest.mark.lossless
def test_golden(golden):
    golden.check("t.npy", lambda: np.arange(4, dtype=np.float32))

@pytest.mark.lossless
def test_compare(model_run, lossless):
    lossless.compare(_run(model_run, "same"), _run(model_run, "same"), runs=2, label="c")

@pytest.mark.lossless
def test_asserts_its_gate_can_fail(model_run, lossless):
    lossless.compare(_run(model_run, "a"), _run(model_run, "b"), runs=2, label="c", expect="FAIL")
"""


def _run(args: list[str], cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False, **kw)


def _git(cwd: Path, *args: str) -> None:
    done = _run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd)
    assert done.returncode == 0, done.stderr


def _pytest(cwd: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd, **kw)


def _lossless(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "pytest_lossless", *args], cwd)


def _keys(folder: Path, name: str) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project at a commit with its goldens and plans, one session of it, and a key pair
    kept outside the project (as a CI signing job would hold it)."""
    root = tmp_path_factory.mktemp("attest")
    project = root / "project"
    project.mkdir()
    (project / "test_demo.py").write_text(PROJECT)
    (project / ".gitignore").write_text("lossless-receipts/\nlossless-attestation/\n")
    _git(project, "init", "-q", ".")
    updated = _pytest(project, "--update-goldens", "--lossless")
    assert updated.returncode == 0, updated.stdout
    shutil.rmtree(project / "lossless-receipts")  # the update's session ran on no commit
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "goldens")
    ran = _pytest(project, "--lossless")
    assert ran.returncode == 0, ran.stdout
    _keys(root, "key")
    _keys(root, "other")
    return root


@pytest.fixture(scope="module")
def signed_once(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the built project, its session signed with ``key.pem``: signed once per module
    (a ``sign`` process), copied for each test (``signed``)."""
    root = tmp_path_factory.mktemp("signed") / "root"
    shutil.copytree(built, root, symlinks=True)
    done = _lossless(root / "project", "sign", "lossless-receipts", "--key", str(root / "key.pem"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED" in done.stdout
    return root


@pytest.fixture
def signed(signed_once: Path, tmp_path: Path) -> Path:
    """A copy of ``signed_once`` of this test's own: what one test changes no other sees."""
    root = tmp_path / "root"
    shutil.copytree(signed_once, root, symlinks=True)
    return root


def _verify(root: Path, *folders: str, key: str = "key.pub") -> subprocess.CompletedProcess[str]:
    project = root / "project"
    bundle = project / "lossless-attestation" / "lossless.intoto.jsonl"
    args = [*(folders or ("lossless-receipts",)), "--attestation", str(bundle)]
    return _lossless(project, "verify", *args, "--key", str(root / key))


def _session(root: Path) -> Path:
    (session,) = sorted(p for p in (root / "project/lossless-receipts").iterdir() if p.is_dir())
    return session


def _bundle(root: Path) -> list[dict[str, Any]]:
    path = root / "project/lossless-attestation/lossless.intoto.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _statement(envelope: Mapping[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return payload


def test_a_signed_session_verifies(signed: Path) -> None:
    done = _verify(signed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "integrity: signed: 1 session(s)" in done.stdout
    test_result, detail = (_statement(e) for e in _bundle(signed))
    assert test_result["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    predicate = test_result["predicate"]
    # expect="FAIL" matched: the test asserted its gate can fail, so it counts as passed.
    assert predicate["result"] == "PASSED"
    assert predicate["passedTests"] == [
        "test_demo.py::test_asserts_its_gate_can_fail",
        "test_demo.py::test_compare",
        "test_demo.py::test_golden",
    ]
    names = {d["name"] for d in predicate["configuration"]}
    assert {"INDEX.json", "goldens/test_demo/test_golden/manifest.json"} <= names
    assert "goldens/test_demo/test_compare/plan.json" in names
    subjects = {s["name"]: s["digest"] for s in test_result["subject"]}
    assert "gitCommit" in subjects["source"]
    assert "sha256" in subjects["test_demo.py::test_golden/t.npy"]
    assert "sha256" in subjects["test_demo.py::test_compare/c/out.bin"]
    assert detail["predicateType"] == "urn:pytest-lossless:predicate:session:v1"
    tests = {t["test_id"]: t for t in detail["predicate"]["tests"]}
    assert tests["test_demo.py::test_asserts_its_gate_can_fail"]["lossless"][0]["verdict"] == "FAIL"
    assert len(detail["predicate"]["receipts"]) == 3


def test_a_receipt_changed_after_signing_is_named(signed: Path) -> None:
    from pytest_lossless.evidence.index import sha256_regular

    session = _session(signed)
    receipt = session / "test_demo.py__test_compare.json"
    receipt.write_text(receipt.read_text() + " ")
    # The forger also rewrites the index, so the unsigned SHA-256 chain agrees again.
    index = json.loads((session / "INDEX.json").read_text())
    for entry in index["receipts"]:
        if entry["file"] == receipt.name:
            entry["sha256"] = sha256_regular(receipt)
    (session / "INDEX.json").write_text(json.dumps(index))
    done = _verify(signed)
    assert done.returncode == 1
    assert "the index was changed after signing" in done.stdout
    assert f"receipt {receipt.name}: SHA-256" in done.stdout
    assert "the receipt was changed after signing" in done.stdout


def test_a_different_key_is_named(signed: Path) -> None:
    done = _verify(signed, key="other.pub")
    assert done.returncode == 1
    assert "no signature verifies with this key" in done.stdout
    assert "NOT SIGNED" in done.stdout


def test_a_swapped_subject_is_named(signed: Path) -> None:
    """A Statement signed with the right key, but about other artifacts than the receipts."""
    from pytest_lossless.evidence.attest import envelope, load_private_key

    key = load_private_key(signed / "key.pem")
    lines = []
    for old in _bundle(signed):
        statement = _statement(old)
        for subject in statement["subject"]:
            if subject["name"] == "test_demo.py::test_golden/t.npy":
                subject["digest"] = {"sha256": "0" * 64}
        lines.append(json.dumps(envelope(statement, key).to_json()))
    bundle = signed / "project/lossless-attestation/lossless.intoto.jsonl"
    bundle.write_text("\n".join(lines) + "\n")
    done = _verify(signed)
    assert done.returncode == 1
    assert "subject 'test_demo.py::test_golden/t.npy': signed sha256:0000000000000000" in (
        done.stdout
    )


def test_a_session_copied_under_a_second_name_counts_once(signed: Path) -> None:
    """Two shards' folders, the second a copy of the first (its own session failed)."""
    receipts = signed / "project/lossless-receipts"
    session = _session(signed)
    shard = signed / "project/shard-b"
    shutil.copytree(session, shard / session.name)
    done = _verify(signed, "lossless-receipts", "shard-b")
    assert done.returncode == 1
    assert f"session {session.name} is in 2 folders" in done.stdout
    assert "DUPLICATE" in done.stdout
    # Copied under another folder name: a renamed session folder.
    shutil.rmtree(shard)
    session.rename(receipts / "20990101T000000.000Z-ci-abcdef")
    renamed = _verify(signed)
    assert renamed.returncode == 1
    assert f"holds session {session.name} under another name" in renamed.stdout


def test_an_unsigned_session_or_receipt_is_refused(signed: Path) -> None:
    project = signed / "project"
    again = _pytest(project, "--lossless", "-k", "golden")
    assert again.returncode == 0, again.stdout
    done = _verify(signed)
    assert done.returncode == 1
    assert "a signature is required for every session" in done.stdout
    # One receipt given as a file: signed ones pass, a changed (unsigned) one does not.
    session = _session_named(signed, _statement(_bundle(signed)[0]))
    receipt = session / "test_demo.py__test_golden.json"
    assert _verify(signed, str(receipt)).returncode == 0
    loose = project / "loose.json"
    loose.write_text(receipt.read_text() + " ")
    unsigned = _verify(signed, str(loose))
    assert unsigned.returncode == 1
    assert "an unsigned (or changed) receipt" in unsigned.stdout


def _session_named(root: Path, statement: Mapping[str, Any]) -> Path:
    from pytest_lossless.evidence.attest import statement_session

    return root / "project/lossless-receipts" / str(statement_session(statement))


def test_the_revision_can_be_required(signed: Path) -> None:
    revision = _statement(_bundle(signed)[0])["subject"][0]["digest"]["gitCommit"]
    project = signed / "project"
    bundle = project / "lossless-attestation/lossless.intoto.jsonl"
    common = ["--attestation", str(bundle), "--key", str(signed / "key.pub")]
    ok = _lossless(project, "verify", "lossless-receipts", *common, "--revision", revision)
    assert ok.returncode == 0, ok.stdout
    wrong = _lossless(project, "verify", "lossless-receipts", *common, "--revision", "abcdef12")
    assert wrong.returncode == 1
    assert "but --revision abcdef12 is required" in wrong.stdout


def test_sign_refuses_evidence_changed_before_signing(built: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(built, root, symlinks=True)
    receipt = _session(root) / "test_demo.py__test_golden.json"
    receipt.write_text(receipt.read_text() + " ")
    done = _lossless(root / "project", "sign", "lossless-receipts", "--key", str(root / "key.pem"))
    assert done.returncode == 1
    assert "REFUSED" in done.stdout
    assert "the receipt was changed after its session ended" in done.stdout
    assert not (root / "project/lossless-attestation/lossless.intoto.jsonl").exists()


def pae_from_the_spec(payload_type: bytes, payload: bytes) -> bytes:
    """DSSE v1 PAE, written here from the spec, not imported from the code under test."""
    return b" ".join(
        [b"DSSEv1", str(len(payload_type)).encode(), payload_type, str(len(payload)).encode()]
    ) + (b" " + payload)


def test_the_envelope_verifies_with_the_in_toto_library(signed: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    in_toto_metadata = pytest.importorskip("in_toto.models.metadata")
    signer = pytest.importorskip("securesystemslib.signer")
    public = serialization.load_pem_public_key((signed / "key.pub").read_bytes())
    for data in _bundle(signed):
        keyid = data["signatures"][0]["keyid"]
        envelope = in_toto_metadata.Envelope.from_dict(json.loads(json.dumps(data)))
        key = signer.SSlibKey.from_crypto(public, keyid=keyid)
        assert keyid in envelope.verify([key], 1)
        # And with the spec's PAE, written independently.
        payload = base64.b64decode(data["payload"])
        pae = pae_from_the_spec(data["payloadType"].encode(), payload)
        public.verify(base64.b64decode(data["signatures"][0]["sig"]), pae)  # type: ignore[union-attr]
    other = serialization.load_pem_public_key((signed / "other.pub").read_bytes())
    envelope = in_toto_metadata.Envelope.from_dict(_bundle(signed)[0])
    with pytest.raises(Exception, match=r"threshold|verif"):
        envelope.verify([signer.SSlibKey.from_crypto(other, keyid=keyid)], 1)


def policy(statement: Mapping[str, Any], *, commit: str, required: list[str]) -> list[str]:
    """A policy written against the public Test Result schema alone: the Statement is about
    ``commit``, its result is PASSED, and every required test is among ``passedTests``."""
    problems = []
    if statement.get("_type") != "https://in-toto.io/Statement/v1":
        problems.append("not an in-toto Statement v1")
    if statement.get("predicateType") != "https://in-toto.io/attestation/test-result/v0.1":
        problems.append("not a Test Result")
    commits = {s["digest"].get("gitCommit") for s in statement.get("subject", [])}
    if commit not in commits:
        problems.append(f"not about commit {commit}")
    predicate = statement.get("predicate", {})
    if predicate.get("result") != "PASSED":
        problems.append(f"result {predicate.get('result')}")
    if not isinstance(predicate.get("configuration"), list):
        problems.append("no configuration")
    missing = set(required) - set(predicate.get("passedTests", []))
    if missing or predicate.get("failedTests"):
        problems.append(f"not passed: {sorted(missing | set(predicate.get('failedTests', [])))}")
    return problems


def test_a_policy_on_the_public_schema_accepts_an_unsigned_statement(
    built: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    shutil.copytree(built, root, symlinks=True)
    project = root / "project"
    done = _lossless(project, "sign", "lossless-receipts", "--out", "for-ci")
    assert done.returncode == 0, done.stdout + done.stderr
    (folder,) = (project / "for-ci").iterdir()
    statement = json.loads((folder / "test-result.statement.json").read_text())
    predicate = json.loads((folder / "test-result.predicate.json").read_text())
    assert statement["predicate"] == predicate
    head = _run(["git", "rev-parse", "HEAD"], project).stdout.strip()
    required = ["test_demo.py::test_golden", "test_demo.py::test_compare"]
    assert policy(statement, commit=head, required=required) == []
    assert policy(statement, commit="0" * 40, required=required) == [f"not about commit {'0' * 40}"]
    checksums = (folder / "subjects.sha256").read_text().splitlines()
    assert any(line.endswith("  test_demo.py::test_golden/t.npy") for line in checksums)
    assert not (folder / "lossless.intoto.jsonl").exists()


def test_verify_imports_nothing_planted_in_the_working_folder(signed: Path) -> None:
    """A downloaded receipts folder with modules named like the ones verify imports."""
    folder = signed / "project/lossless-receipts"
    planted = ["typing", "argparse", "numpy", "pluggy", "json", "hashlib", "cryptography"]
    for name in planted:
        (folder / f"{name}.py").write_text(
            f"open({str(folder / ('IMPORTED_' + name))!r}, 'w').write('x')\n"
        )
    done = _run(
        [sys.executable, "-m", "pytest_lossless", "verify", "."],
        folder,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path[1:])},
    )
    assert not list(folder.glob("IMPORTED_*")), done.stdout + done.stderr
    assert "receipts consistent" in done.stdout


def test_an_export_verifies_and_accept_checks_the_signature(signed: Path) -> None:
    project = signed / "project"
    shutil.rmtree(project / "lossless-receipts")
    (project / "test_demo.py").write_text(PROJECT.replace("np.arange(4,", "np.arange(5,"))
    ran = _pytest(project, "--lossless", "-k", "golden", "--lossless-export", "export")
    assert ran.returncode == 1  # the changed golden check fails, and its artifact is exported
    (project / "lossless-attestation").rename(project / "old-attestation")
    signing = _lossless(
        project, "sign", "lossless-receipts", "--key", str(signed / "key.pem"), "--out", "att"
    )
    assert signing.returncode == 0, signing.stdout + signing.stderr
    bundle = str(project / "att" / "lossless.intoto.jsonl")
    pub = ["--key", str(signed / "key.pub")]
    done = _lossless(project, "verify", "export", "--attestation", bundle, *pub)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "export" in done.stdout
    old = str(project / "old-attestation" / "lossless.intoto.jsonl")
    unsigned = _lossless(project, "verify", "export", "--attestation", old, *pub)
    assert unsigned.returncode == 1
    assert "an unsigned (or changed) receipt" in unsigned.stdout
    refused = _lossless(project, "accept", "export", "--attestation", old, *pub)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "is not a receipt that a session signed" in refused.stdout
    accepted = _lossless(project, "accept", "export", "--attestation", bundle, *pub)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


TAMPERING = """
import pathlib
import numpy as np
import pytest

@pytest.mark.lossless
def test_a_gate(golden):
    golden.check("t.npy", lambda: np.arange(4, dtype=np.float32))

def test_b_code_under_test_rewrites_the_receipt():
    (receipt,) = pathlib.Path("lossless-receipts").glob("*/test_tampering.py__test_a_gate.json")
    receipt.write_text(receipt.read_text().replace('"PASS"', '"PASS" '))
"""


def test_a_receipt_changed_while_the_session_ran_makes_it_unsignable(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_tampering.py").write_text(TAMPERING)
    assert _pytest(project, "--update-goldens", "-k", "gate").returncode == 0
    shutil.rmtree(project / "lossless-receipts", ignore_errors=True)
    ran = _pytest(project, "--lossless")
    assert "this session cannot be signed: receipt test_tampering.py__test_a_gate.json changed" in (
        ran.stdout
    ), ran.stdout
    # The index lists the digest the session wrote, so the change is named, not absorbed.
    done = _lossless(project, "verify", "lossless-receipts")
    assert done.returncode == 1
    assert "the receipt was changed after its session ended" in done.stdout
    _keys(tmp_path, "key")
    signing = _lossless(project, "sign", "lossless-receipts", "--key", str(tmp_path / "key.pem"))
    assert signing.returncode == 1
    assert "the session says it cannot be signed" in signing.stdout


EDITING = """
import os
import sys

APPEND = "import sys; open(sys.argv[1], 'a').write('a line the session wrote' + chr(10))"

def test_a_model_run_appends_to_a_tracked_file(model_run):
    code = APPEND if os.environ.get("EDIT") else "pass"
    model_run([sys.executable, "-c", code, os.path.abspath("data.txt")])

def test_b_runs_after_it(model_run):
    model_run([sys.executable, "-c", "pass"])
"""


def test_a_tree_edited_while_the_session_ran_is_named_and_refused(tmp_path: Path) -> None:
    """#20/#22: git is read once per session and tree, so a receipt records the diff as first
    read; the session's end reads each tree once more and says when it changed since."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_editing.py").write_text(EDITING)
    (project / "data.txt").write_text("tracked\n")
    (project / ".gitignore").write_text("lossless-receipts/\nlossless-attestation/\n")
    _git(project, "init", "-q", ".")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "base")
    _keys(tmp_path, "key")
    key = str(tmp_path / "key.pem")

    untouched = _pytest(project)
    assert untouched.returncode == 0, untouched.stdout
    assert "changed during the session" not in untouched.stdout
    done = _lossless(project, "verify", "lossless-receipts")
    assert done.returncode == 0, done.stdout
    shutil.rmtree(project / "lossless-receipts")

    edited = _pytest(project, env={**os.environ, "EDIT": "1"})
    assert edited.returncode == 0, edited.stdout
    assert (project / "data.txt").read_text().count("\n") == 2
    (line,) = [ln for ln in edited.stdout.splitlines() if "changed during the session" in ln]
    assert str(project) in line, line
    (session,) = [p for p in (project / "lossless-receipts").iterdir() if p.is_dir()]
    index = json.loads((session / "INDEX.json").read_text())
    (change,) = index["source_changes"]
    assert change["diff_sha256"] != change["diff_sha256_at_end"]
    receipts = [json.loads(p.read_text()) for p in session.glob("test_editing*.json")]
    assert len({r["runspec"]["source"]["diff_sha256"] for r in receipts}) == 1
    assert receipts[0]["runspec"]["source"]["diff_sha256"] == change["diff_sha256"]
    done = _lossless(project, "verify", "lossless-receipts")
    assert done.returncode == 1, done.stdout
    assert "the receipts do not describe one source state" in done.stdout
    signing = _lossless(project, "sign", "lossless-receipts", "--key", key)
    assert signing.returncode == 1, signing.stdout
    assert "the receipts do not describe one source state" in signing.stdout
