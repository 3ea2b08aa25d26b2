"""Gates: the rules that compare an obtained artifact with the expected one.

``bytes`` compares the file's SHA-256; ``decoded`` compares stream metadata, then one digest per
decoded frame and the PCM samples; ``elementwise`` compares tensors bit for bit (NaN payloads and
the sign of zero count: arrays are compared as unsigned integer views, never with ``==``).
``tolerance(atol=, rtol=)`` and ``ulp(n)`` (floats within n units in the last place, per dtype,
bfloat16 included) are explicitly lossy: they need the full data on both sides, their results
are never reported as lossless, and they carry the spread of the differences. PSNR and max error
are labelled diagnostics, never gates.

Each kind's side of a gate is in that kind's module (:mod:`~..kinds`); this package holds what
every kind shares: the gate and its result (:mod:`.gate`, standard library only, so naming a
gate stays cheap), arrays as bits (:mod:`.arrays`), the lossy machinery (:mod:`.lossy`) and the
ulp comparer (:mod:`.ulps`, loaded on first use).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from .gate import GATE_NAMES as GATE_NAMES
from .gate import Gate as Gate
from .gate import GateResult as GateResult
from .gate import check_gate_applies as check_gate_applies
from .gate import lossy_figure as lossy_figure
from .gate import parse_gate as parse_gate
from .gate import tolerance as tolerance
from .gate import ulp as ulp

if TYPE_CHECKING:
    from .ulps import compare_ulp as compare_ulp

#: The names that need numpy and media, by the submodule that defines them. (The ``ulp``
#: comparer lives in ``ulps``: a submodule named ``ulp`` would replace the gate :func:`ulp` on
#: this package once imported.)
_LAZY = {
    "compare_ulp": "ulps",
}

__all__ = [
    "GATE_NAMES",
    "Gate",
    "GateResult",
    "check_gate_applies",
    "compare_ulp",
    "lossy_figure",
    "parse_gate",
    "tolerance",
    "ulp",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
