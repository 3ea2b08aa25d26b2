"""The HTML report: the page (escaping, order, every row once, relative links), the report
folder it is written into, and the pictures (valid PNGs of the expected size)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import imageio_ffmpeg
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_lossless.compare.repeatability import compare_control_candidate
from pytest_lossless.core.paths import PathOutsideRoot
from pytest_lossless.core.records import from_json
from pytest_lossless.core.text import printable
from pytest_lossless.evidence.receipts import ReceiptRecord
from pytest_lossless.goldens.swap import UpdateEvent
from pytest_lossless.kinds.registry import KindRegistry
from pytest_lossless.report import Row
from pytest_lossless.report.charts import histogram_svg, speed_svg, waveforms_svg
from pytest_lossless.report.html import page, write_report
from pytest_lossless.report.mismatch import max_ulps
from pytest_lossless.report.pictures import difference, frame_triptych
from pytest_lossless.report.raster import Canvas, encode_png
from pytest_lossless.speed.runner import Sample

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>\x1b[31m\u202e&amp;'


def _record(receipt: dict[str, Any]) -> ReceiptRecord:
    """A receipt as the report reads it (``load``): its record."""
    return ReceiptRecord.from_json({"schema_version": 3, "test_id": "t", **receipt})


class Parsed(HTMLParser):
    """The page as data: tags, attributes, the verdict table's rows (cell texts), links."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[list[str]] = []
        self.ids: set[str] = set()
        self._table = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.tags.append((tag, values))
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "table" and values.get("class") == "verdicts":
            self._table = True
        elif self._table and tag == "tr":
            self._row = []
        elif self._row is not None and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row and self._row[0] != "verdict":
                self.rows.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    @property
    def links(self) -> list[str]:
        return [str(v[a]) for _t, v in self.tags for a in ("href", "src") if v.get(a) is not None]


def _no_script(parsed: Parsed) -> None:
    assert all(tag != "script" for tag, _ in parsed.tags)
    assert not [(tag, a) for tag, attrs in parsed.tags for a in attrs if a.startswith("on")]


