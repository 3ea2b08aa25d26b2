"""One failing comparison, drawn: the frames, the samples or the elements that differ.

Both sides are decoded again from their files (the golden's stored file, the obtained file
under pytest's temporary folder, or a control and a candidate run's outputs), within the
session's media limits; the obtained side within limits derived from the golden's fingerprint,
as the gates do. Where a file is not at hand the section says why instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import media
from ..gates.gate import GateResult
from ..media.container import ContainerFingerprint, FrameDigest
from .blocks import Assets, Block, Figure, Side, Svg, Table, Text
from .charts import histogram_svg, waveforms_svg
from .pictures import frame_triptych

#: Differing frames drawn per failing video (the first, and a few more).
FRAMES_SHOWN = 3
#: Samples of audio drawn around the first difference (a quarter of them before it).
AUDIO_WINDOW = 600
#: Differing elements of a tensor listed.
ELEMENTS_LISTED = 10


def draw(
    gate: GateResult,
    left: Side,
    right: Side,
    *,
    assets: Assets,
    limits: media.MediaLimits,
    stem: str,
) -> list[Block]:
    """What differs between ``left`` and ``right`` for one gate result (read from its receipt
    leniently by :mod:`.details`: a receipt is read, not trusted)."""
    blocks: list[Block] = []
    if gate.metadata_diffs:
        blocks.append(Table(("metadata that differs",), [(d,) for d in gate.metadata_diffs]))
    for side in (left, right):
        if side.path is None and side.missing:
            blocks.append(Text(f"{side.label}: {side.missing}"))
    sides = (limits, limits.for_golden(dict(left.fingerprint)))
    kind, unit = gate.kind, gate.unit
    if kind == "video" or unit == "frame":
        blocks += _frames(left, right, sides, assets, stem)
    elif kind == "audio" or (unit == "sample" and kind != "tensor"):
        blocks += _audio(left, right, sides, assets, stem)
    elif kind == "tensor":
        blocks += _tensor(gate.location.get("member"), left, right, sides, assets, stem)
    else:
        blocks += kind_pictures(gate, assets)
    return blocks


def kind_pictures(result: GateResult, assets: Assets) -> list[Block]:
    """The PNG pictures a plugin's kind wrote for its mismatch (``pytest_lossless_pictures``),
    copied into the report and shown; the built-in kinds are drawn from their files above."""
    figures: list[Block] = []
    for path in result.diagnostic_files:
        if not path.lower().endswith(".png"):
            continue
        size = _png_size(path)
        name, src, _note = assets.copy(path)
        if src is not None and size is not None:
            figures.append(Figure(src, f"{result.artifact}: {name}", *size))
    return figures


def _png_size(path: str) -> tuple[int, int] | None:
    """Width and height from a PNG's header, or None when the file is no PNG."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(24)
    except OSError:
        return None
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


Limits = tuple[media.MediaLimits, media.MediaLimits]


# ------------------------------------------------------------------ video


def container(side: Side) -> ContainerFingerprint:
    """A side's container fingerprint (no stream when it is none: a receipt is read, not
    trusted)."""
    return ContainerFingerprint.from_json(dict(side.fingerprint))


def _at(frames: Sequence[Any], i: int) -> Any:
    return frames[i] if i < len(frames) else None


def _moment(frame: FrameDigest | None, tb: str | None) -> tuple[str, Fraction | int] | None:
    """A frame as the gate compares it: its digest and its time (exact where the time base
    is known, else the raw pts), so that equal times in two time bases are not drawn."""
    if frame is None:
        return None
    try:
        return frame.sha256, frame.pts * Fraction(tb) if tb else frame.pts
    except (ValueError, ZeroDivisionError):
        return frame.sha256, frame.pts


def pts_text(pts: object, tb: object) -> str:
    """``pts 7 = 0.291667 s`` (or ``pts 7`` when the time base is unknown)."""
    if not isinstance(pts, int):
        return "pts unknown"
    try:
        return f"pts {pts} = {float(pts * Fraction(str(tb))):.6f} s" if tb else f"pts {pts}"
    except (ValueError, ZeroDivisionError):
        return f"pts {pts}"


