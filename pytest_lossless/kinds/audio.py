"""The audio kind: WAV, RF64, FLAC, or a container holding only audio; PCM samples compared bit
for bit under ``decoded`` (in the file's own sample format), or within ``tolerance``.

The canary writes a copy with libsndfile in the same format and subtype, one sample changed by
one LSB (or just beyond the tolerance); a failed comparison lists the first differing samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..media.signatures import CONTAINER_SIGNATURES, CONTAINER_SUFFIXES
from .interface import BuiltinKind

if TYPE_CHECKING:
    from ..core.artifact import Artifact
    from ..gates import Gate, GateResult
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

    def fingerprint(self, path: Path) -> dict[str, Any]:
        from ..media.audio import fingerprint_audio

        return fingerprint_audio(path, limits=self.limits())

    def check_declared(self, path: Path, limits: MediaLimits) -> None:
        from ..media import check_declared

        check_declared("audio", path, limits)

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        from ..gates.exact import compare_audio_file

        return compare_audio_file(gate, expected, obtained, self.name, limits=self.limits())

    def plan(self, gate: Gate, artifact: Artifact, folder: Path) -> Plan:
        assert artifact.path is not None
        out = folder / f"changed{artifact.path.suffix}"
        return perturb_audio(artifact.path, out, gate, self.limits())

    def pictures(
        self, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str]:
        from .tensor import listing

        return listing(result, expected, obtained, folder, self.limits(), "sample")


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

    from ..media.audio import load_audio
    from ..media.detect import is_audio_header, read_head
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
