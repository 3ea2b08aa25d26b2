"""End to end: a kind that lives in a project module, through pytest and then ``verify``, and
the receipt's outcome of a lossless test that compares nothing, whatever the hooks are called."""

from __future__ import annotations

import json
import re
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
    # Two sessions, one receipt each: --update-goldens leaves one too (its updates block).
    assert "2 of 2 receipts consistent" in done.stdout
    assert re.search(
        r"^OK \S+test_csv\.json: test_csv\.py::test_csv: 0 runs, verdict PASS$", done.stdout, re.M
    ), done.stdout
    # Without the module, the csv gate cannot be re-derived: -p is what made it consistent.
    bare = _verify(pytester.path, "lossless-receipts")
    assert bare.returncode == 1
    assert "no plugin compares artifacts of kind 'csv'" in bare.stdout
    assert "1 of 2 receipts consistent" in bare.stdout  # the updates-only receipt has no gate
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


#: A kind written as one module of a project, against the Kind interface alone.
TEXT_KIND_MODULE = """
from pathlib import Path

import numpy as np

from pytest_lossless.gates import GateResult
from pytest_lossless.kinds import Kind
from pytest_lossless.kinds.bytes import fingerprint_bytes
from pytest_lossless.media.frames import write_png


class TextKind(Kind):
    name = "text"
    default_gate = "decoded"
    gates = ("bytes", "decoded")

    def detect(self, path, head):
        return path.suffix == ".txt"

    def fingerprint(self, path):
        return {**fingerprint_bytes(path), "lines": path.read_text().splitlines()}

    def compare(self, gate, expected, obtained):
        if gate.name == "bytes":
            return super().compare(gate, expected, obtained)
        a, b = expected.fingerprint["lines"], obtained.fingerprint["lines"]
        result = GateResult(expected.name, self.name, gate.spec, True, a == b, unit="line")
        differ = [i for i in range(max(len(a), len(b))) if a[i:i + 1] != b[i:i + 1]]
        result.mismatch_count, result.total = len(differ), len(a)
        if differ:
            result.first_mismatch = f"line {differ[0]}"
            result.location = {"line": differ[0]}
        return result

    def perturb(self, gate, path, out):
        lines = path.read_text().splitlines()
        lines[len(lines) // 2] += "!"
        out.write_text("\\n".join(lines))
        return f"line {len(lines) // 2}"

    def pictures(self, result, expected, obtained, folder):
        folder.mkdir(parents=True, exist_ok=True)
        picture = np.zeros((8, 8, 3), dtype=np.uint8)
        picture[result.location.get("line", 0) % 8] = 255
        return [str(write_png(folder / f"{expected.name}.lines.png", picture))]


def pytest_lossless_kinds():
    return [TextKind()]
"""


def test_a_kind_in_one_module_gets_detection_gate_canary_picture_and_verify(
    pytester: pytest.Pytester,
) -> None:
    """The house issue's done-test: a new kind in one module of a test project, nothing else."""
    pytester.makepyfile(textkind=TEXT_KIND_MODULE)
    pytester.syspathinsert()
    note = pytester.path / "note.txt"
    note.write_text("alpha\nbeta\ngamma\n")
    pytester.makepyfile(
        test_text="""
import pytest
from pathlib import Path

@pytest.mark.lossless
def test_note(golden):
    golden.check("note.txt", Path(__file__).parent / "note.txt")
"""
    )
    assert pytester.runpytest("-p", "textkind", "--update-goldens").ret == 0
    manifest = json.loads((pytester.path / "goldens/test_text/test_note/manifest.json").read_text())
    entry = manifest["artifacts"]["note.txt"]
    assert (entry["kind"], entry["gate"]) == ("text", "decoded")

    passed = pytester.runpytest("-p", "textkind", "--lossless")
    assert passed.ret == 0
    passed.stdout.fnmatch_lines(["*canary*text/decoded: FAIL as required*line 1*"])
    done = _verify(pytester.path, "lossless-receipts", "-p", "textkind")
    assert done.returncode == 0, done.stdout + done.stderr

    note.write_text("alpha\nBETA\ngamma\n")
    failed = pytester.runpytest("-p", "textkind", "--lossless")
    assert failed.ret == 1
    failed.stdout.fnmatch_lines(["*first differing line: line 1*", "*note.txt.lines.png*"])
    index = max((pytester.path / "lossless-receipts").rglob("report/index.html"))
    page = index.read_text()
    assert "note.txt: note.txt.lines.png" in page  # the kind's picture, shown as a figure
    figure = re.search(r'<img src="([^"]+)"[^>]*alt="note.txt: note.txt.lines.png"', page)
    assert figure is not None
    assert (index.parent / figure[1]).read_bytes().startswith(b"\x89PNG")
    receipts = sorted((pytester.path / "lossless-receipts").rglob("*__*.json"))
    last = json.loads(receipts[-1].read_text())
    assert [c["status"] for c in last["canary"]] == ["proved"]
    rederived = _verify(pytester.path, "lossless-receipts", "-p", "textkind")
    assert rederived.returncode == 0, rederived.stdout + rederived.stderr
    bare = _verify(pytester.path, "lossless-receipts")
    assert bare.returncode == 1
    assert "no plugin compares artifacts of kind 'text'" in bare.stdout


