"""Unit tests of media.py: detection, fingerprints and loaders, with real ffmpeg and libsndfile."""

from __future__ import annotations

import hashlib
import io
import os
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from pytest_lossless import kinds, media
from pytest_lossless.core.digests import CHUNK_BYTES, block_digests, digest_frames
from pytest_lossless.errors import ArtifactError, TruncatedArtifact
from pytest_lossless.kinds.registry import FingerprintCache
from pytest_lossless.media import container
from pytest_lossless.media.container import ContainerFingerprint
from pytest_lossless.media.probe import raw_frame_bytes

pytestmark = pytest.mark.slow

OUTPUTS = Path(__file__).parent / "ffmpeg_outputs"


def ffmpeg(*args: str) -> None:
    subprocess.run(
        [media.ffmpeg_exe(), "-hide_banner", "-nostdin", "-v", "error", "-y", *args], check=True
    )


def make_clip(
    path: Path,
    *,
    seconds: float = 0.5,
    size: str = "64x48",
    rate: str = "24",
    audio: str | None = "aac",
    vcodec: tuple[str, ...] = ("libx264", "-threads", "1"),
    pix_fmt: str = "yuv420p",
) -> Path:
    args = ["-f", "lavfi", "-i", f"testsrc=size={size}:rate={rate}:duration={seconds}"]
    if audio:
        args += ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate=48000:duration={seconds}"]
    args += ["-c:v", vcodec[0], *vcodec[1:], "-pix_fmt", pix_fmt]
    if audio:
        args += ["-c:a", audio]
    ffmpeg(*args, str(path))
    return path


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("media") / "clip.mp4")


#: ffmpeg's framehash options that write each video frame's pts exactly, in the stream's own
#: time base, as the fingerprint records it (#20); without them ffmpeg writes it rounded to
#: 1 / the frame rate, as fingerprints made before recorded it.
EXACT_TIMES = ("-fps_mode", "passthrough", "-enc_time_base", "demux")


def rounded(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """A container fingerprint as made before times were exact (pts in 1 / frame rate)."""
    return ContainerFingerprint.from_json(fingerprint).with_pts_rounded().to_json()


def cli_framehash(path: Path, *extra: str) -> list[tuple[int, str]]:
    out = subprocess.run(
        [
            media.ffmpeg_exe(),
            "-hide_banner",
            "-nostdin",
            "-v",
            "error",
            "-i",
            str(path),
            *extra,
            "-f",
            "framehash",
            "-hash",
            "sha256",
            "-",
        ],
        check=True,
        capture_output=True,
    ).stdout.decode()
    rows = []
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",")]
        rows.append((int(parts[2]), parts[5]))
    return rows


# ------------------------------------------------------------------ probe text (captured)


def test_parse_probe_captured_mp4() -> None:
    info = media.parse_probe((OUTPUTS / "probe_a_mp4.txt").read_text())
    assert info is not None
    assert info.container == "mov,mp4,m4a,3gp,3g2,mj2"
    assert info.duration == pytest.approx(1.0)
    video, audio = info.streams
    assert (video.type, video.codec, video.pix_fmt, video.width, video.height) == (
        "video",
        "h264",
        "yuv420p",
        320,
        176,
    )
    assert video.time_base == "1/12288"
    assert (audio.codec, audio.sample_rate, audio.channel_layout, audio.sample_fmt) == (
        "aac",
        48000,
        "mono",
        "fltp",
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("probe_v10_mkv.txt", [("video", "ffv1", "yuv422p10le", None, "1/1000")]),
        (
            "probe_w_webm.txt",
            [("video", "vp9", "gbrp", None, "1/1000"), ("audio", "opus", None, "fltp", None)],
        ),
        (
            "probe_m_mov.txt",
            [
                ("video", "h264", "yuv444p", None, "1/12288"),
                ("audio", "pcm_s16le", None, "s16", None),
            ],
        ),
        ("probe_s24_flac.txt", [("audio", "flac", None, "s32", None)]),
        ("probe_s24_wav.txt", [("audio", "pcm_s24le", None, "s32", None)]),
        ("probe_a_m4a.txt", [("audio", "aac", None, "fltp", None)]),
        # Older layout: "(tv, bt709)" inside the pixel format, tbc, "90k tbn", a data stream.
        (
            "probe_ffmpeg4_layout.txt",
            [
                ("video", "h264", "yuv420p", None, "1/90000"),
                ("audio", "aac", None, "fltp", None),
                ("data", "none", None, None, None),
            ],
        ),
    ],
)
def test_parse_probe_captured_outputs(name: str, expected: list[tuple[object, ...]]) -> None:
    info = media.parse_probe((OUTPUTS / name).read_text())
    assert info is not None
    got = [(s.type, s.codec, s.pix_fmt, s.sample_fmt, s.time_base) for s in info.streams]
    assert got == expected


