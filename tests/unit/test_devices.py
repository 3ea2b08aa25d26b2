"""Unit tests of devices.py: tool parsing, environments, pools, locks and the allocator.

Parsers run against captured ``nvidia-smi`` outputs and reconstructed ``npu-smi`` ones
(tests/data/smi/README.md); locks are real ``flock`` locks in a private folder. The
``*_cuda_real_*`` tests run only where ``nvidia-smi`` answers (the device machine).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_lossless.core.clock import FakeClock
from pytest_lossless.devices import (
    Allocator,
    CpuBackend,
    CudaBackend,
    Device,
    LockDir,
    NpuBackend,
    ToolError,
    collect_backends,
    merge_backends,
    normalize_bus_id,
    parse_npu_smi_board,
    parse_npu_smi_info,
    parse_npu_smi_map,
    parse_nvidia_smi_apps,
    parse_nvidia_smi_gpus,
)
from pytest_lossless.devices.locks import HolderRecord
from pytest_lossless.errors import AllocationError, AllocationTimeout, ConfigError

SMI = Path(__file__).resolve().parent.parent / "data" / "smi"


def smi(name: str) -> str:
    return (SMI / name).read_text(encoding="utf-8")


def listed_gpus(text: str) -> dict[int, str]:
    """index -> UUID from ``nvidia-smi -L`` (an independent source to check parsing against)."""
    return {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"^GPU (\d+): .*\(UUID: (GPU-[0-9a-f-]+)\)", text, re.M)
    }


class Runner:
    """A fake tool runner answering from fixture texts by argv."""

    def __init__(self, answers: dict[str, str | Exception]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        key = " ".join(argv[1:])
        for prefix, answer in self.answers.items():
            if key.startswith(prefix):
                if isinstance(answer, Exception):
                    raise answer
                return answer
        raise ToolError(f"unexpected call {argv}")


# ------------------------------------------------------------------ cuda parsing


def test_cuda_parse_captured_query_agrees_with_listing() -> None:
    devices = parse_nvidia_smi_gpus(smi("nvidia_smi_query_gpu.csv"))
    listing = listed_gpus(smi("nvidia_smi_L.txt"))
    assert devices, "the captured query holds at least one GPU"
    assert {int(d.id): d.uuid for d in devices} == listing
    for device in devices:
        assert device.backend == "cuda"
        assert device.lock_key == device.uuid
        assert device.bus_id is not None
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", device.bus_id)
        assert device.memory_used_mib is not None
        assert device.memory_used_mib >= 0
        assert device.name
        assert "H200" in device.name


def test_cuda_parse_brief_query_without_name() -> None:
    plain = parse_nvidia_smi_gpus(smi("nvidia_smi_brief_query.csv"))
    named = parse_nvidia_smi_gpus(smi("nvidia_smi_query_gpu.csv"))
    assert [(d.id, d.uuid, d.bus_id) for d in plain] == [(d.id, d.uuid, d.bus_id) for d in named]
    assert all(d.name is None for d in plain)


def test_cuda_parse_captured_busy_gpu_and_its_process() -> None:
    idle = {d.uuid: d for d in parse_nvidia_smi_gpus(smi("nvidia_smi_query_gpu.csv"))}
    busy = parse_nvidia_smi_gpus(smi("nvidia_smi_query_gpu_busy.csv"))
    apps = parse_nvidia_smi_apps(smi("nvidia_smi_compute_apps_busy.csv"))
    assert parse_nvidia_smi_apps(smi("nvidia_smi_compute_apps_idle.csv")) == []
    assert apps, "the busy capture lists the process holding memory"
    app = apps[0]
    assert app.uuid in idle
    assert isinstance(app.pid, int)
    held = next(d for d in busy if d.uuid == app.uuid)
    before = idle[app.uuid].memory_used_mib
    assert held.memory_used_mib is not None
    assert before is not None
    assert held.memory_used_mib > before + 500  # about 1 GiB was held during the capture


def test_cuda_parse_is_defensive() -> None:
    # Synthetic: the shapes nvidia-smi prints on MIG, old boards, broken infoROMs.
    text = (
        "WARNING: infoROM is corrupted at gpu 0000:1A:00.0\n"
        "\n"
        "0, GPU-11111111-2222-3333-4444-555555555555, 00000000:1A:00.0, [N/A], [Not Supported]\n"
        "1, GPU-66666666-7777-8888-9999-000000000000, 00000000:1B:00.0, 812, 37, Tesla V100, x\n"
        "2, [Unknown Error], 00000000:1C:00.0, 0, 0\n"
        "No devices were found\n"
    )
    devices = parse_nvidia_smi_gpus(text)
    assert [d.id for d in devices] == ["0", "1"]
    assert devices[0].memory_used_mib is None
    assert devices[0].utilization_pct is None
    assert devices[0].bus_id == "0000:1a:00.0"
    assert devices[1].name == "Tesla V100, x"  # the name is last and may hold a comma
    assert parse_nvidia_smi_gpus("") == []
    apps = parse_nvidia_smi_apps(
        "GPU-66666666-7777-8888-9999-000000000000, 4242, /opt/my, app/bin, [N/A]\n"
        "GPU-66666666-7777-8888-9999-000000000000, [N/A], [Not Found], 20\nbogus\n"
    )
    assert apps[0].to_json() == {
        "uuid": "GPU-66666666-7777-8888-9999-000000000000",
        "pid": 4242,
        "process": "/opt/my, app/bin",
        "used_memory_mib": None,
    }
    assert apps[1].pid is None
    assert apps[1].process is None
    assert apps[1].used_memory_mib == 20


def test_device_memory_per_pid_from_captured_and_reconstructed_tables() -> None:
    from pytest_lossless.devices.smi import memory_by_pid, npu_memory_by_pid, nvidia_memory_by_pid

    # The captured busy table: pid 421 held 1542 MiB; the idle one lists nobody.
    assert nvidia_memory_by_pid(smi("nvidia_smi_compute_apps_busy.csv")) == {421: 1542.0}
    assert nvidia_memory_by_pid(smi("nvidia_smi_compute_apps_idle.csv")) == {}
    # One process on two GPUs holds both; unreadable rows (no pid, [N/A]) are left out.
    two = (
        "GPU-11111111-2222-3333-4444-555555555555, 77, python3, 1000\n"
        "GPU-66666666-7777-8888-9999-000000000000, 77, python3, 24\n"
        "GPU-66666666-7777-8888-9999-000000000000, 78, python3, [N/A]\n"
        "GPU-66666666-7777-8888-9999-000000000000, [N/A], [Not Found], 20\n"
    )
    assert nvidia_memory_by_pid(two) == {77: 1024.0}
    assert memory_by_pid([(1, 2.0), (1, None), (None, 5.0), (2, 0.0)]) == {1: 2.0, 2: 0.0}
    # npu-smi's process tables: one chip per card, and a process on one die of a dual-die card.
    assert npu_memory_by_pid(smi("npu_smi_info_910b3_x8.txt")) == {2345678: 45056.0}
    _, processes = parse_npu_smi_info(smi("npu_smi_info_910c_dualdie.txt"))
    assert npu_memory_by_pid(smi("npu_smi_info_910c_dualdie.txt")) == {
        p.pid: p.memory_mib for p in processes if p.pid is not None and p.memory_mib is not None
    }
    assert npu_memory_by_pid("dcmi model initialized failed") == {}


def test_memory_readers_go_through_the_backends_tool() -> None:
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> str:
        calls.append(list(argv))
        cuda = "cuda" in argv[0]
        return smi("nvidia_smi_compute_apps_busy.csv" if cuda else "npu_smi_info_910b3_x8.txt")

    cuda = CudaBackend(smi="cuda-smi", runner=runner).memory_reader()
    assert (cuda.source, cuda.read(1.0)) == ("cuda-smi", {421: 1542.0})
    assert calls[-1][1] == "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"
    npu = NpuBackend(smi="npu-smi", runner=runner).memory_reader()
    assert (npu.source, npu.read(1.0)) == ("npu-smi", {2345678: 45056.0})
    assert calls[-1] == ["npu-smi", "info"]


def test_bus_id_normalization() -> None:
    assert normalize_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    assert normalize_bus_id("0000:c1:00.0") == "0000:c1:00.0"
    assert normalize_bus_id("1a:00.0") == "0000:1a:00.0"
    assert normalize_bus_id("[N/A]") is None
    assert normalize_bus_id("OK") is None


def test_cuda_backend_env_discovery_and_processes_from_captures() -> None:
    runner = Runner(
        {
            "--query-gpu": smi("nvidia_smi_query_gpu_busy.csv"),
            "--query-compute-apps": smi("nvidia_smi_compute_apps_busy.csv"),
        }
    )
    backend = CudaBackend(runner=runner, env={})
    assert backend.available()
    assert backend.problem is None
    devices = backend.discover()
    env = backend.visibility_env(devices)
    assert env == {
        "CUDA_VISIBLE_DEVICES": ",".join(d.uuid or "" for d in devices),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert all(u.startswith("GPU-") for u in env["CUDA_VISIBLE_DEVICES"].split(","))
    procs = backend.foreign_processes(devices)
    apps = parse_nvidia_smi_apps(smi("nvidia_smi_compute_apps_busy.csv"))
    assert [p.pid for p in procs] == [a.pid for a in apps]
    assert procs[0].device == next(d.id for d in devices if d.uuid == apps[0].uuid)
    assert backend.foreign_processes([]) == []


def test_cuda_inherited_visibility_narrows_the_pool() -> None:
    text = (
        "0, GPU-aaaa0000-0000-0000-0000-000000000000, 00000000:1A:00.0, 1, 0\n"
        "1, GPU-bbbb0000-0000-0000-0000-000000000000, 00000000:1B:00.0, 1, 0\n"
        "2, GPU-cccc0000-0000-0000-0000-000000000000, 00000000:1C:00.0, 1, 0\n"
    )
    runner = Runner({"--query-gpu": text})
    assert [d.id for d in CudaBackend(runner=runner, env={}).discover()] == ["0", "1", "2"]
    by_index = CudaBackend(runner=runner, env={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert [d.id for d in by_index.discover()] == ["0", "2"]
    by_uuid = CudaBackend(runner=runner, env={"CUDA_VISIBLE_DEVICES": "GPU-bbbb"})
    assert [d.id for d in by_uuid.discover()] == ["1"]
    nothing = CudaBackend(runner=runner, env={"CUDA_VISIBLE_DEVICES": ""})
    assert not nothing.available()
    assert "no GPU" in (nothing.problem or "")


def test_cuda_backend_unavailable_when_tool_missing_or_failing() -> None:
    missing = CudaBackend(smi="nvidia-smi-that-does-not-exist")
    assert not missing.available()
    assert "not found on PATH" in (missing.problem or "")
    failing = CudaBackend(
        runner=Runner(
            {
                "--query-gpu": ToolError(
                    "nvidia-smi exited with 9: NVIDIA-SMI has failed because it couldn't "
                    "communicate "
                    "with the NVIDIA driver"
                )
            }
        )
    )
    assert not failing.available()
    assert "couldn't communicate" in (failing.problem or "")


# ------------------------------------------------------------------ npu parsing


def test_npu_parse_910b_table_map_and_board() -> None:
    chips, procs = parse_npu_smi_info(smi("npu_smi_info_910b3_x8.txt"))
    assert [(c.npu, c.chip) for c in chips] == [(i, 0) for i in range(8)]
    assert chips[2].bus_id == "0000:81:00.0"
    assert chips[2].aicore_pct == 87
    assert chips[2].memory_used_mib == 48211
    assert chips[0].memory_used_mib == 3161
    assert chips[0].name == "910B3"
    assert chips[0].health == "OK"
    assert [(p.npu, p.chip, p.pid, p.process, p.memory_mib) for p in procs] == [
        (2, 0, 2345678, "python3.10", 45056)
    ]
    mapping = parse_npu_smi_map(smi("npu_smi_info_m_910b3_x8.txt"))
    assert mapping == {(i, 0): i for i in range(8)}  # the Mcu rows (logic id "-") are not devices
    board = parse_npu_smi_board(smi("npu_smi_board_i2.txt"))
    assert board["Serial Number"] == "102415083974"
    assert normalize_bus_id(board["PCIe Bus Info"]) == chips[2].bus_id


def test_npu_backend_discovery_env_and_processes() -> None:
    runner = Runner(
        {
            "info -m": smi("npu_smi_info_m_910b3_x8.txt"),
            "info -t board -i 2": smi("npu_smi_board_i2.txt"),
            "info -t board": ToolError("npu-smi exited with 1"),
            "info": smi("npu_smi_info_910b3_x8.txt"),
        }
    )
    backend = NpuBackend(runner=runner, env={})
    assert backend.available()
    devices = backend.discover()
    assert [d.id for d in devices] == [str(i) for i in range(8)]
    assert devices[2].serial == "102415083974"
    assert devices[0].serial is None
    assert devices[2].lock_key == "0000:81:00.0"  # no uuid: the bus id is the stable identity
    assert len({d.lock_key for d in devices}) == 8
    env = backend.visibility_env([devices[7], devices[1], devices[3]])
    assert env == {"ASCEND_RT_VISIBLE_DEVICES": "1,3,7"}
    procs = backend.foreign_processes(devices[1:4])
    assert [p.to_json() for p in procs] == [
        {"device": "2", "pid": 2345678, "process": "python3.10", "used_memory_mib": 45056}
    ]
    assert backend.foreign_processes([devices[0]]) == []
    board_calls = [c for c in runner.calls if "board" in c]
    backend.discover()
    assert [c for c in runner.calls if "board" in c] == board_calls  # static identity cached


def test_npu_dual_die_uses_chip_logic_ids() -> None:
    runner = Runner(
        {
            "info -m": smi("npu_smi_info_m_910c_dualdie.txt"),
            "info -t board": ToolError("no board"),
            "info": smi("npu_smi_info_910c_dualdie.txt"),
        }
    )
    backend = NpuBackend(runner=runner, env={})
    devices = backend.discover()
    assert [(d.id, d.bus_id) for d in devices] == [
        ("0", "0000:9c:00.0"),
        ("1", "0000:9d:00.0"),
        ("2", "0000:9e:00.0"),
        ("3", "0000:9f:00.0"),
    ]
    assert devices[1].utilization_pct == 95
    assert devices[1].memory_used_mib == 40000
    assert [p.to_json() for p in backend.foreign_processes(devices)] == [
        {"device": "1", "pid": 777, "process": "vllm", "used_memory_mib": 36000}
    ]


def test_npu_without_map_falls_back_to_table_order_and_narrows() -> None:
    runner = Runner(
        {
            "info -m": ToolError("npu-smi: unknown option -m"),
            "info -t board": ToolError("no board"),
            "info": smi("npu_smi_info_910b3_x8.txt"),
        }
    )
    backend = NpuBackend(runner=runner, env={"ASCEND_RT_VISIBLE_DEVICES": "4,5"})
    assert [d.id for d in backend.discover()] == ["4", "5"]


def test_npu_parse_is_defensive() -> None:
    # Synthetic: driver noise, a 310P card with DDR only and the flat process table.
    text = (
        "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
        "| 0     310P3               | OK            | 17.0        50                0    / 0  |\n"
        "| 0                         | 0000:01:00.0  | 12          512  / 21527      0     / 0 |\n"
        "| NPU                       | Process id    | Process name     | Process memory(MB) |\n"
        "| 0                         | 99            | infer            | 256                |\n"
        "| 1     310P3               | Warning       | NA          NA                0    / 0  |\n"
        "| 0                         | [N/A]         | NA          NA               NA         |\n"
    )
    chips, procs = parse_npu_smi_info(text)
    assert [(c.npu, c.bus_id, c.memory_used_mib, c.aicore_pct) for c in chips] == [
        (0, "0000:01:00.0", 512, 12)
    ]
    assert [(p.npu, p.chip, p.pid) for p in procs] == [(0, 0, 99)]
    assert parse_npu_smi_info("dcmi model initialized failed, because the device is used.") == (
        [],
        [],
    )
    assert not NpuBackend(smi="npu-smi-that-does-not-exist").available()


# ------------------------------------------------------------------ cpu and the hook


def test_cpu_slots_from_env_pool_and_cores() -> None:
    assert [d.id for d in CpuBackend(env={"PYTEST_LOSSLESS_CPU_SLOTS": "0-2"}).discover()] == [
        "0",
        "1",
        "2",
    ]
    assert len(CpuBackend(env={}).discover()) == (os.cpu_count() or 1)
    backend = CpuBackend(env={})
    slots = backend.devices_for(["3", "7"])
    assert [d.lock_key for d in slots] == ["cpu-slot-3", "cpu-slot-7"]
    assert backend.visibility_env(slots) == {"PYTEST_LOSSLESS_CPU_SLOTS": "3,7"}
    assert backend.foreign_processes(slots) == []
    identity = slots[0].identity("hostA").to_json()
    assert identity == {
        "id": "3",
        "backend": "cpu",
        "host": "hostA",
        "lock_key": "cpu-slot-3",
        "name": "cpu slot",
    }
    with pytest.raises(ConfigError, match="PYTEST_LOSSLESS_CPU_SLOTS"):
        CpuBackend(env={"PYTEST_LOSSLESS_CPU_SLOTS": "3-1"}).discover()


def test_builtin_backends_through_the_hook_and_first_name_wins() -> None:
    assert [b.name for b in collect_backends()] == ["npu", "cuda", "cpu"]
    mine = CpuBackend()
    merged = merge_backends([[mine], [NpuBackend(), CudaBackend(), CpuBackend()]])
    assert [b.name for b in merged] == ["cpu", "npu", "cuda"]
    assert merged[0] is mine


# ------------------------------------------------------------------ allocator


class FakeBackend:
    """An observable backend with settable memory readings and foreign processes."""

    name = "fake"
    emulated = False
    observes_usage = True

    def __init__(
        self, ids: Sequence[str] = ("0", "1", "2", "3"), *, available: bool = True
    ) -> None:
        self.ids = list(ids)
        self.memory = {i: 100.0 for i in ids}
        self.procs: list[dict[str, Any]] = []
        self._available = available
        self.problem = None if available else "fake-smi not found on PATH"

    def available(self) -> bool:
        return self._available

    def discover(self) -> list[Device]:
        return [
            Device(id=i, uuid=f"FAKE-{i}", memory_used_mib=self.memory[i], backend="fake")
            for i in self.ids
        ]

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        return {"FAKE_VISIBLE_DEVICES": ",".join(d.id for d in devices)}

    def foreign_processes(self, devices: Sequence[Device]) -> list[dict[str, Any]]:
        ids = {d.id for d in devices}
        return [p for p in self.procs if p["device"] in ids]


def cpu_allocator(
    tmp_path: Path, pool: Sequence[str] = ("0", "1", "2", "3"), **kwargs: Any
) -> Allocator:
    kwargs.setdefault("clock", FakeClock())
    kwargs.setdefault("timeout", 5.0)
    return Allocator(
        [CpuBackend()], backend="cpu", pool=pool, lock_dir=tmp_path / "locks", **kwargs
    )


def test_too_many_devices_fails_at_once(tmp_path: Path) -> None:
    clock = FakeClock()
    allocator = cpu_allocator(tmp_path, clock=clock, timeout=600)
    with pytest.raises(AllocationError, match=r"asks for 5 cpu devices but the pool has only 4"):
        allocator.acquire(5, "t::too_many")
    assert clock.now == 0
    assert clock.sleeps == []
    with pytest.raises(AllocationError, match="ask for 1 or more"):
        allocator.acquire(0, "t::none")


def test_acquire_cpu_slots_env_identity_and_records(tmp_path: Path) -> None:
    allocator = cpu_allocator(tmp_path, host="hostA")
    allocation = allocator.acquire(2, "tests/x.py::test_a")
    assert allocation.backend == "cpu"
    assert allocation.ids == ("0", "1")
    assert allocation.env == {"PYTEST_LOSSLESS_CPU_SLOTS": "0,1"}
    assert [i["lock_key"] for i in allocation.identity] == ["cpu-slot-0", "cpu-slot-1"]
    assert all(i["host"] == "hostA" for i in allocation.identity)
    record_path = tmp_path / "locks" / "cpu-slot-0.holder.json"
    record = json.loads(record_path.read_text())
    assert record["pid"] == os.getpid()
    assert record["host"] == "hostA"
    assert record["test"] == "tests/x.py::test_a"
    assert record["since"].endswith("Z")
    assert record["locks"] == ["cpu-slot-0", "cpu-slot-1"]
    data = allocation.to_dict()
    assert data["idle_before"]["observed"] is False
    assert data["released_at"] is None
    allocation.release()
    assert not record_path.exists()
    data = json.loads(json.dumps(allocation.to_dict()))
    assert data["ids"] == ["0", "1"]
    assert data["lock_keys"] == ["cpu-slot-0", "cpu-slot-1"]
    assert data["released_at"]
    assert data["acquired_at"]
    assert data["waited_seconds"] == 0
    allocation.release()  # idempotent


def test_held_devices_are_skipped_and_a_timeout_names_the_holder(tmp_path: Path) -> None:
    first = cpu_allocator(tmp_path, pool=("0", "1", "2"), host="hostA")
    held = first.acquire(1, "tests/a.py::test_holder")
    lines: list[str] = []
    second = cpu_allocator(
        tmp_path, pool=("0", "1", "2"), host="hostA", on_wait=lines.append, timeout=3.0
    )
    other = second.acquire(2, "tests/b.py::test_pair")
    assert other.ids == ("1", "2")
    assert lines == []
    third = cpu_allocator(
        tmp_path, pool=("0", "1", "2"), host="hostA", on_wait=lines.append, timeout=3.0
    )
    with pytest.raises(AllocationTimeout) as info:
        third.acquire(1, "tests/c.py::test_waits")
    message = str(info.value)
    assert "tests/a.py::test_holder" in message
    assert "tests/b.py::test_pair" in message
    assert f"pid {os.getpid()} on hostA" in message
    assert "--lossless-lock-timeout" in message
    assert len(lines) == 1, "the wait is announced once"
    assert "tests/c.py::test_waits waits for 1 cpu device(s) of [0,1,2]" in lines[0]
    assert "tests/a.py::test_holder" in lines[0]
    other.release()
    held.release()
    assert third.acquire(3, "tests/c.py::test_waits").ids == ("0", "1", "2")


def test_never_holds_some_while_waiting_for_others(tmp_path: Path) -> None:
    holder = cpu_allocator(tmp_path, pool=("0", "1")).acquire(1, "t::holds_0")
    assert holder.ids == ("0",)
    grabbed: list[tuple[str, ...]] = []

    def while_waiting(line: str) -> None:
        # The waiter wants 0 and 1 and has 1 free: while it waits, 1 must be free for others.
        grabbed.append(cpu_allocator(tmp_path, pool=("1",)).acquire(1, "t::small").ids)

    waiter = cpu_allocator(tmp_path, pool=("0", "1"), on_wait=while_waiting, timeout=1.0)
    with pytest.raises(AllocationTimeout):
        waiter.acquire(2, "t::wants_both")
    assert grabbed == [("1",)]


def test_stale_holder_record_does_not_block(tmp_path: Path) -> None:
    locks = LockDir(tmp_path / "locks")
    locks.ensure()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = HolderRecord(int(dead.stdout), None, "hostA", "t::killed", "x", 0.0, ())
    locks.write_record("cpu-slot-0", stale)
    allocation = cpu_allocator(tmp_path, pool=("0",), host="hostA").acquire(1, "t::next")
    assert allocation.waited_seconds == 0
    assert "stale" not in locks.describe_holder("cpu-slot-0", "hostA")  # ours now
    allocation.release()
    locks.write_record("cpu-slot-0", stale)
    assert "is stale" in locks.describe_holder("cpu-slot-0", "hostA")


def test_finalizers_run_lifo_before_release_even_when_one_raises(tmp_path: Path) -> None:
    allocation = cpu_allocator(tmp_path, pool=("0",)).acquire(1, "t::fin")
    locks = LockDir(tmp_path / "locks")
    order: list[str] = []

    def finalizer(name: str, fail: bool = False) -> Any:
        def run() -> None:
            probe = locks.lock("cpu-slot-0")
            order.append(f"{name}:{'free' if probe.try_acquire() else 'held'}")
            probe.release()
            if fail:
                raise RuntimeError(f"{name} could not end its process group")

        return run

    allocation.add_finalizer(finalizer("first"))
    allocation.add_finalizer(finalizer("second", fail=True))
    allocation.add_finalizer(finalizer("third"))
    with pytest.raises(RuntimeError, match="second could not end"):
        allocation.release()
    assert order == ["third:held", "second:held", "first:held"]
    assert allocation.finalizer_errors == ["RuntimeError: second could not end its process group"]
    probe = locks.lock("cpu-slot-0")
    assert probe.try_acquire(), "released after the finalizers, despite the error"
    probe.release()
    with pytest.raises(AllocationError, match="already released"):
        allocation.add_finalizer(lambda: None)


def test_idle_proof_before_and_after(tmp_path: Path) -> None:
    backend = FakeBackend()
    allocator = Allocator(
        [backend], backend="fake", lock_dir=tmp_path / "locks", timeout=1, clock=FakeClock()
    )
    allocation = allocator.acquire(2, "t::proof")
    assert allocation.env == {"FAKE_VISIBLE_DEVICES": "0,1"}
    assert allocation.idle_before.observed is True
    assert allocation.idle_before.memory_used_mib == {"0": 100.0, "1": 100.0}
    assert allocation.idle_before.foreign_processes == ()

    def leak() -> None:
        backend.memory["1"] = 2048.0  # the after-proof must see what the finalizers left

    allocation.add_finalizer(leak)
    allocation.release()
    assert allocation.idle_after is not None
    assert allocation.idle_after.memory_used_mib == {"0": 100.0, "1": 2048.0}


def test_busy_device_fails_with_the_process_named(tmp_path: Path) -> None:
    backend = FakeBackend(ids=("0",))
    backend.procs = [{"device": "0", "pid": 4242, "process": "python3", "used_memory_mib": 900}]
    allocator = Allocator(
        [backend],
        backend="fake",
        lock_dir=tmp_path / "locks",
        timeout=60,
        busy="fail",
        clock=FakeClock(),
    )
    with pytest.raises(AllocationError, match=r"pid 4242 \(python3, 900 MiB\)") as info:
        allocator.acquire(1, "t::busy")
    assert not isinstance(info.value, AllocationTimeout)
    backend.procs = [{"device": "0", "pid": os.getpid(), "process": "me"}]
    allocator.acquire(1, "t::own_process_is_not_foreign").release()


def test_busy_fail_takes_the_free_devices_when_there_are_enough(tmp_path: Path) -> None:
    """Two of a pool of four, one of them busy: three are free, so nothing is refused."""
    backend = FakeBackend(ids=("0", "1", "2", "3"))
    backend.procs = [{"device": "0", "pid": 4242, "process": "python3", "used_memory_mib": 900}]
    allocator = Allocator(
        [backend],
        backend="fake",
        lock_dir=tmp_path / "locks",
        timeout=60,
        busy="fail",
        clock=FakeClock(),
    )
    allocation = allocator.acquire(2, "t::two_of_four")
    assert "0" not in allocation.ids
    allocation.release()
    backend.procs += [{"device": "1", "pid": 4243, "process": "python3"},
                      {"device": "2", "pid": 4244, "process": "python3"}]  # fmt: skip
    with pytest.raises(AllocationError, match="pid 424"):
        allocator.acquire(2, "t::only_one_free")  # one idle device cannot cover two


def test_busy_device_waits_then_prefers_an_idle_one(tmp_path: Path) -> None:
    backend = FakeBackend(ids=("0", "1"))
    backend.procs = [{"device": "0", "pid": 4242, "process": "python3", "used_memory_mib": 900}]
    lines: list[str] = []
    allocator = Allocator(
        [backend],
        backend="fake",
        lock_dir=tmp_path / "locks",
        timeout=60,
        clock=FakeClock(),
        on_wait=lines.append,
    )
    allocation = allocator.acquire(1, "t::picky")
    assert allocation.ids == ("1",)
    assert lines
    assert "busy with device 0: pid 4242 (python3" in lines[0]
    allocation.release()
    allocator.timeout = 1.0
    with pytest.raises(AllocationTimeout, match="pid 4242"):
        allocator.acquire(2, "t::needs_both")


def test_backend_choice_and_skip_reasons(tmp_path: Path) -> None:
    absent = [
        NpuBackend(smi="npu-smi-missing"),
        CudaBackend(smi="nvidia-smi-missing"),
        CpuBackend(),
    ]
    auto = Allocator(absent, lock_dir=tmp_path, timeout=1)
    reason = auto.skip_reason()
    assert reason is not None
    assert "--lossless-backend=cpu" in reason
    assert "npu-smi-missing not found on PATH" in reason
    with pytest.raises(AllocationError, match="--lossless-backend=cpu"):
        auto.acquire(1, "t::x")
    explicit = Allocator(absent, backend="cuda", lock_dir=tmp_path, timeout=1)
    assert "--lossless-backend=cuda is unavailable" in (explicit.skip_reason() or "")
    fake = FakeBackend()
    assert Allocator([*absent[:2], fake, CpuBackend()], lock_dir=tmp_path, timeout=1).chosen is fake
    assert Allocator(absent, backend="cpu", lock_dir=tmp_path, timeout=1).skip_reason() is None
    with pytest.raises(ConfigError, match="no such backend"):
        Allocator(absent, backend="tpu", lock_dir=tmp_path, timeout=1)


def test_pool_names_devices_by_id_uuid_or_bus(tmp_path: Path) -> None:
    runner = Runner(
        {
            "--query-gpu": (
                "0, GPU-aaaa0000-0000-0000-0000-000000000000, 00000000:1A:00.0, 1, 0\n"
                "1, GPU-bbbb0000-0000-0000-0000-000000000000, 00000000:1B:00.0, 1, 0\n"
            )
        }
    )
    backend = CudaBackend(runner=runner, env={})
    allocator = Allocator(
        [backend], backend="cuda", pool=("GPU-bbbb", "0000:1a:00.0"), lock_dir=tmp_path, timeout=1
    )
    assert [(label, d.id) for label, d in allocator.pool_devices()] == [
        ("GPU-bbbb", "1"),
        ("0000:1a:00.0", "0"),
    ]
    with pytest.raises(AllocationError, match="names '7', which the cuda backend does not find"):
        Allocator(
            [backend], backend="cuda", pool=("7",), lock_dir=tmp_path, timeout=1
        ).pool_devices()
    with pytest.raises(AllocationError, match="twice"):
        Allocator(
            [backend], backend="cuda", pool=("1", "GPU-bbbb"), lock_dir=tmp_path, timeout=1
        ).pool_devices()


def test_a_big_ask_is_not_starved_by_small_ones(tmp_path: Path) -> None:
    """Two threads keep one of two slots busy at all times; the 2-slot ask escalates."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn(offset: float) -> None:
        time.sleep(offset)
        small = cpu_allocator(tmp_path, pool=("0", "1"), clock=_real(), timeout=10)
        try:
            while not stop.is_set():
                with small.acquire(1, "t::small"):
                    time.sleep(0.08)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(o,)) for o in (0.0, 0.04)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.1)
        big = cpu_allocator(tmp_path, pool=("0", "1"), clock=_real(), timeout=5, escalate_after=0.3)
        started = time.monotonic()
        allocation = big.acquire(2, "t::big")
        waited = time.monotonic() - started
        allocation.release()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors
    assert allocation.escalated
    assert waited < 4.0  # escalated after 0.3 s; without the gate it would wait for ever


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4)), min_size=1, max_size=25))
def test_grants_are_all_or_none_and_never_shared(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, int]]
) -> None:
    """Any sequence of asks (count 0 = release) from three allocators sharing four slots."""
    lock_dir = tmp_path_factory.mktemp("locks")
    allocators = [
        Allocator(
            [CpuBackend()],
            backend="cpu",
            pool=("0", "1", "2", "3"),
            lock_dir=lock_dir,
            timeout=0,
            clock=FakeClock(),
            escalate_after=None,
        )
        for _ in range(3)
    ]
    held: dict[int, Any] = {}
    try:
        for who, count in steps:
            if count == 0 or who in held:
                if who in held:
                    held.pop(who).release()
                continue
            taken = {i for a in held.values() for i in a.ids}
            try:
                allocation = allocators[who].acquire(count, f"t::{who}")
            except AllocationTimeout:
                assert 4 - len(taken) < count, "refused although enough devices were free"
                continue
            assert len(allocation.ids) == count
            assert not taken & set(allocation.ids)
            held[who] = allocation
    finally:
        for allocation in held.values():
            allocation.release()


