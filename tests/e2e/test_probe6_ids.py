"""End to end, from outside (#20): test ids, test names or module names that differ only in
case. On Linux their golden folders are two, but a clone on macOS or Windows (file systems
that ignore case) has one: git checks out one of the two and each update overwrites the other
test's goldens. Such tests share a golden folder, like ids that differ only in characters a
file name cannot hold: each is an error naming both, and nothing is written for either.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import numpy as np
import pytest

@pytest.mark.parametrize("v", [1, 2], ids=["Case", "case"])
def test_p(golden, v):
    golden.check("o.npy", np.full(2, v))

def test_Upper(golden):
    golden.check("o.npy", np.ones(1))

def test_upper(golden):
    golden.check("o.npy", np.ones(2))

def test_alone(golden):
    golden.check("o.npy", np.ones(3))
"""


@pytest.mark.slow
def test_tests_whose_golden_folders_differ_only_in_case_are_refused(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nlossless_backend = cpu\n")
    pytester.makepyfile(test_c=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-goldens")
    result.assert_outcomes(passed=1, errors=4)
    result.stdout.fnmatch_lines(
        [
            "*test_c.py::test_p[[]Case] and test_c.py::test_p[[]case] share the golden folder*",
            "*test_c.py::test_Upper and test_c.py::test_upper share the golden folder*",
        ]
    )
    assert "ignores case" in result.stdout.str()
    assert sorted(p.name for p in (pytester.path / "goldens" / "test_c").iterdir()) == [
        "test_alone"
    ]
