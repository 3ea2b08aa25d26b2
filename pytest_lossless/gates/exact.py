"""The exact gates: ``bytes`` (the file's SHA-256), ``decoded`` (stream metadata, then one digest
per decoded frame and the PCM samples) and ``elementwise`` (tensors, bit for bit).

Each says where the first difference is and how many positions differ; with digests only on one
side it names the smallest block known to differ.
"""

from __future__ import annotations

from itertools import zip_longest
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import media
from ..core.artifact import Artifact
from ..errors import LosslessError
from .arrays import Sides, bits_differ, index_text, load_arrays, sides, unravel, value_text
from .diagnostics import error_stats, frame_diagnostics, pcm_peak
from .findings import (
    META_LABELS,
    first_difference,
    frame_location,
    new_result,
    note_meta,
    pts_time,
    settle,
    streams,
)
from .result import GateResult
from .spec import Gate

# ------------------------------------------------------------------ bytes


# ------------------------------------------------------------------ decoded: containers


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


def compare_container(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    *,
    limits: media.MediaLimits | None = None,
) -> GateResult:
    """``decoded`` for containers: stream metadata, then per-frame and per-audio-frame digests
    (files decoded to locate a difference are decoded within ``limits``)."""
    pair = sides(limits, expected)
    efp, ofp = expected.fingerprint, obtained.fingerprint
    unit = "frame" if streams(efp, "video") or streams(ofp, "video") else "sample"
    result = new_result(expected, gate, kind, unit)
    if efp.get("container") != ofp.get("container"):
        result.notes.append(
            f"container differs (expected {efp.get('container')}, obtained "
            f"{ofp.get('container')}); the decoded gate compares streams, not the container"
        )
    _compare_video_streams(result, efp, ofp)
    _compare_audio_streams(result, efp, ofp, expected, obtained, pair)
    _compare_other_streams(result, efp, ofp)
    if (
        result.unit == "frame"
        and not result.metadata_diffs
        and result.mismatch_count
        and expected.path is not None
        and obtained.path is not None
    ):
        frame_diagnostics(result, expected.path, obtained.path, pair)
    return settle(result)


def _compare_video_streams(result: GateResult, efp: dict[str, Any], ofp: dict[str, Any]) -> None:
    evs, ovs = streams(efp, "video"), streams(ofp, "video")
    note_meta(result.metadata_diffs, "video stream count", len(evs), len(ovs))
    total = 0
    count = 0
    for n, (es, os_) in enumerate(zip(evs, ovs, strict=False)):
        prefix = f"video stream {n}: " if max(len(evs), len(ovs)) > 1 else ""
        for key in _VIDEO_META:
            note_meta(
                result.metadata_diffs, META_LABELS.get(key, key), es.get(key), os_.get(key), prefix
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
                    f"{prefix}{i} ({pts_time(frame['pts'], tb)}): present in {side} only"
                )
            elif ef["sha256"] != of["sha256"]:
                pts = pts_time(ef["pts"], tb)
                if ef["pts"] != of["pts"]:
                    pts += f"; obtained pts {of['pts']}"
                result.first_mismatch = f"{prefix}{i} ({pts}): pixels differ"
            else:
                result.first_mismatch = (
                    f"{prefix}{i}: pixels identical, timing differs: expected "
                    f"{pts_time(ef['pts'], tb)}, obtained {pts_time(of['pts'], tb)}"
                )
            result.location = frame_location(es, i, (ef or of)["pts"])
    if evs or ovs:
        result.total = total
        result.mismatch_count = count


