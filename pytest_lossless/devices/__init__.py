"""Device backends (npu, cuda, cpu slots), discovery, identity and host-wide device locks.

A test that needs accelerators gets an :class:`Allocation`: a fixed set of devices, each
held through one OS file lock named by the device's stable identity, so pytest-xdist
workers and separate CI jobs on one host never share a device. The :class:`Allocator`
takes all N locks or none (never holding some while waiting for others), reports who
holds what while it waits, and records an idle proof (memory in use, foreign processes)
before and after the test.

Locks use ``fcntl.flock`` directly rather than :mod:`filelock`: the lock file is opened
read-only (so lock files created by another user of a shared host still lock), never
deleted (so every process always locks the same inode), and the descriptor is held for
exactly the allocation's lifetime; those are the only semantics needed, and they are the
same across every filelock release. The kernel drops a flock when its holder dies, even
by SIGKILL, so a killed holder frees its devices at once; the JSON holder record beside
each lock is only a description for humans and never decides anything.

This module imports no pytest: the allocator works, and is tested, without it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import random
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pluggy

from .. import hookspecs
from ..core.clock import SYSTEM_CLOCK, Clock, utc_iso
from ..errors import AllocationError, AllocationTimeout, ConfigError
from ..settings import BUSY_POLICIES, parse_device_list

__all__ = [
    "Allocation",
    "Allocator",
    "Backend",
    "BuiltinBackends",
    "CpuBackend",
    "CudaBackend",
    "Device",
    "NpuBackend",
    "collect_backends",
    "merge_backends",
    "parse_npu_smi_board",
    "parse_npu_smi_info",
    "parse_npu_smi_map",
    "parse_nvidia_smi_apps",
    "parse_nvidia_smi_gpus",
]

#: Seconds one call of ``nvidia-smi`` / ``npu-smi`` may take before the backend gives up.
TOOL_TIMEOUT = 30.0

# ---------------------------------------------------------------------------- devices


@dataclass(frozen=True)
class Device:
    """One device as a backend sees it now; ``lock_key`` is what stays true across boots."""

    id: str
    uuid: str | None = None
    bus_id: str | None = None
    name: str | None = None
    memory_used_mib: float | None = None
    utilization_pct: float | None = None
    #: Board serial number, where the tool reports one (npu).
    serial: str | None = None
    #: The backend that found it; names the lock of a device with no uuid and no bus id.
    backend: str = "cpu"

    @property
    def lock_key(self) -> str:
        """The stable identity the host-wide lock is named by: uuid, else bus id, else slot."""
        if self.uuid:
            return self.uuid
        if self.bus_id:
            return self.bus_id
        return f"{self.backend}-slot-{self.id}"

    def identity(self, host: str) -> dict[str, Any]:
        """What a receipt records about the device: everything that names it, no readings."""
        record: dict[str, Any] = {"id": self.id, "backend": self.backend, "host": host,
                                  "lock_key": self.lock_key}
        for key in ("uuid", "bus_id", "name", "serial"):
            value = getattr(self, key)
            if value is not None:
                record[key] = value
        return record


class Backend(Protocol):
    """A kind of device: how to find them, and how to make a child process see a subset."""

    name: str

    def available(self) -> bool:
        """Whether this host has such devices (a missing tool means no)."""
        ...

    def discover(self) -> list[Device]:
        """Every device of this kind on the host, with current memory and utilisation."""
        ...

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        """The environment that makes a child process see exactly ``devices``."""
        ...

    def foreign_processes(self, devices: Sequence[Device]) -> list[dict[str, Any]]:
        """Processes now running on ``devices`` (``device``, ``pid``, ``process``, memory)."""
        ...


@runtime_checkable
class EmulatedBackend(Protocol):
    """A backend whose devices are whatever the pool names (cpu slots)."""

    def devices_for(self, ids: Sequence[str]) -> list[Device]: ...


class ToolError(Exception):
    """A device tool is missing or failed; the backend is then unavailable (never escapes)."""


Runner = Callable[[Sequence[str]], str]


def run_tool(argv: Sequence[str]) -> str:
    """Run a device tool (no shell) and return its stdout; raise :class:`ToolError` otherwise."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=TOOL_TIMEOUT,
                              check=False)
    except FileNotFoundError:
        raise ToolError(f"{argv[0]} not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{' '.join(argv)} did not answer within {TOOL_TIMEOUT:.0f} s") from None
    except OSError as exc:
        raise ToolError(f"{argv[0]} cannot run: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        raise ToolError(f"{' '.join(argv)} exited with {done.returncode}: {' / '.join(tail)}")
    return done.stdout


def _number(text: str) -> float | None:
    """A reading, or None for the tools' "[N/A]", "[Not Supported]", "NA", "-" and blanks."""
    try:
        return float(text.strip().rstrip("%").strip())
    except ValueError:
        return None


def normalize_bus_id(text: str) -> str | None:
    """``00000000:1A:00.0`` and ``0000:1a:00.0`` both into ``0000:1a:00.0``; None if not one."""
    match = re.fullmatch(r"\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})"
                         r"\.([0-7])\s*", text)
    if not match:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def _visible_filter(devices: list[Device], inherited: str | None) -> list[Device]:
    """Narrow ``devices`` to those an inherited ``*_VISIBLE_DEVICES`` value names.

    A CI scheduler that hands this job GPUs 2 and 3 sets the variable; taking GPU 0
    would step on another job, so the pool never reaches beyond it.
    """
    if inherited is None:
        return devices
    tokens = [t.strip() for t in inherited.split(",") if t.strip()]
    # Like CUDA itself: an index, or a UUID prefix that names exactly one device.
    named = {id(d) for token in tokens if (d := _match(token, devices)) is not None}
    return [d for d in devices if id(d) in named]


# ---------------------------------------------------------------------------- cuda


_CUDA_QUERY = "index,uuid,pci.bus_id,memory.used,utilization.gpu,name"
_CUDA_APPS_QUERY = "gpu_uuid,pid,process_name,used_memory"


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
        devices.append(Device(
            id=cells[0], uuid=uuid, bus_id=normalize_bus_id(cells[2]),
            name=cells[5] if len(cells) > 5 and cells[5] and not cells[5].startswith("[")
            else None,
            memory_used_mib=_number(cells[3]), utilization_pct=_number(cells[4]),
            backend="cuda",
        ))
    return devices


def parse_nvidia_smi_apps(text: str) -> list[dict[str, Any]]:
    """Rows of ``--query-compute-apps=gpu_uuid,pid,process_name,used_memory``."""
    apps = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",", 2)]
        if len(cells) < 3 or "," not in cells[2] or not re.match(r"(GPU|MIG)-", cells[0]):
            continue
        # A process name may itself hold commas: the last cell is the memory.
        name, _, memory = (c.strip() for c in cells[2].rpartition(","))
        pid = int(cells[1]) if cells[1].isdigit() else None
        apps.append({"uuid": cells[0], "pid": pid,
                     "process": None if name.startswith("[") or not name else name,
                     "used_memory_mib": _number(memory)})
    return apps


