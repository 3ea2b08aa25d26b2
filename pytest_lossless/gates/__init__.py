"""Gates: the rules that compare an obtained artifact with the expected one.

``bytes`` compares the file's SHA-256; ``decoded`` compares stream metadata, then one digest per
decoded frame and the PCM samples; ``elementwise`` compares tensors bit for bit (NaN payloads and
the sign of zero count: arrays are compared as unsigned integer views, never with ``==``).
``tolerance(atol=, rtol=)`` is explicitly lossy: it needs the full data on both sides and its
result is never reported as lossless. PSNR and max error are labelled diagnostics, never gates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from fractions import Fraction
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .. import media
from ..errors import LosslessError

if TYPE_CHECKING:
    from ..kinds import Artifact

GATE_NAMES = ("bytes", "decoded", "elementwise", "tolerance")

#: Which gates apply to which built-in kind (custom kinds decide in their own compare hook).
GATES_BY_KIND: dict[str, tuple[str, ...]] = {
    "video": ("bytes", "decoded", "tolerance"),
    "audio": ("bytes", "decoded", "tolerance"),
    "tensor": ("bytes", "elementwise", "tolerance"),
    "bytes": ("bytes",),
}

#: How many differing positions a diagnostics text file lists.
_LISTED = 20


# ------------------------------------------------------------------ Gate


def _num(value: float) -> str:
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
            return f"tolerance(atol={_num(self.atol)}, rtol={_num(self.rtol)})"
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


def check_gate_applies(kind: str, gate: Gate, artifact: str = "") -> None:
    """Refuse a gate that means nothing for a built-in kind (``elementwise`` on a video...)."""
    allowed = GATES_BY_KIND.get(kind)
    if allowed is None or gate.name in allowed:
        return
    named = f" {artifact!r}" if artifact else ""
    choices = ", ".join(
        "tolerance(atol=..., rtol=...)" if g == "tolerance" else repr(g) for g in allowed
    )
    hint = {
        ("video", "elementwise"): "decoded frames are compared exactly by 'decoded'",
        ("audio", "elementwise"): "PCM samples are compared bit for bit by 'decoded'",
        ("tensor", "decoded"): "tensors are compared bit for bit by 'elementwise'",
    }.get((kind, gate.name), "")
    raise LosslessError(
        f"gate {gate.spec!r} does not apply to the {kind} artifact{named}: use {choices}"
        + (f" ({hint})" if hint else "")
    )


# ------------------------------------------------------------------ GateResult


@dataclass
class GateResult:
    """The outcome of one gate on one artifact, with the first mismatch and how many differ."""

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
    diagnostics: dict[str, Any] = field(default_factory=dict)
    diagnostic_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Where the first mismatch is, as data (``{"stream": 0, "frame": 7, "pts": 7}``), so that
    #: diagnostics (diff pictures) can be written after the comparison.
    location: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

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
            shown = ", ".join(f"{k}={_show(v)}" for k, v in self.diagnostics.items())
            lines.append(f"  diagnostics (not gates): {shown}")
        if self.diagnostic_files:
            lines.append("  diagnostics written to:")
            lines += [f"    {path}" for path in self.diagnostic_files]
        elif not self.passed:
            lines.append("  no diagnostic files written")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GateResult:
        known = {f.name for f in fields(cls)}
        missing = {"artifact", "kind", "gate", "lossless", "passed"} - set(data)
        if missing:
            raise LosslessError(f"gate result lacks {sorted(missing)}: {data!r}")
        return cls(**{k: v for k, v in data.items() if k in known})


def _show(value: Any) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.6g}"
    return str(value)


# ------------------------------------------------------------------ helpers


def _new(expected: Artifact, gate: Gate, kind: str, unit: str) -> GateResult:
    return GateResult(
        artifact=expected.name,
        kind=kind,
        gate=gate.spec,
        lossless=gate.lossless,
        passed=False,
        unit=unit,
    )


def _meta(diffs: list[str], label: str, exp: Any, obt: Any, prefix: str = "") -> None:
    if exp != obt:
        diffs.append(f"{prefix}{label}: expected {exp}, obtained {obt}")


def _finish(result: GateResult) -> GateResult:
    result.passed = (
        not result.metadata_diffs and not result.mismatch_count and (result.first_mismatch is None)
    )
    return result


def _need_full(gate: Gate, expected: Artifact, obtained: Artifact) -> tuple[Path, Path]:
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


def _unsigned_view(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The array's bits as unsigned integers, one row per element for odd item sizes."""
    array = np.ascontiguousarray(array)
    size = array.dtype.itemsize
    if size in (1, 2, 4, 8):
        return array.view(f"u{size}").reshape(array.shape)
    return array.view(np.uint8).reshape((*array.shape, size))


