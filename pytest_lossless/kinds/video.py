"""The video kind: a container with a video stream (mp4, mkv, mov, ...), its frames and PCM
decoded and compared exactly.

Detection probes the container (:func:`~..media.detect.detect_kind`); the fingerprint is one
SHA-256 per decoded frame in the stream's own pixel format (:mod:`~..media.container`); the
``decoded`` gate compares them (:func:`~..gates.exact.compare_container`). The canary copies
three decoded frames losslessly, and changes one byte of the middle one (:func:`plan_frames`,
which the image kind shares); a failed comparison gets the first differing frame as pictures.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .. import media
from ..core.records import JsonObject, Record, from_json
from ..errors import LosslessError
from ..gates.gate import Figure, first_difference, new_result, note_meta, settle
from ..media.container import (
    AudioPacket,
    AudioStream,
    ContainerFingerprint,
    OtherStream,
    VideoStream,
    round_half_away,
)
from ..media.signatures import CONTAINER_SIGNATURES, CONTAINER_SUFFIXES
from .interface import BuiltinKind, Kind

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..core.artifact import Artifact
    from ..gates import Gate, GateResult
    from ..media.limits import MediaLimits
    from .canary import Plan

#: The limits on decoding the expected side and the obtained side.
Sides = tuple["MediaLimits", "MediaLimits"]


class VideoKind(BuiltinKind):
    """A container with a video stream (mp4, mkv, mov, ...): frames and PCM decoded exactly."""

    name = "video"
    default_gate = "decoded"
    gates = ("bytes", "decoded", "tolerance")
    hints: ClassVar[dict[str, str]] = {
        "elementwise": "decoded frames are compared exactly by 'decoded'"
    }
    signatures = CONTAINER_SIGNATURES
    suffixes = CONTAINER_SUFFIXES
    #: ISO BMFF and EBML: detection says video for these whatever a probe finds, unless the
    #: probe finds audio only; the fingerprint finds the same.
    decided_by_fingerprint = CONTAINER_SIGNATURES[:8]

    def detect(self, path: Path, head: bytes) -> bool:
        from ..media.detect import detect_kind, may_be_container

        # Only a file with a container's signature or suffix is probed (under the limits).
        return may_be_container(path, head) and (
            detect_kind(path, head, limits=self.limits()) == "video"
        )

    def fingerprint(self, path: Path) -> JsonObject:
        from ..media.container import fingerprint_container

        return fingerprint_container(path, video=True, limits=self.limits()).to_json()

    def check_declared(self, path: Path, limits: MediaLimits) -> None:
        from ..media.container import check_declared_container

        check_declared_container(path, limits, video=True)

    def fingerprint_within(self, path: Path, limits: MediaLimits) -> JsonObject:
        from ..media.container import fingerprint_container

        # The fast way checks the declared sizes under these limits while the decode starts.
        found = fingerprint_container(path, video=True, limits=limits)
        if not found.video():
            # What detection would have said (its probe finds no video stream): audio.
            from ..errors import ArtifactError
            from ..media.detect import not_the_kind

            raise ArtifactError(path, not_the_kind(path, self.name, "audio"))
        return found.to_json()

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        return compare_container(gate, expected, obtained, self.name, limits=self.limits())

    def compare_tolerance(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        return compare_tolerance(gate, expected, obtained, self.name, limits=self.limits())

    def plan(self, gate: Gate, artifact: Artifact, folder: Path) -> Plan:
        """One byte of a frame changed; and, when the container has audio, one sample of it
        changed in a copy of its own (``also``): the comparator must fail on both."""
        from dataclasses import replace

        from .audio import perturb_container_audio
        from .canary import Unavailable

        frames = plan_frames(self, gate, artifact, folder, self.limits())
        fingerprint = ContainerFingerprint.from_json(artifact.fingerprint)
        if not any(s.packets for s in fingerprint.audio()):
            return frames
        try:
            sound = perturb_container_audio(self.name, gate, artifact, folder, self.limits())
        except Unavailable as exc:
            return replace(frames, unit=f"{frames.unit} (audio not changed: {exc})")
        return replace(frames, also=(sound,))

    def emptiness(self, artifact: Artifact) -> str | None:
        return container_emptiness(ContainerFingerprint.from_json(artifact.fingerprint))

    def pictures(
        self, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str]:
        return frame_pictures(result, expected, obtained, folder, self.limits())


def container_emptiness(fingerprint: ContainerFingerprint) -> str | None:
    """What a container lacks when a decoded stream of it holds nothing: ``no frame decodes
    (video stream #0: 0 frames)``, ``no sample (audio stream #1: 0 samples)``; None when every
    stream holds something (a cover picture counts as a frame)."""
    empty = [f"video stream #{s.index}: 0 frames" for s in fingerprint.video() if not s.frames]
    silent = [f"audio stream #{s.index}: 0 samples" for s in fingerprint.audio() if not s.packets]
    if empty:
        return f"no frame decodes ({'; '.join(empty + silent)})"
    if silent:
        return f"no sample ({'; '.join(silent)})"
    return None


# ------------------------------------------------------------------ decoded: the exact gate


#: Metadata keys of fingerprints as a reader says them.
META_LABELS = {
    "frame_count": "frame count",
    "sample_count": "sample count",
    "pix_fmt": "pixel format",
    "sample_fmt": "sample format",
    "frame_rate": "frame rate",
    "time_base": "time base",
    "sample_rate": "sample rate",
    "channel_layout": "channel layout",
}


def pts_time(pts: int, tb: str | None) -> str:
    """``pts 7 = 0.291667 s``, or ``pts 7`` when the time base is unknown."""
    if tb is None:
        return f"pts {pts}"
    return f"pts {pts} = {float(pts * Fraction(tb)):.6f} s"


@dataclass(frozen=True, slots=True)
class FrameLocation(Record):
    """Where a frame mismatch is (``GateResult.location``), with the frame's pixel format and
    size so that diagnostics and pictures need not probe for them."""

    stream: int | None
    frame: int
    pts: int | None = None
    pix_fmt: str | None = None
    frame_bytes: int | None = None

    @classmethod
    def of(cls, stream: VideoStream, frame: int, pts: int | None) -> FrameLocation:
        return cls(stream.index, frame, pts, stream.pix_fmt, stream.frame_bytes)

    @classmethod
    def named_by(cls, result: GateResult) -> FrameLocation | None:
        """The frame a result's location names (read leniently: a receipt's, a plugin's may
        hold anything); None when it names none."""
        if not isinstance(result.location.get("frame"), int):
            return None
        return from_json(cls, result.location, problems=[])


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
    limits: MediaLimits | None = None,
) -> GateResult:
    """``decoded`` for containers: stream metadata, then per-frame and per-audio-frame digests
    (files decoded to locate a difference are decoded within ``limits``)."""
    from ..gates.arrays import sides

    pair = sides(limits, expected)
    efp = ContainerFingerprint.from_json(expected.fingerprint)
    ofp = ContainerFingerprint.from_json(obtained.fingerprint)
    unit = "frame" if efp.video() or ofp.video() else "sample"
    result = new_result(expected, gate, kind, unit)
    if efp.container != ofp.container:
        result.notes.append(
            f"container differs (expected {efp.container}, obtained "
            f"{ofp.container}); the decoded gate compares streams, not the container"
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


def _compare_video_streams(
    result: GateResult, efp: ContainerFingerprint, ofp: ContainerFingerprint
) -> None:
    evs, ovs = efp.video(), ofp.video()
    note_meta(result.metadata_diffs, "video stream count", len(evs), len(ovs))
    total = 0
    count = 0
    exact = efp.exact_pts and ofp.exact_pts
    for n, (es, os_) in enumerate(zip(evs, ovs, strict=False)):
        prefix = f"video stream {n}: " if max(len(evs), len(ovs)) > 1 else ""
        for key in _VIDEO_META:
            if key == "time_base" and exact:
                continue  # each frame's presentation time is compared exactly, below
            note_meta(
                result.metadata_diffs,
                META_LABELS.get(key, key),
                getattr(es, key),
                getattr(os_, key),
                prefix,
            )
        if exact and es.time_base != os_.time_base:
            result.notes.append(
                f"{prefix}time base differs (expected {es.time_base}, obtained "
                f"{os_.time_base}); each frame's presentation time is compared exactly"
            )
        eframes, oframes = es.frames, os_.frames
        stream_total = max(len(eframes), len(oframes))
        total += stream_total
        etb, otb = es.pts_time_base, os_.pts_time_base
        etimes, otimes, rounded = frame_times(es, os_, efp.exact_pts, ofp.exact_pts)
        for i, (ef, of) in enumerate(zip_longest(eframes, oframes)):
            same = ef is not None and of is not None and ef.sha256 == of.sha256
            if same and etimes[i] == otimes[i]:
                continue
            count += 1
            if result.first_mismatch is not None:
                continue
            if of is None or ef is None:
                side = "expected" if of is None else "obtained"
                frame, tb = (ef, etb) if of is None else (of, otb)
                assert frame is not None
                result.first_mismatch = (
                    f"{prefix}{i} ({pts_time(frame.pts, tb)}): present in {side} only"
                )
            elif ef.sha256 != of.sha256:
                pts = pts_time(ef.pts, etb)
                if etimes[i] != otimes[i]:
                    pts += f"; obtained {pts_time(of.pts, otb)}"
                result.first_mismatch = f"{prefix}{i} ({pts}): pixels differ"
            else:
                result.first_mismatch = (
                    f"{prefix}{i}: pixels identical, timing differs: expected "
                    f"{pts_time(ef.pts, etb)}, obtained {pts_time(of.pts, otb)}"
                    f"{_shift_text(etimes[i], otimes[i], rounded)}"
                )
            result.location = FrameLocation.of(es, i, (ef or of).pts).to_json()
    if evs or ovs:
        result.total = total
        result.mismatch_count = count


def frame_times(
    es: VideoStream, os_: VideoStream, expected_exact: bool, obtained_exact: bool
) -> tuple[list[Fraction], list[Fraction], str | None]:
    """Each frame's presentation time on each side, in seconds, exact rationals, as the gate
    compares them (two time bases of the same times agree); and, where one side is a
    fingerprint made before times were recorded exactly (pts rounded to 1 / the frame rate:
    a golden not yet upgraded by ``--update-goldens``), the other side's times rounded to that
    time base, as that fingerprint was made, with a word saying so. Without a time base on a
    side, the pts themselves are compared, as before."""
    etimes, otimes = es.times(), os_.times()
    if etimes is None or otimes is None:
        return [Fraction(f.pts) for f in es.frames], [Fraction(f.pts) for f in os_.frames], None
    if expected_exact == obtained_exact:
        return etimes, otimes, None
    coarse_side, coarse = (
        ("obtained", os_.pts_time_base) if expected_exact else ("expected", es.pts_time_base)
    )
    assert coarse is not None  # times() found a time base
    step = Fraction(coarse)
    rounded = [round_half_away(t / step) * step for t in (etimes if expected_exact else otimes)]
    note = (
        f"; the {coarse_side} fingerprint keeps times rounded to {coarse} s (made before they "
        "were exact), so the other side's are rounded so too"
    )
    return (rounded, otimes, note) if expected_exact else (etimes, rounded, note)


def _shift_text(expected: Fraction, obtained: Fraction, rounded: str | None) -> str:
    """``: shown 0.02 s late`` (or early), and why times were rounded, if they were."""
    shift = obtained - expected
    when = "late" if shift > 0 else "early"
    return f": shown {float(abs(shift)):.9g} s {when}{rounded or ''}"


def _compare_audio_streams(
    result: GateResult,
    efp: ContainerFingerprint,
    ofp: ContainerFingerprint,
    expected: Artifact,
    obtained: Artifact,
    limits: Sides,
) -> None:
    """Audio streams of a container: metadata, then the first differing sample."""
    eas, oas = efp.audio(), ofp.audio()
    note_meta(result.metadata_diffs, "audio stream count", len(eas), len(oas))
    video = result.unit == "frame"
    findings: list[tuple[str, int | None, int]] = []
    sample_total = 0
    for n, (es, os_) in enumerate(zip(eas, oas, strict=False)):
        prefix = f"audio stream {n}: " if (max(len(eas), len(oas)) > 1 or video) else ""
        for key in _AUDIO_META:
            note_meta(
                result.metadata_diffs,
                META_LABELS.get(key, key),
                getattr(es, key),
                getattr(os_, key),
                prefix,
            )
        sample_total += max(es.sample_count, os_.sample_count)
        epk, opk = es.packets, os_.packets
        if epk == opk:
            continue
        k = first_difference([p.sha256 for p in epk], [p.sha256 for p in opk])
        text, count, diag = _audio_mismatch(es, os_, k, expected, obtained, limits)
        differing = sum(1 for a, b in zip_longest(epk, opk) if a != b)
        findings.append((f"{prefix}{text or _audio_timing(es, os_)}", count, differing))
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


def _audio_timing(es: AudioStream, os_: AudioStream) -> str:
    """Where two audio streams whose samples agree differ in time: the first decoded audio
    frame presented at another time (a gap, a shift: audio drifting from the video), with both
    times. Their pts are in 1 / the sample rate, so only a shift under half a sample is lost."""
    for k, (a, b) in enumerate(zip_longest(es.packets, os_.packets)):
        if a == b:
            continue
        if a is None or b is None:
            side = "expected" if b is None else "obtained"
            packet, tb = (a, es.time_base) if b is None else (b, os_.time_base)
            assert packet is not None
            return f"decoded audio frame {k} ({pts_time(packet.pts, tb)}): present in {side} only"
        if a.pts != b.pts or es.time_base != os_.time_base:
            return (
                f"decoded audio frame {k}: samples identical, timing differs: expected "
                f"{pts_time(a.pts, es.time_base)}, obtained {pts_time(b.pts, os_.time_base)}"
            )
    return "decoded audio frame timing differs"


#: The stream types a container fingerprint records by their packets (``other_streams``).
_OTHER_TYPES = ("subtitle", "data", "attachment")


def _unrecorded(fp: ContainerFingerprint) -> list[str]:
    """The other streams a fingerprint made before they were recorded names, unhashed."""
    if fp.other_streams is not None:
        return []
    return [
        text
        for text in fp.ignored_streams
        if len(text.split()) > 1 and text.split()[1] in _OTHER_TYPES
    ]


def _compare_other_streams(
    result: GateResult, efp: ContainerFingerprint, ofp: ContainerFingerprint
) -> None:
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
        eos = [s for s in efp.other_streams or () if s.codec_type == kind]
        oos = [s for s in ofp.other_streams or () if s.codec_type == kind]
        for es, os_ in zip_longest(eos, oos):
            shown = es or os_
            label = f"{kind} stream #{shown.index} ({shown.codec_name})"
            if es is None or os_ is None:
                side = "expected" if os_ is None else "obtained"
                result.metadata_diffs.append(f"{label}: present in {side} only")
                continue
            note_meta(result.metadata_diffs, "codec", es.codec_name, os_.codec_name, f"{label}: ")
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


def _packet_difference(es: OtherStream, os_: OtherStream) -> tuple[str, int, int] | None:
    """The first difference between two streams' packets (or their extradata), how many
    packets differ, and of how many; None when they are the same."""
    epk, opk = es.packets, os_.packets
    total = max(len(epk), len(opk))
    if epk == opk and es.sha256 == os_.sha256:
        if es.extradata_sha256 != os_.extradata_sha256:
            return "extradata (styles, attached file) differs", 0, total
        return None
    count = sum(1 for a, b in zip_longest(epk, opk) if a != b)
    k = next((i for i, (a, b) in enumerate(zip_longest(epk, opk)) if a != b), None)
    if k is None:  # the packets agree, their summary does not: only an edit makes this
        return "the SHA-256 of its packets differs, the packets listed do not", count, total
    ep, op = (epk[k] if k < len(epk) else None), (opk[k] if k < len(opk) else None)
    tb = es.time_base
    if ep is None or op is None:
        side = "expected" if op is None else "obtained"
        packet = ep if ep is not None else op
        assert packet is not None  # k is within the longer list
        return f"packet {k} ({pts_time(packet.pts, tb)}): present in {side} only", count, total
    where = f"packet {k} ({pts_time(ep.pts, tb)})"
    if ep.sha256 != op.sha256:
        return f"{where}: payload differs", count, total
    return (
        f"{where}: payload identical, timing differs: obtained "
        f"{pts_time(op.pts, os_.time_base)}, duration {op.duration} "
        f"(expected {ep.duration})",
        count,
        total,
    )


def _audio_mismatch(
    es: AudioStream,
    os_: AudioStream,
    k: int | None,
    expected: Artifact,
    obtained: Artifact,
    limits: Sides,
) -> tuple[str, int | None, dict[str, Figure]]:
    """First differing sample of a container audio stream: exact with data, else its packet."""
    from .audio import pcm_mismatch

    rate = es.sample_rate
    if expected.path is not None and obtained.path is not None:
        try:
            a, _ = media.load_container_audio(expected.path, es.index, limits=limits[0])
            b, _ = media.load_container_audio(obtained.path, os_.index, limits=limits[1])
        except LosslessError:
            pass
        else:
            if a.dtype == b.dtype and a.shape[1:] == b.shape[1:]:
                text, count, diag, _first = pcm_mismatch(a, b, rate)
                return text, count, diag
    if k is None:
        return "packet timing differs", None, {}
    packet: AudioPacket = (es.packets if k < len(es.packets) else os_.packets)[k]
    start = packet.pts
    end = start + packet.samples
    when = f" = {start / rate:.6f} s" if rate else ""
    return (
        f"within samples [{start}, {end}){when} (decoded audio frame {k}; only digests are "
        "kept: the exact sample is unknown)",
        None,
        {},
    )


def frame_diagnostics(result: GateResult, epath: Path, opath: Path, limits: Sides) -> None:
    """PSNR and max error of the first differing frame, in its own pixel format (each side
    decoded within its ``limits``)."""
    import numpy as np

    from ..gates.arrays import error_stats

    loc = FrameLocation.named_by(result)
    if loc is None:
        return
    n = loc.frame

    def load(p: Path, side: MediaLimits) -> dict[int, npt.NDArray[Any]]:
        return media.load_video_frames(
            p, stream_index=loc.stream, indices=[n], frame_bytes=loc.frame_bytes, limits=side
        )

    try:
        # Both sides decode at the same time: two short ffmpeg runs, mostly start-up.
        with ThreadPoolExecutor(max_workers=2) as pool:
            frames = list(pool.map(load, (epath, opath), limits))
    except LosslessError:
        return
    if n not in frames[0] or n not in frames[1]:
        return
    a, b = frames[0][n], frames[1][n]
    dtype = media.sample_dtype(loc.pix_fmt)
    if a.size * a.itemsize % dtype.itemsize or a.shape != b.shape:
        return
    a, b = a.view(dtype), b.view(dtype)
    stats = error_stats(a, b, media.sample_peak(loc.pix_fmt))
    result.diagnostics.update({f"frame_{k}": v for k, v in stats.items()})
    result.diagnostics["frame_differing_samples"] = int(np.count_nonzero(a != b))


# ------------------------------------------------------------------ tolerance


def compare_tolerance(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    limits: MediaLimits | None = None,
) -> GateResult:
    """``tolerance`` for containers (video, image, audio in a container): each decoded frame's
    samples and each audio stream's samples within ``atol + rtol * |expected|``."""
    from ..gates.lossy import begin_tolerance

    efp = ContainerFingerprint.from_json(expected.fingerprint)
    unit = "frame" if efp.video() else "sample"
    result, paths, pair = begin_tolerance(gate, expected, obtained, kind, unit, limits)
    tolerance_container(result, gate, expected, obtained, paths, pair)
    return settle(result)


