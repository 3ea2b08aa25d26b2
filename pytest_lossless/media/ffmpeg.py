"""The ffmpeg bundled with imageio-ffmpeg: finding it, running it under the time limit, and the one
place that builds every ffmpeg command line, so that each decode is written once and always the
same way. Every input is opened with ``-max_pixels`` (the decoder refuses a larger frame before
allocating it) and every run is killed, with its whole process group, at the ffmpeg time limit.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import cast

from ..errors import ArtifactError, LosslessError
from .limits import DecodeLimitExceeded, FFmpegTimeout, MediaLimits, refuse
from .probe import ProbeInfo, parse_probe

#: ffmpeg's framehash muxer, format version 2, on stdout: one SHA-256 line per decoded frame.
_FRAMEHASH_OUTPUT = ("-f", "framehash", "-hash", "sha256", "-format_version", "2", "-")
#: Raw video frames, each passed through with its own timestamp (none dropped or duplicated).
_RAW_FRAMES = ("-c:v", "rawvideo", "-fps_mode", "passthrough")
#: Each video frame's timing exactly as the file has it: the frame passed through untouched
#: (``wrapped_avframe``: a reference, never a copy of its pixels) and its pts written in the
#: stream's own time base (``-enc_time_base demux``), not rounded to 1 / the frame rate as the
#: raw frames' encoder does (a frame shown 20 ms late in a 24 fps clip kept its pts there).
_EXACT_TIMING = ("-c:v", "wrapped_avframe", "-fps_mode", "passthrough", "-enc_time_base", "demux")
#: The streams other than video and audio (subtitles, data, attachments), in the order they are
#: mapped, their packets copied as they are (never decoded) and hashed one by one.
OTHER_STREAM_TYPES = ("subtitle", "data", "attachment")
_OTHER_MAPS = ("0:s?", "0:d?", "0:t?")
_OTHER_COPY = ("-c:s", "copy", "-c:d", "copy", "-c:t", "copy")
#: The raw frames' pipe is enlarged to this (Linux caps it at /proc/sys/fs/pipe-max-size, 1 MiB
#: by default): fewer, larger writes and reads between ffmpeg and the hashing threads.
RAW_PIPE_BYTES = 1 << 20
#: fcntl's F_SETPIPE_SZ (Linux), absent from older Pythons' fcntl module.
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
#: How much of ffmpeg's stderr is kept: its start (the stream description) and its end (the error).
_STDERR_HEAD = 1 << 20
_STDERR_TAIL = 64 << 10


def ffmpeg_exe() -> str:
    """The ffmpeg executable bundled with imageio-ffmpeg (or named by IMAGEIO_FFMPEG_EXE)."""
    try:
        import imageio_ffmpeg
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise LosslessError(
            "imageio-ffmpeg is not installed: pip install imageio-ffmpeg (pytest-lossless "
            "decodes video with the ffmpeg it bundles)"
        ) from exc
    try:
        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except RuntimeError as exc:
        raise LosslessError(f"no ffmpeg executable found by imageio-ffmpeg: {exc}") from exc


# ------------------------------------------------------------------ command lines


def _command(args: Sequence[str], *, stdin: bool = False) -> list[str]:
    """The whole command: the executable, no banner, no keyboard input unless fed on stdin."""
    return [ffmpeg_exe(), "-hide_banner", *(() if stdin else ("-nostdin",)), *args]


def file_input(path: Path) -> str:
    """``path`` as ffmpeg's input: always a file (``file:``), so that a name such as
    ``concat:a.mp4|b.mp4`` or ``subfile:...`` is never read as another protocol."""
    return f"file:{path}"


def _decode_input(
    path: Path, max_pixels: int, *, log: str = "error", xerror: bool = True
) -> list[str]:
    """Read ``path`` at log level ``log``; with ``xerror`` the first decoding error is fatal.
    The decoders refuse any frame of more than ``max_pixels`` pixels."""
    args = ["-v", log]
    if log == "info":
        args.append("-nostats")  # the stream description is wanted on stderr, not the progress
    if xerror:
        args.append("-xerror")
    return [*args, "-max_pixels", str(max_pixels), "-i", file_input(path)]


def _maps(selectors: Iterable[str]) -> list[str]:
    return [arg for selector in selectors for arg in ("-map", selector)]


def probe_args(path: Path, max_pixels: int) -> list[str]:
    """Open ``path`` and stop: ffmpeg describes the input on stderr and exits (no output)."""
    return ["-max_pixels", str(max_pixels), "-i", file_input(path)]


def declared_args(path: Path) -> list[str]:
    """Open ``path`` without decoding a single video frame (``-skip_frame all``): the sizes and
    durations its headers declare, on stderr, before anything is decoded."""
    return ["-skip_frame", "all", "-i", file_input(path)]


def container_framehash_args(
    path: Path, max_pixels: int, *, video: bool, timed: int = 0
) -> list[str]:
    """One pass over a container: every audio stream as float PCM and (with ``video``) every
    video stream as raw frames, hashed frame by frame, then the packets of every other stream
    (:data:`OTHER_STREAM_TYPES`, copied), with the stream description on stderr. ``timed``:
    the number of video streams the file has; each is mapped once more, last, for its frames'
    exact timing (:data:`_EXACT_TIMING`; an optional map that matched nothing would make
    ffmpeg pick streams itself, so the count must be known)."""
    maps = ["0:v?", "0:a?"] if video else ["0:a?"]
    codecs = ["-c:a", "pcm_f32le", *(_RAW_FRAMES if video else ()), *_OTHER_COPY]
    maps += _OTHER_MAPS
    if video and timed:
        maps.append("0:v")
        codec, encoder, sync, mode, base, demux = _EXACT_TIMING
        for n in range(timed, 2 * timed):
            codecs += [f"{codec}:{n}", encoder, f"{sync}:v:{n}", mode, f"{base}:v:{n}", demux]
    return [
        *_decode_input(path, max_pixels, log="info"),
        *_maps(maps),
        *codecs,
        *_FRAMEHASH_OUTPUT,
    ]


#: The timing output of :func:`fast_video_args` hashes frames cropped to this (a corner of
#: 4x4 pixels: whole chroma samples of every common subsampling), so that its hashing costs
#: nothing; cropping keeps each frame's timestamps, duration and sample aspect ratio.
TIMING_CROP = "crop=4:4:0:0"


def fast_video_args(
    path: Path, max_pixels: int, raw_fds: Sequence[int], timing_fd: int, exact_fd: int
) -> list[str]:
    """The first video stream for the fast video fingerprint (``media.container``): its raw
    frames on the ``pipe:N`` of ``raw_fds`` (the reader computes each frame's SHA-256), and on
    ``pipe:timing_fd`` the framehash lines of the same frames cropped to a corner
    (:data:`TIMING_CROP`): their timestamps and durations, with a hash that costs nothing.
    With several raw pipes, frame ``n`` goes to pipe ``n`` modulo their number (the stream is
    decoded once; each pipe has its own writer thread in ffmpeg, so the copies through the
    pipes run in parallel). On ``pipe:exact_fd``, the framehash lines of the same frames with
    their exact timing (:data:`_EXACT_TIMING`). Same decoder, same timestamps, same frame bytes
    as :func:`container_framehash_args`; the description of the input and of the raw output is
    on stderr. (Audio goes to a run of its own: an output of no stream here would cost more CPU
    than the whole decode.)"""
    stripes = len(raw_fds)
    raw: list[str] = []
    for k, fd in enumerate(raw_fds):
        pick = ("-vf", f"select='eq(mod(n,{stripes}),{k})'") if stripes > 1 else ()
        raw += [*_maps(["0:v:0"]), *pick, *_RAW_FRAMES, "-f", "rawvideo", f"pipe:{fd}"]
    return [
        *_decode_input(path, max_pixels, log="info"),
        *raw,
        *_maps(["0:v:0"]),
        *("-vf", TIMING_CROP),
        *_RAW_FRAMES,
        *_FRAMEHASH_OUTPUT[:-1],
        f"pipe:{timing_fd}",
        *_maps(["0:v:0"]),
        *_EXACT_TIMING,
        *_FRAMEHASH_OUTPUT[:-1],
        f"pipe:{exact_fd}",
    ]


def audio_framehash_args(
    path: Path, max_pixels: int, streams: Sequence[tuple[int, str]], others: Sequence[int] = ()
) -> list[str]:
    """Audio streams, given as ``(stream index, pcm encoder)``, hashed in their own format;
    then the streams of index ``others`` (subtitles, data, attachments), their packets copied
    and hashed as they are."""
    codecs = [arg for pos, (_index, enc) in enumerate(streams) for arg in (f"-c:a:{pos}", enc)]
    maps = _maps([*(f"0:{index}" for index, _enc in streams), *(f"0:{i}" for i in others)])
    copy = _OTHER_COPY if others else ()
    return [*_decode_input(path, max_pixels), *maps, *codecs, *copy, *_FRAMEHASH_OUTPUT]


def first_frame_framehash_args(path: Path, max_pixels: int, selector: str) -> list[str]:
    """The first frame of one video stream, hashed raw: the framehash header gives its
    dimensions, its line the size of one native raw frame."""
    return [
        *_decode_input(path, max_pixels, xerror=False),
        *_maps([selector]),
        *("-frames:v", "1", "-c:v", "rawvideo"),
        *_FRAMEHASH_OUTPUT,
    ]


def rawvideo_args(
    path: Path,
    max_pixels: int,
    selector: str,
    *,
    rgb24: bool = False,
    seek: float | None = None,
    count: int | None = None,
) -> list[str]:
    """One video stream's raw frames on stdout, natively or (``rgb24``) converted for pictures.

    ``seek`` (seconds) starts at the key frame at or before that time, decoding nothing before
    it (``-noaccurate_seek``: the caller finds which frames came by their digests); ``count``
    stops after that many frames."""
    convert = ("-pix_fmt", "rgb24") if rgb24 else ()
    start = ("-noaccurate_seek", "-ss", f"{seek:.6f}") if seek is not None else ()
    frames = ("-frames:v", str(count)) if count is not None else ()
    decode = _decode_input(path, max_pixels)
    return [
        *decode[:-2],
        *start,
        *decode[-2:],
        *_maps([selector]),
        *("-fps_mode", "passthrough"),
        *frames,
        *convert,
        *("-f", "rawvideo", "-"),
    ]


def pcm_args(path: Path, max_pixels: int, index: int, encoder: str) -> list[str]:
    """One audio stream's samples on stdout through the pcm ``encoder`` (no container)."""
    return [
        *_decode_input(path, max_pixels),
        *_maps([f"0:{index}"]),
        *("-c:a", encoder, "-f", "data", "-"),
    ]


def png_args(target: Path, width: int, height: int) -> list[str]:
    """One ``width`` x ``height`` rgb24 picture read from stdin, written to ``target`` as PNG."""
    return [
        *("-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}"),
        *("-i", "-", "-frames:v", "1", "-y", str(target)),
    ]


# ------------------------------------------------------------------ running


class OutputPipe:
    """A pipe one ffmpeg output is written to, named ``pipe:N`` (``N``: :attr:`write_fd`) on
    the command line. :class:`FFmpegRun` passes the write end to ffmpeg and closes it here; the
    read end is read by the caller (:meth:`readinto`) or, with ``drain``, by a thread of the run
    that keeps the text in :attr:`data` and hands each piece to ``on_chunk`` (which may raise to
    stop ffmpeg: a decode budget)."""

    def __init__(
        self,
        *,
        size: int | None = None,
        drain: bool = True,
        on_chunk: Callable[[bytes], None] | None = None,
    ) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.write_fd, True)
        if size is not None:
            with contextlib.suppress(OSError):
                fcntl.fcntl(self.read_fd, _F_SETPIPE_SZ, size)
        self.drain = drain
        self.on_chunk = on_chunk
        self.data = bytearray()
        self.error: BaseException | None = None
        self._reader = io.FileIO(self.read_fd, "rb", closefd=False)

    def readinto(self, buffer: memoryview) -> int:
        """Read what is there into ``buffer`` (0 at the end of the output)."""
        return self._reader.readinto(buffer) or 0

    def close_write(self) -> None:
        if self.write_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.write_fd)
            self.write_fd = -1

    def close(self) -> None:
        self.close_write()
        if self.read_fd >= 0:
            self._reader.close()
            with contextlib.suppress(OSError):
                os.close(self.read_fd)
            self.read_fd = -1


