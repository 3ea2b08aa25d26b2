"""Pure parsers of ``nvidia-smi`` and ``npu-smi`` text: device rows, compute processes, the
npu chip-to-logic-id map and board fields, tested against captured tool outputs."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .base import Device, ForeignProcess, normalize_bus_id

#: The ``--query-gpu`` columns :func:`parse_nvidia_smi_gpus` reads, in its order.
CUDA_QUERY = "index,uuid,pci.bus_id,memory.used,utilization.gpu,name"
#: The ``--query-compute-apps`` columns :func:`parse_nvidia_smi_apps` reads, in its order.
CUDA_APPS_QUERY = "gpu_uuid,pid,process_name,used_memory"


def _number(text: str) -> float | None:
    """A reading, or None for the tools' "[N/A]", "[Not Supported]", "NA", "-" and blanks."""
    try:
        return float(text.strip().rstrip("%").strip())
    except ValueError:
        return None


def parse_nvidia_smi_gpus(text: str) -> list[Device]:
    """Rows of ``--query-gpu=index,uuid,pci.bus_id,memory.used,utilization.gpu[,name]``.

    Lines that are not device rows (warnings such as "WARNING: infoROM is corrupted",
    blank lines, "No devices were found") are skipped rather than misread.
    """
    devices = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",", 5)]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        uuid = cells[1] if re.match(r"(GPU|MIG)-", cells[1]) else None
        if uuid is None:
            continue
        devices.append(
            Device(
                id=cells[0],
                uuid=uuid,
                bus_id=normalize_bus_id(cells[2]),
                name=cells[5]
                if len(cells) > 5 and cells[5] and not cells[5].startswith("[")
                else None,
                memory_used_mib=_number(cells[3]),
                utilization_pct=_number(cells[4]),
                backend="cuda",
            )
        )
    return devices


def parse_nvidia_smi_apps(text: str) -> list[ForeignProcess]:
    """Rows of ``--query-compute-apps=gpu_uuid,pid,process_name,used_memory`` (no device id
    yet: the backend names it by the uuid)."""
    apps = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",", 2)]
        if len(cells) < 3 or "," not in cells[2] or not re.match(r"(GPU|MIG)-", cells[0]):
            continue
        # A process name may itself hold commas: the last cell is the memory.
        name, _, memory = (c.strip() for c in cells[2].rpartition(","))
        pid = int(cells[1]) if cells[1].isdigit() else None
        process = None if name.startswith("[") or not name else name
        apps.append(ForeignProcess(None, cells[0], pid, process, _number(memory)))
    return apps


@dataclass(frozen=True)
class NpuChip:
    """One chip row of ``npu-smi info``: card (``npu``), chip within the card, readings."""

    npu: int
    chip: int
    phy_id: int | None
    name: str
    health: str
    bus_id: str | None
    aicore_pct: float | None
    memory_used_mib: float | None


@dataclass(frozen=True)
class NpuProcess:
    """One row of ``npu-smi info``'s process table: the chip it runs on, pid, name, memory."""

    npu: int
    chip: int
    pid: int | None
    process: str
    memory_mib: float | None


def _pairs(text: str) -> list[tuple[float | None, float | None]]:
    return [(_number(a), _number(b)) for a, b in re.findall(r"(\S+)\s*/\s*(\S+)", text)]


def parse_npu_smi_info(text: str) -> tuple[list[NpuChip], list[NpuProcess]]:
    """The device and process tables of plain ``npu-smi info``.

    Handles one chip per card (910B), two dies per card with a ``Phy-ID`` column (910C),
    cards with DDR instead of HBM (310P, where HBM reads ``0 / 0``), and the flat process
    table of older releases (``| NPU | Process id | ...`` with no chip column).
    """
    chips: list[NpuChip] = []
    processes: list[NpuProcess] = []
    in_processes = False
    card: tuple[int, str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "Process id" in line:
            in_processes = True
            continue
        if "Health" in line or "Bus-Id" in line or line.startswith("| npu-smi"):
            continue
        if in_processes:
            if len(cells) < 4 or cells[0].startswith("No running"):
                continue
            ids = cells[0].split()
            if not ids or not all(i.isdigit() for i in ids):
                continue
            processes.append(
                NpuProcess(
                    npu=int(ids[0]),
                    chip=int(ids[1]) if len(ids) > 1 else 0,
                    pid=int(cells[1]) if cells[1].isdigit() else None,
                    process=cells[2],
                    memory_mib=_number(cells[3]),
                )
            )
            continue
        if len(cells) < 3:
            continue
        bus_id = normalize_bus_id(cells[1])
        head = cells[0].split(None, 1)
        if bus_id is None and len(head) == 2 and head[0].isdigit():
            card = (int(head[0]), head[1], cells[1])
            continue
        ids = cells[0].split()
        if bus_id is None or card is None or not ids or not all(i.isdigit() for i in ids):
            continue
        readings = cells[2].split(None, 1)
        aicore = _number(readings[0]) if readings else None
        pairs = _pairs(readings[1]) if len(readings) > 1 else []
        used: float | None = None
        if len(pairs) >= 2 and pairs[1][1]:
            used = pairs[1][0]  # HBM, where the card has it
        elif pairs:
            used = pairs[0][0]  # DDR (310P)
        chips.append(
            NpuChip(
                npu=card[0],
                chip=int(ids[0]),
                phy_id=int(ids[1]) if len(ids) > 1 else None,
                name=card[1],
                health=card[2],
                bus_id=bus_id,
                aicore_pct=aicore,
                memory_used_mib=used,
            )
        )
    return chips, processes


def parse_npu_smi_map(text: str) -> dict[tuple[int, int], int]:
    """``npu-smi info -m``: (card, chip) to the chip logic id that the runtime counts in.

    Rows whose logic id is ``-`` (the MCU of a card) are not compute devices.
    """
    mapping: dict[tuple[int, int], int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit() and parts[2].isdigit():
            mapping[(int(parts[0]), int(parts[1]))] = int(parts[2])
    return mapping


def parse_npu_smi_board(text: str) -> dict[str, str]:
    """``npu-smi info -t board -i N``: ``Key : value`` lines into a mapping."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def memory_by_pid(rows: Iterable[tuple[int | None, float | None]]) -> dict[int, float]:
    """Device memory (MiB) per pid from (pid, MiB) rows of a process table, summed over the
    devices a process holds memory on; rows without a pid or a reading are left out."""
    totals: dict[int, float] = {}
    for pid, mib in rows:
        if pid is not None and mib is not None:
            totals[pid] = totals.get(pid, 0.0) + mib
    return totals


def nvidia_memory_by_pid(text: str) -> dict[int, float]:
    """MiB per pid from the ``--query-compute-apps`` rows that :func:`parse_nvidia_smi_apps`
    reads (one row per process and GPU)."""
    return memory_by_pid((a.pid, a.used_memory_mib) for a in parse_nvidia_smi_apps(text))


def npu_memory_by_pid(text: str) -> dict[int, float]:
    """MiB per pid from the process table of plain ``npu-smi info``."""
    _, processes = parse_npu_smi_info(text)
    return memory_by_pid((p.pid, p.memory_mib) for p in processes)
