"""The canary's perturbations: a copy of a real artifact with exactly one unit changed.

One byte of one decoded video frame (in a short lossless copy around it), one PCM sample by one
LSB (a copy written with the same subtype), the last bit of one tensor element; for a lossy gate
the smallest change of one unit beyond its bound (``ulp(n)``: n + 1 ULPs); for the ``bytes``
gate and for any kind without a perturbation of its own, one flipped bit of one byte of the
file. Each :class:`Plan` says what was changed and where the comparator must say it is.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .. import media
from ..errors import LosslessError
from ..gates import Gate


class Unavailable(Exception):
    """No copy with one unit changed can be made of this artifact (``reason`` says why)."""


class Unfailable(Exception):
    """No change of one unit goes beyond the gate's bound: the gate cannot fail."""


@dataclass
class Plan:
    """A perturbed copy: the file to judge, what to judge it against, and where it differs.

    ``expected`` is None when the copy is judged against the artifact itself; a video copy is
    judged against an unchanged copy of the same frames written the same way (``expected``).
    ``location`` (a subset of ``GateResult.location``) or ``prefix`` (how ``first_mismatch``
    starts) is where the comparator must say the difference is; neither: not checked.
    """

    obtained: Path
    kind: str
    unit: str
    expected: Path | None = None
    #: The fingerprint of ``expected``, when it was taken already (to check the copy).
    expected_fingerprint: dict[str, Any] | None = None
    location: dict[str, Any] = field(default_factory=dict)
    prefix: str | None = None

    def located(self, result_location: dict[str, Any], first_mismatch: str | None) -> bool | None:
        """Whether a FAIL named the changed unit (None: nothing to check it against)."""
        if not self.location and self.prefix is None:
            return None
        if self.location and all(result_location.get(k) == v for k, v in self.location.items()):
            return True
        return self.prefix is not None and (first_mismatch or "").startswith(self.prefix)


# ------------------------------------------------------------------ any file


def flip_byte(path: Path, out: Path, kind: str) -> Plan:
    """A copy of the file with the low bit of its middle byte flipped."""
    size = path.stat().st_size
    if size == 0:
        raise Unavailable("the file is empty: it has no byte to change")
    shutil.copyfile(path, out)
    offset = size // 2
    with open(out, "r+b") as fh:
        fh.seek(offset)
        old = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([old ^ 0x01]))
    return Plan(
        obtained=out,
        kind=kind,
        unit=f"byte {offset} of {size}, 0x{old:02x} -> 0x{old ^ 0x01:02x}",
        location={"offset": offset},
        prefix=f"offset {offset} ",
    )


# ------------------------------------------------------------------ one value beyond a bound


def beyond(value: Any, dtype: np.dtype[Any], bound: float, step: int = 1) -> Any:
    """The value nearest ``value`` (in ``dtype``, a finite number) whose distance from it is
    more than ``bound``, as the tolerance gate measures it (``|a - b|`` in float64 or exact
    integers); integers move in multiples of ``step``. None when no such value exists."""
    if dtype.kind == "b":
        return (not bool(value)) if bound < 1 else None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        jump = (math.floor(bound / step) + 1) * step
        for y in (int(value) + jump, int(value) - jump):
            if info.min <= y <= info.max - (step - 1 if y > 0 else 0):
                return dtype.type(y)
        return None
    if dtype.kind not in "fc":
        return None
    wide = np.complex128 if dtype.kind == "c" else np.float64
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        x = wide(value)
        if not np.isfinite(x):
            return None
        if bound > 0:
            ladder = [bound * (1 + 2.0**-i) for i in range(60, -1, -1)]
            ladder += [bound * 2.0**j for j in range(1, 64)]
            # A bound far below the value's own step (atol=1e-36 at 1.0): the next float out.
            component = np.finfo(dtype)
            step = float(component.eps) * max(abs(x), float(component.tiny))
            ladder += [d for d in (step * 2.0**j for j in range(-2, 64)) if d > ladder[-1]]
        else:  # any change at all: from far below one step up to the value itself
            component = np.finfo(dtype)  # a complex dtype's: its parts' format
            base = max(abs(x), float(component.tiny))
            ladder = [base * 2.0**-i for i in range(80, -1, -1)]
        for sign in (1.0, -1.0):
            for d in ladder:
                y = dtype.type(x + sign * d)
                yw = wide(y)
                if np.isfinite(yw) and abs(yw - x) > bound:
                    return y
    return None


