"""Request coverage: an artifact holds what the run was asked for (frames, samples, seconds).

A miss is its own FAIL, naming requested against obtained, whatever the comparison says: a
truncated output is never judged identical to a truncated golden, nor written as a golden
(``golden.check(expect=)`` checks every run of a producer under ``--update-goldens`` too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..core.artifact import Artifact
from ..core.expect import Media, _fraction
from ..core.records import Record, spec
from ..errors import ConfigError
from ..gates import GateResult

#: What ``expect=`` takes: one ``Media`` for every artifact, or one per artifact name.
Expect = Media | Mapping[str, Media] | None
#: The gate name a coverage result carries in tables and receipts.
COVERAGE = "coverage"


def _streams(fingerprint: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    streams = fingerprint.get("streams")
    if isinstance(streams, list):
        return [s for s in streams if isinstance(s, Mapping) and s.get("type") == kind]
    return []


def _rate(text: object) -> Fraction | None:
    try:
        value = Fraction(str(text))
    except (ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


#: The kinds a ``Media`` describes (a duration, frames, samples).
MEDIA_KINDS = frozenset({"video", "audio"})


@dataclass(frozen=True)
class RunMedia(Media):
    """One ``Media`` given for a whole run: it covers the run's video and audio artifacts, and
    a tensor beside them (which has no duration) is not checked against it."""

    @classmethod
    def of(cls, media: Media) -> RunMedia:
        return media if isinstance(media, RunMedia) else cls(**dataclasses.asdict(media))


def misses(expect: Media, artifact: Artifact) -> list[str]:
    """What ``artifact`` lacks of ``expect`` (empty: covered). Video: frame count; audio:
    sample count, rate and channels; a clip with both: their durations within one frame."""
    if isinstance(expect, RunMedia) and artifact.kind not in MEDIA_KINDS:
        return []
    found: list[str] = []
    fp = artifact.fingerprint
    videos = _streams(fp, "video")
    audios = _streams(fp, "audio")
    if artifact.kind == "audio" and not audios:
        audios = [fp]  # a WAV/FLAC fingerprint is itself the audio stream
    fps: Fraction | None = None
    for stream in videos[:1]:
        fps = _rate(stream.get("frame_rate"))
        found += _rate_misses(expect, fps, stream.get("frame_count"))
        wanted = expect.frames(fps)
        got = stream.get("frame_count")
        if wanted is not None and got != wanted:
            seconds = f"{float(int(got) / fps):.3f} s" if fps and isinstance(got, int) else "?"
            found.append(
                f"frames: requested {wanted} ({expect.seconds} s at {expect.fps or fps} fps), "
                f"obtained {got} ({seconds})"
            )
    for stream in audios[:1]:
        rate = stream.get("sample_rate")
        if expect.sample_rate is not None and rate != expect.sample_rate:
            found.append(f"sample rate: requested {expect.sample_rate} Hz, obtained {rate} Hz")
        if expect.channels is not None and stream.get("channels") != expect.channels:
            found.append(
                f"channels: requested {expect.channels}, obtained {stream.get('channels')}"
            )
        wanted = expect.samples(rate if isinstance(rate, int) else None)
        got = stream.get("sample_count")
        if wanted is not None and got != wanted:
            seconds = f"{int(got) / int(rate):.4f} s" if isinstance(got, int) and rate else "?"
            rule = f"{float(expect.audio_seconds()):g} s"
            if expect.audio_quantum is not None:
                rule += f", {expect.seconds} s rounded up to whole {expect.audio_quantum} s quanta"
            found.append(
                f"audio samples: requested {wanted} ({rule} at "
                f"{expect.sample_rate or rate} Hz), obtained {got} ({seconds})"
            )
    if videos and audios and fps:
        video_s = _seconds(videos[0].get("frame_count"), fps)
        rate = audios[0].get("sample_rate")
        audio_s = _seconds(audios[0].get("sample_count"), Fraction(int(rate)) if rate else None)
        if video_s is not None and audio_s is not None and abs(video_s - audio_s) > 1 / fps:
            found.append(
                f"video {float(video_s):.3f} s and audio {float(audio_s):.4f} s differ by more "
                "than one frame"
            )
    if not videos and not audios:
        from ..media.detect import with_article

        found.append(
            f"{with_article(artifact.kind)} artifact has no video or audio stream to check"
        )
    return found


def _rate_misses(expect: Media, fps: Fraction | None, count: object) -> list[str]:
    """With ``expect.fps``: the stream must run at that rate, and last ``seconds`` within one
    frame (120 frames at 48 fps are the frames of 5 s at 24 fps, but only 2.5 s)."""
    wanted = _fraction(expect.fps, "fps") if expect.fps is not None else None
    if wanted is None:
        return []
    found = []
    if fps is None or fps != wanted:
        shown = f"{float(fps):g} fps" if fps else "no frame rate"
        found.append(f"frame rate: requested {float(wanted):g} fps, obtained {shown}")
    seconds, obtained = _fraction(expect.seconds, "seconds"), _seconds(count, fps)
    if seconds is not None and obtained is not None and fps and abs(obtained - seconds) > 1 / fps:
        found.append(
            f"duration: requested {expect.seconds} s, obtained {float(obtained):.3f} s "
            f"({count} frames at {float(fps):g} fps)"
        )
    return found


def _seconds(count: object, rate: Fraction | None) -> Fraction | None:
    if not isinstance(count, int) or rate is None:
        return None
    return count / rate


def result(expect: Media, artifact: Artifact) -> GateResult | None:
    """A failed coverage result naming every miss, or None when ``artifact`` is covered."""
    found = misses(expect, artifact)
    if not found:
        return None
    return GateResult(
        artifact=artifact.name,
        kind=artifact.kind,
        gate=COVERAGE,
        lossless=True,
        passed=False,
        metadata_diffs=[f"request coverage: {m}" for m in found],
        unit="frame" if artifact.kind == "video" else "sample",
        notes=[f"requested {expect.to_dict()}"],
    )


def expectation_for(expect: Media | Mapping[str, Media] | None, name: str) -> Media | None:
    """The ``Media`` that applies to artifact ``name`` (a mapping names them one by one)."""
    if expect is None or isinstance(expect, Media):
        return expect
    return expect.get(name)


def check_names(expect: Expect, names: Iterable[str], what: str) -> None:
    """A mapping of expectations names only artifacts the run produced: a name it did not
    produce (a typo, a renamed output) would otherwise check nothing, silently."""
    if expect is None or isinstance(expect, Media):
        return
    if not isinstance(expect, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Media) for k, v in expect.items()
    ):
        raise ConfigError(f"{what}(expect=...)", expect, "expected a Media or {name: Media}")
    produced = sorted(names)
    unknown = sorted(set(expect) - set(produced))
    if unknown:
        raise ConfigError(
            f"{what}(expect=...)",
            ", ".join(unknown),
            f"names no artifact of the run (it produced {', '.join(produced) or 'nothing'})",
        )


@dataclass(frozen=True)
class CoverageMiss(Record):
    """What one run's artifact misses of its request: the coverage :class:`GateResult` (FAIL,
    naming requested against obtained) and the run. Its JSON, ``{"run", **GateResult}``, is the
    receipt entry ``lossless.compare`` and ``golden.check`` record, read alike by ``verify``
    and the tables."""

    run: str = spec(absent="")
    result: GateResult = spec(flatten=True)


def run_misses(expect: Expect, artifacts: Mapping[str, Artifact], run: str) -> list[CoverageMiss]:
    """The misses of one run's artifacts."""
    found = []
    # One Media for a whole run covers its clip and track (RunMedia); a run with no media
    # artifact at all is checked as asked, and misses.
    media = any(a.kind in MEDIA_KINDS for a in artifacts.values())
    for name, artifact in sorted(artifacts.items()):
        wanted = expectation_for(expect, name)
        if isinstance(expect, Media) and media:
            wanted = RunMedia.of(expect)
        missed = result(wanted, artifact) if wanted is not None else None
        if missed is not None:
            found.append(CoverageMiss(run, missed))
    return found


