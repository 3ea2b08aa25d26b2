"""End to end: a test's verdict is the worst of its parts, in the terminal, the receipt,
SUMMARY.md and JUnit, and an unclean run is never a pass."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

PARTS = """
import sys
import numpy as np
import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest
from pytest_lossless import tolerance

@pytest.mark.lossless
def test_exit_3_unchecked(model_run, golden):
    model_run([sys.executable, "-c", "import sys; sys.exit(3)"], check=False)
    golden.check("t.npy", np.arange(4, dtype=np.float32))

@pytest.mark.lossless
def test_lossy(golden):
    golden.check("t.npy", np.arange(4, dtype=np.float32) + 1e-7, gate=tolerance(atol=1e-6))
"""


def _receipt(folder, name):
    return json.loads(max(folder.rglob(f"*{name}*.json")).read_text())


def test_an_unclean_run_is_never_pass_and_lossy_pass_is_its_own_value(pytester):
    pytester.makepyfile(test_parts=PARTS)
    exact = pytester.path / "goldens/test_parts/test_exit_3_unchecked"
    # The run exits 3: with check=False the test goes on, but no golden comes from it.
    assert pytester.runpytest("--update-goldens", "-k", "exit_3").ret == 1
    assert not (pytester.path / "goldens/test_parts/test_exit_3_unchecked").exists()
    # Write the goldens without the failing run, then judge both tests.
    pytester.makepyfile(
        test_seed="""
import numpy as np, pytest
@pytest.mark.lossless
def test_seed(golden):
    golden.check("t.npy", np.arange(4, dtype=np.float32))
"""
    )
    assert pytester.runpytest("--update-goldens", "-k", "seed").ret == 0
    seed = pytester.path / "goldens/test_seed/test_seed"
    exact.mkdir(parents=True)
    for file in seed.iterdir():
        (exact / file.name).write_bytes(file.read_bytes())
    assert pytester.runpytest("--update-goldens", "-k", "lossy").ret == 0
    result = pytester.runpytest("--lossless", "-k", "parts", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*a lossless gate whose runs did not all end cleanly is not a pass*exited with code 3*"]
    )
    result.stdout.fnmatch_lines_random(["LOSSY-PASS *test_lossy*t.npy*tolerance*"])
    receipts = pytester.path / "lossless-receipts"
    unclean = _receipt(receipts, "test_exit_3_unchecked")
    assert unclean["verdicts"]["lifecycle"]["clean"] is False
    assert unclean["verdicts"]["overall"] == "FAIL"
    assert unclean["outcome"]["call"] == "failed"
    lossy = _receipt(receipts, "test_lossy")
    assert lossy["verdicts"]["overall"] == "LOSSY-PASS"
    assert lossy["verdicts"]["gates"]["lossy_passed"] == 1
    summary = (receipts / "SUMMARY.md").read_text()
    assert "| LOSSY-PASS |" in summary
    properties = {
        (case.get("name"), prop.get("name"), prop.get("value"))
        for case in ET.parse(pytester.path / "junit.xml").iter("testcase")
        for prop in case.iter("property")
    }
    assert ("test_lossy", "lossless_verdict", "LOSSY-PASS") in properties
    assert ("test_exit_3_unchecked", "lossless_verdict", "FAIL") in properties
    done = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(receipts)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout
