"""Unit and property tests of the ``ulp(n)`` gate and of the statistics every lossy result
carries: distances checked against an independent oracle (numpy's own ordering of every 16-bit
pattern, ``np.nextafter``), every comparator seen to fail at the element it was perturbed at."""

from __future__ import annotations

import importlib.util
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_lossless import ulp
from pytest_lossless.errors import ArtifactError, LosslessError
from pytest_lossless.evidence.receipts import ReceiptRecord
from pytest_lossless.evidence.verify import Context, check_gates
from pytest_lossless.gates import Gate, GateResult, lossy_figure, parse_gate, tolerance
from pytest_lossless.gates.lossy import Spread
from pytest_lossless.gates.ulps import FORMATS, INFINITE_STEPS, float_bits, ulp_distance
from pytest_lossless.kinds.registry import Artifact, KindRegistry
from pytest_lossless.report import gate_row

PROPERTY = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
HAS_ML_DTYPES = importlib.util.find_spec("ml_dtypes") is not None
NEEDS_ML_DTYPES = pytest.mark.skipif(
    not HAS_ML_DTYPES, reason="ml_dtypes is not installed (pip install ml_dtypes)"
)
NATIVE = ("float16", "float32", "float64")


# ------------------------------------------------------------------ the oracle


def _values16(name: str, bits: np.ndarray) -> np.ndarray:
    """The float64 values of 16-bit patterns, read by numpy (bfloat16: the upper half of a
    float32), independently of the gate's own mapping."""
    with np.errstate(invalid="ignore"):  # signalling NaNs warn when widened
        if name == "float16":
            return bits.view(np.float16).astype(np.float64)
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _ranks16(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every 16-bit pattern's place among the format's distinct values, sorted by numpy
    (``+0`` and ``-0`` are one value), whether it is a NaN, and a pattern for each place."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = _values16(name, bits)
    nan = np.isnan(values)
    distinct = np.unique(values[~nan])
    rank = np.searchsorted(distinct, values)
    by_rank = np.zeros(distinct.size, dtype=np.uint16)
    by_rank[rank[~nan][::-1]] = bits[~nan][::-1]  # the lowest pattern (+0 for zero) wins
    return rank, nan, by_rank


ORACLE = {name: _ranks16(name) for name in ("float16", "bfloat16")}


def _step16(name: str, bits: int, k: int) -> int | None:
    """The pattern ``k`` places above (below, for negative ``k``) ``bits``, by the oracle."""
    rank, _nan, by_rank = ORACLE[name]
    target = int(rank[bits]) + k
    return int(by_rank[target]) if 0 <= target < by_rank.size else None


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(f"u{array.dtype.itemsize}")


# ------------------------------------------------------------------ the gate as a value


def test_ulp_is_public_lossy_and_round_trips() -> None:
    import pytest_lossless

    assert pytest_lossless.ulp is ulp
    assert "ulp" in pytest_lossless.__all__
    gate = ulp(2)
    assert isinstance(gate, Gate)
    assert not gate.lossless
    assert gate.spec == "ulp(2)"
    assert str(ulp(1, dtype="bfloat16")) == "ulp(1, dtype='bfloat16')"


@pytest.mark.parametrize("n", [0, 1, 2, 1000, 2**63 - 1])
@pytest.mark.parametrize("dtype", [None, "float16", "bfloat16", "float32", "float64"])
def test_parse_gate_round_trips_ulp(n: int, dtype: str | None) -> None:
    gate = ulp(n, dtype=dtype)
    assert parse_gate(gate.spec) == gate
    assert parse_gate(gate) is gate


@pytest.mark.parametrize(
    ("text", "gate"),
    [
        ("ulp(2)", ulp(2)),
        (" ulp( 3 ) ", ulp(3)),
        ("ulp(n=3)", ulp(3)),
        ("ulp(1, dtype=bfloat16)", ulp(1, dtype="bfloat16")),
        ('ulp(1, dtype="bfloat16")', ulp(1, dtype="bfloat16")),
        ("ulp(1, dtype='bf16')", ulp(1, dtype="bfloat16")),
        ("ulp(1,)", ulp(1)),
    ],
)
def test_parse_gate_ulp_forms(text: str, gate: Gate) -> None:
    assert parse_gate(text) == gate


@pytest.mark.parametrize(
    "bad",
    [
        "ulp",
        "ulp()",
        "ulp(-1)",
        "ulp(1.5)",
        "ulp(1e3)",
        "ulp(x)",
        "ulp(1, 2)",
        "ulp(1, atol=1)",
        "ulp(1, dtype='int8')",
        "ulp(1, dtype=)",
        "ulp(1, dtype='float32', dtype='float16')",
        f"ulp({2**63})",
    ],
)
def test_parse_gate_refuses_bad_ulp(bad: str) -> None:
    with pytest.raises(LosslessError):
        parse_gate(bad)


@pytest.mark.parametrize("n", [True, 1.0, -1, "1", None])
def test_ulp_takes_whole_numbers_only(n: Any) -> None:
    with pytest.raises(LosslessError, match="ulp"):
        ulp(n)


def test_ulp_dtype_spellings() -> None:
    assert ulp(1, dtype=np.float16).dtype == "float16"
    assert ulp(1, dtype=np.dtype("float32")).dtype == "float32"
    assert ulp(1, dtype="torch.bfloat16").dtype == "bfloat16"
    assert ulp(1, dtype="fp64").dtype == "float64"
    assert ulp(1, dtype=float).dtype == "float64"  # as numpy reads it
    with pytest.raises(LosslessError, match="not a float format"):
        ulp(1, dtype=np.int16)


@NEEDS_ML_DTYPES
def test_ulp_dtype_from_ml_dtypes_and_its_arrays_are_native() -> None:
    import ml_dtypes

    assert ulp(1, dtype=ml_dtypes.bfloat16).spec == "ulp(1, dtype='bfloat16')"
    array = np.array([1.0, -2.5], dtype=ml_dtypes.bfloat16)
    bits, fmt, lost = float_bits(array, None)  # an in-memory ml_dtypes array says what it is
    assert fmt.name == "bfloat16"
    assert lost is None
    assert bits.tolist() == [0x3F80, 0xC020]


def test_other_gates_take_no_ulps() -> None:
    with pytest.raises(LosslessError, match="takes no ulps"):
        Gate("elementwise", ulps=1)
    with pytest.raises(LosslessError, match="takes no atol"):
        Gate("ulp", ulps=1, atol=1.0)


def test_ulp_applies_to_tensors_only(kinds: KindRegistry) -> None:
    kinds_by_name = {k.name: k for k in kinds.plugin_manager.get_plugins() if hasattr(k, "gates")}
    kinds_by_name["tensor"].check_gate(ulp(1), "x")
    with pytest.raises(LosslessError, match=r"does not apply to the audio artifact 'x'"):
        kinds_by_name["audio"].check_gate(ulp(1), "x")
    with pytest.raises(LosslessError, match=r"ulp\(n\)"):
        kinds_by_name["tensor"].check_gate(Gate("decoded"), "x")


# ------------------------------------------------------------------ distances


@PROPERTY
@given(name=st.sampled_from(["float16", "bfloat16"]), pivot=st.integers(0, (1 << 16) - 1))
def test_every_16_bit_pattern_is_as_far_as_numpy_orders_it(name: str, pivot: int) -> None:
    rank, nan, _by_rank = ORACLE[name]
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    found = ulp_distance(np.full(every.shape, pivot, np.uint16), every, FORMATS[name])
    want = np.abs(rank.astype(np.int64) - int(rank[pivot])).astype(np.uint64)
    if nan[pivot]:
        want = np.where(every == pivot, np.uint64(0), INFINITE_STEPS)
    else:
        want = np.where(nan, INFINITE_STEPS, want)
    np.testing.assert_array_equal(found, want)


@PROPERTY
@given(
    data=st.data(),
    name=st.sampled_from(NATIVE),
    k=st.integers(0, 40),
    up=st.booleans(),
)
def test_k_nextafter_steps_are_k_ulps(data: st.DataObject, name: str, k: int, up: bool) -> None:
    dtype = np.dtype(name)
    x = np.array(data.draw(hnp.from_dtype(dtype, allow_nan=False)), dtype=dtype)
    toward = np.array(np.inf if up else -np.inf, dtype=dtype)
    y, moved = x, 0
    for _ in range(k):
        z = np.nextafter(y, toward)
        if _bits(z) == _bits(y):
            break  # at infinity: no further float
        y, moved = z, moved + 1
    fmt = FORMATS[name]
    assert int(ulp_distance(_bits(x), _bits(y), fmt)) == moved
    assert int(ulp_distance(_bits(y), _bits(x), fmt)) == moved


@NEEDS_ML_DTYPES
@PROPERTY
@given(data=st.data(), k=st.integers(0, 40), up=st.booleans())
def test_k_nextafter_steps_are_k_bfloat16_ulps(data: st.DataObject, k: int, up: bool) -> None:
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    start = data.draw(hnp.from_dtype(np.dtype(np.float32), allow_nan=False))
    x = np.array(start, dtype=np.float32).astype(bf16)
    assume(not np.isnan(x.astype(np.float32)))
    toward = np.array(np.inf if up else -np.inf, dtype=bf16)
    y, moved = x, 0
    for _ in range(k):
        z = np.nextafter(y, toward)
        if z.view(np.uint16) == y.view(np.uint16):
            break
        y, moved = z, moved + 1
    assert int(ulp_distance(x.view(np.uint16), y.view(np.uint16), FORMATS["bfloat16"])) == moved


@pytest.mark.parametrize(
    ("name", "a", "b", "steps"),
    [
        ("float32", 0.0, -0.0, 0),
        ("float32", np.inf, np.finfo(np.float32).max, 1),
        ("float16", -np.inf, np.finfo(np.float16).min, 1),
        ("float64", np.finfo(np.float64).min, np.finfo(np.float64).max, 2 * 0x7FEFFFFFFFFFFFFF),
        ("float64", -np.inf, np.inf, 2 * 0x7FF0000000000000),
        ("float32", np.nan, np.nan, 0),
        ("float32", np.nan, 1.0, None),
        ("float64", 1.0, np.nan, None),
    ],
)
def test_special_values(name: str, a: float, b: float, steps: int | None) -> None:
    x, y = np.array([a], name), np.array([b], name)
    found = int(ulp_distance(_bits(x), _bits(y), FORMATS[name])[0])
    assert found == (int(INFINITE_STEPS) if steps is None else steps)


def test_nan_payloads_that_differ_have_no_distance() -> None:
    quiet = np.array([0x7FC00000], np.uint32)
    other = np.array([0x7FC00001], np.uint32)
    assert int(ulp_distance(quiet, other, FORMATS["float32"])[0]) == int(INFINITE_STEPS)
    assert int(ulp_distance(quiet, quiet, FORMATS["float32"])[0]) == 0


# ------------------------------------------------------------------ the comparer


def npy(path: Path, array: np.ndarray) -> Path:
    np.save(path, array, allow_pickle=False)
    return path


def npy_v2(path: Path, words: np.ndarray) -> Path:
    """A ``.npy`` exactly as ``np.save`` writes an ``ml_dtypes.bfloat16`` array: descr '<V2'."""
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<V2", "fortran_order": False, "shape": words.shape}
        )
        fh.write(words.astype("<u2").tobytes())
    return path


def _bf16_words(values: np.ndarray) -> np.ndarray:
    """bfloat16 patterns of float32 values, truncated (the values are chosen to be exact)."""
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _store_bf16(path: Path, words: np.ndarray, storage: str) -> Path:
    if storage == "<V2":
        return npy_v2(path, words)
    if storage == "uint16":
        return npy(path, words)
    if storage == "int16":
        return npy(path, words.view(np.int16))
    return npy(path, (words.astype(np.uint32) << 16).view(np.float32))  # float32 holding bf16


def _pair(registry: KindRegistry, expected: Path, obtained: Path) -> tuple[Artifact, Artifact]:
    return registry.artifact("h", expected), registry.artifact("h", obtained)


LATENT = np.linspace(-3, 3, 256, dtype=np.float32).reshape(16, 16)


@pytest.mark.parametrize("storage", ["<V2", "uint16", "int16", "float32"])
def test_bf16_one_ulp_off_is_a_lossy_pass_and_fails_elementwise(
    kinds: KindRegistry, tmp_path: Path, storage: str
) -> None:
    words = _bf16_words(LATENT)
    off = words.copy()
    off[3, 7] = _step16("bfloat16", int(off[3, 7]), 1)
    expected, obtained = _pair(
        kinds,
        _store_bf16(tmp_path / "a.npy", words, storage),
        _store_bf16(tmp_path / "b.npy", off, storage),
    )
    result = kinds.compare(ulp(1, dtype="bfloat16"), expected, obtained)
    assert result.passed
    assert not result.lossless
    assert gate_row("t", result).verdict == "LOSSY-PASS"
    assert result.diagnostics["max_ulp"] == 1
    assert result.diagnostics["max_ulp_at"] == "[3, 7]"
    assert result.diagnostics["p99_ulp"] == 0
    assert result.diagnostics["count_beyond"] == 0
    assert result.diagnostics["max_abs_diff_at"] == "[3, 7]"
    message = result.message()
    assert "LOSSY" in message
    for shown in ("max_ulp=1", "max_ulp_at=[3, 7]", "p99_ulp=0", "count_beyond=0"):
        assert shown in message
    row = gate_row("t", result)
    assert row.detail == "256 elements: max 1 ulp at [3, 7], p99 0 ulp, 0 beyond 1"
    exact = kinds.compare("elementwise", expected, obtained)
    assert not exact.passed
    assert exact.first_mismatch is not None
    assert exact.first_mismatch.startswith("(3, 7)")


