"""End to end (#22): with pytest-html installed and ``--html`` given, pytest-html's report links
the session's lossless report (a relative link that resolves to it); without ``--html`` the
hook is not registered (pytest would refuse a hook it has no spec for). Skipped where
pytest-html is not installed (it is optional)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytest.importorskip("pytest_html")

PROJECT = """
import pytest

@pytest.mark.lossless
def test_gate(lossless):
    lossless.compare(lambda: {"x": b"same"}, lambda: {"x": b"same"}, runs=2, label="c")
"""


@pytest.mark.slow
def test_pytest_html_links_the_lossless_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PYTEST_LOSSLESS_LOCK_DIR", str(tmp_path / "locks"))
    pytester.makepyfile(test_project=PROJECT)
    result = pytester.runpytest(
        "--lossless", "-p", "no:cacheprovider", "--html=out/pytest.html", "-p", "html"
    )
    result.assert_outcomes(passed=1)
    page = (pytester.path / "out" / "pytest.html").read_text(encoding="utf-8")
    (href,) = re.findall(r'pytest-lossless: <a href="([^"]+)">the lossless report</a>', page)
    target = (pytester.path / "out" / href).resolve()
    assert target.name == "index.html"
    assert target.is_file()
    assert target.parent.name == "report"
    assert "1 PASS" in page
