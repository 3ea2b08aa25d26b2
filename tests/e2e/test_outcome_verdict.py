"""End to end (#20, Evidence): the test's own pytest outcome is part of its overall verdict,
always. A test whose gates passed but which then failed (an assertion after the gate, a
pytest-timeout) is never PASS: not in the terminal table, its receipt, ``verify``, SUMMARY.md,
the HTML report or JUnit."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

AFTER_GATE = """
import time
import numpy as np
import pytest

@pytest.mark.lossless
def test_assert_after(golden):
    golden.check("t.npy", np.arange(4, dtype=np.float32))
    assert 1 == 2, "the test's own check after the gate"

@pytest.mark.lossless
def test_timeout_after(golden):
    golden.check("t.npy", np.arange(4, dtype=np.float32))
    time.sleep(30)

@pytest.mark.lossless
def test_ok(golden):
    golden.check("t.npy", np.arange(4, dtype=np.float32))
"""


def _receipt(folder, name):
    return json.loads(max(folder.rglob(f"*{name}*.json")).read_text())


def _verify(folder):
    return subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_test_that_failed_after_its_gates_passed_is_never_pass(pytester):
    pytester.makepyfile(test_after=AFTER_GATE)
    assert pytester.runpytest_subprocess("--update-goldens", "-k", "ok").ret == 0
    for name in ("test_assert_after", "test_timeout_after"):
        target = pytester.path / "goldens/test_after" / name
        target.mkdir(parents=True)
        for file in (pytester.path / "goldens/test_after/test_ok").iterdir():
            (target / file.name).write_bytes(file.read_bytes())
    result = pytester.runpytest_subprocess(
        "--lossless", "-p", "timeout", "--timeout=3", "--junitxml=junit.xml"
    )
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    table = out[out.index("gates and verdicts") :]
    # The table: each failed test has a row of its own outcome, and the count says FAIL.
    result.stdout.fnmatch_lines_random(
        [
            "FAIL *test_assert_after*test outcome*",
            "FAIL *test_timeout_after*test outcome*",
        ]
    )
    assert "2 FAIL" in table
    receipts = pytester.path / "lossless-receipts"
    for name in ("test_assert_after", "test_timeout_after"):
        receipt = _receipt(receipts, name)
        assert receipt["outcome"]["call"] == "failed"
        assert receipt["verdicts"]["overall"] == "FAIL", name
        assert receipt["verdicts"]["test"] == "FAIL"
    assert _receipt(receipts, "test_ok")["verdicts"]["overall"] == "PASS"
    summary = max(receipts.glob("*/SUMMARY.md")).read_text()
    assert "3 receipts: 2 FAIL, 1 PASS" in summary
    # verify re-derives the same overall verdict and agrees with the files.
    verified = _verify(receipts)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # Forging the overall back to PASS is a contradiction verify names.
    path = max(receipts.rglob("*test_assert_after*.json"))
    forged = json.loads(path.read_text())
    forged["verdicts"]["overall"] = "PASS"
    path.write_text(json.dumps(forged))
    again = _verify(receipts)
    assert again.returncode != 0
    assert "verdicts.overall: recorded 'PASS' but the raw blocks give 'FAIL'" in again.stdout
    # The HTML report and JUnit say FAIL too.
    page = max(receipts.glob("*/report/index.html")).read_text()
    assert "test outcome" in page
    assert "2 FAIL" in page
    properties = {
        (case.get("name"), prop.get("value"))
        for case in ET.parse(pytester.path / "junit.xml").iter("testcase")
        for prop in case.iter("property")
        if prop.get("name") == "lossless_verdict"
    }
    assert ("test_assert_after", "FAIL") in properties
    assert ("test_ok", "PASS") in properties


DISK_FULL = """
import errno
import pytest_lossless.evidence.receipts as receipts

