"""End to end, from outside (#20): ``-p no:`` of one of the plugin's own modules. The modules
carry the guarantees together: blocking the one that skips a ``lossless`` test without
``--lossless`` (and fails one that compared nothing) let such a test pass unchecked. It is a
usage error naming the module; the report and the progress line may still be left out."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

PROJECT = """
import pytest

@pytest.mark.lossless
def test_nothing():
    pass
"""


@pytest.mark.parametrize("flags", [(), ("--lossless",)], ids=["plain", "lossless"])
def test_blocking_a_module_that_carries_a_guarantee_is_a_usage_error(
    pytester: pytest.Pytester, flags: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_p=PROJECT)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:pytest_lossless.plugin.outcomes", *flags
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines
    result.stderr.fnmatch_lines(
        ["*-p no:pytest_lossless.plugin.outcomes*turn the whole plugin off with -p no:lossless*"]
    )


def test_blocking_the_report_is_allowed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_p=PROJECT)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:pytest_lossless.plugin.html_report"
    )
    result.assert_outcomes(skipped=1)