def _middle_out(count: int, limit: int = 4096) -> Iterator[int]:
    """Positions from the middle outwards (at most ``limit``): a unit inside the data, not at
    an edge a comparator might special-case."""
    mid = count // 2
    for i in range(min(count, limit)):
        pos = mid + (i + 1) // 2 * (1 if i % 2 else -1)
        if 0 <= pos < count:
            yield pos


def _lsb_byte(dtype: np.dtype[Any]) -> int:
    """Which byte of an element holds its least significant bit."""
    return dtype.itemsize - 1 if dtype.byteorder == ">" else 0


def flip_lsb(element: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A one-element array with the last bit of its element flipped (a float's last mantissa
    bit, an integer's 1, a void word's first byte's low bit)."""
    changed = np.array(element, copy=True).reshape(1)
    raw = changed.view(np.uint8)
    raw[_lsb_byte(changed.dtype)] ^= 1
    return changed


# ------------------------------------------------------------------ tensors


def _show(value: Any) -> str:
    """A number as a reader writes it (``0.001``, not ``np.float32(0.001)``)."""
    return str(value)  # numpy's str of a scalar is its shortest exact text


def _index_text(index: tuple[int, ...]) -> str:
    from ..gates.arrays import index_text

    return index_text(index)  # as the comparers write it


def perturb_tensor(path: Path, out: Path, gate: Gate, limits: media.MediaLimits | None) -> Plan:
    """A copy of a ``.npy``/``.npz`` with one element changed: its last bit (``elementwise``),
    n + 1 ULPs (``ulp(n)``) or just beyond ``atol + rtol * |x|`` (``tolerance``)."""
    from ..gates.arrays import load_arrays, unravel

    arrays = {
        name: np.array(a, copy=True, order="K") for name, a in load_arrays(path, limits).items()
    }
    found = None
    for name in sorted(arrays):
        array = arrays[name]
        for flat in _middle_out(array.size):
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
        if media.read_head(path, 6) == b"\x93NUMPY":
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
        return y, f"{_show(x)} -> {_show(y)}, beyond atol + rtol * |x| = {bound:g}"
    if array.dtype.kind == "f" and not np.isfinite(old[0]):
        return None, ""  # a NaN's payload does change, but a finite element says it plainly
    changed = flip_lsb(old)
    return changed[0], f"last bit flipped, {_show(old[0])} -> {_show(changed[0])}"


def _ulp_change(array: npt.NDArray[Any], old: npt.NDArray[Any], gate: Gate) -> tuple[Any, str]:
    """One element moved n + 1 ULPs in the format the gate counts, written back as stored."""
    from ..gates import ulps

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


# ------------------------------------------------------------------ audio files

#: libsndfile subtypes a copy can be written in exactly, and one LSB of each in the units
#: :func:`~..media.load_audio` reads them in (24- and 8-bit PCM are read shifted up).
_PCM_STEP = {"PCM_16": 1, "PCM_24": 256, "PCM_32": 1, "PCM_S8": 256, "PCM_U8": 256}
_FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")


def perturb_audio(path: Path, out: Path, gate: Gate, limits: media.MediaLimits | None) -> Plan:
    """A WAV/FLAC copy, written by libsndfile with the same format and subtype, with one PCM
    sample changed by one LSB (``decoded``) or just beyond the tolerance."""
    import soundfile

    if not media.is_audio_header(media.read_head(path, 12)):
        raise Unavailable("audio in a media container: the canary changes WAV/FLAC files only")
    info = soundfile.info(str(path))
    subtype = str(info.subtype)
    if subtype not in _PCM_STEP and subtype not in _FLOAT_SUBTYPES:
        raise Unavailable(f"a copy in {subtype} would not keep every other sample exactly")
    data, rate = media.load_audio(path, limits=limits)
    if not data.size:
        raise Unavailable("the audio has no sample to change")
    step = _PCM_STEP.get(subtype, 1)
    found = None
    for i in _middle_out(len(data)):
        x = data[i, 0]
        if gate.name == "tolerance":
            y = beyond(x, data.dtype, gate.atol + gate.rtol * abs(float(x)), step)
        elif data.dtype.kind == "f":
            y = flip_lsb(data[i : i + 1, 0])[0] if np.isfinite(x) else None
        else:
            y = beyond(x, data.dtype, 0, step)  # one LSB: the smallest step of the subtype
        if y is not None:
            found = (i, x, y)
            break
    if found is None:
        if gate.name == "tolerance":
            raise Unfailable(f"no sample can be moved beyond {gate.spec}")
        raise Unavailable("no sample can be changed by one LSB")
    i, x, y = found
    changed = data.copy()
    changed[i, 0] = y
    soundfile.write(
        str(out), changed, rate, subtype=subtype, format=str(info.format), endian=str(info.endian)
    )
    back, _ = media.load_audio(out, limits=limits)
    expect = changed.view(np.uint8) if changed.dtype.kind == "f" else changed
    got = back.view(np.uint8) if back.dtype.kind == "f" else back
    if (
        back.shape != changed.shape
        or back.dtype != changed.dtype
        or not np.array_equal(got, expect)
    ):
        raise Unavailable(
            f"a {info.format} {subtype} copy written by libsndfile does not keep "
            "every sample exactly"
        )
    what = "one LSB" if gate.name != "tolerance" else f"beyond {gate.spec}"
    return Plan(
        obtained=out,
        kind="audio",
        unit=f"sample {i} of channel 0 ({subtype}): {_show(x)} -> {_show(y)}, {what}",
        location={"sample": i},
        prefix=f"{i} (channel 0",
    )


# ------------------------------------------------------------------ video


#: How a short copy of decoded frames is written, tried in this order: each must decode to the
#: very bytes it was given (checked against the original's frame digests).
VIDEO_COPY_CODECS = (("rawvideo", "nut"), ("ffv1", "matroska"), ("rawvideo", "matroska"))


def video_window(count: int) -> tuple[int, int, int]:
    """The frames a video canary copies: ``(start, stop, changed)``, the changed frame in the
    middle of the clip with its neighbours, so the comparator must tell it from them."""
    changed = count // 2
    start, stop = max(0, changed - 1), min(count, changed + 2)
    return start, stop, changed


def write_frames(
    frames: list[bytes],
    stream: dict[str, Any],
    out: Path,
    codec: tuple[str, str],
    limits: media.MediaLimits,
) -> None:
    """Encode raw frames (the stream's own pixel format) into ``out`` with ``codec``."""
    from ..media.ffmpeg import run_ffmpeg, stderr_tail

    encoder, muxer = codec
    args = [
        *("-v", "error", "-f", "rawvideo", "-pix_fmt", str(stream["pix_fmt"])),
        *("-s", f"{stream['width']}x{stream['height']}"),
        *("-r", str(stream.get("frame_rate") or "25")),
        *("-i", "-", "-map", "0:v", "-c:v", encoder, "-f", muxer, "-y", str(out)),
    ]
    proc = run_ffmpeg(
        args, path=out, limits=limits, what="canary copy", input_bytes=b"".join(frames)
    )
    if proc.returncode != 0:
        raise LosslessError(
            f"ffmpeg could not write {out} as {encoder}: {stderr_tail(proc.stderr)}"
        )


def video_stream(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The first video stream of a container fingerprint that has frames (not a cover)."""
    for stream in fingerprint.get("streams", []):
        if (
            stream.get("type") == "video"
            and not stream.get("attached_pic")
            and stream.get("frames")
        ):
            return dict(stream)
    raise Unavailable("the video has no decoded frame to change")


def change_frame(frame: bytes, stream: dict[str, Any], gate: Gate) -> tuple[bytes, str]:
    """One frame with one byte's low bit flipped (``decoded``), or one sample moved just beyond
    the tolerance; and what was changed."""
    data = bytearray(frame)
    if gate.name != "tolerance":
        pos = len(data) // 2
        old = data[pos]
        data[pos] ^= 1
        return bytes(data), f"byte {pos} of {len(data)}, 0x{old:02x} -> 0x{data[pos]:02x}"
    dtype = media.sample_dtype(stream.get("pix_fmt"))
    samples = np.frombuffer(bytes(data), dtype=dtype).copy()
    for pos in _middle_out(samples.size):
        x = samples[pos]
        y = beyond(x, samples.dtype, gate.atol + gate.rtol * abs(float(x)))
        if y is not None:
            samples[pos] = y
            return samples.tobytes(), f"sample {pos}, {_show(x)} -> {_show(y)}, beyond {gate.spec}"
    raise Unfailable(f"no sample of a {stream.get('pix_fmt')} frame can move beyond {gate.spec}")