def producer_misses(misses: Iterable[CoverageMiss]) -> list[CoverageMiss]:
    """A producer's misses with its runs named as a producer's (``run 1``, not ``control#1``)."""
    return [dataclasses.replace(m, run=m.run.replace("control#", "run ")) for m in misses]


def describe(misses: Iterable[CoverageMiss]) -> list[str]:
    """One line per miss: ``run 1 audio.wav: request coverage: audio samples: ...``."""
    return [
        f"{m.run} {m.result.artifact}: {d}"
        for m in misses
        for d in m.result.metadata_diffs or ["not covered"]
    ]


def varied_lines(verdict: Any) -> list[str]:
    """What differed between a producer's runs, in a producer's words (run 1 vs run 2), one
    indented line per difference under each pair of runs that differed."""
    lines = []
    for comparison in verdict.control_comparisons:
        if comparison.identical:
            continue
        left = comparison.left.replace("control#", "run ")
        right = comparison.right.replace("control#", "run ")
        lines.append(f"  {left} vs {right}:")
        lines += ["    " + d.replace("\n", "\n    ") for d in comparison.differences()]
    return lines


def varied_runs(verdict: Any) -> str:
    """:func:`varied_lines` under a heading: the message of a producer that disagreed."""
    return "\n".join(["What varied between its runs:", *varied_lines(verdict)])
