"""The manifest cannot vouch for itself, and is parsed and printed within limits (issue #11).

For a golden stored in full, the stored bytes, the manifest's SHA-256 and its fingerprint are
checked against each other (the fingerprint is recomputed from the stored file) before any
comparison: editing only the manifest's fingerprint can no longer make another output PASS,
and ``verify`` does not agree either. A manifest is read within a size and a nesting limit;
names are bounded; control characters are escaped wherever they are printed.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_lossless.core.digests import canonical_sha256
from pytest_lossless.core.text import printable
from pytest_lossless.errors import ArtifactError, GoldenIntegrityError, ManifestError
from pytest_lossless.evidence.receipts import (
    ReceiptRecord,
    derive_verdicts,
    load_all,
    raw_sha256,
)
from pytest_lossless.evidence.verify import verify
from pytest_lossless.goldens.checks import Golden
from pytest_lossless.goldens.folder import (
    MAX_MANIFEST_BYTES,
    GoldenFolder,
    artifact_name,
    read_manifest,
)
from pytest_lossless.goldens.swap import UpdateEvent
from pytest_lossless.kinds.registry import KindRegistry
from pytest_lossless.report import Row, update_lines, verdict_table

ESC = "\x1b"


@pytest.fixture(scope="module")
def kinds() -> KindRegistry:
    return KindRegistry()


def _folder(root: Path, kinds: KindRegistry, digest_above: int = 1 << 20) -> GoldenFolder:
    return GoldenFolder(
        root, "test_mod", "test_x", "test_mod.py::test_x", kinds, digest_above=digest_above
    )


def _npy(path: Path, values: list[float]) -> Path:
    np.save(path, np.array(values, dtype=np.float32), allow_pickle=False)
    return path


def _committed(tmp_path: Path, kinds: KindRegistry, name: str = "t.npy") -> GoldenFolder:
    folder = _folder(tmp_path / "goldens", kinds)
    folder.stage(name, _npy(tmp_path / "golden.npy", [1.0, 2.0, 3.0]), None, {})
    folder.commit()
    return folder


def _edit(folder: Path, change: Any, *, rehash: bool = True) -> None:
    """Edit manifest.json the way an attacker would: the change, then the fingerprint's hash."""
    path = folder / "manifest.json"
    document = json.loads(path.read_text())
    change(document["artifacts"])
    for entry in document["artifacts"].values():
        if rehash:
            entry["fingerprint_sha256"] = canonical_sha256(entry["fingerprint"])
    path.write_text(json.dumps(document, indent=2))


def _forged_fingerprint(kinds: KindRegistry, other: Path, kept: dict[str, Any]) -> dict[str, Any]:
    """The other output's fingerprint, keeping the stored file's own digest and size, so that
    only a recomputation from the stored file can tell."""
    forged = kinds.fingerprint(kinds.detect(other), other)
    forged["sha256"], forged["size"] = kept["sha256"], kept["size"]
    return forged


# ------------------------------------------------------------------ the false PASS, end to end

ATTACK_TEST = """
import numpy as np
import pytest
from pathlib import Path

HERE = Path(__file__).parent

@pytest.mark.lossless
def test_out(golden):
    golden.check("out.npy", np.load(HERE / "out.npy", allow_pickle=False))
    golden.check("out.bin", (HERE / "out.bin").read_bytes())
"""


def _forge_receipt(receipt_path: Path, manifest: Path, kinds: KindRegistry, root: Path) -> None:
    """What the plugin wrote before the fix: a PASS whose golden evidence is the edited
    manifest's fingerprint, with every hash of the receipt consistent."""
    receipt = json.loads(receipt_path.read_text())
    entries = json.loads(manifest.read_text())["artifacts"]
    for gate in receipt["gates"]:
        name = gate["artifact"]
        obtained = kinds.fingerprint(entries[name]["kind"], root / name)
        gate["evidence"]["golden"]["fingerprint"] = entries[name]["fingerprint"]
        gate["evidence"]["golden"]["manifest_sha256"] = hashlib.sha256(
            manifest.read_bytes()
        ).hexdigest()
        gate["evidence"]["obtained"]["fingerprint"] = obtained
        gate["evidence"]["obtained"]["sha256"] = obtained["sha256"]
        gate["passed"] = True
    receipt["verdicts"] = derive_verdicts(receipt)
    receipt["integrity"]["raw_sha256"] = raw_sha256(receipt)
    receipt_path.write_text(json.dumps(receipt, indent=2))


