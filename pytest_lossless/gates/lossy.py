"""The explicitly lossy gate, ``tolerance(atol=, rtol=)``: ``|obtained - expected| <= atol + rtol *
|expected|`` position by position; it needs the full data on both sides and never reports lossless.

The gate's machinery is here; each kind's side (which arrays, frames or samples are compared,
and how a position is named) is that kind's ``compare_tolerance`` (:mod:`~..kinds`). Every lossy
result carries the statistics a reviewer asks for (:class:`Spread`): the largest
difference and where it is, the 99th percentile, and how many positions are beyond the bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import media
from ..core.artifact import Artifact
from ..errors import LosslessError
from .arrays import Sides, bits_differ, sides
from .gate import Figure, Gate, GateResult, new_result, number_text

#: Integer differences below this are counted in a histogram, not kept (video frames).
_HISTOGRAM_BINS = 1 << 16


def location_text(index: tuple[int, ...], label: str = "") -> str:
    """``[3, 7]`` (any number of axes), after ``member 'x' `` for an ``.npz`` member."""
    return f"{label}[{', '.join(str(i) for i in index)}]"


def rank_99(count: int) -> int:
    """The 0-based rank of the 99th percentile among ``count`` sorted values: the smallest value
    that at least 99% of the positions do not exceed (numpy's ``inverted_cdf``)."""
    return max(0, (99 * count + 99) // 100 - 1)


@dataclass
class Spread:
    """How far apart two sides are over all positions: the largest distance and where it is,
    the 99th percentile, and how many positions are beyond the gate's bound.

    Distances are float64 (|diff|, ``inf`` for NaN against a number) or uint64 (ULPs, with a
    sentinel for no finite distance); integer distances below 2**16 may be counted in a
    histogram instead of kept (:meth:`add` with ``histogram=True``, for video frames).
    """

    #: Whether the 99th percentile is wanted (else no distance is kept, only the largest).
    percentile: bool = True
    count: int = 0
    beyond: int = 0
    largest: Any = None
    largest_at: str = ""
    parts: list[npt.NDArray[Any]] = field(default_factory=list)
    histogram: npt.NDArray[np.int64] | None = None

    def add(
        self,
        distance: npt.NDArray[Any],
        beyond: int,
        where: Callable[[int], str],
        *,
        histogram: bool = False,
    ) -> None:
        """Take one block of distances; ``where(flat)`` names its flat position ``flat``."""
        flat = distance.reshape(-1)
        if not flat.size:
            return
        self.count += int(flat.size)
        self.beyond += int(beyond)
        i = int(np.argmax(flat))
        value = flat[i].item()
        if self.largest is None or value > self.largest:
            self.largest, self.largest_at = value, where(i)
        if not self.percentile:
            return
        if histogram and distance.dtype.kind in "iu" and value < _HISTOGRAM_BINS:
            counts = np.bincount(flat, minlength=_HISTOGRAM_BINS)
            self.histogram = counts if self.histogram is None else self.histogram + counts
        else:
            self.parts.append(flat)

    def p99(self) -> Any:
        """The 99th percentile of every distance taken (None when none was)."""
        if not self.count:
            return None
        rank = rank_99(self.count)
        if self.histogram is not None and not self.parts:
            return int(np.searchsorted(np.cumsum(self.histogram), rank + 1))
        blocks = list(self.parts)
        if self.histogram is not None:  # both: the histogram's values join the kept ones
            blocks.append(np.repeat(np.arange(_HISTOGRAM_BINS), self.histogram))
        values = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
        return np.partition(values, rank)[rank].item()

    def figures(self, prefix: str, *, infinite: Any = None) -> dict[str, Figure]:
        """``max_<prefix>``, ``max_<prefix>_at`` and (when wanted) ``p99_<prefix>``, as
        diagnostics; a distance equal to ``infinite`` is written ``inf``."""

        def shown(value: Any) -> Figure:
            return math.inf if infinite is not None and value == infinite else value

        found: dict[str, Figure] = {
            f"max_{prefix}": shown(self.largest) if self.count else 0,
            f"max_{prefix}_at": self.largest_at,
        }
        if self.percentile:
            found[f"p99_{prefix}"] = shown(self.p99()) if self.count else 0
        return found


def abs_diff(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """``|a - b|`` per position, as float64: 0 where both are the same number or both NaN,
    ``inf`` for NaN against a number or infinities that differ. Integers are subtracted
    exactly (64-bit ones through unsigned wrap-around: the true difference fits)."""
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        wide = np.uint64 if a.dtype == b.dtype == np.uint64 else np.int64
        x, y = np.asarray(a).astype(wide), np.asarray(b).astype(wide)
        hi, lo = np.maximum(x, y), np.minimum(x, y)
        steps = hi.view(np.uint64) - lo.view(np.uint64)
        return np.asarray(steps, dtype=np.float64)
    kind = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    with np.errstate(invalid="ignore", over="ignore"):  # signalling NaNs warn when widened
        x = np.asarray(a, dtype=kind)
        y = np.asarray(b, dtype=kind)
        diff = np.asarray(np.abs(x - y), dtype=np.float64)
        same = (x == y) | (np.isnan(x) & np.isnan(y))
    diff = np.where(same, 0.0, diff)
    return np.where(np.isnan(diff), np.inf, diff)


def need_full(gate: Gate, expected: Artifact, obtained: Artifact) -> tuple[Path, Path]:
    for side, art in (("expected", expected), ("obtained", obtained)):
        if art.path is None:
            raise LosslessError(
                f"gate {gate.spec} on {expected.name!r} needs the full data on both sides, but "
                f"the {side} artifact is kept as digests only: store the golden in full (raise "
                "the digest-only size limit) or use a lossless gate"
            )
    assert expected.path is not None
    assert obtained.path is not None
    return expected.path, obtained.path


def within(
    a: npt.NDArray[Any], b: npt.NDArray[Any], atol: float, rtol: float
) -> npt.NDArray[np.bool_]:
    """``|a - b| <= atol + rtol * |b|`` with ``b`` the expected side; NaN only matches NaN, an
    infinity only the same infinity (``inf <= atol + rtol * inf`` would let anything pass)."""
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        ok: npt.NDArray[np.bool_] = a == b
        if not ok.all():
            bad = np.flatnonzero(~ok.reshape(-1))
            fa, fb = a.reshape(-1), b.reshape(-1)
            for i in bad:
                got, want = int(fa[i]), int(fb[i])
                if abs(got - want) <= atol + rtol * abs(want):
                    ok.reshape(-1)[i] = True
        return ok
    kind = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    x = np.asarray(a, dtype=kind)
    y = np.asarray(b, dtype=kind)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(x - y) <= atol + rtol * np.abs(y)
    both_nan = np.isnan(x) & np.isnan(y)
    finite = np.isfinite(x) & np.isfinite(y)
    result: npt.NDArray[np.bool_] = (x == y) | both_nan | (close & finite)
    return result


def tolerance_arrays(
    result: GateResult,
    gate: Gate,
    pairs: Iterator[tuple[str, npt.NDArray[Any], npt.NDArray[Any]]],
    describe: Callable[[str, int, npt.NDArray[Any], npt.NDArray[Any]], str],
    where: Callable[[str, npt.NDArray[Any], int], str],
) -> None:
    """Count the positions out of tolerance over (label, obtained, expected) pairs, with the
    spread of ``|diff|`` (``where(label, array, flat)`` names a position)."""
    count = total = bitwise = 0
    spread = Spread()
    for label, a, b in pairs:
        if a.shape != b.shape:
            result.metadata_diffs.append(f"{label}shape: expected {b.shape}, obtained {a.shape}")
            continue
        ok = within(a, b, gate.atol, gate.rtol)
        total += ok.size
        bad = np.flatnonzero(~ok.reshape(-1))
        count += int(bad.size)
        if a.dtype == b.dtype:
            bitwise += int(np.count_nonzero(bits_differ(a, b)))
        spread.add(abs_diff(a, b), int(bad.size), partial(where, label, a))
        if bad.size and result.first_mismatch is None:
            result.first_mismatch = describe(label, int(bad[0]), a, b)
    result.mismatch_count = count
    result.total = total
    result.diagnostics.update(spread.figures("abs_diff"))
    result.diagnostics["count_beyond"] = spread.beyond
    result.diagnostics["bitwise_differing"] = bitwise


def begin_tolerance(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    unit: str,
    limits: media.MediaLimits | None,
) -> tuple[GateResult, tuple[Path, Path], Sides]:
    """What every kind's tolerance comparison starts with: a failing result in ``unit`` marked
    lossy, both files (the full data is needed on both sides) and the limits of each side (the
    obtained file's derived from its golden)."""
    paths = need_full(gate, expected, obtained)
    result = new_result(expected, gate, kind, unit)
    result.notes.append("tolerance is a lossy gate: passing it does not prove the output unchanged")
    return result, paths, sides(limits, expected)


def bounds_text(gate: Gate) -> str:
    """``atol=0.1, rtol=0``: the bounds of a tolerance gate as a message names them."""
    return f"atol={number_text(gate.atol)}, rtol={number_text(gate.rtol)}"