def tolerance_container(
    result: GateResult,
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    paths: tuple[Path, Path],
    limits: Sides,
) -> None:
    from functools import partial

    import numpy as np

    from ..gates.arrays import value_text
    from ..gates.gate import number_text
    from ..gates.lossy import Spread, abs_diff, within

    epath, opath = paths
    efp = ContainerFingerprint.from_json(expected.fingerprint)
    ofp = ContainerFingerprint.from_json(obtained.fingerprint)
    evs, ovs = efp.video(), ofp.video()
    note_meta(result.metadata_diffs, "video stream count", len(evs), len(ovs))
    count = total = 0
    spread = Spread()
    for es, os_ in zip(evs, ovs, strict=False):
        for key in ("frame_count", "width", "height", "pix_fmt"):
            note_meta(
                result.metadata_diffs,
                META_LABELS.get(key, key),
                getattr(es, key),
                getattr(os_, key),
            )
        if result.metadata_diffs:
            continue
        dtype = media.sample_dtype(es.pix_fmt)
        eit = media.iter_video_frames(
            epath,
            stream_index=es.index,
            frame_bytes=es.frame_bytes,
            dtype=dtype,
            limits=limits[0],
        )
        oit = media.iter_video_frames(
            opath,
            stream_index=os_.index,
            frame_bytes=os_.frame_bytes,
            dtype=dtype,
            limits=limits[1],
        )
        for i, (b, a) in enumerate(zip(eit, oit, strict=False)):
            total += 1
            ok = within(a, b, gate.atol, gate.rtol)
            diff = _frame_diff(a, b)
            outside = int(np.count_nonzero(~ok))
            err = diff.max().item() if diff.size else 0
            spread.add(
                diff,
                outside,
                partial(_frame_where, es.index, i),
                histogram=True,
            )
            if outside:
                count += 1
                if result.first_mismatch is None:
                    pts = es.frames[i].pts if i < len(es.frames) else None
                    where = f" ({pts_time(pts, es.pts_time_base)})" if pts is not None else ""
                    result.first_mismatch = (
                        f"{i}{where}: {outside} samples outside "
                        f"atol={number_text(gate.atol)}, rtol={number_text(gate.rtol)} "
                        f"(max abs error {err:g})"
                    )
                    result.location = FrameLocation.of(es, i, pts).to_json()
    eas, oas = efp.audio(), ofp.audio()
    note_meta(result.metadata_diffs, "audio stream count", len(eas), len(oas))
    for ea, oa in zip(eas, oas, strict=False):
        b, _rate = media.load_container_audio(epath, ea.index, limits=limits[0])
        a, _ = media.load_container_audio(opath, oa.index, limits=limits[1])
        if a.shape != b.shape or a.dtype != b.dtype:
            note_meta(result.metadata_diffs, "audio sample count", len(b), len(a))
            continue
        ok = within(a, b, gate.atol, gate.rtol)
        stream = f"audio stream {ea.index} "
        spread.add(
            abs_diff(a, b),
            int(np.count_nonzero(~ok)),
            partial(sample_where, stream, a),
        )
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
    result.mismatch_count = count
    result.total = total
    result.diagnostics.update(spread.figures("abs_diff"))
    result.diagnostics["count_beyond"] = spread.beyond


def _frame_where(stream: int, frame: int, flat: int) -> str:
    return f"stream {stream} frame {frame} sample {flat}"


def sample_where(label: str, array: npt.NDArray[Any], flat: int) -> str:
    """``sample 3 (channel 1)``: a position of ``(samples, channels)`` audio, as the spread names
    its largest difference."""
    i, ch = divmod(flat, array.shape[1])
    return f"{label}sample {i} (channel {ch})"


def _frame_diff(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``|a - b|`` of one frame's samples: exact integers for integer pixel formats (counted in
    a histogram), float64 otherwise."""
    import numpy as np

    from ..gates.lossy import abs_diff

    if a.dtype.kind in "iu" and b.dtype.kind in "iu" and max(a.itemsize, b.itemsize) <= 2:
        return np.abs(a.astype(np.int32) - b.astype(np.int32))
    return abs_diff(a, b)


# ------------------------------------------------------------------ the canary's copy


def plan_frames(
    kind: Kind, gate: Gate, artifact: Artifact, folder: Path, limits: MediaLimits
) -> Plan:
    """Three decoded frames (at most), written losslessly twice: as decoded, and with one byte
    (one sample, for a tolerance) of the middle one changed. The copy must decode to the
    original's frame digests, or the next codec is tried. The frames come from one short
    decode near the middle of the clip (:func:`window_frames`), not from a second whole one."""
    from .canary import Plan, Unavailable

    assert artifact.path is not None
    stream = video_stream(ContainerFingerprint.from_json(artifact.fingerprint))
    start, window = window_frames(artifact.path, stream, limits)
    stop = start + len(window)
    changed = start + len(window) // 2
    at = changed - start
    new_frame, what = change_frame(window[at], stream, gate)
    wanted = [f.sha256 for f in stream.frames[start:stop]]
    changed_window = [*window[:at], new_frame, *window[at + 1 :]]
    problems = []
    for codec in VIDEO_COPY_CODECS:
        same, other = folder / f"same.{codec[0]}.{codec[1]}", folder / f"changed.{codec[1]}"
        # Both copies are written, and then fingerprinted, at the same time: four short ffmpeg
        # runs in two steps (each mostly start-up), not four in a row.
        try:
            copy, changed_copy = _write_and_fingerprint(
                kind, stream, ((window, same), (changed_window, other)), codec, limits
            )
        except LosslessError as exc:
            problems.append(f"{codec[0]}: {exc}")
            continue
        got = [f.sha256 for f in video_stream(copy).frames]
        if got != wanted:
            problems.append(f"{codec[0]} does not decode to the same frames")
            continue
        return Plan(
            obtained=other,
            expected=same,
            expected_fingerprint=copy,
            obtained_fingerprint=changed_copy,
            digests_suffice=gate.name == "decoded",
            kind=kind.name,
            unit=f"frame {changed}: {what} (a {codec[0]} copy of frames {start}-{stop - 1})",
            location={"frame": at},
        )
    raise Unavailable(f"no lossless copy of {stream.pix_fmt} frames: " + "; ".join(problems))


#: Frames decoded at most past the key frame a seek lands on, to reach the middle of the clip;
#: beyond that the canary copies the frames at the key frame instead.
SEEK_REACH = 48


def _write_and_fingerprint(
    kind: Kind,
    stream: VideoStream,
    jobs: tuple[tuple[list[bytes], Path], ...],
    codec: tuple[str, str],
    limits: MediaLimits,
) -> list[ContainerFingerprint]:
    """Each ``(frames, file)`` written with ``codec``, then fingerprinted, all files at the same
    time: short ffmpeg runs that are mostly start-up, in two steps instead of one after another."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        list(pool.map(lambda job: write_frames(job[0], stream, job[1], codec, limits), jobs))
        return list(pool.map(lambda job: _copy_fingerprint(kind, job[1], limits), jobs))


