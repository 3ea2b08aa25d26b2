"""End to end, from outside (#20): ``model_run(env=...)`` overriding (or unsetting) the
allocation's visibility variable. The child saw devices the test did not hold (another test's),
and nothing said so. Now refused, naming both values; a subset of the allocation is fine."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_an_env_override_of_the_allocation_visibility_is_refused(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_env="""
import sys
import pytest

SHOW = "import os; print('saw', os.environ.get('PYTEST_LOSSLESS_CPU_SLOTS'))"

@pytest.mark.npu(devices=2)
def test_other_slot(model_run, devices):
    model_run([sys.executable, "-c", SHOW], env={"PYTEST_LOSSLESS_CPU_SLOTS": "3"})

@pytest.mark.npu(devices=2)
def test_unset(model_run, devices):
    model_run([sys.executable, "-c", SHOW], env={"PYTEST_LOSSLESS_CPU_SLOTS": None})

@pytest.mark.npu(devices=2)
def test_a_subset_is_fine(model_run, devices):
    one = devices.ids[1]
    result = model_run([sys.executable, "-c", SHOW], env={"PYTEST_LOSSLESS_CPU_SLOTS": one})
    assert result.stdout_path.read_text().strip() == f"saw {one}"
"""
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--lossless-backend",
        "cpu",
        "--lossless-devices",
        "0-3",
        "--lossless-lock-dir",
        str(pytester.path / "locks"),
    )
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*model_run(env=...)*PYTEST_LOSSLESS_CPU_SLOTS*3*allocation*0,1*",
            "*model_run(env=...)*PYTEST_LOSSLESS_CPU_SLOTS*None*allocation*0,1*",
        ],
        consecutive=False,
    )
    assert "saw 3" not in result.stdout.str()