def _compare_audio_streams(
    result: GateResult,
    efp: dict[str, Any],
    ofp: dict[str, Any],
    expected: Artifact,
    obtained: Artifact,
    limits: Sides,
) -> None:
    """Audio streams of a container: metadata, then the first differing sample."""
    eas, oas = streams(efp, "audio"), streams(ofp, "audio")
    note_meta(result.metadata_diffs, "audio stream count", len(eas), len(oas))
    video = result.unit == "frame"
    findings: list[tuple[str, int | None, int]] = []
    sample_total = 0
    for n, (es, os_) in enumerate(zip(eas, oas, strict=False)):
        prefix = f"audio stream {n}: " if (max(len(eas), len(oas)) > 1 or video) else ""
        for key in _AUDIO_META:
            note_meta(
                result.metadata_diffs, META_LABELS.get(key, key), es.get(key), os_.get(key), prefix
            )
        sample_total += max(int(es.get("sample_count", 0)), int(os_.get("sample_count", 0)))
        epk, opk = es.get("packets", []), os_.get("packets", [])
        if epk == opk:
            continue
        k = first_difference([p["sha256"] for p in epk], [p["sha256"] for p in opk])
        text, count, diag = _audio_mismatch(es, os_, epk, opk, k, expected, obtained, limits)
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


#: The stream types a container fingerprint records by their packets (``other_streams``).
_OTHER_TYPES = ("subtitle", "data", "attachment")


def _unrecorded(fp: dict[str, Any]) -> list[str]:
    """The other streams a fingerprint made before they were recorded names, unhashed."""
    if "other_streams" in fp:
        return []
    return [
        str(text)
        for text in fp.get("ignored_streams", [])
        if len(str(text).split()) > 1 and str(text).split()[1] in _OTHER_TYPES
    ]


def _compare_other_streams(result: GateResult, efp: dict[str, Any], ofp: dict[str, Any]) -> None:
    """Subtitle, data and attachment streams, by their packets (copied, never decoded): a
    stream that differs, or is present on one side only, fails naming it. A fingerprint made
    before they were recorded compares nothing here, and a note names what was not compared."""
    old = {side: _unrecorded(fp) for side, fp in (("expected", efp), ("obtained", ofp))}
    if old["expected"] or old["obtained"]:
        sides_ = " and ".join(side for side, names in old.items() if names)
        names = sorted(set(old["expected"] + old["obtained"]))
        result.notes.append(
            f"streams other than video and audio were not recorded in the {sides_} "
            f"fingerprint (made before they were): {', '.join(names)} not compared; accept "
            "the golden again to compare them"
        )
        return
    findings: list[tuple[str, int, int]] = []
    for kind in _OTHER_TYPES:
        eos = [s for s in efp.get("other_streams", []) if s.get("codec_type") == kind]
        oos = [s for s in ofp.get("other_streams", []) if s.get("codec_type") == kind]
        for es, os_ in zip_longest(eos, oos):
            shown = es or os_
            label = f"{kind} stream #{shown.get('index')} ({shown.get('codec_name')})"
            if es is None or os_ is None:
                side = "expected" if os_ is None else "obtained"
                result.metadata_diffs.append(f"{label}: present in {side} only")
                continue
            note_meta(
                result.metadata_diffs, "codec", es.get("codec_name"), os_.get("codec_name"),
                f"{label}: ",
            )  # fmt: skip
            found = _packet_difference(es, os_)
            if found is not None:
                findings.append((f"{label}: {found[0]}", found[1], found[2]))
    for text, count, total in findings:
        if result.first_mismatch is None:
            # Video and audio are identical (or absent): this stream is the first difference.
            result.unit = "packet"
            result.first_mismatch = text
            result.mismatch_count = count
            result.total = total
        else:
            result.notes.append(f"{count} of {total} packets also differ in {text}")


