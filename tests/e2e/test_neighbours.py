"""End to end (#20, Inputs and neighbours): pytest-lossless beside other plugins and the
mistakes of a command line."""

from __future__ import annotations

import json

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

GOLDEN_TEST = """
import numpy as np
import pytest

@pytest.mark.lossless
def test_g(golden):
    golden.check("t.npy", np.arange(4, dtype=np.float32))
"""

#: What pytest-golden does: its own --update-goldens.
OTHER_PLUGIN = """
def pytest_addoption(parser):
    parser.getgroup("golden").addoption(
        "--update-goldens", action="store_true", dest="other_update_goldens"
    )
"""


@pytest.mark.parametrize("where", ["plugin before ours", "conftest after ours"])
def test_beside_a_plugin_that_defines_update_goldens(pytester, where):
    pytester.makepyfile(test_g=GOLDEN_TEST)
    args: list[str] = []
    if where == "plugin before ours":
        pytester.makepyfile(othergolden=OTHER_PLUGIN)
        args = ["-p", "othergolden"]
    else:
        pytester.makeconftest(OTHER_PLUGIN)
    pytester.syspathinsert()
    # pytest starts, and our own name always works.
    result = pytester.runpytest_inprocess(*args, "--lossless-update-goldens")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert (pytester.path / "goldens/test_g/test_g/manifest.json").is_file()
    # --update-goldens is the other plugin's: it writes none of ours (the gate is skipped).
    result = pytester.runpytest_inprocess(*args, "--update-goldens", "--lossless")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*golden updates*")
    result.stdout.fnmatch_lines(
        [
            "lossless: --update-goldens belongs to another plugin here; "
            "ours is --lossless-update-goldens"
        ]
    )


def test_update_goldens_stays_where_it_is_free(pytester):
    pytester.makepyfile(test_g=GOLDEN_TEST)
    assert pytester.runpytest_inprocess("--update-goldens").ret == 0
    assert (pytester.path / "goldens/test_g/test_g/manifest.json").is_file()
    help_text = pytester.runpytest_inprocess("--help").stdout.str()
    assert "--lossless-update-goldens" in help_text
    assert "--update-goldens" in help_text


@pytest.mark.parametrize("option", ["--lossless-lock-dir", "--lossless-receipts"])
def test_an_option_value_after_a_space_that_became_the_rootdir_is_named(
    pytester, monkeypatch, option
):
    project = pytester.mkdir("project")
    (project / "pytest.ini").write_text("[pytest]\nlossless_goldens = my-goldens\n")
    (project / "test_g.py").write_text(GOLDEN_TEST)
    elsewhere = pytester.mkdir("elsewhere")
    monkeypatch.chdir(project)
    result = pytester.runpytest_inprocess(option, str(elsewhere), "--update-goldens")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*{option} {elsewhere}: pytest read*given after a space*Write {option}={elsewhere}*"]
    )
    assert not (pytester.path / "goldens").exists()  # nothing written outside the project
    # Written with "=", the project's ini is read and nothing is refused.
    result = pytester.runpytest_inprocess(f"{option}={elsewhere}", "--update-goldens")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert (project / "my-goldens/test_g/test_g/manifest.json").is_file()
    # The same space-separated value is fine where it does not move the rootdir (a test path
    # is given too, inside the project with its ini).
    result = pytester.runpytest_inprocess(option, str(elsewhere), "--update-goldens", "test_g.py")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()


FLAKY_GATE = """
import pathlib
import numpy as np
import pytest

@pytest.mark.lossless
def test_flaky(golden):
    seen = pathlib.Path("attempts")
    first = not seen.exists()
    seen.write_text("x")
    golden.check("t.npy", np.arange(4, dtype=np.float32) + (1 if first else 0))

def test_plain():
    seen = pathlib.Path("plain-attempts")
    first = not seen.exists()
    seen.write_text("x")
    assert not first  # fails once, then passes: --reruns still serves plain tests
"""


def test_reruns_never_turn_a_failed_gate_into_a_pass(pytester):
    pytester.makepyfile(test_f=FLAKY_GATE.replace("(1 if first else 0)", "0"))
    assert pytester.runpytest_inprocess("--update-goldens", "-k", "flaky").ret == 0
    pytester.makepyfile(test_f=FLAKY_GATE)
    (pytester.path / "attempts").unlink()
    result = pytester.runpytest_inprocess("--lossless", "--reruns", "2")
    # The gate ran once and failed: the exit status, the table and the receipt agree.
    assert result.ret == 1
    assert result.parseoutcomes() == {"failed": 1, "passed": 1, "rerun": 1}  # plain: rerun
    result.stdout.fnmatch_lines_random(
        ["*--reruns does not apply to lossless gates*1 gate test ran once*", "FAIL *test_flaky*"]
    )
    receipt = json.loads(
        max((pytester.path / "lossless-receipts").rglob("*test_flaky.json")).read_text()
    )
    assert receipt["verdicts"]["overall"] == "FAIL"
    assert len(receipt["gates"]) == 1


def test_a_lossless_gate_marked_flaky_is_refused(pytester):
    pytester.makepyfile(
        test_f=FLAKY_GATE.replace(
            "@pytest.mark.lossless", "@pytest.mark.lossless\n@pytest.mark.flaky(reruns=3)"
        )
    )
    result = pytester.runpytest_inprocess("--lossless")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*a lossless gate is never rerun*test_f.py::test_flaky: flaky(reruns=3)*"]
    )
