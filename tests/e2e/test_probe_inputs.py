"""End to end, from outside (#20): a wrong value given to a fixture is a clear error naming it,
never a traceback from deep inside the statistics."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import pytest

@pytest.mark.lossless
def test_speed(speed_gate):
    speed_gate(lambda: 1.0, lambda: 0.5, target="0.3")
"""


def test_a_speed_target_given_as_text_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_p=PROJECT)
    result = pytester.runpytest("-p", "no:cacheprovider", "--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*target='0.3': expected the fraction of time saved*"])
    assert "TypeError" not in result.stdout.str()
