"""End to end: each session writes into a folder of its own with an index, so concurrent
sessions keep every receipt, ``verify`` names what is missing, added or changed, refuses a
folder mixing revisions, merges the sessions of several hosts, and counts each session once,
under its own name, on the revision asked for."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

from pytest_lossless.__main__ import main
from pytest_lossless.errors import ConfigError
from pytest_lossless.evidence.index import (
    HOST_ENV,
    INDEX_NAME,
    SESSION_ID,
    HostIdentity,
    build_index,
    host_identity,
    new_session_id,
    write_index,
)
from pytest_lossless.evidence.receipts import Receipt
from pytest_lossless.evidence.summary_md import write_summary

PROJECT = """
import os, sys, time
import pytest

@pytest.mark.lossless
def test_gate(model_run, lossless):
    run = lambda: model_run([sys.executable, "-c", "pass"])
    lossless.compare(lambda: {"x": b"same"}, lambda: {"x": b"same"}, runs=2, label="c")
    run()

def test_run(model_run):
    model_run([sys.executable, "-c", "pass"])
    time.sleep(float(os.environ.get("SESSION_SLEEP", "0")))
"""


@dataclass
class Verified:
    returncode: int
    stdout: str
    stderr: str


def _verify(*args: str | Path, env: dict[str, str] | None = None) -> Verified:
    """``python -m pytest_lossless verify ARGS``, in this process (a subprocess costs a second)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        code = main(["verify", *map(str, args)])
    return Verified(code, out.getvalue(), err.getvalue())


def _sessions(receipts: Path) -> list[Path]:
    return sorted(p for p in receipts.iterdir() if p.is_dir())


def _index(session: Path) -> dict[str, Any]:
    return json.loads((session / INDEX_NAME).read_text())


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--lossless", "-p", "no:cacheprovider", *args)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_project=PROJECT)
    return pytester


