"""The explicitly lossy gate, ``tolerance(atol=, rtol=)``: ``|obtained - expected| <= atol + rtol *
|expected|`` position by position; it needs the full data on both sides and never reports lossless.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import media
from ..core.artifact import Artifact
from ..errors import LosslessError
from .arrays import Sides, bits_differ, index_text, load_arrays, sides, unravel, value_text
from .diagnostics import error_stats
from .findings import META_LABELS, frame_location, new_result, note_meta, pts_time, settle, streams
from .result import GateResult
from .spec import Gate, number_text


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
    describe: Callable[[str, int, npt.NDArray[Any], npt.NDArray[Any]], str],
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
            bitwise += int(np.count_nonzero(bits_differ(a, b)))
        max_err = max(max_err, _max_abs_error(a, b))
        if bad.size and result.first_mismatch is None:
            result.first_mismatch = describe(label, int(bad[0]), a, b)
    result.mismatch_count = count
    result.total = total
    result.diagnostics["max_abs_error"] = max_err
    result.diagnostics["bitwise_differing"] = bitwise


def compare_tolerance(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    *,
    limits: media.MediaLimits | None = None,
) -> GateResult:
    """The lossy gate: values within ``atol + rtol * |expected|``; needs full data on both sides,
    decoded within ``limits`` (the obtained side within limits derived from its golden)."""
    epath, opath = _need_full(gate, expected, obtained)
    pair = sides(limits, expected)
    unit = {"tensor": "element", "audio": "sample", "video": "frame"}[kind]
    result = new_result(expected, gate, kind, unit)
    result.notes.append("tolerance is a lossy gate: passing it does not prove the output unchanged")

    bounds = f"atol={number_text(gate.atol)}, rtol={number_text(gate.rtol)}"

    def describe_element(label: str, flat: int, a: Any, b: Any) -> str:
        index = unravel(flat, a.shape)
        return (
            f"{label}{index_text(index)}: expected {value_text(b, index)}, obtained "
            f"{value_text(a, index)} (outside {bounds})"
        )

    if kind == "tensor":
        ea, oa = load_arrays(epath, pair[0]), load_arrays(opath, pair[1])
        if set(ea) != set(oa):
            result.metadata_diffs.append(
                f"members: missing {sorted(set(ea) - set(oa))}, unexpected "
                f"{sorted(set(oa) - set(ea))}"
            )
        _tolerance_arrays(
            result,
            gate,
            ((f"member {n!r} " if n else "", oa[n], ea[n]) for n in sorted(set(ea) & set(oa))),
            describe_element,
        )
    elif kind == "audio" and "streams" not in expected.fingerprint:
        a, rate = media.load_audio(opath, limits=pair[1])
        b, _ = media.load_audio(epath, limits=pair[0])
        note_meta(result.metadata_diffs, "sample count", len(b), len(a))

        def describe_sample(label: str, flat: int, x: Any, y: Any) -> str:
            i, ch = divmod(flat, x.shape[1])
            when = f", t = {i / rate:.6f} s" if rate else ""
            return (
                f"{i} (channel {ch}{when}): expected {value_text(y, (i, ch))}, obtained "
                f"{value_text(x, (i, ch))}"
            )

        if len(a) == len(b):
            _tolerance_arrays(result, gate, iter([("", a, b)]), describe_sample)
    else:
        _tolerance_container(result, gate, expected, obtained, (epath, opath), pair)
    return settle(result)


def _tolerance_container(
    result: GateResult,
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    paths: tuple[Path, Path],
    limits: Sides,
) -> None:
    epath, opath = paths
    efp, ofp = expected.fingerprint, obtained.fingerprint
    evs, ovs = streams(efp, "video"), streams(ofp, "video")
    note_meta(result.metadata_diffs, "video stream count", len(evs), len(ovs))
    count = total = 0
    max_err = 0.0
    for es, os_ in zip(evs, ovs, strict=False):
        for key in ("frame_count", "width", "height", "pix_fmt"):
            note_meta(result.metadata_diffs, META_LABELS.get(key, key), es.get(key), os_.get(key))
        if result.metadata_diffs:
            continue
        dtype = media.sample_dtype(es.get("pix_fmt"))
        eit = media.iter_video_frames(
            epath,
            stream_index=es["index"],
            frame_bytes=es.get("frame_bytes"),
            dtype=dtype,
            limits=limits[0],
        )
        oit = media.iter_video_frames(
            opath,
            stream_index=os_["index"],
            frame_bytes=os_.get("frame_bytes"),
            dtype=dtype,
            limits=limits[1],
        )
        for i, (b, a) in enumerate(zip(eit, oit, strict=False)):
            total += 1
            ok = _within(a, b, gate.atol, gate.rtol)
            err = _max_abs_error(a, b)
            max_err = max(max_err, err)
            if not ok.all():
                count += 1
                if result.first_mismatch is None:
                    pts = es["frames"][i]["pts"] if i < len(es.get("frames", [])) else None
                    where = (
                        f" ({pts_time(pts, es.get('pts_time_base'))})" if pts is not None else ""
                    )
                    result.first_mismatch = (
                        f"{i}{where}: {int(np.count_nonzero(~ok))} samples outside "
                        f"atol={number_text(gate.atol)}, rtol={number_text(gate.rtol)} "
                        f"(max abs error {err:g})"
                    )
                    result.location = frame_location(es, i, pts)
    eas, oas = streams(efp, "audio"), streams(ofp, "audio")
    note_meta(result.metadata_diffs, "audio stream count", len(eas), len(oas))
    for es, os_ in zip(eas, oas, strict=False):
        b, _rate = media.load_container_audio(epath, es.get("index"), limits=limits[0])
        a, _ = media.load_container_audio(opath, os_.get("index"), limits=limits[1])
        if a.shape != b.shape or a.dtype != b.dtype:
            note_meta(result.metadata_diffs, "audio sample count", len(b), len(a))
            continue
        ok = _within(a, b, gate.atol, gate.rtol)
        if not ok.all():
            count += 1
            flat = int(np.flatnonzero(~ok.reshape(-1))[0])
            i, ch = divmod(flat, a.shape[1])
            if result.first_mismatch is None:
                result.first_mismatch = (
                    f"audio sample {i} (channel {ch}): expected {value_text(b, (i, ch))}, "
                    f"obtained {value_text(a, (i, ch))}"
                )
            result.notes.append(f"{int(np.count_nonzero(~ok))} audio samples out of tolerance")
        max_err = max(max_err, _max_abs_error(a, b))
    result.mismatch_count = count
    result.total = total
    result.diagnostics["max_abs_error"] = max_err


def _max_abs_error(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> float:
    """The largest finite absolute difference, 0 where none is finite: a diagnostic."""
    return float(error_stats(a, b, 1.0).get("max_abs_error", 0.0))
