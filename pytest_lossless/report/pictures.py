"""The report's pictures, rasterised with numpy: what a reviewer looks at instead of the files.

- :func:`frame_triptych`: golden | obtained | amplified difference of one frame, captioned;
- :func:`waveforms`: golden, obtained and difference waveforms of one window of audio;
- :func:`histogram`: how large the differences of a tensor are;
- :func:`speed_plot`: every block's paired times, the per-block ratios, the estimate, its
  interval and the target line.

Each returns an ``(height, width, 3)`` uint8 picture (see :func:`.raster.encode_png`). The
pictures are diagnostics, never gates: nothing here decides a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .raster import (
    BAND,
    BLACK,
    BLUE,
    GREY,
    LIGHT,
    ORANGE,
    RED,
    Canvas,
    Color,
    Picture,
    text_height,
    text_width,
)

#: A panel of a frame picture is scaled into these bounds (small clips are enlarged).
PANEL_MAX = (640, 480)
PANEL_MIN_WIDTH = 256
_MARGIN = 8
_LINE = text_height() + 6
#: How far one character of the labels advances.
_ADVANCE = text_width("xx") - text_width("x")


def difference(a: Picture, b: Picture) -> tuple[Picture, int]:
    """An amplified difference picture of two RGB frames, and the largest difference (levels).

    A pixel is black where the frames agree and at least mid-grey where any channel differs
    (a one-level change is visible), white at the largest difference.
    """
    spread = np.maximum(a, b) - np.minimum(a, b)  # |a - b| in uint8, without a wider copy
    diff = np.maximum(np.maximum(spread[:, :, 0], spread[:, :, 1]), spread[:, :, 2])
    peak = int(diff.max()) if diff.size else 0
    scaled = np.where(diff > 0, 128 + (diff.astype(np.int32) * 127) // max(peak, 1), 0)
    return np.repeat(scaled.astype(np.uint8)[:, :, None], 3, axis=2), peak


def _scale(width: int, height: int) -> tuple[int, int]:
    """(down, up): the integer factors that bring a frame into the panel bounds."""
    max_w, max_h = PANEL_MAX
    if width > max_w or height > max_h:
        return max(math.ceil(width / max_w), math.ceil(height / max_h)), 1
    return 1, max(1, min(32, PANEL_MIN_WIDTH // max(width, 1), max_h // max(height, 1)))


def fit(picture: Picture, down: int, up: int, *, keep_peaks: bool = False) -> Picture:
    """Shrink by ``down`` (block means, or block maxima with ``keep_peaks``, so that a single
    differing pixel stays visible), then enlarge by ``up`` (each pixel a square)."""
    if down > 1:
        h, w = picture.shape[:2]
        padded = np.pad(picture, ((0, -h % down), (0, -w % down), (0, 0)), mode="edge")
        # One strided view per position in the block: far faster than reducing a 5-d reshape.
        views = [padded[i::down, j::down] for i in range(down) for j in range(down)]
        if keep_peaks:
            picture = np.maximum.reduce(views)
        else:
            total = np.zeros(views[0].shape, dtype=np.uint32)
            for view in views:
                total += view
            picture = ((total + len(views) // 2) // len(views)).astype(np.uint8)
    if up > 1:
        picture = np.repeat(np.repeat(picture, up, axis=0), up, axis=1)
    return picture


def frame_triptych(
    left: Picture | None,
    right: Picture | None,
    *,
    caption: str,
    labels: tuple[str, str] = ("golden", "obtained"),
    missing: tuple[str, str] = ("no such frame", "no such frame"),
) -> tuple[Picture, int]:
    """Golden | obtained | amplified difference of one frame, side by side under ``caption``
    (a side without the frame is a grey panel saying why: ``missing``); returns the picture
    and the largest difference in levels (0 when a side is missing)."""
    shape = left if left is not None else right
    if shape is None:
        raise ValueError("frame_triptych needs at least one frame")
    height, width = int(shape.shape[0]), int(shape.shape[1])
    down, up = _scale(width, height)
    panels: list[Picture | None] = [
        None if side is None or side.shape != shape.shape else fit(side, down, up)
        for side in (left, right)
    ]
    peak = 0
    box: tuple[int, int, int, int] | None = None
    if left is not None and right is not None and left.shape == right.shape:
        diff, peak = difference(left, right)
        panels.append(fit(diff, down, up, keep_peaks=True))
        rows, cols = np.nonzero(diff[:, :, 0])
        if rows.size:
            box = (
                int(cols.min()) // down * up,
                int(rows.min()) // down * up,
                (int(cols.max()) // down + 1) * up - 1,
                (int(rows.max()) // down + 1) * up - 1,
            )
    else:
        panels.append(None)
    ph, pw = (math.ceil(height / down) * up, math.ceil(width / down) * up)
    canvas = Canvas(
        max(3 * pw + 4 * _MARGIN, text_width(caption) + 2 * _MARGIN), ph + 2 * _LINE + 2 * _MARGIN
    )
    canvas.text(_MARGIN, _MARGIN, caption)
    gain = f"difference, max {peak}" if peak else "difference"
    top = _MARGIN + 2 * _LINE
    for n, (label, panel) in enumerate(zip((*labels, gain), panels, strict=True)):
        x = _MARGIN + n * (pw + _MARGIN)
        shown = label[: max(1, (pw + _MARGIN) // text_width("x "))]  # within its panel
        canvas.text(x, _MARGIN + _LINE, shown, BLUE if n == 0 else ORANGE if n == 1 else RED)
        if panel is None:
            canvas.box(x, top, x + pw - 1, top + ph - 1, LIGHT)
            what = missing[n] if n < 2 else "not comparable"
            canvas.text(x + 4, top + 4, what, GREY)
        else:
            canvas.paste(x, top, panel)
        canvas.frame(x - 1, top - 1, x + pw, top + ph, GREY)
    if box is not None:
        x = _MARGIN + 2 * (pw + _MARGIN)
        x0, y0, x1, y1 = box
        canvas.frame(x + x0 - 3, top + y0 - 3, x + x1 + 3, top + y1 + 3, RED)
    return canvas.pixels, peak


def _strip(
    canvas: Canvas,
    top: int,
    height: int,
    values: npt.NDArray[np.float64],
    start: int,
    count: int,
    peak: float,
    color: Color,
    label: str,
    marker: int | None,
) -> None:
    """One waveform strip: a zero line, the samples joined, the first difference marked."""
    left, width = _MARGIN, canvas.width - 2 * _MARGIN
    canvas.text(left, top, label, color)
    top += _LINE
    canvas.frame(left - 1, top - 1, left + width, top + height, GREY)
    middle = top + height / 2
    canvas.line(left, middle, left + width - 1, middle, LIGHT)
    step = (width - 1) / max(count - 1, 1)
    if marker is not None:
        mx = left + (marker - start) * step
        canvas.line(mx, top, mx, top + height - 1, RED, dash=3)
    if values.size:
        xs = left + np.arange(values.size) * step
        ys = middle - values / (peak or 1.0) * (height / 2 - 2)
        canvas.polyline(xs, ys, color)


def waveforms(
    left: npt.NDArray[Any],
    right: npt.NDArray[Any],
    *,
    start: int,
    first: int | None,
    caption: str,
    labels: tuple[str, str] = ("golden", "obtained"),
    width: int = 900,
    strip: int = 110,
) -> Picture:
    """Golden, obtained and (obtained - golden) waveforms of one window of one channel.

    ``left``/``right``: the window's samples (either may be shorter: a truncated track);
    ``start``: the index of their first sample; ``first``: the first differing sample, marked
    with a dashed line. The two sides share one scale; the difference has its own.
    """
    a = np.asarray(left, dtype=np.float64).reshape(-1)
    b = np.asarray(right, dtype=np.float64).reshape(-1)
    count = max(a.size, b.size, 1)
    n = min(a.size, b.size)
    delta = b[:n] - a[:n]
    finite = [v[np.isfinite(v)] for v in (a, b, delta)]
    peak = max((float(np.abs(v).max()) for v in finite[:2] if v.size), default=1.0)
    dpeak = float(np.abs(finite[2]).max()) if finite[2].size else 0.0
    canvas = Canvas(width, _MARGIN * 2 + _LINE * 2 + 3 * (strip + _LINE + _MARGIN))
    canvas.text(_MARGIN, _MARGIN, caption)
    top = _MARGIN + _LINE
    rows = (
        (np.nan_to_num(a), peak, BLUE, labels[0]),
        (np.nan_to_num(b), peak, ORANGE, labels[1]),
        (np.nan_to_num(delta), dpeak, RED, f"difference, max |d| = {_number(dpeak)}"),
    )
    for values, scale, color, label in rows:
        _strip(canvas, top, strip, values, start, count, scale, color, label, first)
        top += strip + _LINE + _MARGIN
    canvas.text(_MARGIN, top, f"sample {start}")
    end = f"sample {start + count - 1}"
    canvas.text(width - _MARGIN - text_width(end), top, end)
    return canvas.pixels


def histogram(
    values: npt.NDArray[Any], *, caption: str, bins: int = 41, width: int = 640, height: int = 220
) -> Picture:
    """A histogram of ``values`` (the differences of the differing elements; non-finite ones
    are left out and should be counted by the caller), with the range and the tallest count."""
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    data = data[np.isfinite(data)]
    canvas = Canvas(width, height + 3 * _LINE + 2 * _MARGIN)
    canvas.text(_MARGIN, _MARGIN, caption)
    top, left, plot_w = _MARGIN + _LINE, _MARGIN, width - 2 * _MARGIN
    canvas.frame(left - 1, top - 1, left + plot_w, top + height, GREY)
    if not data.size:
        canvas.text(left + 4, top + 4, "no finite difference", GREY)
        return canvas.pixels
    low, high = float(data.min()), float(data.max())
    if low == high:
        low, high = low - 0.5, high + 0.5
    counts, edges = np.histogram(data, bins=bins, range=(low, high))
    tallest = int(counts.max())
    bar = plot_w / bins
    for i, count in enumerate(counts):
        if count:
            h = max(1, round(int(count) / tallest * (height - 4)))
            x0 = left + i * bar
            canvas.box(x0 + 1, top + height - h, x0 + bar - 1, top + height - 1, BLUE)
    if low < 0 < high:
        zx = left + (0 - low) / (high - low) * (plot_w - 1)
        canvas.line(zx, top, zx, top + height - 1, RED, dash=3)
    canvas.text(
        left + plot_w - text_width(f"max count {tallest}") - 2, top + 3, f"max count {tallest}"
    )
    below = top + height + 4
    canvas.text(left, below, _number(float(edges[0])))
    right = _number(float(edges[-1]))
    canvas.text(left + plot_w - text_width(right), below, right)
    return canvas.pixels


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


def block_ratios(samples: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """Candidate/control ratio of each complete block: exp(mean log candidate - mean log
    control), the quantity the speed gate's interval is about."""
    arms: dict[int, dict[str, list[float]]] = {}
    for s in samples:
        seconds = s.get("seconds")
        if s.get("error") is not None or not isinstance(seconds, (int, float)) or seconds <= 0:
            continue
        if not isinstance(s.get("block"), int):
            continue
        arms.setdefault(int(s["block"]), {"control": [], "candidate": []}).setdefault(
            str(s.get("arm")), []
        ).append(float(seconds))
    ratios = {}
    for block, times in sorted(arms.items()):
        control, candidate = times.get("control", []), times.get("candidate", [])
        if control and candidate:
            log = sum(map(math.log, candidate)) / len(candidate)
            log -= sum(map(math.log, control)) / len(control)
            ratios[block] = math.exp(log)
    return ratios