def test_parse_probe_without_input_is_none() -> None:
    assert media.parse_probe("x.mp4: Invalid data found when processing input\n") is None


def test_split_top_level_keeps_parenthesised_commas() -> None:
    assert media._split_top_level("h264 (High), yuv420p(tv, bt709), 1920x1080 [SAR 1:1, x]") == [
        "h264 (High)",
        "yuv420p(tv, bt709)",
        "1920x1080 [SAR 1:1, x]",
    ]


# ------------------------------------------------------------------ detection


def test_detect_by_content_not_extension(tmp_path: Path, clip: Path) -> None:
    disguised = tmp_path / "video.bin"
    disguised.write_bytes(clip.read_bytes())
    wav = tmp_path / "sound.dat"
    soundfile.write(wav, np.zeros((10, 1), dtype=np.int16), 8000, subtype="PCM_16", format="WAV")
    npy = tmp_path / "t.txt"
    with open(npy, "wb") as fh:
        np.save(fh, np.arange(3))
    npz = tmp_path / "t.zip"
    with open(npz, "wb") as fh:
        np.savez(fh, a=np.arange(3))
    fake = tmp_path / "not_video.mp4"
    fake.write_text("hello, I am text\n")
    flac = tmp_path / "s.bin"
    soundfile.write(flac, np.zeros((10, 1), dtype=np.int16), 8000, format="FLAC")
    assert media.detect_kind(disguised) == "video"
    assert media.detect_kind(wav) == "audio"
    assert media.detect_kind(flac) == "audio"
    assert media.detect_kind(npy) == "tensor"
    assert media.detect_kind(npz) == "tensor"
    assert media.detect_kind(fake) == "bytes"


def test_detect_audio_only_container_and_mkv(tmp_path: Path) -> None:
    m4a = tmp_path / "a.m4a"
    ffmpeg("-f", "lavfi", "-i", "sine=duration=0.2", "-c:a", "aac", str(m4a))
    mkv = make_clip(tmp_path / "v.mkv", audio=None, vcodec=("ffv1",))
    assert media.detect_kind(m4a) == "audio"
    assert media.detect_kind(mkv) == "video"


def test_detect_plain_zip_is_bytes(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("readme.txt", "hi")
    assert media.detect_kind(path) == "bytes"


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="does not exist") as info:
        media.detect_kind(tmp_path / "nope.mp4")
    assert "nope.mp4" in str(info.value)


# ------------------------------------------------------------------ video


def test_frame_digests_equal_ffmpeg_framehash_cli(clip: Path) -> None:
    fp = kinds.fingerprint("video", clip)
    video = next(s for s in fp["streams"] if s["type"] == "video")
    ours = [(f["pts"], f["sha256"]) for f in video["frames"]]
    assert ours == cli_framehash(clip, "-map", "0:v", *EXACT_TIMES)
    assert video["pts_time_base"] == "1/12288"
    then = next(s for s in rounded(fp)["streams"] if s["type"] == "video")
    assert [(f["pts"], f["sha256"]) for f in then["frames"]] == cli_framehash(clip, "-map", "0:v")
    assert video["frame_count"] == len(ours) == 12
    assert (video["codec"], video["pix_fmt"], video["width"], video["height"]) == (
        "h264",
        "yuv420p",
        64,
        48,
    )
    assert video["frame_rate"] == "24/1"
    assert video["time_base"] == "1/12288"
    assert video["duration"] == pytest.approx(0.5)
    assert fp["size"] == clip.stat().st_size
    assert fp["sha256"] == hashlib.sha256(clip.read_bytes()).hexdigest()


