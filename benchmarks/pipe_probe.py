"""Where the time of a decoded check goes: decoding alone, raw frames through a pipe (read by
``cat``, read here into reused buffers, read and hashed), and the whole fast fingerprint; medians
of interleaved repeats. A diagnostic beside ``run_all.py``.

    python benchmarks/pipe_probe.py CLIP [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_lossless import kinds, media  # noqa: E402
from pytest_lossless.core.digests import digest_frames, hash_threads  # noqa: E402
from pytest_lossless.media import container  # noqa: E402
from pytest_lossless.media.ffmpeg import RAW_PIPE_BYTES, OutputPipe  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("clip")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    clip = Path(args.clip)
    exe = media.ffmpeg_exe()
    head = [exe, "-hide_banner", "-nostdin", "-v", "error", "-i", str(clip), "-map", "0:v:0"]
    fp = kinds.fingerprint("video", clip)
    frame_bytes = fp["streams"][0]["frame_bytes"]

    def raw_python(hash_it: bool, threads: int | None = None) -> Callable[[], object]:
        def go() -> object:
            pipe = OutputPipe(size=RAW_PIPE_BYTES, drain=False)
            proc = subprocess.Popen(
                [*head, "-f", "rawvideo", f"pipe:{pipe.write_fd}"], pass_fds=(pipe.write_fd,)
            )
            pipe.close_write()
            try:
                if hash_it:
                    return digest_frames(pipe.readinto, frame_bytes, threads=threads)
                view = memoryview(bytearray(1 << 20))
                while pipe.readinto(view):
                    pass
                return None
            finally:
                proc.wait()
                pipe.close()

        return go

    arms: dict[str, Callable[[], object]] = {
        "decode only (-f null)": lambda: subprocess.run([*head, "-f", "null", "-"], check=True),
        "raw pipe | cat": lambda: subprocess.run(
            " ".join([*head, "-f", "rawvideo", "-", "| cat > /dev/null"]), shell=True, check=True
        ),
        "raw pipe, read here (1 MiB pipe)": raw_python(False),
        f"raw pipe, read + SHA-256 on {hash_threads()} threads": raw_python(True),
        "raw pipe, read + SHA-256 inline": raw_python(True, 0),
        "fast fingerprint (media.fingerprint)": lambda: kinds.fingerprint("video", clip),
        **{
            f"fast fingerprint, {n} raw pipe(s)": (
                lambda n=n: container._fast_fingerprint(clip, media.MediaLimits(), stripes=n)
            )
            for n in (1, 2, 4)
        },
    }
    times: dict[str, list[float]] = {name: [] for name in arms}
    for fn in arms.values():
        fn()
    order = list(arms.items())
    for i in range(args.repeats):
        for name, fn in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["decode only (-f null)"])
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:48s} {med:7.3f} s  {med / base:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
