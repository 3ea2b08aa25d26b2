"""The gate as a value: its name, its tolerance, its text form, and which kinds it applies to.

Standard library only (with ``errors``), so that hook specifications, manifests and settings can
name gates without loading numpy or media.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import LosslessError

GATE_NAMES = ("bytes", "decoded", "elementwise", "tolerance")


def number_text(value: float) -> str:
    """``0.0`` -> ``0``, ``1e-05`` -> ``1e-05``: short and exact (``repr`` round-trips)."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


@dataclass(frozen=True)
class Gate:
    """A named gate; ``tolerance`` carries its ``atol`` and ``rtol``."""

    name: str
    atol: float = 0.0
    rtol: float = 0.0

    def __post_init__(self) -> None:
        if self.name not in GATE_NAMES:
            raise LosslessError(
                f"unknown gate {self.name!r}: use 'bytes', 'decoded', 'elementwise' or "
                "tolerance(atol=..., rtol=...)"
            )
        for label, value in (("atol", self.atol), ("rtol", self.rtol)):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise LosslessError(f"gate {self.name}: {label} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise LosslessError(f"gate {self.name}: {label}={value!r} must be finite and >= 0")
            object.__setattr__(self, label, float(value))
        if self.name != "tolerance" and (self.atol or self.rtol):
            raise LosslessError(
                f"gate {self.name!r} is exact and takes no atol/rtol; use "
                "tolerance(atol=..., rtol=...) for a (lossy) tolerance"
            )

    @property
    def lossless(self) -> bool:
        """Whether passing this gate proves the artifact unchanged (False only for tolerance)."""
        return self.name != "tolerance"

    @property
    def spec(self) -> str:
        """The gate as text, as in manifests: ``bytes``, ``tolerance(atol=1e-05, rtol=0)``."""
        if self.name == "tolerance":
            return f"tolerance(atol={number_text(self.atol)}, rtol={number_text(self.rtol)})"
        return self.name

    def __str__(self) -> str:
        return self.spec


def tolerance(*, atol: float = 0.0, rtol: float = 0.0) -> Gate:
    """The explicitly lossy gate: ``|obtained - expected| <= atol + rtol * |expected|``.

    NaN equals NaN only where both sides are NaN; ``-0.0`` equals ``0.0``. A result under this
    gate is never reported as lossless.
    """
    return Gate("tolerance", atol=atol, rtol=rtol)


_TOLERANCE_RE = re.compile(r"^tolerance\s*(?:\((?P<args>.*)\))?$", re.DOTALL)


def parse_gate(value: str | Gate | None) -> Gate | None:
    """A :class:`Gate` from a gate, its spec string (``"tolerance(atol=1e-5)"``), or None."""
    if value is None or isinstance(value, Gate):
        return value
    if not isinstance(value, str):
        raise LosslessError(
            f"gate must be a name such as 'decoded' or tolerance(atol=...), not {value!r}"
        )
    text = value.strip()
    if text in ("bytes", "decoded", "elementwise"):
        return Gate(text)
    match = _TOLERANCE_RE.match(text)
    if not match:
        raise LosslessError(
            f"unknown gate {value!r}: use 'bytes', 'decoded', 'elementwise' or "
            "'tolerance(atol=..., rtol=...)'"
        )
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


def check_gate_applies(
    kind: str, gate: Gate, allowed: tuple[str, ...], artifact: str = "", hint: str = ""
) -> None:
    """Refuse a gate that means nothing for ``kind`` (``elementwise`` on a video...).

    ``allowed`` are the kind's gates; ``hint`` says which gate does what was asked.
    """
    if gate.name in allowed:
        return
    named = f" {artifact!r}" if artifact else ""
    choices = ", ".join(
        "tolerance(atol=..., rtol=...)" if g == "tolerance" else repr(g) for g in allowed
    )
    raise LosslessError(
        f"gate {gate.spec!r} does not apply to the {kind} artifact{named}: use {choices}"
        + (f" ({hint})" if hint else "")
    )