def test_container_audio_in_its_own_sample_format(clip: Path) -> None:
    fp = kinds.fingerprint("video", clip)
    audio = next(s for s in fp["streams"] if s["type"] == "audio")
    assert audio["sample_fmt"] == "fltp"
    assert (audio["sample_rate"], audio["channels"]) == (48000, 1)
    cli = cli_framehash(clip, "-map", "0:a", "-c:a", "pcm_f32le")
    assert [(p["pts"], p["sha256"]) for p in audio["packets"]] == cli
    # Not converted to 16-bit: the default framehash audio codec (pcm_s16le) gives other digests.
    s16 = [d for _, d in cli_framehash(clip, "-map", "0:a")]
    assert [p["sha256"] for p in audio["packets"]] != s16
    samples, rate = media.load_container_audio(clip)
    assert samples.dtype == np.dtype("<f4")
    assert rate == 48000
    assert len(samples) == audio["sample_count"]


def test_ten_bit_video_and_exact_ntsc_rate(tmp_path: Path) -> None:
    path = make_clip(
        tmp_path / "v10.mkv", rate="30000/1001", audio=None, vcodec=("ffv1",), pix_fmt="yuv422p10le"
    )
    video = kinds.fingerprint("video", path)["streams"][0]
    assert video["pix_fmt"] == "yuv422p10le"
    assert video["frame_rate"] == "30000/1001"
    exact = cli_framehash(path, "-map", "0:v", *EXACT_TIMES)
    assert [(f["pts"], f["sha256"]) for f in video["frames"]] == exact
    then = rounded(kinds.fingerprint("video", path))["streams"][0]
    assert [(f["pts"], f["sha256"]) for f in then["frames"]] == cli_framehash(path, "-map", "0:v")
    frames = media.load_video_frames(path, indices=[3])
    raw = frames[3]
    assert raw.nbytes == video["frame_bytes"] == 64 * 48 * 2 * 2
    assert hashlib.sha256(raw.tobytes()).hexdigest() == video["frames"][3]["sha256"]


def test_native_frames_hash_to_the_fingerprint(clip: Path) -> None:
    video = kinds.fingerprint("video", clip)["streams"][0]
    frames = list(media.iter_video_frames(clip))
    assert len(frames) == video["frame_count"]
    assert [hashlib.sha256(f.tobytes()).hexdigest() for f in frames] == [
        f["sha256"] for f in video["frames"]
    ]
    rgb = media.load_video_frames(clip, pix_fmt="rgb24", indices=[0])[0]
    assert rgb.shape == (48, 64, 3)
    assert rgb.dtype == np.uint8


@pytest.mark.parametrize("keep", [0.4, 0.7, 0.95])
def test_truncated_mp4_raises_not_a_shorter_video(tmp_path: Path, keep: float) -> None:
    source = make_clip(tmp_path / "fs.mp4", seconds=1.0)
    # Also with the index first, where a cut leaves a playable-looking prefix.
    faststart = tmp_path / "faststart.mp4"
    ffmpeg("-i", str(source), "-c", "copy", "-movflags", "+faststart", str(faststart))
    for original in (source, faststart):
        data = original.read_bytes()
        cut = tmp_path / f"cut_{original.name}"
        cut.write_bytes(data[: int(len(data) * keep)])
        assert media.detect_kind(cut) == "video"
        with pytest.raises(ArtifactError) as info:
            kinds.fingerprint("video", cut)
        assert str(cut) in str(info.value)


def test_corrupted_mp4_raises(tmp_path: Path) -> None:
    source = make_clip(tmp_path / "c.mp4", seconds=1.0, audio=None)
    ffmpeg("-i", str(source), "-c", "copy", "-movflags", "+faststart", str(tmp_path / "fs.mp4"))
    data = bytearray((tmp_path / "fs.mp4").read_bytes())
    # Enough damage to break the H.264 bitstream (a few flipped bits can decode silently: the
    # decoded gate catches those as changed frames, see test_gates).
    for i in range(len(data) // 2, len(data) // 2 + 1024):
        data[i] ^= 0x55
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="damaged or truncated"):
        kinds.fingerprint("video", bad)


@pytest.mark.parametrize("muxer", ["mp4", "matroska"])
@pytest.mark.parametrize("into_frame", [0, 8])
def test_a_file_that_ends_before_its_first_frame_has_no_frame(
    tmp_path: Path, muxer: str, into_frame: int
) -> None:
    """Cut where its first frame's data begins (or inside it): its stream is described, no
    frame of it decodes. That is a video of no frame (a golden with frames FAILS against it,
    naming both counts), not damage (a file damaged inside a frame still raises, above)."""
    source = make_clip(tmp_path / "c.mp4", seconds=0.5, audio=None)
    whole = tmp_path / f"whole.{muxer[:3]}"
    ffmpeg("-i", str(source), "-c", "copy", "-movflags", "+faststart", "-f", muxer, str(whole))
    data = whole.read_bytes()
    start = data.index(b"mdat") + 4 if muxer == "mp4" else data.index(b"\x1f\x43\xb6\x75") + 32
    cut = tmp_path / f"cut{whole.suffix}"
    cut.write_bytes(data[: start + into_frame])
    fingerprint = container.fingerprint_container(cut, video=True)
    (stream,) = fingerprint.video()
    assert (stream.frame_count, stream.frames) == (0, ())


