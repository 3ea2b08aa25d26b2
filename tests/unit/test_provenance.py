"""Unit tests of provenance.py against real git repositories made in tmp_path."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.errors import ArtifactError
from pytest_lossless.evidence import provenance
from pytest_lossless.evidence.arm_sources import arm_source_lines, arm_sources
from pytest_lossless.evidence.provenance import (
    PUBLISH_FIX,
    is_local_url,
    publication_contradictions,
    publication_problem,
    redact_url,
    runspec,
    session_facts,
    source_revision,
    source_state,
)
from pytest_lossless.evidence.receipts import ReceiptRecord


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


def _state(block: dict[str, Any]) -> provenance.SourceState:
    """A source block as recorded, read back as its readers read it."""
    state = provenance.SourceState.read(block)
    assert state is not None
    return state


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
    state = source_state(repo).to_json()
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
    state = source_state(repo).to_json()
    assert state["dirty"] is True
    assert "+speed = 2" in state["diff"]
    expected = subprocess.run(
        ["git", "-C", str(repo), "diff", "HEAD", "--binary"], capture_output=True, check=True
    ).stdout
    assert state["diff_sha256"] == hashlib.sha256(expected).hexdigest()
    assert state["untracked"] == ["notes.txt"]
    keys = ("revision", "dirty", "diff_sha256", "diff_bytes", "published", "publication")
    keys += ("remote_url", "remote_branch", "published_branches", "publication_detail")
    keys += ("changed_files",)
    assert source_revision(repo).to_json() == {**{k: state[k] for k in keys}, "untracked_count": 1}


def test_the_plugins_own_receipts_do_not_make_the_tree_dirty(repo: Path) -> None:
    (repo / "lossless-receipts").mkdir()
    (repo / "lossless-receipts" / "t.json").write_text("{}")
    assert source_state(repo).to_json()["dirty"] is True
    clean = source_state(repo, ignore=(repo / "lossless-receipts",)).to_json()
    assert clean["dirty"] is False
    assert clean["untracked"] == []


def test_only_untracked_files_make_it_dirty(repo: Path) -> None:
    (repo / "extra.py").write_text("x = 1\n")
    state = source_state(repo).to_json()
    assert state["dirty"] is True
    assert state["diff"] == ""


def test_a_branch_of_a_local_path_remote_is_not_publication(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "HEAD:main")
    git(repo, "fetch", "-q", "origin")
    state = source_state(repo).to_json()
    # A plain-path remote is another clone on this machine: nobody else can fetch from it.
    assert state["remote_branches"] == ["origin/main"]
    assert state["published"] is False
    assert state["local_remotes"] == ["origin"]
    assert "local clone" in state["publication_detail"]
    git(repo, "remote", "add", "public", REMOTE)
    git(repo, "update-ref", "refs/remotes/public/main", "HEAD")
    assert source_state(repo).to_json()["published"] is True
    (repo / "model.py").write_text("speed = 3\n")
    git(repo, "commit", "-qam", "local only")
    assert source_state(repo).to_json()["publication"] == "unpublished"


def test_not_a_repository(tmp_path: Path) -> None:
    state = source_state(tmp_path).to_json()
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
    assert facts.versions["pytest-lossless"]
    assert str(facts.versions["ffmpeg"]).startswith("ffmpeg version")
    knobs = ["PYTHONHASHSEED", "NCCL_ALGO"]
    spec = runspec(repo, knobs=knobs, inputs={"w": weights}, facts=facts).to_json()
    assert spec["environment"]["knobs"] == {"PYTHONHASHSEED": "0"}
    assert spec["environment"]["knobs_unset"] == ["NCCL_ALGO"]
    assert spec["inputs"]["w"]["sha256"] == hashlib.sha256(b"123").hexdigest()
    assert spec["source"]["revision"] == git(repo, "rev-parse", "HEAD")
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    again = runspec(repo, knobs=["PYTHONHASHSEED", "NCCL_ALGO"], facts=facts).to_json()
    assert again["environment"]["fingerprint_sha256"] != spec["environment"]["fingerprint_sha256"]
    with pytest.raises(ArtifactError, match="declared input 'gone'"):
        runspec(repo, knobs=[], inputs={"gone": tmp_path / "gone"}, facts=facts)


def test_committed_receipts_rewritten_later_do_not_make_the_tree_dirty(repo: Path) -> None:
    (repo / "lossless-receipts").mkdir()
    (repo / "lossless-receipts" / "t.json").write_text("{}")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "receipts")
    (repo / "lossless-receipts" / "t.json").write_text('{"again": 1}')
    assert source_state(repo).to_json()["dirty"] is True
    state = source_state(repo, ignore=(repo / "lossless-receipts",)).to_json()
    assert state["dirty"] is False
    assert state["diff_bytes"] == 0


# -- remotes, URLs and publication (a non-local remote is simulated offline: its URL is never
# contacted, and its remote-tracking ref is made with update-ref, as a fetch would have made it)

REMOTE = "https://example.invalid/x.git"


def _publish(repo: Path, url: str = REMOTE, name: str = "origin", branch: str = "main") -> None:
    git(repo, "remote", "add", name, url)
    git(repo, "update-ref", f"refs/remotes/{name}/{branch}", "HEAD")


def test_published_on_a_non_local_remote_names_the_branch_and_url(repo: Path) -> None:
    _publish(repo)
    state = source_state(repo).to_json()
    assert state["published"] is True
    assert state["publication"] == "published"
    assert state["remote_branch"] == "origin/main"
    assert state["remote_url"] == REMOTE
    assert state["published_branches"] == ["origin/main"]
    assert state["remote_urls"] == {"origin": REMOTE}
    assert state["local_remotes"] == []
    assert "origin/main" in state["publication_detail"]
    compact = source_revision(repo).to_json()
    assert compact["remote_url"] == REMOTE
    assert compact["remote_branch"] == "origin/main"
    assert publication_problem(_state(compact)) is None


def test_a_local_clone_is_not_published_and_the_record_says_so(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "backup", f"file://{remote}")
    git(repo, "update-ref", "refs/remotes/backup/main", "HEAD")
    state = source_state(repo).to_json()
    assert state["remote_branches"] == ["backup/main"]
    assert state["published_branches"] == []
    assert state["local_remotes"] == ["backup"]
    assert state["published"] is False
    assert state["publication"] == "unpublished"
    assert "local" in state["publication_detail"]
    assert "backup" in state["publication_detail"]
    problem = publication_problem(_state(state))
    assert problem is not None
    assert "is in no remote-tracking branch of a non-local remote" in problem


def test_url_credentials_never_reach_the_record(repo: Path) -> None:
    _publish(repo, "https://alice:s3cr3t-t0ken@example.invalid/x.git")
    git(
        repo,
        "remote",
        "add",
        "mirror",
        "https://ghp_abcdef123456@example.invalid/y.git?access_token=qwerty99",
    )
    state = source_state(repo).to_json()
    text = json.dumps(state)
    for secret in ("alice", "s3cr3t-t0ken", "ghp_abcdef123456", "qwerty99"):
        assert secret not in text
    assert state["remote_url"] == REMOTE
    assert state["remote_urls"]["mirror"].startswith(
        "https://example.invalid/y.git?access_token=<redacted"
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:token@host/x", "https://host/x"),
        ("https://token@host:8443/x", "https://host:8443/x"),
        ("ssh://git@host/x.git", "ssh://host/x.git"),
        ("git@github.com:org/x.git", "git@github.com:org/x.git"),
        ("/srv/git/x.git", "/srv/git/x.git"),
        ("https://host/x", "https://host/x"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("file:///srv/x.git", True),
        ("/srv/x.git", True),
        ("../x.git", True),
        ("./x", True),
        ("x.git", True),
        ("~/x.git", True),
        ("C:\\repos\\x.git", True),
        ("https://example.invalid/x.git", False),
        ("ssh://git@host/x.git", False),
        ("git@github.com:org/x.git", False),
        ("host:x.git", False),
        ("/srv/a:b.git", True),
        ("localhost:/tmp/bare.git", True),
        ("LOCALHOST:x.git", True),
        ("user@localhost:x.git", True),
        ("ssh://127.0.0.1/x.git", True),
        ("ssh://git@127.1.2.3:22/x.git", True),
        ("http://[::1]/x.git", True),
        ("https://localhost:8080/x.git", True),
        ("[::1]:x.git", True),
        ("ssh://128.0.0.1/x.git", False),
        ("https://localhost.example.com/x.git", False),
    ],
)
def test_local_urls(url: str, local: bool) -> None:
    assert is_local_url(url) is local


def test_a_remote_that_is_not_configured_does_not_publish(repo: Path) -> None:
    git(repo, "update-ref", "refs/remotes/gone/main", "HEAD")  # its remote was removed
    state = source_state(repo).to_json()
    assert state["remote_branches"] == ["gone/main"]
    assert state["published"] is False
    assert "gone" in state["publication_detail"]


def test_publication_problem_names_dirty_files_and_the_revision(repo: Path) -> None:
    _publish(repo)
    (repo / "model.py").write_text("speed = 9\n")
    (repo / "new.py").write_text("x = 1\n")
    state = source_state(repo).to_json()
    assert state["changed_files"] == 1
    problem = publication_problem(_state(state))
    assert problem == "dirty: 1 changed file and 1 untracked file"
    assert source_revision(repo).changed_files == 1
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "local")
    state = source_state(repo).to_json()
    revision = state["revision"][:12]
    assert publication_problem(_state(state)) == (
        f"revision {revision} is in no remote-tracking branch of a non-local remote"
    )
    assert "git push" in PUBLISH_FIX
    outside = publication_problem(_state({"revision": None, "git_error": "not a git repository"}))
    assert outside is not None
    assert "not a git repository" in outside


def test_a_git_that_times_out_leaves_publication_unknown(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _publish(repo)
    real = provenance._git

    def slow(root: Path, *args: str) -> tuple[int, bytes, str]:
        if "--contains" in args:
            return -1, b"", "timed out after 30 seconds"
        return real(root, *args)

    monkeypatch.setattr(provenance, "_git", slow)
    state = source_state(repo).to_json()
    assert state["published"] is None
    assert state["publication"] == "unknown"
    assert "timed out" in state["publication_detail"]
    assert publication_problem(_state(state)) is not None


def test_never_contacts_the_network(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _publish(repo)
    seen: list[tuple[str, ...]] = []
    real = provenance._git

    def spy(root: Path, *args: str) -> tuple[int, bytes, str]:
        seen.append(args)
        return real(root, *args)

    monkeypatch.setattr(provenance, "_git", spy)
    source_state(repo).to_json()
    used = {args[0] for args in seen}
    assert not used & {"fetch", "pull", "ls-remote", "remote update", "push"}
    assert ("remote", "update") not in {args[:2] for args in seen}


def test_a_session_reads_each_tree_from_git_once_until_a_commit(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, ...]] = []
    real = provenance._git

    def spy(root: Path, *args: str) -> tuple[int, bytes, str]:
        seen.append(args)
        return real(root, *args)

    monkeypatch.setattr(provenance, "_git", spy)
    states = provenance.SourceStates()
    first = states.state(repo)
    once = len(seen)
    assert once > 0
    for _ in range(5):  # every later receipt of the session: no git process at all
        assert states.state(repo) is first
    assert states.state(str(repo / ".." / "repo")) is first  # the same tree, however named
    assert len(seen) == once
    # Another ignore list is another question: read once more.
    states.state(repo, ignore=(repo / "lossless-receipts",))
    assert len(seen) == 2 * once
    # A commit during the session moves HEAD: the receipts after it record the new revision.
    (repo / "model.py").write_text("speed = 4\n")
    git(repo, "commit", "-qam", "moved")
    moved = states.state(repo)
    assert moved.revision == git(repo, "rev-parse", "HEAD") != first.revision
    assert len(seen) == 3 * once
    assert states.state(repo) is moved
    # Read back from what a receipt or a manifest records, it describes the same tree.
    assert _state(moved.to_json()).compact() == moved.compact()
    assert _state(moved.compact().to_json()).compact() == moved.compact()
    assert _state(moved.compact().to_json()).problem() == moved.problem()
    # Outside git: read once, then remembered.
    outside = repo.parent / "plain"
    outside.mkdir()
    assert states.state(outside).revision is None
    count = len(seen)
    assert states.state(outside).revision is None
    assert len(seen) == count


def test_the_sessions_end_names_a_tree_edited_after_it_was_read(
    repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """#20: an edit of the work tree alone does not make the session read the tree again, so
    its end reads each tree's diff and untracked names once more (two git processes)."""
    from pytest_lossless.evidence.index import SessionIndex, build_index

    seen: list[tuple[str, ...]] = []
    real = provenance._git

    def spy(root: Path, *args: str) -> tuple[int, bytes, str]:
        seen.append(args)
        return real(root, *args)

    monkeypatch.setattr(provenance, "_git", spy)
    states = provenance.SourceStates()
    first = states.state(repo)
    outside = tmp_path / "plain"
    outside.mkdir()
    states.state(outside)
    count = len(seen)
    assert states.changes() == ()  # untouched: nothing to say
    assert [a[0] for a in seen[count:]] == ["diff", "ls-files"]  # not the tree outside git
    (repo / "model.py").write_text("speed = 5\n")
    assert states.state(repo) is first  # what every later receipt records
    (change,) = states.changes()
    assert (change.tree, change.revision) == (str(repo.resolve()), first.revision)
    assert change.diff_sha256 == first.diff_sha256 != change.diff_sha256_at_end
    assert "diff " in change.text()
    assert "do not describe one source state" in change.text()
    (repo / "notes.txt").write_text("new\n")
    (again,) = states.changes()
    assert (again.untracked_count, again.untracked_count_at_end) == (0, 1)
    # The index records it (a new optional key), and reads it back; an index without it reads.
    index = build_index(tmp_path, session_id="s", source_changes=[change]).to_json()
    assert index["source_changes"] == [change.to_json()]
    assert SessionIndex.read(index).source_changes == (change,)
    del index["source_changes"]
    assert SessionIndex.read(index).source_changes == ()
    assert "source_changes" not in build_index(tmp_path, session_id="s").to_json()


