"""End to end: ``--lossless-export DIR`` and what a GitHub Actions job shows of a session.

The export holds the obtained artifacts of every failing or new check with ``export.json``;
under xdist the workers' entries reach it; a failing ``lossless.compare`` is exported for review
(and refused by accept: it has no golden). With ``GITHUB_STEP_SUMMARY`` set, the verdict table
is appended there as Markdown and each failing gate is an ``::error`` annotation on its test.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from pytest_lossless.__main__ import accept_command
from pytest_lossless.evidence.export_index import annotation, markdown_table

SUITE = """
import numpy as np
import pytest

VERSION = 1

def model():
    return {"latent.npy": np.arange(8, dtype=np.float32) * VERSION}

@pytest.mark.lossless
def test_model(golden):
    golden.check_all(model)

@pytest.mark.lossless
def test_same(golden):
    golden.check("same.npy", lambda: np.zeros(3, dtype=np.int8))

def arm(value):
    return lambda: {"out.npy": np.full(4, value, dtype=np.int16)}

@pytest.mark.lossless
def test_compare(lossless):
    lossless.compare(arm(1), arm(2), label="candidate differs")
"""


@pytest.fixture
def changed(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest("--update-goldens", "-k", "not compare").assert_outcomes(passed=2)
    (pytester.path / "test_suite.py").write_text(SUITE.replace("VERSION = 1", "VERSION = 3"))
    return pytester


def _export(root: Path) -> dict:
    return json.loads((root / "export" / "export.json").read_text())


@pytest.mark.slow
def test_only_what_failed_or_was_new_is_exported(changed):
    result = changed.runpytest_inprocess("--lossless", "--lossless-export", "export")
    result.assert_outcomes(failed=2, passed=1)
    document = _export(changed.path)
    by_test = {}
    for entry in document["entries"]:
        by_test.setdefault(entry["test"].split("::")[-1], []).append(entry)
    assert sorted(by_test) == ["test_compare", "test_model"]
    (model,) = by_test["test_model"]
    assert model["source"] == "golden"
    assert model["status"] == "changed"
    assert model["gate"] == "elementwise"
    assert model["kind"] == "tensor"
    assert model["agreed"] is True
    assert len(model["runs"]) == 3
    assert document["settings"]["control_runs"] == 2
    receipt = json.loads((changed.path / "export" / model["receipt"]).read_text())
    assert receipt["test_id"] == model["test"]
    compared = by_test["test_compare"]
    assert {e["run"] for e in compared} == {"candidate"}
    assert compared[0]["source"] == "lossless"
    assert compared[0]["status"] == "failed"
    assert (changed.path / "export" / compared[0]["file"]).is_file()
    out = io.StringIO()
    code = accept_command(
        changed.path / "export",
        keyword="compare",
        goldens=changed.path / "goldens",
        out=out,
        entry_points=False,
    )
    assert code == 1
    assert "a lossless.compare has no golden" in out.getvalue()


@pytest.mark.slow
def test_a_new_golden_is_exported(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess("--lossless", "--lossless-export", "export", "-k", "same")
    result.assert_outcomes(failed=1)
    (entry,) = _export(pytester.path)["entries"]
    assert entry["status"] == "new"
    assert entry["agreed"] is True
    assert entry["producer"] is True


@pytest.mark.slow
def test_workers_entries_reach_the_export(changed):
    result = changed.runpytest_subprocess(
        "--lossless", "--lossless-export", "export", "-n", "2", "-p", "xdist"
    )
    result.assert_outcomes(failed=2, passed=1)
    tests = {e["test"].split("::")[-1] for e in _export(changed.path)["entries"]}
    assert tests == {"test_model", "test_compare"}


@pytest.mark.slow
def test_a_passing_session_writes_an_empty_export(pytester):
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest("--update-goldens", "-k", "same").assert_outcomes(passed=1)
    result = pytester.runpytest("--lossless", "--lossless-export", "export", "-k", "same")
    result.assert_outcomes(passed=1)
    assert _export(pytester.path)["entries"] == []
    assert "pytest-lossless export: export (0 artifacts of 0 tests)" in result.stdout.str()


@pytest.mark.slow
def test_github_gets_the_table_and_an_annotation_per_failing_gate(changed, monkeypatch):
    summary = changed.path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = changed.runpytest_inprocess("--lossless")
    result.assert_outcomes(failed=2, passed=1)
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, never replaced
    assert "| verdict | test | check | gate | key figure |" in text
    assert re.search(r"\| \*\*FAIL\*\* \| test_suite.py::test_model \| latent.npy \|", text), text
    assert "| **PASS** | test_suite.py::test_same |" in text
    lines = [line for line in result.outlines if line.startswith("::error ")]
    assert len(lines) == 2, result.outlines
    model = next(line for line in lines if "test_model" in line)
    written = (changed.path / "test_suite.py").read_text().splitlines()
    line_number = written.index("def test_model(golden):")  # its decorator's line, 1-based
    assert model.startswith(f"::error file=test_suite.py,line={line_number},title=")
    assert "%3A%3Atest_model" in model  # "::" in a property is escaped


def test_annotations_are_escaped_as_the_runner_reads_them():
    line = annotation("a,b:c.py", 7, "100% sure\nsecond line\x1b", title="FAIL: x,y")
    assert line == (
        "::error file=a%2Cb%3Ac.py,line=7,title=FAIL%3A x%2Cy::100%25 sure%0Asecond line\\x1b"
    )
    assert "\n" not in line


def test_the_markdown_table_escapes_its_cells():
    text = markdown_table([("FAIL", "t.py::test[a|b]", "x", "bytes", "one\ntwo")], title="T")
    assert "| **FAIL** | t.py::test[a\\|b] | x | bytes | one two |" in text
    assert "no gate compared anything" in markdown_table([], title="T")
