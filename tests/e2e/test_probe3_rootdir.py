"""End to end, from outside (#20): a test file outside the rootdir. ``-c ci/other.ini`` (a CI
job keeping its ini in a folder of its own) makes that folder the rootdir, and pytest then names
the test files by how the command line reached them: ``tests/x/test_d.py`` and
``tests/y/test_d.py`` both became ``test_d.py::test_d``, one golden folder, and the second
silently overwrote the first's golden (``created`` then ``changed``, exit status 0). Goldens are
keyed by the file's path under the rootdir; a file with none is refused, naming the fix."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def _test(values: int) -> str:
    return (
        "import numpy as np\n\n"
        "def test_d(golden):\n"
        f"    golden.check('o.npy', np.arange({values}))\n"
    )


def test_a_test_file_outside_the_rootdir_keeps_no_goldens(pytester: pytest.Pytester) -> None:
    ci = pytester.mkdir("ci")
    (ci / "other.ini").write_text("[pytest]\n")
    for name, values in (("x", 3), ("y", 4)):
        folder = pytester.mkdir("tests") / name if name == "x" else pytester.path / "tests" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "test_d.py").write_text(_test(values))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-c", "ci/other.ini", "--import-mode=importlib",
        "--update-goldens", "tests/x", "tests/y",
    )  # fmt: skip
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    assert not list(pytester.path.rglob("manifest.json")), out  # nothing written anywhere
    result.stdout.fnmatch_lines(
        [f"*tests/x/test_d.py is outside the rootdir {ci}*--rootdir*"], consecutive=False
    )
    # Inside the rootdir, the same files keep a golden folder each.
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--import-mode=importlib", "--rootdir", str(pytester.path),
        "-c", "ci/other.ini", "--update-goldens", "tests/x", "tests/y",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    made = sorted(p.relative_to(pytester.path).as_posix() for p in pytester.path.rglob("*.json"))
    assert "goldens/tests/x/test_d/test_d/manifest.json" in made, made
    assert "goldens/tests/y/test_d/test_d/manifest.json" in made, made
