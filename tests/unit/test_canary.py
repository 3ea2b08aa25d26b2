"""The built-in canary: each perturbation changes exactly one unit, the built-in comparers fail
there, and a comparator that cannot fail is a CanaryError naming the kind, the gate and the unit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_lossless.errors import CanaryError
from pytest_lossless.evidence.receipts import RAW_BLOCKS, Receipt, raw_sha256
from pytest_lossless.evidence.verify import verify_receipt
from pytest_lossless.gates import Gate, GateResult, parse_gate
from pytest_lossless.hookspecs import hookimpl
from pytest_lossless.kinds import audio, canary, tensor
from pytest_lossless.kinds.canary import Canary, CanaryRecord, check_records, summary_lines
from pytest_lossless.kinds.registry import Artifact, KindRegistry


def _canary(registry: KindRegistry | None = None, **kwargs: Any) -> Canary:
    return Canary(registry or KindRegistry(), **kwargs)


def _run(path: Path, gate: str, registry: KindRegistry | None = None) -> CanaryRecord:
    registry = registry or KindRegistry()
    artifact = registry.artifact(path.name, path)
    parsed = parse_gate(gate)
    assert parsed is not None
    return Canary(registry).run(artifact.kind, parsed, artifact)


def _assert_proved(record: CanaryRecord) -> None:
    assert record.status == "proved", record
    assert record.verdict == "FAIL"
    assert record.located is True
    assert record.seconds is not None
    assert record.seconds >= 0


# ------------------------------------------------------------------ the registry hook


def test_the_registry_runs_the_canary_after_compare_but_not_after_compare_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(4, dtype=np.int32))
    registry = KindRegistry(canary="on")
    assert registry.canary is not None
    artifact = registry.artifact("t", path)
    registry.compare_only(None, artifact, artifact)
    assert registry.canary.take() == []
    registry.compare(None, artifact, artifact)
    taken = registry.canary.take()
    assert [(r.gate, r.status) for r in taken] == [("elementwise", "proved")]
    assert registry.canary.take() == []  # each record is taken once
    registry.compare(None, artifact, artifact)
    assert registry.canary.take() == []  # once per (kind, gate) and session
    assert KindRegistry().canary is None  # verify and unit tests: no canary unless asked
    skipping = KindRegistry(canary="skip")
    skipping.compare(None, artifact, artifact)
    assert skipping.canary is not None
    assert [r.status for r in skipping.canary.take()] == ["skipped"]


def test_a_gate_that_cannot_fail_raises_from_compare_itself(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(4, dtype=np.int32))
    registry = KindRegistry(canary="on")
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(AlwaysPasses())
    artifact = registry.artifact("t", path)
    with pytest.raises(CanaryError):
        registry.compare("bytes", artifact, artifact)
    with pytest.raises(CanaryError):  # every later use too
        registry.compare("bytes", artifact, artifact)


# ------------------------------------------------------------------ tensors


@pytest.mark.parametrize(
    ("array", "gate"),
    [
        (np.linspace(-1, 1, 101, dtype=np.float32), "elementwise"),
        (np.arange(24, dtype=">i4").reshape(2, 3, 4), "elementwise"),
        (np.array([True, False, True]), "elementwise"),
        (np.asfortranarray(np.arange(12.0).reshape(3, 4)), "elementwise"),
        (np.linspace(-1, 1, 101, dtype=np.float16), "ulp(0)"),
        (np.linspace(-1, 1, 101, dtype=">f8"), "ulp(5)"),
        (np.linspace(-1, 1, 101, dtype=np.float32), "tolerance(atol=1e-3)"),
        (np.linspace(-1, 1, 101, dtype=np.float32), "tolerance(atol=0)"),
        (np.linspace(1, 2, 101, dtype=np.float64), "tolerance(atol=1e-6, rtol=1e-3)"),
        (np.arange(100, dtype=np.int16), "tolerance(atol=2)"),
        (np.arange(10, dtype=np.complex64) * (1 + 1j), "tolerance(atol=0.5)"),
    ],
)
def test_a_tensor_canary_changes_one_element_and_the_gate_fails_there(
    tmp_path: Path, array: np.ndarray, gate: str
) -> None:
    path = tmp_path / "t.npy"
    np.save(path, array)
    record = _run(path, gate)
    _assert_proved(record)
    assert record.unit is not None
    assert record.unit.startswith("element ")


def _changed_copy(tmp_path: Path, array: np.ndarray, gate: str) -> tuple[np.ndarray, list[int]]:
    path, out = tmp_path / "t.npy", tmp_path / "out.npy"
    np.save(path, array)
    parsed = parse_gate(gate)
    assert parsed is not None
    plan = tensor.perturb_tensor(path, out, parsed, None)
    return np.load(out), plan.location["index"]


def test_elementwise_flips_the_last_mantissa_bit_of_one_element(tmp_path: Path) -> None:
    array = np.linspace(-1, 1, 101, dtype=np.float32)
    changed, index = _changed_copy(tmp_path, array, "elementwise")
    differ = np.flatnonzero(array.view(np.uint32) != changed.view(np.uint32))
    assert differ.tolist() == index
    assert int(array.view(np.uint32)[index[0]] ^ changed.view(np.uint32)[index[0]]) == 1


@pytest.mark.parametrize("n", [0, 1, 7])
def test_ulp_n_moves_one_element_n_plus_one_ulps(tmp_path: Path, n: int) -> None:
    array = np.linspace(0.5, 1, 33, dtype=np.float32)
    changed, (i,) = _changed_copy(tmp_path, array, f"ulp({n})")
    assert int(changed.view(np.int32)[i]) - int(array.view(np.int32)[i]) == n + 1
    assert np.count_nonzero(changed != array) == 1


def test_ulp_on_bfloat16_words_moves_them_in_bfloat16_steps(tmp_path: Path) -> None:
    """bfloat16 as users write it: raw 16-bit words ('<V2', uint16), and float32 holding
    bfloat16 values; each is moved n + 1 bfloat16 steps and written back as it was stored."""
    words = (np.linspace(0.5, 1, 33, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    for stored in (words, words.view("<V2")):
        changed, (i,) = _changed_copy(tmp_path, stored, "ulp(1, dtype='bfloat16')")
        assert changed.dtype == stored.dtype
        back = changed.view(np.uint16)
        assert int(back[i]) - int(words[i]) == 2
        record = _run(tmp_path / "t.npy", "ulp(1, dtype='bfloat16')")
        _assert_proved(record)
    widened = (words.astype(np.uint32) << 16).view(np.float32)
    changed, (i,) = _changed_copy(tmp_path, widened, "ulp(2, dtype='bfloat16')")
    moved = changed.view(np.uint32)[i] >> 16
    assert int(moved) - int(words[i]) == 3
    assert int(changed.view(np.uint32)[i] & 0xFFFF) == 0  # still a bfloat16 value
    _assert_proved(_run(tmp_path / "t.npy", "ulp(2, dtype='bfloat16')"))


def test_npz_keeps_every_member_and_changes_one(tmp_path: Path) -> None:
    path = tmp_path / "t.npz"
    np.savez(path, a=np.arange(6, dtype=np.int16), b=np.ones((2, 2)))
    record = _run(path, "elementwise")
    _assert_proved(record)
    assert record.unit is not None
    assert "member 'a'" in record.unit


@settings(max_examples=60, deadline=None)
@given(
    x=st.floats(-1e6, 1e6, width=32),
    atol=st.floats(0, 10, width=32),
    rtol=st.sampled_from([0.0, 1e-6, 1e-3, 0.5]),
)
@example(x=1.0, atol=1.78566499215568e-36, rtol=0.0)  # a bound far below the value's own step
@example(x=-1.0, atol=1.0, rtol=0.0)  # past zero: float64 rounds the distances of denormals
def test_beyond_is_the_nearest_float_past_the_bound(x: float, atol: float, rtol: float) -> None:
    dtype = np.dtype(np.float32)
    value = np.float32(x)
    bound = atol + rtol * abs(float(value))
    y = canary.beyond(value, dtype, bound)
    assert y is not None
    assert abs(float(y) - float(value)) > bound
    toward = np.nextafter(y, value, dtype=np.float32)
    assert abs(float(toward) - float(value)) <= bound or toward == value


def test_an_integer_tolerance_no_change_can_pass_cannot_fail(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(10, dtype=np.int8))
    record = _run(path, "tolerance(atol=300)")
    assert record.status == "cannot-fail"
    assert record.reason is not None
    assert "tolerance(atol=300, rtol=0)" in record.reason
    error = record.error()
    assert "this gate cannot fail" in str(error)
    assert error.kind == "tensor"
    assert error.gate == "tolerance(atol=300, rtol=0)"


def test_a_tensor_with_no_element_is_not_a_canary_failure(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.zeros((0, 3), dtype=np.float32))
    record = _run(path, "elementwise")
    assert record.status == "unavailable"
    assert record.reason is not None
    assert "no element" in record.reason


# ------------------------------------------------------------------ audio and bytes


@pytest.mark.parametrize(
    ("subtype", "fmt", "suffix"),
    [
        ("PCM_16", "WAV", ".wav"),
        ("PCM_24", "WAV", ".wav"),
        ("PCM_32", "WAV", ".wav"),
        ("PCM_U8", "WAV", ".wav"),
        ("FLOAT", "WAV", ".wav"),
        ("PCM_16", "FLAC", ".flac"),
        ("PCM_24", "FLAC", ".flac"),
    ],
)
@pytest.mark.parametrize("gate", ["decoded", "tolerance(atol=0.001)", "tolerance(atol=3)"])
def test_an_audio_canary_changes_one_sample_by_one_lsb_in_the_same_subtype(
    tmp_path: Path, subtype: str, fmt: str, suffix: str, gate: str
) -> None:
    t = np.arange(2000) / 8000
    samples = np.stack([np.sin(2 * np.pi * 440 * t), np.cos(2 * np.pi * 220 * t)], axis=1) * 0.5
    path = tmp_path / f"a{suffix}"
    sf.write(path, samples, 8000, subtype=subtype, format=fmt)
    if subtype == "FLOAT" and gate == "tolerance(atol=3)":
        gate = "tolerance(atol=0.25)"  # float PCM spans -1..1
    record = _run(path, gate)
    _assert_proved(record)
    assert record.unit is not None
    assert subtype in record.unit
    out = tmp_path / f"x{suffix}"
    parsed = parse_gate(gate)
    assert parsed is not None
    plan = audio.perturb_audio(path, out, parsed, None)
    a, _ = sf.read(path, dtype="float64", always_2d=True)
    b, _ = sf.read(out, dtype="float64", always_2d=True)
    assert np.flatnonzero((a != b).any(axis=1)).tolist() == [plan.location["sample"]]
    assert sf.info(str(out)).subtype == subtype


def test_a_byte_flip_changes_one_bit_of_the_middle_byte(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(range(100)))
    record = _run(path, "bytes")
    _assert_proved(record)
    assert record.unit == "byte 50 of 100, 0x32 -> 0x33"
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert _run(empty, "bytes").status == "unavailable"


# ------------------------------------------------------------------ comparators that cannot fail


class AlwaysPasses:
    """A broken comparator for tensors: every comparison passes."""

    @hookimpl(tryfirst=True)
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        return GateResult(expected.name, kind, gate.spec, lossless=True, passed=True)


class FailsElsewhere:
    """A comparator that fails, but always names element [0]."""

    @hookimpl(tryfirst=True)
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        return GateResult(
            expected.name,
            kind,
            gate.spec,
            lossless=True,
            passed=expected.fingerprint == obtained.fingerprint,
            unit="element",
            first_mismatch="[0]: differs",
            location={"member": "", "index": [0]},
        )


@pytest.mark.parametrize("broken", [AlwaysPasses(), FailsElsewhere()])
def test_a_comparator_that_passes_or_names_another_unit_cannot_fail(
    tmp_path: Path, broken: object
) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(10, dtype=np.float32))
    registry = KindRegistry()
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(broken)
    canary = _canary(registry)
    artifact = registry.artifact("latent.npy", path)
    gate = Gate("elementwise")
    record = canary.observe(gate, artifact, artifact)
    assert record is not None
    assert record.status == "cannot-fail"
    error = canary.error_for(gate, artifact)
    assert isinstance(error, CanaryError)
    message = str(error)
    for part in ("tensor", "elementwise", "'latent.npy'", "element [5]", "this gate cannot fail"):
        assert part in message
    if isinstance(broken, FailsElsewhere):
        assert "did not name that unit" in message
        assert "[0]: differs" in message
        assert error.verdict == "FAIL"
    else:
        assert error.verdict == "PASS"
    assert error.unit.startswith("element [5]")


def test_each_kind_and_gate_runs_once_and_a_gate_that_cannot_fail_stays_an_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(10, dtype=np.float32))
    registry = KindRegistry()
    canary = _canary(registry)
    artifact = registry.artifact("t.npy", path)
    first = canary.observe(Gate("elementwise"), artifact, artifact)
    assert first is not None
    assert first.status == "proved"
    assert canary.observe(Gate("elementwise"), artifact, artifact) is None
    other = canary.observe(parse_gate("ulp(1)"), artifact, artifact)  # type: ignore[arg-type]
    assert other is not None
    assert other.gate == "ulp(1)"
    assert canary.error_for(Gate("elementwise"), artifact) is None
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(AlwaysPasses())
    canary.observe(Gate("bytes"), artifact, artifact)
    assert canary.error_for(Gate("bytes"), artifact) is not None
    assert canary.error_for(Gate("bytes"), artifact) is not None  # every later use too


def test_skip_records_each_kind_and_gate_as_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(3, dtype=np.float32))
    registry = KindRegistry()
    artifact = registry.artifact("t.npy", path)
    record = _canary(registry, skip=True).observe(Gate("elementwise"), artifact, artifact)
    assert record is not None
    assert (record.status, record.reason) == ("skipped", "--lossless-no-canary")


def test_a_digest_only_golden_is_copied_from_the_obtained_side(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(3, dtype=np.float32))
    registry = KindRegistry()
    obtained = registry.artifact("t.npy", path)
    golden = Artifact("t.npy", "tensor", obtained.fingerprint, None)
    record = _canary(registry).observe(Gate("elementwise"), golden, obtained)
    assert record is not None
    assert record.status == "proved"
    nothing = Artifact("t.npy", "tensor", obtained.fingerprint, None)
    assert _canary(registry).observe(Gate("elementwise"), nothing, nothing) is None


class CsvKind:
    """A user kind with its own perturbation: one row changed."""

    @hookimpl
    def pytest_lossless_fingerprint(self, kind: str, path: Path) -> dict[str, Any] | None:
        return {"rows": path.read_text().splitlines()} if kind == "csv" else None

    @hookimpl
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        if kind != "csv":
            return None
        same = expected.fingerprint == obtained.fingerprint
        return GateResult(expected.name, kind, gate.spec, lossless=True, passed=same)

    @hookimpl
    def pytest_lossless_perturb(self, kind: str, gate: Gate, path: Path, out: Path) -> str | None:
        if kind != "csv":
            return None
        rows = path.read_text().splitlines()
        rows[1] = rows[1] + "0"
        out.write_text("\n".join(rows))
        return "row 1"


def test_a_user_kind_is_perturbed_by_its_own_hook(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    registry = KindRegistry()
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(CsvKind())
    artifact = registry.artifact("t.csv", path, "csv")
    record = Canary(registry).run("csv", Gate("decoded"), artifact)
    assert (record.status, record.unit, record.located) == ("proved", "row 1", None)


class CheatingPerturb:
    """A conftest that hands back a copy its own way for every kind (an unrelated file)."""

    @hookimpl
    def pytest_lossless_perturb(self, kind: str, gate: Gate, path: Path, out: Path) -> str | None:
        np.save(out.with_suffix(".npy"), np.full(7, 9.0))
        out.write_bytes(b"not the artifact at all")
        return "everything"


def test_a_hook_never_replaces_the_perturbation_of_a_built_in_kind(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(6, dtype=np.float32))
    registry = KindRegistry()
    assert registry.plugin_manager is not None
    registry.plugin_manager.register(CheatingPerturb())
    record = _run(path, "elementwise", registry)
    _assert_proved(record)
    assert record.unit != "everything"


# ------------------------------------------------------------------ records, receipts, verify


def _receipt_with(tmp_path: Path, record: dict[str, Any], call: str = "passed") -> Path:
    receipt = Receipt("t.py::test_x")
    receipt.add_canary(record)
    receipt.set_outcome("call", call)
    return receipt.write(tmp_path, root=tmp_path)


def test_the_canary_block_is_a_raw_block_covered_by_integrity(tmp_path: Path) -> None:
    record = CanaryRecord("tensor", "elementwise", "t.npy", "proved", "element [1]", "FAIL", True)
    path = _receipt_with(tmp_path, record.to_json())
    data = json.loads(path.read_text())
    assert data["canary"][0]["status"] == "proved"
    assert data["integrity"]["covers"] == [*RAW_BLOCKS, "canary"]
    assert verify_receipt(path) == []
    data["canary"][0]["verdict"] = "PASS"
    path.write_text(json.dumps(data))
    found = verify_receipt(path)
    assert any("raw blocks were changed" in f for f in found)
    assert any("recorded proved, but the comparator said PASS" in f for f in found)
    del data["canary"]
    path.write_text(json.dumps(data))
    assert any("canary block that is missing" in f for f in verify_receipt(path))


def test_a_receipt_without_canaries_hashes_as_before() -> None:
    receipt = Receipt("t.py::test_x").to_dict()
    assert "canary" not in receipt
    assert receipt["integrity"]["covers"] == list(RAW_BLOCKS)
    assert raw_sha256(receipt) == raw_sha256({k: receipt.get(k) for k in RAW_BLOCKS})


def test_check_records_names_a_malformed_or_contradicting_record() -> None:
    good = CanaryRecord("audio", "decoded", "a.wav", "proved", "sample 3", "FAIL", True).to_json()
    assert check_records([good], {"outcome": {"call": "passed"}}) == []
    assert check_records("x", {}) == ["canary is not a list"]
    assert check_records([{"kind": "audio"}], {})[0].startswith("canary[0] lacks gate")
    cannot = {**good, "status": "cannot-fail", "verdict": "PASS"}
    assert check_records([cannot], {"outcome": {"call": "passed"}}) == [
        "canary[0] audio/decoded: a gate that cannot fail, yet the test passed"
    ]
    assert check_records([cannot], {"outcome": {"call": "failed"}}) == []
    assert "unknown status" in check_records([{**good, "status": "fine"}], {})[0]
    assert "skipped without" in check_records([{**good, "status": "skipped"}], {})[0]


def test_the_summary_has_one_line_per_kind_and_gate() -> None:
    proved = CanaryRecord(
        "video", "decoded", "clip.mp4", "proved", "frame 6: byte 9", "FAIL", True, seconds=0.2
    )
    broken = CanaryRecord("csv", "decoded", "t.csv", "cannot-fail", "byte 4", "PASS", None)
    lines = summary_lines([proved.to_json(), proved.to_json(), broken.to_json()])
    assert lines[0] == "canary: csv/decoded: CANNOT FAIL, an ERROR ('t.csv': byte 4: said PASS)"
    assert lines[1].strip() == (
        "video/decoded: FAIL as required ('clip.mp4': frame 6: byte 9; 0.20 s) "
        "[once on each of 2 workers]"
    )
    skipped = CanaryRecord("video", "decoded", "c", "skipped", reason="--lossless-no-canary")
    assert summary_lines([skipped.to_json()]) == [
        "canary skipped (--lossless-no-canary): video/decoded not proven able to fail"
    ]
    assert summary_lines([]) == []


# ------------------------------------------------------------------ video (ffmpeg)


@pytest.mark.slow
@pytest.mark.parametrize("gate", ["decoded", "tolerance(atol=3)", "bytes"])
def test_a_video_canary_changes_one_byte_of_one_mid_clip_frame(tmp_path: Path, gate: str) -> None:
    from tests.e2e import mediagen

    path = mediagen.write_video(tmp_path / "clip.mp4", mediagen.gray_frames(12))
    record = _run(path, gate)
    _assert_proved(record)
    assert record.unit is not None
    if gate != "bytes":
        assert record.unit.startswith("frame 6: ")
        assert "copy of frames 5-7" in record.unit


@pytest.mark.slow
def test_a_video_tolerance_wider_than_the_pixel_range_cannot_fail(tmp_path: Path) -> None:
    from tests.e2e import mediagen

    path = mediagen.write_video(tmp_path / "clip.mp4", mediagen.gray_frames(4))
    record = _run(path, "tolerance(atol=256)")
    assert record.status == "cannot-fail"
    assert "yuv420p" in (record.reason or "")


def test_the_summary_names_each_canary_with_its_status(tmp_path: Path) -> None:
    from pytest_lossless.evidence.summary_md import summary_lines as summary_md

    for name, status in (("t.py::test_a", "proved"), ("t.py::test_b", "skipped")):
        receipt = Receipt(name)
        receipt.add_canary({"kind": "tensor", "gate": "elementwise", "status": "proved"})
        receipt.add_canary({"kind": "audio", "gate": "decoded", "status": status})
        receipt.set_outcome("call", "passed")
        receipt.write(tmp_path, root=tmp_path)
    lines = summary_md(tmp_path)
    assert "- canary audio/decoded: skipped" in lines
    assert "- canary tensor/elementwise: proved" in lines
    assert lines == summary_md(tmp_path)  # generated from the receipts alone