def test_bf16_two_ulps_off_fails_ulp_1_naming_the_element(
    kinds: KindRegistry, tmp_path: Path
) -> None:
    words = _bf16_words(LATENT)
    off = words.copy()
    off[3, 7] = _step16("bfloat16", int(off[3, 7]), -2)
    expected, obtained = _pair(
        kinds, npy_v2(tmp_path / "a.npy", words), npy_v2(tmp_path / "b.npy", off)
    )
    result = kinds.compare(ulp(1, dtype="bfloat16"), expected, obtained)
    assert not result.passed
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("[3, 7]: expected ")
    assert "2 bfloat16 ulps apart (more than 1)" in result.first_mismatch
    assert f"bits 0x{int(off[3, 7]):04x}" in result.first_mismatch
    assert result.mismatch_count == 1
    assert result.total == 256
    assert result.diagnostics["count_beyond"] == 1
    assert result.location == {"member": "", "index": [3, 7]}
    assert kinds.compare(ulp(2, dtype="bfloat16"), expected, obtained).passed
    row = gate_row("t", result)
    assert row.verdict == "FAIL"
    assert row.detail.endswith("; max 2 ulp at [3, 7], p99 0 ulp, 1 beyond 1")


def _perturbed(name: str, array: np.ndarray, flat: int, k: int) -> np.ndarray | None:
    """``array`` with element ``flat`` moved ``k`` floats up, by ``np.nextafter`` (native) or
    by the oracle's order (bfloat16 words); None where the format ends first."""
    out = array.copy().reshape(-1)
    if name == "bfloat16":
        moved = _step16(name, int(out[flat]), k)
        if moved is None or ORACLE[name][1][moved]:
            return None
        out[flat] = moved
        return out.reshape(array.shape)
    value = out[flat : flat + 1]
    for _ in range(k):
        value = np.nextafter(value, np.array([np.inf], array.dtype))
    if not np.isfinite(value).all():
        return None
    out[flat] = value[0]
    return out.reshape(array.shape)


