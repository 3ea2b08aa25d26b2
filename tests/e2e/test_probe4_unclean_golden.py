"""End to end, from outside (#20): a golden gate in a test not marked ``lossless`` (the README's
first example: goldens compare without the marker) whose run was killed by SIGTERM after writing
its output (``check=False``). ``--update-goldens`` wrote the golden from that run, and comparing
said PASS in the table, passed in pytest and JUnit and exited 0, while the receipt's raw record
said SIGTERM (overall FAIL). An unclean run is never a pass, whatever ``check`` says: the rule
held for tests marked ``lossless`` only; now for every test that checked a gate."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import os
import sys

KILL = "os.kill(os.getpid(), signal.SIGTERM)" if os.environ.get("PROBE_KILL") else "pass"
CODE = ("import numpy as np, os, signal, sys; "
        "np.save(sys.argv[1] + '/o.npy', np.arange(3)); " + KILL)

def test_golden_of_a_signalled_run(model_run, golden):
    golden.check_all(lambda: model_run([sys.executable, "-c", CODE, "{out}"],
                                       outputs={"o.npy": "{out}/o.npy"}, check=False))

def test_no_gate_only_asserts_the_record(model_run):
    result = model_run([sys.executable, "-c", CODE, "{out}"], check=False)
    assert result.returncode == (-15 if os.environ.get("PROBE_KILL") else 0)
"""


def test_an_unclean_run_behind_an_unmarked_golden_is_never_a_pass(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_unmarked=PROJECT)
    golden = pytester.path / "goldens" / "test_unmarked" / "test_golden_of_a_signalled_run"
    monkeypatch.setenv("PROBE_KILL", "1")
    made = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-goldens")
    # No golden comes from a run killed by a signal; a test with no gate may still assert it.
    made.assert_outcomes(failed=1, passed=1)
    made.stdout.fnmatch_lines(["*gate whose runs did not all end cleanly*SIGTERM*"])
    assert not (golden / "manifest.json").exists()
    monkeypatch.delenv("PROBE_KILL")
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-goldens").assert_outcomes(
        passed=2
    )
    monkeypatch.setenv("PROBE_KILL", "1")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml=junit.xml")
    result.assert_outcomes(failed=1, passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*gate whose runs did not all end cleanly*SIGTERM*"])
    failed = [
        case.get("name")
        for case in ET.parse(pytester.path / "junit.xml").iter("testcase")
        if case.find("failure") is not None
    ]
    assert failed == ["test_golden_of_a_signalled_run"]