def _copy_fingerprint(kind: Kind, path: Path, limits: MediaLimits) -> ContainerFingerprint:
    """The fingerprint of a copy the canary has just written from frames it holds: the video
    kind's own, without the probe of declared sizes (they are known); another kind's (the
    image kind's) as it makes it."""
    if isinstance(kind, VideoKind):
        from ..media.container import fingerprint_container

        return fingerprint_container(path, video=True, limits=limits, declared=False)
    return ContainerFingerprint.from_json(kind.fingerprint(path))


def window_frames(path: Path, stream: VideoStream, limits: MediaLimits) -> tuple[int, list[bytes]]:
    """Consecutive decoded frames (three at most) from mid-clip, and the index of the first.

    ffmpeg seeks to the key frame at or before the middle (:func:`_seek_window`), so the clip
    is not decoded a second time from its start; which frames came is found from their digests
    in the fingerprint. Only where a seek cannot tell (no timing, a damaged index) is the clip
    decoded from its start up to the middle's frames."""
    from ..media.frames import load_video_frames
    from .canary import Unavailable

    digests = [f.sha256 for f in stream.frames]
    start, stop, _changed = video_window(len(digests))
    index, frame_bytes = stream.index, stream.frame_bytes
    if start > 0:
        found = _seek_window(path, stream, digests, start, stop - start, limits)
        if found is not None:
            return found
    decoded = load_video_frames(
        path, stream_index=index, indices=range(start, stop), frame_bytes=frame_bytes, limits=limits
    )
    window = [decoded[n].tobytes() for n in range(start, stop) if n in decoded]
    if len(window) != stop - start:
        raise Unavailable(f"frames {start} to {stop - 1} could not be decoded again")
    return start, window


