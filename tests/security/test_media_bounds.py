"""Bounded work on untrusted media (issue #11, Build item 5, the media parts).

Goldens arrive in pull requests and outputs come from the code under test, so a file may be
built to make a test decode without bound: an ``.npz`` member that inflates a thousandfold or
declares gigabytes, a video declaring 16000x16000 frames, a file that stalls ffmpeg. Each bomb
here is small on disk, and the limit must be hit before the work starts: the tests check the
time taken and, where Python allocates, the peak memory (tracemalloc sees numpy's buffers).
"""

from __future__ import annotations

import io
import stat
import struct
import subprocess
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import pytest

from pytest_lossless import kinds, media
from pytest_lossless.errors import ArtifactError, ConfigError, TruncatedArtifact
from pytest_lossless.kinds.registry import KindRegistry, builtin_kinds
from pytest_lossless.settings import resolve

MIB = 1 << 20

# ------------------------------------------------------------------ helpers


def _ffmpeg(*args: str) -> None:
    subprocess.run(
        [media.ffmpeg_exe(), "-hide_banner", "-nostdin", "-v", "error", "-y", *args], check=True
    )


def _npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    out = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue()


def _npz(
    path: Path,
    name: str,
    body: bytes | Callable[[IO[bytes]], None],
    compression: int = zipfile.ZIP_DEFLATED,
    *,
    zip64: bool = True,
) -> Path:
    """An ``.npz`` of one member: raw bytes, or written by ``body`` into the open member."""
    with (
        zipfile.ZipFile(path, "w", compression=compression) as zf,
        zf.open(f"{name}.npy", "w", force_zip64=zip64) as member,
    ):
        if callable(body):
            body(member)
        else:
            member.write(body)
    return path


def _measured(call: Callable[[], object]) -> tuple[BaseException | None, float, int]:
    """Run ``call``: the exception it raised (if any), the seconds and the peak bytes it took."""
    tracemalloc.start()
    start = time.monotonic()
    error: BaseException | None = None
    try:
        call()
    except Exception as exc:
        error = exc
    elapsed = time.monotonic() - start
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return error, elapsed, peak


