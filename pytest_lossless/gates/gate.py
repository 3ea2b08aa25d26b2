"""The gate: what a test asks (:class:`Gate`: its name, its tolerance, its text form, and which
kinds it applies to) and what it answers (:class:`GateResult`: the outcome on one artifact, as
data for receipts and as text for a CI log), with how every comparer builds that answer: a
result started for a gate (:func:`new_result`), metadata differences noted (:func:`note_meta`),
and pass/fail settled from what was noted (:func:`settle`).

Standard library only (with ``errors`` and ``core``), so that hook specifications, manifests,
receipts and settings can name gates and carry results without loading numpy or media.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import TYPE_CHECKING, Any

from ..core.records import Record, RecordError, from_json
from ..core.verdict import Verdict
from ..errors import LosslessError

if TYPE_CHECKING:
    from ..core.artifact import Artifact

GATE_NAMES = ("bytes", "decoded", "elementwise", "tolerance", "ulp")

#: The float formats ``ulp`` counts steps of. ``bfloat16`` needs no library: its bits are the
#: upper half of a float32.
ULP_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: Other spellings of those formats (the short ones; numpy's: ``float`` is float64), as a user
#: may write them.
_DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "fp32": "float32",
    "f32": "float32",
    "single": "float32",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
    "float": "float64",
}
#: The largest ``n`` of ``ulp(n)``: float64's widest distance (-inf to +inf) is below 2**64.
MAX_ULPS = 2**63 - 1
_GATE_CHOICES = "'bytes', 'decoded', 'elementwise', tolerance(atol=..., rtol=...) or ulp(n)"


def number_text(value: float) -> str:
    """``0.0`` -> ``0``, ``1e-05`` -> ``1e-05``: short and exact (``repr`` round-trips)."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def dtype_name(dtype: Any) -> str:
    """The ``ulp`` format a user named: ``"bfloat16"``, ``np.float16``, ``np.dtype("float32")``,
    ``ml_dtypes.bfloat16`` or ``torch.bfloat16`` all name one of :data:`ULP_DTYPES`."""
    if isinstance(dtype, str):
        text = dtype
    else:  # a numpy dtype has .name, a scalar type (np.float16, ml_dtypes.bfloat16) __name__
        text = str(getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or dtype)
    key = text.strip().strip("'\"").lower().removeprefix("torch.").removeprefix("numpy.")
    name = _DTYPE_ALIASES.get(key, key)
    if name not in ULP_DTYPES:
        raise LosslessError(
            f"gate ulp: dtype={dtype!r} is not a float format ulp counts steps of: use one of "
            + ", ".join(repr(d) for d in ULP_DTYPES)
        )
    return name


