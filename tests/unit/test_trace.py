"""The trace writer (pytest_lossless.trace) and its reader (compare.divergence)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_lossless import trace
from pytest_lossless.compare import divergence
from pytest_lossless.errors import ArtifactError


def _write(folder: Path, monkeypatch: pytest.MonkeyPatch, steps: list[dict[str, np.ndarray]],
           raw_limit: int | None = None) -> Path:  # fmt: skip
    """A trace of a few steps, each recording its tensors inside ``step k``."""
    monkeypatch.setenv(trace.TRACE_DIR, str(folder))
    if raw_limit is not None:
        monkeypatch.setenv(trace.RAW_LIMIT, str(raw_limit))
    with trace.stage("denoise"):
        for k, tensors in enumerate(steps):
            with trace.stage(f"step {k}"):
                for name, value in tensors.items():
                    trace.tensor(name, value)
    trace.release(folder)
    monkeypatch.delenv(trace.TRACE_DIR)
    return folder


def _lines(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / trace.MANIFEST).read_text().splitlines()]


def test_off_is_a_no_op_opening_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(trace.TRACE_DIR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert not trace.enabled()
    with trace.stage("s"):
        trace.tensor("x", np.ones(3))
    assert list(tmp_path.iterdir()) == []


def test_manifest_lines_order_occurrence_stage_and_bytes(tmp_path, monkeypatch):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    folder = _write(tmp_path / "t", monkeypatch, [{"a": x, "b": np.int64(7)}, {"a": x + 1}])
    lines = _lines(folder)
    assert lines[0]["format"] == trace.FORMAT
    assert lines[0]["version"] == trace.VERSION
    tensors = [r for r in lines if r["type"] == "tensor"]
    assert [(r["order"], r["name"], r["occurrence"], r["stage"]) for r in tensors] == [
        (0, "a", 0, "denoise/step 0"),
        (1, "b", 0, "denoise/step 0"),
        (2, "a", 1, "denoise/step 1"),
    ]
    assert tensors[0]["dtype"] == "float32"
    assert tensors[0]["shape"] == [2, 3]
    assert tensors[1]["shape"] == []
    assert tensors[1]["dtype"] == "int64"
    data = (folder / trace.DATA).read_bytes()
    first = data[tensors[0]["offset"] : tensors[0]["offset"] + tensors[0]["nbytes"]]
    assert first == x.astype("<f4").tobytes()
    assert tensors[0]["sha256"] == hashlib.sha256(first).hexdigest()
    stages = [r["stage"] for r in lines if r["type"] == "stage"]
    assert stages == ["denoise/step 0", "denoise/step 1", "denoise"]


def test_big_endian_arrays_are_stored_little_endian(tmp_path, monkeypatch):
    big = np.arange(4, dtype=">f4")
    folder = _write(tmp_path / "t", monkeypatch, [{"x": big}])
    read = divergence.load_trace(folder)
    np.testing.assert_array_equal(read.array(read.entries[0]), np.arange(4, dtype=np.float32))
    assert read.entries[0].dtype == "float32"


def test_above_the_raw_limit_only_the_digest(tmp_path, monkeypatch):
    folder = _write(tmp_path / "t", monkeypatch, [{"small": np.ones(2), "big": np.ones(100)}],
                    raw_limit=64)  # fmt: skip
    read = divergence.load_trace(folder)
    small, big = read.entries
    assert small.offset == 0
    assert big.offset is None
    assert big.sha256 == hashlib.sha256(np.ones(100).tobytes()).hexdigest()
    assert read.array(big) is None
    assert (folder / trace.DATA).stat().st_size == 16


def test_a_bad_name_or_raw_limit_says_what_to_use(tmp_path, monkeypatch):
    monkeypatch.setenv(trace.TRACE_DIR, str(tmp_path / "t"))
    with pytest.raises(ValueError, match="non-empty string"):
        trace.tensor("", np.ones(1))
    with pytest.raises(ValueError, match="without '/'"), trace.stage("a/b"):
        pass
    monkeypatch.setenv(trace.TRACE_DIR, str(tmp_path / "u"))
    monkeypatch.setenv(trace.RAW_LIMIT, "lots")
    with pytest.raises(ValueError, match="whole number of bytes"):
        trace.tensor("x", np.ones(1))


def test_a_second_process_in_one_folder_writes_its_own_manifest(tmp_path):
    tracer_a = trace.Tracer(tmp_path)
    tracer_a.tensor("x", np.ones(1))
    tracer_a.close()
    tracer_b = trace.Tracer(tmp_path)
    tracer_b.tensor("x", np.ones(1))
    tracer_b.close()
    read = divergence.load_trace(tmp_path)
    assert len(read.entries) == 1
    assert read.others
    assert read.others[0].startswith("manifest.")


def test_a_writer_failure_is_raised_in_the_model_thread(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    tracer = trace.Tracer(blocker / "trace")
    tracer.tensor("x", np.ones(1))
    with pytest.raises(OSError):
        tracer.close()


def test_a_buffer_reused_after_the_call_is_traced_as_it_was(tmp_path):
    buffer = np.zeros(1000, np.float32)
    tracer = trace.Tracer(tmp_path)
    for k in range(20):
        buffer[:] = k
        tracer.tensor("b", buffer)
    tracer.close()
    read = divergence.load_trace(tmp_path)
    assert [float(read.array(e)[0]) for e in read.entries] == [float(k) for k in range(20)]


def test_importing_trace_loads_none_of_the_plugin():
    code = (
        "import sys; import pytest_lossless.trace; "
        "print(sorted(m for m in sys.modules if m.startswith('pytest_lossless')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['pytest_lossless', 'pytest_lossless.trace']"


# ------------------------------------------------------------------ divergence


def _pair(tmp_path, monkeypatch, change_at: int, *, raw_limit: int | None = None):
    rng = np.random.default_rng(1)
    base = [{"h": rng.standard_normal(50).astype(np.float32),
             "y": rng.standard_normal(50).astype(np.float32)} for _ in range(4)]  # fmt: skip
    other = [dict(s) for s in base]
    for k in range(change_at, 4):
        y = other[k]["y"].copy()
        bits = y.view(np.uint32)
        bits[: 3 * (k - change_at + 1)] += np.uint32(k - change_at + 1)  # 1, 2, 3 ulps further
        other[k] = {"h": other[k]["h"], "y": y}
    left = _write(tmp_path / "left", monkeypatch, base, raw_limit=raw_limit)
    right = _write(tmp_path / "right", monkeypatch, other, raw_limit=raw_limit)
    return left, right


def test_identical_traces(tmp_path, monkeypatch):
    left, right = _pair(tmp_path, monkeypatch, change_at=4)
    found = divergence.first_divergence(left, right)
    assert found.identical
    assert found.first is None
    assert found.aligned == 8
    assert found.headline() == "traces identical (8 tensors)"


def test_first_divergence_last_identical_and_growth(tmp_path, monkeypatch):
    left, right = _pair(tmp_path, monkeypatch, change_at=1)
    found = divergence.first_divergence(left, right)
    assert found.first is not None
    assert (found.first.name, found.first.occurrence, found.first.stage) == (
        "y",
        1,
        "denoise/step 1",
    )
    assert found.first.differing == 3
    assert found.first.max_ulp == 1
    assert found.first.total == 50
    assert found.last_identical is not None
    assert found.last_identical.key == ("h", 1)
    assert found.headline().startswith("first divergence: y (occurrence 1, stage denoise/step 1)")
    assert "last identical: h#1" in found.headline()
    # After it: h#2 identical, y#2 worse, h#3 identical, y#3 worse still.
    assert [(g.label, g.differing, g.max_ulp) for g in found.growth] == [
        ("y#1", 3, 1), ("h#2", 0, None), ("y#2", 6, 2), ("h#3", 0, None), ("y#3", 9, 3)
    ]  # fmt: skip
    assert found.differing == 3
    record = found.to_json()
    assert record["first"]["name"] == "y"
    assert json.dumps(record)


def test_digest_only_still_names_the_first_divergence(tmp_path, monkeypatch):
    left, right = _pair(tmp_path, monkeypatch, change_at=2, raw_limit=0)
    found = divergence.first_divergence(left, right)
    assert found.first is not None
    assert found.first.label == "y#2"
    assert found.first.differing is None
    assert "digest only" in found.first.figures()


def test_names_in_one_trace_only_are_listed(tmp_path, monkeypatch):
    x, y = np.ones(3, np.float32), np.zeros(3, np.float32)
    left = _write(tmp_path / "l", monkeypatch, [{"proj": x, "scaled": y}, {"proj": x, "scaled": y}])
    right = _write(tmp_path / "r", monkeypatch, [{"scaled": y + 1}, {"scaled": y + 1}])
    found = divergence.first_divergence(left, right, left_label="control", right_label="fused")
    assert found.only_left == (("proj", 2),)
    assert found.only_right == ()
    assert found.first is not None
    assert found.first.name == "scaled"
    assert found.last_identical is None
    assert "only in control: proj x2" in "\n".join(found.lines())


def test_dtype_and_shape_changes_are_divergences(tmp_path, monkeypatch):
    left = _write(tmp_path / "l", monkeypatch, [{"a": np.ones(3, np.float32)}])
    right = _write(tmp_path / "r", monkeypatch, [{"a": np.ones(3, np.float16)}])
    found = divergence.first_divergence(left, right)
    assert found.first is not None
    assert "dtype float32 against float16" in found.first.figures()


def test_integers_count_elements_and_largest_difference(tmp_path, monkeypatch):
    left = _write(tmp_path / "l", monkeypatch, [{"a": np.array([1, 2, 3], np.int16)}])
    right = _write(tmp_path / "r", monkeypatch, [{"a": np.array([1, 9, 3], np.int16)}])
    first = divergence.first_divergence(left, right).first
    assert first is not None
    assert (first.differing, first.max_ulp, first.max_abs) == (1, None, 7.0)


def test_order_change_is_noted(tmp_path, monkeypatch):
    x = np.ones(2)
    left = _write(tmp_path / "l", monkeypatch, [{"a": x, "b": x}])
    right = _write(tmp_path / "r", monkeypatch, [{"b": x, "a": x}])
    assert "another order" in divergence.first_divergence(left, right).order_note


def test_reader_errors_name_the_file(tmp_path):
    with pytest.raises(ArtifactError, match="no trace here"):
        divergence.load_trace(tmp_path)
    (tmp_path / trace.MANIFEST).write_text('{"type": "header", "format": "other"}\n')
    with pytest.raises(ArtifactError, match="line 1 is not a trace record"):
        divergence.load_trace(tmp_path)


def test_a_last_line_cut_short_is_dropped(tmp_path):
    tracer = trace.Tracer(tmp_path)
    tracer.tensor("x", np.ones(1))
    tracer.close()
    with open(tmp_path / trace.MANIFEST, "a") as handle:
        handle.write('{"type": "tensor", "ord')
    assert len(divergence.load_trace(tmp_path).entries) == 1


def test_trace_folder_of_a_run():
    assert divergence.trace_folder({"trace_dir": "/x/trace"}) == Path("/x/trace")
    assert divergence.trace_folder({"out": "/x"}) is None

    class Run:
        def __init__(self) -> None:
            self.record = {"trace_dir": "/r/trace"}

    assert divergence.trace_folder(Run()) == Path("/r/trace")


def test_stage_rows(tmp_path, monkeypatch):
    left, right = _pair(tmp_path, monkeypatch, change_at=4)
    rows = divergence.stage_rows(left, right)
    assert [r.stage for r in rows] == [f"denoise/step {k}" for k in range(4)] + ["denoise"]
    assert all(r.control_seconds is not None and r.ratio is not None for r in rows)


def test_torch_hooks_record_named_modules(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).to(torch.bfloat16)
    monkeypatch.setenv(trace.TRACE_DIR, str(tmp_path))
    handles = trace.torch_hooks(model)
    model(torch.ones(2, 4, dtype=torch.bfloat16))
    for handle in handles:
        handle.remove()
    trace.release(tmp_path)
    read = divergence.load_trace(tmp_path)
    assert [(e.name, e.dtype, e.shape) for e in read.entries] == [
        ("0", "bfloat16", (2, 3)), ("1", "bfloat16", (2, 3)), ("model", "bfloat16", (2, 3))
    ]  # fmt: skip
    words = read.array(read.entries[2])
    expected = model(torch.ones(2, 4, dtype=torch.bfloat16)).view(torch.int16).numpy()
    assert words is not None
    assert (words == expected.view(np.uint16)).all()


# ------------------------------------------------------------------ lossless.compare(trace=True)


def _model(scale_at: int | None, counter=None):
    """An in-process producer tracing two blocks over three steps; from step ``scale_at`` its
    'proj' rounds differently (a fused operation), or with ``counter`` only its second run does."""

    def run():
        index = next(counter) if counter is not None else 0
        x = np.linspace(0.1, 1.0, 64, dtype=np.float32)
        for k in range(3):
            with trace.stage(f"step {k}"):
                trace.tensor("block.in", x)
                proj = x * np.float32(1.1)
                moved = scale_at is not None and k >= scale_at and (counter is None or index)
                if moved:
                    proj = np.nextafter(proj, np.float32(2.0))
                trace.tensor("block.proj", proj)
                x = proj * np.float32(0.9)
        return {"out.npy": x}

    return run


def test_compare_fail_names_the_first_divergence(tmp_path, kinds):
    from pytest_lossless.compare.repeatability import compare_control_candidate, rederive

    verdict = compare_control_candidate(
        _model(None), _model(1), runs=2, kinds=kinds, workdir=tmp_path, trace=True
    )
    assert verdict.verdict == "FAIL"
    assert verdict.divergence is not None
    assert verdict.divergence["between"] == ["control#1", "candidate"]
    assert verdict.divergence["first"]["name"] == "block.proj"
    assert verdict.divergence["first"]["stage"] == "step 1"
    assert verdict.divergence["last_identical"]["name"] == "block.in"
    assert "first divergence: block.proj" in verdict.message()
    assert verdict.summary().endswith("; first divergence: block.proj")
    assert all(r["trace_dir"] for r in verdict.runs)
    assert rederive(verdict.to_json()) == "FAIL"  # the divergence explains, never decides
    # The receipt's record reads back into the same records and writes the same JSON (#19).
    from pytest_lossless.compare.repeatability import LosslessVerdict

    written = json.loads(json.dumps(verdict.to_json(), default=str))
    again = LosslessVerdict.from_json(written)
    assert again.divergence is not None
    assert again.divergence.first is not None
    assert again.divergence.first.name == "block.proj"
    assert json.dumps(again.to_json(), default=str) == json.dumps(written)


def test_compare_inconclusive_names_where_the_controls_part(tmp_path, kinds):
    import itertools

    from pytest_lossless.compare.repeatability import compare_control_candidate

    verdict = compare_control_candidate(
        _model(2, itertools.count()), _model(None), runs=2, kinds=kinds, workdir=tmp_path,
        trace=True,
    )  # fmt: skip
    assert verdict.verdict == "INCONCLUSIVE"
    assert verdict.divergence is not None
    assert verdict.divergence["between"] == ["control#1", "control#2"]
    assert verdict.divergence["first"]["stage"] == "step 2"
    assert "first divergence: block.proj (occurrence 2, stage step 2)" in verdict.message()


def test_compare_pass_records_identical_traces(tmp_path, kinds):
    from pytest_lossless.compare.repeatability import compare_control_candidate

    verdict = compare_control_candidate(
        _model(None), _model(None), runs=2, kinds=kinds, workdir=tmp_path, trace=True
    )
    assert verdict.verdict == "PASS"
    assert verdict.divergence is not None
    assert verdict.divergence["identical"] is True
    assert "divergence" not in verdict.message()


def test_compare_without_a_trace_says_so(tmp_path, kinds):
    from pytest_lossless.compare.repeatability import compare_control_candidate

    def untraced(value):
        return lambda: {"out.npy": np.array([value], np.float32)}

    verdict = compare_control_candidate(
        untraced(1), untraced(2), runs=2, kinds=kinds, workdir=tmp_path, trace=True
    )
    assert verdict.verdict == "FAIL"
    assert verdict.divergence is not None
    assert "no trace from control#1 and candidate" in verdict.divergence["error"]
    assert "no trace from" in verdict.message()
    assert trace.TRACE_DIR not in __import__("os").environ


def test_traced_stage_times_from_separate_runs(tmp_path):
    calls = []

    def arm(name):
        def run():
            calls.append((name, trace.enabled()))
            with trace.stage("load"):
                pass
            return {}

        return run

    found = divergence.traced_stage_times(arm("c"), arm("d"), tmp_path)
    assert calls == [("c", True), ("d", True)]
    assert [r["stage"] for r in found["rows"]] == ["load"]
    assert found["rows"][0]["control_seconds"] is not None
    assert not trace.enabled()
    silent = divergence.traced_stage_times(lambda: {}, arm("d"), tmp_path / "x")
    assert "no trace from the control run" in silent["error"]


def test_an_in_process_trace_closes_its_files_with_the_arm(tmp_path):
    import contextlib
    import os

    folder = tmp_path / "arm"
    with divergence.tracing_into(folder):
        trace.tensor("x", np.ones(2))
    open_files = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed already
            open_files.append(os.readlink(f"/proc/self/fd/{fd}"))
    assert not [f for f in open_files if f.startswith(str(folder))]
    assert divergence.load_trace(folder).entries[0].name == "x"


def test_a_forked_child_traces_with_a_writer_of_its_own(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv(trace.TRACE_DIR, str(tmp_path))
    trace.tensor("parent", np.ones(1))
    pid = os.fork()
    if pid == 0:  # the child: its tensor must not wait on the parent's writer thread
        try:
            for _ in range(20):
                trace.tensor("child", np.ones(1))
            trace.release(tmp_path)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    trace.release(tmp_path)
    assert status == 0
    assert [e.name for e in divergence.load_trace(tmp_path).entries] == ["parent"]
    assert divergence.load_trace(tmp_path).others == (f"manifest.{pid}.jsonl",)
