"""End to end: a kind that lives in a project module, through pytest and then ``verify``, and
the receipt's outcome of a lossless test that compares nothing, whatever the hooks are called."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_golden import CUSTOM_KIND_CONFTEST

pytestmark = pytest.mark.slow


def _verify(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_kind_in_a_project_module_passes_pytest_and_verify_with_p(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(csvkind=CUSTOM_KIND_CONFTEST)
    pytester.syspathinsert()
    (pytester.path / "t.csv").write_text("a,b\n1,2\n3,4\n")
    pytester.makepyfile(
        test_csv="""
import pytest
from pathlib import Path

@pytest.mark.lossless
def test_csv(golden):
    golden.check("t.csv", Path(__file__).parent / "t.csv")
"""
    )
    assert pytester.runpytest("-p", "csvkind", "--update-goldens").ret == 0
    manifest = json.loads((pytester.path / "goldens/test_csv/test_csv/manifest.json").read_text())
    assert manifest["artifacts"]["t.csv"]["kind"] == "csv"
    assert pytester.runpytest("-p", "csvkind", "--lossless").ret == 0

    done = _verify(pytester.path, "lossless-receipts", "-p", "csvkind")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of 1 receipts consistent" in done.stdout
    # Without the module, the csv gate cannot be re-derived: -p is what made it consistent.
    bare = _verify(pytester.path, "lossless-receipts")
    assert bare.returncode == 1
    assert "no plugin compares artifacts of kind 'csv'" in bare.stdout
    # A module that cannot be imported is a usage error naming it, not a traceback.
    missing = _verify(pytester.path, "lossless-receipts", "-p", "no_such_kind_module")
    assert missing.returncode == 2
    assert "-p no_such_kind_module: the plugin module cannot be imported" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_lossless_test_that_compares_nothing_has_outcome_failed_in_its_receipt(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_nothing="""
import sys
import pytest

@pytest.mark.lossless
def test_runs_but_compares_nothing(model_run):
    model_run([sys.executable, "-c", "pass"])
"""
    )
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*marked lossless but compared nothing*"])
    receipt = json.loads(max((pytester.path / "lossless-receipts").rglob("*__*.json")).read_text())
    assert receipt["outcome"] == {"setup": "passed", "call": "failed", "teardown": "passed"}


def test_the_receipt_outcome_does_not_depend_on_hook_names_or_registration_order() -> None:
    """One makereport wrapper decides the outcome and then records it: no second wrapper whose
    place in the call order could make the receipt see the outcome before it was decided."""
    from pytest_lossless.plugin import evidence as receipts
    from pytest_lossless.plugin import outcomes

    wrappers = [
        name
        for module in (outcomes, receipts)
        for name, value in vars(module).items()
        if callable(value)
        and getattr(value, "pytest_impl", None) is not None
        and (value.pytest_impl.get("specname") or name) == "pytest_runtest_makereport"
    ]
    assert wrappers == ["pytest_runtest_makereport"]
    assert not hasattr(receipts, "pytest_runtest_makereport")