def _real() -> Any:
    from pytest_lossless.core.clock import SYSTEM_CLOCK

    return SYSTEM_CLOCK


# ------------------------------------------------------------------ the real GPU


needs_gpu = pytest.mark.skipif(
    shutil.which("nvidia-smi") is None or not CudaBackend().available(),
    reason="needs nvidia-smi and a GPU (run on the device machine)",
)


@needs_gpu
def test_cuda_real_discovery_lock_and_child_visibility(tmp_path: Path) -> None:
    backend = CudaBackend()
    devices = backend.discover()
    assert devices
    assert all(d.uuid and d.uuid.startswith("GPU-") for d in devices)
    allocator = Allocator([backend], backend="cuda", lock_dir=tmp_path, timeout=5)
    allocation = allocator.acquire(1, "t::cuda_real")
    assert allocation.idle_before.observed is True
    assert allocation.env["CUDA_VISIBLE_DEVICES"] == devices[0].uuid
    probe = LockDir(tmp_path).lock(devices[0].lock_key)
    assert not probe.try_acquire()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.cuda.device_count(), "
            "torch.cuda.get_device_properties(0).uuid)",
        ],
        env={**os.environ, **allocation.env},
        capture_output=True,
        text=True,
        check=False,
    )
    allocation.release()
    assert probe.try_acquire()
    probe.release()
    if child.returncode == 0:
        count, uuid = child.stdout.split()
        assert count == "1"
        assert devices[0].uuid == f"GPU-{uuid}"


