"""End to end, from outside (#20): a collection narrowed by an ini setting or ``-o`` override
(``python_functions``, ``python_classes``) leaves tests out of a module it does collect, and
never says so. Their golden folders are not "no longer has this test": an update under such a
session keeps them, and still removes the golden of a test that is really gone."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

MODULE = """
import numpy as np

def test_one(golden):
    golden.check("o.npy", np.arange(3))

def test_two(golden):
    golden.check("o.npy", np.arange(4))

class TestK:
    def test_k(self, golden):
        golden.check("o.npy", np.arange(5))

@__import__("pytest").mark.parametrize("n", [1, 2])
def test_p(golden, n):
    golden.check("o.npy", np.arange(n))
"""


def _folders(pytester: pytest.Pytester) -> list[str]:
    return sorted(
        str(p.parent.relative_to(pytester.path)) for p in pytester.path.rglob("manifest.json")
    )


ALL = [
    "goldens/test_m/TestK.test_k",
    "goldens/test_m/test_one",
    "goldens/test_m/test_p[1]",
    "goldens/test_m/test_p[2]",
    "goldens/test_m/test_two",
]


def test_narrowing_overrides_keep_goldens_of_tests_that_exist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=MODULE)
    pytester.runpytest_subprocess("--update-goldens").assert_outcomes(passed=5)
    folders = _folders(pytester)
    assert len(folders) == 5, folders
    for override in ("python_functions=test_t*", "python_classes=Nothing*"):
        result = pytester.runpytest_subprocess("--update-goldens", "-o", override)
        assert "no longer has this test" not in result.stdout.str(), override
        assert _folders(pytester) == folders, override
    # A plugin's hook that drops tests without deselecting them.
    conftest = pytester.makeconftest(
        "def pytest_collection_modifyitems(items):\n"
        "    items[:] = [i for i in items if 'test_one' in i.nodeid]\n"
    )
    result = pytester.runpytest_subprocess("--update-goldens")
    result.assert_outcomes(passed=1)
    assert "no longer has this test" not in result.stdout.str()
    assert _folders(pytester) == folders
    conftest.unlink()
    # The same narrowing written in the ini file.
    pytester.makeini("[pytest]\npython_functions = test_o*\n")
    result = pytester.runpytest_subprocess("--update-goldens")
    result.assert_outcomes(passed=1)
    assert "no longer has this test" not in result.stdout.str()
    assert _folders(pytester) == folders


def test_a_test_really_gone_is_still_removed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=MODULE)
    pytester.runpytest_subprocess("--update-goldens").assert_outcomes(passed=5)
    folders = _folders(pytester)
    # test_two deleted, test_p loses its second case: both gone, under a narrowed collection too.
    gone = MODULE.replace("def test_two(", "def _two(").replace("[1, 2]", "[1]")
    pytester.makepyfile(test_m=gone)
    result = pytester.runpytest_subprocess("--update-goldens", "-o", "python_classes=Nothing*")
    result.assert_outcomes(passed=2)
    assert "no longer has this test" in result.stdout.str()
    kept = [f for f in folders if not f.endswith(("test_two", "test_p[2]"))]
    assert _folders(pytester) == kept