# ------------------------------------------------------------------ audio files


def write_wav(
    path: Path, data: np.ndarray, rate: int = 8000, subtype: str = "PCM_16", fmt: str = "WAV"
) -> Path:
    soundfile.write(path, data, rate, subtype=subtype, format=fmt)
    return path


@pytest.mark.parametrize(
    ("subtype", "dtype", "fmt"),
    [
        ("PCM_16", "<i2", "WAV"),
        ("PCM_24", "<i4", "WAV"),
        ("PCM_32", "<i4", "WAV"),
        ("FLOAT", "<f4", "WAV"),
        ("DOUBLE", "<f8", "WAV"),
        ("PCM_24", "<i4", "FLAC"),
        ("PCM_16", "<i2", "RF64"),
    ],
)
def test_audio_fingerprint_reads_losslessly(
    tmp_path: Path, subtype: str, dtype: str, fmt: str
) -> None:
    rng = np.random.default_rng(1)
    data = rng.uniform(-0.9, 0.9, size=(2500, 2))
    path = write_wav(tmp_path / f"a.{fmt.lower()}", data, subtype=subtype, fmt=fmt)
    fp = kinds.fingerprint("audio", path)
    pcm, _rate = media.load_audio(path)
    assert fp["dtype"] == dtype
    assert pcm.dtype == np.dtype(dtype)
    assert (fp["sample_rate"], fp["channels"], fp["sample_count"], fp["subtype"]) == (
        8000,
        2,
        2500,
        subtype,
    )
    assert fp["pcm_sha256"] == hashlib.sha256(pcm.astype(dtype).tobytes()).hexdigest()
    assert len(fp["block_sha256"]) == 1  # 2500 samples at 8000 Hz: one one-second block
    assert fp["block_sha256"][0] == fp["pcm_sha256"]


def test_same_pcm_same_digest_across_wav_and_flac(tmp_path: Path) -> None:
    data = (np.arange(20000, dtype=np.int64) % 3000 - 1500).astype(np.int16).reshape(-1, 2)
    wav = write_wav(tmp_path / "a.wav", data)
    flac = write_wav(tmp_path / "a.flac", data, fmt="FLAC")
    a, b = kinds.fingerprint("audio", wav), kinds.fingerprint("audio", flac)
    assert a["pcm_sha256"] == b["pcm_sha256"]
    assert a["block_sha256"] == b["block_sha256"]
    assert len(a["block_sha256"]) == 2  # 10000 samples at 8000 Hz
    assert a["sha256"] != b["sha256"]


def test_wave_format_extensible_24_bit(tmp_path: Path) -> None:
    path = tmp_path / "x.wav"
    ffmpeg(
        "-f",
        "lavfi",
        "-i",
        "sine=duration=0.25:sample_rate=44100",
        "-ac",
        "2",
        "-c:a",
        "pcm_s24le",
        str(path),
    )
    assert path.read_bytes()[20:22] == b"\xfe\xff"  # WAVE_FORMAT_EXTENSIBLE
    fp = kinds.fingerprint("audio", path)
    assert (fp["format"], fp["subtype"], fp["dtype"], fp["channels"]) == (
        "WAVEX",
        "PCM_24",
        "<i4",
        2,
    )


def _declare_more(path: Path, extra_frames: int, block_align: int) -> None:
    """Rewrite the data chunk size so that it declares more than the file holds."""
    data = bytearray(path.read_bytes())
    pos = data.index(b"data")
    size = struct.unpack("<I", data[pos + 4 : pos + 8])[0]
    data[pos + 4 : pos + 8] = struct.pack("<I", size + extra_frames * block_align)
    path.write_bytes(bytes(data))


