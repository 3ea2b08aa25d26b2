"""End to end: ``lossless.compare`` verdicts as pytest outcomes, in the terminal and JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

VERDICTS = """
import itertools
import numpy as np
import pytest

def repeatable():
    return {"latent.npy": np.arange(12, dtype=np.float32), "log.txt": b"done"}

def different():
    out = repeatable()
    out["latent.npy"][7] = np.nextafter(out["latent.npy"][7], np.float32(100))
    return out

COUNTER = itertools.count()

def flaky():
    out = repeatable()
    out["latent.npy"][3] += next(COUNTER)
    return out

@pytest.mark.lossless
def test_pass(lossless):
    verdict = lossless.compare(repeatable, repeatable)
    assert verdict.verdict == "PASS"

@pytest.mark.lossless
def test_fail(lossless):
    lossless.compare(repeatable, different)

@pytest.mark.lossless
def test_inconclusive(lossless):
    lossless.compare(flaky, repeatable, runs=3)

@pytest.mark.lossless
def test_observed_only(lossless):
    verdict = lossless.compare(flaky, repeatable, act=False)
    assert verdict.verdict == "INCONCLUSIVE"
    assert "latent.npy" in verdict.message()
"""


@pytest.fixture
def verdict_project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_verdicts=VERDICTS)
    return pytester


def test_each_row_of_the_table(verdict_project):
    result = verdict_project.runpytest("--lossless", "-v", "--junitxml=junit.xml")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*test_pass PASSED*",
            "*test_fail FAILED*",
            "*test_inconclusive INCONCLUSIVE*",
            "*test_observed_only PASSED*",
        ]
    )
    text = result.stdout.str()
    assert "1 inconclusive" in text
    assert "the candidate differs" in text
    assert "first differing element: [7]" in text
    assert "the control is not repeatable" in text
    result.stdout.fnmatch_lines(["*gates and verdicts*"])


def test_junit_xml_tells_inconclusive_apart(verdict_project):
    verdict_project.runpytest("--lossless", "--junitxml=junit.xml")
    tree = ET.parse(verdict_project.path / "junit.xml")
    cases = {case.get("name"): case for case in tree.iter("testcase")}
    inconclusive = cases["test_inconclusive"]
    failure = inconclusive.find("failure")
    assert failure is not None
    assert (failure.get("message") or "").startswith("INCONCLUSIVE")
    properties = {p.get("name"): p.get("value") for p in inconclusive.iter("property")}
    assert properties["lossless_verdict"] == "INCONCLUSIVE"
    plain_failure = cases["test_fail"].find("failure")
    assert plain_failure is not None
    assert not (plain_failure.get("message") or "").startswith("INCONCLUSIVE")
    assert cases["test_pass"].find("failure") is None


def test_the_session_fails_on_inconclusive_alone(pytester):
    pytester.makepyfile(
        test_one=VERDICTS.replace("def test_fail", "def _fail").replace(
            "def test_observed_only", "def _observed"
        )
    )
    result = pytester.runpytest("--lossless", "-k", "inconclusive")
    result.assert_outcomes(deselected=1)  # 1 inconclusive is not a pass
    assert result.ret == 1


def _doctor(path, edit):
    """Edit a receipt and re-seal its integrity hash, so only re-derivation can catch it."""
    import json

    from pytest_lossless.evidence.receipts import raw_sha256

    receipt = json.loads(path.read_text())
    edit(receipt)
    receipt["integrity"]["raw_sha256"] = raw_sha256(receipt)
    path.write_text(json.dumps(receipt))


def test_verify_rederives_lossless_and_gate_verdicts(pytester, verdict_project):
    import subprocess
    import sys

    pytester.makepyfile(
        test_gold="""
import numpy as np
import pytest

@pytest.mark.lossless
def test_gold(golden):
    golden.check("t.npy", np.arange(5, dtype=np.int16))
"""
    )
    assert pytester.runpytest("--update-goldens", "-k", "gold").ret == 0
    pytester.runpytest("--lossless", "--lossless-receipts=receipts")
    folder = pytester.path / "receipts"

    def verify():
        return subprocess.run(
            [sys.executable, "-m", "pytest_lossless", "verify", str(folder)],
            capture_output=True,
            text=True,
        )

    assert verify().returncode == 0, verify().stdout
    assert "| test_gold.py::test_gold | passed |" in (folder / "SUMMARY.md").read_text()
    fail_receipt = max(folder.rglob("*test_fail*.json"))

    def flip_candidate(receipt):
        for result in receipt["lossless"][0]["candidate_comparison"]["results"]:
            result["passed"] = True
        receipt["lossless"][0]["verdict"] = "PASS"

    _doctor(fail_receipt, flip_candidate)
    checked = verify()
    assert checked.returncode == 1
    assert "the fingerprints give False" in checked.stdout

    gold_receipt = max(folder.rglob("*test_gold*.json"))

    def other_obtained(receipt):
        fingerprint = receipt["gates"][0]["evidence"]["obtained"]["fingerprint"]
        fingerprint["data_sha256"] = "0" * 64
        fingerprint["chunk_sha256"] = ["0" * 64]

    _doctor(gold_receipt, other_obtained)
    checked = verify()
    assert "its fingerprints give passed=False" in checked.stdout


def test_a_session_in_which_no_gate_ran_says_so(pytester):
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*no gate compared anything: --lossless was given*"])


def test_a_session_whose_every_gate_was_skipped_fails(pytester):
    pytester.makepyfile(
        test_device="""
import numpy as np
import pytest

@pytest.mark.npu
@pytest.mark.lossless
def test_needs_a_device(golden):
    golden.check("a.npy", np.zeros(2))
"""
    )
    # the npu backend on a machine with no npu-smi: the gate is skipped, and that is no pass
    result = pytester.runpytest("--lossless", "--lossless-backend=npu")
    result.assert_outcomes(skipped=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*every selected lossless gate was skipped*", "1 lossless gate skipped: *npu-smi*"]
    )


def test_skips_outside_lossless_gates_do_not_fail_the_session(pytester):
    pytester.mkpydir("lossless")  # a folder named like the marker is no gate
    pytester.path.joinpath("lossless", "test_paths.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.skip(reason='windows only')\n"
        "def test_windows():\n    pass\n\n"
        "@pytest.mark.lossless\n@pytest.mark.xfail(reason='known')\n"
        "def test_known(golden):\n    golden.check('t', b'x')\n"
    )
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(skipped=1, xfailed=1)
    assert result.ret == 0
    assert "lossless gate skipped" not in result.stdout.str()
