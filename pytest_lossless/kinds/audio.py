"""The audio kind: WAV, RF64, FLAC, or a container holding only audio; PCM samples compared bit
for bit under ``decoded`` (in the file's own sample format), or within ``tolerance``.

The canary writes a copy with libsndfile in the same format and subtype, one sample changed by
one LSB (or just beyond the tolerance); audio in a container is decoded, and a window of it
written twice as PCM, once with one sample changed (:func:`perturb_container_audio`). A failed
comparison lists the first differing samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .. import media
from ..core.digests import Fingerprint
from ..core.records import JsonObject, meta
from ..gates.gate import Figure, first_difference, new_result, note_meta, settle
from ..media.signatures import CONTAINER_SIGNATURES, CONTAINER_SUFFIXES
from .interface import BuiltinKind

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..core.artifact import Artifact
    from ..gates import Gate, GateResult
    from ..media.container import ContainerFingerprint
    from ..media.limits import MediaLimits
    from .canary import Plan


class AudioKind(BuiltinKind):
    """WAV, RF64, FLAC, or a container holding only audio: PCM samples compared bit for bit."""

    name = "audio"
    default_gate = "decoded"
    gates = ("bytes", "decoded", "tolerance")
    hints: ClassVar[dict[str, str]] = {
        "elementwise": "PCM samples are compared bit for bit by 'decoded'"
    }
    #: WAV, RF64 and BW64 (RIFF forms), FLAC, or a container holding only audio.
    signatures = (
        *((0, magic) for magic in (b"RIFF", b"RF64", b"BW64", b"fLaC")),
        *CONTAINER_SIGNATURES,
    )
    suffixes = CONTAINER_SUFFIXES

    def detect(self, path: Path, head: bytes) -> bool:
        from ..media.detect import detect_kind, is_audio_header, may_be_container

        # The header test is cheap; a container is probed only when no header says audio.
        return is_audio_header(head) or (
            may_be_container(path, head)
            and detect_kind(path, head, limits=self.limits()) == "audio"
        )

    def fingerprint(self, path: Path) -> JsonObject:
        return fingerprint_audio(path, limits=self.limits()).to_json()

    def check_declared(self, path: Path, limits: MediaLimits) -> None:
        """Refuse, from its header alone, a file that declares more decoded PCM than
        ``limits`` allow (a container: its streams' declared sizes)."""
        from ..core.artifact import read_head
        from ..media.container import check_declared_container
        from ..media.detect import is_audio_header
        from ..media.pcm import check_declared_audio_file

        if is_audio_header(read_head(path, 12)):
            check_declared_audio_file(path, limits)
        else:
            check_declared_container(path, limits, video=False)

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        return compare_audio_file(gate, expected, obtained, self.name, limits=self.limits())

    def compare_tolerance(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        return compare_tolerance(gate, expected, obtained, self.name, limits=self.limits())

    def plan(self, gate: Gate, artifact: Artifact, folder: Path) -> Plan:
        assert artifact.path is not None
        if "streams" in artifact.fingerprint:  # audio in a container: AAC in MP4, ...
            return perturb_container_audio(self.name, gate, artifact, folder, self.limits())
        out = folder / f"changed{artifact.path.suffix}"
        return perturb_audio(artifact.path, out, gate, self.limits())

    def emptiness(self, artifact: Artifact) -> str | None:
        if "streams" in artifact.fingerprint:
            from ..media.container import ContainerFingerprint
            from .video import container_emptiness

            return container_emptiness(ContainerFingerprint.from_json(artifact.fingerprint))
        count = AudioFingerprint.from_json(artifact.fingerprint).sample_count
        return "no sample (0 samples)" if count == 0 else None

    def pictures(
        self, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str]:
        from .tensor import listing

        return listing(result, expected, obtained, folder, self.limits(), "sample")


# ------------------------------------------------------------------ the fingerprint


def _canonical(block: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Little-endian, C-contiguous: the canonical bytes every digest is taken of."""
    import numpy as np

    if block.dtype.byteorder == ">" or (block.dtype.byteorder == "=" and not np.little_endian):
        block = block.astype(block.dtype.newbyteorder("<"))
    return np.ascontiguousarray(block)


# WAV subtypes whose data chunk holds exactly the canonical little-endian PCM that a lossless
# read gives (proved equal in the tests): hashed straight from the file, no decode needed.
_RAW_WAV_SUBTYPES = {"PCM_16": "<i2", "PCM_32": "<i4", "FLOAT": "<f4", "DOUBLE": "<f8"}


@dataclass(frozen=True, slots=True)
class AudioFingerprint(Fingerprint):
    """A WAV, RF64 or FLAC file, as libsndfile reads it: its format and subtype, the PCM's
    shape and sample type (``dtype``: little-endian, as numpy names it), the SHA-256 of the
    whole PCM and one per ``block_frames`` samples (a second: a digest-only golden can
    localise a change), and the file's size and SHA-256. ``channel_mask``: the speaker layout
    the file declares, when it is not its channel count's default (absent: the default)."""

    format: str
    size: int
    sha256: str
    subtype: str
    sample_rate: int
    channels: int
    sample_count: int
    duration: float
    dtype: str
    pcm_sha256: str
    block_frames: int = field(metadata=meta(absent=1))
    block_sha256: tuple[str, ...]
    channel_mask: int | None = field(default=None, metadata=meta(omit="none"))

    @classmethod
    def of(
        cls,
        snd: Any,
        dtype: str,
        count: int,
        pcm: str,
        blocks: list[str],
        size: int,
        sha: str,
        mask: int | None = None,
    ) -> AudioFingerprint:
        """From the file's libsndfile header and its digests."""
        import numpy as np

        rate = int(snd.samplerate)
        return cls(
            format=str(snd.format),
            size=size,
            sha256=sha,
            subtype=str(snd.subtype),
            sample_rate=rate,
            channels=int(snd.channels),
            sample_count=count,
            duration=round(count / rate, 6) if rate else 0.0,
            dtype=np.dtype(dtype).newbyteorder("<").str,
            pcm_sha256=pcm,
            block_frames=max(1, rate),
            block_sha256=tuple(blocks),
            channel_mask=mask,
        )


def fingerprint_audio_file(path: Path, *, limits: MediaLimits | None = None) -> AudioFingerprint:
    """Fingerprint a WAV/FLAC file: format, PCM digest and one digest per second of samples.

    A file whose header declares more decoded samples than ``limits.decode_limit`` is refused
    before decoding, and the decode is counted as it runs."""
    import mmap
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from ..core.artifact import read_head
    from ..core.digests import file_digest, parallel_digests
    from ..media.detect import RIFF_IDS
    from ..media.limits import MediaLimits
    from ..media.pcm import (
        check_declared_pcm,
        check_wav_complete,
        declared_channel_mask,
        lossless_dtype,
        open_sound,
    )

    path = Path(path)
    limits = limits or MediaLimits.from_env()
    head = read_head(path, 12)
    layout = check_wav_complete(path) if head[:4] in RIFF_IDS else None
    with open_sound(path) as snd:
        subtype = str(snd.subtype)
        dtype = lossless_dtype(subtype)
        check_declared_pcm(path, snd, dtype, limits)
        mask = declared_channel_mask(path, int(snd.channels))
        block_frames = max(1, int(snd.samplerate))
        raw = _RAW_WAV_SUBTYPES.get(subtype)
        if (
            layout is not None
            and raw is not None
            and np.dtype(raw).itemsize * int(snd.channels) == layout.block_align
            and layout.present_bytes // layout.block_align == int(snd.frames)
        ):
            count = int(snd.frames)
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                size = len(mm)
                view = memoryview(mm)
                data = view[layout.data_offset : layout.data_offset + count * layout.block_align]
                try:
                    pcm, blocks, file_sha = parallel_digests(
                        data, block_frames * layout.block_align, view
                    )
                finally:
                    data.release()
                    view.release()
            return AudioFingerprint.of(snd, raw, count, pcm, blocks, size, file_sha, mask)
        with ThreadPoolExecutor(max_workers=1) as pool:
            whole_file = pool.submit(file_digest, path)
            count, pcm, blocks = _decode_pcm_digests(path, snd, dtype, block_frames, limits)
            size, file_sha = whole_file.result()
        return AudioFingerprint.of(snd, dtype, count, pcm, blocks, size, file_sha, mask)


def _decode_pcm_digests(
    path: Path, snd: Any, dtype: str, block_frames: int, limits: MediaLimits
) -> tuple[int, str, list[str]]:
    """Decode with libsndfile block by block: sample count, PCM digest, per-block digests."""
    import hashlib

    from ..core.digests import sha256_hex
    from ..errors import ArtifactError, TruncatedArtifact
    from ..media.limits import refuse

    declared = int(snd.frames)
    whole = hashlib.sha256()
    blocks: list[str] = []
    read = 0
    try:
        while True:
            block = snd.read(block_frames, dtype=dtype, always_2d=True)
            if not len(block):
                break
            data = _canonical(block)
            whole.update(data.data)
            blocks.append(sha256_hex(data.data))
            read += len(block)
            if data.nbytes and read * (data.nbytes // len(block)) > limits.decode_limit:
                raise refuse(
                    path,
                    "it",
                    read * (data.nbytes // len(block)),
                    limits.decode_limit,
                    limits.decode_basis,
                    decoding=True,
                )
    except RuntimeError as exc:
        raise ArtifactError(
            path,
            f"libsndfile failed while decoding it ({exc}): the file is damaged or truncated; "
            "re-run the producer or restore the file",
        ) from None
    if read < declared:
        raise TruncatedArtifact(
            path,
            f"truncated audio: the header declares {declared} samples per channel but only "
            f"{read} could be decoded. Re-run the producer or restore the file",
        )
    return read, whole.hexdigest(), blocks


def fingerprint_audio(
    path: Path, *, limits: MediaLimits | None = None
) -> AudioFingerprint | ContainerFingerprint:
    """Fingerprint audio: WAV/FLAC through libsndfile, other containers through ffmpeg."""
    from ..core.artifact import read_head
    from ..media.container import fingerprint_container
    from ..media.detect import is_audio_header

    path = Path(path)
    if is_audio_header(read_head(path, 12)):
        return fingerprint_audio_file(path, limits=limits)
    return fingerprint_container(path, video=False, limits=limits)


# ------------------------------------------------------------------ decoded: the exact gate


def _mask_text(fp: AudioFingerprint) -> str:
    """A WAV/FLAC file's speaker layout as a message names it."""
    if fp.channel_mask is None:
        return f"the default of {fp.channels} channel(s)"
    return f"channel mask 0x{fp.channel_mask:x}"


def pcm_peak(dtype: np.dtype[Any]) -> float:
    """The full-scale value of a PCM sample type, the peak of its PSNR (1.0 for floats)."""
    import numpy as np

    if dtype.kind in "iu":
        return float(np.iinfo(dtype).max)
    return 1.0


def pcm_mismatch(
    a: npt.NDArray[Any], b: npt.NDArray[Any], rate: int
) -> tuple[str, int, dict[str, Figure], int | None]:
    """First differing sample (time index, channel, both values), count of differing frames,
    error diagnostics, and the first differing time index itself."""
    import numpy as np

    from ..gates.arrays import bits_differ, error_stats, value_text

    n = min(len(a), len(b))
    differ = bits_differ(a[:n], b[:n])
    rows = differ.any(axis=1) if differ.ndim > 1 else differ
    where = np.flatnonzero(rows)
    count = int(where.size) + abs(len(a) - len(b))
    diag: dict[str, Figure] = {}
    if where.size:
        i = int(where[0])
        ch = int(np.flatnonzero(differ[i])[0]) if differ.ndim > 1 else 0
        when = f", t = {i / rate:.6f} s" if rate else ""
        text = (
            f"{i} (channel {ch}{when}): expected {value_text(a, (i, ch))}, "
            f"obtained {value_text(b, (i, ch))}"
        )
        diag.update(error_stats(a[:n], b[:n], pcm_peak(a.dtype)))
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
    limits: MediaLimits | None = None,
) -> GateResult:
    """``decoded`` for WAV/FLAC: format metadata, then PCM sample by sample (or per block).
    PCM is loaded to locate a difference only within ``limits``; beyond them, per block."""
    from ..gates.arrays import sides
    from .video import META_LABELS, compare_container

    result = new_result(expected, gate, kind, "sample")
    if "streams" in expected.fingerprint or "streams" in obtained.fingerprint:
        if "streams" in expected.fingerprint and "streams" in obtained.fingerprint:
            return compare_container(gate, expected, obtained, kind, limits=limits)
        result.metadata_diffs.append(
            f"format: expected {expected.fingerprint.get('format')}, obtained "
            f"{obtained.fingerprint.get('format')} "
            "(one is a WAV/FLAC file, the other a media container)"
        )
        return settle(result)
    efp = AudioFingerprint.from_json(expected.fingerprint)
    ofp = AudioFingerprint.from_json(obtained.fingerprint)
    diffs = result.metadata_diffs
    for key in ("sample_count", "duration", "sample_rate", "channels", "subtype", "dtype"):
        note_meta(diffs, META_LABELS.get(key, key), getattr(efp, key), getattr(ofp, key))
    note_meta(diffs, "channel layout", _mask_text(efp), _mask_text(ofp))
    if efp.format != ofp.format:
        result.notes.append(
            f"file format differs (expected {efp.format}, obtained {ofp.format}); "
            "the decoded gate compares the PCM, not the file format"
        )
    result.total = max(efp.sample_count, ofp.sample_count)
    same = efp.pcm_sha256 == ofp.pcm_sha256 and not diffs
    if same:
        result.mismatch_count = 0
        return settle(result)
    rate = efp.sample_rate
    comparable = efp.dtype == ofp.dtype and efp.channels == ofp.channels
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
        text, count, diag, first = pcm_mismatch(a, b, rate)
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
        block = first_difference(efp.block_sha256, ofp.block_sha256)
        size = efp.block_frames
        if block is not None:
            total_blocks = max(len(efp.block_sha256), len(ofp.block_sha256))
            start = block * size
            end = min((block + 1) * size, result.total or (block + 1) * size)
            when = f" (t = {start / rate:.6f} s to {end / rate:.6f} s)" if rate else ""
            result.first_mismatch = (
                f"within samples [{start}, {end}){when} (only digests are kept: the exact "
                "sample is unknown)"
            )
            blocks = sum(1 for x, y in zip_longest(efp.block_sha256, ofp.block_sha256) if x != y)
            result.notes.append(f"{blocks} of {total_blocks} blocks of {size} samples differ")
            result.location = {"sample_range": [start, end]}
    return settle(result)


# ------------------------------------------------------------------ tolerance


def compare_tolerance(
    gate: Gate,
    expected: Artifact,
    obtained: Artifact,
    kind: str,
    limits: MediaLimits | None = None,
) -> GateResult:
    """``tolerance`` for WAV/FLAC: every PCM sample within ``atol + rtol * |expected|`` (audio
    in a container: :func:`~.video.compare_tolerance`)."""
    from ..gates.arrays import value_text
    from ..gates.lossy import begin_tolerance, tolerance_arrays
    from .video import sample_where

    if "streams" in expected.fingerprint:
        from .video import compare_tolerance as compare_container_tolerance

        return compare_container_tolerance(gate, expected, obtained, kind, limits)
    result, (epath, opath), pair = begin_tolerance(gate, expected, obtained, kind, "sample", limits)
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
        tolerance_arrays(result, gate, iter([("", a, b)]), describe_sample, sample_where)
    return settle(result)


# ------------------------------------------------------------------ the canary's copy

#: libsndfile subtypes a copy can be written in exactly, and one LSB of each in the units
#: :func:`~..load_audio` reads them in (24- and 8-bit PCM are read shifted up).
_PCM_STEP = {"PCM_16": 1, "PCM_24": 256, "PCM_32": 1, "PCM_S8": 256, "PCM_U8": 256}
_FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")


def perturb_audio(path: Path, out: Path, gate: Gate, limits: MediaLimits | None) -> Plan:
    """A WAV/FLAC copy, written by libsndfile with the same format and subtype, with one PCM
    sample changed by one LSB (``decoded``) or just beyond the tolerance."""
    import numpy as np
    import soundfile

    from ..core.artifact import read_head
    from ..media.detect import is_audio_header
    from ..media.pcm import load_audio
    from .canary import Plan, Unavailable, Unfailable, beyond, flip_lsb, middle_out, show

    if not is_audio_header(read_head(path, 12)):
        raise Unavailable("audio in a media container: the canary changes WAV/FLAC files only")
    info = soundfile.info(str(path))
    subtype = str(info.subtype)
    if subtype not in _PCM_STEP and subtype not in _FLOAT_SUBTYPES:
        raise Unavailable(f"a copy in {subtype} would not keep every other sample exactly")
    data, rate = load_audio(path, limits=limits)
    if not data.size:
        raise Unavailable("the audio has no sample to change")
    step = _PCM_STEP.get(subtype, 1)
    found = None
    for i in middle_out(len(data)):
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
    back, _ = load_audio(out, limits=limits)
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
        unit=f"sample {i} of channel 0 ({subtype}): {show(x)} -> {show(y)}, {what}",
        location={"sample": i},
        prefix=f"{i} (channel 0",
    )


#: Samples a container-audio canary copies at most, around the middle of the stream.
AUDIO_WINDOW = 4096


def perturb_container_audio(
    kind: str, gate: Gate, artifact: Artifact, folder: Path, limits: MediaLimits
) -> Plan:
    """Audio in a container (AAC in MP4, PCM in MOV, ...): the first audio stream with samples
    decoded in its own sample format, a window of it around the middle written losslessly twice
    (PCM in NUT), as decoded and with one sample of channel 0 changed by its last bit (or moved
    just beyond the tolerance). The copies are judged against each other by the kind's own
    comparator, as the video canary's frames are: its audio side must FAIL at that sample. The
    unchanged copy must decode to the very samples written, or no copy is made."""
    import numpy as np

    from ..media.container import ContainerFingerprint, fingerprint_container
    from ..media.pcm import load_container_audio
    from .canary import Plan, Unavailable, Unfailable, beyond, flip_lsb, middle_out, show

    assert artifact.path is not None
    fingerprint = ContainerFingerprint.from_json(artifact.fingerprint)
    stream = next((s for s in fingerprint.audio() if s.packets and s.sample_count), None)
    if stream is None:
        raise Unavailable("the container has no audio sample to change")
    data, rate = load_container_audio(artifact.path, stream.index, limits=limits)
    if not data.size:
        raise Unavailable(f"audio stream #{stream.index} decodes to no sample")
    start = max(0, len(data) // 2 - AUDIO_WINDOW // 2)
    window = np.ascontiguousarray(data[start : start + AUDIO_WINDOW])
    found = None
    for i in middle_out(len(window)):
        x = window[i, 0]
        if gate.name == "tolerance":
            y = beyond(x, window.dtype, gate.atol + gate.rtol * abs(float(x)))
        elif window.dtype.kind == "f":
            y = flip_lsb(window[i : i + 1, 0])[0] if np.isfinite(x) else None
        else:
            y = beyond(x, window.dtype, 0)
        if y is not None:
            found = (i, x, y)
            break
    if found is None:
        if gate.name == "tolerance":
            raise Unfailable(
                f"no sample of audio stream #{stream.index} can move beyond {gate.spec}"
            )
        raise Unavailable(f"no sample of audio stream #{stream.index} can be changed")
    i, x, y = found
    changed = window.copy()
    changed[i, 0] = y
    same, other = folder / "same-audio.nut", folder / "changed-audio.nut"
    copies = ((window, same), (changed, other))

    def write(job: tuple[npt.NDArray[Any], Path]) -> ContainerFingerprint:
        samples, out = job
        _write_pcm(samples, rate, out, limits)
        return fingerprint_container(out, video=False, limits=limits, declared=False)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        same_fp, other_fp = pool.map(write, copies)
    back, _ = load_container_audio(same, limits=limits)
    if back.dtype != window.dtype or back.tobytes() != window.tobytes():
        raise Unavailable(
            f"a PCM copy of audio stream #{stream.index} does not decode to the same samples"
        )
    at = start + i
    what = "its last bit" if gate.name != "tolerance" else f"beyond {gate.spec}"
    prefix = f"audio sample {i} (channel 0" if gate.name == "tolerance" else f"{i} (channel 0"
    return Plan(
        obtained=other,
        expected=same,
        expected_fingerprint=same_fp,
        obtained_fingerprint=other_fp,
        kind=kind,
        unit=(
            f"audio stream #{stream.index} sample {at} of channel 0 ({stream.sample_fmt}): "
            f"{show(x)} -> {show(y)}, {what} (a PCM copy of samples {start}-"
            f"{start + len(window) - 1})"
        ),
        prefix=prefix,
    )


def _write_pcm(samples: npt.NDArray[Any], rate: int, out: Path, limits: MediaLimits) -> None:
    """``(frames, channels)`` samples written losslessly as PCM of their own type in NUT."""
    from ..errors import LosslessError
    from ..media.ffmpeg import run_ffmpeg, stderr_tail
    from ..media.probe import SAMPLE_FORMATS

    dtype = samples.dtype.newbyteorder("<") if samples.dtype.itemsize > 1 else samples.dtype
    encoder = next((enc for enc, _w, name in SAMPLE_FORMATS.values() if dtype == name), None)
    if encoder is None:
        from .canary import Unavailable

        raise Unavailable(f"no PCM encoder writes {dtype} samples")
    raw = encoder.removeprefix("pcm_")
    args = [
        *("-v", "error", "-f", raw, "-ar", str(rate), "-ac", str(samples.shape[1])),
        *("-i", "-", "-c:a", encoder, "-f", "nut", "-y", str(out)),
    ]
    proc = run_ffmpeg(
        args,
        path=out,
        limits=limits,
        what="canary copy",
        input_bytes=samples.astype(dtype, copy=False).tobytes(),
    )
    if proc.returncode != 0:
        raise LosslessError(
            f"ffmpeg could not write {out} as {encoder}: {stderr_tail(proc.stderr)}"
        )