@PROPERTY
@given(
    data=st.data(),
    name=st.sampled_from([*NATIVE, "bfloat16"]),
    k=st.integers(1, 4),
    shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
)
def test_any_element_k_ulps_off_passes_ulp_k_and_fails_below(
    kinds: KindRegistry, data: st.DataObject, name: str, k: int, shape: tuple[int, ...]
) -> None:
    if name == "bfloat16":
        finite = np.flatnonzero(~ORACLE[name][1]).astype(np.uint16)
        array = data.draw(hnp.arrays(np.uint16, shape, elements=st.sampled_from(finite.tolist())))
        dtype = "bfloat16"
    else:
        array = data.draw(
            hnp.arrays(name, shape, elements=hnp.from_dtype(np.dtype(name), allow_nan=False))
        )
        array[~np.isfinite(array)] = 0
        dtype = None
    flat = data.draw(st.integers(0, array.size - 1))
    off = _perturbed(name, array, flat, k)
    assume(off is not None)
    assert off is not None
    index = tuple(int(i) for i in np.unravel_index(flat, shape))
    where = f"[{', '.join(map(str, index))}]"
    with tempfile.TemporaryDirectory() as folder:
        expected, obtained = _pair(
            kinds, npy(Path(folder) / "a.npy", array), npy(Path(folder) / "b.npy", off)
        )
        within = kinds.compare(ulp(k, dtype=dtype), expected, obtained)
        assert within.passed, within.message()
        assert not within.lossless
        assert within.diagnostics["max_ulp"] == k
        assert within.diagnostics["max_ulp_at"] == where
        below = kinds.compare(ulp(k - 1, dtype=dtype), expected, obtained)
        assert not below.passed
        assert below.first_mismatch is not None
        assert below.first_mismatch.startswith(where + ":")
        assert below.mismatch_count == below.diagnostics["count_beyond"] == 1
        assert not kinds.compare("elementwise", expected, obtained).passed


