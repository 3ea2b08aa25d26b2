"""The report's charts (#22): inline SVG with real text, axes and units, every label inside the
drawing, and the difference strip of audio off its zero line exactly at the changed samples
(the test the raster waveform had, on the SVG's own coordinates)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np

from pytest_lossless.core.records import from_json
from pytest_lossless.report.charts import (
    RED,
    histogram_svg,
    nice_ticks,
    speed_svg,
    text_extent,
    waveforms_svg,
)
from pytest_lossless.speed.runner import Sample

NS = "{http://www.w3.org/2000/svg}"


def _parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)


def _texts(svg: ET.Element) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{NS}text")]


def _assert_no_label_clipped(svg: ET.Element) -> None:
    width = float(svg.get("width") or 0)
    height = float(svg.get("height") or 0)
    assert svg.get("viewBox") == f"0 0 {svg.get('width')} {svg.get('height')}"
    for text in svg.iter(f"{NS}text"):
        x, y, extent = (
            float(text.get("x") or 0),
            float(text.get("y") or 0),
            text_extent(text.text or ""),
        )
        start = {"start": x, "middle": x - extent / 2, "end": x - extent}[
            text.get("text-anchor") or "start"
        ]
        assert start >= 0, text.text
        assert start + extent <= width, (text.text, start + extent, width)
        assert 0 < y <= height, text.text


def test_a_histogram_of_one_element_has_axes_units_and_its_bin() -> None:
    svg = _parse(
        histogram_svg(
            np.array([2.5e-7]),
            what="obtained - golden",
            unit="difference of float32 element values",
        )
    )
    texts = _texts(svg)
    assert "obtained - golden (difference of float32 element values)" in texts
    assert "elements per bin" in texts
    assert any(t.startswith("1 elements, 41 bins of") for t in texts)
    assert (
        len([t for t in texts if t.replace(".", "").replace("-", "").replace("e", "").isdigit()])
        >= 4
    )  # tick numbers
    assert len(list(svg.iter(f"{NS}rect"))) >= 2  # the frame and the one bar
    _assert_no_label_clipped(svg)


def test_long_labels_widen_the_drawing_and_text_is_escaped() -> None:
    what = "<obtained> & " + "x" * 150
    svg_text = histogram_svg(np.linspace(-1, 1, 50), what=what, unit="units")
    assert "<obtained>" not in svg_text
    svg = _parse(svg_text)
    assert float(svg.get("width") or 0) > 640
    _assert_no_label_clipped(svg)
    _assert_no_label_clipped(_parse(histogram_svg(np.array([np.nan]), what="d", unit="u")))


def test_the_audio_difference_leaves_the_zero_line_only_at_changed_samples() -> None:
    count = 200
    rng = np.random.default_rng(7)
    golden = rng.integers(-20000, 20000, size=count).astype(np.int16)
    obtained = golden.copy()
    changed = [0, 57, 58, 140, count - 1]
    for i, delta in zip(changed, (1, 900, -900, 3000, -1), strict=True):
        obtained[i] = golden[i] + delta
    start = 1000
    svg = _parse(
        waveforms_svg(
            golden, obtained, start=start, first=start, rate=48000, unit="sample value, int16"
        )
    )
    lines = [p for p in svg.iter(f"{NS}polyline")]
    assert [p.get("stroke") for p in lines][2] == RED  # golden, obtained, then the difference
    points = [tuple(map(float, pair.split(","))) for pair in (lines[2].get("points") or "").split()]
    assert len(points) == count
    zero = np.median([y for _, y in points])
    off = {k for k, (_, y) in enumerate(points) if abs(y - zero) > 1e-6}
    assert off == set(changed)
    # The golden strip is drawn in its own colour, never the difference's.
    assert lines[0].get("stroke") != RED
    texts = _texts(svg)
    assert "first difference, sample 1000" in texts
    assert any(t.startswith("sample index; ") and t.endswith(" s") for t in texts)
    assert "golden (sample value, int16)" in texts
    _assert_no_label_clipped(svg)


def test_the_speed_chart_draws_the_target_and_the_estimate_with_units() -> None:
    samples = [
        {"block": b, "arm": arm, "seconds": s}
        for b in range(4)
        for arm, s in (("control", 0.030 + b / 1000), ("candidate", 0.010 + b / 1000))
    ] + [{"block": 4, "arm": "candidate", "seconds": None, "error": "boom"}]
    records = [from_json(Sample, s, problems=[]) for s in samples]  # as the report reads them
    svg = _parse(speed_svg(records, ratio=0.33, ci=(0.31, 0.35), target_ratio=0.7))
    texts = _texts(svg)
    assert "seconds per arm (control, candidate)" in texts
    assert "candidate/control time ratio per block (1 = no change)" in texts
    assert "target <= 0.700" in texts
    assert "estimate 0.330 [0.310, 0.350]" in texts
    dashed_red = [
        line
        for line in svg.iter(f"{NS}line")
        if line.get("stroke") == RED and line.get("stroke-dasharray")
    ]
    assert dashed_red
    assert len([c for c in svg.iter(f"{NS}circle")]) == 8 + 4  # 8 arms, 4 block ratios
    assert len(list(svg.iter(f"{NS}path"))) == 1  # the arm that raised, a cross
    _assert_no_label_clipped(svg)


def test_nice_ticks() -> None:
    assert nice_ticks(0, 10) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(-1, 1) == [-1, -0.5, 0, 0.5, 1]
    assert nice_ticks(3, 3) == [3]
