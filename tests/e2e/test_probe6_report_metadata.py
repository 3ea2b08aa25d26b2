"""End to end, from outside (#20): the HTML report's INCONCLUSIVE section of a control whose runs
differ only in metadata (here its kind: one run wrote a tensor, the next plain bytes, as a
model that sometimes writes an error page would). Nothing was counted, and the "how many" column
said ``None of None bytes`` (Python's word for a missing count, twice); worse, drawing the two
runs side by side raised, and the whole section was replaced by "could not be drawn". The
section now says in words that only the metadata differs, and a pair that cannot be drawn is
named in its place while the rest of the section stays.
"""

from __future__ import annotations

import html

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SUITE = """
import itertools

import numpy as np
import pytest

RUNS = itertools.count()


@pytest.mark.lossless
def test_meta(lossless, tmp_path):
    def flaky():
        run = next(RUNS)
        path = tmp_path / f"run{run}" / "out.bin"
        path.parent.mkdir()
        if run % 2:
            path.write_bytes(b"an error page, not a tensor" * 10)
        else:
            with open(path, "wb") as out:
                np.save(out, np.zeros(4))
        return {"out.bin": path}

    lossless.compare(flaky, flaky, runs=2, label="meta")
"""


def test_a_control_differing_only_in_metadata_says_so_in_words(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--lossless")
    assert result.parseoutcomes().get("inconclusive") == 1
    report = next((pytester.path / "lossless-receipts").glob("*/report/index.html"))
    page = html.unescape(report.read_text())
    assert "None of" not in page
    assert "could not be drawn" not in page
    assert (
        "<td>control#1 vs control#2</td><td>out.bin</td>"
        "<td>kind: expected tensor, obtained bytes</td><td>only the metadata differs "
        "(nothing counted)</td>"
    ) in page
    assert "<p>out.bin: control#1 vs control#2</p>\n<p>not drawn: " in page
