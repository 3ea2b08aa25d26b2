"""The npu backend against ``npu-smi info`` tables as users posted them in public issue threads.

``tests/data/smi/field_*.txt`` are those tables (``FIELD.md`` there cites each thread): 910B2,
910B3, 910B4 and 910ProB with one chip per card and no ``Phy-ID`` column, Atlas A3 dual-die
cards with ``Phy-ID``, a 310P3 card whose two chips share one bus id, npu-smi 24.1.rc2 to
26.0.rc2, process tables with and without ``Process id in container``. The backend is driven as
on a host: a fake ``npu-smi`` first on PATH prints them (discovery, logical ids, bus ids, memory,
busy chips), and the allocator refuses a chip that a foreign process holds.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from pytest_lossless.devices import Allocator
from pytest_lossless.devices.backends import NpuBackend
from pytest_lossless.devices.smi import npu_memory_by_pid, parse_npu_smi_info
from pytest_lossless.errors import AllocationError

DATA = Path(__file__).resolve().parents[1] / "data" / "smi"

#: Per field table: (npu, chip, phy_id, name, bus id, memory used MiB) of each chip row.
CHIPS = {
    "field_a3_26.0.rc2_vllm-ascend-12980.txt": [
        (0, 0, 0, "Ascend910", "0000:9d:00.0", 3419),
        (0, 1, 1, "Ascend910", "0000:9f:00.0", 2874),
        (7, 1, 15, "Ascend910", "0000:83:00.0", 31877),
    ],
    "field_a3_24.1.rc3.7_vllm-ascend-2035.txt": [
        (0, 0, 0, "Ascend910", "0000:9d:00.0", 3397),
        (0, 1, 1, "Ascend910", "0000:9f:00.0", 3186),
    ],
    "field_910b4_25.5.3_hami-1941.txt": [
        (0, 0, None, "910B4", "0000:c1:00.0", 2859),
        (1, 0, None, "910B4", "0000:01:00.0", 2659),
    ],
    "field_910b4_24.1.1_1panel-9472.txt": [
        (0, 0, None, "910B4", "0000:c1:00.0", 26838),  # "26838/ 32768": no space before /
        (1, 0, None, "910B4", "0000:c2:00.0", 29356),
    ],
    "field_910b2_24.1.0.3_vllm-ascend-1767.txt": [
        (0, 0, None, "910B2", "0000:c1:00.0", 3397),
        (1, 0, None, "910B2", "0000:c2:00.0", 3395),
    ],
    "field_910b2_25.2.0_vllm-ascend-3904.txt": [
        (0, 0, None, "910B2", "0000:c1:00.0", 46731),  # a serving job's weights: busy chips
        (1, 0, None, "910B2", "0000:01:00.0", 46717),
    ],
    "field_910b3_vllm-ascend-1130.txt": [
        (0, 0, None, "910B3", "0000:c1:00.0", 3379),
        (1, 0, None, "910B3", "0000:c2:00.0", 3385),
    ],
    "field_910prob_24.1.0_vllm-ascend-1047.txt": [
        (0, 0, None, "910ProB", "0000:c1:00.0", 18),  # DDR 2387 / 13553 beside HBM 18 / 32768
        (1, 0, None, "910ProB", "0000:81:00.0", 8),
    ],
    "field_310p3_24.1.rc2_ollama-5315.txt": [
        (1, 0, 0, "310P3", "0000:01:00.0", 1397),  # "Chip Device": DDR only, no HBM column
        (1, 1, 1, "310P3", "0000:01:00.0", 1520),
    ],
}


def test_every_field_table_is_covered() -> None:
    assert sorted(CHIPS) == sorted(
        p.name
        for p in DATA.glob("field_*.txt")
        if "processes" not in p.name and "info_m" not in p.name
    )
    assert "FIELD.md" in os.listdir(DATA)


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_field_table_chip_rows(name: str) -> None:
    chips, _ = parse_npu_smi_info((DATA / name).read_text())
    found = [(c.npu, c.chip, c.phy_id, c.name, c.bus_id, c.memory_used_mib) for c in chips]
    assert found == CHIPS[name]
    assert {c.health for c in chips} == {"OK"}


def test_process_tables_with_and_without_the_container_column() -> None:
    a3 = (DATA / "field_a3_26.0.rc2_vllm-ascend-12980.txt").read_text()
    _, processes = parse_npu_smi_info(a3)
    assert [(p.npu, p.chip, p.pid, p.process, p.memory_mib) for p in processes] == [
        (0, 0, 632268, "python3.1", 197)
    ]
    # 2023: no container column, a TAB in the header, one job with seven helper processes.
    paddle = (DATA / "field_processes_paddle-767.txt").read_text()
    chips, processes = parse_npu_smi_info(paddle)
    assert chips == []
    assert [p.pid for p in processes] == [47928, 47896, 47920, 47907, 47910, 47913, 47881, 47892]
    assert {(p.npu, p.chip, p.process) for p in processes} == {(0, 0, "python")}
    memory = npu_memory_by_pid(paddle)
    assert memory[47881] == 4184
    assert sum(memory.values()) == 4184 + 7 * 90


# ---- through a fake npu-smi on PATH ------------------------------------------------------------

FAKE = """#!{python}
import os, sys
folder = os.environ["FAKE_NPU_SMI"]
args = " ".join(sys.argv[1:])
name = {{"info": "info.txt", "info -m": "map.txt"}}.get(args)
if args.startswith("info -t board -i "):
    name = "board-" + args.rsplit(" ", 1)[1] + ".txt"