def _patched_mjpeg(path: Path, width: int, height: int) -> Path:
    """An 8 KB AVI of ten 64x64 MJPEG frames whose headers (AVI and every JPEG frame) declare
    ``width`` x ``height``: a frame-size bomb made without encoding a large frame."""
    small = path.with_suffix(".small.avi")
    _ffmpeg("-f", "lavfi", "-i", "color=black:s=64x64:d=2:r=5", "-c:v", "mjpeg", str(small))
    data = small.read_bytes()
    sof = b"\xff\xc0\x00\x11\x08"
    data = data.replace(sof + struct.pack(">HH", 64, 64), sof + struct.pack(">HH", height, width))
    data = data.replace(struct.pack("<II", 64, 64), struct.pack("<II", width, height))
    path.write_bytes(data)
    return path


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    """A real 64x48 clip, 12 frames at 24 fps, with a mono AAC track."""
    path = tmp_path / "clip.mp4"
    _ffmpeg(
        *("-f", "lavfi", "-i", "testsrc=s=64x48:d=0.5:r=24"),
        *("-f", "lavfi", "-i", "sine=d=0.5"),
        *("-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path)),
    )
    return path


# ------------------------------------------------------------------ .npz and .npy


def test_npz_member_declaring_gigabytes_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A 300-byte .npz whose member's .npy header declares 2 GiB of float64."""
    path = _npz(tmp_path / "bomb.npz", "x", _npy_header((1 << 28,)) + bytes(64))
    assert path.stat().st_size < 1000
    for call in (lambda: kinds.fingerprint("tensor", path), lambda: media.load_tensor(path)):
        error, elapsed, peak = _measured(call)
        assert isinstance(error, ArtifactError), error
        text = str(error)
        assert str(path) in text
        assert "member 'x'" in text
        assert "2147483648 bytes" in text
        assert "allowed" in text
        assert "1000x" in text  # the bound derived from the compressed size
        assert elapsed < 2
        assert peak < 16 * MIB


def test_deflate_bomb_is_refused_by_its_zip_header(tmp_path: Path) -> None:
    """A real deflate bomb, scaled down: 96 MiB of zeros in 100 KB, inflating more than 1000x."""

    def zeros(member: IO[bytes]) -> None:
        member.write(_npy_header((12 * MIB,)))
        for _ in range(96):
            member.write(bytes(MIB))

    path = _npz(tmp_path / "bomb.npz", "x", zeros)
    assert path.stat().st_size < 200_000
    for call in (lambda: media.load_tensor(path), lambda: kinds.fingerprint("tensor", path)):
        error, elapsed, peak = _measured(call)
        assert isinstance(error, ArtifactError), error
        assert "member 'x.npy' declares in its zip header" in str(error)
        assert isinstance(error, media.DecodeLimitExceeded)
        assert error.declared > error.allowed
        assert elapsed < 2
        assert peak < 16 * MIB


def test_npz_zip_header_that_lies_about_the_size_is_refused(tmp_path: Path) -> None:
    """The central directory declares 4 GiB for a member that holds 8 bytes of data."""
    path = _npz(tmp_path / "lie.npz", "x", _npy_header((1,)) + bytes(8), zip64=False)
    data = bytearray(path.read_bytes())
    entry = data.rindex(b"PK\x01\x02")  # the central directory entry of the one member
    struct.pack_into("<I", data, entry + 24, 0xFFFFFF00)  # its uncompressed size
    path.write_bytes(bytes(data))
    for call in (lambda: kinds.fingerprint("tensor", path), lambda: media.load_tensor(path)):
        error, elapsed, _peak = _measured(call)
        assert isinstance(error, ArtifactError), error
        assert "zip header" in str(error)
        assert "(4294967040 bytes)" in str(error)
        assert elapsed < 2


def test_npz_member_in_another_compression_is_refused(tmp_path: Path) -> None:
    """bzip2 and lzma decompress a whole read at once, beyond any bound; numpy writes neither."""
    path = _npz(tmp_path / "bz.npz", "x", _npy_header((4,)) + bytes(32), zipfile.ZIP_BZIP2)
    for call in (lambda: kinds.fingerprint("tensor", path), lambda: media.load_tensor(path)):
        with pytest.raises(ArtifactError, match=r"member 'x.npy' is compressed with method 12"):
            call()


def test_honest_npz_within_the_bounds_still_loads(tmp_path: Path) -> None:
    """Compressible arrays under the floor, and ordinary data, are untouched by the limits."""
    path = tmp_path / "ok.npz"
    noise = np.random.default_rng(0).standard_normal(1000)
    np.savez_compressed(path, zeros=np.zeros(4 * MIB // 8), noise=noise)
    fp = kinds.fingerprint("tensor", path)
    assert sorted(fp["members"]) == ["noise", "zeros"]
    loaded = media.load_tensor(path)
    assert isinstance(loaded, dict)
    assert loaded["noise"].tolist() == noise.tolist()


@pytest.mark.parametrize("shape", [(1 << 40,), (1 << 32, 1 << 32), (1 << 62, 4)])
def test_npy_declaring_more_than_the_file_holds_is_truncated(
    tmp_path: Path, shape: tuple[int, ...]
) -> None:
    """Shapes whose element count overflows 64 bits included: never zero elements."""
    path = tmp_path / "big.npy"
    path.write_bytes(_npy_header(shape) + bytes(64))
    declared = str(np.prod(np.array(shape, dtype=object)))
    for call in (lambda: kinds.fingerprint("tensor", path), lambda: media.load_tensor(path)):
        with pytest.raises(TruncatedArtifact, match=f"declares {declared} elements"):
            call()


def test_audio_loaded_in_memory_is_bounded_by_its_expansion(tmp_path: Path) -> None:
    """FLAC silence inflates far: loading it in memory is refused, and the decoded gate then
    locates a difference per block (from the fingerprints) instead of loading the PCM."""
    import soundfile as sf

    from pytest_lossless import gates
    from pytest_lossless.kinds.audio import compare_audio_file

    pcm = np.zeros((48_000 * 10, 1), dtype=np.int16)
    sf.write(tmp_path / "a.flac", pcm, 48_000, subtype="PCM_16")
    pcm[123_456] = 7
    sf.write(tmp_path / "b.flac", pcm, 48_000, subtype="PCM_16")
    stored = (tmp_path / "a.flac").stat().st_size
    tight = media.MediaLimits(expansion=10, expansion_floor=64 << 10)
    assert 10 * stored < pcm.nbytes
    with pytest.raises(media.DecodeLimitExceeded, match="to load in memory") as info:
        media.load_audio(tmp_path / "a.flac", limits=tight)
    assert info.value.declared == pcm.nbytes
    assert "np.savez or np.save, WAV" in str(info.value)
    registry = KindRegistry()
    expected = registry.artifact("a.flac", tmp_path / "a.flac")
    obtained = registry.artifact("a.flac", tmp_path / "b.flac")
    gate = gates.parse_gate("decoded")
    assert gate is not None
    result = compare_audio_file(gate, expected, obtained, "audio", limits=tight)
    assert not result.passed
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("within samples [96000, 144000)")
    assert any("PCM not loaded" in note for note in result.notes)
    exact = compare_audio_file(gate, expected, obtained, "audio")
    assert exact.first_mismatch is not None
    assert exact.first_mismatch.startswith("123456 (channel 0")


# ------------------------------------------------------------------ video


@pytest.mark.slow
def test_video_declaring_huge_frames_is_refused_before_decoding(tmp_path: Path) -> None:
    """An 8 KB AVI declaring 16000x16000 frames (the review's was a 752 KB MP4, 24 s, 9.3 GB)."""
    path = _patched_mjpeg(tmp_path / "bomb.avi", 16000, 16000)
    assert path.stat().st_size < 20_000
    registry = KindRegistry()
    for call in (
        lambda: kinds.fingerprint("video", path),
        lambda: registry.artifact("bomb.avi", path),
    ):
        start = time.monotonic()
        with pytest.raises(ArtifactError) as info:
            call()
        assert time.monotonic() - start < 5
        text = str(info.value)
        assert str(path) in text
        assert "16000x16000" in text
        assert "256000000 pixels" in text
        assert "67108864 pixels allowed" in text
        assert "frame-size limit" in text
        assert "before anything is decoded" in text


@pytest.mark.slow
def test_obtained_video_may_not_decode_much_more_than_its_golden(
    tmp_path: Path, clip: Path
) -> None:
    """Within the absolute limits (4000x4000), yet far larger than its 64x48 golden."""
    golden = kinds.fingerprint("video", clip)
    registry = KindRegistry()
    assert registry.artifact("clip.mp4", clip, golden=golden).fingerprint == golden
    bomb = _patched_mjpeg(tmp_path / "big.avi", 4000, 4000)
    with pytest.raises(ArtifactError) as info:
        registry.artifact("clip.mp4", bomb, golden=golden)
    text = str(info.value)
    assert "4000x4000" in text
    assert "its golden's 64x48 frames" in text
    assert "--update-goldens" in text
    assert isinstance(info.value, media.DecodeLimitExceeded)
    assert info.value.declared == 16_000_000
    assert info.value.allowed == 1920 * 1088


@pytest.mark.slow
def test_declared_decoded_size_over_the_decode_limit_is_refused(
    monkeypatch: pytest.MonkeyPatch, clip: Path
) -> None:
    """12 frames of 64x48 and 0.5 s of audio declare at least 58 KB: over a 16 KiB limit."""
    monkeypatch.setenv("PYTEST_LOSSLESS_DECODE_LIMIT", "16KiB")
    with pytest.raises(ArtifactError) as info:
        kinds.fingerprint("video", clip)
    text = str(info.value)
    assert "s, which decode to at least" in text
    assert "16.0 KiB (16384 bytes) allowed" in text
    assert "--lossless-decode-limit" in text
    assert isinstance(info.value, media.DecodeLimitExceeded)
    assert info.value.declared > 50_000


@pytest.mark.slow
def test_decode_without_a_declared_duration_is_counted_and_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A raw MJPEG stream declares no duration: its decode is counted as it runs."""
    path = tmp_path / "raw.mjpeg"
    _ffmpeg(
        "-f", "lavfi", "-i", "testsrc=s=64x64:d=4:r=25", "-c:v", "mjpeg", "-f", "mjpeg", f"{path}"
    )
    assert media.fingerprint_container(path).streams[0].frame_count == 100
    monkeypatch.setenv("PYTEST_LOSSLESS_DECODE_LIMIT", "100000")
    with pytest.raises(ArtifactError, match=r"produced more than the 97\.7 KiB"):
        media.fingerprint_container(path)
    with pytest.raises(ArtifactError, match=r"produced more than the 97\.7 KiB"):
        list(media.iter_video_frames(path))


# ------------------------------------------------------------------ the ffmpeg time limit


@pytest.fixture
def stalling_ffmpeg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """``stall(word)``: from now on ffmpeg (through IMAGEIO_FFMPEG_EXE) is a wrapper that runs
    the real one, except for a command line holding ``word``, where it starts a sleeping child
    (its pid in the returned file) and waits: a decoder that never finishes."""
    real = media.ffmpeg_exe()
    wrapper = tmp_path / "ffmpeg-wrapper"

    def stall(word: str) -> Path:
        pidfile = tmp_path / "sleeper.pid"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'case " $* " in *" {word} "*) sleep 30 & echo $! > "{pidfile}"; wait ;;\n'
            f'*) exec "{real}" "$@" ;; esac\n'
        )
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(wrapper))
        monkeypatch.setenv("PYTEST_LOSSLESS_FFMPEG_TIMEOUT", "0.5")
        return pidfile

    return stall


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _png(path: Path) -> object:
    return media.write_png(path.with_suffix(".png"), np.zeros((4, 4, 3), np.uint8))


#: Each ffmpeg call, by the name its time-limit error gives it: the word of its command line
#: the wrapper stalls on, and a call that makes it.
_CALLS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "probe of declared sizes": ("-skip_frame", lambda p: kinds.fingerprint("video", p)),
    "framehash decode": ("framehash", lambda p: kinds.fingerprint("video", p)),
    "probe": ("-i", media.detect_kind),
    "audio decode": ("data", media.load_container_audio),
    "first-frame decode": ("-frames:v", lambda p: list(media.iter_video_frames(p))),
    "raw frame decode": ("rawvideo", lambda p: list(media.iter_video_frames(p, frame_bytes=4608))),
    "PNG encode": ("rgb24", _png),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", list(_CALLS))
def test_every_ffmpeg_call_has_a_time_limit(
    clip: Path, stalling_ffmpeg: Callable[[str], Path], what: str
) -> None:
    word, call = _CALLS[what]
    pidfile = stalling_ffmpeg(word)
    start = time.monotonic()
    with pytest.raises(ArtifactError) as info:
        call(clip)
    assert time.monotonic() - start < 5
    text = str(info.value)
    assert isinstance(info.value, media.FFmpegTimeout)
    assert info.value.timeout == 0.5
    assert f"ffmpeg ({what}) did not finish within 0.5 s" in text
    assert "--lossless-ffmpeg-timeout" in text
    target = clip.with_suffix(".png") if what == "PNG encode" else clip
    assert str(target) in text
    # The whole process group was killed: the wrapper's sleeping child too.
    sleeper = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(sleeper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(sleeper)


def test_limits_are_settings_that_reach_the_built_in_kinds(tmp_path: Path) -> None:
    settings = resolve({"ffmpeg_timeout": "2.5", "decode_limit": "1GiB"}, {}, {}, rootdir=tmp_path)
    assert (settings.ffmpeg_timeout, settings.decode_limit) == (2.5, 1 << 30)
    for kind in builtin_kinds(settings):
        assert kind.limits().ffmpeg_timeout == 2.5
        assert kind.limits().decode_limit == 1 << 30
    defaults = resolve({}, {}, {}, rootdir=tmp_path)
    assert (defaults.ffmpeg_timeout, defaults.decode_limit) == (600.0, 64 << 30)
    env = resolve({}, {}, {"PYTEST_LOSSLESS_FFMPEG_TIMEOUT": "2m"}, rootdir=tmp_path)
    assert env.ffmpeg_timeout == 120.0
    assert env.sources["ffmpeg_timeout"].startswith("environ")
    ini = resolve({}, {"ffmpeg_timeout": "90", "decode_limit": "2GiB"}, {}, rootdir=tmp_path)
    assert (ini.ffmpeg_timeout, ini.decode_limit) == (90.0, 2 << 30)
    for bad in ({"ffmpeg_timeout": "0"}, {"decode_limit": "0"}, {"decode_limit": "lots"}):
        with pytest.raises(ConfigError):
            resolve(bad, {}, {}, rootdir=tmp_path)
    assert media.MediaLimits.from_env({"PYTEST_LOSSLESS_DECODE_LIMIT": "3MiB"}).decode_limit == (
        3 << 20
    )
    with pytest.raises(ConfigError, match="PYTEST_LOSSLESS_FFMPEG_TIMEOUT"):
        media.MediaLimits.from_env({"PYTEST_LOSSLESS_FFMPEG_TIMEOUT": "soon"})


GOLDEN_TEST = """
from pathlib import Path

import pytest

@pytest.mark.lossless
def test_clip(golden):
    golden.check("clip.mp4", Path(__file__).parent / "clip.mp4")
"""


@pytest.mark.slow
def test_the_ffmpeg_time_limit_reaches_a_golden_check(
    pytester: pytest.Pytester,
    clip: Path,
    stalling_ffmpeg: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--lossless-ffmpeg-timeout`` through the plugin: a stalled decode is a clear failure."""
    (pytester.path / "clip.mp4").write_bytes(clip.read_bytes())
    pytester.makepyfile(test_clip=GOLDEN_TEST)
    stalling_ffmpeg("framehash")
    monkeypatch.delenv("PYTEST_LOSSLESS_FFMPEG_TIMEOUT")  # the option, not the environment
    start = time.monotonic()
    result = pytester.runpytest_subprocess("--update-goldens", "--lossless-ffmpeg-timeout=0.5")
    assert time.monotonic() - start < 60
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ffmpeg (framehash decode) did not finish within 0.5 s*"])
    assert not (pytester.path / "goldens").exists() or not any(
        (pytester.path / "goldens").rglob("clip.mp4")
    )