class FFmpegRun:
    """One ffmpeg process under the time limit, used as a context manager.

    It starts in a process group of its own; when ``limits.ffmpeg_timeout`` passes, or when the
    block is left before ffmpeg ends (an error, a limit hit, a generator closed early), the whole
    group is killed, so a wrapper named by ``IMAGEIO_FFMPEG_EXE`` cannot leave a decoder behind.
    Its stderr is drained by a thread and kept bounded (the start and the end); ``input_bytes``
    is fed on stdin by another. Read ``stdout``, and the ``outputs`` pipes the command line names
    (those with ``drain`` are read by threads of the run); then :meth:`finish` gives the exit
    status and stderr, or raises :class:`~.limits.FFmpegTimeout` naming ``path`` and the limit,
    or what an output's ``on_chunk`` raised.
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        path: Path,
        limits: MediaLimits,
        what: str,
        input_bytes: bytes | None = None,
        outputs: Sequence[OutputPipe] = (),
    ) -> None:
        self.path = path
        self.limits = limits
        self.what = what
        self.expired = threading.Event()
        self._stderr_seen = threading.Condition()
        self._stderr_done = False
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = False
        self.outputs = list(outputs)
        try:
            command = _command(args, stdin=input_bytes is not None)
        except BaseException:
            for pipe in self.outputs:
                pipe.close()
            raise
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE if input_bytes is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=tuple(pipe.write_fd for pipe in self.outputs),
            )
        except OSError as exc:
            for pipe in self.outputs:
                pipe.close()
            raise LosslessError(
                f"cannot run ffmpeg {command[0]!r} ({what} of {path}): {exc.strerror or exc}; "
                "check IMAGEIO_FFMPEG_EXE or reinstall imageio-ffmpeg"
            ) from None
        for pipe in self.outputs:
            pipe.close_write()  # ffmpeg holds the only write end: its exit ends the output
        assert self.proc.stdout is not None
        self.stdout = cast(io.BufferedReader, self.proc.stdout)
        self._timer = threading.Timer(limits.ffmpeg_timeout, self._expire)
        self._timer.daemon = True
        self._threads = [threading.Thread(target=self._drain_stderr, daemon=True)]
        for pipe in self.outputs:
            if pipe.drain:
                self._threads.append(
                    threading.Thread(target=self._drain_output, args=(pipe,), daemon=True)
                )
        if input_bytes is not None:
            self._threads.append(threading.Thread(target=self._feed, args=(input_bytes,)))
            self._threads[-1].daemon = True
        self._timer.start()
        for thread in self._threads:
            thread.start()

    def __enter__(self) -> FFmpegRun:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _expire(self) -> None:
        self.expired.set()
        self.kill()

    def kill(self) -> None:
        """Kill ffmpeg's whole process group (nothing when it has already been reaped)."""
        if self.proc.returncode is None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        stderr = cast(io.BufferedReader, self.proc.stderr)
        while chunk := stderr.read1(1 << 16):
            with self._stderr_seen:
                room = _STDERR_HEAD - len(self._head)
                if room > 0:
                    self._head += chunk[:room]
                    chunk = chunk[room:]
                self._stderr_seen.notify_all()
            if chunk:
                self._tail += chunk
                if len(self._tail) > _STDERR_TAIL:
                    del self._tail[: len(self._tail) - _STDERR_TAIL]
                    self._dropped = True
        with self._stderr_seen:
            self._stderr_done = True
            self._stderr_seen.notify_all()

    def stderr_until(self, marker: bytes) -> bytes:
        """The start of stderr once it holds ``marker`` (or ffmpeg closed it: it ended, or the
        time limit killed it), while ffmpeg runs on: its stream description, say."""
        with self._stderr_seen:
            self._stderr_seen.wait_for(
                lambda: self._stderr_done or marker in self._head or len(self._head) >= _STDERR_HEAD
            )
            return bytes(self._head)

    def _drain_output(self, pipe: OutputPipe) -> None:
        buffer = bytearray(1 << 16)
        view = memoryview(buffer)
        while n := pipe.readinto(view):
            chunk = bytes(view[:n])
            pipe.data += chunk
            if pipe.on_chunk is not None and pipe.error is None:
                try:
                    pipe.on_chunk(chunk)
                except BaseException as exc:  # handed to the caller by finish()
                    pipe.error = exc
                    self.kill()

    def raise_output_error(self) -> None:
        """Raise what an output's ``on_chunk`` raised (a decode budget), if anything."""
        for pipe in self.outputs:
            if pipe.error is not None:
                raise pipe.error

    def _feed(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
        except (BrokenPipeError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def stderr(self) -> bytes:
        """What ffmpeg wrote on stderr so far: its start and its end, the middle left out."""
        gap = b"\n[...]\n" if self._dropped else b""
        return bytes(self._head) + gap + bytes(self._tail)

    def check_expired(self) -> None:
        """Raise :class:`~.limits.FFmpegTimeout` if the time limit killed ffmpeg."""
        if self.expired.is_set():
            raise FFmpegTimeout(self.path, self.limits.ffmpeg_timeout, self.what)

    def finish(self) -> tuple[int, bytes]:
        """Wait for ffmpeg (stdout read to its end): its exit status and stderr."""
        code = self.proc.wait()
        for thread in self._threads:
            thread.join()
        self._timer.cancel()
        self.check_expired()
        self.raise_output_error()
        return code, self.stderr()

    def close(self) -> None:
        """Kill ffmpeg if it still runs, reap it, and close its pipes (idempotent)."""
        self.kill()
        self._timer.cancel()
        self.stdout.close()
        self.proc.wait()
        for thread in self._threads:
            thread.join()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        for pipe in self.outputs:
            pipe.close()


def run_ffmpeg(
    args: Sequence[str],
    *,
    path: Path,
    limits: MediaLimits,
    what: str,
    input_bytes: bytes | None = None,
    on_output: Callable[[bytes], None] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ffmpeg with ``args`` (a list, never a shell string) under the time limit, capturing
    both streams. ``on_output`` sees each piece of stdout as it comes and may raise to stop
    ffmpeg (a decode budget); ``path`` and ``what`` name the run in errors."""
    with FFmpegRun(args, path=path, limits=limits, what=what, input_bytes=input_bytes) as run:
        chunks: list[bytes] = []
        while chunk := run.stdout.read1(1 << 16):
            chunks.append(chunk)
            if on_output is not None:
                on_output(chunk)
        code, stderr = run.finish()
    return subprocess.CompletedProcess(run.proc.args, code, b"".join(chunks), stderr)


def stderr_tail(stderr: bytes, lines: int = 4) -> str:
    """The last lines of ffmpeg's stderr, without its memory addresses, for error messages."""
    text = stderr.decode("utf-8", "replace").strip().splitlines()
    tail = [re.sub(r" @ 0x[0-9a-f]+", "", line.strip()) for line in text[-lines:]]
    return " | ".join(tail) or "(no message)"


#: What ffmpeg says when a decoder refuses a frame's size: over ``-max_pixels``, or (from about
#: 16000x16000 on, where width x height overflows its own check) "invalid" whatever the limit.
_PICTURE_SIZE = re.compile(
    rb"Picture size (\d+)x(\d+) (?:is invalid|exceeds specified max pixel count)"
)


def frame_limit_note(stderr: bytes, limits: MediaLimits) -> str:
    """A sentence for a failed decode whose frames the ``-max_pixels`` backstop refused."""
    if b"max pixel count" not in stderr and _oversized_frame(stderr, limits) is None:
        return ""
    return (
        f"a frame is larger than the {limits.frame_pixels} pixels allowed "
        f"({limits.frame_basis}): the decoder refused it before allocating it"
    )


def _oversized_frame(stderr: bytes, limits: MediaLimits) -> tuple[int, int] | None:
    """The first frame size ffmpeg refused that is over the frame-size limit, or None."""
    for found in _PICTURE_SIZE.finditer(stderr):
        width, height = int(found[1]), int(found[2])
        if width * height > limits.frame_pixels:
            return width, height
    return None


def frame_limit_error(path: Path, stderr: bytes, limits: MediaLimits) -> DecodeLimitExceeded | None:
    """The error for a decode that failed because a frame is over the frame-size limit, as its
    size is known only to the decoder (a PNG's or JPEG's header, an H.264 SPS: the demuxer
    declares none, so the declared-size check could not see it); None for any other failure
    (#20: a 30000x30000 PNG was "damaged or truncated", the limit unnamed)."""
    size = _oversized_frame(stderr, limits)
    if size is None:
        return None
    width, height = size
    return refuse(
        path,
        f"a frame of {width}x{height} has",
        width * height,
        limits.frame_pixels,
        limits.frame_basis,
        unit="pixels",
    )


#: Demuxers whose file only refers to other files (playlists, concat lists, manifests): what
#: such an artifact decodes to depends on files outside it, so it is never fingerprinted.
REFERENCE_FORMATS = frozenset({"hls", "applehttp", "concat", "dash", "imf", "mpd"})


def refuse_references(path: Path, info: ProbeInfo) -> None:
    """ArtifactError when ffmpeg opened ``path`` as a playlist or list of other files."""
    names = set((info.container or "").split(","))
    if names & REFERENCE_FORMATS:
        raise ArtifactError(
            path,
            f"is a {info.container} file that refers to other files: an artifact must hold its "
            "own media (a playlist's fingerprint would depend on files outside it)",
        )


def opened(path: Path, stderr: bytes) -> ProbeInfo:
    """The streams ffmpeg described on stderr; ArtifactError when it could not open the file."""
    info = parse_probe(stderr.decode("utf-8", "replace"))
    if info is None:
        if (over := frame_limit_error(path, stderr, MediaLimits())) is not None:
            raise over  # a demuxer that could not even allocate its frame size (y4m)
        raise ArtifactError(
            path,
            "ffmpeg cannot open it as a media container (damaged, truncated, or not media): "
            f"{stderr_tail(stderr)}",
        )
    refuse_references(path, info)
    return info


def probe(path: Path, limits: MediaLimits) -> ProbeInfo:
    """Open ``path`` with ffmpeg and describe its streams; ArtifactError if it cannot be opened."""
    run = run_ffmpeg(probe_args(path, limits.frame_pixels), path=path, limits=limits, what="probe")
    return opened(path, run.stderr)


def try_probe(path: Path, limits: MediaLimits) -> ProbeInfo | None:
    """Open ``path`` with ffmpeg and describe its streams; None if it cannot be opened."""
    run = run_ffmpeg(probe_args(path, limits.frame_pixels), path=path, limits=limits, what="probe")
    return parse_probe(run.stderr.decode("utf-8", "replace"))


def probe_declared(path: Path, limits: MediaLimits) -> ProbeInfo | None:
    """The streams as the file's headers declare them, no video frame decoded; None when ffmpeg
    cannot open it (the decode that follows reports the damage)."""
    run = run_ffmpeg(declared_args(path), path=path, limits=limits, what="probe of declared sizes")
    return parse_probe(run.stderr.decode("utf-8", "replace"))