@dataclass(frozen=True)
class Gate:
    """A named gate; ``tolerance`` carries its ``atol`` and ``rtol``, ``ulp`` its ``ulps`` (n)
    and the float format it counts steps of (``dtype``; None: the tensor's own)."""

    name: str
    atol: float = 0.0
    rtol: float = 0.0
    ulps: int = 0
    dtype: str | None = None

    def __post_init__(self) -> None:
        if self.name not in GATE_NAMES:
            raise LosslessError(f"unknown gate {self.name!r}: use {_GATE_CHOICES}")
        for label, value in (("atol", self.atol), ("rtol", self.rtol)):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise LosslessError(f"gate {self.name}: {label} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise LosslessError(f"gate {self.name}: {label}={value!r} must be finite and >= 0")
            object.__setattr__(self, label, float(value))
        if self.name != "tolerance" and (self.atol or self.rtol):
            what = "counts float steps" if self.name == "ulp" else "is exact"
            raise LosslessError(
                f"gate {self.name!r} {what} and takes no atol/rtol; use "
                "tolerance(atol=..., rtol=...) for a (lossy) tolerance"
            )
        if self.name != "ulp":
            if self.ulps or self.dtype is not None:
                raise LosslessError(
                    f"gate {self.name!r} takes no ulps/dtype; use ulp(n) to allow n float steps"
                )
            return
        ulps = self.ulps
        if not isinstance(ulps, int) or isinstance(ulps, bool):
            raise LosslessError(f"gate ulp: n must be a whole number of ULPs, not {ulps!r}")
        if not 0 <= ulps <= MAX_ULPS:
            raise LosslessError(f"gate ulp: n={ulps} must be between 0 and 2**63 - 1")
        if self.dtype is not None:
            object.__setattr__(self, "dtype", dtype_name(self.dtype))

    @property
    def lossless(self) -> bool:
        """Whether passing this gate proves the artifact unchanged (False for tolerance, ulp)."""
        return self.name not in ("tolerance", "ulp")

    @property
    def spec(self) -> str:
        """The gate as text, as in manifests: ``bytes``, ``tolerance(atol=1e-05, rtol=0)``,
        ``ulp(2)``, ``ulp(1, dtype='bfloat16')``: Python a test could be written with."""
        if self.name == "tolerance":
            return f"tolerance(atol={number_text(self.atol)}, rtol={number_text(self.rtol)})"
        if self.name == "ulp":
            dtype = f", dtype={self.dtype!r}" if self.dtype else ""
            return f"ulp({self.ulps}{dtype})"
        return self.name

    def __str__(self) -> str:
        return self.spec


def tolerance(*, atol: float = 0.0, rtol: float = 0.0) -> Gate:
    """The explicitly lossy gate: ``|obtained - expected| <= atol + rtol * |expected|``.

    NaN equals NaN only where both sides are NaN; ``-0.0`` equals ``0.0``. A result under this
    gate is never reported as lossless.
    """
    return Gate("tolerance", atol=atol, rtol=rtol)


def ulp(n: int, *, dtype: Any = None) -> Gate:
    """The lossy gate in float steps: each obtained float is within ``n`` units in the last place
    of the expected one, counted in its own format (float16, bfloat16, float32, float64).

    Adjacent floats are 1 apart, ``+0`` and ``-0`` 0 apart, the largest finite float 1 from
    infinity; NaN matches only a NaN with the same bits, and NaN against a number fails. A
    tensor stored as raw 16-bit words (``numpy`` writes an ``ml_dtypes.bfloat16`` array as
    ``'<V2'``, torch users save ``.view(torch.uint16)``), or as float32 holding bfloat16 values,
    says what it holds with ``dtype="bfloat16"``. A result under this gate is never lossless.
    """
    return Gate("ulp", ulps=n, dtype=dtype)


_TOLERANCE_RE = re.compile(r"^tolerance\s*(?:\((?P<args>.*)\))?$", re.DOTALL)
_ULP_RE = re.compile(r"^ulp\s*\((?P<args>.*)\)$", re.DOTALL)


def parse_gate(value: str | Gate | None) -> Gate | None:
    """A :class:`Gate` from a gate, its spec string (``"tolerance(atol=1e-5)"``), or None."""
    if value is None or isinstance(value, Gate):
        return value
    if not isinstance(value, str):
        raise LosslessError(
            f"gate must be a name such as 'decoded', tolerance(atol=...) or ulp(n), not {value!r}"
        )
    text = value.strip()
    if text in ("bytes", "decoded", "elementwise"):
        return Gate(text)
    ulp_match = _ULP_RE.match(text)
    if ulp_match:
        return _parse_ulp(value, ulp_match["args"])
    match = _TOLERANCE_RE.match(text)
    if not match:
        hint = " (ulp needs its n: 'ulp(1)')" if text == "ulp" else ""
        raise LosslessError(f"unknown gate {value!r}: use {_GATE_CHOICES}{hint}")
    kwargs: dict[str, float] = {}
    for part in (match["args"] or "").split(","):
        if not part.strip():
            continue
        key, sep, raw = (p.strip() for p in part.partition("="))
        if not sep or key not in ("atol", "rtol") or key in kwargs:
            raise LosslessError(
                f"bad gate {value!r}: tolerance takes keyword arguments atol= and rtol= only"
            )
        try:
            kwargs[key] = float(raw)
        except ValueError:
            raise LosslessError(f"bad gate {value!r}: {key}={raw!r} is not a number") from None
    return tolerance(**kwargs)


def _parse_ulp(value: str, args: str) -> Gate:
    """``ulp(2)``, ``ulp(n=2)``, ``ulp(1, dtype='bfloat16')`` (the dtype quoted or not)."""
    parts = [p.strip() for p in args.split(",")]
    if parts and not parts[-1] and len(parts) > 1:
        parts.pop()  # a trailing comma, as Python allows
    given: dict[str, str] = {}
    for position, part in enumerate(parts):
        key, sep, raw = (p.strip() for p in part.partition("="))
        if not sep and position == 0:
            key, raw = "n", key
        if (not sep and position) or key not in ("n", "dtype") or key in given or not raw:
            raise LosslessError(
                f"bad gate {value!r}: ulp takes n (a whole number) and dtype= only, "
                "as in ulp(1) or ulp(1, dtype='bfloat16')"
            )
        given[key] = raw
    if "n" not in given:
        raise LosslessError(f"bad gate {value!r}: ulp needs its n, as in ulp(1)")
    if not re.fullmatch(r"[0-9]+", given["n"]):
        raise LosslessError(f"bad gate {value!r}: n={given['n']} is not a whole number of ULPs")
    dtype = given.get("dtype")
    if dtype is not None and not re.fullmatch(r"(['\"]?)[A-Za-z0-9_.]+\1", dtype):
        raise LosslessError(f"bad gate {value!r}: dtype={dtype} is not a float format name")
    return ulp(int(given["n"]), dtype=dtype)


def lossy_figure(gate: Gate, diagnostics: Mapping[str, Figure]) -> str | None:
    """The key figure of a lossy result, as the verdict table shows it: ``max 1 ulp at [3, 7],
    p99 0 ulp, 0 beyond 1`` or ``max |diff| 2e-07 at [5], p99 0, 0 beyond``; None without one."""
    if gate.name == "ulp" and "max_ulp" in diagnostics:
        return (
            f"max {_figure(diagnostics['max_ulp'])} ulp{_at(diagnostics.get('max_ulp_at'))}, "
            f"p99 {_figure(diagnostics.get('p99_ulp'))} ulp, "
            f"{diagnostics.get('count_beyond')} beyond {gate.ulps}"
        )
    if gate.name == "tolerance" and "max_abs_diff" in diagnostics:
        return (
            f"max |diff| {_figure(diagnostics['max_abs_diff'])}"
            f"{_at(diagnostics.get('max_abs_diff_at'))}, "
            f"p99 {_figure(diagnostics.get('p99_abs_diff'))}, "
            f"{diagnostics.get('count_beyond')} beyond"
        )
    return None


def _figure(value: Any) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.6g}"
    return str(value)


