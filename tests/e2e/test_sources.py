"""End to end: ``model_run(sources=...)`` records which revision of each arm's source tree ran,
``--lossless-require-published`` refuses a dirty or unpublished rootdir or source tree, and
``verify`` prints the revisions it saw.

A non-local remote is simulated offline: ``git remote add origin https://example.invalid/...``
and the remote-tracking ref made with ``git update-ref``, as a fetch would have left it.
Nothing here touches the network.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

from pytest_lossless.__main__ import main
from pytest_lossless.evidence.receipts import derive_verdicts, raw_sha256

pytestmark = pytest.mark.slow

GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
UNPUBLISHED = "is in no remote-tracking branch of a non-local remote"


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True,
                          check=True, env={**os.environ, **GIT})  # fmt: skip
    return done.stdout.strip()


def _repo(folder: Path, files: dict[str, str]) -> str:
    """A git repository with ``files`` committed; its revision."""
    folder.mkdir(parents=True, exist_ok=True)
    _git(folder, "init", "-q", "-b", "main")
    for name, text in files.items():
        (folder / name).write_text(text)
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "base")
    return _git(folder, "rev-parse", "HEAD")


def _publish(folder: Path, url: str = "https://example.invalid/x.git") -> None:
    _git(folder, "remote", "add", "origin", url)
    _git(folder, "update-ref", "refs/remotes/origin/main", "HEAD")


def _verify(*args: str | Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["verify", *map(str, args)])
    return code, out.getvalue() + err.getvalue()


def test_each_arm_records_its_source_revision(pytester: pytest.Pytester) -> None:
    engine = pytester.path / "engine"
    revision = _repo(engine, {"kernel.py": "FAST = True\n"})
    (engine / "kernel.py").write_text("FAST = False\n")  # the candidate runs a dirty tree
    pytester.makepyfile(
        test_src=f"""
import sys
import pytest

def test_arm(model_run):
    model_run([sys.executable, "-c", "pass"], sources=[{str(engine)!r}])

def test_not_a_folder(model_run):
    model_run([sys.executable, "-c", "pass"], sources=[{str(engine / "kernel.py")!r}])
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*model_run(sources=...)=*kernel.py*not a folder*"])
    receipt = json.loads(
        next((pytester.path / "lossless-receipts").rglob("*test_arm.json")).read_text()
    )
    source = receipt["runs"][0]["sources"][str(engine.resolve())]
    assert source["revision"] == revision
    assert source["dirty"] is True
    assert source["publication"] == "unpublished"


ROOT_TEST = """
import sys

def test_run(model_run):
    model_run([sys.executable, "-c", "pass"])
"""


def test_require_published_refuses_an_unpublished_or_dirty_rootdir_at_start(
    pytester: pytest.Pytester,
) -> None:
    root = pytester.path
    revision = _repo(root, {"test_root.py": ROOT_TEST, ".gitignore": "lossless-receipts/\n"})
    # Without the option nothing fails, but the receipt says the revision is unpublished.
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    receipt = json.loads(next((root / "lossless-receipts").rglob("*test_run.json")).read_text())
    assert receipt["runspec"]["source"]["publication"] == "unpublished"
    assert "no remotes are configured" in receipt["runspec"]["source"]["publication_detail"]

    refused = pytester.runpytest("-p", "no:cacheprovider", "--lossless-require-published")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    text = refused.stderr.str()
    assert f"the rootdir {root}" in text
    assert f"revision {revision[:12]} {UNPUBLISHED}" in text
    assert "git push" in text
    assert "passed" not in refused.stdout.str()

    _publish(root)
    (root / "test_root.py").write_text(ROOT_TEST + "\n# edited\n")
    (root / "notes.txt").write_text("new\n")
    refused = pytester.runpytest("-p", "no:cacheprovider", "--lossless-require-published")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "dirty: 1 changed file and 1 untracked file" in refused.stderr.str()

    (root / "notes.txt").unlink()
    _git(root, "checkout", "-q", "--", "test_root.py")
    done = pytester.runpytest("-p", "no:cacheprovider", "--lossless-require-published")
    done.assert_outcomes(passed=1)
    written = sorted((root / "lossless-receipts").rglob("*test_run.json"))[-1]
    source = json.loads(written.read_text())["runspec"]["source"]
    assert source["publication"] == "published"
    assert source["remote_branch"] == "origin/main"
    assert source["remote_url"] == "https://example.invalid/x.git"