def test_signed_zero_passes_ulp_0_and_nan_rules(kinds: KindRegistry, tmp_path: Path) -> None:
    base = np.array([0.0, 1.0, np.nan, np.inf], np.float32)
    signed = np.array([-0.0, 1.0, np.nan, np.finfo(np.float32).max], np.float32)
    expected, obtained = _pair(
        kinds, npy(tmp_path / "a.npy", base), npy(tmp_path / "b.npy", signed)
    )
    assert not kinds.compare(ulp(0), expected, obtained).passed  # inf against max: 1 step
    result = kinds.compare(ulp(1), expected, obtained)
    assert result.passed  # -0 == +0, same NaN, inf 1 from max
    assert result.diagnostics["max_ulp_at"] == "[3]"
    bits = base.view(np.uint32).copy()
    bits[2] = 0x7FC00001
    payload = npy(tmp_path / "c.npy", bits.view(np.float32))
    changed = kinds.compare(ulp(5), expected, kinds.artifact("h", payload))
    assert not changed.passed
    assert changed.first_mismatch is not None
    assert changed.first_mismatch.startswith("[2]")
    assert "NaNs with different bits" in changed.first_mismatch
    number = npy(tmp_path / "d.npy", np.array([0.0, 1.0, 7.0, np.inf], np.float32))
    against = kinds.compare(ulp(1000), expected, kinds.artifact("h", number))
    assert not against.passed
    assert against.first_mismatch is not None
    assert "NaN against a number" in against.first_mismatch
    assert against.diagnostics["max_ulp"] == math.inf
    assert against.diagnostics["max_abs_diff"] == math.inf
    assert "max_ulp=inf" in against.message()


def test_npz_members_are_named(kinds: KindRegistry, tmp_path: Path) -> None:
    a = np.arange(6, dtype=np.float16)
    b = a.copy()
    b[4] = np.nextafter(b[4], np.float16(np.inf))
    b[4] = np.nextafter(b[4], np.float16(np.inf))
    np.savez(tmp_path / "a.npz", x=a, y=a)
    np.savez(tmp_path / "b.npz", x=a, y=b)
    expected, obtained = _pair(kinds, tmp_path / "a.npz", tmp_path / "b.npz")
    result = kinds.compare(ulp(1), expected, obtained)
    assert not result.passed
    assert result.first_mismatch is not None
    assert result.first_mismatch.startswith("member 'y' [4]:")
    assert result.diagnostics["max_ulp_at"] == "member 'y' [4]"
    assert result.location == {"member": "y", "index": [4]}
    assert result.total == 12


