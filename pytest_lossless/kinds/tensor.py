"""The tensor kind: ``.npy`` and ``.npz``, compared bit for bit (dtype, shape, NaN payloads and
signed zeros count) under ``elementwise``, or within ``tolerance`` / ``ulp(n)``.

The canary changes one element: its last bit (``elementwise``), n + 1 ULPs (``ulp(n)``) or just
beyond ``atol + rtol * |x|`` (``tolerance``); a failed comparison lists the first differing
elements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, Literal

from ..core.digests import Fingerprint
from ..core.records import Record, meta, spec
from ..gates.gate import first_difference, new_result, note_meta, settle
from .interface import BuiltinKind

if TYPE_CHECKING:
    import zipfile

    import numpy.typing as npt

    from ..core.artifact import Artifact
    from ..core.records import JsonObject
    from ..gates import Gate, GateResult
    from ..gates.ulps import FloatFormat
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

    def fingerprint(self, path: Path) -> JsonObject:
        return fingerprint_tensor(path, limits=self.limits()).to_json()

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        return compare_tensor(gate, expected, obtained, self.name, limits=self.limits())

    def compare_tolerance(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        return compare_tolerance(gate, expected, obtained, self.name, limits=self.limits())

    def plan(self, gate: Gate, artifact: Artifact, folder: Path) -> Plan:
        assert artifact.path is not None
        out = folder / f"changed{artifact.path.suffix}"
        return perturb_tensor(artifact.path, out, gate, self.limits())

    def emptiness(self, artifact: Artifact) -> str | None:
        """A ``.npy`` with no element, an ``.npz`` with no array or none with an element."""
        members = TensorFingerprint.from_json(artifact.fingerprint).members
        if any(array.element_count for array in members.values()):
            return None
        shapes = "; ".join(
            f"{name + ': ' if name else ''}shape {tuple(array.shape)}"
            for name, array in members.items()
        )
        return f"no element ({shapes or 'no array'})"

    def pictures(
        self, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str]:
        return listing(result, expected, obtained, folder, self.limits(), "index")


# ------------------------------------------------------------------ the fingerprint


@dataclass(frozen=True, slots=True)
class ArrayDigests(Record):
    """One array (a ``.npy``, or one member of an ``.npz``): its dtype with byte order (as numpy
    describes it, JSON-normalised), shape, and digests of its C-order data, whole and per
    ``chunk_elements`` (so a digest-only golden can localise a change)."""

    dtype: Any
    shape: tuple[int, ...]
    element_count: int
    data_sha256: str
    chunk_elements: int = field(metadata=meta(absent=1))
    chunk_sha256: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TensorFingerprint(Fingerprint):
    """A ``.npy`` (``format="npy"``: its one ``array``, whose fields a manifest keeps at the top
    level) or an ``.npz`` (``format="npz"``: its arrays by name, under ``members``), with the
    file's size and SHA-256."""

    size: int
    sha256: str
    format: str = "npy"
    array: ArrayDigests | None = spec(None, flatten=True)
    npz: dict[str, ArrayDigests] | None = spec(None, key="members", omit="none")

    @property
    def members(self) -> dict[str, ArrayDigests]:
        """The arrays by name (a ``.npy``'s one array is member ``""``)."""
        return {"": self.array} if self.array is not None else dict(self.npz or {})


