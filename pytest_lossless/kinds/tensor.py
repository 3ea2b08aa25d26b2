"""The tensor kind: ``.npy`` and ``.npz``, compared bit for bit (dtype, shape, NaN payloads and
signed zeros count) under ``elementwise``, or within ``tolerance`` / ``ulp(n)``.

The canary changes one element: its last bit (``elementwise``), n + 1 ULPs (``ulp(n)``) or just
beyond ``atol + rtol * |x|`` (``tolerance``); a failed comparison lists the first differing
elements.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .interface import BuiltinKind

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..core.artifact import Artifact
    from ..gates import Gate, GateResult
    from ..media.limits import MediaLimits
    from .canary import Plan

#: How many differing positions a listing shows.
_LISTED = 20
#: The limits on decoding the expected side and the obtained side.
Sides = tuple["MediaLimits", "MediaLimits"]


class TensorKind(BuiltinKind):
    """``.npy`` and ``.npz``: dtype, shape and bits (NaN payloads and signed zeros count)."""

    name = "tensor"
    default_gate = "elementwise"
    gates = ("bytes", "elementwise", "tolerance", "ulp")
    hints: ClassVar[dict[str, str]] = {
        "decoded": "tensors are compared bit for bit by 'elementwise'"
    }
    #: ``.npy`` (its magic string) and ``.npz`` (a zip: a local header or an empty archive).
    signatures = ((0, b"\x93NUMPY"), (0, b"PK\x03\x04"), (0, b"PK\x05\x06"))

    def detect(self, path: Path, head: bytes) -> bool:
        from ..media.detect import is_tensor_file

        return is_tensor_file(path, head)

    def fingerprint(self, path: Path) -> dict[str, Any]:
        from ..media.tensor import fingerprint_tensor

        return fingerprint_tensor(path, limits=self.limits())

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        from ..gates.exact import compare_tensor

        return compare_tensor(gate, expected, obtained, self.name, limits=self.limits())

    def plan(self, gate: Gate, artifact: Artifact, folder: Path) -> Plan:
        assert artifact.path is not None
        out = folder / f"changed{artifact.path.suffix}"
        return perturb_tensor(artifact.path, out, gate, self.limits())

    def pictures(
        self, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str]:
        return listing(result, expected, obtained, folder, self.limits(), "index")


# ------------------------------------------------------------------ the canary's copy


def _index_text(index: tuple[int, ...]) -> str:
    from ..gates.arrays import index_text

    return index_text(index)  # as the comparers write it


def perturb_tensor(path: Path, out: Path, gate: Gate, limits: MediaLimits | None) -> Plan:
    """A copy of a ``.npy``/``.npz`` with one element changed: its last bit (``elementwise``),
    n + 1 ULPs (``ulp(n)``) or just beyond ``atol + rtol * |x|`` (``tolerance``)."""
    import numpy as np

    from ..gates.arrays import load_arrays, unravel
    from .canary import Plan, Unavailable, Unfailable, middle_out

    arrays = {
        name: np.array(a, copy=True, order="K") for name, a in load_arrays(path, limits).items()
    }
    found = None
    for name in sorted(arrays):
        array = arrays[name]
        for flat in middle_out(array.size):
            index = unravel(flat, array.shape)
            changed, what = _tensor_change(array, index, gate)
            if changed is not None:
                found = (name, index, changed, what)
                break
        if found:
            break
    if found is None:
        if all(a.size == 0 for a in arrays.values()):
            raise Unavailable("the tensor has no element to change")
        if gate.name in ("tolerance", "ulp"):
            raise Unfailable(f"no element can be moved beyond {gate.spec}")
        raise Unavailable("no element of the tensor can be changed by one bit")
    name, index, value, what = found
    arrays[name][index] = value
    with open(out, "wb") as fh:  # a file object: numpy adds no suffix to it
        from ..media.detect import read_head

        if read_head(path, 6) == b"\x93NUMPY":
            np.save(fh, arrays[""], allow_pickle=False)
        else:
            savez: Any = np.savez  # members named as in the original (any name numpy takes)
            savez(fh, **arrays)
    label = f"member {name!r} " if name else ""
    return Plan(
        obtained=out,
        kind="tensor",
        unit=f"element {label}{_index_text(index)}: {what}",
        location={"member": name, "index": list(index)},
        prefix=f"{label}{_index_text(index)}",
    )


def _tensor_change(array: npt.NDArray[Any], index: tuple[int, ...], gate: Gate) -> tuple[Any, str]:
    """The new value of one element under ``gate`` and what it is, or (None, "")."""
    import numpy as np

    from .canary import beyond, flip_lsb, show

    old = np.array(array[index], dtype=array.dtype).reshape(1)
    if gate.name == "ulp":
        return _ulp_change(array, old, gate)
    if gate.name == "tolerance":
        if array.dtype.kind not in "biufc":
            return None, ""
        x = old[0]
        bound = gate.atol + gate.rtol * abs(complex(x) if array.dtype.kind == "c" else float(x))
        y = beyond(x, array.dtype, bound)
        if y is None:
            return None, ""
        return y, f"{show(x)} -> {show(y)}, beyond atol + rtol * |x| = {bound:g}"
    if array.dtype.kind == "f" and not np.isfinite(old[0]):
        return None, ""  # a NaN's payload does change, but a finite element says it plainly
    changed = flip_lsb(old)
    return changed[0], f"last bit flipped, {show(old[0])} -> {show(changed[0])}"


def _ulp_change(array: npt.NDArray[Any], old: npt.NDArray[Any], gate: Gate) -> tuple[Any, str]:
    """One element moved n + 1 ULPs in the format the gate counts, written back as stored."""
    import numpy as np

    from ..gates import ulps
    from .canary import Unavailable

    try:
        bits, fmt, lost = ulps.float_bits(old, gate.dtype)
    except Exception as exc:  # a dtype ulp cannot count: the comparator says so, not the canary
        raise Unavailable(f"ulp cannot count steps of this tensor: {exc}") from None
    if lost is not None or bool(ulps.is_nan(bits, fmt)[0]):
        return None, ""
    place = int(ulps.ordered(bits, fmt)[0])
    steps = gate.ulps + 1
    top = fmt.inf  # +inf's place; -inf's is -top
    target = place + steps if place + steps <= top else place - steps
    if not -top <= target <= top:
        return None, ""
    word = target if target >= 0 else fmt.sign | -target
    new_bits = np.array([word], dtype=fmt.word)
    changed = old.copy()
    if array.dtype.kind == "f" and array.dtype.itemsize != fmt.width:
        changed[0] = fmt.values(new_bits)[0]  # wider floats holding narrower values
    else:
        order: Literal["<", ">", "="] = "<" if array.dtype.kind == "V" else "="
        if array.dtype.byteorder == ">":
            order = ">"
        changed.view(fmt.word.newbyteorder(order))[0] = word
    before, after = fmt.text(bits, 0), fmt.text(new_bits, 0)
    return changed[0], f"moved {steps} {fmt.name} ulps, {before} -> {after}"


# ------------------------------------------------------------------ listings


def listing(
    result: GateResult,
    expected: Artifact,
    obtained: Artifact,
    folder: Path,
    limits: MediaLimits,
    key: str,
) -> list[str]:
    """A text listing of the first differing elements or samples (the audio kind's too)."""
    from ..core.digests import safe_name

    if result.passed or expected.path is None or obtained.path is None:
        return []
    if key not in result.location:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / safe_name(expected.name, default="artifact")
    pair = (limits, limits.for_golden(expected.fingerprint))
    return _write_listing(base, result, expected.path, obtained.path, pair)


def _write_listing(
    base: Path,
    result: GateResult,
    epath: Path,
    opath: Path,
    limits: Sides,
) -> list[str]:
    import numpy as np

    from ..gates.arrays import bits_differ, index_text, load_arrays, unravel, value_text
    from ..media.audio import load_audio

    if result.kind == "tensor":
        ea, oa = load_arrays(epath, limits[0]), load_arrays(opath, limits[1])
        name = str(result.location.get("member", ""))
        if name not in ea or name not in oa:
            return []
        a, b = np.asarray(ea[name]), np.asarray(oa[name])
    else:
        a, _ = load_audio(epath, limits=limits[0])
        b, _ = load_audio(opath, limits=limits[1])
        n = min(len(a), len(b))
        a, b = a[:n], b[:n]
    if a.shape != b.shape or a.dtype != b.dtype:
        return []
    differ = bits_differ(a, b)
    if not differ.any():
        return []
    lines = [
        f"# first differing positions of {result.artifact!r} under gate {result.gate}",
        "# index\texpected\tobtained",
    ]
    for flat in np.flatnonzero(differ.reshape(-1))[:_LISTED]:
        index = unravel(int(flat), a.shape)
        lines.append(f"{index_text(index)}\t{value_text(a, index)}\t{value_text(b, index)}")
    path = base.with_name(f"{base.name}.diff.txt")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [str(path)]