def _bits_differ(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Elementwise: do the bits of ``a`` and ``b`` (same dtype and shape) differ?"""
    ua, ub = _unsigned_view(a), _unsigned_view(b)
    differ: npt.NDArray[np.bool_] = np.asarray(ua != ub, dtype=np.bool_)
    if differ.ndim > a.ndim:
        differ = np.asarray(differ.any(axis=-1), dtype=np.bool_)
    return differ


def _value(array: npt.NDArray[Any], index: tuple[int, ...]) -> str:
    """One element as text; floats also as bits, so -0.0 and NaN payloads are visible."""
    item = array[index]
    dtype = array.dtype
    if dtype.kind in "fc" and dtype.itemsize in (2, 4, 8):
        bits = (
            np.asarray(item).reshape(1).view(f"u{dtype.itemsize}")[0] if dtype.kind == "f" else None
        )
        text = repr(item.item()) if hasattr(item, "item") else repr(item)
        if bits is not None:
            return f"{text} (bits 0x{int(bits):0{2 * dtype.itemsize}x})"
        return text
    if hasattr(item, "item"):
        return repr(item.item())
    return repr(item)


def _index_text(index: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(i) for i in index) + ")" if len(index) != 1 else f"[{index[0]}]"


def _first_chunk(exp: Sequence[str], obt: Sequence[str]) -> int | None:
    for i, (a, b) in enumerate(zip_longest(exp, obt)):
        if a != b:
            return i
    return None


# ------------------------------------------------------------------ bytes gate


def compare_bytes(gate: Gate, expected: Artifact, obtained: Artifact, kind: str) -> GateResult:
    """Identical file bytes: SHA-256 and size; the first differing byte when both are present."""
    result = _new(expected, gate, kind, "byte")
    efp, ofp = expected.fingerprint, obtained.fingerprint
    esize, osize = efp.get("size"), ofp.get("size")
    result.total = esize if isinstance(esize, int) else None
    if efp.get("sha256") == ofp.get("sha256") and esize == osize and efp.get("sha256"):
        result.mismatch_count = 0
        return _finish(result)
    _meta(result.metadata_diffs, "size (bytes)", esize, osize)
    if expected.path is not None and obtained.path is not None:
        first, count, pair = _diff_files(expected.path, obtained.path)
        if first is not None:
            result.first_mismatch = f"offset {first} ({pair})"
            result.location = {"offset": first}
        result.mismatch_count = count
        if count == 0 and not result.metadata_diffs:  # digests disagreed with the bytes
            result.notes.append("file contents are identical; the recorded digests differ")
            result.first_mismatch = "SHA-256 of the file"
            result.mismatch_count = None
    else:
        chunk = _first_chunk(efp.get("chunk_sha256", []), ofp.get("chunk_sha256", []))
        step = int(efp.get("chunk_bytes", media.CHUNK_BYTES))
        if chunk is not None and efp.get("chunk_sha256") is not None:
            result.first_mismatch = (
                f"within bytes [{chunk * step}, {(chunk + 1) * step}) (only digests are kept: "
                "the exact offset is unknown)"
            )
            result.location = {"offset_range": [chunk * step, (chunk + 1) * step]}
        else:
            result.first_mismatch = (
                f"SHA-256 of the file: expected {efp.get('sha256')}, obtained {ofp.get('sha256')}"
            )
    return _finish(result)


def _diff_files(a: Path, b: Path) -> tuple[int | None, int, str]:
    """First differing offset, number of differing bytes (extra length counts), and that pair."""
    first: int | None = None
    pair = ""
    count = 0
    offset = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            ca, cb = fa.read(media.CHUNK_BYTES), fb.read(media.CHUNK_BYTES)
            if not ca and not cb:
                break
            n = min(len(ca), len(cb))
            va = np.frombuffer(ca[:n], dtype=np.uint8)
            vb = np.frombuffer(cb[:n], dtype=np.uint8)
            where = np.flatnonzero(va != vb)
            count += int(where.size) + abs(len(ca) - len(cb))
            if first is None and where.size:
                i = int(where[0])
                first = offset + i
                pair = f"expected 0x{va[i]:02x}, obtained 0x{vb[i]:02x}"
            elif first is None and len(ca) != len(cb):
                first = offset + n
                pair = "expected " + ("end of file" if len(ca) == n else f"0x{ca[n]:02x}")
                pair += ", obtained " + ("end of file" if len(cb) == n else f"0x{cb[n]:02x}")
            offset += max(len(ca), len(cb))
    return first, count, pair


# ------------------------------------------------------------------ video (decoded)


def _streams(fp: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [s for s in fp.get("streams", []) if s.get("type") == kind]


_VIDEO_META = (
    "frame_count",
    "duration",
    "codec",
    "pix_fmt",
    "width",
    "height",
    "sar",
    "frame_rate",
    "time_base",
)
_AUDIO_META = (
    "sample_count",
    "duration",
    "codec",
    "sample_fmt",
    "sample_rate",
    "channels",
    "channel_layout",
)
_META_LABELS = {
    "frame_count": "frame count",
    "sample_count": "sample count",
    "pix_fmt": "pixel format",
    "sample_fmt": "sample format",
    "frame_rate": "frame rate",
    "time_base": "time base",
    "sample_rate": "sample rate",
    "channel_layout": "channel layout",
}


def _pts_time(pts: int, tb: str | None) -> str:
    if tb is None:
        return f"pts {pts}"
    return f"pts {pts} = {float(pts * Fraction(tb)):.6f} s"


def compare_container(gate: Gate, expected: Artifact, obtained: Artifact, kind: str) -> GateResult:
    """``decoded`` for containers: stream metadata, then per-frame and per-audio-frame digests."""
    efp, ofp = expected.fingerprint, obtained.fingerprint
    unit = "frame" if _streams(efp, "video") or _streams(ofp, "video") else "sample"
    result = _new(expected, gate, kind, unit)
    if efp.get("container") != ofp.get("container"):
        result.notes.append(
            f"container differs (expected {efp.get('container')}, obtained "
            f"{ofp.get('container')}); the decoded gate compares streams, not the container"
        )
    _compare_video_streams(result, efp, ofp)
    _compare_audio_streams(result, efp, ofp, expected, obtained)
    if (
        result.unit == "frame"
        and not result.metadata_diffs
        and result.mismatch_count
        and expected.path is not None
        and obtained.path is not None
    ):
        _frame_diagnostics(result, expected.path, obtained.path)
    return _finish(result)


def _compare_video_streams(result: GateResult, efp: dict[str, Any], ofp: dict[str, Any]) -> None:
    evs, ovs = _streams(efp, "video"), _streams(ofp, "video")
    _meta(result.metadata_diffs, "video stream count", len(evs), len(ovs))
    total = 0
    count = 0
    for n, (es, os_) in enumerate(zip(evs, ovs, strict=False)):
        prefix = f"video stream {n}: " if max(len(evs), len(ovs)) > 1 else ""
        for key in _VIDEO_META:
            _meta(
                result.metadata_diffs, _META_LABELS.get(key, key), es.get(key), os_.get(key), prefix
            )
        eframes, oframes = es.get("frames", []), os_.get("frames", [])
        stream_total = max(len(eframes), len(oframes))
        total += stream_total
        tb = es.get("pts_time_base")
        for i, (ef, of) in enumerate(zip_longest(eframes, oframes)):
            if ef == of:
                continue
            count += 1
            if result.first_mismatch is not None:
                continue
            if of is None or ef is None:
                side = "expected" if of is None else "obtained"
                frame = ef if of is None else of
                result.first_mismatch = (
                    f"{prefix}{i} ({_pts_time(frame['pts'], tb)}): present in {side} only"
                )
            elif ef["sha256"] != of["sha256"]:
                pts = _pts_time(ef["pts"], tb)
                if ef["pts"] != of["pts"]:
                    pts += f"; obtained pts {of['pts']}"
                result.first_mismatch = f"{prefix}{i} ({pts}): pixels differ"
            else:
                result.first_mismatch = (
                    f"{prefix}{i}: pixels identical, timing differs: expected "
                    f"{_pts_time(ef['pts'], tb)}, obtained {_pts_time(of['pts'], tb)}"
                )
            result.location = _frame_location(es, i, (ef or of)["pts"])
    if evs or ovs:
        result.total = total
        result.mismatch_count = count


def _compare_audio_streams(
    result: GateResult,
    efp: dict[str, Any],
    ofp: dict[str, Any],
    expected: Artifact,
    obtained: Artifact,
) -> None:
    """Audio streams of a container: metadata, then the first differing sample."""
    eas, oas = _streams(efp, "audio"), _streams(ofp, "audio")
    _meta(result.metadata_diffs, "audio stream count", len(eas), len(oas))
    video = result.unit == "frame"
    findings: list[tuple[str, int | None, int]] = []
    sample_total = 0
    for n, (es, os_) in enumerate(zip(eas, oas, strict=False)):
        prefix = f"audio stream {n}: " if (max(len(eas), len(oas)) > 1 or video) else ""
        for key in _AUDIO_META:
            _meta(
                result.metadata_diffs, _META_LABELS.get(key, key), es.get(key), os_.get(key), prefix
            )
        sample_total += max(int(es.get("sample_count", 0)), int(os_.get("sample_count", 0)))
        epk, opk = es.get("packets", []), os_.get("packets", [])
        if epk == opk:
            continue
        k = _first_chunk([p["sha256"] for p in epk], [p["sha256"] for p in opk])
        text, count, _total, diag = _audio_mismatch(es, os_, epk, opk, k, expected, obtained)
        differing = sum(1 for a, b in zip_longest(epk, opk) if a != b)
        findings.append(
            (f"{prefix}{text or 'decoded audio frame timing differs'}", count, differing)
        )
        label = "audio_" if video else ""
        for key, value in diag.items():
            result.diagnostics.setdefault(f"{label}{key}", value)
    if not video:
        result.total = sample_total
        known = [count for _t, count, _d in findings]
        result.mismatch_count = None if None in known else sum(c or 0 for c in known)
    for text, count, differing in findings:
        if result.first_mismatch is None:
            # Frames are identical (or there is no video): the audio is the first difference.
            result.unit = "sample"
            result.first_mismatch = text
            result.mismatch_count = count
            result.total = sample_total
            if count is None:
                result.notes.append(f"{differing} decoded audio frames differ")
        else:
            counted = "an unknown number of" if count is None else str(count)
            result.notes.append(f"{counted} audio samples also differ; first: {text}")


def _audio_mismatch(
    es: dict[str, Any],
    os_: dict[str, Any],
    epk: list[dict[str, Any]],
    opk: list[dict[str, Any]],
    k: int | None,
    expected: Artifact,
    obtained: Artifact,
) -> tuple[str, int | None, int | None, dict[str, Any]]:
    """First differing sample of a container audio stream: exact with data, else its packet."""
    rate = int(es.get("sample_rate") or 0)
    if expected.path is not None and obtained.path is not None:
        try:
            a, _ = media.load_container_audio(expected.path, es.get("index"))
            b, _ = media.load_container_audio(obtained.path, os_.get("index"))
        except LosslessError:
            pass
        else:
            if a.dtype == b.dtype and a.shape[1:] == b.shape[1:]:
                return _pcm_mismatch(a, b, rate)[:4]
    if k is None:
        return "packet timing differs", None, None, {}
    packet = (epk if k < len(epk) else opk)[k]
    start = int(packet["pts"])
    end = start + int(packet.get("samples", 0))
    when = f" = {start / rate:.6f} s" if rate else ""
    return (
        f"within samples [{start}, {end}){when} (decoded audio frame {k}; only digests are "
        "kept: the exact sample is unknown)",
        None,
        None,
        {},
    )


# ------------------------------------------------------------------ PCM


def _pcm_mismatch(
    a: npt.NDArray[Any], b: npt.NDArray[Any], rate: int
) -> tuple[str, int | None, int | None, dict[str, Any], int | None]:
    """First differing sample (time index, channel, both values), count of differing frames,
    and the first differing time index itself."""
    n = min(len(a), len(b))
    differ = _bits_differ(a[:n], b[:n])
    rows = differ.any(axis=1) if differ.ndim > 1 else differ
    where = np.flatnonzero(rows)
    count = int(where.size) + abs(len(a) - len(b))
    total = max(len(a), len(b))
    diag: dict[str, Any] = {}
    if where.size:
        i = int(where[0])
        ch = int(np.flatnonzero(differ[i])[0]) if differ.ndim > 1 else 0
        when = f", t = {i / rate:.6f} s" if rate else ""
        text = (
            f"{i} (channel {ch}{when}): expected {_value(a, (i, ch))}, "
            f"obtained {_value(b, (i, ch))}"
        )
        diag = _error_stats(a[:n], b[:n], _pcm_peak(a.dtype))
        first = i
    elif len(a) != len(b):
        side = "expected" if len(a) > len(b) else "obtained"
        when = f" (t = {n / rate:.6f} s)" if rate else ""
        text = f"{n}{when}: present in {side} only; the common samples are identical"
        first = n
    else:
        return "", 0, total, {}, None
    return text, count, total, diag, first


def _pcm_peak(dtype: np.dtype[Any]) -> float:
    if dtype.kind in "iu":
        return float(np.iinfo(dtype).max)
    return 1.0


def _error_stats(a: npt.NDArray[Any], b: npt.NDArray[Any], peak: float) -> dict[str, Any]:
    """Max absolute error and PSNR over finite values: labelled diagnostics, never gates."""
    kind = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    with np.errstate(all="ignore"):
        err = np.abs(np.asarray(a, dtype=kind) - np.asarray(b, dtype=kind)).astype(np.float64)
        finite = np.isfinite(err)
        if not finite.any():
            return {}
        max_err = float(err[finite].max())
        mse = float(np.mean(np.square(err[finite])))
    stats: dict[str, Any] = {"max_abs_error": max_err}
    if mse == 0:
        stats["psnr_db"] = math.inf
    elif math.isfinite(mse) and peak > 0:
        stats["psnr_db"] = round(10 * math.log10(peak * peak / mse), 3)
    return stats


def compare_audio_file(gate: Gate, expected: Artifact, obtained: Artifact, kind: str) -> GateResult:
    """``decoded`` for WAV/FLAC: format metadata, then PCM sample by sample (or per block)."""
    efp, ofp = expected.fingerprint, obtained.fingerprint
    result = _new(expected, gate, kind, "sample")
    if "streams" in efp or "streams" in ofp:
        if "streams" in efp and "streams" in ofp:
            return compare_container(gate, expected, obtained, kind)
        result.metadata_diffs.append(
            f"format: expected {efp.get('format')}, obtained {ofp.get('format')} "
            "(one is a WAV/FLAC file, the other a media container)"
        )
        return _finish(result)
    diffs = result.metadata_diffs
    for key in ("sample_count", "duration", "sample_rate", "channels", "subtype", "dtype"):
        _meta(diffs, _META_LABELS.get(key, key), efp.get(key), ofp.get(key))
    if efp.get("format") != ofp.get("format"):
        result.notes.append(
            f"file format differs (expected {efp.get('format')}, obtained {ofp.get('format')}); "
            "the decoded gate compares the PCM, not the file format"
        )
    result.total = max(int(efp.get("sample_count", 0)), int(ofp.get("sample_count", 0)))
    same = efp.get("pcm_sha256") == ofp.get("pcm_sha256") and not diffs
    if same:
        result.mismatch_count = 0
        return _finish(result)
    rate = int(efp.get("sample_rate") or 0)
    comparable = efp.get("dtype") == ofp.get("dtype") and efp.get("channels") == ofp.get("channels")
    if expected.path is not None and obtained.path is not None and comparable:
        a, _ = media.load_audio(expected.path)
        b, _ = media.load_audio(obtained.path)
        text, count, _total, diag, first = _pcm_mismatch(a, b, rate)
        if text:
            result.first_mismatch = text
        result.mismatch_count = count
        result.diagnostics.update(diag)
        if first is not None:
            result.location = {"sample": first}
        if not text and not diffs:
            result.notes.append("PCM is identical; the recorded PCM digests differ")
            result.first_mismatch = "PCM SHA-256"
    elif comparable:
        block = _first_chunk(efp.get("block_sha256", []), ofp.get("block_sha256", []))
        size = int(efp.get("block_frames") or 1)
        if block is not None:
            total_blocks = max(len(efp.get("block_sha256", [])), len(ofp.get("block_sha256", [])))
            start = block * size
            end = min((block + 1) * size, result.total or (block + 1) * size)
            when = f" (t = {start / rate:.6f} s to {end / rate:.6f} s)" if rate else ""
            result.first_mismatch = (
                f"within samples [{start}, {end}){when} (only digests are kept: the exact "
                "sample is unknown)"
            )
            blocks = sum(
                1
                for x, y in zip_longest(efp.get("block_sha256", []), ofp.get("block_sha256", []))
                if x != y
            )
            result.notes.append(f"{blocks} of {total_blocks} blocks of {size} samples differ")
            result.location = {"sample_range": [start, end]}
    return _finish(result)


# ------------------------------------------------------------------ tensors


def _members(fp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if fp.get("format") == "npz":
        members: dict[str, dict[str, Any]] = fp.get("members", {})
        return members
    return {"": fp}


def _arrays(path: Path) -> dict[str, npt.NDArray[Any]]:
    loaded = media.load_tensor(path)
    return loaded if isinstance(loaded, dict) else {"": loaded}


def compare_tensor(gate: Gate, expected: Artifact, obtained: Artifact, kind: str) -> GateResult:
    """``elementwise``: same dtype (with byte order), shape and bits, element by element."""
    efp, ofp = expected.fingerprint, obtained.fingerprint
    result = _new(expected, gate, kind, "element")
    emem, omem = _members(efp), _members(ofp)
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
        _meta(
            result.metadata_diffs,
            f"{label}dtype",
            _dtype_text(em.get("dtype")),
            _dtype_text(om.get("dtype")),
        )
        _meta(
            result.metadata_diffs,
            f"{label}shape",
            tuple(em.get("shape", [])),
            tuple(om.get("shape", [])),
        )
        total += int(em.get("element_count", 0))
        if em.get("dtype") != om.get("dtype") or em.get("shape") != om.get("shape"):
            continue
        if em.get("data_sha256") == om.get("data_sha256"):
            continue
        if full:
            if not loaded:
                loaded += [_arrays(path) for path in (expected.path, obtained.path) if path]
            a, b = loaded[0][name], loaded[1][name]
            differ = _bits_differ(np.asarray(a), np.asarray(b))
            n = int(np.count_nonzero(differ))
            count += n
            if n and result.first_mismatch is None:
                flat = int(np.flatnonzero(differ.reshape(-1))[0])
                index = tuple(int(i) for i in np.unravel_index(flat, a.shape)) if a.ndim else ()
                result.first_mismatch = (
                    f"{label}{_index_text(index)}: expected {_value(np.asarray(a), index)}, "
                    f"obtained {_value(np.asarray(b), index)}"
                )
                result.location = {"member": name, "index": list(index)}
                if np.asarray(a).dtype.kind in "fiuc":
                    result.diagnostics.update(_error_stats(np.asarray(a), np.asarray(b), 1.0))
                    result.diagnostics.pop("psnr_db", None)
        else:
            unknown = True
            chunk = _first_chunk(em.get("chunk_sha256", []), om.get("chunk_sha256", []))
            step = int(em.get("chunk_elements") or 1)
            if result.first_mismatch is None and chunk is not None:
                start = chunk * step
                end = min((chunk + 1) * step, int(em.get("element_count", 0)))
                shape = tuple(em.get("shape", []))
                at = (
                    _index_text(tuple(int(i) for i in np.unravel_index(start, shape)))
                    if shape
                    else "()"
                )
                result.first_mismatch = (
                    f"{label}within flat elements [{start}, {end}) starting at {at} (only "
                    "digests are kept: the exact element is unknown)"
                )
                result.location = {"member": name, "flat_range": [start, end]}
    result.total = total
    result.mismatch_count = None if unknown else count
    return _finish(result)


def _dtype_text(descr: Any) -> str:
    return descr if isinstance(descr, str) else str(descr)


# ------------------------------------------------------------------ tolerance (lossy)


def _within(
    a: npt.NDArray[Any], b: npt.NDArray[Any], atol: float, rtol: float
) -> npt.NDArray[np.bool_]:
    """``|a - b| <= atol + rtol * |b|`` with ``b`` the expected side; NaN only matches NaN."""
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
    result: npt.NDArray[np.bool_] = (x == y) | both_nan | close
    return result


def _tolerance_arrays(
    result: GateResult,
    gate: Gate,
    pairs: Iterator[tuple[str, npt.NDArray[Any], npt.NDArray[Any]]],
    describe: Callable[[str, int, npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[np.bool_]], str],
    peak: float | None = None,
) -> None:
    """Count the positions out of tolerance over (label, obtained, expected) pairs."""
    count = total = bitwise = 0
    max_err = 0.0
    for label, a, b in pairs:
        if a.shape != b.shape:
            result.metadata_diffs.append(f"{label}shape: expected {b.shape}, obtained {a.shape}")
            continue
        ok = _within(a, b, gate.atol, gate.rtol)
        total += ok.size
        bad = np.flatnonzero(~ok.reshape(-1))
        count += int(bad.size)
        if a.dtype == b.dtype:
            bitwise += int(np.count_nonzero(_bits_differ(a, b)))
        stats = _error_stats(a, b, peak or 1.0)
        max_err = max(max_err, float(stats.get("max_abs_error", 0.0)))
        if bad.size and result.first_mismatch is None:
            result.first_mismatch = describe(label, int(bad[0]), a, b, ok)
    result.mismatch_count = count
    result.total = total
    result.diagnostics["max_abs_error"] = max_err
    result.diagnostics["bitwise_differing"] = bitwise


def compare_tolerance(gate: Gate, expected: Artifact, obtained: Artifact, kind: str) -> GateResult:
    """The lossy gate: values within ``atol + rtol * |expected|``; needs full data on both sides."""
    epath, opath = _need_full(gate, expected, obtained)
    unit = {"tensor": "element", "audio": "sample", "video": "frame"}[kind]
    result = _new(expected, gate, kind, unit)
    result.notes.append("tolerance is a lossy gate: passing it does not prove the output unchanged")

    def describe_element(label: str, flat: int, a: Any, b: Any, ok: Any) -> str:
        index = tuple(int(i) for i in np.unravel_index(flat, a.shape)) if a.ndim else ()
        return (
            f"{label}{_index_text(index)}: expected {_value(b, index)}, obtained "
            f"{_value(a, index)} (outside atol={_num(gate.atol)}, rtol={_num(gate.rtol)})"
        )

    if kind == "tensor":
        ea, oa = _arrays(epath), _arrays(opath)
        if set(ea) != set(oa):
            result.metadata_diffs.append(
                f"members: missing {sorted(set(ea) - set(oa))}, unexpected "
                f"{sorted(set(oa) - set(ea))}"
            )
        _tolerance_arrays(
            result,
            gate,
            (
                (f"member {n!r} " if n else "", np.asarray(oa[n]), np.asarray(ea[n]))
                for n in sorted(set(ea) & set(oa))
            ),
            describe_element,
        )
    elif kind == "audio" and "streams" not in expected.fingerprint:
        a, rate = media.load_audio(opath)
        b, _ = media.load_audio(epath)
        _meta(result.metadata_diffs, "sample count", len(b), len(a))

        def describe_sample(label: str, flat: int, x: Any, y: Any, ok: Any) -> str:
            i, ch = divmod(flat, x.shape[1])
            when = f", t = {i / rate:.6f} s" if rate else ""
            return (
                f"{i} (channel {ch}{when}): expected {_value(y, (i, ch))}, obtained "
                f"{_value(x, (i, ch))}"
            )

        if len(a) == len(b):
            _tolerance_arrays(result, gate, iter([("", a, b)]), describe_sample, _pcm_peak(b.dtype))
    else:
        _tolerance_container(result, gate, expected, obtained, epath, opath)
    return _finish(result)


def _tolerance_container(
    result: GateResult,
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    epath: Path,
    opath: Path,
) -> None:
    efp, ofp = expected.fingerprint, obtained.fingerprint
    evs, ovs = _streams(efp, "video"), _streams(ofp, "video")
    _meta(result.metadata_diffs, "video stream count", len(evs), len(ovs))
    count = total = 0
    max_err = 0.0
    for es, os_ in zip(evs, ovs, strict=False):
        for key in ("frame_count", "width", "height", "pix_fmt"):
            _meta(result.metadata_diffs, _META_LABELS.get(key, key), es.get(key), os_.get(key))
        if result.metadata_diffs:
            continue
        dtype = media.sample_dtype(es.get("pix_fmt"))
        eit = media.iter_video_frames(
            epath, stream_index=es["index"], frame_bytes=es.get("frame_bytes"), dtype=dtype
        )
        oit = media.iter_video_frames(
            opath, stream_index=os_["index"], frame_bytes=os_.get("frame_bytes"), dtype=dtype
        )
        for i, (b, a) in enumerate(zip(eit, oit, strict=False)):
            total += 1
            ok = _within(a, b, gate.atol, gate.rtol)
            err = _error_stats(a, b, 1.0).get("max_abs_error", 0.0)
            max_err = max(max_err, float(err))
            if not ok.all():
                count += 1
                if result.first_mismatch is None:
                    pts = es["frames"][i]["pts"] if i < len(es.get("frames", [])) else None
                    where = (
                        f" ({_pts_time(pts, es.get('pts_time_base'))})" if pts is not None else ""
                    )
                    result.first_mismatch = (
                        f"{i}{where}: {int(np.count_nonzero(~ok))} samples outside "
                        f"atol={_num(gate.atol)}, rtol={_num(gate.rtol)} (max abs error {err:g})"
                    )
                    result.location = _frame_location(es, i, pts)
    eas, oas = _streams(efp, "audio"), _streams(ofp, "audio")
    _meta(result.metadata_diffs, "audio stream count", len(eas), len(oas))
    for es, os_ in zip(eas, oas, strict=False):
        b, _rate = media.load_container_audio(epath, es.get("index"))
        a, _ = media.load_container_audio(opath, os_.get("index"))
        if a.shape != b.shape or a.dtype != b.dtype:
            _meta(result.metadata_diffs, "audio sample count", len(b), len(a))
            continue
        ok = _within(a, b, gate.atol, gate.rtol)
        if not ok.all():
            count += 1
            flat = int(np.flatnonzero(~ok.reshape(-1))[0])
            i, ch = divmod(flat, a.shape[1])
            if result.first_mismatch is None:
                result.first_mismatch = (
                    f"audio sample {i} (channel {ch}): expected {_value(b, (i, ch))}, "
                    f"obtained {_value(a, (i, ch))}"
                )
            result.notes.append(f"{int(np.count_nonzero(~ok))} audio samples out of tolerance")
        max_err = max(max_err, float(_error_stats(a, b, 1.0).get("max_abs_error", 0.0)))
    result.mismatch_count = count
    result.total = total
    result.diagnostics["max_abs_error"] = max_err


# ------------------------------------------------------------------ dispatch and diagnostics


def compare(kind: str, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
    """Compare two artifacts of a built-in ``kind`` under ``gate``."""
    check_gate_applies(kind, gate, expected.name)
    if gate.name == "bytes":
        return compare_bytes(gate, expected, obtained, kind)
    if gate.name == "tolerance":
        return compare_tolerance(gate, expected, obtained, kind)
    if kind == "video":
        return compare_container(gate, expected, obtained, kind)
    if kind == "audio":
        return compare_audio_file(gate, expected, obtained, kind)
    if kind == "tensor":
        return compare_tensor(gate, expected, obtained, kind)
    raise LosslessError(f"no built-in comparison of kind {kind!r} under gate {gate.spec}")


def _frame_location(stream: dict[str, Any], frame: int, pts: Any) -> dict[str, Any]:
    """Where a frame mismatch is, with the frame size so diagnostics need not probe for it."""
    return {"stream": stream.get("index"), "frame": frame, "pts": pts,
            "pix_fmt": stream.get("pix_fmt"), "frame_bytes": stream.get("frame_bytes")}


def _frame_diagnostics(result: GateResult, epath: Path, opath: Path) -> None:
    """PSNR and max error of the first differing frame, in its own pixel format."""
    loc = result.location
    if "frame" not in loc:
        return
    try:
        frames = [
            media.load_video_frames(p, stream_index=loc.get("stream"), indices=[loc["frame"]],
                                    frame_bytes=loc.get("frame_bytes"))
            for p in (epath, opath)
        ]
    except LosslessError:
        return
    if loc["frame"] not in frames[0] or loc["frame"] not in frames[1]:
        return
    a, b = frames[0][loc["frame"]], frames[1][loc["frame"]]
    dtype = media.sample_dtype(loc.get("pix_fmt"))
    if a.size * a.itemsize % dtype.itemsize or a.shape != b.shape:
        return
    a, b = a.view(dtype), b.view(dtype)
    stats = _error_stats(a, b, media.sample_peak(loc.get("pix_fmt")))
    result.diagnostics.update({f"frame_{k}": v for k, v in stats.items()})
    result.diagnostics["frame_differing_samples"] = int(np.count_nonzero(a != b))


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "artifact"


def write_diagnostics(
    result: GateResult, expected: Artifact, obtained: Artifact, directory: Path
) -> list[str]:
    """Write diff pictures / listings of the first mismatch into ``directory``; return paths.

    Video: the first differing frame, expected and obtained as PNG, and an amplified difference
    picture. Audio and tensors: a text listing of the first differing positions.
    """
    if result.passed or expected.path is None or obtained.path is None:
        return []
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    base = directory / _safe_name(expected.name)
    written: list[str] = []
    loc = result.location
    if "frame" in loc:
        written += _write_frame_pictures(base, expected.path, obtained.path, loc)
    elif result.kind in ("tensor", "audio") and ("index" in loc or "sample" in loc):
        written += _write_listing(base, result, expected.path, obtained.path)
    result.diagnostic_files.extend(written)
    return written


def _write_frame_pictures(base: Path, epath: Path, opath: Path, loc: dict[str, Any]) -> list[str]:
    n = int(loc["frame"])
    try:
        pictures = [
            media.load_video_frames(
                p, stream_index=loc.get("stream"), pix_fmt="rgb24", indices=[n]
            ).get(n)
            for p in (epath, opath)
        ]
    except LosslessError:
        return []
    a, b = pictures
    if a is None or b is None or a.shape != b.shape:
        return []
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=2)
    peak = int(diff.max())
    # Amplified so that a one-level change is visible: any change is at least mid-grey.
    scaled = np.where(diff > 0, 128 + (diff.astype(np.int32) * 127) // max(peak, 1), 0)
    picture = np.repeat(scaled.astype(np.uint8)[:, :, None], 3, axis=2)
    paths = [
        media.write_png(base.with_name(f"{base.name}.frame{n}.expected.png"), a),
        media.write_png(base.with_name(f"{base.name}.frame{n}.obtained.png"), b),
        media.write_png(base.with_name(f"{base.name}.frame{n}.diff.png"), picture),
    ]
    return [str(p) for p in paths]


def _write_listing(base: Path, result: GateResult, epath: Path, opath: Path) -> list[str]:
    if result.kind == "tensor":
        ea, oa = _arrays(epath), _arrays(opath)
        name = str(result.location.get("member", ""))
        if name not in ea or name not in oa:
            return []
        a, b = np.asarray(ea[name]), np.asarray(oa[name])
    else:
        a, _ = media.load_audio(epath)
        b, _ = media.load_audio(opath)
        n = min(len(a), len(b))
        a, b = a[:n], b[:n]
    if a.shape != b.shape or a.dtype != b.dtype:
        return []
    differ = _bits_differ(a, b)
    if not differ.any():
        return []
    lines = [
        f"# first differing positions of {result.artifact!r} under gate {result.gate}",
        "# index\texpected\tobtained",
    ]
    for flat in np.flatnonzero(differ.reshape(-1))[:_LISTED]:
        index = tuple(int(i) for i in np.unravel_index(int(flat), a.shape))
        lines.append(f"{_index_text(index)}\t{_value(a, index)}\t{_value(b, index)}")
    path = base.with_name(f"{base.name}.diff.txt")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [str(path)]