def _read_png(data: bytes) -> np.ndarray:
    """Our own strict reading of a PNG: signature, chunk CRCs, IHDR, then the pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, chunks = 8, []
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        tag, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF
        chunks.append((tag, body))
        offset += 12 + length
    assert [t for t, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, color, *_ = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color) == (8, 2)
    raw = np.frombuffer(zlib.decompress(chunks[1][1]), dtype=np.uint8).reshape(height, -1)
    assert raw.shape[1] == 1 + 3 * width
    assert (raw[:, 0] == 1).all()
    rows = raw[:, 1:].astype(np.int64)
    for x in range(3, rows.shape[1]):
        rows[:, x] = (rows[:, x] + rows[:, x - 3]) % 256
    return rows.astype(np.uint8).reshape(height, width, 3)


# ------------------------------------------------------------------ the page


def test_the_page_escapes_hostile_names():
    row = Row(f"t.py::test[{HOSTILE}]", HOSTILE, HOSTILE, "FAIL", HOSTILE)
    text = page([row], {}, context=[("source", HOSTILE)], events=[])
    assert "<script" not in text
    assert "<img src=x" not in text
    assert "\x1b" not in text
    parsed = Parsed(text)
    _no_script(parsed)
    assert parsed.rows == [["FAIL", printable(row.test), *[printable(HOSTILE)] * 3]]


def test_hostile_receipts_are_escaped_in_their_sections(tmp_path):
    row = Row("t.py::test_x", HOSTILE, "decoded", "ERROR", "GoldenMissing: <b>")
    receipt = {"gates": [{"artifact": HOSTILE, "error": HOSTILE, "message": HOSTILE + "\nnext"}]}
    index = write_report(tmp_path / "report", [row], {"t.py::test_x": _record(receipt)})
    text = index.read_text(encoding="utf-8")
    parsed = Parsed(text)
    _no_script(parsed)
    assert "<script" not in text
    assert "\u202e" not in text
    assert html_escaped(printable(HOSTILE)) in text


def html_escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_failures_come_first():
    verdicts = [
        "PASS",
        "CREATED",
        "LOSSY-PASS",
        "FAIL (expected)",
        "INCONCLUSIVE",
        "ERROR",
        "FAIL",
    ]
    # A row's status is an enum and a flag, never its display text: "FAIL (expected)" is
    # Row(..., "FAIL", expected=True).
    rows = [
        Row(f"t.py::test_{n}", "clip.mp4", "decoded", v.split(" ")[0], expected=" " in v)
        for n, v in enumerate(verdicts)
    ]
    shown = [cells[0] for cells in Parsed(page(rows, {})).rows]
    assert shown[:3] == ["FAIL", "ERROR", "INCONCLUSIVE"]
    assert shown[3:5] == ["LOSSY-PASS", "PASS"]
    assert sorted(shown[5:]) == ["CREATED", "FAIL (expected)"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(max_size=30),
            st.text(max_size=20),
            st.sampled_from(["PASS", "FAIL", "INCONCLUSIVE", "ERROR", "CREATED", "LOSSY-PASS"]),
            st.text(max_size=40),
        ),
        max_size=15,
    )
)
def test_every_gate_row_appears_once(cells):
    rows = [Row(f"t.py::{t}", c, "decoded", v, d) for t, c, v, d in cells]
    shown = Parsed(page(rows, {})).rows
    expected = [
        [r.verdict, printable(r.test), printable(r.check), r.gate, printable(r.detail)]
        for r in rows
    ]
    assert sorted(shown) == sorted(expected)


def _lossless_receipt(kinds: KindRegistry, workdir: Path) -> dict:
    """A real INCONCLUSIVE comparison: a tensor that varies between control runs."""
    runs = iter(range(10))

    def flaky() -> dict:
        out = np.arange(12, dtype=np.float32)
        out[3] += next(runs)
        return {"latent.npy": out}

    verdict = compare_control_candidate(
        flaky, flaky, runs=2, kinds=kinds, workdir=workdir, label="racy"
    )
    return json.loads(json.dumps({"lossless": [verdict.to_json()]}, default=str))


def _speed_receipt() -> dict:
    samples = [
        {"block": b, "position": p, "arm": arm, "seconds": (0.03 if arm == "control" else 0.01)}
        for b in range(6)
        for p, arm in enumerate(("control", "candidate", "candidate", "control"))
    ]
    samples[2] = {**samples[2], "seconds": None, "error": "RuntimeError: boom"}
    return {
        "speed": [
            {
                "verdict": "PASS",
                "ratio": 0.33,
                "ci": [0.31, 0.35],
                "target": 0.3,
                "target_ratio": 0.7,
                "design": "ABBA",
                "seed": 7,
                "samples": samples,
                "message": "workload 5s: candidate/control = 0.33 [0.31, 0.35]",
            }
        ]
    }


def test_links_are_relative_and_resolve_inside_the_report(tmp_path, kinds):
    rows = [
        Row("t.py::test_racy", "racy", "elementwise", "INCONCLUSIVE", "control not repeatable"),
        Row("t.py::test_speed", "speed 5s", "ratio <= 0.70", "PASS", "0.33 [0.31, 0.35]"),
        Row("t.py::test_ok", "clip.mp4", "decoded", "PASS", "12 frames identical"),
    ]
    receipts = {
        "t.py::test_racy": _record(_lossless_receipt(kinds, tmp_path / "work")),
        "t.py::test_speed": _record(_speed_receipt()),
    }
    index = write_report(tmp_path / "receipts" / "report", rows, receipts)
    folder = index.parent
    parsed = Parsed(index.read_text(encoding="utf-8"))
    _no_script(parsed)
    assert len(parsed.rows) == 3
    pictures = 0
    for tag, attrs in parsed.tags:
        for name in ("href", "src"):
            link = attrs.get(name)
            if link is None:
                continue
            parts = urlsplit(link)
            assert not parts.scheme, link
            assert not parts.netloc, link
            assert not link.startswith("/"), link
            if not parts.path:
                assert parts.fragment in parsed.ids
                continue
            target = (folder / unquote(parts.path)).resolve()
            assert target.is_file(), link
            assert target.is_relative_to(folder.resolve()), link
            if tag == "img":
                pictures += 1
                picture = _read_png(target.read_bytes())
                assert picture.shape == (int(attrs["height"]), int(attrs["width"]), 3)
    # The tensor that varied between control runs and the speed plot are charts: inline SVG
    # (#22: they were PNGs drawn with a bitmap font), so no picture file is linked for them.
    assert pictures == 0
    assert len([tag for tag, _ in parsed.tags if tag == "svg"]) == 2
    text = index.read_text(encoding="utf-8")
    assert "control#1 vs control#2" in text
    assert "Which runs differed" in text


def test_an_older_report_is_replaced_and_a_link_is_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    receipts = tmp_path / "root" / "receipts"
    receipts.mkdir(parents=True)
    (receipts / "report").symlink_to(outside)
    rows = [Row("t.py::a", "clip.mp4", "decoded", "PASS")]
    index = write_report(receipts / "report", rows, {}, root=tmp_path / "root")
    assert (outside / "keep.txt").read_text() == "keep"
    assert not index.parent.is_symlink()
    assert index.is_file()
    again = write_report(receipts / "report", [*rows, Row("t.py::b", "x", "bytes", "FAIL")], {})
    assert len(Parsed(again.read_text(encoding="utf-8")).rows) == 2
    assert sorted(p.name for p in receipts.iterdir()) == ["report"]


def test_a_receipts_folder_that_leaves_the_rootdir_is_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "receipts").symlink_to(tmp_path)
    with pytest.raises(PathOutsideRoot):
        write_report(root / "receipts" / "report", [], {}, root=root)


def test_a_section_that_cannot_be_drawn_says_why(tmp_path):
    row = Row("t.py::test_v", "clip.mp4", "decoded", "FAIL", "frame 3 differs")
    gate = {"artifact": "clip.mp4", "kind": "video", "gate": "decoded", "lossless": True}
    gate |= {"passed": False, "unit": "frame", "evidence": {"golden": {"stored": "digest"}}}
    index = write_report(tmp_path / "report", [row], {"t.py::test_v": _record({"gates": [gate]})})
    text = index.read_text(encoding="utf-8")
    assert "kept as digests only" in text
    assert "the obtained file is gone" in text


def test_hand_edited_blocks_of_every_kind_still_render(tmp_path):
    """#19: each block is read once into its record, leniently: what does not fit is named in
    its section, and a block that cannot be read at all says so; nothing raises."""
    rows = [
        Row("t.py::test_e", "clip.mp4", "decoded", "FAIL", "edited gate"),
        Row("t.py::test_e", "cmp", "exact", "FAIL", "edited comparison"),
        Row("t.py::test_e", "speed w", "ratio <= 0.9", "FAIL", "edited speed"),
        Row("t.py::test_e", "grid", "exact", "FAIL", "edited matrix"),
    ]
    gate = {"artifact": "clip.mp4", "kind": "video", "gate": "decoded", "lossless": "yes"}
    gate |= {"passed": False, "evidence": "not an object"}
    lossless = {"label": "cmp", "verdict": "MAYBE", "runs": "none", "candidate_comparison": 3}
    speed = {"verdict": "FAIL", "samples": [{"block": "x"}, {"block": 1, "arm": "control"}]}
    matrix = {"label": "grid", "axes": {"x": "not a list"}, "cells": 7}
    receipt = _record(
        {"gates": [gate], "lossless": [lossless], "speed": [speed], "matrix": [matrix]}
    )
    index = write_report(tmp_path / "report", rows, {"t.py::test_e": receipt})
    text = index.read_text(encoding="utf-8")
    assert "this section could not be drawn" not in text
    assert text.count("is read in part (edited?)") == 4
    assert "GateResult.lossless: expected bool" in text
    assert "LosslessVerdict.verdict" in text
    assert "SpeedVerdict.samples[0].block: expected int" in text
    assert "the receipt&#x27;s block for this check could not be read" in text or (
        "the receipt's block for this check could not be read" in text
    )


# ------------------------------------------------------------------ pictures


def test_a_png_is_valid_and_holds_the_pixels():
    rng = np.random.default_rng(3)
    picture = rng.integers(0, 256, size=(37, 53, 3), dtype=np.uint8)
    assert np.array_equal(_read_png(encode_png(picture)), picture)


@pytest.mark.slow
def test_ffmpeg_reads_our_png_as_we_wrote_it(tmp_path):
    picture = np.random.default_rng(4).integers(0, 256, size=(20, 30, 3), dtype=np.uint8)
    (tmp_path / "p.png").write_bytes(encode_png(picture))
    raw = subprocess.run(
        [
            imageio_ffmpeg.get_ffmpeg_exe(),
            "-v",
            "error",
            "-i",
            str(tmp_path / "p.png"),
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-",
        ],
        capture_output=True,
        check=True,
    ).stdout
    assert np.frombuffer(raw, dtype=np.uint8).reshape(20, 30, 3).tolist() == picture.tolist()


def _frame(width: int, height: int) -> np.ndarray:
    y = np.add.outer(np.arange(height), np.arange(width)) % 200
    return np.repeat(y.astype(np.uint8)[:, :, None], 3, axis=2)


@pytest.mark.parametrize(
    ("width", "height", "expected"),
    [(64, 48, (240, 800, 3)), (1920, 1080, (408, 1952, 3)), (7, 5, (208, 704, 3))],
)
def test_a_frame_picture_has_the_expected_size(width, height, expected):
    a = _frame(width, height)
    b = a.copy()
    b[height // 2, width // 3, 1] += 1
    picture, peak = frame_triptych(a, b, caption="frame 3, pts 3")
    assert picture.shape == expected
    assert peak == 1
    assert _read_png(encode_png(picture)).shape == expected
    # The one changed pixel stays visible in the difference panel, even shrunk to a third.
    panel_w = (expected[1] - 32) // 3
    panel = picture[32 + 8 :, 8 + 2 * (panel_w + 8) : 8 + 2 * (panel_w + 8) + panel_w]
    assert ((panel >= 128).all(axis=2)).any()


def test_the_difference_is_lit_exactly_where_pixels_changed():
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, size=(30, 40, 3), dtype=np.uint8)
    b = a.copy()
    changed = {(0, 0), (7, 13), (29, 39)}
    for r, c in changed:
        b[r, c, 2] ^= 1
    picture, peak = difference(a, b)
    lit = set(zip(*np.nonzero(picture[:, :, 0]), strict=True))
    assert {(int(r), int(c)) for r, c in lit} == changed
    assert peak == 1
    assert (picture[picture[:, :, 0] > 0] >= 128).all()


def test_a_missing_frame_is_drawn_as_missing():
    picture, peak = frame_triptych(_frame(64, 48), None, caption="frame 11")
    assert picture.shape == (240, 800, 3)
    assert peak == 0


def test_charts_are_svg_and_frames_stay_png():
    """#22: the charts (waveforms, histogram, speed) are inline SVG with real text (their
    raster versions, with the 3x5 font, are gone); a frame stays a PNG."""
    import xml.etree.ElementTree as ET

    wave = waveforms_svg(np.arange(600), np.arange(580), start=100, first=250, rate=None)
    samples = [from_json(Sample, s) for s in _speed_receipt()["speed"][0]["samples"]]
    charts = [
        wave,
        histogram_svg(np.linspace(-1, 1, 50), what="d", unit="u"),
        histogram_svg(np.array([np.nan]), what="d", unit="u"),
        speed_svg(samples, ratio=0.33, ci=(0.31, 0.35), target_ratio=0.7),
    ]
    for chart in charts:
        svg = ET.fromstring(chart)
        assert svg.tag == "{http://www.w3.org/2000/svg}svg"
        assert list(svg.iter("{http://www.w3.org/2000/svg}text"))
    frame, _ = frame_triptych(_frame(64, 48), _frame(64, 48), caption="frame 1")
    assert _read_png(encode_png(frame)).shape == frame.shape


def test_text_is_drawn_in_the_font():
    canvas = Canvas(40, 12)
    end = canvas.text(1, 1, "7")
    ink = (canvas.pixels != 255).any(axis=2)
    assert end == 1 + 8
    assert ink[1:3, 1:7].all()
    assert not ink[:, 8:].any()


def test_units_in_the_last_place():
    one = np.array([1.0], dtype=np.float32)
    assert max_ulps(one, np.nextafter(one, np.float32(2)), np.array([True])) == 1
    # Counted as the ulp gate counts: signed zeros 0 apart, a NaN has no distance.
    zeros = np.array([0.0, 5.0]), np.array([-0.0, 5.0])
    assert max_ulps(*zeros, np.array([True, False])) == 0
    big = np.array([-np.finfo(np.float64).max]), np.array([np.finfo(np.float64).max])
    assert max_ulps(*big, np.array([True])) == 2 * 0x7FEFFFFFFFFFFFFF
    nan = np.array([np.nan], dtype=np.float16), np.array([1.0], dtype=np.float16)
    assert max_ulps(*nan, np.array([True])) is None
    assert max_ulps(np.array([1, 2]), np.array([1, 3]), np.array([False, True])) is None


def test_the_report_needs_no_write_outside_its_folder(tmp_path):
    receipts = tmp_path / "receipts"
    receipts.mkdir()
    (receipts / "t.json").write_text("{}")
    write_report(receipts / "report", [Row("t.py::a", "x", "bytes", "PASS")], {})
    assert sorted(os.listdir(receipts)) == ["report", "t.json"]
    assert not list((receipts / "report").rglob("*.json"))  # never read back as a receipt


def test_golden_updates_are_listed_what_needs_a_look_first():
    events = [
        UpdateEvent("t.py::a", "goldens/t/a", "clip.mp4", "created"),
        UpdateEvent("t.py::b", "goldens/t/b", "", "conflict", HOSTILE),
    ]
    rows = [Row("t.py::a", "clip.mp4", "decoded", "CREATED"), Row("t.py::b", "x", "-", "CONFLICT")]
    text = page(rows, {}, events=events)
    parsed = Parsed(text)
    _no_script(parsed)
    assert [cells[0] for cells in parsed.rows] == ["CONFLICT", "CREATED"]
    updates = text[text.index("Golden updates") :]
    assert updates.index("conflict") < updates.index("created")
    assert "<code>goldens/t/b</code>" in updates  # a folder's event names no artifact


# ------------------------------------------------------------------ #22: said once, with reasons


def test_a_golden_missing_message_appears_once(tmp_path):
    message = "no golden 'x.npy' in goldens/t/test_m: run with --update-goldens to create it"
    row = Row("t.py::test_m", "x.npy", "default", "ERROR", f"GoldenMissing: {message}")
    entry = {"artifact": "x.npy", "error": "GoldenMissing", "message": message, "passed": False}
    index = write_report(tmp_path / "report", [row], {"t.py::test_m": _record({"gates": [entry]})})
    text = index.read_text(encoding="utf-8")
    assert text.count("run with --update-goldens to create it") == 1


def test_an_artifact_not_copied_says_why(tmp_path):
    from pytest_lossless.report.blocks import Assets

    clip = tmp_path / "obtained.mp4"
    clip.write_bytes(b"\0" * 10)
    (tmp_path / "report").mkdir()
    name, src, note = Assets(tmp_path / "report").copy(str(clip))
    assert (name, src) == ("obtained.mp4", None)
    assert note.startswith("not copied (only pictures and listings, .png, .txt, are copied")
    assert ".mp4 is left where the test wrote it" in note
    assert str(clip) in note


def test_table_cells_never_break_mid_word(tmp_path):
    """``overflow-wrap: anywhere`` on every cell broke "elementwise" as "elementwi se": only
    the long ids may break anywhere."""
    import re

    from pytest_lossless.report.html import _STYLE

    style = re.sub(r"/\*.*?\*/", "", _STYLE, flags=re.S)
    rules = {
        selector.strip(): body
        for selector, body in (r.split("{", 1) for r in style.split("}") if "{" in r)
    }
    assert "anywhere" not in rules["td"]
    assert "word-break: normal" in rules["td"]
    assert "overflow-wrap: anywhere" in rules["td.test, td code"]


def test_frames_at_the_same_time_in_other_time_bases_are_not_drawn_as_differing() -> None:
    """The report draws the frames the gate would call different: digest and exact time, so a
    remux into another time base (1/24 vs 1/12288) is no frame difference, a later one is."""
    from pytest_lossless.media.container import FrameDigest
    from pytest_lossless.report.mismatch import _moment

    same = _moment(FrameDigest(5, "ab"), "1/24"), _moment(FrameDigest(2560, "ab"), "1/12288")
    assert same[0] == same[1]
    assert _moment(FrameDigest(6, "ab"), "1/24") != same[0]
    assert _moment(FrameDigest(5, "cd"), "1/24") != same[0]
    assert _moment(FrameDigest(5, "ab"), None) == ("ab", 5)
    assert _moment(None, "1/24") is None
