"""The lossy gate in float steps, ``ulp(n)``: each obtained float is within ``n`` units in the
last place of the expected one, counted in its own format.

Each float's bits map to an ordered integer (sign-magnitude to two's complement: the magnitude
bits, negated when the sign bit is set), so adjacent floats are 1 apart, ``+0`` and ``-0`` are
0 apart and the largest finite float is 1 from infinity. NaN has no place in that order: it
matches only a NaN with the same bits, and is infinitely far from a number. bfloat16 needs no
library: its 16 bits are the upper half of a float32, stored as raw words (``'<V2'``, as numpy
writes an ``ml_dtypes.bfloat16`` array; ``uint16``, as torch users save them) or as float32
holding bfloat16 values, and said with ``dtype="bfloat16"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import media
from ..core.artifact import Artifact
from ..errors import ArtifactError, LosslessError
from .arrays import bits_differ, load_arrays, sides, unravel
from .gate import Gate, GateResult, new_result, settle
from .lossy import Spread, abs_diff, location_text, need_full

#: The ULP distance of positions that have none (NaN against a number, NaN payloads that
#: differ): above every real distance (float64's widest, -inf to +inf, is below 2**64 - 1).
INFINITE_STEPS = np.iinfo(np.uint64).max


@dataclass(frozen=True)
class FloatFormat:
    """One float format as bits: its word, the magnitude of +inf (above it: NaN), the sign bit."""

    name: str
    word: np.dtype[Any]
    inf: int

    @property
    def width(self) -> int:
        return int(self.word.itemsize)

    @property
    def sign(self) -> int:
        return 1 << (8 * self.width - 1)

    def values(self, bits: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The floats the bits stand for, in a numpy float type (bfloat16 as float32)."""
        if self.name == "bfloat16":
            widened: npt.NDArray[Any] = (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
            return widened
        values: npt.NDArray[Any] = bits.view(_NATIVE[self.name])
        return values

    def text(self, bits: npt.NDArray[Any], flat: int) -> str:
        """One element as ``1.0078125 (bits 0x3f81)``: the value and the bits it has."""
        word = bits.reshape(-1)[flat : flat + 1]
        value = str(self.values(word)[0])  # numpy's shortest text that reads back as this float
        return f"{value} (bits 0x{int(word[0]):0{2 * self.width}x})"


FORMATS = {
    "float16": FloatFormat("float16", np.dtype(np.uint16), 0x7C00),
    "bfloat16": FloatFormat("bfloat16", np.dtype(np.uint16), 0x7F80),
    "float32": FloatFormat("float32", np.dtype(np.uint32), 0x7F800000),
    "float64": FloatFormat("float64", np.dtype(np.uint64), 0x7FF0000000000000),
}
_NATIVE: dict[str, type[np.floating[Any]]] = {
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
}


def ordered(bits: npt.NDArray[Any], fmt: FloatFormat) -> npt.NDArray[np.int64]:
    """Each float's place in the order of its format: magnitude bits, negated when negative."""
    words = np.asarray(bits, dtype=fmt.word)
    magnitude: npt.NDArray[np.int64] = (words & fmt.word.type(fmt.sign - 1)).astype(np.int64)
    negative = words >= fmt.word.type(fmt.sign)
    np.negative(magnitude, out=magnitude, where=negative)
    return magnitude


def is_nan(bits: npt.NDArray[Any], fmt: FloatFormat) -> npt.NDArray[np.bool_]:
    """Where the bits are a NaN: an all-ones exponent with a non-zero fraction."""
    words = np.asarray(bits, dtype=fmt.word)
    return np.asarray((words & fmt.word.type(fmt.sign - 1)) > fmt.word.type(fmt.inf))


def ulp_distance(
    expected: npt.NDArray[Any], obtained: npt.NDArray[Any], fmt: FloatFormat
) -> npt.NDArray[np.uint64]:
    """Per position, how many floats of ``fmt`` apart two arrays of its bits are (uint64);
    :data:`INFINITE_STEPS` where there is no such number (a NaN on one side, or NaNs whose
    bits differ). Two NaNs with the same bits are 0 apart."""
    shape = np.shape(expected)
    expected, obtained = np.reshape(expected, -1), np.reshape(obtained, -1)  # 0-d: 1-d
    a, b = ordered(expected, fmt), ordered(obtained, fmt)
    if fmt.width < 8:  # places within +-2**31: the difference fits in int64
        steps = np.abs(np.subtract(a, b, out=a)).view(np.uint64)
    else:  # the true difference fits in 64 unsigned bits; unsigned subtraction wraps to it
        with np.errstate(over="ignore"):
            high = np.maximum(a, b).view(np.uint64)
            steps = np.subtract(high, np.minimum(a, b).view(np.uint64), out=high)
    nan_a, nan_b = is_nan(expected, fmt), is_nan(obtained, fmt)
    either = nan_a | nan_b
    if either.any():  # NaNs are rare: only then are their positions and bits looked at
        steps[either] = INFINITE_STEPS
        same = np.asarray(expected, dtype=fmt.word) == np.asarray(obtained, dtype=fmt.word)
        steps[nan_a & nan_b & same] = 0
    return np.asarray(steps, dtype=np.uint64).reshape(shape)


# ------------------------------------------------------------------ what a tensor holds


class _Refused(Exception):
    """A tensor whose dtype ulp cannot count steps of (a usage error, raised as ArtifactError)."""


def _storage(dtype: np.dtype[Any]) -> str | None:
    """The float format a dtype is, None for raw words (void, unsigned or signed, 2 to 8 bytes)."""
    if dtype.name == "bfloat16":  # an ml_dtypes array handed over in memory
        return "bfloat16"
    if dtype.kind == "f" and dtype.itemsize in (2, 4, 8):
        return f"float{8 * dtype.itemsize}"
    raw = dtype.kind in "uiV" and not dtype.fields and dtype.subdtype is None
    if raw and dtype.itemsize in (2, 4, 8):
        return None
    raise _Refused(
        f"holds {dtype}, not floats: ulp counts steps of float16, bfloat16, float32 or float64 "
        "(integers: use tolerance(atol=n); bit for bit: 'elementwise')"
    )


def _words(array: npt.NDArray[Any], word: np.dtype[Any]) -> npt.NDArray[Any]:
    """An array's elements as unsigned words in native byte order. Void words are read the way
    numpy wrote them, in the writing machine's order: little-endian on every current one."""
    data: npt.NDArray[Any] = np.ascontiguousarray(array).reshape(array.shape)  # 0-d stays 0-d
    if data.dtype.name == "bfloat16":  # ml_dtypes: native order
        return data.view(word)
    if data.dtype.kind == "V":
        words: npt.NDArray[Any] = data.view(word.newbyteorder("<")).astype(word)
        return words
    return data.astype(data.dtype.newbyteorder("=")).view(word)


def float_bits(
    array: npt.NDArray[Any], declared: str | None
) -> tuple[npt.NDArray[Any], FloatFormat, int | None]:
    """The bits of ``array`` in the format it holds: its float dtype, or ``declared`` for raw
    words and for wider floats holding narrower values (float32 holding bfloat16s). The third
    value is the first flat position whose value is not of the declared format, or None."""
    stored = _storage(array.dtype)
    name = declared or stored
    if name is None and array.dtype.kind in "ui":
        raise _Refused(
            f"holds {array.dtype}, not floats: ulp counts float steps (integers: use "
            "tolerance(atol=n); float bits stored as integers: say which float, as in "
            "ulp(1, dtype='bfloat16'))"
        )
    if name is None:
        raise _Refused(
            f"holds raw {array.dtype.itemsize}-byte words ({array.dtype}; numpy writes an "
            "ml_dtypes.bfloat16 array as '<V2'): say which float they are, as in "
            "ulp(1, dtype='bfloat16')"
        )
    fmt = FORMATS[name]
    if stored is None or stored == name:
        if array.dtype.itemsize != fmt.width:
            raise _Refused(
                f"holds {array.dtype.itemsize}-byte words, but dtype={name!r} is {fmt.width} "
                "bytes wide"
            )
        return _words(array, fmt.word), fmt, None
    wide = FORMATS[stored]
    if wide.width <= fmt.width:
        raise _Refused(
            f"holds {stored}, which is not wider than dtype={name!r}: ulp counts the steps of "
            "the stored format, or of a narrower one whose values were widened to it"
        )
    return _narrowed(_words(array, wide.word), wide, fmt)


def _narrowed(
    bits: npt.NDArray[Any], wide: FloatFormat, fmt: FloatFormat
) -> tuple[npt.NDArray[Any], FloatFormat, int | None]:
    """The bits of ``fmt`` that values stored in the wider ``wide`` were widened from, and the
    first position whose value was not (it does not survive the round trip bit for bit)."""
    values = wide.values(bits)
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt.name == "bfloat16":  # the upper half of the float32, when the lower is zero
            single = values.astype(np.float32).view(np.uint32)
            narrow = (single >> np.uint32(16)).astype(np.uint16)
        else:
            narrow = values.astype(_NATIVE[fmt.name]).view(fmt.word)
        back = fmt.values(narrow).astype(values.dtype).view(wide.word)
    lost = np.flatnonzero(back.reshape(-1) != bits.reshape(-1))
    return narrow, fmt, int(lost[0]) if lost.size else None


# ------------------------------------------------------------------ the comparer


def compare_ulp(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    *,
    limits: media.MediaLimits | None = None,
) -> GateResult:
    """``ulp(n)`` on tensors: every element within ``n`` float steps, with the spread (the
    largest ULP distance and where, the 99th percentile, the count beyond ``n``) and the largest
    ``|diff|``. A dtype ulp cannot count steps of is an :class:`ArtifactError` naming the file."""
    epath, opath = need_full(gate, expected, obtained)
    if kind != "tensor":
        raise LosslessError(f"gate {gate.spec} counts float steps of tensors, not of {kind}")
    pair = sides(limits, expected)
    result = new_result(expected, gate, kind, "element")
    result.notes.append("ulp is a lossy gate: passing it does not prove the output unchanged")
    ea, oa = load_arrays(epath, pair[0]), load_arrays(opath, pair[1])
    if set(ea) != set(oa):
        result.metadata_diffs.append(
            f"members: missing {sorted(set(ea) - set(oa))}, unexpected {sorted(set(oa) - set(ea))}"
        )
    steps, values = Spread(), Spread(percentile=False)  # the percentile of ulp is in ULPs
    total = bitwise = 0
    for name in sorted(set(ea) & set(oa)):
        label = f"member {name!r} " if name else ""
        b, a = ea[name], oa[name]
        if a.shape != b.shape:
            result.metadata_diffs.append(f"{label}shape: expected {b.shape}, obtained {a.shape}")
            continue
        held = [
            _held(gate, expected.name, side, label, array, path, result)
            for side, array, path in (("expected", b, epath), ("obtained", a, opath))
        ]
        (eb, efmt), (ob, ofmt) = held
        if efmt != ofmt:
            result.metadata_diffs.append(
                f"{label}dtype: expected {efmt.name}, obtained {ofmt.name}"
            )
        if result.metadata_diffs:
            continue
        if a.dtype != b.dtype:
            result.notes.append(
                f"{label}stored as {b.dtype} (expected) and {a.dtype} (obtained): both compared "
                f"as {efmt.name}"
            )
        total += eb.size
        bitwise += int(np.count_nonzero(bits_differ(eb, ob)))
        _judge_member(result, gate, (name, label), (eb, ob), efmt, (steps, values))
    result.total = total
    result.mismatch_count = steps.beyond
    result.diagnostics.update(steps.figures("ulp", infinite=int(INFINITE_STEPS)))
    result.diagnostics["count_beyond"] = steps.beyond
    result.diagnostics.update(values.figures("abs_diff"))
    result.diagnostics["bitwise_differing"] = bitwise
    return settle(result)


def _held(
    gate: Gate,
    artifact: str,
    side: str,
    label: str,
    array: npt.NDArray[Any],
    path: Path,
    result: GateResult,
) -> tuple[npt.NDArray[Any], FloatFormat]:
    """The bits and format one side holds; values not of a declared narrower format are noted
    as a metadata difference, a dtype ulp cannot count is an error naming the file."""
    try:
        bits, fmt, lost = float_bits(array, gate.dtype)
    except _Refused as exc:
        raise ArtifactError(
            path, f"gate {gate.spec} on {artifact!r}: the {side} {label}tensor {exc}"
        ) from None
    if lost is not None:
        at = location_text(unravel(lost, array.shape))
        result.metadata_diffs.append(
            f"{label}values: the {side} tensor ({array.dtype}) holds {array.reshape(-1)[lost]} "
            f"at {at}, which is not a {fmt.name} value (dtype={fmt.name!r} says it holds "
            f"{fmt.name} values widened to {array.dtype})"
        )
    return bits, fmt


def _judge_member(
    result: GateResult,
    gate: Gate,
    member: tuple[str, str],
    bits: tuple[npt.NDArray[Any], npt.NDArray[Any]],
    fmt: FloatFormat,
    spreads: tuple[Spread, Spread],
) -> None:
    """One member's ULP distances and ``|diff|`` into the spreads, and its first element beyond
    ``n`` into the result. ``member``: its name and its label in messages."""
    (name, label), (eb, ob), (steps, values) = member, bits, spreads
    shape = eb.shape
    distance = ulp_distance(eb, ob, fmt)
    beyond = np.flatnonzero(distance.reshape(-1) > np.uint64(gate.ulps))

    def where(flat: int) -> str:
        return location_text(unravel(flat, shape), label)

    steps.add(distance, int(beyond.size), where)
    values.add(abs_diff(fmt.values(ob), fmt.values(eb)), 0, where)
    if beyond.size and result.first_mismatch is None:
        flat = int(beyond[0])
        result.first_mismatch = (
            f"{where(flat)}: expected {fmt.text(eb, flat)}, obtained {fmt.text(ob, flat)}: "
            f"{_apart(distance, (eb, ob), fmt, flat)} (more than {gate.ulps})"
        )
        result.location = {"member": name, "index": list(unravel(flat, shape))}


def _apart(
    distance: npt.NDArray[np.uint64],
    bits: tuple[npt.NDArray[Any], npt.NDArray[Any]],
    fmt: FloatFormat,
    flat: int,
) -> str:
    """Why an element is beyond: its distance, or which side is a NaN."""
    steps = int(distance.reshape(-1)[flat])
    if steps != INFINITE_STEPS:
        return f"{steps} {fmt.name} ulp{'' if steps == 1 else 's'} apart"
    if all(bool(is_nan(side.reshape(-1)[flat], fmt)) for side in bits):
        return "NaNs with different bits (a NaN matches only the same NaN)"
    return "NaN against a number (no finite distance)"
