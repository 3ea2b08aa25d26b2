"""Drawing on numpy arrays, and PNG files without a subprocess: what the report's pictures need.

A :class:`Canvas` is an ``(height, width, 3)`` uint8 array with lines, boxes, dots and text in
a 3x5 pixel font (upper case, digits and the punctuation that numbers and labels use). PNGs are
encoded here with ``zlib`` (the standard library): one picture costs no ffmpeg process, and the
same pixels always give the same bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Color = tuple[int, int, int]
Picture = npt.NDArray[np.uint8]

WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)
GREY: Color = (150, 150, 150)
LIGHT: Color = (230, 230, 230)
BLUE: Color = (31, 119, 180)
ORANGE: Color = (230, 110, 0)
RED: Color = (200, 30, 30)
BAND: Color = (198, 219, 239)

#: The largest picture the report draws or encodes (a frame triptych of three 640-wide panels).
MAX_SIDE = 4096

# Glyphs of 3x5 pixels, rows top to bottom; "#" is ink. Lower case is drawn as upper case.
_GLYPHS = {
    "0": "### #.# #.# #.# ###",
    "1": ".#. ##. .#. .#. ###",
    "2": "### ..# ### #.. ###",
    "3": "### ..# .## ..# ###",
    "4": "#.# #.# ### ..# ..#",
    "5": "### #.. ### ..# ###",
    "6": "### #.. ### #.# ###",
    "7": "### ..# ..# .#. .#.",
    "8": "### #.# ### #.# ###",
    "9": "### #.# ### ..# ###",
    "A": ".#. #.# ### #.# #.#",
    "B": "##. #.# ##. #.# ##.",
    "C": ".## #.. #.. #.. .##",
    "D": "##. #.# #.# #.# ##.",
    "E": "### #.. ##. #.. ###",
    "F": "### #.. ##. #.. #..",
    "G": ".## #.. #.# #.# .##",
    "H": "#.# #.# ### #.# #.#",
    "I": "### .#. .#. .#. ###",
    "J": "..# ..# ..# #.# .#.",
    "K": "#.# #.# ##. #.# #.#",
    "L": "#.. #.. #.. #.. ###",
    "M": "#.# ### ### #.# #.#",
    "N": "##. #.# #.# #.# #.#",
    "O": ".#. #.# #.# #.# .#.",
    "P": "##. #.# ##. #.. #..",
    "Q": ".#. #.# #.# ##. .##",
    "R": "##. #.# ##. #.# #.#",
    "S": ".## #.. .#. ..# ##.",
    "T": "### .#. .#. .#. .#.",
    "U": "#.# #.# #.# #.# ###",
    "V": "#.# #.# #.# #.# .#.",
    "W": "#.# #.# ### ### #.#",
    "X": "#.# #.# .#. #.# #.#",
    "Y": "#.# #.# .#. .#. .#.",
    "Z": "### ..# .#. #.. ###",
    " ": "... ... ... ... ...",
    ".": "... ... ... ... .#.",
    ",": "... ... ... .#. #..",
    ":": "... .#. ... .#. ...",
    ";": "... .#. ... .#. #..",
    "-": "... ... ### ... ...",
    "+": "... .#. ### .#. ...",
    "=": "... ### ... ### ...",
    "/": "..# ..# .#. #.. #..",
    "(": ".#. #.. #.. #.. .#.",
    ")": ".#. ..# ..# ..# .#.",
    "[": "##. #.. #.. #.. ##.",
    "]": ".## ..# ..# ..# .##",
    "%": "#.# ..# .#. #.. #.#",
    "<": "..# .#. #.. .#. ..#",
    ">": "#.. .#. ..# .#. #..",
    "#": "#.# ### #.# ### #.#",
    "_": "... ... ... ... ###",
    "|": ".#. .#. .#. .#. .#.",
    "*": "... #.# .#. #.# ...",
    "'": ".#. .#. ... ... ...",
    "?": "### ..# .## ... .#.",
}
_FONT: dict[str, npt.NDArray[np.bool_]] = {
    char: np.array([[c == "#" for c in row] for row in rows.split()], dtype=np.bool_)
    for char, rows in _GLYPHS.items()
}
GLYPH_W, GLYPH_H = 3, 5


def text_width(text: str, scale: int = 2) -> int:
    """Width in pixels of ``text`` drawn at ``scale`` (one blank column between glyphs)."""
    return max(0, len(text) * (GLYPH_W + 1) * scale - scale)


def text_height(scale: int = 2) -> int:
    return GLYPH_H * scale


class Canvas:
    """A white picture to draw on; coordinates are ``(x, y)`` with ``y`` growing down, and
    anything drawn outside the picture is clipped."""

    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
            raise ValueError(f"a picture of {width}x{height} pixels is out of range")
        self.pixels: Picture = np.empty((height, width, 3), dtype=np.uint8)
        self.pixels[:] = background

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    def box(self, x0: float, y0: float, x1: float, y1: float, color: Color) -> None:
        """Fill the rectangle between the two corners (inclusive), in any order."""
        left, right = sorted((round(x0), round(x1)))
        top, bottom = sorted((round(y0), round(y1)))
        left, top = max(left, 0), max(top, 0)
        right, bottom = min(right, self.width - 1), min(bottom, self.height - 1)
        if left <= right and top <= bottom:
            self.pixels[top : bottom + 1, left : right + 1] = color

    def frame(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        """The outline of a rectangle."""
        self.box(x0, y0, x1, y0, color)
        self.box(x0, y1, x1, y1, color)
        self.box(x0, y0, x0, y1, color)
        self.box(x1, y0, x1, y1, color)

    def points(self, xs: Any, ys: Any, color: Color) -> None:
        """Set single pixels (arrays of coordinates), clipped to the picture."""
        x = np.rint(np.asarray(xs, dtype=np.float64)).astype(np.int64)
        y = np.rint(np.asarray(ys, dtype=np.float64)).astype(np.int64)
        keep = (x >= 0) & (x < self.width) & (y >= 0) & (y < self.height)
        self.pixels[y[keep], x[keep]] = color

    def line(
        self, x0: float, y0: float, x1: float, y1: float, color: Color, *, dash: int = 0
    ) -> None:
        """A straight line; ``dash`` > 0 draws it in dashes of that many pixels."""
        steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        xs, ys = np.linspace(x0, x1, steps), np.linspace(y0, y1, steps)
        if dash > 0:
            keep = (np.arange(steps) // dash) % 2 == 0
            xs, ys = xs[keep], ys[keep]
        self.points(xs, ys, color)

    def polyline(self, xs: Sequence[float] | Any, ys: Sequence[float] | Any, color: Color) -> None:
        """Consecutive points joined by lines (a waveform)."""
        x = np.asarray(xs, dtype=np.float64)
        y = np.asarray(ys, dtype=np.float64)
        if x.size == 1:
            self.points(x, y, color)
        for i in range(x.size - 1):
            self.line(x[i], y[i], x[i + 1], y[i + 1], color)

    def dot(self, x: float, y: float, color: Color, radius: int = 2) -> None:
        self.box(x - radius, y - radius, x + radius, y + radius, color)

    def cross(self, x: float, y: float, color: Color, radius: int = 3) -> None:
        self.line(x - radius, y - radius, x + radius, y + radius, color)
        self.line(x - radius, y + radius, x + radius, y - radius, color)

    def text(self, x: float, y: float, text: str, color: Color = BLACK, *, scale: int = 2) -> int:
        """Draw ``text`` with its top left corner at ``(x, y)``; returns the x after it.
        Characters the font lacks are drawn as ``?``."""
        left, top = round(x), round(y)
        for char in text.upper():
            glyph = _FONT.get(char, _FONT["?"])
            ink = np.kron(glyph, np.ones((scale, scale), dtype=np.bool_))
            rows, cols = np.nonzero(ink)
            self.points(cols + left, rows + top, color)
            left += (GLYPH_W + 1) * scale
        return left

    def paste(self, x: int, y: int, picture: Picture) -> None:
        """Copy ``picture`` (``(h, w, 3)`` uint8) with its top left corner at ``(x, y)``."""
        height = min(picture.shape[0], self.height - y)
        width = min(picture.shape[1], self.width - x)
        if height > 0 and width > 0 and x >= 0 and y >= 0:
            self.pixels[y : y + height, x : x + width] = picture[:height, :width]


def encode_png(picture: Picture) -> bytes:
    """An ``(height, width, 3)`` uint8 picture as the bytes of an 8-bit RGB PNG file.

    Every row uses the ``Sub`` filter (each byte minus the one a pixel to its left), which
    compresses both flat plots and video frames well enough for a report.
    """
    pixels = np.ascontiguousarray(picture, dtype=np.uint8)
    if pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"expected an (height, width, 3) picture, got shape {pixels.shape}")
    height, width = int(pixels.shape[0]), int(pixels.shape[1])
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise ValueError(f"a picture of {width}x{height} pixels is out of range")
    rows = pixels.reshape(height, width * 3)
    filtered = np.empty((height, width * 3 + 1), dtype=np.uint8)
    filtered[:, 0] = 1  # filter type Sub
    filtered[:, 1:4] = rows[:, :3]
    filtered[:, 4:] = rows[:, 3:] - rows[:, :-3]  # uint8 arithmetic wraps, as PNG defines
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(filtered.tobytes(), 6)),
            _chunk(b"IEND", b""),
        )
    )


def _chunk(tag: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(tag + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)