def test_the_sessions_end_leaves_out_only_what_the_session_writes(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#20: the goldens folder (tracked, rewritten by --update-goldens) and the session's
    temporary folders are left out of the end's comparison at both ends, by whole path
    component and literally (a folder named ``g*`` is not a glob); the receipts still record
    the full diff; a tree with a dirty golden costs one ``git diff`` more when first read."""
    from dataclasses import replace

    from pytest_lossless.evidence.index import SessionIndex, build_index

    goldens, scratch = repo / "goldens", repo / "g*"
    goldens.mkdir()
    (goldens / "t.npy").write_bytes(b"golden 1")
    (repo / "goldens_util.py").write_text("x = 1\n")
    (repo / "gx.py").write_text("x = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "goldens")
    (goldens / "t.npy").write_bytes(b"golden 2")  # dirty before the session: recorded
    seen: list[tuple[str, ...]] = []
    real = provenance._git

    def spy(root: Path, *args: str) -> tuple[int, bytes, str]:
        seen.append(args)
        return real(root, *args)

    monkeypatch.setattr(provenance, "_git", spy)
    plain = provenance.SourceStates()
    plain.state(repo)
    once = len(seen)
    states = provenance.SourceStates(exclude=(goldens, scratch, repo.parent / "elsewhere"))
    first = states.state(repo)
    assert len(seen) == 2 * once + 1  # the comparison's digest, without the goldens
    assert first == plain.state(repo)  # what receipts record: the full diff
    assert "goldens/t.npy" in first.diff
    # The session writes its goldens and temporary files: no change.
    (goldens / "t.npy").write_bytes(b"golden 3")
    (goldens / "new.npy").write_bytes(b"new")
    scratch.mkdir()
    (scratch / "tmp.txt").write_text("scratch")
    assert states.changes() == ()
    assert len(plain.changes()) == 1  # without the exclusions, the session names itself
    # A test writes source beside them: named, whatever its name looks like.
    (repo / "goldens_util.py").write_text("x = 2\n")
    (change,) = states.changes()
    assert change.diff_sha256 != change.diff_sha256_at_end
    assert change.excluded == ("goldens", "g*")
    assert "goldens, g* left out" in change.text()
    git(repo, "checkout", "goldens_util.py")
    assert states.changes() == ()
    (repo / "gx.py").write_text("x = 2\n")  # a glob g* would have hidden it
    assert len(states.changes()) == 1
    git(repo, "checkout", "gx.py")
    (repo / "goldens.py").write_text("new\n")
    (change,) = states.changes()
    assert (change.untracked_count, change.untracked_count_at_end) == (0, 1)
    # The index keeps the key; an entry without it (an older index) reads with none.
    index = build_index(repo.parent, session_id="s", source_changes=[change]).to_json()
    assert index["source_changes"][0]["excluded"] == ["goldens", "g*"]
    assert SessionIndex.read(index).source_changes == (change,)
    del index["source_changes"][0]["excluded"]
    (old,) = SessionIndex.read(index).source_changes
    assert old == replace(change, excluded=())


def test_a_clean_tree_costs_no_extra_git_process_for_the_exclusions(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, ...]] = []
    real = provenance._git

    def spy(root: Path, *args: str) -> tuple[int, bytes, str]:
        seen.append(args)
        return real(root, *args)

    monkeypatch.setattr(provenance, "_git", spy)
    provenance.SourceStates().state(repo)
    once = len(seen)
    provenance.SourceStates(exclude=(repo / "goldens",)).state(repo)
    assert len(seen) == 2 * once


def test_the_source_block_keeps_its_keys_in_and_outside_git(repo: Path, tmp_path: Path) -> None:
    state = source_state(repo).to_json()
    assert list(state) == [
        "revision", "branch", "toplevel", "dirty", "diff_sha256", "diff_bytes", "diff",
        "changed_files", "untracked", "remotes", "remote_urls", "local_remotes",
        "remote_branches", "published_branches", "remote_branch", "remote_url", "published",
        "publication", "publication_detail", "git_error",
    ]  # fmt: skip
    assert state["toplevel"] == str(repo.resolve())
    outside = tmp_path / "plain"
    outside.mkdir()
    assert list(source_state(outside).to_json()) == [
        "revision", "dirty", "diff_sha256", "diff", "untracked", "published", "remote_branches",
        "published_branches", "remote_branch", "remote_url", "publication", "publication_detail",
        "git_error",
    ]  # fmt: skip


# -- which arm ran which source revision, as verify prints it


def _receipt(control_src: dict[str, Any], candidate_src: dict[str, Any]) -> dict[str, Any]:
    runs = []
    for number, src in enumerate((control_src, control_src, candidate_src), start=1):
        runs.append(
            {
                "name": f"command-{number:02d}",
                "outputs": {"o": {"path": f"/o/{number}/o.bin", "sha256": "ab"}},
                "sources": {"/src/engine": src},
            }
        )
    runs.append({"name": "command-04", "sources": {"/src/engine": candidate_src}})
    runs.append({"name": "command-05", "sources": {"/src/engine": control_src}})
    return {
        "runs": runs,
        "lossless": [
            {
                "runs": [
                    {
                        "role": "control",
                        "name": "control#1",
                        "artifacts": {"o": {"path": "/o/1/o.bin"}},
                    },
                    {
                        "role": "control",
                        "name": "control#2",
                        "artifacts": {"o": {"path": "/o/2/o.bin"}},
                    },
                    {
                        "role": "candidate",
                        "name": "candidate",
                        "artifacts": {"o": {"path": "/o/3/o.bin"}},
                    },
                ]
            }
        ],
        "speed": [
            {
                "samples": [
                    {"arm": "candidate", "run": "command-04", "runs": ["command-04"]},
                    {"arm": "control", "run": "command-05", "runs": ["command-05"]},
                ]
            }
        ],
    }


def test_arm_sources_from_lossless_and_speed_entries() -> None:
    control = {"revision": "a" * 40, "dirty": False, "published": True,
               "publication": "published", "remote_branch": "origin/main"}  # fmt: skip
    candidate = {"revision": "b" * 40, "dirty": True, "published": False,
                 "publication": "unpublished"}  # fmt: skip
    arms = arm_sources([ReceiptRecord.from_json(_receipt(control, candidate))])
    assert set(arms) == {"control", "candidate"}
    assert [s.revision for s in arms["control"]["/src/engine"]] == ["a" * 40]
    assert [s.revision for s in arms["candidate"]["/src/engine"]] == ["b" * 40]
    lines = arm_source_lines([ReceiptRecord.from_json(_receipt(control, candidate))])
    assert lines[0] == "sources per arm:"
    assert any(
        "control" in line and "aaaaaaaaaaaa" in line and "clean" in line and "published" in line
        for line in lines
    ), lines
    assert any(
        "candidate" in line and "bbbbbbbbbbbb" in line and "dirty" in line
        and "unpublished" in line
        for line in lines
    ), lines  # fmt: skip
    assert len(lines) == 3


def test_runs_of_no_arm_are_listed_apart() -> None:
    receipt = {"runs": [{"name": "command-01", "sources": {"/e": {"revision": "c" * 40}}}]}
    assert arm_sources([ReceiptRecord.from_json(receipt)]) == {
        "other": {"/e": [_state({"revision": "c" * 40})]}
    }
    assert arm_source_lines([ReceiptRecord.from_json({"runs": []})]) == []


def test_publication_contradictions_hold_the_record_to_its_branches(repo: Path) -> None:
    _publish(repo)
    git(repo, "remote", "add", "copy", "/srv/copy.git")
    git(repo, "update-ref", "refs/remotes/copy/main", "HEAD")
    state = source_state(repo).to_json()
    assert publication_contradictions(state, "runspec") == []
    edited = {**state, "published_branches": ["copy/main"], "remote_branch": "copy/main"}
    assert any("copy is a local remote" in c for c in publication_contradictions(edited, "x"))
    edited = {**state, "published": False, "publication": "unpublished"}
    assert any("contradicts" in c for c in publication_contradictions(edited, "x"))
    edited = {**state, "published_branches": ["elsewhere/main"]}
    assert any("not among" in c for c in publication_contradictions(edited, "x"))
    # Receipts written before published_branches existed: any remote branch was publication.
    old = {"revision": "a" * 40, "remote_branches": ["origin/main"], "published": True,
           "publication": "published"}  # fmt: skip
    assert publication_contradictions(old, "runspec") == []
    assert publication_contradictions({**old, "remote_branches": []}, "runspec")
    unknown = {**state, "published": None, "publication": "unknown"}
    assert publication_contradictions(unknown, "x") == []
    compact = source_revision(repo).to_json()  # as a run records each of its sources
    assert publication_contradictions(compact, "runs") == []
    assert publication_contradictions({**compact, "published": False}, "runs")


def test_require_published_is_a_flag_and_an_ini_setting(tmp_path: Path) -> None:
    from pytest_lossless.settings import resolve

    assert resolve({}, {}, {}, rootdir=tmp_path).require_published is False
    from_ini = resolve({}, {"require_published": "true"}, {}, rootdir=tmp_path)
    assert from_ini.require_published is True
    assert from_ini.sources["require_published"] == "ini lossless_require_published"
    flag = resolve({"require_published": True}, {}, {}, rootdir=tmp_path)
    assert flag.sources["require_published"] == "--lossless-require-published"