def _frames(left: Side, right: Side, limits: Limits, assets: Assets, stem: str) -> list[Block]:
    lv, rv = container(left).video(), container(right).video()
    if not lv and not rv:
        return []
    ls, rs = (lv or rv)[0], (rv or lv)[0]
    lf = list(ls.frames) if lv else []
    rf = list(rs.frames) if rv else []
    total = max(len(lf), len(rf))
    lt, rt = ls.pts_time_base, rs.pts_time_base  # the same times may be in other units
    differ = [i for i in range(total) if _moment(_at(lf, i), lt) != _moment(_at(rf, i), rt)]
    if not differ:
        return [Text("every decoded frame is identical; what differs is listed above")]
    shown = differ[:FRAMES_SHOWN]
    if left.path is None and right.path is None:
        return [Text(f"{_count(len(differ), 'frame')} differ, the first is {differ[0]}: not drawn")]
    decoded = [
        _decode(side, stream.index, [i for i in shown if i < len(frames)], side_limits)
        for side, stream, frames, side_limits in (
            (left, ls, lf, limits[0]),
            (right, rs, rf, limits[1]),
        )
    ]
    blocks: list[Block] = [
        Text(f"{_count(len(differ), 'frame')} of {total} differ; drawn: {_listed(shown)}")
    ]
    tb = ls.pts_time_base
    for i in shown:
        frame: FrameDigest = _at(lf, i) or _at(rf, i)
        a, b = decoded[0].get(i), decoded[1].get(i)
        if a is None and b is None:
            continue
        where = f"frame {i}, {pts_text(frame.pts, tb)}"
        gone = ["not at hand" if s.path is None else "no such frame" for s in (left, right)]
        picture, peak = frame_triptych(
            a, b, caption=where, labels=(left.label, right.label), missing=(gone[0], gone[1])
        )
        if a is None or b is None or a.shape != b.shape:
            what = "present on one side only" if a is None or b is None else "sizes differ"
        elif count := int(np.count_nonzero((a != b).any(axis=2))):
            what = (
                f"{_count(count, 'pixel')} of {a.shape[0] * a.shape[1]} differ in RGB, by at "
                f"most {peak} levels (amplified)"
            )
        else:
            what = "identical in RGB: the difference is in the stream's own pixels or its timing"
        caption = f"{where}: {left.label} | {right.label} | difference; {what}"
        blocks.append(assets.picture(f"{stem}-frame{i}", picture, caption))
    return blocks


def _decode(
    side: Side, stream: int, indices: list[int], limits: media.MediaLimits
) -> dict[int, npt.NDArray[np.uint8]]:
    if side.path is None or not indices:
        return {}
    return media.load_video_frames(
        side.path,
        stream_index=stream,
        pix_fmt="rgb24",
        indices=indices,
        limits=limits,
    )


# ------------------------------------------------------------------ audio


def _pcm(side: Side, limits: media.MediaLimits) -> tuple[npt.NDArray[Any], int]:
    if side.path is None:
        raise ValueError(f"{side.label}: no file")
    audio = container(side).audio()
    if audio:
        return media.load_container_audio(side.path, audio[0].index, limits=limits)
    return media.load_audio(side.path, limits=limits)