def _seek_window(
    path: Path,
    stream: VideoStream,
    digests: list[str],
    start: int,
    size: int,
    limits: MediaLimits,
) -> tuple[int, list[bytes]] | None:
    """``size`` frames from frame ``start`` (or, past :data:`SEEK_REACH` frames from the key
    frame before it, from that key frame), decoded after a seek; None where the frames that
    came cannot be placed in the fingerprint's digests."""
    from collections import deque

    from ..core.digests import sha256_hex
    from ..media.frames import iter_video_frames

    tb = Fraction(stream.pts_time_base or "0")
    first_pts, pts = stream.frames[0].pts, stream.frames[start].pts
    if tb <= 0:
        return None
    recent: deque[bytes] = deque(maxlen=size)
    seen: list[str] = []
    landed: int | None = None
    decoded = iter_video_frames(
        path,
        stream_index=stream.index,
        frame_bytes=stream.frame_bytes,
        limits=limits,
        seek=float((pts - first_pts) * tb),
        count=size + SEEK_REACH,
    )
    try:
        for frame in decoded:
            data = frame.tobytes()
            recent.append(data)
            seen.append(sha256_hex(data))
            if landed is None and len(seen) == size:
                landed = _find_run(digests, seen, start)
                if landed is None:
                    return None
                if landed >= start or start - landed > SEEK_REACH:
                    return landed, list(recent)
            if landed is not None and landed + len(seen) == start + size:
                window = list(recent)
                same = [sha256_hex(w) for w in window] == digests[start : start + size]
                return (start, window) if same else None
    except LosslessError:
        return None
    finally:
        decoded.close()  # stops ffmpeg now
    return None