path = os.path.join(folder, name) if name else None
if path is None or not os.path.exists(path):
    sys.stderr.write("Error: the command " + repr(args) + " is not supported.\\n")
    sys.exit(1)
sys.stdout.write(open(path).read())
"""


@pytest.fixture
def fake_npu_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install ``npu-smi`` first on PATH; returns ``serve(info, map=None, boards={})``."""
    bin_dir, folder = tmp_path / "bin", tmp_path / "npu-smi"
    bin_dir.mkdir()
    folder.mkdir()
    tool = bin_dir / "npu-smi"
    tool.write_text(FAKE.format(python=sys.executable))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NPU_SMI", str(folder))
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)

    def serve(info: str, map_text: str | None = None, boards: dict[int, str] | None = None) -> None:
        (folder / "info.txt").write_text((DATA / info).read_text())
        if map_text is not None:
            (folder / "map.txt").write_text(map_text)
        for npu, text in (boards or {}).items():
            (folder / f"board-{npu}.txt").write_text(text)

    return serve


def test_discovery_of_a_910b_host_without_info_m(fake_npu_smi) -> None:
    fake_npu_smi("field_910b2_25.2.0_vllm-ascend-3904.txt")
    backend = NpuBackend()
    assert backend.available(), backend.problem
    devices = backend.discover()
    assert [(d.id, d.bus_id, d.name, d.memory_used_mib) for d in devices] == [
        ("0", "0000:c1:00.0", "910B2", 46731),
        ("1", "0000:01:00.0", "910B2", 46717),
    ]
    assert [d.lock_key for d in devices] == ["0000:c1:00.0", "0000:01:00.0"]
    assert backend.visibility_env(devices[::-1]) == {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}


#: ``info -m`` for the A3 table, written from it (not posted in the thread): see FIELD.md.
A3_MAP = (DATA / "field_a3_derived_info_m.txt").read_text()


def test_a3_logical_ids_come_from_info_m(fake_npu_smi) -> None:
    fake_npu_smi(
        "field_a3_26.0.rc2_vllm-ascend-12980.txt",
        A3_MAP,
        boards={0: "Serial Number                  : NA\n"},
    )
    devices = NpuBackend().discover()
    assert [(d.id, d.bus_id) for d in devices] == [
        ("0", "0000:9d:00.0"),
        ("1", "0000:9f:00.0"),
        ("15", "0000:83:00.0"),
    ]
    assert all(d.serial is None for d in devices)  # "NA" is no serial


def test_logical_ids_without_info_m_count_the_listed_chips(fake_npu_smi) -> None:
    # Without `info -m` the runtime numbers the chips it sees 0..n-1 in the table's order; a
    # Phy-ID is the driver's physical number (in a container, chips 5 and 6 are still Phy-ID 5
    # and 6 while the runtime calls them 0 and 1: sgl-project/sglang#14266). Three chips listed
    # are logical 0, 1, 2, never 15.
    fake_npu_smi("field_a3_26.0.rc2_vllm-ascend-12980.txt")
    devices = NpuBackend().discover()
    assert [(d.id, d.bus_id) for d in devices] == [
        ("0", "0000:9d:00.0"),
        ("1", "0000:9f:00.0"),
        ("2", "0000:83:00.0"),
    ]


def test_310p_chips_that_share_a_bus_id_get_a_lock_each(fake_npu_smi, tmp_path: Path) -> None:
    # Both chips of the 310P3 card report bus 0000:01:00.0: one lock for both would let a test
    # holding chip 0 block chip 1, and refuse a pool naming both as "the same device twice".
    fake_npu_smi("field_310p3_24.1.rc2_ollama-5315.txt")
    backend = NpuBackend()
    devices = backend.discover()
    assert [(d.id, d.bus_id) for d in devices] == [("0", "0000:01:00.0"), ("1", "0000:01:00.0")]
    assert len({d.lock_key for d in devices}) == 2
    allocator = Allocator(
        [backend], backend="npu", pool=["0", "1"], lock_dir=tmp_path / "locks", timeout=5
    )
    with allocator.acquire(2, "t::both_chips") as allocation:
        assert allocation.env == {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}


def test_a_chip_held_by_a_foreign_process_is_named_and_refused(
    fake_npu_smi, tmp_path: Path
) -> None:
    fake_npu_smi("field_a3_26.0.rc2_vllm-ascend-12980.txt", A3_MAP)
    backend = NpuBackend()
    devices = backend.discover()
    assert [p.to_json() for p in backend.foreign_processes(devices)] == [
        {"device": "0", "pid": 632268, "process": "python3.1", "used_memory_mib": 197}
    ]

    def allocator(pool: list[str]) -> Allocator:
        return Allocator(
            [backend], backend="npu", pool=pool, lock_dir=tmp_path / "locks", timeout=5,
            busy="fail", settle=0.0,
        )  # fmt: skip

    # Two chips asked of a pool of three, one of them busy: the free two are taken.
    with allocator(["0", "1", "15"]).acquire(2, "t::free_ones") as allocation:
        assert allocation.env == {"ASCEND_RT_VISIBLE_DEVICES": "1,15"}
    # Only the busy chip in the pool: refused, naming the process.
    with pytest.raises(AllocationError, match=r"device 0: pid 632268 \(python3\.1, 197 MiB\)"):
        allocator(["0"]).acquire(1, "t::busy_one")
