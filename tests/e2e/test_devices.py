"""End-to-end tests of device allocations through real pytest processes and real locks.

Each inner test records the interval during which it held its devices; the outer test
checks that no two intervals on one device overlap, and that tests did run at the same
time on different devices (so the check could have failed).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.devices import Allocator, CpuBackend, CudaBackend

pytestmark = pytest.mark.slow

HOLDER = """
import json, os, time
import pytest

@pytest.mark.npu(devices=2)
@pytest.mark.parametrize("n", range({count}))
def test_hold(n, devices):
    start = time.time()
    time.sleep({sleep})
    end = time.time()
    line = json.dumps({{"ids": list(devices.ids), "start": start, "end": end,
                        "pid": os.getpid(), "env": devices.env}})
    with open(os.environ["INTERVALS"], "a") as out:
        out.write(line + "\\n")
"""


def cpu_args(locks: Path, *more: str) -> list[str]:
    return [
        "--lossless-backend=cpu",
        "--lossless-devices=0-3",
        f"--lossless-lock-dir={locks}",
        "-p",
        "no:cacheprovider",
        *more,
    ]


def read_intervals(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def same_device_overlaps(records: Sequence[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """(device, i, j) for every two records that held one device at the same time."""
    found = []
    for i, a in enumerate(records):
        for j in range(i + 1, len(records)):
            b = records[j]
            if a["start"] < b["end"] and b["start"] < a["end"]:
                found.extend((d, i, j) for d in set(a["ids"]) & set(b["ids"]))
    return found


def concurrent_pairs(records: Sequence[dict[str, Any]]) -> int:
    return sum(
        1
        for i, a in enumerate(records)
        for b in records[i + 1 :]
        if a["start"] < b["end"] and b["start"] < a["end"]
    )


def test_overlap_check_can_fail() -> None:
    records = [
        {"ids": ["0", "1"], "start": 0.0, "end": 1.0},
        {"ids": ["1", "2"], "start": 0.5, "end": 1.5},
        {"ids": ["3"], "start": 0.2, "end": 0.3},
    ]
    assert same_device_overlaps(records) == [("1", 0, 1)]
    assert concurrent_pairs(records) == 2


def check_schedule(records: Iterable[dict[str, Any]], expected: int) -> None:
    records = list(records)
    assert len(records) == expected
    assert same_device_overlaps(records) == []
    assert all(len(set(r["ids"])) == 2 and set(r["ids"]) <= {"0", "1", "2", "3"} for r in records)
    assert all(r["env"] == {"PYTEST_LOSSLESS_CPU_SLOTS": ",".join(r["ids"])} for r in records)
    assert concurrent_pairs(records) > 0, "no two tests ran at once: the check proved nothing"


def test_xdist_workers_never_share_a_device(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    intervals = tmp_path / "intervals.jsonl"
    monkeypatch.setenv("INTERVALS", str(intervals))
    pytester.makepyfile(test_pairs=HOLDER.format(count=8, sleep=0.3))
    result = pytester.runpytest_subprocess(*cpu_args(tmp_path / "locks", "-p", "xdist", "-n", "4"))
    result.assert_outcomes(passed=8)
    check_schedule(read_intervals(intervals), 8)
    # 8 tests of 2 devices on 4 devices under 4 workers: some waited, and said so on stderr.
    assert "waits for 2 cpu device(s) of [0,1,2,3]" in result.stderr.str()


def test_two_pytest_processes_started_at_once(pytester: pytest.Pytester, tmp_path: Path) -> None:
    intervals = tmp_path / "intervals.jsonl"
    pytester.makepyfile(test_pairs=HOLDER.format(count=4, sleep=0.3))
    env = {**os.environ, "INTERVALS": str(intervals)}
    argv = [sys.executable, "-m", "pytest", "-q", *cpu_args(tmp_path / "locks")]
    runs = [
        subprocess.Popen(
            argv,
            cwd=pytester.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    records = read_intervals(intervals)
    check_schedule(records, 8)
    assert len({r["pid"] for r in records}) == 2


def wait_for(path: Path, process: subprocess.Popen[str], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"holder ended early: {process.communicate()[0]}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_sigkilled_holder_frees_its_devices_within_a_second(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    locks = tmp_path / "locks"
    held = tmp_path / "held"
    pytester.makepyfile(
        test_holder=f"""
        import pathlib, time
        import pytest

        @pytest.mark.npu(devices=2)
        def test_keeps_them(devices):
            pathlib.Path({str(held)!r}).write_text(",".join(devices.ids))
            time.sleep(60)
    """
    )
    holder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "--lossless-backend=cpu",
            "--lossless-devices=0,1",
            f"--lossless-lock-dir={locks}",
            "-p",
            "no:cacheprovider",
        ],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(held, holder)
        record = json.loads((locks / "cpu-slot-0.holder.json").read_text())
        assert record["pid"] == holder.pid
        assert record["test"].endswith("test_keeps_them")
        waiting = threading.Event()
        acquired: list[float] = []
        allocator = Allocator(
            [CpuBackend()],
            backend="cpu",
            pool=("0", "1"),
            lock_dir=locks,
            timeout=30,
            on_wait=lambda line: waiting.set(),
        )

        def take() -> None:
            allocation = allocator.acquire(2, "t::next")
            acquired.append(time.monotonic())
            allocation.release()

        thread = threading.Thread(target=take)
        thread.start()
        assert waiting.wait(10), "the next acquirer never had to wait"
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()  # from the holder's death, not from the signal's sending
        thread.join(10)
        assert acquired, "the devices of the killed holder never came free"
        assert acquired[0] - killed < 1.0
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()
    assert holder.returncode == -signal.SIGKILL


def test_timeout_names_the_holder_and_too_many_fails_at_once(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    locks = tmp_path / "locks"
    pytester.makepyfile(
        test_wants="""
        import pytest

        @pytest.mark.npu(devices=2)
        def test_pair(devices):
            pass

        @pytest.mark.gpu(devices=5)
        def test_too_many():
            pass

        def test_unmarked_test_holds_nothing(request):
            from pytest_lossless.plugin.devices import ALLOCATION_KEY
            assert ALLOCATION_KEY not in request.node.stash
    """
    )
    allocator = Allocator(
        [CpuBackend()], backend="cpu", pool=("0", "1", "2", "3"), lock_dir=locks, timeout=5
    )
    with allocator.acquire(3, "tests/outer.py::test_keeps_three"):
        started = time.monotonic()
        result = pytester.runpytest_subprocess(
            *cpu_args(locks, "--lossless-lock-timeout=0.6", "-rE")
        )
        took = time.monotonic() - started
    result.assert_outcomes(passed=1, errors=2)
    out = result.stdout.str()
    assert "AllocationTimeout" in out
    assert "tests/outer.py::test_keeps_three" in out
    assert f"pid {os.getpid()}" in out
    assert "waits for 2 cpu device(s) of [0,1,2,3]" in out
    assert "asks for 5 cpu devices but the pool has only 4" in out
    assert took < 20


def test_marked_tests_hold_devices_without_the_fixture(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(
        test_marked="""
        import json, pathlib
        import pytest
        from pytest_lossless.plugin.devices import ALLOCATION_KEY

        @pytest.mark.npu(devices=3)
        def test_marked_only(request):
            allocation = request.node.stash[ALLOCATION_KEY]
            assert allocation.ids == ("0", "1", "2")
            record = json.loads((pathlib.Path(allocation.lock_dir) /
                                 "cpu-slot-2.holder.json").read_text())
            assert record["test"] == request.node.nodeid

        def test_plain_devices_fixture_takes_one(devices):
            assert len(devices.ids) == 1 and devices.backend == "cpu"
            assert devices.to_dict()["identity"][0]["lock_key"] == "cpu-slot-" + devices.ids[0]

        @pytest.mark.npu(devices=0)
        def test_bad_marker():
            pass

        @pytest.mark.npu
        def test_released_after(request):
            lock_dir = pathlib.Path(request.node.stash[ALLOCATION_KEY].lock_dir)
            assert not (lock_dir / "cpu-slot-1.holder.json").exists()

        # A mark on one parameter only: its siblings hold nothing.
        @pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.npu), 3])
        def test_param_marks(n, request):
            assert (ALLOCATION_KEY in request.node.stash) == (n == 2)
    """
    )
    result = pytester.runpytest_subprocess(*cpu_args(tmp_path / "locks"))
    result.assert_outcomes(passed=6, errors=1)
    result.stdout.fnmatch_lines(["*marker npu(devices=...)=0: must be a whole number >= 1*"])


def test_no_accelerator_skips_naming_the_cpu_backend(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # neither npu-smi nor nvidia-smi
    monkeypatch.delenv("PYTEST_LOSSLESS_BACKEND", raising=False)
    pytester.makepyfile(
        test_auto="""
        import pytest

        @pytest.mark.gpu
        def test_needs_gpu():
            pass

        def test_plain():
            pass
    """
    )
    result = pytester.runpytest_subprocess(
        "--lossless-backend=auto", "-rs", f"--lossless-lock-dir={tmp_path / 'locks'}"
    )
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*no accelerator found*--lossless-backend=cpu*"])


def test_a_plugin_backend_overrides_a_builtin_and_markers_match_it(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makeconftest("""
        import pytest
        from pytest_lossless.devices import Device

        class BoardNpu:
            name = "npu"
            emulated = False
            observes_usage = True

            def available(self):
                return True

            def discover(self):
                return [Device(id=str(i), bus_id=f"0000:c{i}:00.0", backend="npu")
                        for i in range(4)]

            def visibility_env(self, devices):
                return {"ASCEND_RT_VISIBLE_DEVICES": ",".join(sorted(d.id for d in devices))}

            def foreign_processes(self, devices):
                return []

        def pytest_lossless_backends():
            return [BoardNpu()]
    """)
    pytester.makepyfile(
        test_board="""
        import pytest

        @pytest.mark.npu(devices=2)
        def test_on_npu(devices):
            assert devices.backend == "npu"
            assert devices.env == {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}
            assert [i["bus_id"] for i in devices.identity] == ["0000:c0:00.0", "0000:c1:00.0"]
            assert devices.idle_before.observed is True

        @pytest.mark.gpu
        def test_on_gpu():
            pass
    """
    )
    result = pytester.runpytest_subprocess(
        "--lossless-backend=npu", "-rs", f"--lossless-lock-dir={tmp_path / 'locks'}"
    )
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*marked gpu, but the device backend is npu*"])


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is None or not CudaBackend().available(),
    reason="needs nvidia-smi and a GPU (run on the device machine)",
)
def test_cuda_real_gpu_marker(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(
        test_gpu="""
        import json, pytest

        @pytest.mark.gpu
        def test_gpu(devices):
            assert devices.backend == "cuda"
            assert devices.env["CUDA_VISIBLE_DEVICES"].startswith("GPU-")
            assert devices.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
            assert devices.idle_before.observed is True
            print("ALLOCATION", json.dumps(devices.to_dict()))
    """
    )
    result = pytester.runpytest_subprocess(
        "--lossless-backend=cuda", "-s", f"--lossless-lock-dir={tmp_path / 'locks'}"
    )
    result.assert_outcomes(passed=1)
    print(result.stdout.str())
