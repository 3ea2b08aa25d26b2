"""End to end, from outside (#20): what a CI job's environment does. ``PYTEST_ADDOPTS`` is
where CI configurations put options; pytest puts its words before the command line's, and an
option value given after a space there became the rootdir just as on the command line: the
project's ini was ignored and goldens were written outside the project, with exit status 0."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

GOLDEN_TEST = """
import numpy as np

def test_g(golden):
    golden.check("o.npy", np.arange(3))
"""


def test_an_option_value_after_a_space_in_pytest_addopts_is_named(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = pytester.mkdir("project")
    (project / "pytest.ini").write_text("[pytest]\nlossless_goldens = my-goldens\n")
    (project / "test_g.py").write_text(GOLDEN_TEST)
    elsewhere = pytester.mkdir("elsewhere")
    monkeypatch.chdir(project)
    monkeypatch.setenv("PYTEST_ADDOPTS", f"--lossless-lock-dir {elsewhere}")
    result = pytester.runpytest_subprocess("--update-goldens")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*--lossless-lock-dir {elsewhere} (in PYTEST_ADDOPTS): pytest read*"
            f"given after a space*Write --lossless-lock-dir={elsewhere}*"
        ]
    )
    assert not (pytester.path / "goldens").exists()  # nothing written outside the project
    monkeypatch.setenv("PYTEST_ADDOPTS", f"--lossless-lock-dir={elsewhere}")
    result = pytester.runpytest_subprocess("--update-goldens")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert (project / "my-goldens/test_g/test_g/manifest.json").is_file()