def _at(where: Any) -> str:
    return f" at {where}" if where else ""


def check_gate_applies(
    kind: str, gate: Gate, allowed: tuple[str, ...], artifact: str = "", hint: str = ""
) -> None:
    """Refuse a gate that means nothing for ``kind`` (``elementwise`` on a video...).

    ``allowed`` are the kind's gates; ``hint`` says which gate does what was asked.
    """
    if gate.name in allowed:
        return
    named = f" {artifact!r}" if artifact else ""
    shown = {"tolerance": "tolerance(atol=..., rtol=...)", "ulp": "ulp(n)"}
    choices = ", ".join(shown.get(g, repr(g)) for g in allowed)
    raise LosslessError(
        f"gate {gate.spec!r} does not apply to the {kind} artifact{named}: use {choices}"
        + (f" ({hint})" if hint else "")
    )


# ------------------------------------------------------------------ what it answers

#: One figure of a result's ``diagnostics`` (never a gate): a number (PSNR, max error, a count;
#: ``inf``), where it was found (``"frame 3 sample 7"``), or none.
Figure = int | float | str | None
#: One value of a result's ``location``: a position (a frame, an offset, a stream), a name (a
#: tensor member, a pixel format), a range or an index (``[start, end]``), or unknown.
LocationValue = int | str | list[int] | None


