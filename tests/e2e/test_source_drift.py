"""End to end (#20): the session's end compares each source tree with what its receipts
recorded, leaving out exactly what the plugin itself writes in the session (goldens, receipts,
export, a lock folder or pytest's basetemp under the rootdir). A git project whose receipts
folder is not gitignored: a normal session and an ``--update-goldens`` session verify clean and
sign; a test that edits a tracked source file or creates a new one is still named, ``verify``
calls it a contradiction and ``sign`` refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import os
import sys

import numpy as np
import pytest

@pytest.mark.lossless
def test_golden(golden):
    scale = float(os.environ.get("SCALE", "1"))
    golden.check("t.npy", lambda: np.arange(4, dtype=np.float32) * scale)

def test_model(model_run, tmp_path):
    (tmp_path / "scratch.txt").write_text("a test's own temporary file")
    model_run([sys.executable, "-c", os.environ.get("CODE", "pass"), os.path.abspath(".")])
"""

APPEND = "import sys; open(sys.argv[1] + '/{name}', 'a').write('x = 2' + chr(10))"
CREATE = "import sys; open(sys.argv[1] + '/{name}', 'w').write('x = 3' + chr(10))"
FLAGGED = "changed during the session"
CONTRADICTION = "the receipts do not describe one source state"
#: Where the plugin writes, all under the rootdir and none gitignored.
WRITES = ("--lossless-export=exported", "--basetemp=basetemp", "--lossless-lock-dir=locks")


def _run(args: list[str], cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False, **kw)


def _git(cwd: Path, *args: str) -> str:
    done = _run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _pytest(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _run(
        [sys.executable, "-m", "pytest", *args],
        cwd,
        env={**os.environ, **env},
    )


def _lossless(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "pytest_lossless", *args], cwd)


def _keys(folder: Path) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = folder / "key.pem"
    private.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return private


def _index(project: Path) -> dict[str, Any]:
    """The INDEX.json of the newest session folder."""
    folders = sorted(p for p in (project / "lossless-receipts").iterdir() if p.is_dir())
    return json.loads((folders[-1] / "INDEX.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A committed git project with its goldens, nothing gitignored."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "test_drift.py").write_text(PROJECT)
    (root / "model.py").write_text("x = 1\n")
    (root / "goldens_util.py").write_text("x = 1\n")  # a source file named like the goldens
    _git(root, "init", "-q", ".")
    made = _pytest(root, "--update-goldens", "-p", "no:cacheprovider")
    assert made.returncode == 0, made.stdout
    _git(root, "add", "test_drift.py", "model.py", "goldens_util.py", "goldens")
    _git(root, "commit", "-qm", "base")
    assert not (root / ".gitignore").exists()
    return root


def _clean(project: Path, done: subprocess.CompletedProcess[str], key: Path) -> None:
    assert FLAGGED not in done.stdout, done.stdout
    assert "source_changes" not in _index(project)
    verified = _lossless(project, "verify", "lossless-receipts")
    assert verified.returncode == 0, verified.stdout
    signed = _lossless(project, "sign", "lossless-receipts", "--key", str(key))
    assert signed.returncode == 0, signed.stdout + signed.stderr


def _flagged(project: Path, done: subprocess.CompletedProcess[str], key: Path) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout
    (line,) = [ln for ln in done.stdout.splitlines() if FLAGGED in ln]
    assert str(project) in line, line
    (change,) = _index(project)["source_changes"]
    verified = _lossless(project, "verify", "lossless-receipts")
    assert verified.returncode == 1, verified.stdout
    assert CONTRADICTION in verified.stdout
    signed = _lossless(project, "sign", "lossless-receipts", "--key", str(key))
    assert signed.returncode == 1, signed.stdout
    assert CONTRADICTION in signed.stdout
    return change  # type: ignore[no-any-return]


def test_the_sessions_own_writes_are_no_source_change(project: Path, tmp_path: Path) -> None:
    """The receipts, the export, basetemp and the lock folder are untracked and not ignored,
    and appear during the session: none of them is a change of the source."""
    key = _keys(tmp_path)
    for _ in range(2):  # the second also finds the first's receipts, signatures and export
        done = _pytest(project, "--lossless", *WRITES)
        assert done.returncode == 0, done.stdout
        _clean(project, done, key)
    # The session's writes are untracked and not ignored: git lists them, the end did not.
    status = _git(project, "status", "--porcelain")
    for folder in ("basetemp/", "lossless-receipts/", "exported/"):
        assert f"?? {folder}" in status, status
    assert not _git(project, "status", "--porcelain", "--", "model.py", "goldens")


def test_report_files_pytest_writes_into_the_tree_are_no_source_change(
    project: Path, tmp_path: Path
) -> None:
    """CI's usual report files, written into the (not ignored) checkout by pytest itself."""
    done = _pytest(project, "--lossless", *WRITES, "--junitxml", "reports/junit.xml")
    assert done.returncode == 0, done.stdout
    assert (project / "reports" / "junit.xml").is_file()
    _clean(project, done, _keys(tmp_path))


def test_a_failing_session_exporting_into_the_tree_is_no_source_change(
    project: Path, tmp_path: Path
) -> None:
    """A mismatch exports its obtained file into the (not ignored) export folder."""
    done = _pytest(project, "--lossless", *WRITES, SCALE="3")
    assert done.returncode == 1, done.stdout
    assert any((project / "exported").rglob("*")), "the export wrote nothing"
    assert FLAGGED not in done.stdout, done.stdout
    assert "source_changes" not in _index(project)


def test_an_update_session_rewriting_tracked_goldens_verifies_clean(
    project: Path, tmp_path: Path
) -> None:
    done = _pytest(project, "--update-goldens", *WRITES, SCALE="2")
    assert done.returncode == 0, done.stdout
    # The session did rewrite a tracked golden: the tree is dirty by the session's own writes.
    assert _git(project, "status", "--porcelain", "--", "goldens").strip()
    _clean(project, done, _keys(tmp_path))


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (APPEND, "model.py"),
        (APPEND, "goldens_util.py"),  # beside the goldens folder, not in it
        (CREATE, "new_module.py"),
        (CREATE, "goldens.py"),
    ],
    ids=["edit-tracked", "edit-tracked-named-like-goldens", "new-file", "new-file-named-like"],
)
@pytest.mark.parametrize("update", [False, True], ids=["compare", "update"])
def test_a_test_writing_a_source_file_is_still_named(
    project: Path, tmp_path: Path, code: str, name: str, update: bool
) -> None:
    mode = "--update-goldens" if update else "--lossless"
    done = _pytest(project, mode, *WRITES, CODE=code.format(name=name))
    change = _flagged(project, done, _keys(tmp_path))
    if code is APPEND:
        assert change["diff_sha256"] != change["diff_sha256_at_end"]
    else:
        assert change["untracked_count_at_end"] == change["untracked_count"] + 1
