"""End to end: ``python -m pytest_lossless bisect GOOD BAD -- PYTEST_ARGS`` on synthetic git
repositories whose one test checks a real WAV (soundfile) against its golden.

Each bisect runs pytest as a subprocess at every step, so these tests are ``slow`` and, with
more than 30 s of steps on a shared machine, ``deep``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]

MODEL = """
import numpy as np
import soundfile as sf


def render(path):
    t = np.arange(4800)
    samples = (np.sin(2 * np.pi * 440 * t / 48000) * 8000).astype(np.int16)
{edits}    sf.write(path, samples, 48000, subtype="PCM_16")
    return path
"""
FLAKY = "    samples[:64] = np.random.default_rng().integers(-999, 999, 64)  # a reused buffer\n"
ONE_SAMPLE = "    samples[1234] += 1  # a 'harmless' rounding change\n"

AUDIO_TEST = """
import tempfile
from pathlib import Path

import pytest

import model


@pytest.mark.lossless
def test_audio(golden, tmp_path):
    golden.check("audio.wav", lambda: model.render(Path(tempfile.mkdtemp(dir=tmp_path)) / "a.wav"))


def test_plain():
    assert True
"""


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True,
                          check=True, env={**os.environ, **GIT})  # fmt: skip
    return done.stdout.strip()


def _commit(folder: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "--allow-empty", "-m", message)
    return _git(folder, "rev-parse", "HEAD")


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, **GIT, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p)}


def _pytest(folder: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=folder, capture_output=True, text=True, env=_env())  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _bisect(folder: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_lossless", "bisect", *map(str, args)],
                          cwd=folder, capture_output=True, text=True, env=_env())  # fmt: skip


def _midpoint(scratch: Path, commits: int) -> int:
    """Which commit git bisect tries first on a straight history of ``commits`` commits: it
    depends on the shape of the history only, so an empty one of the same length tells."""
    scratch.mkdir()
    _git(scratch, "init", "-q", "-b", "main")
    shas = [_commit(scratch, f"c{i}", {}) for i in range(commits)]
    return shas.index(_git(scratch, "rev-list", "--bisect", shas[-1], f"^{shas[0]}"))


def _project(root: Path) -> None:
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("lossless-receipts/\n__pycache__/\n")
    (root / "pytest.ini").write_text("[pytest]\nlossless_receipts = lossless-receipts\n")
    (root / "model.py").write_text(MODEL.format(edits=""))
    (root / "test_audio.py").write_text(AUDIO_TEST)
    (root / "notes.txt").write_text("0\n")


@pytest.mark.deep
def test_bisect_finds_the_commit_that_changed_one_sample_and_skips_a_flaky_one(tmp_path):
    """About 20 commits: c0 (GOOD, goldens made), the one that changes audio sample 1234, and
    before it one whose control does not repeat (tested first: git's midpoint): INCONCLUSIVE,
    skipped, never blamed. Near the end someone regenerated the goldens with the changed
    output: the bisect still compares with GOOD's goldens, so BAD stays bad."""
    count = 20
    flaky = _midpoint(tmp_path / "shape", count)
    changed = flaky + 3
    assert flaky >= 1
    assert changed < count - 2
    root = tmp_path / "project"
    _project(root)
    _pytest(root, "--update-goldens")
    shas = [_commit(root, "c0: the model and its goldens", {})]
    for i in range(1, count):
        files = {"notes.txt": f"{i}\n"}
        subject = f"c{i}: notes"
        if i == flaky:
            files["model.py"] = MODEL.format(edits=FLAKY)
            subject = f"c{i}: reuse the output buffer"
        elif i == flaky + 1:
            files["model.py"] = MODEL.format(edits="")
            subject = f"c{i}: clear the output buffer again"
        elif i == changed:
            files["model.py"] = MODEL.format(edits=ONE_SAMPLE)
            subject = f"c{i}: faster rounding"
        if i == count - 2:
            (root / "model.py").write_text(MODEL.format(edits=ONE_SAMPLE))
            _pytest(root, "--update-goldens")  # the goldens now bless the changed output
            subject = f"c{i}: regenerate goldens"
        shas.append(_commit(root, subject, files))
    goldens = {p: p.read_bytes() for p in sorted((root / "goldens").rglob("*")) if p.is_file()}
    out = tmp_path / "bisect-out"

    done = _bisect(root, shas[0], "HEAD", "--out", out, "--", "test_audio.py")

    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert f"first bad commit: {shas[changed]} c{changed}: faster rounding" in done.stdout
    assert "audio.wav" in done.stdout
    assert "first differing sample" in done.stdout
    receipts = Path(done.stdout.split("receipts: ")[1].splitlines()[0])
    assert receipts.is_dir()
    assert receipts.is_relative_to(out)
    (receipt,) = receipts.glob("*/test_audio.py__test_audio.json")
    assert json.loads(receipt.read_text())["verdicts"]["overall"] == "FAIL"
    log = json.loads((out / "bisect.json").read_text())
    steps = {s["commit"]: s for s in log["steps"]}
    assert steps[shas[0]]["verdict"] == "PASS"
    assert steps[shas[-1]]["verdict"] == "FAIL"
    assert steps[shas[flaky]]["verdict"] == "INCONCLUSIVE"
    assert steps[shas[flaky]]["mark"] == "skip"
    assert steps[shas[flaky]]["git_bisect_run_exit"] == 125
    assert "not repeatable" in steps[shas[flaky]]["reason"]
    assert steps[shas[changed]]["mark"] == "bad"
    assert steps[shas[changed - 1]]["mark"] == "good"
    assert all(s["seconds"] > 0 for s in log["steps"])
    printed = (out / "bisect.log").read_text()
    for step in log["steps"]:
        assert f"{step['commit'][:12]} {step['mark']}" in printed  # each step, skips too
    assert f"{shas[flaky][:12]} skip INCONCLUSIVE" in done.stdout
    # The user's checkout, goldens and git state are as they were.
    assert _git(root, "status", "--porcelain") == ""
    assert _git(root, "rev-parse", "HEAD") == shas[-1]
    assert _git(root, "for-each-ref", "refs/bisect") == ""
    assert len(_git(root, "worktree", "list").splitlines()) == 1
    assert not (root / ".git" / "BISECT_LOG").exists()
    assert goldens == {p: p.read_bytes() for p in goldens}


@pytest.mark.deep  # 28-51 s on the shared 2-core machine: three pytest runs, eight bisects
def test_bisect_refuses_what_it_cannot_judge(tmp_path):
    """A dirty tree, GOOD not an ancestor of BAD, an unknown revision, and a selection that
    runs no lossless gate at GOOD: exit 2, a message naming the fix, nothing left behind."""
    root = tmp_path / "project"
    _project(root)
    _pytest(root, "--update-goldens")
    good = _commit(root, "c0", {})
    bad = _commit(root, "c1", {"model.py": MODEL.format(edits=ONE_SAMPLE)})

    (root / "notes.txt").write_text("edited\n")
    done = _bisect(root, good, bad, "--", "test_audio.py")
    assert done.returncode == 2, done.stderr
    assert "uncommitted changes" in done.stderr
    _git(root, "checkout", "notes.txt")

    done = _bisect(root, bad, good, "--", "test_audio.py")
    assert done.returncode == 2, done.stderr
    assert "is not an ancestor of BAD" in done.stderr
    done = _bisect(root, good, "no-such-branch")
    assert done.returncode == 2
    assert "'no-such-branch' is not a commit" in done.stderr
    done = _bisect(root, good)
    assert done.returncode == 2
    assert "usage:" in done.stderr
    done = _bisect(root, good, bad, "--build", "'unclosed", "--", "test_audio.py")
    assert done.returncode == 2
    assert "--build" in done.stderr

    out = tmp_path / "out"
    done = _bisect(root, good, bad, "--out", out, "--", "test_audio.py::test_plain")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "runs no lossless gate at GOOD" in done.stderr
    assert (out / "steps").is_dir()  # the step that showed it is kept
    assert _git(root, "status", "--porcelain") == ""
    assert len(_git(root, "worktree", "list").splitlines()) == 1


ENGINE_RENDER = """
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

gain = int((Path(__file__).parent / "gain.txt").read_text())
samples = (np.sin(np.arange(2400) / 7) * gain).astype(np.int16)
{edit}sf.write(sys.argv[1], samples, 24000, subtype="PCM_16")
"""
ENGINE_BUILD = """
from pathlib import Path
{fail}(Path(__file__).parent / "gain.txt").write_text("9000")
"""
ENGINE_TEST = """
import os
import sys
from pathlib import Path

import pytest

ENGINE = Path(os.environ.get("PYTEST_LOSSLESS_BISECT_SOURCES", Path(__file__).parent / "engine"))


@pytest.mark.lossless
def test_engine(golden, model_run):
    def run():
        return model_run([sys.executable, str(ENGINE / "render.py"), "{out}/audio.wav"],
                         outputs={"audio.wav": "audio.wav"}, sources=[str(ENGINE)])
    golden.check_all(run)
"""


@pytest.mark.deep
def test_bisect_sources_builds_each_engine_commit_and_skips_a_broken_build(tmp_path):
    """--sources bisects the engine repository while the tests stay at their HEAD; --build runs
    at each step. The build is broken just before the commit that changes a sample, so git
    cannot tell which of the two changed it: exit 1, both named, the skip's reason given."""
    engine = tmp_path / "engine"
    engine.mkdir()
    _git(engine, "init", "-q", "-b", "main")
    (engine / ".gitignore").write_text("gain.txt\n")
    render = ENGINE_RENDER.format(edit="")
    e = [_commit(engine, "e0", {"render.py": render, "build.py": ENGINE_BUILD.format(fail="")})]
    e.append(_commit(engine, "e1: docs", {"README": "engine\n"}))
    e.append(_commit(engine, "e2: new build", {"build.py": ENGINE_BUILD.format(fail="1 / 0\n")}))
    e.append(
        _commit(
            engine,
            "e3: fix build, faster kernel",
            {
                "build.py": ENGINE_BUILD.format(fail=""),
                "render.py": ENGINE_RENDER.format(edit="samples[7] -= 1\n"),
            },
        )
    )
    e.append(_commit(engine, "e4: docs", {"README": "engine 2\n"}))
    tests = tmp_path / "tests"
    tests.mkdir()
    _git(tests, "init", "-q", "-b", "main")
    (tests / ".gitignore").write_text("lossless-receipts/\n__pycache__/\n")
    (tests / "pytest.ini").write_text("[pytest]\nlossless_backend = cpu\n")
    (tests / "test_engine.py").write_text(ENGINE_TEST)
    _git(engine, "checkout", "-q", e[0])
    subprocess.run([sys.executable, "build.py"], cwd=engine, check=True)
    env = {**_env(), "PYTEST_LOSSLESS_BISECT_SOURCES": str(engine)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--update-goldens"], cwd=tests,
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    tests_head = _commit(tests, "tests and goldens", {})
    _git(engine, "checkout", "-q", "main")
    out = tmp_path / "out"

    done = _bisect(
        tests, e[0], e[-1], "--sources", engine, "--build", f"{sys.executable} build.py",
        "--out", out, "--", "-p", "no:cacheprovider",
    )  # fmt: skip

    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "no first bad commit: only skipped commits are left" in done.stdout
    assert f"  {e[2]} e2: new build  [BUILD FAILED: --build exited 1" in done.stdout
    assert f"  {e[3]} e3: fix build, faster kernel" in done.stdout
    steps = {s["commit"]: s for s in json.loads((out / "bisect.json").read_text())["steps"]}
    assert steps[e[0]]["verdict"] == "PASS"
    assert steps[e[-1]]["verdict"] == "FAIL"
    assert steps[e[3]]["verdict"] == "FAIL"
    assert steps[e[2]]["mark"] == "skip"
    assert (Path(steps[e[2]]["receipts"]).parent / "build.log").read_text().count("ZeroDivision")
    receipt = next(Path(steps[e[3]]["receipts"]).glob("*/test_engine.py__test_engine.json"))
    runs = json.loads(receipt.read_text())["runs"]
    (run,) = {source["revision"] for r in runs for source in r["sources"].values()}
    assert run == e[3]  # the run saw the engine's step commit, through the variable
    assert _git(tests, "rev-parse", "HEAD") == tests_head
    assert _git(engine, "status", "--porcelain") == ""
    assert _git(engine, "branch", "--show-current") == "main"
    assert len(_git(engine, "worktree", "list").splitlines()) == 1
