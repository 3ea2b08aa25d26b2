"""End to end, from outside (#20): gates changed after the results were in, through ``runs=``.
``lossless.compare(..., runs=N)`` says how many control runs must agree before the candidate is
judged; a control that was INCONCLUSIVE over 5 runs can look repeatable over 2. The gate, the
media expected and the proof rule were frozen in ``plan.json``, the run count was not: a test
could lower it (here through an environment variable, as a CI matrix would) and pass without
``--update-goldens``. The count a test gives is frozen with the rest of its plan; one left to
``--lossless-control-runs`` stays the session's setting.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SUITE = """
import os

import numpy as np
import pytest

RUNS = int(os.environ["PROBE_RUNS"]) if os.environ.get("PROBE_RUNS") else None


def run():
    return {"t.npy": np.zeros(3)}


@pytest.mark.lossless
def test_cmp(lossless):
    lossless.compare(run, run, runs=RUNS, label="cmp")
"""


def test_a_lowered_run_count_is_a_changed_plan(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("PROBE_RUNS", "5")
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    plan = json.loads((pytester.path / "goldens/test_suite/test_cmp/plan.json").read_text())
    assert plan["plans"]["lossless"]["cmp"]["plan"]["runs"] == 5

    pytester.runpytest("--lossless").assert_outcomes(passed=1)
    monkeypatch.setenv("PROBE_RUNS", "2")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*GateChanged: plan changed for lossless.compare 'cmp'*froze runs=5*asks for runs=2*"]
    )
    assert "Traceback" not in result.stdout.str()
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    pytester.runpytest("--lossless").assert_outcomes(passed=1)


def test_a_count_left_to_the_session_is_not_frozen(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plans frozen before the count was (no ``runs`` key) still match a test that gives none,
    and ``--lossless-control-runs`` (bisect sets it) is the session's, not the plan's."""
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.delenv("PROBE_RUNS", raising=False)
    assert pytester.runpytest("--update-goldens", "--lossless").ret == 0
    plan = json.loads((pytester.path / "goldens/test_suite/test_cmp/plan.json").read_text())
    assert "runs" not in plan["plans"]["lossless"]["cmp"]["plan"]
    pytester.runpytest("--lossless", "--lossless-control-runs=3").assert_outcomes(passed=1)