@pytest.mark.parametrize(
    ("expected", "obtained", "gate", "match"),
    [
        (np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32), ulp(1), "tolerance"),
        (np.zeros(4, np.uint16), np.zeros(4, np.uint16), ulp(1), "dtype='bfloat16'"),
        (np.zeros(4, np.float16), np.zeros(4, np.float16), ulp(1, dtype="float32"), "wider"),
        (np.zeros(4, np.float32), np.zeros(4, np.float32), ulp(1, dtype="float64"), "wider"),
        (np.zeros(4, np.complex64), np.zeros(4, np.complex64), ulp(1), "not floats"),
        (np.zeros(4, np.uint32), np.zeros(4, np.uint32), ulp(1, dtype="float16"), "bytes wide"),
    ],
)
def test_dtypes_ulp_cannot_count_are_errors_naming_the_file(
    kinds: KindRegistry,
    tmp_path: Path,
    expected: np.ndarray,
    obtained: np.ndarray,
    gate: Gate,
    match: str,
) -> None:
    pair = _pair(kinds, npy(tmp_path / "a.npy", expected), npy(tmp_path / "b.npy", obtained))
    with pytest.raises(ArtifactError, match=match) as caught:
        kinds.compare(gate, *pair)
    assert caught.value.path == tmp_path / "a.npy"
    assert "'h'" in str(caught.value)


def test_float32_that_is_not_bf16_fails_naming_the_element(
    kinds: KindRegistry, tmp_path: Path
) -> None:
    exact = (_bf16_words(LATENT).astype(np.uint32) << 16).view(np.float32)
    wider = exact.copy()
    wider[2, 5] = np.nextafter(wider[2, 5], np.float32(np.inf))  # a float32 step, not bf16
    expected, obtained = _pair(
        kinds, npy(tmp_path / "a.npy", exact), npy(tmp_path / "b.npy", wider)
    )
    result = kinds.compare(ulp(4, dtype="bfloat16"), expected, obtained)
    assert not result.passed
    assert len(result.metadata_diffs) == 1
    assert "obtained tensor (float32)" in result.metadata_diffs[0]
    assert "at [2, 5], which is not a bfloat16 value" in result.metadata_diffs[0]
    assert kinds.compare(ulp(1), expected, obtained).passed  # as float32: one step


def test_float16_values_in_float64_count_in_float16(kinds: KindRegistry, tmp_path: Path) -> None:
    base = np.linspace(0, 1, 9, dtype=np.float16)
    off = base.copy()
    off[8] = np.nextafter(off[8], np.float16(0))
    expected, obtained = _pair(
        kinds,
        npy(tmp_path / "a.npy", base.astype(np.float64)),
        npy(tmp_path / "b.npy", off.astype(np.float64)),
    )
    assert kinds.compare(ulp(1, dtype="float16"), expected, obtained).passed
    assert not kinds.compare(ulp(1), expected, obtained).passed  # many float64 steps


def test_formats_that_differ_are_a_metadata_difference(kinds: KindRegistry, tmp_path: Path) -> None:
    expected, obtained = _pair(
        kinds,
        npy(tmp_path / "a.npy", np.zeros(3, np.float32)),
        npy(tmp_path / "b.npy", np.zeros(3, np.float16)),
    )
    result = kinds.compare(ulp(1), expected, obtained)
    assert not result.passed
    assert result.metadata_diffs == ["dtype: expected float32, obtained float16"]
    shape = kinds.artifact("h", npy(tmp_path / "c.npy", np.zeros(4, np.float32)))
    assert kinds.compare(ulp(1), expected, shape).metadata_diffs == [
        "shape: expected (3,), obtained (4,)"
    ]