def _find_run(digests: list[str], run: list[str], near: int) -> int | None:
    """Where ``run`` occurs in ``digests`` (the occurrence nearest ``near``), or None."""
    if not run:
        return None
    places = [i for i in range(len(digests) - len(run) + 1) if digests[i : i + len(run)] == run]
    return min(places, key=lambda i: abs(i - near)) if places else None


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
    stream: VideoStream,
    out: Path,
    codec: tuple[str, str],
    limits: MediaLimits,
) -> None:
    """Encode raw frames (the stream's own pixel format) into ``out`` with ``codec``."""
    from ..media.ffmpeg import run_ffmpeg, stderr_tail

    encoder, muxer = codec
    args = [
        *("-v", "error", "-f", "rawvideo", "-pix_fmt", str(stream.pix_fmt)),
        *("-s", f"{stream.width}x{stream.height}"),
        *("-r", stream.frame_rate or "25"),
        *("-i", "-", "-map", "0:v", "-c:v", encoder, "-f", muxer, "-y", str(out)),
    ]
    proc = run_ffmpeg(
        args, path=out, limits=limits, what="canary copy", input_bytes=b"".join(frames)
    )
    if proc.returncode != 0:
        raise LosslessError(
            f"ffmpeg could not write {out} as {encoder}: {stderr_tail(proc.stderr)}"
        )


