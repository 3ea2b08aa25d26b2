"""End to end, from outside (#20): what a selection does to the report of golden folders of no
test. ``--lf`` filters tests while collecting them (a module with no failure is collected
empty, a failing module keeps only its failed tests), so a session under it cannot tell a
test that is gone from one it did not look at: it reports none, rather than "no longer has
this test" for tests that are there."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

ONE = """
import numpy as np

def test_one(golden):
    golden.check("o.npy", np.arange(3))
"""

TWO = """
import os
import numpy as np

def test_two(golden):
    golden.check("o.npy", np.arange(3))
    assert os.environ.get("PROBE_OK") == "1"

def test_three(golden):
    golden.check("o.npy", np.arange(4))
"""


def test_last_failed_reports_no_test_as_gone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_1=ONE, test_2=TWO)
    monkeypatch.setenv("PROBE_OK", "1")
    pytester.runpytest_subprocess("--update-goldens").assert_outcomes(passed=3)
    monkeypatch.delenv("PROBE_OK")
    pytester.runpytest_subprocess().assert_outcomes(
        passed=2, failed=1
    )  # test_two fails: --lf has one
    # Still failing under the update (nothing written for it), then passing.
    stays = pytester.runpytest_subprocess("--lf", "--update-goldens")
    stays.assert_outcomes(failed=1)
    assert "no longer has this test" not in stays.stdout.str()
    monkeypatch.setenv("PROBE_OK", "1")
    passes = pytester.runpytest_subprocess("--lf", "--lossless")
    passes.assert_outcomes(passed=1)
    assert "no longer has this test" not in passes.stdout.str()
    folders = sorted(
        str(p.parent.relative_to(pytester.path)) for p in pytester.path.rglob("manifest.json")
    )
    assert folders == [
        "goldens/test_1/test_one",
        "goldens/test_2/test_three",
        "goldens/test_2/test_two",
    ]
