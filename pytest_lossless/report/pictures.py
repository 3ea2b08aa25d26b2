"""The report's frame pictures, rasterised with numpy: what a reviewer looks at instead of the
files.

- :func:`frame_triptych`: golden | obtained | amplified difference of one frame, captioned.

Only frames are raster (a frame is pixels); the charts (waveforms, histograms, speed) are inline
SVG with real text and axes (:mod:`.charts`). It returns an ``(height, width, 3)`` uint8 picture
(see :func:`.raster.encode_png`). The pictures are diagnostics, never gates: nothing here
decides a verdict.
"""

from __future__ import annotations

import math

import numpy as np

from .raster import (
    BLUE,
    GREY,
    LIGHT,
    ORANGE,
    RED,
    Canvas,
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
    # Each panel's label fits its panel whole (never "difference," cut short): the longest
    # wording that fits; the figure's caption says the rest in real text.
    room = pw + _MARGIN - _ADVANCE
    wordings = [f"difference, max {peak}", f"diff, max {peak}", "difference", "diff"]
    gain = next((w for w in wordings if text_width(w) <= room), "d") if peak else "difference"
    top = _MARGIN + 2 * _LINE
    for n, (label, panel) in enumerate(zip((*labels, gain), panels, strict=True)):
        x = _MARGIN + n * (pw + _MARGIN)
        shown = label if text_width(label) <= room else label[: max(1, room // _ADVANCE - 1)]
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
