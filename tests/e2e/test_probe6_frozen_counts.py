"""End to end, from outside (#20): gates changed after the results were in, through the counts
and knobs a test gives in code. ``lossless.matrix(..., runs=N)`` says how many runs of each cell
must agree; a cell INCONCLUSIVE over 3 runs can look repeatable over 2, and a grid frozen as
"FAIL here" can be made to pass by lowering the count. Like ``lossless.compare(runs=)``
(test_probe5_frozen_runs.py), the count a test gives is frozen in ``plan.json`` with the axes,
the reference and the grid; a count left to the session, or a plan frozen before counts were
(no ``runs`` key, like the repository's own racy-knobs plan), is not. The speed gate's pairs,
design and confidence and the matrix's axes are frozen too: a change of any of them without
``--update-goldens`` is refused naming the frozen value and the asked one.
"""

from __future__ import annotations

import json

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

MATRIX = """
import os

import numpy as np
import pytest

RUNS = int(os.environ["PROBE_RUNS"]) if os.environ.get("PROBE_RUNS") else None
AXES = {"threads": [1, 2]}


def make_run(threads):
    return lambda: {"t.npy": np.full(3, 1.0 if threads == 1 else 2.0)}


@pytest.mark.lossless
def test_grid(lossless):
    lossless.matrix(make_run, AXES, runs=RUNS, label="knobs", act=False)
"""

SPEED = """
import pytest

PAIRS = 8
DESIGN = "ABBA"
CONFIDENCE = 0.95


@pytest.mark.lossless
def test_speed(speed_gate):
    speed_gate(
        lambda: 1.0, lambda: 0.5, target=0.30, workload="w", seed=1,
        pairs=PAIRS, design=DESIGN, confidence=CONFIDENCE,
    )
"""


def _matrix_plan(pytester: pytest.Pytester) -> dict:
    path = pytester.path / "goldens/test_suite/test_grid/plan.json"
    return json.loads(path.read_text())["plans"]["matrix"]["knobs"]["plan"]


def test_a_lowered_matrix_run_count_is_a_changed_plan(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_suite=MATRIX)
    monkeypatch.setenv("PROBE_RUNS", "3")
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    assert _matrix_plan(pytester)["runs"] == 3
    pytester.runpytest("--lossless").assert_outcomes(passed=1)
    *_, receipt = sorted(pytester.path.glob("lossless-receipts/*/test_suite.py__test_grid.json"))
    assert json.loads(receipt.read_text())["matrix"][0]["gate_plan"]["plan"]["runs"] == 3

    monkeypatch.setenv("PROBE_RUNS", "2")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*GateChanged: plan changed for lossless.matrix 'knobs'*froze runs=3*asks for runs=2*"]
    )
    assert "Traceback" not in result.stdout.str()
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    assert _matrix_plan(pytester)["runs"] == 2
    pytester.runpytest("--lossless").assert_outcomes(passed=1)


def test_a_matrix_count_left_unset_or_a_plan_without_one_is_not_frozen(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan frozen with no count (as every plan before this change was) keeps matching a test
    that gives one, and a count left unset follows ``--lossless-control-runs``."""
    pytester.makepyfile(test_suite=MATRIX)
    monkeypatch.delenv("PROBE_RUNS", raising=False)
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    assert "runs" not in _matrix_plan(pytester)
    pytester.runpytest("--lossless", "--lossless-control-runs=3").assert_outcomes(passed=1)
    monkeypatch.setenv("PROBE_RUNS", "2")
    pytester.runpytest("--lossless").assert_outcomes(passed=1)


def test_a_changed_matrix_axis_is_refused_naming_both(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=MATRIX)
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    pytester.makepyfile(test_suite=MATRIX.replace('"threads": [1, 2]', '"threads": [1, 2, 3]'))
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    assert (
        "GateChanged: plan changed for lossless.matrix 'knobs' in " in result.stdout.str()
    )  # a literal check: fnmatch reads [1, 2] as a class of characters
    assert (
        '--update-goldens froze axes={"threads": [1, 2]} but this run asks for '
        'axes={"threads": [1, 2, 3]}'
    ) in result.stdout.str()


@pytest.mark.parametrize(
    ("line", "changed", "was", "now"),
    [
        ("PAIRS = 8", "PAIRS = 6", "pairs=8", "pairs=6"),
        ('DESIGN = "ABBA"', 'DESIGN = "AB"', 'design="ABBA"', 'design="AB"'),
        ("CONFIDENCE = 0.95", "CONFIDENCE = 0.9", "confidence=0.95", "confidence=0.9"),
    ],
)
def test_a_changed_speed_count_or_knob_is_refused_naming_both(
    pytester: pytest.Pytester, line: str, changed: str, was: str, now: str
) -> None:
    pytester.makepyfile(test_suite=SPEED)
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    pytester.makepyfile(test_suite=SPEED.replace(line, changed))
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "GateChanged: plan changed for speed_gate 'w' in " in text
    assert f"--update-goldens froze {was} but this run asks for {now} " in text
    assert "Traceback" not in result.stdout.str()
