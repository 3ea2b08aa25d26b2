"""The summary: a pure generator of lines from verdict rows and golden updates."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_lossless.evidence.provenance import SourceState
from pytest_lossless.report import Row, events_from, evidence_line, update_lines, verdict_table


def test_table_puts_failures_first_and_counts():
    rows = [
        Row("t.py::a", "clip.mp4", "decoded", "PASS", "120 frames identical"),
        Row("t.py::b", "audio.wav", "decoded", "FAIL", "sample 17: 3 != 4"),
        Row("t.py::c", "fast vs control", "decoded", "INCONCLUSIVE", "control varied"),
    ]
    lines = verdict_table(rows)
    assert lines[0].split()[:4] == ["verdict", "test", "check", "gate"]
    assert lines[2].startswith("FAIL")
    assert lines[3].startswith("INCONCLUSIVE")
    assert lines[4].startswith("PASS")
    assert lines[-1] == "1 FAIL, 1 INCONCLUSIVE, 1 PASS"


def test_no_rows_no_table():
    assert verdict_table([]) == []


@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=80),
            st.sampled_from(["PASS", "FAIL", "INCONCLUSIVE", "ERROR"]),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_every_row_appears_once_and_lines_fit(cells):
    rows = [Row(t.replace("\n", " "), "a", "bytes", v) for t, v in cells]
    lines = verdict_table(rows, width=100)
    assert len([line for line in lines if not line.startswith(" ")]) == len(rows) + 3
    counted = sum(int(part.split()[0]) for part in lines[-1].split(", "))
    assert counted == len(rows)
    assert max(len(line) for line in lines) <= 100


@given(
    st.integers(min_value=80, max_value=200),
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=120),
            st.text(max_size=40),
            st.text(max_size=40),
            st.text(max_size=300),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_no_line_is_wider_than_the_terminal(width, cells):
    rows = [
        Row(*(c.replace("\n", " ") for c in (t, check, gate)), "FAIL", detail.replace("\n", " "))
        for t, check, gate, detail in cells
    ]
    assert max(len(line) for line in verdict_table(rows, width=width)) <= width


def test_the_long_ids_of_a_real_suite_fit_width_100():
    rows = [
        Row(
            "tests/gates/test_ref2va.py::test_server_matches_goldens[15s]",
            "latent.npy",
            "tolerance(atol=1e-06, rtol=0)",
            "LOSSY-PASS",
            "f" * 200,
        ),
        Row(
            "tests/gates/test_ref2va.py::test_fast_candidate_is_lossless_and_faster[5s]",
            "speed cli-5s",
            "ratio <= 0.70",
            "PASS",
            "0.51 [0.45, 0.58], 8/8 pairs ABBA",
        ),
    ]
    lines = verdict_table(rows, width=100)
    assert max(len(line) for line in lines) <= 100
    assert lines[2].startswith("LOSSY-PASS")  # worse than PASS, so first
    # A detail too long for its column is wrapped below its row, never cut.
    assert "".join(line.strip() for line in lines if line.startswith("    ")).startswith("f" * 200)
    assert "0.51 [0.45, 0.58], 8/8 pairs ABBA" in " ".join(lines)
    assert "test_server_matches_goldens[15s]" in lines[2]


def test_update_lines_group_by_action():
    events = [
        {"test": "t", "folder": "goldens/m/t", "name": "a.wav", "action": "created", "detail": ""},
        {
            "test": "t",
            "folder": "goldens/m/t",
            "name": "b.npy",
            "action": "unchanged",
            "detail": "",
        },
        {
            "test": "t",
            "folder": "goldens/m/t",
            "name": "c.mp4",
            "action": "changed",
            "detail": "sha256 ab -> cd",
        },
    ]  # as a test report carries them
    assert update_lines(events_from(events)) == [
        "created: 1",
        "  goldens/m/t/a.wav",
        "changed: 1",
        "  goldens/m/t/c.mp4 (sha256 ab -> cd)",
        "unchanged: 1",
        "  goldens/m/t/b.npy",
    ]


def test_evidence_line_names_a_dirty_unpublished_source():
    source = {
        "revision": "0123456789abcdef",
        "dirty": True,
        "diff_sha256": "feedface" * 8,
        "publication": "unpublished",
    }
    line = evidence_line(3, "lossless-receipts", SourceState.read(source))
    assert line.startswith("3 receipts in lossless-receipts, source 0123456789ab (dirty")
    assert "unpublished" in line
    assert line.endswith("python -m pytest_lossless verify lossless-receipts")
    published = {"revision": "abc", "dirty": False, "publication": "published"}
    clean = evidence_line(1, "r", SourceState.read(published))
    assert clean == "1 receipt in r, source abc; audit with: python -m pytest_lossless verify r"


# ------------------------------------------------------------------ one vocabulary (#19 item 3)


def test_a_row_status_is_derived_once_from_verdict_lossiness_and_expect():
    from pytest_lossless.core.verdict import Status, status_of

    assert status_of("PASS") == (Status.PASS, False)
    assert status_of("PASS", lossy=True) == (Status.LOSSY_PASS, False)
    assert status_of("FAIL", lossy=True) == (Status.FAIL, False)
    assert status_of("FAIL", expect=("FAIL", "INCONCLUSIVE")) == (Status.FAIL, True)
    assert status_of("PASS", expect=("FAIL",)) == (Status.PASS, False)
    assert status_of("forged") == (Status.FAIL, False)


def test_rows_carry_their_status_as_an_enum_never_as_display_text():
    from pytest_lossless.core.verdict import Status, Update

    row = Row("t.py::a", "x", "bytes", Status.FAIL, "d", expected=True)
    assert row.verdict == "FAIL (expected)"
    assert not row.failing
    assert not row.quiet
    again = Row.from_dict(row.to_dict())
    assert again == row
    assert again.status is Status.FAIL
    assert again.expected
    with pytest.raises(ValueError, match="not a row status"):
        Row("t.py::a", "x", "bytes", "FAIL (expected)")  # display text is not parsed back
    assert Row("t.py::a", "x", "-", "CONFLICT").status is Update.CONFLICT
    assert Row("t.py::a", "x", "-", Update.CONFLICT).failing
    assert not Row("t.py::a", "x", "-", Update.CREATED).failing
    assert Row("t.py::a", "x", "-", Status.INCONCLUSIVE).failing
    assert Update.of_action("created") is Update.CREATED
    assert Update.of_action("restored") is None  # a folder's recovery is no artifact's row


def test_at_80_columns_test_ids_keep_what_tells_them_apart():
    """#22: clipped from the left, both ids read ``…atches_goldens[15s]``; the part that
    differs (the name's start past ``test_gpu_``) and the parametrization stay."""
    module = "tests/gpu/test_ref2va_gpu.py::"
    rows = [
        Row(
            f"{module}test_gpu_cli_matches_goldens[15s]",
            "frames/clip.mp4",
            "tolerance(atol=1e-06, rtol=0)",
            "FAIL",
            "x" * 50,
        ),
        Row(
            f"{module}test_gpu_server_matches_goldens[15s]",
            "frames/clip.mp4",
            "tolerance(atol=1e-06, rtol=0)",
            "LOSSY-PASS",
            "y" * 30,
        ),
        Row(f"{module}test_gpu_fast[5s]", "speed cli-5s vs control", "ratio <= 0.70", "PASS"),
    ]
    lines = verdict_table(rows, width=80)
    assert max(len(line) for line in lines) <= 80
    fail = next(line for line in lines if line.startswith("FAIL"))
    lossy = next(line for line in lines if line.startswith("LOSSY-PASS"))
    test_cells = [line[12:].split("  ")[0] for line in (fail, lossy)]
    assert test_cells[0] != test_cells[1]
    assert "cli_" in test_cells[0]
    assert "server_" in test_cells[1]
    assert all(cell.endswith("[15s]") for cell in test_cells)


def test_a_name_shared_by_two_modules_keeps_the_modules():
    from pytest_lossless.report.table import clip_test_id

    ids = ["tests/a/test_x.py::test_one[p]", "tests/b/test_y.py::test_one[p]"]
    shown = [clip_test_id(i, 20, ids) for i in ids]
    assert shown[0] != shown[1]
    assert all(len(s) <= 20 and s.endswith("test_one[p]") for s in shown)