def test_wav_declaring_more_than_it_holds_is_truncated(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "t.wav", np.zeros((8000, 2), dtype=np.int16))
    _declare_more(path, 100, 4)
    # libsndfile itself stays silent about it:
    assert soundfile.info(str(path)).frames in (8000, 8100)
    with pytest.raises(TruncatedArtifact) as info:
        kinds.fingerprint("audio", path)
    message = str(info.value)
    assert "8100" in message
    assert "8000" in message
    assert str(path) in message


def test_wav_cut_short_is_truncated(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "t.wav", np.zeros((1000, 1), dtype=np.int16))
    path.write_bytes(path.read_bytes()[:-101])  # half a sample frame too
    with pytest.raises(TruncatedArtifact, match=r"declares 1000 samples .* holds only 949"):
        kinds.fingerprint("audio", path)
    with pytest.raises(TruncatedArtifact):
        media.load_audio(path)


def test_rf64_truncation(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "t.rf64", np.zeros((4000, 1), dtype=np.int16), fmt="RF64")
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(TruncatedArtifact, match="declares 4000 samples"):
        kinds.fingerprint("audio", path)


def test_truncated_flac_is_reported(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    path = write_wav(
        tmp_path / "t.flac", rng.integers(-3000, 3000, (20000, 1)).astype(np.int16), fmt="FLAC"
    )
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ArtifactError, match=r"t\.flac: .*damaged or truncated"):
        kinds.fingerprint("audio", path)


# ------------------------------------------------------------------ tensors


def test_npy_fingerprint_raw_c_order(tmp_path: Path) -> None:
    array = np.arange(24, dtype=">f4").reshape(2, 3, 4)
    path = tmp_path / "a.npy"
    np.save(path, array)
    fp = kinds.fingerprint("tensor", path)
    assert fp["dtype"] == ">f4"
    assert fp["shape"] == [2, 3, 4]
    assert fp["data_sha256"] == hashlib.sha256(array.tobytes()).hexdigest()
    fortran = tmp_path / "f.npy"
    np.save(fortran, np.asfortranarray(array))
    assert kinds.fingerprint("tensor", fortran)["data_sha256"] == fp["data_sha256"]


def test_npy_chunks_localise(tmp_path: Path) -> None:
    array = np.zeros(600_000, dtype=np.float32)  # 2.4 MB: three chunks
    path = tmp_path / "big.npy"
    np.save(path, array)
    fp = kinds.fingerprint("tensor", path)
    assert len(fp["chunk_sha256"]) == 3
    assert fp["chunk_elements"] == CHUNK_BYTES // 4
    # Fortran order goes through the streaming path: same digests for the same C-order bytes.
    grid = np.arange(600_000, dtype=np.float32).reshape(1000, 600)
    np.save(tmp_path / "c.npy", grid)
    np.save(tmp_path / "f.npy", np.asfortranarray(grid))
    c_fp = kinds.fingerprint("tensor", tmp_path / "c.npy")
    f_fp = kinds.fingerprint("tensor", tmp_path / "f.npy")
    for key in ("data_sha256", "chunk_sha256", "dtype", "shape", "element_count"):
        assert c_fp[key] == f_fp[key]
    assert c_fp["sha256"] != f_fp["sha256"]


def test_empty_and_scalar_arrays(tmp_path: Path) -> None:
    np.save(tmp_path / "e.npy", np.zeros((0, 3), dtype=np.float32))
    np.save(tmp_path / "s.npy", np.float64(2.5))
    empty = kinds.fingerprint("tensor", tmp_path / "e.npy")
    scalar = kinds.fingerprint("tensor", tmp_path / "s.npy")
    assert (empty["shape"], empty["element_count"]) == ([0, 3], 0)
    assert empty["data_sha256"] == hashlib.sha256(b"").hexdigest()
    assert (scalar["shape"], scalar["element_count"]) == ([], 1)
    assert scalar["data_sha256"] == hashlib.sha256(np.float64(2.5).tobytes()).hexdigest()


def test_npz_members(tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, logits=np.ones((2, 2), dtype=np.float16), ids=np.arange(5, dtype=np.int8))
    fp = kinds.fingerprint("tensor", path)
    assert set(fp["members"]) == {"logits", "ids"}
    assert fp["members"]["ids"]["dtype"] == "|i1"
    assert fp["members"]["logits"]["shape"] == [2, 2]
    loaded = media.load_tensor(path)
    assert isinstance(loaded, dict)
    assert loaded["ids"].tolist() == [0, 1, 2, 3, 4]