@pytest.mark.slow
def test_editing_only_the_manifest_fingerprint_cannot_make_another_output_pass(
    pytester: pytest.Pytester, kinds: KindRegistry
) -> None:
    root = pytester.path
    pytester.makepyfile(test_attack=ATTACK_TEST)
    _npy(root / "out.npy", [1.0, 2.0, 3.0])
    (root / "out.bin").write_bytes(b"the reviewed output\n")
    assert pytester.runpytest("--update-goldens").ret == 0
    pytester.runpytest("--lossless").assert_outcomes(passed=1)
    # The judging session's receipt: the --update-goldens session left one too (no gates).
    honest = max((root / "lossless-receipts").glob("*/test_attack*.json"), key=lambda p: p.parent)
    honest_receipt = honest.read_text()

    # The pull request: a different output, and only manifest.json edited to match it.
    _npy(root / "out.npy", [9.0, 9.0, 9.0])
    (root / "out.bin").write_bytes(b"a different output!\n")
    golden = root / "goldens" / "test_attack" / "test_out"
    stored = {p.name: p.read_bytes() for p in golden.iterdir() if p.name != "manifest.json"}

    def attack(artifacts: dict[str, Any]) -> None:
        artifacts["out.npy"]["fingerprint"] = _forged_fingerprint(
            kinds, root / "out.npy", artifacts["out.npy"]["fingerprint"]
        )
        # The naive edit: the other output's whole fingerprint.
        artifacts["out.bin"]["fingerprint"] = kinds.fingerprint("bytes", root / "out.bin")

    _edit(golden, attack)
    assert {p.name: p.read_bytes() for p in golden.iterdir() if p.name != "manifest.json"} == stored

    result = pytester.runpytest("--lossless")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*GoldenIntegrityError*out.npy*fingerprint*"])
    assert "1 PASS" not in result.stdout.str()
    latest = max(p for p in (root / "lossless-receipts").iterdir() if p.is_dir())  # its session
    receipts = [r for r in load_all(latest).values() if isinstance(r, ReceiptRecord)]
    assert [r.verdicts().overall for r in receipts] == ["FAIL"]

    # verify does not agree either: a receipt that recorded the false PASS (as the plugin did
    # before the fix) contradicts the stored golden it names.
    honest.write_text(honest_receipt)
    _forge_receipt(honest, golden / "manifest.json", kinds, root)
    found = verify(root / "lossless-receipts", kinds=kinds)
    assert any("out.npy" in line and "stored golden" in line for line in found), found
    assert any("out.bin" in line and "stored golden" in line for line in found), found


# ------------------------------------------------------------------ integrity, unit level


def test_a_recomputed_fingerprint_that_disagrees_is_an_integrity_error(tmp_path, kinds):
    folder = _committed(tmp_path, kinds)
    other = _npy(tmp_path / "other.npy", [9.0, 9.0, 9.0])
    _edit(
        folder.path,
        lambda a: a["t.npy"].update(
            fingerprint=_forged_fingerprint(kinds, other, a["t.npy"]["fingerprint"])
        ),
    )
    with pytest.raises(GoldenIntegrityError, match=r"fingerprint.*data_sha256"):
        _folder(tmp_path / "goldens", kinds).compare("t.npy", other, None)


def test_a_fingerprint_naming_another_file_digest_is_an_integrity_error(tmp_path, kinds):
    folder = _committed(tmp_path, kinds)
    other = _npy(tmp_path / "other.npy", [9.0, 9.0, 9.0])
    _edit(folder.path, lambda a: a["t.npy"].update(fingerprint=kinds.fingerprint("tensor", other)))
    with pytest.raises(GoldenIntegrityError, match="SHA-256"):
        _folder(tmp_path / "goldens", kinds).compare("t.npy", other, None)


def test_a_size_that_disagrees_with_the_stored_file_is_an_integrity_error(tmp_path, kinds):
    folder = _committed(tmp_path, kinds)
    _edit(folder.path, lambda a: a["t.npy"].update(size=a["t.npy"]["size"] + 1))
    with pytest.raises(GoldenIntegrityError, match="size"):
        _folder(tmp_path / "goldens", kinds).compare("t.npy", tmp_path / "golden.npy", None)


def test_an_untouched_golden_still_passes(tmp_path, kinds):
    _committed(tmp_path, kinds)
    again = _folder(tmp_path / "goldens", kinds)
    assert again.compare("t.npy", tmp_path / "golden.npy", None).passed


# ------------------------------------------------------------------ bounded parsing