def test_require_published_fails_the_run_of_a_dirty_or_unpublished_source_tree(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    root = pytester.path
    published, dirty, local = tmp_path / "published", tmp_path / "dirty", tmp_path / "local"
    _repo(published, {"kernel.py": "A = 1\n"})
    _publish(published, "https://alice:ghp_s3cr3tT0ken@example.invalid/engine.git")
    _repo(dirty, {"kernel.py": "B = 1\n"})
    _publish(dirty)
    (dirty / "kernel.py").write_text("B = 2\n")
    _repo(local, {"kernel.py": "C = 1\n"})
    tests = f"""
import sys

def run(model_run, tree):
    return model_run([sys.executable, "-c", "pass"], sources=[tree])

def test_published(model_run):
    run(model_run, {str(published)!r})

def test_dirty(model_run):
    run(model_run, {str(dirty)!r})

def test_local(model_run):
    run(model_run, {str(local)!r})
"""
    _repo(root, {"test_trees.py": tests, ".gitignore": "lossless-receipts/\n"})
    _publish(root)
    result = pytester.runpytest("-p", "no:cacheprovider", "--lossless-require-published")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [f"*--lossless-require-published*source tree {dirty}*dirty: 1 changed file*"]
    )
    result.stdout.fnmatch_lines([f"*source tree {local}*{UNPUBLISHED}*"])
    assert "git push" in out
    receipts = root / "lossless-receipts"
    receipt = json.loads(next(receipts.rglob("*test_published.json")).read_text())
    source = receipt["runs"][0]["sources"][str(published)]
    assert source["published"] is True
    assert source["remote_branch"] == "origin/main"
    assert source["remote_url"] == "https://example.invalid/engine.git"
    # The refused runs never started: no record, no gap in the run numbers.
    failed = json.loads(next(receipts.rglob("*test_dirty.json")).read_text())
    assert failed["runs"] == []
    for path in receipts.rglob("*"):
        if path.is_file():
            assert "ghp_s3cr3tT0ken" not in path.read_text(errors="replace")
            assert "alice" not in path.read_text(errors="replace")
    assert "ghp_s3cr3tT0ken" not in out


ARMS_TEST = """
import sys
import pytest

WRITE = "import sys, pathlib; pathlib.Path(sys.argv[1], 'o.bin').write_bytes(b'same')"

@pytest.mark.lossless
def test_arms(model_run, lossless):
    def arm(tree):
        return lambda: model_run([sys.executable, "-c", WRITE, "{{out}}"],
                                 outputs={{"o.bin": "{{out}}/o.bin"}}, sources=[tree])
    lossless.compare(arm({control!r}), arm({candidate!r}), runs=2, label="arms")
"""