def test_object_arrays_are_refused_without_unpickling(tmp_path: Path) -> None:
    path = tmp_path / "o.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ArtifactError, match="pickle"):
        kinds.fingerprint("tensor", path)
    with pytest.raises(ArtifactError, match="pickle"):
        media.load_tensor(path)
    npz = tmp_path / "o.npz"
    np.savez(npz, x=np.array([None], dtype=object))
    with pytest.raises(ArtifactError, match="pickle"):
        kinds.fingerprint("tensor", npz)


def test_truncated_npy(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.zeros(100, dtype=np.float64))
    path.write_bytes(path.read_bytes()[:-80])
    with pytest.raises(TruncatedArtifact, match=r"declares 100 elements .* only 90"):
        kinds.fingerprint("tensor", path)


def test_damaged_npz(tmp_path: Path) -> None:
    path = tmp_path / "t.npz"
    np.savez(path, a=np.zeros(100))
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(ArtifactError, match=r"t\.npz: damaged \.npz archive"):
        kinds.fingerprint("tensor", path)


# ------------------------------------------------------------------ bytes


def test_bytes_fingerprint(tmp_path: Path) -> None:
    path = tmp_path / "b.bin"
    payload = bytes(range(256)) * 5000
    path.write_bytes(payload)
    fp = kinds.fingerprint("bytes", path)
    assert fp["size"] == len(payload)
    assert fp["sha256"] == hashlib.sha256(payload).hexdigest()
    assert fp["chunk_sha256"][0] == hashlib.sha256(payload[:CHUNK_BYTES]).hexdigest()
    assert len(fp["chunk_sha256"]) == 2


def test_write_png(tmp_path: Path) -> None:
    picture = np.zeros((4, 6, 3), dtype=np.uint8)
    picture[1, 2] = (255, 0, 0)
    out = media.write_png(tmp_path / "p.png", picture)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    decoded = media.load_video_frames(out, pix_fmt="rgb24")[0]
    assert decoded.shape == (4, 6, 3)
    assert decoded.tolist() == picture.tolist()  # lossless: every pixel comes back


# ------------------------------------------------------------------ the fast video fingerprint


def _run(command: str, *paths: Path) -> None:
    """ffmpeg with ``command`` (split on spaces) and then ``paths``."""
    ffmpeg(*command.split(), *map(str, paths))


def _general_way(monkeypatch: pytest.MonkeyPatch, path: Path) -> dict[str, object]:
    """The fingerprint as ffmpeg's own framehash makes it (the fast way switched off)."""
    with monkeypatch.context() as patch:
        patch.setattr(container, "_fast_fingerprint", lambda path, limits, **_: None)
        return kinds.fingerprint("video", path)


_FAST_CLIPS = {
    # B-frames (display order differs from decode order) and an AAC track, frames large enough
    # for the hashing threads (640x480 yuv420p: 460,800 bytes).
    "bframes.mp4": (
        "-f lavfi -i testsrc2=s=640x480:r=25:d=2 -f lavfi -i sine=d=2 "
        "-c:v libx264 -bf 3 -g 12 -c:a aac"
    ),
    "open_gop.mkv": (
        "-f lavfi -i testsrc2=s=176x144:r=24:d=2 -c:v libx264 -bf 3 "
        "-x264-params open-gop=1:keyint=12"
    ),
    "odd444.mp4": "-f lavfi -i testsrc2=s=321x177:r=25:d=1 -c:v libx264 -pix_fmt yuv444p",
    "deep422.mkv": "-f lavfi -i testsrc2=s=320x240:r=25:d=1 -c:v libx264 -pix_fmt yuv422p10le",
    "rgb.mkv": "-f lavfi -i testsrc2=s=160x120:r=10:d=1 -c:v libx264rgb",
    "vfr.mp4": (
        "-f lavfi -i testsrc2=s=160x120:r=25:d=2 -vf setpts='if(lt(N,20),N,N*2)/25/TB' "
        "-fps_mode vfr -c:v libx264"
    ),
    "sar.mp4": "-f lavfi -i testsrc2=s=160x120:r=25:d=1 -vf setsar=4/3 -c:v libx264",
}