@dataclass
class GateResult(Record):
    """The outcome of one gate on one artifact, with the first mismatch and how many differ.

    Its JSON (a receipt's gate entry) is its fields in order: :meth:`to_dict` and
    :meth:`from_dict` are :mod:`..core.records`' pair under the names hooks and receipts know.
    """

    artifact: str
    kind: str
    gate: str
    lossless: bool
    passed: bool
    metadata_diffs: list[str] = field(default_factory=list)
    unit: str = "byte"
    first_mismatch: str | None = None
    mismatch_count: int | None = None
    total: int | None = None
    diagnostics: dict[str, Figure] = field(default_factory=dict)
    diagnostic_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Where the first mismatch is, as data (``{"stream": 0, "frame": 7, "pts": 7}``), so that
    #: diagnostics (diff pictures) can be written after the comparison.
    location: dict[str, LocationValue] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return Verdict.PASS if self.passed else Verdict.FAIL

    def message(self) -> str:
        """Text for a CI log: artifact, gate, metadata first, first difference, count, where."""
        mode = "lossless" if self.lossless else "LOSSY: never reported as lossless"
        lines = [
            f"artifact {self.artifact!r} ({self.kind}), gate {self.gate} ({mode}): {self.verdict}"
        ]
        if self.metadata_diffs:
            lines.append("  metadata differs:")
            lines += [f"    - {diff}" for diff in self.metadata_diffs]
        if self.first_mismatch is not None:
            lines.append(f"  first differing {self.unit}: {self.first_mismatch}")
        plural = f"{self.unit}s"
        if self.mismatch_count is not None and (self.mismatch_count or not self.passed):
            of = f" of {self.total}" if self.total is not None else ""
            lines.append(f"  differing {plural}: {self.mismatch_count}{of}")
        elif not self.passed and self.first_mismatch is not None:
            lines.append(f"  differing {plural}: unknown (only digests are kept on one side)")
        if self.passed and self.total is not None and not self.mismatch_count:
            same = "identical" if self.lossless else "within tolerance"
            lines.append(f"  {self.total} {plural} {same}")
        if self.diagnostics:
            shown = ", ".join(f"{k}={_figure(v)}" for k, v in self.diagnostics.items())
            lines.append(f"  diagnostics (not gates): {shown}")
        if self.diagnostic_files:
            lines.append("  diagnostics written to:")
            lines += [f"    {path}" for path in self.diagnostic_files]
        elif not self.passed:
            lines.append("  no diagnostic files written")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    to_dict = Record.to_json

    @classmethod
    def from_dict(cls, data: object) -> GateResult:
        """The result a receipt's gate entry holds (unknown keys, such as ``evidence``, are
        ignored); :class:`LosslessError` naming what is missing or of the wrong type."""
        try:
            return from_json(cls, data)
        except RecordError as exc:
            raise LosslessError(f"gate result: {exc}: {data!r}") from None


def new_result(expected: Artifact, gate: Gate, kind: str, unit: str) -> GateResult:
    """A failing result for ``expected`` under ``gate``, until :func:`settle` says otherwise."""
    return GateResult(
        artifact=expected.name,
        kind=kind,
        gate=gate.spec,
        lossless=gate.lossless,
        passed=False,
        unit=unit,
    )


def note_meta(diffs: list[str], label: str, exp: Any, obt: Any, prefix: str = "") -> None:
    """Add ``label: expected X, obtained Y`` to ``diffs`` when the two differ."""
    if exp != obt:
        diffs.append(f"{prefix}{label}: expected {exp}, obtained {obt}")


def settle(result: GateResult) -> GateResult:
    """Passed when no metadata, no count and no first mismatch were noted."""
    result.passed = (
        not result.metadata_diffs and not result.mismatch_count and (result.first_mismatch is None)
    )
    return result


def first_difference(exp: Sequence[str], obt: Sequence[str]) -> int | None:
    """The index of the first differing digest (a missing one differs), or None."""
    for i, (a, b) in enumerate(zip_longest(exp, obt)):
        if a != b:
            return i
    return None
