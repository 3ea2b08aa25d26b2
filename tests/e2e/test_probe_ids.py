"""End to end, from outside (#20): test ids that differ only in characters a file name cannot
hold. Each test keeps a receipt of its own, two tests never share (and overwrite) one golden
folder, and the table names the whole test id."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

from pytest_lossless.__main__ import main

pytestmark = pytest.mark.slow

#: Three tests whose ids become one file name once ``[`` ``]`` and ``::`` are made ``_``; each
#: has a golden folder of its own (the folder keeps the brackets).
RECEIPTS = """
import os
import numpy as np
import pytest

SHIFT = int(os.environ.get("PROBE_SHIFT", "0"))

@pytest.mark.parametrize("v", [0], ids=["a_b"])
def test_x(golden, v):
    golden.check("o.npy", np.arange(3) + v)

@pytest.mark.parametrize("v", [1], ids=["b"])
def test_x_a(golden, v):
    golden.check("o.npy", np.arange(3) + v + SHIFT)

def test_x_a_b(golden):
    golden.check("o.npy", np.arange(3) + 2)

@pytest.mark.parametrize("v", [3], ids=["dir/test_x_a_b"])
def test_y(golden, v):
    golden.check("o.npy", np.arange(3) + v + SHIFT)
"""

#: Parameter ids that differ only in characters a golden folder name cannot hold.
FOLDERS = """
import numpy as np
import pytest

@pytest.mark.parametrize("x", ["a/b", "a_b", "c d"])
def test_ids(golden, x):
    golden.check("out.npy", np.arange(3) + len(x) + ord(x[0]) + ord(x[1]))

def test_other(golden):
    golden.check("out.npy", np.arange(4))
"""


def _verify(*args: str | Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["verify", *map(str, args)])
    return code, out.getvalue() + err.getvalue()


def _session(root: Path) -> Path:
    return max(p for p in (root / "lossless-receipts").iterdir() if p.is_dir())


def test_ids_that_share_a_file_name_keep_a_receipt_each(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_p=RECEIPTS)
    made = pytester.runpytest("-p", "no:cacheprovider", "--update-goldens")
    made.assert_outcomes(passed=4)
    monkeypatch.setenv("PROBE_SHIFT", "1")
    result = pytester.runpytest("-p", "no:cacheprovider", "--lossless")
    result.assert_outcomes(passed=2, failed=2)
    # The table's row names the whole test id, not what follows its last '/' (a row that
    # read "test_x_a_b]", the name of another test).
    rows = [line for line in result.outlines if line.startswith("FAIL ")]
    assert any("test_p.py::test_y[dir/test_x_a_b]" in row for row in rows), rows
    session = _session(pytester.path)
    receipts = sorted(p for p in session.glob("*.json") if p.name != "INDEX.json")
    assert len(receipts) == 4, [p.name for p in receipts]
    verdicts = {}
    for path in receipts:
        data = json.loads(path.read_text())
        verdicts[data["test_id"]] = data["verdicts"]["overall"]
    assert verdicts == {
        "test_p.py::test_x[a_b]": "PASS",
        "test_p.py::test_x_a[b]": "FAIL",
        "test_p.py::test_x_a_b": "PASS",
        "test_p.py::test_y[dir/test_x_a_b]": "FAIL",
    }
    index = json.loads((session / "INDEX.json").read_text())
    files = [entry["file"] for entry in index["receipts"]]
    assert len(set(files)) == 4
    code, out = _verify(session)
    assert "CONTRADICTION" not in out, out
    assert "2 FAIL, 2 PASS" in out, out
    assert code == 0, out  # every receipt consistent with its index (the FAIL is its verdict)


def test_ids_that_share_a_golden_folder_are_an_error_naming_both(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_p=FOLDERS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--update-goldens")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_p.py::test_ids[[]a/b] and test_p.py::test_ids[[]a_b] share the golden folder*",
        ]
    )
    # Nothing was written for either: they would overwrite each other's goldens.
    assert sorted(p.name for p in (pytester.path / "goldens/test_p").iterdir()) == [
        "test_ids[c_d]",
        "test_other",
    ]
    # Selecting one of them does not make the folder its own.
    alone = pytester.runpytest("-p", "no:cacheprovider", "--update-goldens", "-k", "a_b")
    alone.assert_outcomes(errors=1)
    alone.stdout.fnmatch_lines(["*share the golden folder*"])