def _packet_difference(es: dict[str, Any], os_: dict[str, Any]) -> tuple[str, int, int] | None:
    """The first difference between two streams' packets (or their extradata), how many
    packets differ, and of how many; None when they are the same."""
    epk, opk = es.get("packets", []), os_.get("packets", [])
    total = max(len(epk), len(opk))
    if epk == opk and es.get("sha256") == os_.get("sha256"):
        if es.get("extradata_sha256") != os_.get("extradata_sha256"):
            return "extradata (styles, attached file) differs", 0, total
        return None
    count = sum(1 for a, b in zip_longest(epk, opk) if a != b)
    k = next((i for i, (a, b) in enumerate(zip_longest(epk, opk)) if a != b), None)
    if k is None:  # the packets agree, their summary does not: only an edit makes this
        return "the SHA-256 of its packets differs, the packets listed do not", count, total
    ep, op = (epk[k] if k < len(epk) else None), (opk[k] if k < len(opk) else None)
    tb = es.get("time_base")
    if ep is None or op is None:
        side = "expected" if op is None else "obtained"
        packet = ep if ep is not None else op
        assert packet is not None  # k is within the longer list
        return f"packet {k} ({pts_time(packet['pts'], tb)}): present in {side} only", count, total
    where = f"packet {k} ({pts_time(ep['pts'], tb)})"
    if ep["sha256"] != op["sha256"]:
        return f"{where}: payload differs", count, total
    return (
        f"{where}: payload identical, timing differs: obtained "
        f"{pts_time(op['pts'], os_.get('time_base'))}, duration {op.get('duration')} "
        f"(expected {ep.get('duration')})",
        count,
        total,
    )


def _audio_mismatch(
    es: dict[str, Any],
    os_: dict[str, Any],
    epk: list[dict[str, Any]],
    opk: list[dict[str, Any]],
    k: int | None,
    expected: Artifact,
    obtained: Artifact,
    limits: Sides,
) -> tuple[str, int | None, dict[str, Any]]:
    """First differing sample of a container audio stream: exact with data, else its packet."""
    rate = int(es.get("sample_rate") or 0)
    if expected.path is not None and obtained.path is not None:
        try:
            a, _ = media.load_container_audio(expected.path, es.get("index"), limits=limits[0])
            b, _ = media.load_container_audio(obtained.path, os_.get("index"), limits=limits[1])
        except LosslessError:
            pass
        else:
            if a.dtype == b.dtype and a.shape[1:] == b.shape[1:]:
                text, count, diag, _first = _pcm_mismatch(a, b, rate)
                return text, count, diag
    if k is None:
        return "packet timing differs", None, {}
    packet = (epk if k < len(epk) else opk)[k]
    start = int(packet["pts"])
    end = start + int(packet.get("samples", 0))
    when = f" = {start / rate:.6f} s" if rate else ""
    return (
        f"within samples [{start}, {end}){when} (decoded audio frame {k}; only digests are "
        "kept: the exact sample is unknown)",
        None,
        {},
    )


# ------------------------------------------------------------------ decoded: PCM


def _pcm_mismatch(
    a: npt.NDArray[Any], b: npt.NDArray[Any], rate: int
) -> tuple[str, int, dict[str, Any], int | None]:
    """First differing sample (time index, channel, both values), count of differing frames,
    error diagnostics, and the first differing time index itself."""
    n = min(len(a), len(b))
    differ = bits_differ(a[:n], b[:n])
    rows = differ.any(axis=1) if differ.ndim > 1 else differ
    where = np.flatnonzero(rows)
    count = int(where.size) + abs(len(a) - len(b))
    diag: dict[str, Any] = {}
    if where.size:
        i = int(where[0])
        ch = int(np.flatnonzero(differ[i])[0]) if differ.ndim > 1 else 0
        when = f", t = {i / rate:.6f} s" if rate else ""
        text = (
            f"{i} (channel {ch}{when}): expected {value_text(a, (i, ch))}, "
            f"obtained {value_text(b, (i, ch))}"
        )
        diag = error_stats(a[:n], b[:n], pcm_peak(a.dtype))
        first = i
    elif len(a) != len(b):
        side = "expected" if len(a) > len(b) else "obtained"
        when = f" (t = {n / rate:.6f} s)" if rate else ""
        text = f"{n}{when}: present in {side} only; the common samples are identical"
        first = n
    else:
        return "", 0, {}, None
    return text, count, diag, first