def test_ulp_needs_the_full_data(kinds: KindRegistry, tmp_path: Path) -> None:
    expected, obtained = _pair(
        kinds,
        npy(tmp_path / "a.npy", np.zeros(3, np.float32)),
        npy(tmp_path / "b.npy", np.ones(3, np.float32)),
    )
    digests = Artifact(expected.name, expected.kind, expected.fingerprint, None)
    with pytest.raises(LosslessError, match="full data"):
        kinds.compare(ulp(1), digests, obtained)


# ------------------------------------------------------------------ tolerance statistics


def test_tolerance_on_tensors_carries_the_spread(kinds: KindRegistry, tmp_path: Path) -> None:
    base = np.zeros((10, 20), np.float32)
    near = base.copy()
    near[4, 9] = 3e-7
    near[7, 1] = -1e-7
    expected, obtained = _pair(kinds, npy(tmp_path / "a.npy", base), npy(tmp_path / "b.npy", near))
    result = kinds.compare(tolerance(atol=1e-6), expected, obtained)
    assert result.passed
    assert result.diagnostics["max_abs_diff"] == pytest.approx(3e-7)
    assert result.diagnostics["max_abs_diff_at"] == "[4, 9]"
    assert result.diagnostics["p99_abs_diff"] == 0
    assert result.diagnostics["count_beyond"] == 0
    assert "max_abs_diff_at=[4, 9]" in result.message()
    row = gate_row("t", result)
    assert row.verdict == "LOSSY-PASS"
    assert row.detail == "200 elements: max |diff| 3e-07 at [4, 9], p99 0, 0 beyond"
    tight = kinds.compare(tolerance(atol=2e-7), expected, obtained)
    assert not tight.passed
    assert tight.diagnostics["count_beyond"] == tight.mismatch_count == 1


def test_tolerance_on_audio_carries_the_spread(kinds: KindRegistry, tmp_path: Path) -> None:
    data = np.zeros((300, 2), dtype=np.float32)
    near = data.copy()
    near[120, 1] = 2e-6
    for name, samples in (("a.wav", data), ("b.wav", near)):
        soundfile.write(tmp_path / name, samples, 8000, subtype="FLOAT", format="WAV")
    expected, obtained = _pair(kinds, tmp_path / "a.wav", tmp_path / "b.wav")
    result = kinds.compare(tolerance(atol=1e-5), expected, obtained)
    assert result.passed
    assert result.diagnostics["max_abs_diff_at"] == "sample 120 (channel 1)"
    assert result.diagnostics["count_beyond"] == 0
    assert result.diagnostics["bitwise_differing"] == 1
    failed = kinds.compare(tolerance(atol=1e-6), expected, obtained)
    assert failed.diagnostics["count_beyond"] == 1


@pytest.mark.slow
def test_tolerance_on_video_carries_the_spread(kinds: KindRegistry, tmp_path: Path) -> None:
    from tests.e2e.mediagen import gray_frames, write_video

    frames = gray_frames(count=6)
    changed = frames.copy()
    changed[4, 100] = (int(changed[4, 100]) + 9) % 256
    expected, obtained = _pair(
        kinds,
        write_video(tmp_path / "a.mp4", frames),
        write_video(tmp_path / "b.mp4", changed),
    )
    result = kinds.compare(tolerance(atol=255), expected, obtained)
    assert result.passed
    assert result.diagnostics["max_abs_diff"] == 9
    assert result.diagnostics["max_abs_diff_at"] == "stream 0 frame 4 sample 100"
    assert result.diagnostics["p99_abs_diff"] == 0
    assert result.diagnostics["count_beyond"] == 0
    tight = kinds.compare(tolerance(atol=8), expected, obtained)
    assert not tight.passed
    assert tight.diagnostics["count_beyond"] == 1
    assert tight.mismatch_count == 1  # frames


@PROPERTY
@given(
    values=hnp.arrays(np.uint16, st.integers(1, 400)),
    cut=st.integers(0, 400),
)
def test_spread_p99_is_numpys_inverted_cdf(values: np.ndarray, cut: int) -> None:
    spread = Spread()
    # Part counted in a histogram, part kept, as video and tensors mix them.
    spread.add(values[:cut].astype(np.int64), 0, str, histogram=True)
    spread.add(values[cut:].astype(np.int64), 0, str)
    want = np.percentile(values, 99, method="inverted_cdf")
    assert spread.p99() == want
    assert spread.largest == values.max()