def test_verify_prints_the_revisions_of_the_rootdir_and_of_each_arm(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    control, candidate = tmp_path / "engine-a", tmp_path / "engine-b"
    control_rev = _repo(control, {"kernel.py": "A = 1\n"})
    _publish(control)
    candidate_rev = _repo(candidate, {"kernel.py": "B = 1\n"})
    (candidate / "kernel.py").write_text("B = 2\n")
    root = pytester.path
    tests = ARMS_TEST.format(control=str(control), candidate=str(candidate))
    root_rev = _repo(root, {"test_arms.py": tests, ".gitignore": "lossless-receipts/\n"})
    pytester.runpytest("-p", "no:cacheprovider", "--lossless").assert_outcomes(passed=1)
    receipts = root / "lossless-receipts"
    code, out = _verify(receipts)
    assert code == 0, out
    lines = out.splitlines()
    assert f"  {root_rev[:12]}: 1 session (clean, unpublished)" in lines, out
    assert "sources per arm:" in lines
    assert f"  control {control}: {control_rev[:12]} clean, published (origin/main)" in lines
    shown = [line for line in lines if line.startswith(f"  candidate {candidate}: ")]
    assert len(shown) == 1, out
    assert f"{candidate_rev[:12]} dirty (diff " in shown[0]
    assert shown[0].endswith(", unpublished")

    # A run's publication edited, every derived field recomputed: its branches still disagree.
    path = next(receipts.rglob("*test_arms.json"))
    receipt = json.loads(path.read_text())
    tree = receipt["runs"][-1]["sources"][str(candidate)]
    tree["published"], tree["publication"] = True, "published"
    receipt["verdicts"] = derive_verdicts(receipt)
    receipt["integrity"]["raw_sha256"] = raw_sha256(receipt)
    path.write_text(json.dumps(receipt))
    code, out = _verify(path)
    assert code == 1
    assert f"runs command-03 {candidate}: publication 'published' contradicts" in out


MIX_TEST = """
import subprocess, sys

def test_first(model_run):
    model_run([sys.executable, "-c", "pass"])

def test_second(model_run):  # the rootdir's HEAD moves while the session runs
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "moved"], check=True)
    model_run([sys.executable, "-c", "pass"])
"""


def test_a_session_folder_mixing_revisions_is_named(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in GIT.items():
        monkeypatch.setenv(name, value)
    root = pytester.path
    _repo(root, {"test_mix.py": MIX_TEST, ".gitignore": "lossless-receipts/\n"})
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    (session,) = [p for p in (root / "lossless-receipts").iterdir() if p.is_dir()]
    code, out = _verify(session)
    assert code == 1
    assert f"{session} (session {session.name}): one session folder holds 2 revisions" in out
    code, out = _verify(session, "--allow-mixed-revisions")
    assert code == 0, out
    assert f"  session {session.name} holds 2 revisions" in out


COUNT_TEST = """
import sys
import pytest

@pytest.mark.parametrize("n", range({tests}))
def test_run(model_run, n):
    model_run([sys.executable, "-c", "pass"], sources=[{engine!r}])
"""


def _git_processes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tests: int) -> int:
    """The git processes a session of ``tests`` receipts ran (a ``git`` on PATH that logs each
    call, then runs the real one)."""
    import shutil

    real = shutil.which("git")
    assert real is not None
    bin_dir, log = pytester.path / f"bin{tests}", pytester.path / f"git{tests}.log"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {str(log)!r}\nexec {real!r} "$@"\n')
    wrapper.chmod(0o755)
    test = pytester.path / "test_count.py"
    test.write_text(COUNT_TEST.format(tests=tests, engine=str(pytester.path / "engine")))
    with monkeypatch.context() as patch:
        patch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        result = pytester.runpytest("-p", "no:cacheprovider", str(test))
    result.assert_outcomes(passed=tests)
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_git_runs_once_per_session_and_source_tree(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#22: the revision of a source tree does not change within a session, so the rootdir and
    each ``sources=`` tree are read from git once, however many receipts the session writes."""
    for name, value in GIT.items():
        monkeypatch.setenv(name, value)
    _repo(pytester.path, {".gitignore": "lossless-receipts/\nbin*/\ngit*.log\ntest_count.py\n"})
    revision = _repo(pytester.path / "engine", {"kernel.py": "FAST = True\n"})
    one = _git_processes(pytester, monkeypatch, 1)
    many = _git_processes(pytester, monkeypatch, 6)
    assert one > 0
    assert many == one  # not seven processes per receipt: none after the first
    receipts = sorted((pytester.path / "lossless-receipts").rglob("*test_run*.json"))
    assert len(receipts) == 7
    for path in receipts:
        receipt = json.loads(path.read_text())
        assert receipt["runspec"]["source"]["revision"] == _git(pytester.path, "rev-parse", "HEAD")
        (tree,) = receipt["runs"][0]["sources"].values()
        assert tree["revision"] == revision