@needs_gpu
def test_cuda_real_foreign_process_is_named(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ready = tmp_path / "ready"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, torch; "
            "x = torch.empty(1 << 30, dtype=torch.uint8, device='cuda'); "
            "open(sys.argv[1], 'w').close(); time.sleep(60)",
            str(ready),
        ]
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline and holder.poll() is None:
            time.sleep(0.1)
        assert ready.exists(), "the child could not allocate GPU memory"
        backend = CudaBackend()
        procs = backend.foreign_processes(backend.discover())
        assert procs
        assert procs[0].used_memory_mib
        assert procs[0].used_memory_mib >= 1000
        allocator = Allocator([backend], backend="cuda", lock_dir=tmp_path, timeout=5, busy="fail")
        with pytest.raises(AllocationError, match=r"pid \d+") as info:
            allocator.acquire(1, "t::cuda_busy")
        print("busy message:", info.value)
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_file_deleted_while_held_is_not_taken_twice(tmp_path: Path) -> None:
    """A tmp cleaner deleting a held lock file must not let a second holder in."""
    locks = tmp_path / "locks"
    first = Allocator([CpuBackend()], backend="cpu", pool=("0",), lock_dir=locks, timeout=5)
    held = first.acquire(1, "t::first")
    for path in locks.glob("*.lock"):
        path.unlink()
    second = Allocator([CpuBackend()], backend="cpu", pool=("0",), lock_dir=locks, timeout=0.3)
    with pytest.raises(AllocationTimeout, match="t::first"):
        second.acquire(1, "t::second")
    # The holder is told at release: its lock file was swapped (the second made a new one).
    with pytest.raises(AllocationError, match=r"cpu-slot-0\.lock was replaced while held"):
        held.release()
    assert held.released
    assert held.lock_problems
    second.acquire(1, "t::second").release()


