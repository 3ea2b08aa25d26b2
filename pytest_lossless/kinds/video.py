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
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import LosslessError
from ..media.signatures import CONTAINER_SIGNATURES, CONTAINER_SUFFIXES
from .interface import BuiltinKind, Kind

if TYPE_CHECKING:
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

    def fingerprint(self, path: Path) -> dict[str, Any]:
        from ..media.container import fingerprint_container

        return fingerprint_container(path, video=True, limits=self.limits())

    def check_declared(self, path: Path, limits: MediaLimits) -> None:
        from ..media.container import check_declared_container

        check_declared_container(path, limits, video=True)

    def fingerprint_within(self, path: Path, limits: MediaLimits) -> dict[str, Any]:
        from ..media.container import fingerprint_container

        # The fast way checks the declared sizes under these limits while the decode starts.
        found = fingerprint_container(path, video=True, limits=limits)
        if not any(s.get("type") == "video" for s in found.get("streams", [])):
            # What detection would have said (its probe finds no video stream): audio.
            from ..errors import ArtifactError
            from ..media.detect import not_the_kind

            raise ArtifactError(path, not_the_kind(path, self.name, "audio"))
        return found

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        from ..gates.exact import compare_container

        return compare_container(gate, expected, obtained, self.name, limits=self.limits())

    def plan(self, gate: Gate, artifact: Artifact, folder: Path) -> Plan:
        return plan_frames(self, gate, artifact, folder, self.limits())

    def pictures(
        self, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str]:
        return frame_pictures(result, expected, obtained, folder, self.limits())


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
    stream = video_stream(artifact.fingerprint)
    frames = stream["frames"]
    start, window = window_frames(artifact.path, stream, limits)
    stop = start + len(window)
    changed = start + len(window) // 2
    at = changed - start
    new_frame, what = change_frame(window[at], stream, gate)
    wanted = [f["sha256"] for f in frames[start:stop]]
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
        got = [f["sha256"] for f in video_stream(copy)["frames"]]
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
    raise Unavailable(f"no lossless copy of {stream.get('pix_fmt')} frames: " + "; ".join(problems))


#: Frames decoded at most past the key frame a seek lands on, to reach the middle of the clip;
#: beyond that the canary copies the frames at the key frame instead.
SEEK_REACH = 48


def _write_and_fingerprint(
    kind: Kind,
    stream: dict[str, Any],
    jobs: tuple[tuple[list[bytes], Path], ...],
    codec: tuple[str, str],
    limits: MediaLimits,
) -> list[dict[str, Any]]:
    """Each ``(frames, file)`` written with ``codec``, then fingerprinted, all files at the same
    time: short ffmpeg runs that are mostly start-up, in two steps instead of one after another."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        list(pool.map(lambda job: write_frames(job[0], stream, job[1], codec, limits), jobs))
        return list(pool.map(lambda job: _copy_fingerprint(kind, job[1], limits), jobs))


def _copy_fingerprint(kind: Kind, path: Path, limits: MediaLimits) -> dict[str, Any]:
    """The fingerprint of a copy the canary has just written from frames it holds: the video
    kind's own, without the probe of declared sizes (they are known); another kind's (the
    image kind's) as it makes it."""
    if isinstance(kind, VideoKind):
        from ..media.container import fingerprint_container

        return fingerprint_container(path, video=True, limits=limits, declared=False)
    return kind.fingerprint(path)


def window_frames(
    path: Path, stream: dict[str, Any], limits: MediaLimits
) -> tuple[int, list[bytes]]:
    """Consecutive decoded frames (three at most) from mid-clip, and the index of the first.

    ffmpeg seeks to the key frame at or before the middle (:func:`_seek_window`), so the clip
    is not decoded a second time from its start; which frames came is found from their digests
    in the fingerprint. Only where a seek cannot tell (no timing, a damaged index) is the clip
    decoded from its start up to the middle's frames."""
    from ..media.video import load_video_frames
    from .canary import Unavailable

    frames = stream["frames"]
    digests = [f["sha256"] for f in frames]
    start, stop, _changed = video_window(len(digests))
    index, frame_bytes = stream.get("index"), stream.get("frame_bytes")
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
    stream: dict[str, Any],
    digests: list[str],
    start: int,
    size: int,
    limits: MediaLimits,
) -> tuple[int, list[bytes]] | None:
    """``size`` frames from frame ``start`` (or, past :data:`SEEK_REACH` frames from the key
    frame before it, from that key frame), decoded after a seek; None where the frames that
    came cannot be placed in the fingerprint's digests."""
    from collections import deque

    from ..media.hashing import sha256_hex
    from ..media.video import iter_video_frames

    frames = stream["frames"]
    tb = Fraction(str(stream.get("pts_time_base") or "0"))
    first_pts, pts = frames[0].get("pts"), frames[start].get("pts")
    if tb <= 0 or not isinstance(first_pts, int) or not isinstance(pts, int):
        return None
    recent: deque[bytes] = deque(maxlen=size)
    seen: list[str] = []
    landed: int | None = None
    decoded = iter_video_frames(
        path,
        stream_index=stream.get("index"),
        frame_bytes=stream.get("frame_bytes"),
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
    stream: dict[str, Any],
    out: Path,
    codec: tuple[str, str],
    limits: MediaLimits,
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
    from .canary import Unavailable

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
    import numpy as np

    from ..media.video import sample_dtype
    from .canary import Unfailable, beyond, middle_out, show

    data = bytearray(frame)
    if gate.name != "tolerance":
        pos = len(data) // 2
        old = data[pos]
        data[pos] ^= 1
        return bytes(data), f"byte {pos} of {len(data)}, 0x{old:02x} -> 0x{data[pos]:02x}"
    dtype = sample_dtype(stream.get("pix_fmt"))
    samples = np.frombuffer(bytes(data), dtype=dtype).copy()
    for pos in middle_out(samples.size):
        x = samples[pos]
        y = beyond(x, samples.dtype, gate.atol + gate.rtol * abs(float(x)))
        if y is not None:
            samples[pos] = y
            return samples.tobytes(), f"sample {pos}, {show(x)} -> {show(y)}, beyond {gate.spec}"
    raise Unfailable(f"no sample of a {stream.get('pix_fmt')} frame can move beyond {gate.spec}")


# ------------------------------------------------------------------ pictures


def frame_pictures(
    result: GateResult, expected: Artifact, obtained: Artifact, folder: Path, limits: MediaLimits
) -> list[str]:
    """The first differing frame, expected and obtained as PNG, and an amplified difference."""
    from ..core.digests import safe_name

    loc = result.location
    if result.passed or expected.path is None or obtained.path is None or "frame" not in loc:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / safe_name(expected.name, default="artifact")
    pair = (limits, limits.for_golden(expected.fingerprint))
    return _write_frame_pictures(base, expected.path, obtained.path, loc, pair)


def _write_frame_pictures(
    base: Path,
    epath: Path,
    opath: Path,
    loc: dict[str, Any],
    limits: Sides,
) -> list[str]:
    import numpy as np

    from ..media.video import load_video_frames, write_png

    n = int(loc["frame"])
    try:
        pictures = [
            load_video_frames(
                p, stream_index=loc.get("stream"), pix_fmt="rgb24", indices=[n], limits=side
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