def compare_audio_file(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    *,
    limits: media.MediaLimits | None = None,
) -> GateResult:
    """``decoded`` for WAV/FLAC: format metadata, then PCM sample by sample (or per block).
    PCM is loaded to locate a difference only within ``limits``; beyond them, per block."""
    efp, ofp = expected.fingerprint, obtained.fingerprint
    result = new_result(expected, gate, kind, "sample")
    if "streams" in efp or "streams" in ofp:
        if "streams" in efp and "streams" in ofp:
            return compare_container(gate, expected, obtained, kind, limits=limits)
        result.metadata_diffs.append(
            f"format: expected {efp.get('format')}, obtained {ofp.get('format')} "
            "(one is a WAV/FLAC file, the other a media container)"
        )
        return settle(result)
    diffs = result.metadata_diffs
    for key in ("sample_count", "duration", "sample_rate", "channels", "subtype", "dtype"):
        note_meta(diffs, META_LABELS.get(key, key), efp.get(key), ofp.get(key))
    if efp.get("format") != ofp.get("format"):
        result.notes.append(
            f"file format differs (expected {efp.get('format')}, obtained {ofp.get('format')}); "
            "the decoded gate compares the PCM, not the file format"
        )
    result.total = max(int(efp.get("sample_count", 0)), int(ofp.get("sample_count", 0)))
    same = efp.get("pcm_sha256") == ofp.get("pcm_sha256") and not diffs
    if same:
        result.mismatch_count = 0
        return settle(result)
    rate = int(efp.get("sample_rate") or 0)
    comparable = efp.get("dtype") == ofp.get("dtype") and efp.get("channels") == ofp.get("channels")
    loaded = None
    if expected.path is not None and obtained.path is not None and comparable:
        pair = sides(limits, expected)
        try:
            loaded = (
                media.load_audio(expected.path, limits=pair[0])[0],
                media.load_audio(obtained.path, limits=pair[1])[0],
            )
        except media.DecodeLimitExceeded as exc:
            result.notes.append(f"PCM not loaded to locate the difference: {exc}")
    if loaded is not None:
        a, b = loaded
        text, count, diag, first = _pcm_mismatch(a, b, rate)
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
        block = first_difference(efp.get("block_sha256", []), ofp.get("block_sha256", []))
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
    return settle(result)


# ------------------------------------------------------------------ elementwise: tensors


def _members(fp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A tensor fingerprint's members by name; a lone ``.npy`` array is member ``""``."""
    if fp.get("format") == "npz":
        members: dict[str, dict[str, Any]] = fp.get("members", {})
        return members
    return {"": fp}


def compare_tensor(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    *,
    limits: media.MediaLimits | None = None,
) -> GateResult:
    """``elementwise``: same dtype (with byte order), shape and bits, element by element
    (arrays are loaded, within ``limits``, only to locate a difference)."""
    pair = sides(limits, expected)
    efp, ofp = expected.fingerprint, obtained.fingerprint
    result = new_result(expected, gate, kind, "element")
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
        note_meta(
            result.metadata_diffs,
            f"{label}dtype",
            str(em.get("dtype")),
            str(om.get("dtype")),
        )
        note_meta(
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
            chunk = first_difference(em.get("chunk_sha256", []), om.get("chunk_sha256", []))
            step = int(em.get("chunk_elements") or 1)
            if result.first_mismatch is None and chunk is not None:
                start = chunk * step
                end = min((chunk + 1) * step, int(em.get("element_count", 0)))
                at = index_text(unravel(start, tuple(em.get("shape", []))))
                result.first_mismatch = (
                    f"{label}within flat elements [{start}, {end}) starting at {at} (only "
                    "digests are kept: the exact element is unknown)"
                )
                result.location = {"member": name, "flat_range": [start, end]}
    result.total = total
    result.mismatch_count = None if unknown else count
    return settle(result)