def speed_plot(
    samples: Sequence[Mapping[str, Any]],
    *,
    ratio: float | None,
    ci: Sequence[float] | None,
    target_ratio: float,
    caption: str,
    width: int = 820,
    panel: int = 180,
) -> Picture:
    """Every block's paired samples (control and candidate seconds, errored arms as crosses),
    then each block's candidate/control ratio with the estimate, its interval (shaded) and the
    target line (dashed red); the ratio 1.0 (no change) is the dotted grey line."""
    usable = [s for s in samples if isinstance(s.get("block"), int)]
    blocks = sorted({int(s["block"]) for s in usable})
    canvas = Canvas(width, _MARGIN * 3 + _LINE * 5 + 2 * panel)
    canvas.text(_MARGIN, _MARGIN, caption)
    left, plot_w = _MARGIN + 60, width - 2 * _MARGIN - 60
    count = max(len(blocks), 1)
    slot = plot_w / count
    column = {b: left + (i + 0.5) * slot for i, b in enumerate(blocks)}
    # Panel 1: seconds of every arm, block by block.
    top = _MARGIN + 2 * _LINE
    canvas.text(left, top - _LINE, "seconds per arm: control", BLUE)
    canvas.text(left + text_width("seconds per arm: control "), top - _LINE, "candidate", ORANGE)
    times = [float(s["seconds"]) for s in usable if isinstance(s.get("seconds"), (int, float))]
    most = max(times, default=1.0) * 1.1 or 1.0
    canvas.frame(left - 1, top - 1, left + plot_w, top + panel, GREY)
    canvas.text(_MARGIN, top, _number(most))
    canvas.text(_MARGIN, top + panel - text_height(), "0")
    for s in usable:
        x = column[int(s["block"])] + (-slot / 6 if s.get("arm") == "control" else slot / 6)
        seconds = s.get("seconds")
        color = BLUE if s.get("arm") == "control" else ORANGE
        if s.get("error") is not None or not isinstance(seconds, (int, float)):
            canvas.cross(x, top + 6, RED)
            continue
        canvas.dot(x, top + panel - 1 - float(seconds) / most * (panel - 2), color)
    # Panel 2: the per-block ratios against the estimate, the interval and the target.
    top += panel + _MARGIN + 2 * _LINE
    ratios = block_ratios(usable)
    marks = [*ratios.values(), target_ratio, 1.0]
    if ratio is not None:
        marks.append(ratio)
    if ci is not None:
        marks += [float(v) for v in ci]
    finite = [m for m in marks if math.isfinite(m)]
    low, high = min(finite), max(finite)
    pad = (high - low) * 0.1 or 0.1
    low, high = max(0.0, low - pad), high + pad

    def y(value: float) -> float:
        return top + panel - 1 - (value - low) / (high - low) * (panel - 2)

    canvas.text(left, top - _LINE, "candidate/control per block, estimate and interval", BLACK)
    canvas.frame(left - 1, top - 1, left + plot_w, top + panel, GREY)
    if ci is not None and len(ci) == 2:
        canvas.box(left, y(float(ci[1])), left + plot_w - 1, y(float(ci[0])), BAND)
    canvas.line(left, y(1.0), left + plot_w - 1, y(1.0), GREY, dash=2)
    canvas.line(left, y(target_ratio), left + plot_w - 1, y(target_ratio), RED, dash=6)
    canvas.text(_MARGIN, y(target_ratio) - text_height() / 2, _number(round(target_ratio, 3)), RED)
    canvas.text(_MARGIN, y(1.0) - text_height() / 2, "1", GREY)
    if ratio is not None and math.isfinite(ratio):
        canvas.line(left, y(ratio), left + plot_w - 1, y(ratio), BLUE)
    for block, value in ratios.items():
        canvas.dot(column[block], y(value), BLACK, radius=3)
    bottom = top + panel + 4
    legend = "target" if ratio is None else f"estimate {ratio:.3f}"
    if ci is not None and len(ci) == 2:
        legend += f" [{float(ci[0]):.3f}, {float(ci[1]):.3f}]"
    canvas.text(left, bottom, f"{legend}; target <= {target_ratio:.3f}; {len(blocks)} blocks")
    return canvas.pixels