@pytest.mark.slow
def test_one_session_one_folder_with_its_index(project: pytest.Pytester) -> None:
    result = _run(project)
    result.assert_outcomes(passed=2)
    receipts = project.path / "lossless-receipts"
    (session,) = _sessions(receipts)
    index = _index(session)
    assert index["session_id"] == session.name
    assert index["finished"] is True
    assert index["state"] == "finished"
    assert index["host"]["hostname"]
    assert {r["file"] for r in index["receipts"]} == {
        "test_project.py__test_gate.json",
        "test_project.py__test_run.json",
    }
    assert [t["test_id"] for t in index["tests"] if t["gate"]] == ["test_project.py::test_gate"]
    assert index["summary"]["file"] == "SUMMARY.md"
    assert "hmac" not in index  # no key in the session: sessions are signed afterwards (#28)
    receipt = json.loads((session / "test_project.py__test_gate.json").read_text())
    assert receipt["runspec"]["session_id"] == session.name
    assert receipt["runspec"]["host"] == index["host"]
    assert (receipts / "SUMMARY.md").is_file()  # the merged one, at the root
    result.stdout.fnmatch_lines([f"*2 receipts in lossless-receipts/{session.name}*"])
    done = subprocess.run(  # once as CI runs it
        [sys.executable, "-m", "pytest_lossless", "verify", str(receipts)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    assert "sessions: 1 (1 finished) on 1 host" in done.stdout
    assert "do not prove who wrote them" in done.stdout
    assert _verify(session).returncode == 0  # a session folder alone verifies too


@pytest.mark.slow
def test_two_concurrent_sessions_of_the_same_test_keep_both(project: pytest.Pytester) -> None:
    argv = [sys.executable, "-m", "pytest", "--lossless", "-p", "no:cacheprovider", "-q"]
    env = {**os.environ, "SESSION_SLEEP": "1.5"}
    both = [
        subprocess.Popen(argv, cwd=project.path, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in both]
    assert [p.returncode for p in both] == [0, 0], outputs
    receipts = project.path / "lossless-receipts"
    sessions = _sessions(receipts)
    assert len(sessions) == 2
    for session in sessions:
        assert (session / "test_project.py__test_run.json").is_file()
        assert _index(session)["finished"] is True
    done = _verify(receipts)
    assert done.returncode == 0, done.stdout
    assert "4 of 4 receipts consistent" in done.stdout
    assert "sessions: 2 (2 finished)" in done.stdout


@pytest.mark.slow
def test_a_deleted_receipt_is_named_even_with_the_summaries_regenerated(
    project: pytest.Pytester,
) -> None:
    _run(project).assert_outcomes(passed=2)
    receipts = project.path / "lossless-receipts"
    (session,) = _sessions(receipts)
    gone = session / "test_project.py__test_run.json"
    gone.unlink()
    for folder in (session, receipts):  # the summaries agree with what is left
        summary = [sys.executable, "-m", "pytest_lossless", "summary", str(folder), "--write"]
        subprocess.run(summary, check=True, capture_output=True)
    done = _verify(receipts)
    assert done.returncode == 1
    assert f"INCOMPLETE {gone}: listed in INDEX.json but missing" in done.stdout
    assert "test_project.py::test_run" in done.stdout
    # The regenerated SUMMARY.md is not the one the session wrote, either.
    assert "the summary was changed after its session ended" in done.stdout


@pytest.mark.slow
def test_a_deleted_summary_is_named(project: pytest.Pytester) -> None:
    _run(project).assert_outcomes(passed=2)
    receipts = project.path / "lossless-receipts"
    (session,) = _sessions(receipts)
    (session / "SUMMARY.md").unlink()
    done = _verify(receipts)
    assert done.returncode == 1
    assert f"INCOMPLETE {session / 'SUMMARY.md'}: missing" in done.stdout


@pytest.mark.slow
def test_a_session_whose_gates_wrote_no_receipt_is_not_nothing_to_verify(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_bare="""
import pytest

@pytest.mark.lossless
def test_compares_nothing():
    pass
"""
    )
    _run(pytester).assert_outcomes(failed=1)
    receipts = pytester.path / "lossless-receipts"
    (session,) = _sessions(receipts)
    assert _index(session)["receipts"] == []
    done = _verify(receipts)
    assert done.returncode == 1, done.stderr
    assert "gate test test_bare.py::test_compares_nothing was collected" in done.stdout


@pytest.mark.slow
def test_added_changed_and_missing_evidence_is_named(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_broken="""
import pytest

@pytest.mark.lossless
def test_compares_nothing():
    pass
"""
    )
    _run(project).assert_outcomes(passed=2, failed=1)
    receipts = project.path / "lossless-receipts"
    (session,) = _sessions(receipts)
    done = _verify(receipts)
    assert done.returncode == 1
    assert (
        "gate test test_broken.py::test_compares_nothing was collected and is failed "
        "(call failed), but wrote no receipt"
    ) in done.stdout
    # A receipt added by hand, and one changed after the session ended.
    stray = session / "test_stray.json"
    stray.write_bytes((session / "test_project.py__test_run.json").read_bytes())
    changed = session / "test_project.py__test_gate.json"
    changed.write_text(changed.read_text().replace('"written_at"', '"written_at" ', 1))
    done = _verify(receipts)
    assert f"CONTRADICTION {stray}: a receipt INDEX.json does not list" in done.stdout
    assert f"CONTRADICTION {changed}: SHA-256" in done.stdout
    assert "the receipt was changed after its session ended" in done.stdout
    # Without the index nothing can show a receipt is missing: that is named too.
    (session / INDEX_NAME).unlink()
    done = _verify(receipts)
    assert done.returncode == 1
    assert f"INCOMPLETE {session}: no INDEX.json" in done.stdout


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


@pytest.mark.slow
def test_sessions_across_two_commits_verify_and_revision_stays_strict(
    project: pytest.Pytester,
) -> None:
    """Ordinary use across one commit (#22): sessions of two revisions are each judged on their
    own, so the folder verifies (it used to be a CONTRADICTION, "2 source revisions"), with a
    note; ``--revision REV`` still requires one revision of every record."""
    root = project.path
    (root / ".gitignore").write_text("lossless-receipts/\n__pycache__/\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "first")
    _run(project).assert_outcomes(passed=2)
    (root / "README").write_text("second\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "second")
    _run(project).assert_outcomes(passed=2)
    receipts = root / "lossless-receipts"
    assert len(_sessions(receipts)) == 2
    done = _verify(receipts)
    assert done.returncode == 0, done.stdout
    assert "CONTRADICTION" not in done.stdout
    assert "source revisions: 2" in done.stdout
    assert "note: the sessions are of 2 source revisions" in done.stdout
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()
    strict = _verify(receipts, "--revision", head)
    assert strict.returncode == 1
    assert f"--revision {head} is required" in strict.stdout
    allowed = _verify(receipts, "--allow-mixed-revisions")
    assert allowed.returncode == 0, allowed.stdout
    for session in _sessions(receipts):
        assert _verify(session).returncode == 0  # each session alone is one revision
    newest = _sessions(receipts)[-1]
    assert _verify(newest, "--revision", head).returncode == 0


@pytest.mark.slow
def test_three_hosts_merge_under_one_verify(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project.makepyfile(
        test_device="""
import sys, pytest

@pytest.mark.npu(devices=1)
def test_on_a_device(devices, model_run):
    model_run([sys.executable, "-c", "pass"])
"""
    )
    folders = []
    for host in ("host-a", "host-b", "host-c"):
        monkeypatch.setenv(HOST_ENV, host)
        receipts = tmp_path / host / "lossless-receipts"
        result = _run(
            project,
            f"--lossless-receipts={receipts}",
            f"--lossless-lock-dir={tmp_path / host / 'locks'}",
            "--lossless-backend=cpu",
        )
        result.assert_outcomes(passed=3)
        (session,) = _sessions(receipts)
        assert f"-{host}-" in session.name
        assert _index(session)["host"]["hostname"] == host
        assert _index(session)["host"]["declared_by"] == HOST_ENV
        folders.append(receipts)
    done = _verify(*folders)
    assert done.returncode == 0, done.stdout
    assert "9 of 9 receipts consistent" in done.stdout
    assert "merged: 9 receipts: " in done.stdout
    assert "sessions: 3 (3 finished) on 3 hosts" in done.stdout
    for host in ("host-a", "host-b", "host-c"):
        assert f"  host {host}" in done.stdout
    assert "source revisions: 1" in done.stdout
    # The hosts' folders downloaded under one folder (a CI job's artifacts) verify the same.
    merged = _verify(tmp_path)
    assert merged.returncode == 0, merged.stdout
    assert "on 3 hosts" in merged.stdout


@pytest.mark.slow
def test_a_renamed_copied_or_other_revision_session_is_named(
    project: pytest.Pytester, tmp_path: Path
) -> None:
    _git_commit(project.path)
    _run(project).assert_outcomes(passed=2)
    receipts = project.path / "lossless-receipts"
    (session,) = _sessions(receipts)
    revision = _index(session)["source"]["revision"]
    assert _verify(receipts, "--revision", revision).returncode == 0
    assert _verify(receipts, "--revision", revision[:7]).returncode == 0
    other = _verify(receipts, "--revision", "0123456789abcdef")
    assert other.returncode == 1
    assert "but --revision 0123456789abcdef is required" in other.stdout
    assert _verify(receipts, "--revision", "HEAD").returncode == 2  # not a SHA: said so
    # One session under two shards' folders (a failing shard replaced by a copy of another).
    import shutil

    shard_a, shard_b = tmp_path / "receipts-a", tmp_path / "receipts-b"
    shutil.copytree(session, shard_a / session.name)
    shutil.copytree(session, shard_b / session.name)
    twice = _verify(tmp_path)
    assert twice.returncode == 1
    assert f"session {session.name} is in 2 folders" in twice.stdout
    # A renamed session folder.
    renamed = session.rename(receipts / "20990101T000000.000Z-other-abcdef")
    moved = _verify(renamed)
    assert moved.returncode == 1
    assert f"the folder of session {session.name} was renamed" in moved.stdout


def _git_commit(folder: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)

    git("init", "-q", ".")
    git("add", "-A")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "init")


def test_an_old_index_with_an_hmac_is_noted_not_believed(tmp_path: Path) -> None:
    folder = tmp_path / "20240102T000000.000Z-h-bbbbbb"
    folder.mkdir()
    write_summary(folder)
    index = build_index(folder, session_id=folder.name)
    hmac = {"algorithm": "HMAC-SHA256", "value": "ab" * 32}  # an older release's index
    write_index(folder, replace(index, hmac=hmac))
    done = _verify(folder)
    assert done.returncode == 0, done.stdout
    assert "carries an HMAC from an older pytest-lossless; HMACs are no longer checked" in (
        done.stdout
    )


@pytest.mark.slow
def test_an_interrupted_session_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_stop="""
import sys, pytest

@pytest.mark.lossless
def test_1_runs(model_run, lossless):
    lossless.compare(lambda: {"x": b"a"}, lambda: {"x": b"a"}, runs=2, label="c")

def test_2_stops():
    pytest.exit("the operator stopped the campaign")

@pytest.mark.lossless
def test_3_never_reached(lossless):
    lossless.compare(lambda: {"x": b"a"}, lambda: {"x": b"a"}, runs=2, label="c")
"""
    )
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    receipts = pytester.path / "lossless-receipts"
    (session,) = _sessions(receipts)
    index = _index(session)
    assert index["finished"] is False
    assert index["state"] == "interrupted"
    assert index["exitstatus"] == 2
    tests = {t["test_id"]: t for t in index["tests"]}
    assert tests["test_stop.py::test_1_runs"]["receipt"] == "test_stop.py__test_1_runs.json"
    assert tests["test_stop.py::test_3_never_reached"]["outcome"] == "not run"
    done = _verify(receipts)
    assert done.returncode == 1
    assert "the session did not finish (interrupted, exit status 2)" in done.stdout
    assert "test_3_never_reached was collected and is not run" in done.stdout


@pytest.mark.slow
def test_a_session_stopped_early_says_which_gates_it_left_out(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_a_first="""
import pytest

@pytest.mark.lossless
def test_compares_nothing():
    pass
"""
    )
    _run(project, "-x").assert_outcomes(failed=1)
    (session,) = _sessions(project.path / "lossless-receipts")
    index = _index(session)
    assert index["finished"] is False
    assert index["state"].startswith("stopped early: ")
    tests = {t["test_id"]: t for t in index["tests"]}
    assert tests["test_project.py::test_gate"]["outcome"] == "not run"
    done = _verify(project.path / "lossless-receipts")
    assert done.returncode == 1
    assert "the session did not finish (stopped early" in done.stdout
    assert "test_project.py::test_gate was collected and is not run" in done.stdout


@pytest.mark.slow
def test_xdist_workers_write_into_the_controllers_session(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("--lossless", "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=2)
    receipts = project.path / "lossless-receipts"
    (session,) = _sessions(receipts)
    index = _index(session)
    assert len(index["receipts"]) == 2
    assert [t["test_id"] for t in index["tests"] if t["gate"]] == ["test_project.py::test_gate"]
    done = _verify(receipts)
    assert done.returncode == 0, done.stdout


@pytest.mark.slow
def test_a_bad_host_name_is_a_usage_error(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOST_ENV, "node\x1b[2J7")
    result = _run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest-lossless: PYTEST_LOSSLESS_HOST=*printable characters"])
    assert not (project.path / "lossless-receipts").exists()


# ------------------------------------------------------------------ without pytest sessions


def test_session_ids_sort_by_start_time_and_name_the_host() -> None:
    host = HostIdentity("gpu-node/7 (rack 2)")
    first = new_session_id(host, now=1_700_000_000.001)
    later = new_session_id(host, now=1_700_000_000.002)
    assert first.startswith("20231114T221320.001Z-gpu-node_7_rack_2-")
    assert SESSION_ID.match(first)
    assert SESSION_ID.match(later)
    assert sorted([later, first]) == [first, later]
    assert new_session_id(host, now=1.0) != new_session_id(host, now=1.0)  # the random part


def test_a_declared_host_is_recorded_and_checked() -> None:
    host = host_identity({HOST_ENV: "node-7"}).to_json()
    assert host["hostname"] == "node-7"
    assert host["declared_by"] == HOST_ENV
    assert "machine_id" not in host  # only an app-specific hash of it, when readable
    assert host_identity({}).declared_by is None
    with pytest.raises(ConfigError, match=HOST_ENV):
        host_identity({HOST_ENV: "evil\x1b[2Jhost"})


def test_a_receipt_moved_into_another_session_is_named(tmp_path: Path) -> None:
    receipt = Receipt("t.py::test_a")
    receipt.set_runspec({"source": {}, "session_id": "20240101T000000.000Z-h-aaaaaa"})
    receipt.add_run({"name": "command-01", "processes": []})
    folder = tmp_path / "20240102T000000.000Z-h-bbbbbb"
    receipt.write(folder)
    write_summary(folder)
    write_index(folder, build_index(folder, session_id=folder.name))
    done = _verify(folder)
    assert done.returncode == 1
    assert "written by session 20240101T000000.000Z-h-aaaaaa, not by" in done.stdout