def _tensor_fp_from_stream(
    path: Path,
    fh: IO[bytes],
    label: str,
    member: tuple[zipfile.ZipInfo, MediaLimits] | None = None,
) -> ArrayDigests:
    """The array fingerprint of one ``.npy`` read as a stream (a file or an ``.npz`` member,
    whose declared size is checked against the limits before its data is read)."""
    import hashlib

    import numpy as np

    from ..core.digests import CHUNK_BYTES, sha256_hex
    from ..media.npy import (
        check_npy_member,
        descr,
        element_count,
        read_npy_header,
        truncated_tensor,
    )

    shape, fortran, dtype = read_npy_header(path, fh, label)
    if member is not None:
        check_npy_member(path, member[0], shape, dtype, fh.tell(), member[1])
    count = element_count(shape)
    itemsize = dtype.itemsize
    expected = count * itemsize
    chunk_elements = max(1, CHUNK_BYTES // max(1, itemsize))
    whole = hashlib.sha256()
    chunks: list[str] = []
    if fortran and len(shape) > 1:
        raw = fh.read(expected)
        if len(raw) < expected:
            truncated_tensor(path, label, count, len(raw) // max(1, itemsize))
        array = np.frombuffer(raw, dtype=dtype).reshape(shape, order="F")
        data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        step = chunk_elements * itemsize
        for offset in range(0, data.size, step):
            view = data[offset : offset + step].data
            whole.update(view)
            chunks.append(sha256_hex(view))
    else:
        remaining = expected
        step = chunk_elements * itemsize
        while remaining > 0:
            part = fh.read(min(step, remaining))
            if not part:
                break
            whole.update(part)
            chunks.append(sha256_hex(part))
            remaining -= len(part)
        if remaining > 0:
            truncated_tensor(path, label, count, (expected - remaining) // max(1, itemsize))
    return ArrayDigests(
        descr(dtype), tuple(shape), count, whole.hexdigest(), chunk_elements, tuple(chunks)
    )


def _npy_c_order_fp(path: Path) -> TensorFingerprint | None:
    """A C-order ``.npy``: its data digests straight from a memory map, in parallel threads.

    None for Fortran order and empty arrays (the streaming path handles them).
    """
    import mmap
    import os

    from ..core.digests import CHUNK_BYTES, parallel_digests
    from ..media.npy import descr, element_count, read_npy_header, truncated_tensor

    with open(path, "rb") as fh:
        shape, fortran, dtype = read_npy_header(path, fh, "")
        offset = fh.tell()
        count = element_count(shape)
        expected = count * dtype.itemsize
        if (fortran and len(shape) > 1) or expected == 0:
            return None
        size = os.fstat(fh.fileno()).st_size
        if size - offset < expected:
            truncated_tensor(path, "", count, (size - offset) // max(1, dtype.itemsize))
        chunk_elements = max(1, CHUNK_BYTES // dtype.itemsize)
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            data = view[offset : offset + expected]
            try:
                whole, chunks, file_sha = parallel_digests(
                    data, chunk_elements * dtype.itemsize, view
                )
            finally:
                data.release()
                view.release()
    array = ArrayDigests(descr(dtype), tuple(shape), count, whole, chunk_elements, tuple(chunks))
    return TensorFingerprint(size, file_sha, "npy", array)


def fingerprint_tensor(path: Path, *, limits: MediaLimits | None = None) -> TensorFingerprint:
    """Fingerprint a ``.npy`` (dtype, shape, raw C-order bytes) or every member of a ``.npz``.

    A ``.npy`` must hold the data its header declares (or it is truncated). Each ``.npz``
    member's declared size is checked before it is read (:func:`check_npz_member`)."""
    import zipfile

    from ..core.artifact import read_head
    from ..core.digests import file_digest
    from ..errors import ArtifactError
    from ..media.detect import NPY_MAGIC
    from ..media.limits import MediaLimits
    from ..media.npy import check_npz_member

    path = Path(path)
    limits = limits or MediaLimits.from_env()
    head = read_head(path, 8)
    if head.startswith(NPY_MAGIC):
        fast = _npy_c_order_fp(path)
        if fast is not None:
            return fast
    size, sha = file_digest(path)
    if head.startswith(NPY_MAGIC):
        with open(path, "rb") as fh:
            return TensorFingerprint(size, sha, "npy", _tensor_fp_from_stream(path, fh, ""))
    members: dict[str, ArrayDigests] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    raise ArtifactError(
                        path, f"member {info.filename!r} is not a .npy array: not an .npz file"
                    )
                name = info.filename[: -len(".npy")]
                check_npz_member(path, info, limits)
                with zf.open(info) as member:
                    members[name] = _tensor_fp_from_stream(
                        path, member, f"member {name!r}: ", (info, limits)
                    )
    except zipfile.BadZipFile as exc:
        raise ArtifactError(path, f"damaged .npz archive: {exc}") from None
    return TensorFingerprint(size, sha, "npz", npz=members)


# ------------------------------------------------------------------ elementwise: the exact gate


def compare_tensor(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    *,
    limits: MediaLimits | None = None,
) -> GateResult:
    """``elementwise``: same dtype (with byte order), shape and bits, element by element
    (arrays are loaded, within ``limits``, only to locate a difference)."""
    import numpy as np

    from ..gates.arrays import (
        bits_differ,
        error_stats,
        index_text,
        load_arrays,
        sides,
        unravel,
        value_text,
    )

    pair = sides(limits, expected)
    result = new_result(expected, gate, kind, "element")
    emem = TensorFingerprint.from_json(expected.fingerprint).members
    omem = TensorFingerprint.from_json(obtained.fingerprint).members
    if set(emem) != set(omem):
        missing = sorted(set(emem) - set(omem))
        extra = sorted(set(omem) - set(emem))
        result.metadata_diffs.append(f"members: missing {missing}, unexpected {extra}")
    full = expected.path is not None and obtained.path is not None
    # Loaded only when a member's digests differ: a passing comparison reads no tensor data.
    loaded: list[dict[str, npt.NDArray[Any]]] = []
    count = 0
    total = 0
    unknown = False
    for name in sorted(set(emem) & set(omem)):
        em, om = emem[name], omem[name]
        label = f"member {name!r} " if name else ""
        note_meta(
            result.metadata_diffs,
            f"{label}dtype",
            str(em.dtype),
            str(om.dtype),
        )
        note_meta(
            result.metadata_diffs,
            f"{label}shape",
            em.shape,
            om.shape,
        )
        total += em.element_count
        if em.dtype != om.dtype or em.shape != om.shape:
            continue
        if em.data_sha256 == om.data_sha256:
            continue
        if full:
            if not loaded:
                loaded += [
                    load_arrays(path, side)
                    for path, side in zip((expected.path, obtained.path), pair, strict=True)
                    if path
                ]
            a, b = loaded[0][name], loaded[1][name]
            differ = bits_differ(a, b)
            n = int(np.count_nonzero(differ))
            count += n
            if n and result.first_mismatch is None:
                flat = int(np.flatnonzero(differ.reshape(-1))[0])
                index = unravel(flat, a.shape)
                result.first_mismatch = (
                    f"{label}{index_text(index)}: expected {value_text(a, index)}, "
                    f"obtained {value_text(b, index)}"
                )
                result.location = {"member": name, "index": list(index)}
                if a.dtype.kind in "fiuc":
                    result.diagnostics.update(error_stats(a, b, 1.0))
                    result.diagnostics.pop("psnr_db", None)
        else:
            unknown = True
            chunk = first_difference(em.chunk_sha256, om.chunk_sha256)
            step = em.chunk_elements
            if result.first_mismatch is None and chunk is not None:
                start = chunk * step
                end = min((chunk + 1) * step, em.element_count)
                at = index_text(unravel(start, em.shape))
                result.first_mismatch = (
                    f"{label}within flat elements [{start}, {end}) starting at {at} (only "
                    "digests are kept: the exact element is unknown)"
                )
                result.location = {"member": name, "flat_range": [start, end]}
    result.total = total
    result.mismatch_count = None if unknown else count
    return settle(result)


# ------------------------------------------------------------------ tolerance


def compare_tolerance(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    limits: MediaLimits | None = None,
) -> GateResult:
    """``tolerance`` for tensors: every element of every member within ``atol + rtol *
    |expected|``."""
    from ..gates.arrays import index_text, load_arrays, unravel, value_text
    from ..gates.lossy import begin_tolerance, bounds_text, location_text, tolerance_arrays

    result, (epath, opath), pair = begin_tolerance(
        gate, expected, obtained, kind, "element", limits
    )
    bounds = bounds_text(gate)

    def describe_element(label: str, flat: int, a: Any, b: Any) -> str:
        index = unravel(flat, a.shape)
        return (
            f"{label}{index_text(index)}: expected {value_text(b, index)}, obtained "
            f"{value_text(a, index)} (outside {bounds})"
        )

    def where(label: str, array: npt.NDArray[Any], flat: int) -> str:
        return location_text(unravel(flat, array.shape), label)

    ea, oa = load_arrays(epath, pair[0]), load_arrays(opath, pair[1])
    if set(ea) != set(oa):
        result.metadata_diffs.append(
            f"members: missing {sorted(set(ea) - set(oa))}, unexpected {sorted(set(oa) - set(ea))}"
        )
    tolerance_arrays(
        result,
        gate,
        ((f"member {n!r} " if n else "", oa[n], ea[n]) for n in sorted(set(ea) & set(oa))),
        describe_element,
        where,
    )
    return settle(result)


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
        from ..core.artifact import read_head

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
        if array.dtype.kind in "fc" and not np.isfinite(x):  # no bound reaches it: a number
            y = np.zeros(1, dtype=array.dtype)[0]
            return y, f"{show(x)} -> {show(y)}, a number in place of a non-finite value"
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
    if lost is not None:
        return None, ""
    if bool(ulps.is_nan(bits, fmt)[0]):  # a NaN is infinitely far from any other bits: +0
        return _ulp_write(array, old, fmt, 0, f"{fmt.text(bits, 0)} -> 0 (a number for a NaN)")
    place = int(ulps.ordered(bits, fmt)[0])
    steps = gate.ulps + 1
    top = fmt.inf  # +inf's place; -inf's is -top
    target = place + steps if place + steps <= top else place - steps
    if not -top <= target <= top:
        return None, ""
    word = target if target >= 0 else fmt.sign | -target
    new_bits = np.array([word], dtype=fmt.word)
    before, after = fmt.text(bits, 0), fmt.text(new_bits, 0)
    return _ulp_write(array, old, fmt, word, f"moved {steps} {fmt.name} ulps, {before} -> {after}")


def _ulp_write(
    array: npt.NDArray[Any], old: npt.NDArray[Any], fmt: FloatFormat, word: int, what: str
) -> tuple[Any, str]:
    """``old`` with the float bits ``word`` of ``fmt``, written back as the array stores it."""
    import numpy as np

    new_bits = np.array([word], dtype=fmt.word)
    changed = old.copy()
    if array.dtype.kind == "f" and array.dtype.itemsize != fmt.width:
        changed[0] = fmt.values(new_bits)[0]  # wider floats holding narrower values
    else:
        order: Literal["<", ">", "="] = "<" if array.dtype.kind == "V" else "="
        if array.dtype.byteorder == ">":
            order = ">"
        changed.view(fmt.word.newbyteorder(order))[0] = word
    return changed[0], what


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
    from ..core.paths import safe_name

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
    from ..media.pcm import load_audio

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