class _ToolBackend:
    """A real backend read through its vendor tool (``nvidia-smi``, ``npu-smi``)."""

    name = ""
    emulated = False
    observes_usage = True
    #: What :meth:`available` says when the tool answers but lists nothing usable.
    nothing_listed = "lists no device"

    def __init__(self, *, smi: str, runner: Runner | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.smi = smi
        self.runner = runner or run_tool
        self.env = env
        #: Why the backend is unavailable, once :meth:`available` said so.
        self.problem: str | None = None

    def discover(self) -> list[Device]:
        raise NotImplementedError

    def available(self) -> bool:
        if self.runner is run_tool and shutil.which(self.smi) is None:
            self.problem = f"{self.smi} not found on PATH"
            return False
        try:
            devices = self.discover()
        except ToolError as exc:
            self.problem = str(exc)
            return False
        if not devices:
            self.problem = f"{self.smi} {self.nothing_listed}"
            return False
        self.problem = None
        return True


class CudaBackend(_ToolBackend):
    """NVIDIA GPUs through ``nvidia-smi``; children see them by UUID, in PCI bus order."""

    name = "cuda"
    nothing_listed = "lists no GPU this process may use"

    def __init__(self, *, smi: str = "nvidia-smi", runner: Runner | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__(smi=smi, runner=runner, env=env)

    def discover(self) -> list[Device]:
        text = self.runner([self.smi, f"--query-gpu={_CUDA_QUERY}",
                            "--format=csv,noheader,nounits"])
        env = os.environ if self.env is None else self.env
        return _visible_filter(parse_nvidia_smi_gpus(text), env.get("CUDA_VISIBLE_DEVICES"))

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": ",".join(d.uuid or d.id for d in devices),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def foreign_processes(self, devices: Sequence[Device]) -> list[dict[str, Any]]:
        text = self.runner([self.smi, f"--query-compute-apps={_CUDA_APPS_QUERY}",
                            "--format=csv,noheader,nounits"])
        by_uuid = {d.uuid: d for d in devices if d.uuid}
        return [{"device": by_uuid[app["uuid"]].id, **app}
                for app in parse_nvidia_smi_apps(text) if app["uuid"] in by_uuid]


# ---------------------------------------------------------------------------- npu


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
            processes.append(NpuProcess(
                npu=int(ids[0]), chip=int(ids[1]) if len(ids) > 1 else 0,
                pid=int(cells[1]) if cells[1].isdigit() else None, process=cells[2],
                memory_mib=_number(cells[3])))
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
        chips.append(NpuChip(npu=card[0], chip=int(ids[0]),
                             phy_id=int(ids[1]) if len(ids) > 1 else None, name=card[1],
                             health=card[2], bus_id=bus_id, aicore_pct=aicore,
                             memory_used_mib=used))
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


class NpuBackend(_ToolBackend):
    """Ascend NPUs through ``npu-smi``; children see them by logical id, ascending."""

    name = "npu"
    nothing_listed = "info lists no NPU chip"

    def __init__(self, *, smi: str = "npu-smi", runner: Runner | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__(smi=smi, runner=runner, env=env)
        # Static per host: read once per backend object, not on every discovery.
        self._logic: dict[tuple[int, int], int] | None = None
        self._serials: dict[int, str | None] = {}

    def _logic_ids(self, chips: Sequence[NpuChip]) -> dict[tuple[int, int], int]:
        if self._logic is None:
            try:
                self._logic = parse_npu_smi_map(self.runner([self.smi, "info", "-m"]))
            except ToolError:
                self._logic = {}
        if self._logic:
            return self._logic
        # Older npu-smi without -m: the runtime numbers chips in the table's order.
        ordered = sorted(chips, key=lambda c: (c.npu, c.chip))
        return {(c.npu, c.chip): c.phy_id if c.phy_id is not None else i
                for i, c in enumerate(ordered)}

    def _serial(self, npu: int) -> str | None:
        if npu not in self._serials:
            try:
                board = parse_npu_smi_board(self.runner(
                    [self.smi, "info", "-t", "board", "-i", str(npu)]))
            except ToolError:
                board = {}
            serial = board.get("Serial Number")
            self._serials[npu] = serial if serial and serial not in ("NA", "N/A") else None
        return self._serials[npu]

    def _table(self) -> tuple[list[NpuChip], list[NpuProcess], dict[tuple[int, int], int]]:
        chips, processes = parse_npu_smi_info(self.runner([self.smi, "info"]))
        return chips, processes, self._logic_ids(chips)

    def discover(self) -> list[Device]:
        chips, _, logic = self._table()
        devices = []
        for chip in chips:
            logical = logic.get((chip.npu, chip.chip))
            if logical is None:
                continue
            devices.append(Device(
                id=str(logical), bus_id=chip.bus_id, name=chip.name,
                memory_used_mib=chip.memory_used_mib, utilization_pct=chip.aicore_pct,
                serial=self._serial(chip.npu), backend="npu"))
        devices.sort(key=lambda d: int(d.id))
        env = os.environ if self.env is None else self.env
        return _visible_filter(devices, env.get("ASCEND_RT_VISIBLE_DEVICES"))

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        ids = sorted((d.id for d in devices), key=lambda i: (not i.isdigit(), int(i)
                                                               if i.isdigit() else 0, i))
        return {"ASCEND_RT_VISIBLE_DEVICES": ",".join(ids)}

    def foreign_processes(self, devices: Sequence[Device]) -> list[dict[str, Any]]:
        _, processes, logic = self._table()
        wanted = {d.id for d in devices}
        found = []
        for proc in processes:
            logical = logic.get((proc.npu, proc.chip))
            if logical is not None and str(logical) in wanted:
                found.append({"device": str(logical), "pid": proc.pid, "process": proc.process,
                              "used_memory_mib": proc.memory_mib})
        return found


# ---------------------------------------------------------------------------- cpu


class CpuBackend:
    """Emulated device slots on the CPU: the default that runs on any laptop or CI machine.

    Slot ids are the pool's (``--lossless-devices``); without a pool, the slots listed in
    ``PYTEST_LOSSLESS_CPU_SLOTS`` (e.g. ``0-3``), else one per CPU core. A child process
    sees its slots in that same variable. Nothing about usage can be observed.
    """

    name = "cpu"
    emulated = True
    observes_usage = False
    ENV = "PYTEST_LOSSLESS_CPU_SLOTS"

    def __init__(self, *, env: Mapping[str, str] | None = None) -> None:
        self.env = env
        self.problem: str | None = None

    def available(self) -> bool:
        return True

    def devices_for(self, ids: Sequence[str]) -> list[Device]:
        return [Device(id=i, name="cpu slot", backend=self.name) for i in ids]

    def discover(self) -> list[Device]:
        env = os.environ if self.env is None else self.env
        listed = env.get(self.ENV, "").strip()
        if listed:
            try:
                return self.devices_for(parse_device_list(listed))
            except ValueError as exc:
                raise ConfigError(f"environment {self.ENV}", listed, str(exc)) from None
        return self.devices_for([str(i) for i in range(os.cpu_count() or 1)])

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        return {self.ENV: ",".join(d.id for d in devices)}

    def foreign_processes(self, devices: Sequence[Device]) -> list[dict[str, Any]]:
        return []


# ---------------------------------------------------------------------------- hook


class BuiltinBackends:
    """The built-in backends as a plugin: ``trylast``, so a plugin's own backend wins."""

    @hookspecs.hookimpl(trylast=True)
    def pytest_lossless_backends(self) -> list[Backend]:
        return [NpuBackend(), CudaBackend(), CpuBackend()]


def merge_backends(results: Iterable[Iterable[Backend]]) -> list[Backend]:
    """Flatten the hook's answers in call order; the first backend of each name wins."""
    merged: dict[str, Backend] = {}
    for answer in results:
        for backend in answer or ():
            merged.setdefault(backend.name, backend)
    return list(merged.values())


def collect_backends(hook: Any | None = None) -> list[Backend]:
    """The backends that ``hook`` (pytest's ``config.hook``) offers; built-ins without one."""
    if hook is None:
        manager = pluggy.PluginManager("pytest")
        manager.add_hookspecs(hookspecs)
        manager.register(BuiltinBackends())
        hook = manager.hook
    return merge_backends(hook.pytest_lossless_backends())


# ---------------------------------------------------------------------------- locks


def _file_stem(lock_key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", lock_key).lstrip(".") or "_"


class _Flock:
    """One ``flock(2)`` held through one open file description (never inherited)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self, *, shared: bool = False) -> bool:
        try:
            # An existing file is opened without O_CREAT: with fs.protected_regular=1, O_CREAT
            # on another user's file in a world-writable folder fails even when it exists.
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        if not self._still_named(fd):
            # The file was deleted or replaced between open and flock: a lock on an unlinked
            # file excludes nobody. Try again on the file the path names now.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            return False
        with contextlib.suppress(OSError):  # only the creator may widen it; others need not
            if os.fstat(fd).st_uid == os.getuid():
                os.fchmod(fd, 0o666)
        self._fd = fd
        return True

    @property
    def held(self) -> bool:
        return self._fd is not None

    @property
    def inode(self) -> int | None:
        return os.fstat(self._fd).st_ino if self._fd is not None else None

    def _still_named(self, fd: int) -> bool:
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def _write_json_atomic(path: Path, record: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{random.getrandbits(32):08x}.tmp")
    try:
        tmp.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot: with the pid, it names one
    process, even after the pid is reused."""
    from ..core.procfs import process_stat

    stat = process_stat(pid)
    return stat.starttime if stat is not None else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LockDir:
    """The host-wide folder of device locks and their holder records."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def ensure(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AllocationError(
                f"cannot create the device lock folder {self.path}: {exc.strerror}; "
                "choose another with --lossless-lock-dir", lock_dir=str(self.path)) from None
        with contextlib.suppress(OSError):  # shared by every user's jobs on this host
            if self.path.stat().st_uid == os.getuid():
                # Not sticky: other users' jobs must be able to replace holder records here.
                # A lock file deleted while held is caught by the inode in its holder record.
                self.path.chmod(0o777)

    def lock(self, lock_key: str) -> _Flock:
        return _Flock(self.path / f"{_file_stem(lock_key)}.lock")

    def record_path(self, lock_key: str) -> Path:
        return self.path / f"{_file_stem(lock_key)}.holder.json"

    def write_record(self, lock_key: str, record: Mapping[str, Any]) -> None:
        with contextlib.suppress(OSError):  # a description only: never fail a test over it
            _write_json_atomic(self.record_path(lock_key), record)

    def clear_record(self, lock_key: str) -> None:
        with contextlib.suppress(OSError):
            self.record_path(lock_key).unlink()

    def replaced_under(self, lock_key: str, lock: _Flock, host: str) -> bool:
        """True when a live holder's record names another lock file than the one just locked:
        the file was deleted while held (a tmp cleaner, say) and that holder still runs."""
        try:
            record = json.loads(self.record_path(lock_key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        pid, inode = record.get("pid"), record.get("lock_inode")
        if not (isinstance(pid, int) and isinstance(inode, int) and inode != lock.inode):
            return False
        if record.get("host") != host or not _pid_alive(pid):
            return False
        # A pid reused since the record was written is another process: the record is stale.
        started = record.get("pid_start")
        return started is None or started == _process_start(pid)

    def describe_holder(self, lock_key: str, host: str) -> str:
        """Who holds ``lock_key``, from its record, for a lock we just failed to take."""
        try:
            record = json.loads(self.record_path(lock_key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "held (no holder record yet)"
        pid = record.get("pid")
        where = f"pid {pid} on {record.get('host', '?')}"
        if record.get("host") == host and isinstance(pid, int) and not _pid_alive(pid):
            return f"held (record of {where} is stale: that process is gone)"
        return f"held by {where} ({record.get('test', '?')}, since {record.get('since', '?')})"


# ---------------------------------------------------------------------------- allocation


@dataclass
class Allocation:
    """A test's locked devices: ids, the environment for its children, identity, evidence.

    ``release`` runs the finalizers (LIFO: "end every process group I started"), records
    the idle proof after, and only then releases the locks, even when a finalizer raises.
    """

    backend: str
    ids: tuple[str, ...]
    env: dict[str, str]
    identity: list[dict[str, Any]]
    devices: tuple[Device, ...] = ()
    holder: str = ""
    acquired_at: str = ""
    waited_seconds: float = 0.0
    escalated: bool = False
    idle_before: dict[str, Any] = field(default_factory=dict)
    idle_after: dict[str, Any] | None = None
    released_at: str | None = None
    lock_dir: str = ""
    finalizer_errors: list[str] = field(default_factory=list)
    _locks: list[tuple[str, _Flock]] = field(default_factory=list, repr=False)
    _finalizers: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _proof: Callable[[], dict[str, Any]] | None = field(default=None, repr=False)
    _lockdir: LockDir | None = field(default=None, repr=False)
    _clock: Clock = field(default=SYSTEM_CLOCK, repr=False)

    @property
    def lock_keys(self) -> tuple[str, ...]:
        return tuple(d.lock_key for d in self.devices)

    @property
    def released(self) -> bool:
        return self.released_at is not None

    def add_finalizer(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` at release, before the locks go (last added runs first)."""
        if self.released:
            raise AllocationError(f"allocation of {self.holder} was already released")
        self._finalizers.append(fn)

    def release(self) -> None:
        """Finalizers (LIFO), idle proof after, then the locks; idempotent."""
        if self.released_at is not None:
            return
        errors: list[BaseException] = []
        try:
            while self._finalizers:
                fn = self._finalizers.pop()
                try:
                    fn()
                except BaseException as exc:  # every finalizer runs, even after Ctrl-C or a
                    errors.append(exc)          # pytest outcome; the first error is raised
                    self.finalizer_errors.append(f"{type(exc).__name__}: {exc}")
            if self._proof is not None:
                try:
                    self.idle_after = self._proof()
                except Exception as exc:  # evidence is best effort; the locks must go
                    self.idle_after = {"observed": False, "error": str(exc)}
        finally:
            for key, lock in reversed(self._locks):
                if self._lockdir is not None:
                    self._lockdir.clear_record(key)
                lock.release()
            self._locks.clear()
            self.released_at = utc_iso(self._clock.wall())
        if errors:
            raise errors[0]

    def __enter__(self) -> Allocation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def to_dict(self) -> dict[str, Any]:
        """The receipt's allocation block."""
        return {
            "backend": self.backend, "ids": list(self.ids), "env": dict(self.env),
            "identity": [dict(i) for i in self.identity], "lock_keys": list(self.lock_keys),
            "lock_dir": self.lock_dir, "holder": self.holder, "acquired_at": self.acquired_at,
            "released_at": self.released_at, "waited_seconds": round(self.waited_seconds, 6),
            "escalated": self.escalated, "idle_before": self.idle_before,
            "idle_after": self.idle_after, "finalizer_errors": list(self.finalizer_errors),
        }


# ---------------------------------------------------------------------------- allocator


@dataclass
class _Attempt:
    """Why one all-or-none attempt failed: locks held by others, or foreign processes."""

    held: list[Device] = field(default_factory=list)
    busy: list[dict[str, Any]] = field(default_factory=list)
    gated: bool = False


class Allocator:
    """Hands out all-or-none allocations of ``count`` devices from a fixed pool.

    An attempt tries every candidate lock without blocking; if it cannot take ``count``
    it releases all it took, waits (jittered exponential backoff, capped so a freed
    device is seen within ``poll_cap`` seconds, five times that once a wait passes 10 s, so
    many long waiters stay cheap) and tries again: nobody holds some
    devices while waiting for others, so there is no deadlock. To keep a big ask from
    starving behind a stream of small ones, a waiter that has waited ``escalate_after``
    seconds takes the backend's gate lock exclusively: new attempts (which take the
    gate shared) then pause until it is served, while current holders finish normally.
    """

    def __init__(
        self,
        backends: Sequence[Backend],
        *,
        backend: str = "auto",
        pool: Sequence[str] | None = None,
        lock_dir: Path,
        timeout: float,
        busy: str = "wait",
        clock: Clock = SYSTEM_CLOCK,
        on_wait: Callable[[str], None] | None = None,
        escalate_after: float | None = 2.0,
        poll_cap: float = 0.05,
        settle: float = 2.0,
        host: str | None = None,
    ) -> None:
        names = [b.name for b in backends]
        if backend != "auto" and backend not in names:
            raise ConfigError("--lossless-backend", backend,
                              f"no such backend; known: auto, {', '.join(names)}")
        if busy not in BUSY_POLICIES:
            raise ConfigError("--lossless-busy", busy, f"expected one of {BUSY_POLICIES}")
        self.backends = list(backends)
        self.backend_name = backend
        self.pool = tuple(pool) if pool is not None else None
        self.lock_dir = LockDir(lock_dir)
        self.timeout = timeout
        self.busy = busy
        self.clock = clock
        self.on_wait = on_wait
        self.escalate_after = escalate_after
        self.poll_cap = poll_cap
        self.settle = settle
        self.host = host or socket.gethostname()
        self._random = random.Random(os.getpid() ^ id(self))
        self._chosen: Backend | None = None
        self._skip: str | None = None
        self._resolved = False
        self._pool_devices: list[tuple[str, Device]] | None = None

    # -- backend choice

    def _resolve(self) -> None:
        if self._resolved:
            return
        self._resolved = True
        hint = "run with --lossless-backend=cpu to emulate device slots on the CPU"
        if self.backend_name == "auto":
            problems = []
            for candidate in self.backends:
                if getattr(candidate, "emulated", False):
                    continue
                if candidate.available():
                    self._chosen = candidate
                    return
                problem = getattr(candidate, "problem", None) or "unavailable"
                problems.append(f"{candidate.name}: {problem}")
            self._skip = (f"no accelerator found ({'; '.join(problems) or 'no backend'}); "
                          f"{hint}")
            return
        chosen = next(b for b in self.backends if b.name == self.backend_name)
        if chosen.available():
            self._chosen = chosen
        else:
            self._skip = (f"--lossless-backend={chosen.name} is unavailable on this host "
                          f"({getattr(chosen, 'problem', None) or 'no devices'}); {hint}")

    def skip_reason(self) -> str | None:
        """Why device tests cannot run here (no backend available), or None."""
        self._resolve()
        return self._skip

    @property
    def chosen(self) -> Backend:
        self._resolve()
        if self._chosen is None:
            raise AllocationError(self._skip or "no device backend is available")
        return self._chosen

    # -- the pool

    def pool_devices(self) -> list[tuple[str, Device]]:
        """(id as the pool spells it, device) for every device tests may take."""
        if self._pool_devices is not None:
            return self._pool_devices
        backend = self.chosen
        if self.pool is not None and isinstance(backend, EmulatedBackend):
            found = backend.devices_for(self.pool)
            self._pool_devices = list(zip(self.pool, found, strict=True))
            return self._pool_devices
        discovered = backend.discover()
        if self.pool is None:
            self._pool_devices = [(d.id, d) for d in discovered]
            return self._pool_devices
        chosen: list[tuple[str, Device]] = []
        for token in self.pool:
            device = _match(token, discovered)
            if device is None:
                have = ", ".join(f"{d.id} ({d.lock_key})" for d in discovered) or "none"
                raise AllocationError(
                    f"--lossless-devices names {token!r}, which the {backend.name} backend does "
                    f"not find on {self.host}; it has: {have}", device=token)
            if any(device.lock_key == d.lock_key for _, d in chosen):
                raise AllocationError(f"--lossless-devices names device {device.id} twice "
                                      f"({token!r})", device=token)
            chosen.append((token, device))
        self._pool_devices = chosen
        return chosen

    # -- acquisition

    def acquire(self, count: int, holder: str) -> Allocation:
        """Lock ``count`` devices of the pool for ``holder`` (a test id), all or none."""
        backend = self.chosen
        if count < 1:
            raise AllocationError(f"{holder} asks for {count} devices; ask for 1 or more")
        pool = self.pool_devices()
        labels = ",".join(label for label, _ in pool)
        if count > len(pool):
            raise AllocationError(
                f"{holder} asks for {count} {backend.name} devices but the pool has only "
                f"{len(pool)} ({labels or 'none'}): lower devices=N in its marker or widen "
                "--lossless-devices", count=count, pool=labels)
        self.lock_dir.ensure()
        start = self.clock.monotonic()
        deadline = start + self.timeout
        gate = self.lock_dir.lock(f".gate-{backend.name}")
        escalated = False
        announced = False
        busy_keys: set[str] = set()
        delay = 0.01
        try:
            while True:
                result = self._attempt(backend, pool, count, holder, busy_keys,
                                       gate=None if escalated else gate)
                if isinstance(result, Allocation):
                    result.waited_seconds = self.clock.monotonic() - start
                    result.escalated = escalated
                    return result
                if result.busy and self.busy == "fail":
                    raise AllocationError(
                        f"{holder}: {backend.name} device(s) busy with a process that is not "
                        f"a pytest-lossless holder: {_describe_busy(result.busy)}; end it, or "
                        "run with --lossless-busy=wait", processes=result.busy)
                busy_keys = {d.lock_key for label, d in pool
                             if any(p.get("device") == d.id for p in result.busy)}
                now = self.clock.monotonic()
                if not announced and self.on_wait is not None:
                    announced = True
                    self.on_wait(f"pytest-lossless: {holder} waits for {count} {backend.name} "
                                 f"device(s) of [{labels}]: {self._blockers(result)} "
                                 f"(timeout {self.timeout:g} s, locks in {self.lock_dir.path})")
                if now >= deadline:
                    blockers = self._blockers(result)  # read the holder records once
                    raise AllocationTimeout(
                        f"{holder} timed out after {now - start:.1f} s waiting for {count} "
                        f"{backend.name} device(s) of [{labels}]: {blockers}. "
                        "Raise --lossless-lock-timeout, or free the devices (locks in "
                        f"{self.lock_dir.path})", holders=blockers)
                if (not escalated and result.held and self.escalate_after is not None
                        and now - start >= self.escalate_after):
                    escalated = gate.try_acquire()
                    if escalated:
                        self.lock_dir.write_record(f".gate-{backend.name}", self._record(
                            holder, [f"{count} of [{labels}]"]))
                pause = delay * (0.5 + self._random.random())
                self.clock.sleep(min(pause, max(0.0, deadline - now)))
                cap = self.poll_cap if now - start < 10.0 else self.poll_cap * 5
                delay = min(delay * 1.6, cap)
        finally:
            if escalated:
                self.lock_dir.clear_record(f".gate-{backend.name}")
                gate.release()

    def _record(self, holder: str, keys: Sequence[str]) -> dict[str, Any]:
        now = self.clock.wall()
        return {"pid": os.getpid(), "pid_start": _process_start(os.getpid()), "host": self.host,
                "test": holder, "since": utc_iso(now), "since_epoch": now, "locks": list(keys)}

    def _attempt(self, backend: Backend, pool: Sequence[tuple[str, Device]], count: int,
                 holder: str, busy_keys: set[str], *, gate: _Flock | None) -> Allocation | _Attempt:
        if gate is not None and not gate.try_acquire(shared=True):
            return _Attempt(gated=True)
        taken: list[tuple[str, Device, _Flock]] = []
        failed: list[Device] = []
        try:
            # Devices seen busy with a foreign process go last, so others are tried first.
            ordered = sorted(pool, key=lambda item: item[1].lock_key in busy_keys)
            for label, device in ordered:
                lock = self.lock_dir.lock(device.lock_key)
                if lock.try_acquire() and self.lock_dir.replaced_under(device.lock_key, lock,
                                                                       self.host):
                    lock.release()  # a live holder still locks the file this one replaced
                    failed.append(device)
                elif lock.held:
                    taken.append((label, device, lock))
                    if len(taken) == count:
                        break
                else:
                    failed.append(device)
        finally:
            if gate is not None:
                gate.release()
        if len(taken) < count:
            for _, _, lock in reversed(taken):
                lock.release()
            return _Attempt(held=failed)
        try:
            return self._grant(backend, taken, holder)
        except _Busy as busy:
            for _, _, lock in reversed(taken):
                lock.release()
            return _Attempt(busy=busy.processes)
        except BaseException:
            for _, _, lock in reversed(taken):
                lock.release()
            raise

    def _grant(self, backend: Backend, taken: Sequence[tuple[str, Device, _Flock]],
               holder: str) -> Allocation:
        taken = sorted(taken, key=lambda t: _pool_index(self._pool_devices or [], t[1]))
        devices = [d for _, d, _ in taken]
        before = self._proof(backend, devices)
        if before.get("foreign_processes"):
            raise _Busy(before["foreign_processes"])
        keys = [d.lock_key for d in devices]
        record = self._record(holder, keys)
        for key, (_, _, lock) in zip(keys, taken, strict=True):
            # The lock file's identity lets a later taker see that this file was replaced.
            self.lock_dir.write_record(key, {**record, "lock_inode": lock.inode})
        allocation = Allocation(
            backend=backend.name, ids=tuple(label for label, _, _ in taken),
            env=backend.visibility_env(devices),
            identity=[d.identity(self.host) for d in devices], devices=tuple(devices),
            holder=holder, acquired_at=record["since"], idle_before=before,
            lock_dir=str(self.lock_dir.path), _locks=[(k, lk) for k, (_, _, lk) in
                                                      zip(keys, taken, strict=True)],
            _lockdir=self.lock_dir, _clock=self.clock,
        )
        allocation._proof = lambda: self._proof_after(backend, devices)
        return allocation

    def _proof(self, backend: Backend, devices: Sequence[Device]) -> dict[str, Any]:
        """Memory in use and foreign processes on ``devices`` now, where the backend can tell."""
        if not getattr(backend, "observes_usage", True):
            return {"observed": False, "at": utc_iso(self.clock.wall()),
                    "note": f"{backend.name} devices report no memory or processes"}
        try:
            now = {d.lock_key: d for d in backend.discover()}
            me = os.getpid()  # a test's own process is not foreign to its allocation
            foreign = [p for p in backend.foreign_processes(devices) if p.get("pid") != me]
        except ToolError as exc:
            return {"observed": False, "at": utc_iso(self.clock.wall()), "error": str(exc)}
        return {
            "observed": True, "at": utc_iso(self.clock.wall()),
            "memory_used_mib": {d.id: now[d.lock_key].memory_used_mib if d.lock_key in now
                                else None for d in devices},
            "utilization_pct": {d.id: now[d.lock_key].utilization_pct if d.lock_key in now
                                else None for d in devices},
            "foreign_processes": foreign,
        }

    def _proof_after(self, backend: Backend, devices: Sequence[Device]) -> dict[str, Any]:
        # A process that just ended can linger in the tool's table for a moment.
        deadline = self.clock.monotonic() + self.settle
        while True:
            proof = self._proof(backend, devices)
            if not proof.get("foreign_processes") or self.clock.monotonic() >= deadline:
                return proof
            self.clock.sleep(0.1)

    def _blockers(self, attempt: _Attempt) -> str:
        # Devices with the same holder are named together: "0,1 held by pid 805 (...)".
        by_holder: dict[str, list[str]] = {}
        for device in attempt.held:
            text = self.lock_dir.describe_holder(device.lock_key, self.host)
            by_holder.setdefault(text, []).append(device.id)
        parts = [f"{','.join(ids)} {text}" for text, ids in by_holder.items()]
        if attempt.busy:
            parts.append(f"busy with {_describe_busy(attempt.busy)}")
        if attempt.gated:
            parts.append("a longer waiter has priority: "
                         + self.lock_dir.describe_holder(f".gate-{self.chosen.name}", self.host))
        return "; ".join(parts) or "nothing (retrying)"


class _Busy(Exception):
    def __init__(self, processes: list[dict[str, Any]]) -> None:
        super().__init__("busy")
        self.processes = processes


def _describe_busy(processes: Iterable[Mapping[str, Any]]) -> str:
    return ", ".join(
        f"device {p.get('device')}: pid {p.get('pid')} ({p.get('process') or '?'}"
        + (f", {p['used_memory_mib']:g} MiB" if p.get("used_memory_mib") is not None else "")
        + ")" for p in processes)


def _pool_index(pool: Sequence[tuple[str, Device]], device: Device) -> int:
    for index, (_, candidate) in enumerate(pool):
        if candidate.lock_key == device.lock_key:
            return index
    return len(pool)


def _match(token: str, devices: Sequence[Device]) -> Device | None:
    """The device a ``--lossless-devices`` entry names: id, uuid (or unique prefix), bus id."""
    for device in devices:
        if token == device.id:
            return device
    lowered = token.lower()
    prefixed = [d for d in devices if d.uuid and d.uuid.lower().startswith(lowered)
                and not token.isdigit()]
    if len(prefixed) == 1:
        return prefixed[0]
    bus = normalize_bus_id(token)
    for device in devices:
        if bus is not None and device.bus_id == bus:
            return device
    return None
