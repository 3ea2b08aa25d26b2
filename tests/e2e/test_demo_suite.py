"""End to end: the repository's own gate suite catches a one-line change to the demo model.

A copy of the repository (model, gate suite, goldens, configuration) runs in a scratch folder,
with one constant of the model's arithmetic changed, through `pytest -m npu --lossless`.
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo_copy(pytester: pytest.Pytester) -> Path:
    root = pytester.path
    for folder in ("fixtures", "goldens", "tests/gates"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "tests/__init__.py"):
        shutil.copy(REPO / name, root / name)
    return root


def _run(pytester: pytest.Pytester, root: Path, *args: str) -> pytest.RunResult:
    # Its own lock folder: this copy must not wait on, or hold, the real suite's devices.
    return pytester.runpytest_subprocess(
        "-m",
        "npu",
        "--lossless",
        f"--lossless-lock-dir={root / 'locks'}",
        "-p",
        "no:cacheprovider",
        *args,
    )


def test_one_changed_constant_fails_naming_the_first_frame(pytester, repo_copy):
    model = repo_copy / "fixtures" / "ref2va" / "model.py"
    source = model.read_text()
    assert "_RGB_GAIN = np.float32(0.45)" in source
    model.write_text(source.replace("_RGB_GAIN = np.float32(0.45)", "_RGB_GAIN = np.float32(0.46)"))
    result = _run(
        pytester, repo_copy, "-k", "test_cli_matches_goldens and not 15s", "--junitxml=junit.xml"
    )
    assert result.ret == 1
    text = result.stdout.str()
    assert "artifact 'clip.mp4' (video), gate decoded (lossless): FAIL" in text
    assert "first differing frame: 0" in text
    assert "gates and verdicts" in text
    case = next(ET.parse(repo_copy / "junit.xml").iter("testcase"))
    assert case.find("failure") is not None


def test_the_unchanged_copy_passes(pytester, repo_copy):
    result = _run(pytester, repo_copy, "-k", "test_cli_matches_goldens and not 15s")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*3 PASS*"])
