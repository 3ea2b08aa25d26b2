"""Unit tests of provenance.py against real git repositories made in tmp_path."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from pytest_lossless.errors import ArtifactError
from pytest_lossless.evidence.provenance import (
    runspec,
    session_facts,
    source_revision,
    source_state,
)


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "model.py").write_text("speed = 1\n")
    git(root, "add", "model.py")
    git(root, "commit", "-qm", "base")
    return root


def test_clean_unpublished_revision(repo: Path) -> None:
    state = source_state(repo)
    assert state["revision"] == git(repo, "rev-parse", "HEAD")
    assert state["dirty"] is False
    assert state["diff"] == ""
    assert state["diff_sha256"] == hashlib.sha256(b"").hexdigest()
    # No remote branch holds the revision: nobody else can fetch it.
    assert state["published"] is False
    assert state["publication"] == "unpublished"


def test_dirty_tree_diff_and_untracked(repo: Path) -> None:
    (repo / "model.py").write_text("speed = 2\n")
    (repo / "notes.txt").write_text("new")
    state = source_state(repo)
    assert state["dirty"] is True
    assert "+speed = 2" in state["diff"]
    expected = subprocess.run(
        ["git", "-C", str(repo), "diff", "HEAD", "--binary"], capture_output=True, check=True
    ).stdout
    assert state["diff_sha256"] == hashlib.sha256(expected).hexdigest()
    assert state["untracked"] == ["notes.txt"]
    assert source_revision(repo) == {
        **{
            k: state[k]
            for k in ("revision", "dirty", "diff_sha256", "diff_bytes", "published", "publication")
        },
        "untracked_count": 1,
    }


def test_the_plugins_own_receipts_do_not_make_the_tree_dirty(repo: Path) -> None:
    (repo / "lossless-receipts").mkdir()
    (repo / "lossless-receipts" / "t.json").write_text("{}")
    assert source_state(repo)["dirty"] is True
    clean = source_state(repo, ignore=(repo / "lossless-receipts",))
    assert clean["dirty"] is False
    assert clean["untracked"] == []


def test_only_untracked_files_make_it_dirty(repo: Path) -> None:
    (repo / "extra.py").write_text("x = 1\n")
    state = source_state(repo)
    assert state["dirty"] is True
    assert state["diff"] == ""


def test_published_when_a_remote_branch_contains_it(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "HEAD:main")
    git(repo, "fetch", "-q", "origin")
    state = source_state(repo)
    assert state["published"] is True
    assert state["remote_branches"] == ["origin/main"]
    (repo / "model.py").write_text("speed = 3\n")
    git(repo, "commit", "-qam", "local only")
    assert source_state(repo)["publication"] == "unpublished"


def test_not_a_repository(tmp_path: Path) -> None:
    state = source_state(tmp_path)
    assert state["revision"] is None
    assert state["publication"] == "unknown"
    assert "not a git repository" in state["git_error"]


def test_runspec_knobs_inputs_and_fingerprint(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"123")
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    facts = session_facts()
    assert facts["versions"]["pytest-lossless"]
    assert facts["versions"]["ffmpeg"].startswith("ffmpeg version")
    spec = runspec(repo, knobs=["PYTHONHASHSEED", "NCCL_ALGO"], inputs={"w": weights}, facts=facts)
    assert spec["environment"]["knobs"] == {"PYTHONHASHSEED": "0"}
    assert spec["environment"]["knobs_unset"] == ["NCCL_ALGO"]
    assert spec["inputs"]["w"]["sha256"] == hashlib.sha256(b"123").hexdigest()
    assert spec["source"]["revision"] == git(repo, "rev-parse", "HEAD")
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    again = runspec(repo, knobs=["PYTHONHASHSEED", "NCCL_ALGO"], facts=facts)
    assert again["environment"]["fingerprint_sha256"] != spec["environment"]["fingerprint_sha256"]
    with pytest.raises(ArtifactError, match="declared input 'gone'"):
        runspec(repo, knobs=[], inputs={"gone": tmp_path / "gone"}, facts=facts)


def test_committed_receipts_rewritten_later_do_not_make_the_tree_dirty(repo: Path) -> None:
    (repo / "lossless-receipts").mkdir()
    (repo / "lossless-receipts" / "t.json").write_text("{}")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "receipts")
    (repo / "lossless-receipts" / "t.json").write_text('{"again": 1}')
    assert source_state(repo)["dirty"] is True
    state = source_state(repo, ignore=(repo / "lossless-receipts",))
    assert state["dirty"] is False
    assert state["diff_bytes"] == 0