@pytest.mark.parametrize("name", list(_FAST_CLIPS))
def test_fast_fingerprint_equals_ffmpeg_framehash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Raw frames hashed here, on several threads: the same fingerprint, field for field, as
    ffmpeg's own framehash (B-frames, open GOPs, odd sizes, 10-bit, RGB, VFR, non-square SAR)."""
    path = tmp_path / name
    _run(_FAST_CLIPS[name], path)
    fast = container._fast_fingerprint(path, media.MediaLimits())
    assert fast is not None, "the fast way should apply to this clip"
    assert fast.to_json() == _general_way(monkeypatch, path) == kinds.fingerprint("video", path)
    # Frames dealt out over three pipes (as on a machine of twelve cores or more): the same.
    assert container._fast_fingerprint(path, media.MediaLimits(), stripes=3) == fast
    video = fast.video()[0]
    exact = cli_framehash(path, "-map", "0:v", *EXACT_TIMES)
    assert [(f.pts, f.sha256) for f in video.frames] == exact
    # Rounded as ffmpeg rounds them into 1 / the frame rate: the pts fingerprints made before
    # recorded (B-frames, VFR, 10-bit, ...), so a golden made then passes the unchanged clip.
    then = fast.with_pts_rounded().video()[0]
    assert [(f.pts, f.sha256) for f in then.frames] == cli_framehash(path, "-map", "0:v")


def test_fast_fingerprint_steps_aside_where_it_cannot_vouch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two video streams, or rotated 4:2:2 frames of an odd width (the size is not the one
    announced): the general way answers, with the same fingerprint as before."""
    two = tmp_path / "two.mkv"
    _run(
        "-f lavfi -i testsrc2=s=160x120:r=10:d=1 -f lavfi -i testsrc=s=96x64:r=15:d=1 "
        "-f lavfi -i sine=d=1 -map 0 -map 1 -map 2 -c:v libx264 -c:a pcm_s16le",
        two,
    )
    base = tmp_path / "base422.mp4"
    _run("-f lavfi -i testsrc2=s=322x176:r=24:d=1 -c:v libx264 -pix_fmt yuv422p", base)
    rotated = tmp_path / "rot.mp4"
    ffmpeg("-display_rotation:v", "90", "-i", str(base), "-c", "copy", str(rotated))
    for path in (two, rotated):
        assert container._fast_fingerprint(path, media.MediaLimits()) is None
        assert kinds.fingerprint("video", path) == _general_way(monkeypatch, path)
    assert len(kinds.fingerprint("video", two)["streams"]) == 3


def test_fast_fingerprint_keeps_the_decode_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raw frames read here are counted like framehash lines: past the limit the decode stops
    (a raw MJPEG stream declares no duration, so only the count can stop it)."""
    path = tmp_path / "big.mjpeg"
    _run("-f lavfi -i testsrc2=s=640x480:r=25:d=2 -c:v mjpeg -f mjpeg", path)
    monkeypatch.setenv("PYTEST_LOSSLESS_DECODE_LIMIT", "4MiB")
    for stripes in (1, 2):
        with pytest.raises(media.DecodeLimitExceeded, match=r"produced more than the 4\.0 MiB"):
            container._fast_fingerprint(path, media.MediaLimits.from_env(), stripes=stripes)


@pytest.mark.parametrize(
    "pix_fmt",
    [
        "yuv420p",
        "yuv422p",
        "yuv444p",
        "yuv410p",
        "yuv411p",
        "yuv440p",
        "nv12",
        "gray",
        "gray10le",
        "yuv420p10le",
        "yuva420p",
        "gbrp",
        "gbrap12le",
        "p010le",
        "rgb24",
        "bgra",
    ],
)
def test_raw_frame_bytes_is_what_ffmpeg_writes(pix_fmt: str) -> None:
    """The table of raw frame sizes, checked against ffmpeg's rawvideo at an odd size."""
    source = ["-f", "lavfi", "-i", "testsrc2=s=64x64:r=1:d=1", "-vf", "scale=33:17"]
    output = ["-frames:v", "1", "-pix_fmt", pix_fmt, "-f", "rawvideo", "-"]
    out = subprocess.run(
        [media.ffmpeg_exe(), "-v", "error", *source, *output], check=True, capture_output=True
    ).stdout
    assert raw_frame_bytes(pix_fmt, 33, 17) == len(out)


def test_raw_frame_bytes_of_an_unknown_format_is_none() -> None:
    assert raw_frame_bytes("pal8", 16, 16) is None
    assert raw_frame_bytes(None, 16, 16) is None
    assert raw_frame_bytes("yuv420p", 0, 16) is None


