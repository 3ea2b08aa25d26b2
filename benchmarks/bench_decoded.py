"""Decoded fingerprint cost against its bare references, measured in the same run.

Video: ``kinds.fingerprint("video", ...)`` (one ffmpeg run hashing every video frame and audio
frame, plus
the file's SHA-256) against the bare ``ffmpeg -i CLIP -map 0:v -f framehash -hash sha256 -``, and
against the same framehash with the audio stream too (like for like). Audio:
``kinds.fingerprint("audio", ...)`` (RIFF walk, lossless read, PCM SHA-256, one SHA-256 per
second, the
file's SHA-256) against ``soundfile.read`` + ``hashlib.sha256``, and against read + the same
digests computed sequentially. Arms are interleaved (A B B A ...); ratios are of medians.

    python benchmarks/bench_decoded.py [--seconds 15] [--repeats 11]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile

from pytest_lossless import kinds, media
from pytest_lossless.core.clock import SYSTEM_CLOCK, Clock


def make_clip(folder: Path, seconds: float) -> Path:
    clip = folder / "clip.mp4"
    subprocess.run(
        [
            media.ffmpeg_exe(),
            "-hide_banner",
            "-nostdin",
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            f"testsrc=size=320x176:rate=24:duration={seconds}",
            "-f",
            "lavfi",
            "-i",
            f"sine=frequency=440:sample_rate=48000:duration={seconds}",
            "-c:v",
            "libx264",
            "-threads",
            "1",
            "-pix_fmt",
            "yuv420p",
            "-c:a",
            "aac",
            "-shortest",
            str(clip),
        ],
        check=True,
    )
    return clip


def make_wav(folder: Path, seconds: float) -> Path:
    wav = folder / "speech.wav"
    rng = np.random.default_rng(0)
    pcm = rng.integers(-20000, 20000, size=(int(48000 * seconds), 2)).astype(np.int16)
    soundfile.write(wav, pcm, 48000, subtype="PCM_16")
    return wav


def framehash(clip: Path, *extra: str) -> Callable[[], object]:
    argv = [
        media.ffmpeg_exe(),
        "-hide_banner",
        "-nostdin",
        "-v",
        "error",
        "-i",
        str(clip),
        *extra,
        "-f",
        "framehash",
        "-hash",
        "sha256",
        "-",
    ]
    return lambda: subprocess.run(argv, check=True, capture_output=True).stdout


def soundfile_sha(wav: Path, *, same_digests: bool = False) -> Callable[[], object]:
    """soundfile.read + SHA-256 of the PCM; with ``same_digests`` also the file's SHA-256 and
    one SHA-256 per second, i.e. the digests our fingerprint holds, computed sequentially."""

    def run() -> object:
        data, rate = soundfile.read(str(wav), dtype="int16", always_2d=True)
        raw = data.tobytes()
        pcm = hashlib.sha256(raw).hexdigest()
        if not same_digests:
            return pcm
        step = rate * data.shape[1] * 2
        blocks = [hashlib.sha256(raw[i : i + step]).hexdigest() for i in range(0, len(raw), step)]
        return pcm, blocks, hashlib.sha256(wav.read_bytes()).hexdigest()

    return run


def paired(
    ours: Callable[[], object],
    reference: Callable[[], object],
    repeats: int,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[float, float]:
    """Median seconds of each arm, interleaved A B B A so drift hits both alike."""
    times: dict[str, list[float]] = {"ours": [], "ref": []}
    ours()
    reference()  # warm the page cache and the executable
    for i in range(repeats):
        order = (("ours", ours), ("ref", reference))
        for name, fn in order if i % 2 == 0 else order[::-1]:
            start = clock.monotonic()
            fn()
            times[name].append(clock.monotonic() - start)
    return statistics.median(times["ours"]), statistics.median(times["ref"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        clip = make_clip(folder, args.seconds)
        wav = make_wav(folder, args.seconds)
        fp = kinds.fingerprint("video", clip)
        video = fp["streams"][0]
        ours_digests = [f["sha256"] for f in video["frames"]]
        cli = [
            line.rsplit(",", 1)[1].strip()
            for line in framehash(clip, "-map", "0:v")().decode().splitlines()  # type: ignore[attr-defined]
            if not line.startswith("#")
        ]
        assert ours_digests == cli, "frame digests disagree with ffmpeg framehash"
        print(
            f"clip: {clip.stat().st_size} bytes, {video['frame_count']} frames "
            f"{video['width']}x{video['height']} {video['pix_fmt']} @ {video['frame_rate']}, "
            f"audio {fp['streams'][1]['sample_count']} samples {fp['streams'][1]['sample_fmt']}"
        )
        rows = []
        ours, ref = paired(
            lambda: kinds.fingerprint("video", clip), framehash(clip, "-map", "0:v"), args.repeats
        )
        rows.append(("video fingerprint vs framehash -map 0:v", ours, ref))
        ours, ref = paired(
            lambda: kinds.fingerprint("video", clip),
            framehash(clip, "-map", "0:v", "-map", "0:a", "-c:a", "pcm_f32le"),
            args.repeats,
        )
        rows.append(("video fingerprint vs framehash -map 0:v -map 0:a", ours, ref))
        ours, ref = paired(
            lambda: kinds.fingerprint("audio", wav), soundfile_sha(wav), args.repeats
        )
        rows.append(("audio fingerprint vs soundfile.read+sha256", ours, ref))
        ours, ref = paired(
            lambda: kinds.fingerprint("audio", wav),
            soundfile_sha(wav, same_digests=True),
            args.repeats,
        )
        rows.append(("audio fingerprint vs read + the same digests", ours, ref))
    print(f"{'comparison':52s} {'ours s':>8s} {'ref s':>8s} {'ratio':>6s}")
    for label, ours, ref in rows:
        print(f"{label:52s} {ours:8.4f} {ref:8.4f} {ours / ref:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