def _audio(left: Side, right: Side, limits: Limits, assets: Assets, stem: str) -> list[Block]:
    if left.path is None or right.path is None:
        return []
    from ..gates.arrays import bits_differ

    (a, rate), (b, _) = _pcm(left, limits[0]), _pcm(right, limits[1])
    if a.dtype != b.dtype or a.shape[1:] != b.shape[1:]:
        return [Text(f"sample formats differ ({a.dtype}, {b.dtype}): not drawn")]
    n = min(len(a), len(b))
    differ = bits_differ(a[:n], b[:n])
    rows = differ.any(axis=1) if differ.ndim > 1 else differ
    where = np.flatnonzero(rows)
    if where.size:
        first = int(where[0])
        channel = int(np.flatnonzero(differ[first])[0]) if differ.ndim > 1 else 0
    elif len(a) != len(b):
        first, channel = n, 0
    else:
        return [Text("the samples are identical")]
    start = max(0, first - AUDIO_WINDOW // 4)
    pick = (slice(start, start + AUDIO_WINDOW), channel) if a.ndim > 1 else slice(start, None)
    wa, wb = a[pick][:AUDIO_WINDOW], b[pick][:AUDIO_WINDOW]
    when = f", t = {first / rate:.6f} s" if rate else ""
    head = f"first differing sample {first} (channel {channel}{when})"
    chart = waveforms_svg(
        wa,
        wb,
        start=start,
        first=first,
        rate=rate or None,
        labels=(left.label, right.label),
        unit=f"sample value, {a.dtype}",
    )
    counted = int(where.size) + abs(len(a) - len(b))
    caption = (
        f"{head}: {left.label}, {right.label} and their difference, samples {start}-"
        f"{start + max(len(wa), len(wb)) - 1}; "
        f"{_count(counted, 'sample frame')} of {max(len(a), len(b))} differ"
    )
    return [Svg(chart, caption)]


# ------------------------------------------------------------------ tensors


def _tensor(
    member: object,
    left: Side,
    right: Side,
    limits: Limits,
    assets: Assets,
    stem: str,
) -> list[Block]:
    if left.path is None or right.path is None:
        return []
    from ..gates.arrays import bits_differ, index_text, load_arrays, unravel, value_text

    ea, oa = load_arrays(left.path, limits[0]), load_arrays(right.path, limits[1])
    names = [member] if isinstance(member, str) and member in ea else []
    names += sorted(set(ea) & set(oa))
    for name in names:
        a, b = np.asarray(ea[name]), np.asarray(oa.get(name))
        if a.shape != b.shape or a.dtype != b.dtype:
            continue
        differ = bits_differ(a, b)
        flat = np.flatnonzero(differ.reshape(-1))
        if flat.size:
            break
    else:
        return []
    label = f"member {name!r}" if name else "the array"
    listed = []
    for position in flat[:ELEMENTS_LISTED]:
        index = unravel(int(position), a.shape)
        listed.append(
            (index_text(index), value_text(a, index), value_text(b, index), _delta(a, b, index))
        )
    blocks: list[Block] = [
        Text(
            f"{flat.size} of {a.size} elements of {label} ({a.dtype}, shape {tuple(a.shape)}) "
            f"differ (the first {len(listed)} listed)"
        ),
        Table(("index", left.label, right.label, f"{right.label} - {left.label}"), listed),
    ]
    if a.dtype.kind not in "fiuc":
        return blocks
    picked = differ.reshape(-1)
    kind = np.complex128 if a.dtype.kind == "c" else np.float64
    with np.errstate(all="ignore"):
        values = b.reshape(-1)[picked].astype(kind) - a.reshape(-1)[picked].astype(kind)
        values = np.abs(values) if a.dtype.kind == "c" else values
    finite = np.isfinite(values)
    caption = (
        f"{right.label} - {left.label} over the {_count(flat.size, 'differing element')} of {label}"
    )
    if not finite.all():
        caption += f"; {int((~finite).sum())} of them are not finite (NaN, inf) and left out"
    ulps = max_ulps(a, b, differ)
    if ulps is not None:
        caption += f"; at most {_count(ulps, 'unit')} in the last place apart"
    chart = histogram_svg(
        np.real(values),
        what=f"{right.label} - {left.label}",
        unit=f"difference of {a.dtype} element values",
    )
    blocks.append(Svg(chart, caption))
    return blocks


def _count(n: int, noun: str) -> str:
    """``1 frame``, ``3 frames``."""
    return f"{n} {noun if n == 1 else noun + 's'}"


def _listed(indices: Sequence[int]) -> str:
    return ", ".join(str(i) for i in indices)


def _delta(a: npt.NDArray[Any], b: npt.NDArray[Any], index: tuple[int, ...]) -> str:
    if a.dtype.kind not in "fiu":
        return ""
    with np.errstate(all="ignore"):
        value = float(np.float64(b[index]) - np.float64(a[index]))
    return repr(value) if a.dtype.kind == "f" else str(int(value))


def max_ulps(a: npt.NDArray[Any], b: npt.NDArray[Any], differ: npt.NDArray[np.bool_]) -> int | None:
    """The largest distance in units in the last place among the differing elements that have
    one, counted as the ``ulp`` gate counts it (:func:`..gates.ulps.ulp_distance`)."""
    from ..gates.ulps import FORMATS, INFINITE_STEPS, ulp_distance

    fmt = FORMATS.get(a.dtype.name) if a.dtype.kind == "f" else None
    if fmt is None or a.dtype != b.dtype:
        return None
    native = a.dtype.newbyteorder("=")
    bits = [np.ascontiguousarray(x, dtype=native).view(fmt.word)[differ] for x in (a, b)]
    steps = ulp_distance(bits[0], bits[1], fmt)
    counted = steps[steps != INFINITE_STEPS]
    return int(counted.max()) if counted.size else None
