"""End to end, from outside (#20): ``--update-goldens`` wrote a test's goldens in the teardown of
its ``golden`` fixture, as soon as its call had passed. Another fixture's teardown could still
fail the test: one set up before ``golden`` (torn down after its commit) raising, or one torn
down before it in which pytest-timeout's signal method stopped a hung cleanup. The test was an
ERROR, its receipt FAIL, and its goldens CREATED. Goldens are written only once the test's
whole teardown has passed too.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import time
import numpy as np
import pytest

@pytest.fixture
def breaks_after():
    yield
    raise RuntimeError("cleanup failed")

@pytest.fixture
def hangs_before():
    yield
    time.sleep(30)

def test_breaks_after(breaks_after, golden):
    golden.check("o.npy", np.arange(3))

def test_hangs_before(golden, hangs_before):
    golden.check("o.npy", np.arange(4))

def test_fine(golden):
    golden.check("o.npy", np.arange(5))
"""


@pytest.mark.slow
def test_a_golden_is_not_written_when_a_teardown_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nlossless_backend = cpu\n")
    pytester.makepyfile(test_t=TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--update-goldens", "--timeout", "3", "--timeout-method", "signal"
    )
    out = result.stdout.str()
    result.assert_outcomes(passed=3, errors=2)
    assert result.ret != 0
    folders = sorted(p.name for p in (pytester.path / "goldens" / "test_t").iterdir())
    assert folders == ["test_fine"], out
    assert "CREATED  test_t.py::test_breaks_after" not in out, out
    assert "CREATED  test_t.py::test_hangs_before" not in out, out
    assert "the test did not pass; nothing written" in out, out
