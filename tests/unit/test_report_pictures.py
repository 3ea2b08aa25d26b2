"""The report's difference pictures are lit exactly where the media changed.

Each picture is rendered with the report's own functions, encoded with its PNG writer, decoded
again here by a small independent reader (every PNG filter type, not only the one we write),
and the set of lit pixels is compared with the set of changed ones, mapped through the
picture's scaling.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import numpy.typing as npt
import pytest

from pytest_lossless.report import pictures
from pytest_lossless.report.pictures import _scale, difference, frame_triptych
from pytest_lossless.report.raster import RED, encode_png

Pixels = npt.NDArray[np.uint8]


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data: bytes) -> Pixels:
    """An 8-bit RGB PNG as ``(height, width, 3)`` pixels: chunks and CRCs checked, the IDAT
    chunks joined, each row unfiltered by its own filter type (None, Sub, Up, Average,
    Paeth)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    offset, header, idat = 8, b"", b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        tag = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF, f"bad CRC in {tag!r}"
        if tag == b"IHDR":
            header = body
        elif tag == b"IDAT":
            idat += body
        elif tag == b"IEND":
            break
        offset += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, color, interlace) == (8, 2, 0)
    stride, bpp = width * 3, 3
    raw = zlib.decompress(idat)
    assert len(raw) == height * (stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    previous = [0] * stride
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = list(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - bpp] if x >= bpp else 0
            up = previous[x]
            corner = previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                line[x] = (line[x] + _paeth(left, up, corner)) & 0xFF
            else:
                assert kind == 0, f"unknown filter type {kind}"
        out[y] = line
        previous = line
    return out.reshape(height, width, 3)


def test_the_reader_agrees_with_the_writer():
    rng = np.random.default_rng(1)
    picture = rng.integers(0, 256, size=(9, 13, 3), dtype=np.uint8)
    assert np.array_equal(decode_png(encode_png(picture)), picture)


def _frame(width: int, height: int, seed: int = 3) -> Pixels:
    return np.random.default_rng(seed).integers(1, 255, size=(height, width, 3), dtype=np.uint8)


def _difference_panel(picture: Pixels, width: int, height: int) -> Pixels:
    """The third panel of a triptych, cut out by the layout :func:`frame_triptych` uses."""
    margin, line = pictures._MARGIN, pictures._LINE
    down, up = _scale(width, height)
    pw, ph = -(-width // down) * up, -(-height // down) * up
    x, top = margin + 2 * (pw + margin), margin + 2 * line
    return picture[top : top + ph, x : x + pw]


def _changed(width: int, height: int, cells: dict[tuple[int, int], tuple[int, int]]):
    """Two frames that differ at ``cells`` ((row, column) -> (channel, delta))."""
    a = _frame(width, height)
    b = a.copy()
    for (r, c), (channel, delta) in cells.items():
        a[r, c, channel] = 20 if delta > 0 else 235  # no wrap-around: |b - a| is |delta|
        b[r, c, channel] = int(a[r, c, channel]) + delta
    return a, b


def _lit_blocks(panel: Pixels, down: int, up: int) -> set[tuple[int, int]]:
    """The source pixels (in the shrunk frame's grid) that the panel shows as changed: an
    enlarged pixel is an ``up`` x ``up`` square that must be lit, or dark, as a whole."""
    lit = (panel != 0).any(axis=2)
    h, w = lit.shape
    squares = lit.reshape(h // up, up, w // up, up)
    whole = squares.all(axis=(1, 3))
    assert np.array_equal(whole, squares.any(axis=(1, 3))), "a pixel is lit in part"
    return {(int(r), int(c)) for r, c in zip(*np.nonzero(whole), strict=True)}


# A one-level change in one channel, both corners, a large change and an interior pixel.
CELLS = {
    (0, 0): (0, 1),
    (47, 63): (2, -1),
    (10, 20): (1, 200),
    (30, 5): (2, 7),
}


def test_the_triptych_difference_is_lit_exactly_at_the_changed_pixels():
    width, height = 64, 48
    a, b = _changed(width, height, CELLS)
    picture, peak = frame_triptych(a, b, caption="frame 5, pts 5")
    assert peak == 200
    decoded = decode_png(encode_png(picture))
    assert np.array_equal(decoded, picture)
    down, up = _scale(width, height)
    assert (down, up) == (1, 4)  # a small clip is enlarged: each pixel a 4x4 square
    panel = _difference_panel(decoded, width, height)
    assert _lit_blocks(panel, down, up) == set(CELLS)
    # Lit means visible: grey at mid-level or above, even for the one-level change, and the
    # largest difference white.
    lit = panel[(panel != 0).any(axis=2)]
    assert (lit == lit[:, :1]).all()
    assert int(lit.min()) >= 128
    assert int(lit.max()) == 255
    # The corners span the frame, so the red box around the changes lies outside the panel.
    assert not (panel == RED).all(axis=2).any()


def test_the_red_box_never_covers_a_changed_pixel():
    width, height = 64, 48
    cells = {(20, 30): (0, 1), (24, 33): (1, 3)}
    a, b = _changed(width, height, cells)
    picture, _ = frame_triptych(a, b, caption="frame 0")
    down, up = _scale(width, height)
    panel = decode_png(encode_png(picture))
    panel = _difference_panel(panel, width, height)
    red = (panel == RED).all(axis=2)
    assert red.any()  # the box is drawn inside the panel here...
    grey = (panel != 0).any(axis=2) & ~red
    assert _lit_blocks(np.where(grey[:, :, None], panel, 0).astype(np.uint8), down, up) == set(
        cells
    )
    # ...and only on unchanged pixels, three pixels out from the changed ones.
    rows, cols = np.nonzero(red)
    assert (rows.min(), rows.max()) == (20 * up - 3, 25 * up - 1 + 3)
    assert (cols.min(), cols.max()) == (30 * up - 3, 34 * up - 1 + 3)


@pytest.mark.parametrize(("width", "height"), [(1280, 720), (1283, 721)])
def test_a_shrunk_difference_keeps_every_changed_pixel_and_no_other(width, height):
    # A large frame is shrunk by block maxima: a block is lit iff a pixel in it changed.
    cells = {
        (0, 0): (0, 1),
        (height - 1, width - 1): (1, 1),
        (101, 333): (2, 1),
        (101, 332): (2, 50),  # the same 2x2 block as the one before
        (500, 901): (0, -1),
    }
    a, b = _changed(width, height, cells)
    picture, peak = frame_triptych(a, b, caption="frame 1")
    assert peak == 50
    down, up = _scale(width, height)
    assert (down, up) == (2, 1) if width == 1280 else (3, 1)
    panel = _difference_panel(decode_png(encode_png(picture)), width, height)
    expected = {(r // down, c // down) for r, c in cells}
    assert _lit_blocks(panel, down, up) == expected
    assert int(panel[(panel != 0).any(axis=2)].min()) >= 128


def test_identical_frames_give_a_black_difference():
    a = _frame(64, 48)
    picture, peak = frame_triptych(a, a.copy(), caption="frame 2")
    assert peak == 0
    panel = _difference_panel(decode_png(encode_png(picture)), 64, 48)
    assert not panel.any()
    # The difference function itself, unscaled: the exact changed set, one level included.
    b = a.copy()
    b[0, 63, 2] ^= 1
    diff, peak = difference(a, b)
    assert peak == 1
    assert {(int(r), int(c)) for r, c in zip(*np.nonzero(diff.any(axis=2)), strict=True)} == {
        (0, 63)
    }


def test_a_panel_label_is_drawn_whole():
    """#22: the difference panel's label was cut to a character count ("difference, max 2"
    for max 200): it is drawn whole when it fits its panel."""
    from pytest_lossless.report.raster import Canvas, text_height

    a = np.zeros((48, 64, 3), dtype=np.uint8)
    b = a.copy()
    b[10, 10] = 200
    picture, peak = frame_triptych(a, b, caption="frame 1")
    assert peak == 200
    margin, line = pictures._MARGIN, pictures._LINE
    panel = (picture.shape[1] - 4 * margin) // 3
    x, y = margin + 2 * (panel + margin), margin + line
    label = "difference, max 200"
    expected = Canvas(picture.shape[1], picture.shape[0])
    end = expected.text(x, y, label)
    assert end <= x + panel + margin
    rows = slice(y, y + text_height())
    ink = (expected.pixels[rows, x:end] != 255).any(axis=2)
    drawn = (picture[rows, x:end] != 255).any(axis=2)
    assert np.array_equal(drawn, ink)