def video_stream(fingerprint: ContainerFingerprint) -> VideoStream:
    """The first video stream of a container fingerprint that has frames (not a cover)."""
    from .canary import Unavailable

    for stream in fingerprint.video():
        if not stream.attached_pic and stream.frames:
            return stream
    raise Unavailable("the video has no decoded frame to change")


def change_frame(frame: bytes, stream: VideoStream, gate: Gate) -> tuple[bytes, str]:
    """One frame with one byte's low bit flipped (``decoded``), or one sample moved just beyond
    the tolerance; and what was changed."""
    import numpy as np

    from ..media.frames import sample_dtype
    from .canary import Unfailable, beyond, middle_out, show

    data = bytearray(frame)
    if gate.name != "tolerance":
        pos = len(data) // 2
        old = data[pos]
        data[pos] ^= 1
        return bytes(data), f"byte {pos} of {len(data)}, 0x{old:02x} -> 0x{data[pos]:02x}"
    dtype = sample_dtype(stream.pix_fmt)
    samples = np.frombuffer(bytes(data), dtype=dtype).copy()
    for pos in middle_out(samples.size):
        x = samples[pos]
        y = beyond(x, samples.dtype, gate.atol + gate.rtol * abs(float(x)))
        if y is not None:
            samples[pos] = y
            return samples.tobytes(), f"sample {pos}, {show(x)} -> {show(y)}, beyond {gate.spec}"
    raise Unfailable(f"no sample of a {stream.pix_fmt} frame can move beyond {gate.spec}")