def _full(path, data, *args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", str(path))

receipts.write_atomic = _full  # every receipt write meets a full disk
"""


def test_a_session_whose_receipts_were_not_written_never_reports_pass(pytester):
    pytester.makepyfile(test_after=AFTER_GATE)
    assert pytester.runpytest_subprocess("--update-goldens", "-k", "ok").ret == 0
    pytester.makeconftest(DISK_FULL)
    result = pytester.runpytest_subprocess("--lossless", "-k", "ok")
    assert result.ret != 0
    out = result.stdout.str()
    assert "the receipt of test_after.py::test_ok was not written" in out
    table = out[out.index("gates and verdicts") :]
    result.stdout.fnmatch_lines(
        ["FAIL *test_ok*test outcome*", "*teardown failed: pytest-lossless: the receipt of*"]
    )
    assert "1 FAIL" in table
    assert "1 test wrote no receipt: test_after.py::test_ok" in table
    page = max((pytester.path / "lossless-receipts").glob("*/report/index.html")).read_text()
    assert "1 FAIL" in page
    assert "1 test wrote no receipt" in page
    index = json.loads(max((pytester.path / "lossless-receipts").glob("*/INDEX.json")).read_text())
    (entry,) = [t for t in index["tests"] if t["test_id"] == "test_after.py::test_ok"]
    assert entry["outcome"] == "failed"
    assert entry["receipt"] is None


INTERRUPTED = """
import numpy as np
import pytest

@pytest.mark.lossless
def test_stopped(golden):
    golden.check("t.npy", np.arange(4, dtype=np.float32))
    raise KeyboardInterrupt  # Ctrl-C after the gate passed
"""


def test_an_interrupted_test_is_indexed_and_recorded_as_interrupted(pytester):
    pytester.makepyfile(test_stop=INTERRUPTED.replace("raise KeyboardInterrupt", "pass"))
    assert pytester.runpytest_subprocess("--update-goldens").ret == 0
    pytester.makepyfile(test_stop=INTERRUPTED)
    result = pytester.runpytest_subprocess("--lossless")
    assert result.ret == 2
    folder = max((pytester.path / "lossless-receipts").glob("*/INDEX.json")).parent
    index = json.loads((folder / "INDEX.json").read_text())
    assert index["state"] == "interrupted"
    (entry,) = index["tests"]
    assert entry["outcome"] == "interrupted", entry
    # Its receipt is written at the session's end, and says so: never PASS.
    receipt = json.loads((folder / entry["receipt"]).read_text())
    assert receipt["outcome"]["call"] == "interrupted"
    assert receipt["verdicts"]["overall"] == "FAIL"
    assert "PASS" not in (folder / "SUMMARY.md").read_text().split("receipts:")[-1]


def test_collect_only_writes_no_session_and_claims_nothing(pytester):
    pytester.makepyfile(test_after=AFTER_GATE)
    result = pytester.runpytest_inprocess("--collect-only", "--lossless")
    assert result.ret == 0
    result.stdout.no_fnmatch_line("*no gate compared anything*")
    result.stdout.no_fnmatch_line("*every selected lossless gate was skipped*")
    assert not (pytester.path / "lossless-receipts").exists()


PRODUCER_FAILS = """
import pytest

def producer():
    raise RuntimeError("the model crashed")

@pytest.mark.lossless
def test_p(golden):
    golden.check("t.npy", producer)
"""


def test_a_producer_that_failed_is_named_not_a_missing_selection(pytester):
    pytester.makepyfile(test_p=PRODUCER_FAILS)
    result = pytester.runpytest_inprocess("--lossless")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "check -m and -k" not in out
    assert "no gate compared anything" not in out
    result.stdout.fnmatch_lines(
        ["ERROR *test_p*t.npy*", "*the producer failed: RuntimeError: the model crashed*"]
    )


GOLDEN_ONLY = """
import numpy as np
import pytest

@pytest.mark.lossless
def test_only_golden(golden):
    golden.check("t.npy", np.arange(4, dtype=np.float32))
"""


def test_update_goldens_leaves_a_receipt_for_golden_only_tests(pytester):
    pytester.makepyfile(test_g=GOLDEN_ONLY)
    result = pytester.runpytest_inprocess("--update-goldens")
    assert result.ret == 0
    folder = max((pytester.path / "lossless-receipts").glob("*/INDEX.json")).parent
    index = json.loads((folder / "INDEX.json").read_text())
    (entry,) = index["tests"]
    assert entry["receipt"], entry
    receipt = json.loads((folder / entry["receipt"]).read_text())
    assert receipt["test_id"] == "test_g.py::test_only_golden"