def test_every_finalizer_runs_even_after_an_interrupt(tmp_path: Path) -> None:
    allocator = Allocator([CpuBackend()], backend="cpu", pool=("0",), lock_dir=tmp_path, timeout=5)
    allocation = allocator.acquire(1, "t::x")
    ran: list[str] = []
    allocation.add_finalizer(lambda: ran.append("registered first"))

    def interrupted() -> None:
        raise KeyboardInterrupt

    allocation.add_finalizer(interrupted)
    with pytest.raises(KeyboardInterrupt):
        allocation.release()
    assert ran == ["registered first"]
    assert allocation.released


def test_an_inherited_visibility_prefix_must_name_one_gpu() -> None:
    from pytest_lossless.devices.base import visible_filter as _visible_filter

    gpus = [Device("0", uuid="GPU-aaaa"), Device("1", uuid="GPU-bbbb")]
    assert _visible_filter(gpus, "GPU-") == []
    assert [d.id for d in _visible_filter(gpus, "GPU-b")] == ["1"]
    assert [d.id for d in _visible_filter(gpus, "0,GPU-bbbb")] == ["0", "1"]


def test_a_plugin_backends_process_entries_are_read_as_records() -> None:
    """A plugin's backend may list processes as JSON: a numeric device id keeps its value (as
    text, the way the built-in backends write it), a value of a wrong type reads as None."""
    from pytest_lossless.devices.base import foreign_processes

    class Listing:
        def foreign_processes(self, devices: object) -> list[dict[str, object]]:
            return [{"device": 3, "pid": 42, "process": "llm"}, {"device": True, "pid": "x"}]

    read = foreign_processes(Listing(), [])  # type: ignore[arg-type]
    assert [p.to_json() for p in read] == [
        {"device": "3", "pid": 42, "process": "llm", "used_memory_mib": None},
        {"pid": None, "process": None, "used_memory_mib": None},
    ]