# ------------------------------------------------------------------ pictures


def frame_pictures(
    result: GateResult, expected: Artifact, obtained: Artifact, folder: Path, limits: MediaLimits
) -> list[str]:
    """The first differing frame, expected and obtained as PNG, and an amplified difference."""
    from ..core.paths import safe_name

    loc = FrameLocation.named_by(result)
    if result.passed or expected.path is None or obtained.path is None or loc is None:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / safe_name(expected.name, default="artifact")
    pair = (limits, limits.for_golden(expected.fingerprint))
    return _write_frame_pictures(base, expected.path, obtained.path, loc, pair)


def _write_frame_pictures(
    base: Path,
    epath: Path,
    opath: Path,
    loc: FrameLocation,
    limits: Sides,
) -> list[str]:
    import numpy as np

    from ..media.frames import load_video_frames, write_png

    n = loc.frame
    try:
        pictures = [
            load_video_frames(
                p, stream_index=loc.stream, pix_fmt="rgb24", indices=[n], limits=side
            ).get(n)
            for p, side in zip((epath, opath), limits, strict=True)
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
        write_png(base.with_name(f"{base.name}.frame{n}.{what}.png"), data, limits=limits[0])
        for what, data in (("expected", a), ("obtained", b), ("diff", picture))
    ]
    return [str(p) for p in paths]
