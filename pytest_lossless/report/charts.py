"""The report's charts as inline SVG: real text, axes with ticks, and units on every axis.

- :func:`histogram_svg`: how large the differences of a tensor's differing elements are;
- :func:`waveforms_svg`: golden, obtained and difference waveforms of one window of audio;
- :func:`speed_svg`: every block's paired times, then the per-block ratios with the estimate,
  its interval and the target line.

Frames stay raster (:mod:`.pictures`): a frame is pixels. A chart is numbers, drawn here as
text and lines the browser renders at any size. Every text is escaped, and the drawing is as
wide as its longest label needs: a label is never clipped. Diagnostics, never gates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

import numpy as np
import numpy.typing as npt

from ..speed.runner import Sample

#: How far one character of the 11 px labels advances, at most (a wide sans-serif letter).
CHAR = 6.6
FONT = 11
BLUE, ORANGE, RED, GREY, BAND = "#1f77b4", "#e07000", "#c81e1e", "#888", "#dde8f7"


def text_extent(text: str) -> float:
    """The width a label may take, in px (an upper bound: never clipped)."""
    return len(text) * CHAR


def number(value: float) -> str:
    """A tick or a figure: an integer as one, else 4 significant digits."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round ticks (1, 2 or 5 times a power of ten) from ``low`` to ``high``."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(0.0 if abs(value) < step * 1e-9 else value)
        value += step
    return ticks


class Plot:
    """One panel: a frame with ticks and axis titles at ``(left, top)``, ``width`` x ``height``,
    mapping ``x_range`` and ``y_range`` onto it."""

    def __init__(
        self,
        chart: Chart,
        left: float,
        top: float,
        width: float,
        height: float,
        x_range: tuple[float, float],
        y_range: tuple[float, float],
    ) -> None:
        self.chart, self.left, self.top, self.width, self.height = chart, left, top, width, height
        self.x_range = x_range if x_range[1] > x_range[0] else (x_range[0] - 0.5, x_range[0] + 0.5)
        self.y_range = y_range if y_range[1] > y_range[0] else (y_range[0] - 0.5, y_range[0] + 0.5)

    def x(self, value: float) -> float:
        low, high = self.x_range
        return self.left + (value - low) / (high - low) * self.width

    def y(self, value: float) -> float:
        low, high = self.y_range
        return self.top + self.height - (value - low) / (high - low) * self.height

    def axes(self, x_title: str, y_title: str, *, x_ticks: bool = True) -> None:
        """The frame, the ticks of both axes with their numbers, and each axis's title."""
        c, bottom = self.chart, self.top + self.height
        c.rect(self.left, self.top, self.width, self.height, fill="none", stroke=GREY)
        for tick in nice_ticks(*self.y_range):
            y = self.y(tick)
            c.line(self.left - 4, y, self.left, y, GREY)
            c.line(self.left, y, self.left + self.width, y, "#eee")
            c.text(self.left - 6, y + 4, number(tick), anchor="end")
        if x_ticks:
            for tick in nice_ticks(*self.x_range):
                x = self.x(tick)
                c.line(x, bottom, x, bottom + 4, GREY)
                c.text(x, bottom + 16, number(tick), anchor="middle")
            c.text(self.left + self.width / 2, bottom + 32, x_title, anchor="middle")
        c.text(self.left, self.top - 8, y_title)


class Chart:
    """An SVG drawing that grows to hold every label given to it."""

    def __init__(self, width: float, height: float) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = []
        self.reach = 0.0

    def text(
        self, x: float, y: float, text: str, *, anchor: str = "start", colour: str = ""
    ) -> None:
        extent = text_extent(text)
        start = {"start": x, "middle": x - extent / 2, "end": x - extent}[anchor]
        if start < 0:  # never clipped on the left: moved right as far as needed
            x -= start
            start = 0
        self.reach = max(self.reach, start + extent)
        fill = f' fill="{colour}"' if colour else ""
        self.parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{fill}>{escape(text)}</text>'
        )

    def line(
        self, x1: float, y1: float, x2: float, y2: float, colour: str, *, dash: str = ""
    ) -> None:
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{colour}"{dashed}/>'
        )

    def rect(
        self, x: float, y: float, w: float, h: float, *, fill: str, stroke: str = "none"
    ) -> None:
        self.parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
            f'fill="{fill}" stroke="{stroke}"/>'
        )

    def polyline(self, xs: Sequence[float], ys: Sequence[float], colour: str) -> None:
        points = " ".join(f"{x:.2f},{y:.2f}" for x, y in zip(xs, ys, strict=True))
        self.parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{points}"/>'
        )

    def dot(self, x: float, y: float, colour: str, title: str = "", radius: float = 3) -> None:
        tip = f"<title>{escape(title)}</title>" if title else ""
        self.parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius}" fill="{colour}">{tip}</circle>'
        )

    def cross(self, x: float, y: float, colour: str, title: str = "") -> None:
        tip = f"<title>{escape(title)}</title>" if title else ""
        self.parts.append(
            f'<path d="M{x - 4:.1f},{y - 4:.1f}L{x + 4:.1f},{y + 4:.1f}M{x - 4:.1f},'
            f'{y + 4:.1f}L{x + 4:.1f},{y - 4:.1f}" stroke="{colour}" stroke-width="1.5">'
            f"{tip}</path>"
        )

    def markup(self, label: str) -> str:
        """The ``<svg>`` element, as wide as its widest label needs."""
        width = math.ceil(max(self.width, self.reach + 4))
        height = math.ceil(self.height)
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{escape(label, quote=True)}" font-size="{FONT}">'
            f"{''.join(self.parts)}</svg>"
        )


