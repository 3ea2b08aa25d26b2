"""Unit and property tests of gates.py: every gate can fail, and says where."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_lossless import media
from pytest_lossless.errors import LosslessError
from pytest_lossless.gates import Gate, GateResult, parse_gate, tolerance
from pytest_lossless.kinds.registry import Artifact, KindRegistry, builtin_kinds
from pytest_lossless.media.container import ContainerFingerprint

PROPERTY = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def ffmpeg(*args: str) -> None:
    subprocess.run(
        [media.ffmpeg_exe(), "-hide_banner", "-nostdin", "-v", "error", "-y", *args], check=True
    )


def encode(
    path: Path,
    *,
    vf: str = "null",
    seconds: float = 0.5,
    audio_wav: Path | None = None,
    audio_codec: str = "pcm_s16le",
    container_args: tuple[str, ...] = (),
) -> Path:
    """A small lossless H.264 clip from testsrc (one thread: deterministic), optional audio."""
    args = ["-f", "lavfi", "-i", f"testsrc=size=64x48:rate=24:duration={seconds}"]
    if audio_wav is not None:
        args += ["-i", str(audio_wav), "-map", "0:v", "-map", "1:a", "-c:a", audio_codec]
    args += [
        "-vf",
        vf,
        "-c:v",
        "libx264",
        "-threads",
        "1",
        "-qp",
        "0",
        "-pix_fmt",
        "yuv420p",
        *container_args,
    ]
    ffmpeg(*args, str(path))
    return path


@pytest.fixture
def registry(kinds: KindRegistry) -> KindRegistry:
    return kinds


def art(
    registry: KindRegistry, path: Path, name: str = "out", *, digest_only: bool = False
) -> Artifact:
    found = registry.artifact(name, path)
    if digest_only:
        return Artifact(found.name, found.kind, found.fingerprint, None)
    return found


# ------------------------------------------------------------------ Gate and parsing


def test_gate_specs_and_lossless_flag() -> None:
    assert Gate("bytes").spec == "bytes"
    assert Gate("decoded").lossless
    assert tolerance(atol=1e-5).spec == "tolerance(atol=1e-05, rtol=0)"
    assert tolerance(atol=2, rtol=0.5).spec == "tolerance(atol=2, rtol=0.5)"
    assert not tolerance().lossless
    assert str(Gate("elementwise")) == "elementwise"


@pytest.mark.parametrize(
    "gate",
    [
        Gate("bytes"),
        Gate("decoded"),
        Gate("elementwise"),
        tolerance(atol=1e-5),
        tolerance(atol=0.25, rtol=1e-3),
        tolerance(),
    ],
)
def test_parse_gate_round_trips_spec(gate: Gate) -> None:
    assert parse_gate(gate.spec) == gate
    assert parse_gate(gate) is gate


def test_parse_gate_forms() -> None:
    assert parse_gate(None) is None
    assert parse_gate(" decoded ") == Gate("decoded")
    assert parse_gate("tolerance(rtol=1e-3)") == tolerance(rtol=1e-3)
    assert parse_gate("tolerance") == tolerance()


@pytest.mark.parametrize(
    "bad",
    [
        "exact",
        "tolerance(1e-5)",
        "tolerance(atol=x)",
        "tolerance(btol=1)",
        "tolerance(atol=1, atol=2)",
        "tolerance(atol=-1)",
        "tolerance(atol=nan)",
        "tolerance(atol=inf)",
    ],
)
def test_parse_gate_refuses(bad: str) -> None:
    with pytest.raises(LosslessError):
        parse_gate(bad)


def test_exact_gates_take_no_tolerance() -> None:
    with pytest.raises(LosslessError, match="exact"):
        Gate("decoded", atol=1.0)
    with pytest.raises(LosslessError, match="unknown gate"):
        Gate("fuzzy")


@pytest.mark.parametrize(
    ("kind", "gate"),
    [
        ("video", "elementwise"),
        ("audio", "elementwise"),
        ("tensor", "decoded"),
        ("bytes", "decoded"),
        ("bytes", "tolerance(atol=1)"),
    ],
)
def test_invalid_gate_for_kind(kind: str, gate: str) -> None:
    parsed = parse_gate(gate)
    assert parsed is not None
    with pytest.raises(LosslessError, match=f"does not apply to the {kind} artifact 'x'"):
        {k.name: k for k in builtin_kinds()}[kind].check_gate(parsed, "x")


def test_gate_result_round_trip_and_message() -> None:
    result = GateResult(
        artifact="video",
        kind="video",
        gate="decoded",
        lossless=True,
        passed=False,
        metadata_diffs=["frame count: expected 24, obtained 23"],
        unit="frame",
        first_mismatch="7 (pts 7 = 0.291667 s): pixels differ",
        mismatch_count=3,
        total=24,
        diagnostics={"frame_psnr_db": 41.5},
        diagnostic_files=["/x/video.frame7.diff.png"],
    )
    again = GateResult.from_dict(result.to_dict())
    assert again == result
    text = result.message()
    lines = text.splitlines()
    assert "'video'" in lines[0]
    assert "decoded" in lines[0]
    assert "FAIL" in lines[0]
    assert text.index("frame count") < text.index("first differing frame: 7")
    assert "differing frames: 3 of 24" in text
    assert "diagnostics (not gates): frame_psnr_db=41.5" in text
    assert "/x/video.frame7.diff.png" in text
    with pytest.raises(LosslessError):
        GateResult.from_dict({"artifact": "x"})


# ------------------------------------------------------------------ video


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("clips")
    rate = 8000
    t = np.arange(rate // 2)
    pcm = (np.sin(t * 0.05) * 8000).astype(np.int16)[:, None]
    soundfile.write(folder / "a.wav", pcm, rate, subtype="PCM_16")
    changed = pcm.copy()
    changed[1234, 0] += 1
    soundfile.write(folder / "a1.wav", changed, rate, subtype="PCM_16")
    pixel = "drawbox=x=10:y=10:w=1:h=1:color=red:t=fill:enable='eq(n,5)'"
    return {
        "ref": encode(folder / "ref.mp4"),
        "again": encode(folder / "again.mp4"),
        "pixel": encode(folder / "pixel.mp4", vf=pixel),
        "short": encode(folder / "short.mp4", vf="trim=end_frame=11"),
        "av": encode(folder / "av.mkv", audio_wav=folder / "a.wav"),
        "av1": encode(folder / "av1.mkv", audio_wav=folder / "a1.wav"),
        "av_mov": encode(folder / "av.mov", audio_wav=folder / "a.wav"),
    }


def test_identical_reencode_passes(registry: KindRegistry, clips: dict[str, Path]) -> None:
    result = registry.compare(
        "decoded", art(registry, clips["ref"], "video"), art(registry, clips["again"], "video")
    )
    assert result.passed, result.message()
    assert result.lossless
    assert result.mismatch_count == 0
    assert result.total == 12
    assert "PASS" in result.message()


def test_one_pixel_of_one_frame_is_caught_and_named(
    registry: KindRegistry, clips: dict[str, Path], tmp_path: Path
) -> None:
    expected = art(registry, clips["ref"], "video")
    obtained = art(registry, clips["pixel"], "video")
    result = registry.compare(Gate("decoded"), expected, obtained, diagnostics_dir=tmp_path)
    assert not result.passed
    assert result.unit == "frame"
    assert result.first_mismatch is not None
    # pts in the stream's own time base, 1/12288 (#20: exact, no longer in 1/24 units)
    assert result.first_mismatch.startswith("5 (pts 2560 = 0.208333 s): pixels differ")
    assert result.mismatch_count == 1
    assert result.total == 12
    assert result.location["frame"] == 5
    assert result.diagnostics["frame_differing_samples"] > 0
    assert result.diagnostics["frame_psnr_db"] > 20
    assert len(result.diagnostic_files) == 3
    for name in result.diagnostic_files:
        assert Path(name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert Path(name).parent == tmp_path
    message = result.message()
    assert "first differing frame: 5" in message
    assert "differing frames: 1 of 12" in message
    assert "video.frame5.diff.png" in message


def test_digest_only_golden_still_names_the_frame(
    registry: KindRegistry, clips: dict[str, Path], tmp_path: Path
) -> None:
    expected = art(registry, clips["ref"], "video", digest_only=True)
    obtained = art(registry, clips["pixel"], "video")
    result = registry.compare("decoded", expected, obtained, diagnostics_dir=tmp_path)
    assert not result.passed
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("5 ")
    assert result.diagnostic_files == []
    assert list(tmp_path.iterdir()) == []
    assert "expected side is kept as digests only" in result.message()


def test_missing_frame_is_metadata_first(registry: KindRegistry, clips: dict[str, Path]) -> None:
    result = registry.compare(
        "decoded", art(registry, clips["ref"], "video"), art(registry, clips["short"], "video")
    )
    assert not result.passed
    assert result.metadata_diffs[0] == "frame count: expected 12, obtained 11"
    assert any(d.startswith("duration") for d in result.metadata_diffs)
    assert result.first_mismatch is not None
    assert "present in expected only" in result.first_mismatch
    assert result.message().index("frame count") < result.message().index("first differing")


def test_audio_sample_inside_video_is_caught(
    registry: KindRegistry, clips: dict[str, Path]
) -> None:
    expected = art(registry, clips["av"], "video")
    audio = expected.fingerprint["streams"][1]
    assert (audio["sample_fmt"], audio["sample_count"]) == ("s16", 4000)
    result = registry.compare("decoded", expected, art(registry, clips["av1"], "video"))
    assert not result.passed
    assert result.unit == "sample"
    assert result.first_mismatch is not None
    assert "audio stream 0: 1234 (channel 0" in result.first_mismatch
    assert result.mismatch_count == 1
    digest_only = registry.compare(
        "decoded",
        art(registry, clips["av"], "video", digest_only=True),
        art(registry, clips["av1"], "video"),
    )
    assert not digest_only.passed
    assert digest_only.first_mismatch is not None
    assert "within samples [" in digest_only.first_mismatch


def test_remux_passes_decoded_but_fails_bytes(
    registry: KindRegistry, clips: dict[str, Path], tmp_path: Path
) -> None:
    mov = tmp_path / "ref.mov"
    ffmpeg("-i", str(clips["ref"]), "-c", "copy", str(mov))
    mp4_art, mov_art = art(registry, clips["ref"], "video"), art(registry, mov, "video")
    decoded = registry.compare("decoded", mp4_art, mov_art)
    assert decoded.passed, decoded.message()
    assert not registry.compare("bytes", mp4_art, mov_art).passed


def test_time_base_is_stream_metadata(registry: KindRegistry, clips: dict[str, Path]) -> None:
    # Matroska stores 1/1000 timestamps: same frames and samples, other stream timing. Each
    # frame's presentation time is compared exactly (#20): frame 1 is shown at 42 ms, not at
    # 1/24 s; the time bases themselves are named in a note.
    result = registry.compare(
        "decoded", art(registry, clips["av"], "video"), art(registry, clips["av_mov"], "video")
    )
    assert not result.passed
    assert result.metadata_diffs == []
    assert any(
        note.startswith("time base differs (expected 1/1000, obtained 1/12288)")
        for note in result.notes
    ), result.notes
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith(
        "1: pixels identical, timing differs: expected pts 42 = 0.042000 s, obtained pts 512 "
        "= 0.041667 s: shown 0.000333333333 s early"
    ), result.first_mismatch
    # Made before times were exact (pts rounded to 1/24 s), the golden compares the time base.
    old = art(registry, clips["av"], "video")
    old_fp = ContainerFingerprint.from_json(old.fingerprint).with_pts_rounded().to_json()
    before = registry.compare(
        "decoded", replace(old, fingerprint=old_fp), art(registry, clips["av_mov"], "video")
    )
    assert not before.passed
    assert before.metadata_diffs == ["time base: expected 1/1000, obtained 1/12288"]
    assert before.mismatch_count == 0


def test_bitstream_damage_is_an_error_or_a_failure_never_a_pass(
    registry: KindRegistry, clips: dict[str, Path], tmp_path: Path
) -> None:
    reference = art(registry, clips["ref"], "video")
    data = clips["ref"].read_bytes()
    moov = data.index(b"moov") - 4  # the frames lie before the index in this layout
    outcomes = []
    for n, offset in enumerate((moov - 40, moov - 400, moov - 1500)):
        damaged = bytearray(data)
        damaged[offset] ^= 0x10
        path = tmp_path / f"damaged{n}.mp4"
        path.write_bytes(bytes(damaged))
        try:
            obtained = art(registry, path, "video")
        except LosslessError:
            outcomes.append("error")  # ffmpeg detected the damage: an error, never a pass
            continue
        result = registry.compare("decoded", reference, obtained)
        assert not result.passed, f"damage at {offset} passed (earlier damages: {outcomes})"
        outcomes.append("fail")
    # Which of the two each damage gives depends on the decoder; that none passed is the check
    # (inside the loop), so the list only shows what happened when that check fails.


def test_video_tolerance_is_lossy(registry: KindRegistry, clips: dict[str, Path]) -> None:
    expected = art(registry, clips["ref"], "video")
    obtained = art(registry, clips["pixel"], "video")
    loose = registry.compare(tolerance(atol=255), expected, obtained)
    assert loose.passed
    assert not loose.lossless
    assert "LOSSY" in loose.message()
    tight = registry.compare(tolerance(atol=1), expected, obtained)
    assert not tight.passed
    assert tight.first_mismatch is not None
    assert tight.first_mismatch.startswith("5 ")
    with pytest.raises(LosslessError, match="full data"):
        registry.compare(
            tolerance(atol=1), art(registry, clips["ref"], "v", digest_only=True), obtained
        )


# ------------------------------------------------------------------ audio files


def wav(path: Path, data: np.ndarray, subtype: str = "PCM_16", rate: int = 8000) -> Path:
    soundfile.write(path, data, rate, subtype=subtype, format="WAV")
    return path


def test_wav_one_sample_short_names_both_counts(registry: KindRegistry, tmp_path: Path) -> None:
    data = (np.arange(48000) % 200).astype(np.int16)[:, None]
    expected = art(registry, wav(tmp_path / "a.wav", data, rate=48000), "speech")
    obtained = art(registry, wav(tmp_path / "b.wav", data[:-1], rate=48000), "speech")
    result = registry.compare("decoded", expected, obtained)
    assert not result.passed
    assert result.metadata_diffs[0] == "sample count: expected 48000, obtained 47999"
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("47999")
    assert "present in expected only" in result.first_mismatch
    message = result.message()
    assert "48000" in message
    assert "47999" in message


def test_wav_changed_sample_named_with_both_values(registry: KindRegistry, tmp_path: Path) -> None:
    data = np.zeros((20000, 2), dtype=np.int16)
    changed = data.copy()
    changed[12345, 1] = -7
    changed[15000, 0] = 3
    expected = art(registry, wav(tmp_path / "a.wav", data), "speech")
    obtained = art(registry, wav(tmp_path / "b.wav", changed), "speech")
    result = registry.compare("decoded", expected, obtained, diagnostics_dir=tmp_path / "diag")
    assert not result.passed
    assert result.metadata_diffs == []
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("12345 (channel 1")
    assert "expected 0, obtained -7" in result.first_mismatch
    assert result.mismatch_count == 2
    assert result.total == 20000
    assert result.diagnostics["max_abs_error"] == 7
    assert len(result.diagnostic_files) == 1
    assert "(12345, 1)" in Path(result.diagnostic_files[0]).read_text()
    digest_only = registry.compare(
        "decoded", Artifact("speech", "audio", expected.fingerprint, None), obtained
    )
    assert not digest_only.passed
    assert digest_only.first_mismatch is not None
    assert digest_only.first_mismatch.startswith("within samples [8000, 16000)")


def test_float_wav_nan_payload_is_caught(registry: KindRegistry, tmp_path: Path) -> None:
    bits = np.array([[0x7FC00000], [0x3F000000]], dtype=np.uint32)
    other = bits.copy()
    other[0, 0] = 0x7FC00002
    expected = art(registry, wav(tmp_path / "a.wav", bits.view(np.float32), "FLOAT"))
    obtained = art(registry, wav(tmp_path / "b.wav", other.view(np.float32), "FLOAT"))
    result = registry.compare("decoded", expected, obtained)
    assert not result.passed
    assert result.first_mismatch is not None
    assert "0x7fc00002" in result.first_mismatch


def test_audio_tolerance(registry: KindRegistry, tmp_path: Path) -> None:
    data = np.zeros((100, 1), dtype=np.float32)
    near = data.copy()
    near[10, 0] = 1e-6
    expected = art(registry, wav(tmp_path / "a.wav", data, "FLOAT"))
    obtained = art(registry, wav(tmp_path / "b.wav", near, "FLOAT"))
    assert not registry.compare("decoded", expected, obtained).passed
    loose = registry.compare(tolerance(atol=1e-5), expected, obtained)
    assert loose.passed
    assert not loose.lossless
    assert loose.diagnostics["bitwise_differing"] == 1
    assert not registry.compare(tolerance(atol=1e-7), expected, obtained).passed


# ------------------------------------------------------------------ tensors


def npy(path: Path, array: np.ndarray) -> Path:
    np.save(path, array, allow_pickle=False)
    return path


def test_negative_zero_fails_elementwise_passes_tolerance(
    registry: KindRegistry, tmp_path: Path
) -> None:
    expected = art(
        registry, npy(tmp_path / "a.npy", np.array([1.0, 0.0, 2.0], np.float32)), "logits"
    )
    obtained = art(
        registry, npy(tmp_path / "b.npy", np.array([1.0, -0.0, 2.0], np.float32)), "logits"
    )
    exact = registry.compare("elementwise", expected, obtained)
    assert not exact.passed
    assert exact.first_mismatch is not None
    assert exact.first_mismatch.startswith("[1]")
    assert "0x00000000" in exact.first_mismatch
    assert "0x80000000" in exact.first_mismatch
    assert exact.mismatch_count == 1
    lossy = registry.compare(tolerance(atol=0.0), expected, obtained)
    assert lossy.passed
    assert not lossy.lossless
    assert "LOSSY" in lossy.message()


def test_nan_payload_is_caught(registry: KindRegistry, tmp_path: Path) -> None:
    bits = np.array([0x7FC00000, 0x3F800000], dtype=np.uint32)
    other = bits.copy()
    other[0] = 0x7FC00001
    expected = art(registry, npy(tmp_path / "a.npy", bits.view(np.float32)), "t")
    obtained = art(registry, npy(tmp_path / "b.npy", other.view(np.float32)), "t")
    result = registry.compare("elementwise", expected, obtained)
    assert not result.passed
    assert result.first_mismatch is not None
    assert "0x7fc00001" in result.first_mismatch
    assert registry.compare(tolerance(), expected, obtained).passed  # NaN == NaN where both NaN


def test_tolerance_nan_against_number_fails(registry: KindRegistry, tmp_path: Path) -> None:
    expected = art(registry, npy(tmp_path / "a.npy", np.array([np.nan, 1.0])))
    obtained = art(registry, npy(tmp_path / "b.npy", np.array([0.0, 1.0])))
    result = registry.compare(tolerance(atol=1e9), expected, obtained)
    assert not result.passed
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("[0]")


def test_tolerance_bounds_and_integers(registry: KindRegistry, tmp_path: Path) -> None:
    expected = art(registry, npy(tmp_path / "a.npy", np.array([100.0, 200.0])))
    obtained = art(registry, npy(tmp_path / "b.npy", np.array([101.0, 200.0])))
    assert registry.compare(tolerance(atol=1.0), expected, obtained).passed
    assert registry.compare(tolerance(rtol=0.01), expected, obtained).passed
    assert not registry.compare(tolerance(atol=0.5, rtol=0.004), expected, obtained).passed
    big = 2**62
    ie = art(registry, npy(tmp_path / "i.npy", np.array([big], np.int64)))
    io = art(registry, npy(tmp_path / "j.npy", np.array([big + 1], np.int64)))
    assert not registry.compare(tolerance(), ie, io).passed  # exact integers, not via float64
    assert registry.compare(tolerance(atol=1), ie, io).passed


def test_tensor_metadata_first(registry: KindRegistry, tmp_path: Path) -> None:
    expected = art(registry, npy(tmp_path / "a.npy", np.zeros((2, 3), np.float32)))
    other_dtype = art(registry, npy(tmp_path / "b.npy", np.zeros((2, 3), np.float64)))
    other_shape = art(registry, npy(tmp_path / "c.npy", np.zeros((3, 2), np.float32)))
    big_endian = art(registry, npy(tmp_path / "d.npy", np.zeros((2, 3), ">f4")))
    assert registry.compare("elementwise", expected, other_dtype).metadata_diffs == [
        "dtype: expected <f4, obtained <f8"
    ]
    assert registry.compare("elementwise", expected, other_shape).metadata_diffs == [
        "shape: expected (2, 3), obtained (3, 2)"
    ]
    assert not registry.compare("elementwise", expected, big_endian).passed


def test_npz_members(registry: KindRegistry, tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", x=np.zeros(4, np.int8), y=np.ones((2, 2), np.float16))
    np.savez(tmp_path / "b.npz", x=np.zeros(4, np.int8), y=np.array([[1, 1], [1, 2]], np.float16))
    np.savez(tmp_path / "c.npz", x=np.zeros(4, np.int8))
    a = art(registry, tmp_path / "a.npz")
    result = registry.compare("elementwise", a, art(registry, tmp_path / "b.npz"))
    assert not result.passed
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("member 'y' (1, 1)")
    assert result.total == 8
    missing = registry.compare("elementwise", a, art(registry, tmp_path / "c.npz"))
    assert missing.metadata_diffs == ["members: missing ['y'], unexpected []"]


def test_digest_only_tensor_localises_chunk(registry: KindRegistry, tmp_path: Path) -> None:
    base = np.zeros(700_000, np.float32)
    changed = base.copy()
    changed[600_000] = 1
    expected = art(registry, npy(tmp_path / "a.npy", base), digest_only=True)
    obtained = art(registry, npy(tmp_path / "b.npy", changed))
    result = registry.compare("elementwise", expected, obtained)
    assert not result.passed
    assert result.mismatch_count is None
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("within flat elements [524288, 700000)")
    assert "unknown" in result.message()


# ------------------------------------------------------------------ bytes


def test_bytes_first_offset(registry: KindRegistry, tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"hello world")
    (tmp_path / "b.bin").write_bytes(b"hello World!")
    result = registry.compare(
        "bytes", art(registry, tmp_path / "a.bin"), art(registry, tmp_path / "b.bin")
    )
    assert not result.passed
    assert result.metadata_diffs == ["size (bytes): expected 11, obtained 12"]
    assert result.first_mismatch == "offset 6 (expected 0x77, obtained 0x57)"
    assert result.mismatch_count == 2
    assert result.total == 12  # the extra byte is counted, so of the longer file's bytes


def test_bytes_of_a_longer_output_count_of_its_length(
    registry: KindRegistry, tmp_path: Path
) -> None:
    """Extra bytes count as differing, so "N of M" is of the longer file: never more differing
    bytes than there are (a probe saw "1644 of 160 bytes differ")."""
    (tmp_path / "a.bin").write_bytes(b"x" * 160)
    (tmp_path / "b.bin").write_bytes(b"x" * 160 + b"y" * 1484)
    for a, b in (("a.bin", "b.bin"), ("b.bin", "a.bin")):
        result = registry.compare("bytes", art(registry, tmp_path / a), art(registry, tmp_path / b))
        assert (result.mismatch_count, result.total) == (1484, 1644)
        assert "1484 of 1644" in result.message()


# ------------------------------------------------------------------ properties


def _compare_files(kind: str, gate: str, a: Path, b: Path, digest_only: bool) -> GateResult:
    registry = KindRegistry()
    expected = registry.artifact("x", a, kind)
    obtained = registry.artifact("x", b, kind)
    if digest_only:
        expected = Artifact("x", kind, expected.fingerprint, None)
    return registry.compare(gate, expected, obtained)


@PROPERTY
@given(
    data=st.binary(min_size=1, max_size=3000),
    where=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
    digest_only=st.booleans(),
)
def test_any_single_changed_byte_is_caught(
    data: bytes, where: int, flip: int, digest_only: bool
) -> None:
    index = where % len(data)
    changed = bytearray(data)
    changed[index] ^= flip
    with tempfile.TemporaryDirectory() as folder:
        a, b = Path(folder) / "a.bin", Path(folder) / "b.bin"
        a.write_bytes(data)
        b.write_bytes(bytes(changed))
        result = _compare_files("bytes", "bytes", a, b, digest_only)
        assert not result.passed
        if not digest_only:
            assert result.first_mismatch is not None
            assert result.first_mismatch.startswith(f"offset {index} ")
            assert result.mismatch_count == 1
        assert _compare_files("bytes", "bytes", a, a, digest_only).passed


DTYPES = st.sampled_from(
    [
        "float16",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "uint64",
        "complex64",
        ">f4",
        ">i2",
        "bool",
    ]
)


@PROPERTY
@given(data=st.data(), digest_only=st.booleans())
def test_any_single_changed_element_is_caught(data: Any, digest_only: bool) -> None:
    dtype = np.dtype(data.draw(DTYPES))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=6))
    elements = st.booleans() if dtype.kind == "b" else None
    array = data.draw(hnp.arrays(dtype, shape, elements=elements))
    flat = data.draw(st.integers(min_value=0, max_value=array.size - 1))
    raw = np.ascontiguousarray(array).view(np.uint8).reshape(array.size, dtype.itemsize).copy()
    byte = data.draw(st.integers(min_value=0, max_value=dtype.itemsize - 1))
    bit = 1 if dtype.kind == "b" else data.draw(st.integers(min_value=1, max_value=255))
    raw[flat, byte] ^= bit
    changed = raw.reshape(-1).view(dtype).reshape(shape)
    with tempfile.TemporaryDirectory() as folder:
        a = npy(Path(folder) / "a.npy", array)
        b = npy(Path(folder) / "b.npy", changed)
        result = _compare_files("tensor", "elementwise", a, b, digest_only)
        assert not result.passed
        if not digest_only:
            index = tuple(int(i) for i in np.unravel_index(flat, shape))
            assert result.location["index"] == list(index)
            assert result.mismatch_count == 1
        assert _compare_files("tensor", "elementwise", a, a, digest_only).passed


@PROPERTY
@given(data=st.data(), digest_only=st.booleans())
def test_any_single_changed_pcm_sample_is_caught(data: Any, digest_only: bool) -> None:
    subtype, dtype = data.draw(st.sampled_from([("PCM_16", np.int16), ("PCM_24", np.int32)]))
    frames = data.draw(st.integers(min_value=1, max_value=3000))
    channels = data.draw(st.integers(min_value=1, max_value=3))
    limit = 2**15 - 1 if dtype is np.int16 else 2**23 - 1
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    samples = rng.integers(-limit, limit, size=(frames, channels))
    frame = data.draw(st.integers(min_value=0, max_value=frames - 1))
    channel = data.draw(st.integers(min_value=0, max_value=channels - 1))
    changed = samples.copy()
    changed[frame, channel] += 1 if changed[frame, channel] < limit - 1 else -1
    scale = 1 if dtype is np.int16 else 256  # 24-bit PCM is read as int32, left-aligned
    with tempfile.TemporaryDirectory() as folder:
        a = wav(Path(folder) / "a.wav", (samples * scale).astype(dtype), subtype)
        b = wav(Path(folder) / "b.wav", (changed * scale).astype(dtype), subtype)
        result = _compare_files("audio", "decoded", a, b, digest_only)
        assert not result.passed
        if not digest_only:
            assert result.first_mismatch is not None
            assert result.first_mismatch.startswith(f"{frame} (channel {channel}")
            assert result.mismatch_count == 1
        assert _compare_files("audio", "decoded", a, a, digest_only).passed