@pytest.mark.parametrize("threads", [0, 1, 3])
@pytest.mark.parametrize("frame_bytes", [1000, 300_000])
def test_digest_frames_hashes_each_frame_in_order(threads: int, frame_bytes: int) -> None:
    rng = np.random.default_rng(threads)
    payload = rng.integers(0, 256, size=frame_bytes * 7 + 5, dtype=np.uint8).tobytes()
    stream = io.BytesIO(payload)
    seen: list[int] = []
    digests, left = digest_frames(
        lambda view: stream.readinto(view), frame_bytes, threads=threads, on_frame=seen.append
    )
    assert digests == [
        hashlib.sha256(payload[i : i + frame_bytes]).hexdigest()
        for i in range(0, 7 * frame_bytes, frame_bytes)
    ]
    assert left == 5
    assert seen == [frame_bytes] * 7


@pytest.mark.parametrize("threads", [0, 2])
def test_digest_frames_stops_when_the_budget_says_so(threads: int) -> None:
    stream = io.BytesIO(bytes(300_000 * 10))

    def budget(size: int) -> None:
        if stream.tell() > 300_000 * 3:
            raise media.DecodeLimitExceeded("x", "over", declared=1, allowed=0, limit="", unit="")

    with pytest.raises(media.DecodeLimitExceeded):
        digest_frames(lambda view: stream.readinto(view), 300_000, threads=threads, on_frame=budget)
    assert stream.tell() < 300_000 * 10


def test_bytes_fingerprint_in_parallel_blocks(tmp_path: Path) -> None:
    path = tmp_path / "b.bin"
    payload = np.random.default_rng(1).integers(0, 256, 37 * CHUNK_BYTES + 3, np.uint8)
    path.write_bytes(payload.tobytes())
    fp = kinds.fingerprint("bytes", path)
    data = payload.tobytes()
    assert fp["sha256"] == hashlib.sha256(data).hexdigest()
    step = CHUNK_BYTES
    assert fp["chunk_sha256"] == [
        hashlib.sha256(data[i : i + step]).hexdigest() for i in range(0, len(data), step)
    ]
    assert block_digests(memoryview(data), step, threads=4) == fp["chunk_sha256"]
    (tmp_path / "empty").write_bytes(b"")
    empty = kinds.fingerprint("bytes", tmp_path / "empty")
    assert (empty["size"], empty["chunk_sha256"]) == (0, [])
    assert empty["sha256"] == hashlib.sha256(b"").hexdigest()


# ------------------------------------------------------------------ a session's fingerprints


def test_fingerprint_cache_decodes_an_unchanged_file_once(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    cache = FingerprintCache()
    calls: list[int] = []

    def compute() -> dict[str, object]:
        calls.append(1)
        return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "frames": [1]}

    first = cache.fingerprint("bytes", path, compute)
    again = cache.fingerprint("bytes", path, compute)
    assert first == again
    assert (len(calls), cache.hits) == (1, 1)
    again["frames"].append(2)  # type: ignore[attr-defined]
    assert cache.fingerprint("bytes", path, compute)["frames"] == [1]  # callers get copies
    cache.fingerprint("video", path, compute)  # another kind
    cache.fingerprint("bytes", path, compute, key="tight")  # other limits
    assert len(calls) == 3


def test_fingerprint_cache_sees_a_rewrite_with_the_same_size_and_mtime(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    cache = FingerprintCache()

    def compute() -> dict[str, object]:
        return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}

    before = cache.fingerprint("bytes", path, compute)
    st = path.stat()
    path.write_bytes(b"two")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back; ctime moves on
    assert cache.fingerprint("bytes", path, compute) != before
    replaced = tmp_path / "b.bin"
    replaced.write_bytes(b"six")
    os.replace(replaced, path)  # another inode
    assert cache.fingerprint("bytes", path, compute)["sha256"] == hashlib.sha256(b"six").hexdigest()


def test_fingerprint_cache_keeps_nothing_written_while_it_was_computed(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    cache = FingerprintCache()
    count = 0

    def compute_while_written() -> dict[str, object]:
        nonlocal count
        count += 1
        result = {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        path.write_bytes(b"one more")
        return result

    cache.fingerprint("bytes", path, compute_while_written)
    cache.fingerprint("bytes", path, lambda: {"sha256": "fresh"})
    assert (count, cache.hits) == (1, 0)
    assert cache.fingerprint("bytes", tmp_path / "missing", lambda: {"x": 1}) == {"x": 1}