def histogram_svg(
    values: npt.NDArray[Any], *, what: str, unit: str, bins: int = 41, width: int = 640
) -> str:
    """A histogram of ``values`` (the differences of the differing elements; non-finite ones
    are left out, the caller counts them): ``what`` the quantity (``obtained - golden``),
    ``unit`` its unit (``value of a float32 element``), both on the x axis; the y axis counts
    elements per bin, and the bin width is said."""
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    data = data[np.isfinite(data)]
    chart = Chart(width, 260)
    plot = Plot(chart, 64, 36, width - 64 - 24, 170, (0.0, 1.0), (0.0, 1.0))
    x_title = f"{what} ({unit})"
    if not data.size:
        plot.axes(x_title, "elements per bin", x_ticks=False)
        chart.text(plot.left + 8, plot.top + 20, "no finite difference", colour=GREY)
        return chart.markup(f"histogram of {what}: no finite difference")
    low, high = float(data.min()), float(data.max())
    if low == high:  # one value: one bar, centred, one unit of the value's size either side
        pad = abs(low) * 0.5 or 0.5
        low, high = low - pad, high + pad
    counts, edges = np.histogram(data, bins=bins, range=(low, high))
    tallest = int(counts.max())
    plot.x_range, plot.y_range = (low, high), (0.0, float(tallest))
    bar = plot.width / bins
    for i, count in enumerate(counts):
        if count:
            top = plot.y(float(count))
            chart.rect(
                plot.left + i * bar + 0.5, top, bar - 1, plot.top + plot.height - top, fill=BLUE
            )
    if low < 0 < high:
        chart.line(plot.x(0.0), plot.top, plot.x(0.0), plot.top + plot.height, RED, dash="4 3")
    plot.axes(x_title, "elements per bin")
    step = float(edges[1] - edges[0])
    chart.text(
        plot.left + plot.width,
        plot.top - 8,
        f"{data.size} elements, {bins} bins of {number(step)}, from {number(float(edges[0]))} "
        f"to {number(float(edges[-1]))}",
        anchor="end",
    )
    return chart.markup(f"histogram of {what}")


def waveforms_svg(
    left: npt.NDArray[Any],
    right: npt.NDArray[Any],
    *,
    start: int,
    first: int | None,
    rate: int | None,
    labels: tuple[str, str] = ("golden", "obtained"),
    unit: str = "sample value",
    width: int = 900,
    strip: int = 100,
) -> str:
    """Golden, obtained and (obtained - golden) waveforms of one window of one channel, each a
    strip with its value axis (``unit``); the x axis counts samples (and seconds, given the
    ``rate``); ``first``, the first differing sample, is the dashed red line."""
    a = np.asarray(left, dtype=np.float64).reshape(-1)
    b = np.asarray(right, dtype=np.float64).reshape(-1)
    count = max(a.size, b.size, 1)
    n = min(a.size, b.size)
    delta = b[:n] - a[:n]
    finite = [v[np.isfinite(v)] for v in (a, b, delta)]
    peak = max((float(np.abs(v).max()) for v in finite[:2] if v.size), default=1.0) or 1.0
    dpeak = (float(np.abs(finite[2]).max()) if finite[2].size else 0.0) or 1.0
    gap = 30
    chart = Chart(width, 3 * (strip + gap) + 56)
    x_range = (float(start), float(start + count - 1))
    strips = (
        (np.nan_to_num(a), peak, BLUE, f"{labels[0]} ({unit})"),
        (np.nan_to_num(b), peak, ORANGE, f"{labels[1]} ({unit})"),
        (np.nan_to_num(delta), dpeak, RED, f"{labels[1]} - {labels[0]} ({unit})"),
    )
    top = 24.0
    for i, (values, scale, colour, title) in enumerate(strips):
        plot = Plot(chart, 72, top, width - 72 - 24, strip, x_range, (-scale, scale))
        last = i == len(strips) - 1
        seconds = f"; {number(start / rate)} s to {number((start + count - 1) / rate)} s" if (
            rate
        ) else ""  # fmt: skip
        plot.axes(f"sample index{seconds}", title, x_ticks=last)
        if first is not None and start <= first < start + count:
            x = plot.x(float(first))
            chart.line(x, plot.top, x, plot.top + plot.height, RED, dash="4 3")
            if i == 0:
                chart.text(x + 4, plot.top + 12, f"first difference, sample {first}", colour=RED)
        if values.size:
            xs = [plot.x(float(start + k)) for k in range(values.size)]
            ys = [plot.y(float(v)) for v in values]
            chart.polyline(xs, ys, colour)
        top += strip + gap
    return chart.markup(f"waveforms from sample {start}")