def test_a_100000_deep_manifest_is_a_manifest_error_naming_the_file(tmp_path):
    depth = 100_000
    (tmp_path / "manifest.json").write_text("[" * depth + "]" * depth)
    with pytest.raises(ManifestError, match=r"manifest\.json.*nest"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"a":' * depth + "1" + "}" * depth)
    with pytest.raises(ManifestError, match=r"manifest\.json.*nest"):
        read_manifest(tmp_path)


def test_a_manifest_nested_deeper_than_the_limit_is_refused_before_use(tmp_path, kinds):
    folder = _committed(tmp_path, kinds)
    deep: Any = 1
    for _ in range(200):
        deep = {"x": deep}
    _edit(folder.path, lambda a: a["t.npy"]["provenance"].update(deep=deep))
    with pytest.raises(ManifestError, match="nest"):
        read_manifest(folder.path)


def test_an_oversized_manifest_is_refused_unread(tmp_path):
    with open(tmp_path / "manifest.json", "wb") as handle:
        handle.truncate(MAX_MANIFEST_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(ManifestError, match=r"manifest\.json.*64 MiB"):
        read_manifest(tmp_path)


def test_a_5000_character_name_is_a_clear_error_not_an_os_error(tmp_path, kinds):
    folder = _folder(tmp_path / "goldens", kinds)
    for update in (False, True):
        golden = Golden(folder, update=update, workdir=tmp_path / f"work-{update}")
        with pytest.raises(ArtifactError, match="200"):
            golden.check("x" * 5000, b"data")
    with pytest.raises(ArtifactError, match="200"):
        artifact_name("é" * 150)  # 300 bytes of UTF-8


def test_a_5000_character_manifest_key_is_a_manifest_error(tmp_path, kinds):
    folder = _committed(tmp_path, kinds)
    _edit(folder.path, lambda a: a.update({"y" * 5000: a["t.npy"]}))
    with pytest.raises(ManifestError, match=r"manifest\.json.*200"):
        read_manifest(folder.path)


def test_a_long_test_name_gets_a_short_folder_that_still_works(tmp_path, kinds):
    name = "test_x[" + "p" * 5000 + "]"
    folder = GoldenFolder(
        tmp_path / "goldens", "m", name, f"m.py::{name}", kinds, digest_above=1 << 20
    )
    assert len(folder.path.name) <= 200
    source = _npy(tmp_path / "a.npy", [1.0])
    folder.stage("a.npy", source, None, {})
    folder.commit()
    again = GoldenFolder(
        tmp_path / "goldens", "m", name, f"m.py::{name}", kinds, digest_above=1 << 20
    )
    assert again.path == folder.path
    assert again.compare("a.npy", source, None).passed
    other = GoldenFolder(
        tmp_path / "goldens", "m", name + "x", f"m.py::{name}x", kinds, digest_above=1 << 20
    )
    assert other.path != folder.path


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kind", "tensor\x1b[2J"),
        ("gate", "elementwise\x1b]0;owned\x07"),
        ("sha256", "not a digest"),
        ("stored", "elsewhere"),
        ("size", True),
        ("fingerprint_sha256", "0" * 63),
    ],
)
def test_manifest_fields_are_validated(tmp_path, kinds, field, value):
    folder = _committed(tmp_path, kinds)
    _edit(folder.path, lambda a: a["t.npy"].update({field: value}), rehash=False)
    with pytest.raises(ManifestError) as caught:
        _folder(tmp_path / "goldens", kinds).compare("t.npy", tmp_path / "golden.npy", None)
    assert ESC not in str(caught.value)
    assert field in str(caught.value)


# ------------------------------------------------------------------ printing


def test_printable_escapes_control_characters_and_ansi():
    assert printable("plain text, é, 日本") == "plain text, é, 日本"
    assert printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert printable("a\x9bb\x07c\x00d\x7f") == "a\\x9bb\\x07c\\x00d\\x7f"
    assert printable("bidi\u202eevil\u2066") == "bidi\\u202eevil\\u2066"
    assert printable("two\nlines\r\tx") == "two\\nlines\\r\\tx"
    assert printable("two\nlines", newlines=True) == "two\nlines"
    assert printable(42) == "42"


def test_the_table_and_update_lines_escape_what_they_print():
    rows = [Row("t.py::test[\x1b[2J]", "a\x1b[31m.npy", "bytes", "FAIL", "x\x1b]0;t\x07")]
    lines = verdict_table(rows, width=100) + verdict_table(rows, width=40)
    assert not any(ESC in line or "\x07" in line for line in lines)
    assert any("\\x1b[31m" in line for line in lines)
    events = [UpdateEvent("t", "g/\x1b[1m", "n\x1b", "created", "\x9b")]
    assert not any(ESC in line or "\x9b" in line for line in update_lines(events))


@pytest.mark.slow
def test_an_ansi_manifest_key_reaches_the_terminal_escaped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_ansi="""
import pytest

@pytest.mark.lossless
def test_a(golden):
    golden.check("a.txt", b"data")
"""
    )
    assert pytester.runpytest("--update-goldens").ret == 0
    folder = pytester.path / "goldens" / "test_ansi" / "test_a"
    _edit(folder, lambda a: a.update({"\x1b[2J\x1b[31mevil": a["a.txt"]}))
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    text = result.stdout.str() + result.stderr.str()
    assert ESC not in text
    assert "\\x1b[2J" in text
    assert "manifest.json" in text


def test_an_existing_manifest_of_this_repository_still_reads(kinds):
    root = Path(__file__).resolve().parents[2] / "goldens"
    manifests = sorted(root.rglob("manifest.json"))
    for manifest in manifests:
        assert read_manifest(manifest.parent)
    assert manifests or not root.exists()
    assert os.sep not in "".join(n for m in manifests for n in read_manifest(m.parent))