# ------------------------------------------------------------------ verify


def _entry(gate: str, passed: bool, **diagnostics: Any) -> dict[str, Any]:
    result = GateResult(
        artifact="h.npy",
        kind="tensor",
        gate=gate,
        lossless=False,
        passed=passed,
        unit="element",
        mismatch_count=diagnostics.get("count_beyond"),
        total=256,
        diagnostics=diagnostics,
        first_mismatch=None if passed else "[3, 7]: ...",
    )
    return {**result.to_dict(), "evidence": {"golden": {}, "obtained": {}}}


TOL = "tolerance(atol=1e-06, rtol=0)"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (_entry("ulp(1)", True, max_ulp=1, p99_ulp=0, count_beyond=0), None),
        (_entry("ulp(1)", False, max_ulp=2, p99_ulp=0, count_beyond=1), None),
        (_entry("ulp(1)", True, max_ulp=2, p99_ulp=0, count_beyond=1), "count_beyond=1"),
        (_entry("ulp(1)", True, max_ulp=3, p99_ulp=0, count_beyond=0), "disagree"),
        (_entry("ulp(1)", True, max_ulp=1, p99_ulp=2, count_beyond=0), "above max_ulp"),
        (_entry("ulp(1)", True), "without max_ulp"),
        (_entry("ulp(1)", False, max_ulp=0, p99_ulp=0, count_beyond=0), "no metadata"),
        (_entry(TOL, True, max_abs_diff=1e-7, count_beyond=0), None),
        (_entry(TOL, True, max_abs_diff=1.0, count_beyond=0), "disagree"),
        (_entry(TOL, True, max_abs_diff=1e-7, count_beyond=2), "count"),
    ],
)
def test_verify_checks_lossy_statistics_against_the_verdict(
    tmp_path: Path, kinds: KindRegistry, entry: dict[str, Any], problem: str | None
) -> None:
    found = check_gates([entry], ReceiptRecord.from_json({}), Context(tmp_path / "r.json", kinds))
    if problem is None:
        assert found == []
    else:
        assert found
        assert any(problem in line for line in found), found
        assert all(line.startswith("gates[0] h.npy: ") for line in found)


def test_lossy_figure_without_statistics_is_none() -> None:
    assert lossy_figure(ulp(1), {}) is None
    assert lossy_figure(Gate("elementwise"), {"max_ulp": 1}) is None


def test_byte_order_and_scalars(kinds: KindRegistry, tmp_path: Path) -> None:
    little = np.array([1.0, 2.0, 3.0], "<f4")
    big = little.astype(">f4")
    big[1] = np.nextafter(big[1], np.float32(0))
    expected, obtained = _pair(kinds, npy(tmp_path / "a.npy", little), npy(tmp_path / "b.npy", big))
    result = kinds.compare(ulp(1), expected, obtained)
    assert result.passed
    assert result.diagnostics["max_ulp_at"] == "[1]"
    assert any("float32 (expected) and >f4 (obtained)" in note for note in result.notes)
    one = np.array(1.0, np.float64)
    expected, obtained = _pair(
        kinds, npy(tmp_path / "c.npy", one), npy(tmp_path / "d.npy", np.nextafter(one, 2.0))
    )
    scalar = kinds.compare(ulp(0), expected, obtained)
    assert not scalar.passed
    assert scalar.first_mismatch is not None
    assert scalar.first_mismatch.startswith("[]: expected 1.0")


def test_verify_asks_no_statistics_of_a_plugins_own_lossy_kind(
    tmp_path: Path, kinds: KindRegistry
) -> None:
    entry = {**_entry(TOL, True), "kind": "csv"}
    assert (
        check_gates([entry], ReceiptRecord.from_json({}), Context(tmp_path / "r.json", kinds)) == []
    )