def block_ratios(samples: Sequence[Sample]) -> dict[int, float]:
    """Candidate/control ratio of each complete block: exp(mean log candidate - mean log
    control), the quantity the speed gate's interval is about."""
    arms: dict[int, dict[str, list[float]]] = {}
    for s in samples:
        seconds = s.seconds
        if s.error is not None or seconds is None or seconds <= 0:
            continue
        arms.setdefault(s.block, {"control": [], "candidate": []}).setdefault(s.arm, []).append(
            float(seconds)
        )
    ratios = {}
    for block, times in sorted(arms.items()):
        control, candidate = times.get("control", []), times.get("candidate", [])
        if control and candidate:
            log = sum(map(math.log, candidate)) / len(candidate)
            log -= sum(map(math.log, control)) / len(control)
            ratios[block] = math.exp(log)
    return ratios


def speed_svg(
    samples: Sequence[Sample],
    *,
    ratio: float | None,
    ci: Sequence[float] | None,
    target_ratio: float,
    width: int = 820,
    panel: int = 170,
) -> str:
    """Every block's paired samples (control and candidate, in seconds; an arm that raised is
    a cross), then each block's candidate/control ratio with the estimate (blue), its interval
    (shaded), the target (dashed red) and 1.0, no change (dotted grey)."""
    usable = list(samples)
    blocks = sorted({s.block for s in usable})
    chart = Chart(width, 2 * panel + 150)
    x_range = (min(blocks, default=0) - 0.5, max(blocks, default=0) + 0.5)
    times = [float(s.seconds) for s in usable if s.seconds is not None]
    seconds = Plot(chart, 72, 28, width - 72 - 24, panel, x_range, (0.0, max(times, default=1.0)))
    seconds.y_range = (0.0, nice_ticks(0.0, seconds.y_range[1] * 1.05)[-1] or 1.0)
    seconds.axes("block", "seconds per arm (control, candidate)")
    chart.text(seconds.left + seconds.width, seconds.top - 8, "control", anchor="end", colour=BLUE)
    chart.text(
        seconds.left + seconds.width - text_extent("control "),
        seconds.top - 8,
        "candidate",
        anchor="end",
        colour=ORANGE,
    )
    for s in usable:
        control = s.arm == "control"
        x = seconds.x(float(s.block)) + (-0.15 if control else 0.15) * seconds.width / max(
            len(blocks), 1
        )
        value = s.seconds
        title = f"block {s.block}, {s.arm}"
        if s.error is not None or value is None:
            chart.cross(x, seconds.top + 8, RED, f"{title}: raised {s.error}")
            continue
        chart.dot(x, seconds.y(float(value)), BLUE if control else ORANGE, f"{title}: {value} s")
    ratios = block_ratios(usable)
    marks = [*ratios.values(), target_ratio, 1.0]
    marks += [ratio] if ratio is not None else []
    marks += [float(v) for v in ci] if ci is not None else []
    finite = [m for m in marks if math.isfinite(m)]
    low, high = min(finite), max(finite)
    pad = (high - low) * 0.1 or 0.1
    plot = Plot(
        chart,
        72,
        28 + panel + 72,
        width - 72 - 24,
        panel,
        x_range,
        (max(0.0, low - pad), high + pad),
    )
    if ci is not None and len(ci) == 2:
        top, bottom = plot.y(float(ci[1])), plot.y(float(ci[0]))
        chart.rect(plot.left, top, plot.width, bottom - top, fill=BAND)
    plot.axes("block", "candidate/control time ratio per block (1 = no change)")
    right = plot.left + plot.width
    chart.line(plot.left, plot.y(1.0), right, plot.y(1.0), GREY, dash="2 2")
    chart.line(plot.left, plot.y(target_ratio), right, plot.y(target_ratio), RED, dash="6 3")
    chart.text(right - 4, plot.y(target_ratio) - 4, f"target <= {target_ratio:.3f}", anchor="end",
               colour=RED)  # fmt: skip
    if ratio is not None and math.isfinite(ratio):
        chart.line(plot.left, plot.y(ratio), right, plot.y(ratio), BLUE)
        interval = f" [{float(ci[0]):.3f}, {float(ci[1]):.3f}]" if ci is not None else ""
        chart.text(plot.left + 4, plot.y(ratio) - 4, f"estimate {ratio:.3f}{interval}",
                   colour=BLUE)  # fmt: skip
    for block, value in ratios.items():
        chart.dot(plot.x(float(block)), plot.y(value), "#1a1a1a", f"block {block}: {value:.3f}")
    return chart.markup("speed: seconds per arm and ratio per block")