MODULE_COUNT_TEST = """
import sys

import pytest

SEEN = set()


def _profile(frame, event, arg):
    if event == "call":
        name = frame.f_globals.get("__name__", "")
        if name.startswith("pytest_lossless"):
            SEEN.add(name)


@pytest.mark.lossless
def test_bytes(golden, tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"abc" * 10)
    sys.setprofile(_profile)
    try:
        golden.check("a.bin", path)
    finally:
        sys.setprofile(None)
    print("MODULES", " ".join(sorted(SEEN)))
"""

#: Modules of pytest_lossless whose code runs during one golden.check of a bytes artifact,
#: canary included: 34 before the kinds room, 33 after it, 28 once detection skips the kinds
#: whose signatures rule a file out (#21), 30 once the fault points and the receipt's
#: redactor joined every check, 19 once a check only compares and records (its row, receipt
#: entry and export are made from the records at the test's report; a check given no expect=
#: asks no coverage; an entry's scope is checked with the manifest). A ratchet: lower it as
#: the rooms get leaner (the house issue's goal is about 15); the kinds' own share (kinds,
#: media, gates) separately: 10, then 7 once the gate and its result are one module
#: (gates.gate), the head of a file is read where artifact files are (media.artifacts, not
#: detection), the session's fingerprint cache is the registry's and the bytes fingerprint the
#: bytes kind's; 16 with both; 17 once the manifest's entries are read by the one serialiser
#: of the records (core.records, #19) instead of a hand-written reader in goldens.manifest;
#: 18 once a check reads the golden's frozen plan with its version (goldens.plans: a reader
#: sees goldens, manifest and plan.json of one version, #20); 17 once the digests are one
#: module (media.hashing merged into core.digests), 16 once an artifact and its file are
#: (media.artifacts merged into core.artifact); the kinds' own share 5 with both.
MODULES_AT_MOST = 16
KIND_MODULES_AT_MOST = 5


def test_one_bytes_golden_check_runs_few_modules(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_count=MODULE_COUNT_TEST)
    assert pytester.runpytest_subprocess("--update-goldens").ret == 0
    result = pytester.runpytest_subprocess("--lossless", "-s")
    assert result.ret == 0
    line = next(x for x in result.stdout.lines if "MODULES " in x)
    modules = line.split("MODULES ", 1)[1].split()
    assert "pytest_lossless.kinds.canary" in modules  # the canary ran inside the check
    assert not any(m.startswith("pytest_lossless.compare.") and "canary" in m for m in modules)
    assert len(modules) <= MODULES_AT_MOST, modules
    # The table row, the receipt and the export are made at the test's report, not in a check.
    for later in ("report.", "evidence.", "plugin.outcomes", "plugin.export", "plugin.evidence"):
        assert not any(m.startswith(f"pytest_lossless.{later}") for m in modules), modules
    own = [m for m in modules if m.split(".")[1] in ("kinds", "media", "gates")]
    assert len(own) <= KIND_MODULES_AT_MOST, own
    assert "numpy" not in " ".join(modules)
