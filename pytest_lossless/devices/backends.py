"""The built-in backends (npu through ``npu-smi``, cuda through ``nvidia-smi``, emulated cpu
slots) and the session's backend list: the hook's answers merged, a plugin's backend first."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..core.records import JsonObject, Record, spec
from ..errors import ConfigError
from ..settings import parse_device_list
from .base import Backend, Device, ForeignProcess, Runner, ToolError, run_tool, visible_filter
from .smi import (
    CUDA_APPS_QUERY,
    CUDA_QUERY,
    NpuChip,
    NpuProcess,
    npu_memory_by_pid,
    nvidia_memory_by_pid,
    parse_npu_smi_board,
    parse_npu_smi_info,
    parse_npu_smi_map,
    parse_nvidia_smi_apps,
    parse_nvidia_smi_gpus,
)

#: Seconds between two reads of the device memory a run's processes hold (each read is one
#: call of the vendor tool, which takes tens of milliseconds to seconds).
MEMORY_INTERVAL = 1.0
#: Seconds one such read may take; a slower (hung) tool is abandoned and the read counted failed.
MEMORY_TIMEOUT = 5.0


@dataclass(frozen=True)
class MemoryReader:
    """How a backend reads the device memory each process holds: ``read(timeout)`` calls the
    vendor tool once and returns MiB per pid (summed over devices), or raises ToolError."""

    source: str
    read: Callable[[float], dict[int, float]]


class _ToolBackend:
    """A real backend read through its vendor tool (``nvidia-smi``, ``npu-smi``)."""

    name = ""
    emulated = False
    observes_usage = True
    #: What :meth:`available` says when the tool answers but lists nothing usable.
    nothing_listed = "lists no device"
    #: The vendor tool, when the caller names none.
    default_smi = ""

    def __init__(
        self, *, smi: str = "", runner: Runner | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        self.smi = smi or self.default_smi
        self.runner = runner or run_tool
        self.env = env
        #: Why the backend is unavailable, once :meth:`available` said so.
        self.problem: str | None = None

    def discover(self) -> list[Device]:
        raise NotImplementedError

    def _call(self, argv: Sequence[str], timeout: float) -> str:
        """The tool's stdout within ``timeout`` s (a test's runner is called as it is)."""
        if self.runner is run_tool:
            return run_tool(argv, timeout=timeout)
        return self.runner(argv)

    def devices_for(self, ids: Sequence[str]) -> None:
        """None: the pool names devices that the tool lists, never makes them up."""
        return None

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
    default_smi = "nvidia-smi"

    def discover(self) -> list[Device]:
        text = self.runner([self.smi, f"--query-gpu={CUDA_QUERY}", "--format=csv,noheader,nounits"])
        env = os.environ if self.env is None else self.env
        return visible_filter(parse_nvidia_smi_gpus(text), env.get("CUDA_VISIBLE_DEVICES"))

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(d.uuid or d.id for d in devices),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }

    def foreign_processes(self, devices: Sequence[Device]) -> list[ForeignProcess]:
        text = self.runner(
            [self.smi, f"--query-compute-apps={CUDA_APPS_QUERY}", "--format=csv,noheader,nounits"]
        )
        by_uuid = {d.uuid: d for d in devices if d.uuid}
        return [
            replace(app, device=by_uuid[app.uuid].id)
            for app in parse_nvidia_smi_apps(text)
            if app.uuid in by_uuid
        ]

    def memory_reader(self) -> MemoryReader:
        """Device memory per pid from the compute-apps table (the busy check's query)."""
        argv = [
            self.smi,
            f"--query-compute-apps={CUDA_APPS_QUERY}",
            "--format=csv,noheader,nounits",
        ]
        return MemoryReader(
            self.smi, lambda timeout: nvidia_memory_by_pid(self._call(argv, timeout))
        )


@dataclass(frozen=True)
class NpuDevice(Device):
    """An npu chip; ``chip`` is set where its card's chips share one bus id (a 310P3 card
    lists both of its chips at one PCI function), so that each chip has a lock of its own."""

    chip: int | None = None

    @property
    def lock_key(self) -> str:
        key = super().lock_key
        return key if self.chip is None or not self.bus_id else f"{key}/chip{self.chip}"


class NpuBackend(_ToolBackend):
    """Ascend NPUs through ``npu-smi``; children see them by logical id, ascending."""

    name = "npu"
    nothing_listed = "info lists no NPU chip"
    default_smi = "npu-smi"

    def __init__(
        self, *, smi: str = "", runner: Runner | None = None, env: Mapping[str, str] | None = None
    ) -> None:
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
        # Older npu-smi without -m: the runtime numbers the chips it sees 0..n-1 in the table's
        # order. Not by Phy-ID: that is the driver's physical number, which in a container
        # differs from the runtime's (sgl-project/sglang#14266; tests/unit/test_npu_tables.py).
        ordered = sorted(chips, key=lambda c: (c.npu, c.chip))
        return {(c.npu, c.chip): i for i, c in enumerate(ordered)}

    def _serial(self, npu: int) -> str | None:
        if npu not in self._serials:
            try:
                board = parse_npu_smi_board(
                    self.runner([self.smi, "info", "-t", "board", "-i", str(npu)])
                )
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
        buses = [c.bus_id for c in chips]
        devices: list[Device] = []
        for chip in chips:
            logical = logic.get((chip.npu, chip.chip))
            if logical is None:
                continue
            devices.append(
                NpuDevice(
                    id=str(logical),
                    bus_id=chip.bus_id,
                    name=chip.name,
                    memory_used_mib=chip.memory_used_mib,
                    utilization_pct=chip.aicore_pct,
                    serial=self._serial(chip.npu),
                    backend="npu",
                    chip=chip.chip if chip.bus_id and buses.count(chip.bus_id) > 1 else None,
                )
            )
        devices.sort(key=lambda d: int(d.id))
        env = os.environ if self.env is None else self.env
        return visible_filter(devices, env.get("ASCEND_RT_VISIBLE_DEVICES"))

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        ids = sorted(
            (d.id for d in devices),
            key=lambda i: (not i.isdigit(), int(i) if i.isdigit() else 0, i),
        )
        return {"ASCEND_RT_VISIBLE_DEVICES": ",".join(ids)}

    def foreign_processes(self, devices: Sequence[Device]) -> list[ForeignProcess]:
        _, processes, logic = self._table()
        wanted = {d.id for d in devices}
        found = []
        for proc in processes:
            logical = logic.get((proc.npu, proc.chip))
            if logical is not None and str(logical) in wanted:
                found.append(
                    ForeignProcess(str(logical), None, proc.pid, proc.process, proc.memory_mib)
                )
        return found

    def memory_reader(self) -> MemoryReader:
        """Device memory per pid from the process table of ``npu-smi info``."""
        argv = [self.smi, "info"]
        return MemoryReader(self.smi, lambda timeout: npu_memory_by_pid(self._call(argv, timeout)))


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
        """One slot per id: a cpu slot is whatever the pool names."""
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

    def foreign_processes(self, devices: Sequence[Device]) -> list[ForeignProcess]:
        return []


def memory_reader_for(backend: str | None) -> MemoryReader | str:
    """The device memory reader of the built-in backend named ``backend``, or why there is
    none (no allocation; cpu slots have no device memory; a plugin's backend offers no reader)."""
    if backend is None:
        return "the run holds no device allocation"
    if backend == "cuda":
        return CudaBackend().memory_reader()
    if backend == "npu":
        return NpuBackend().memory_reader()
    if backend == CpuBackend.name:
        return "cpu slots have no device memory to read"
    return f"the {backend} backend offers no device memory reading"


@dataclass(frozen=True)
class PidPeak(Record):
    """The most device memory one process of a run held at one read."""

    pid: int
    peak_mib: float


def _unread(memory: DeviceMemory) -> bool:
    return memory.unavailable is not None


@dataclass(frozen=True)
class DeviceMemory(Record):
    """A run's ``device_memory``: the peak MiB its processes held, or why it was not read
    (``unavailable``; with ``source``, ``samples`` 0 and ``failed_reads`` when the tool was
    asked but no read succeeded). Keys as :class:`DeviceMemoryMeter` has always written them:
    an unread record names its ``source`` before ``samples`` (``tool``), a read one after."""

    unavailable: str | None = spec(None, omit="none")
    tool: str | None = spec(
        key="source", omit="none", derive=lambda m: m.source if _unread(m) else None
    )
    peak_mib: float | None = spec(None, omit=_unread)
    samples: int | None = spec(None, omit="none")
    source: str | None = spec(None, omit=lambda m: _unread(m) or m.source is None)
    peak_at_seconds: float | None = spec(None, omit=_unread)
    samples_with_run_processes: int | None = spec(None, omit=_unread)
    failed_reads: int | None = spec(None, omit="none")
    interval_seconds: float | None = spec(None, omit=_unread)
    timeout_seconds: float | None = spec(None, omit=_unread)
    processes: tuple[PidPeak, ...] = spec((), omit=_unread)
    last_error: str | None = spec(None, omit="none")
    note: str | None = spec(None, omit="none")


class DeviceMemoryMeter:
    """The peak device memory of one run's processes, read through a :class:`MemoryReader`.

    :meth:`tick` (called by the run's process sampler, with the pids of its processes) starts
    a read in a thread of its own when none is in flight and ``interval`` s passed since the
    last one began, so a read never delays the sampler and a hung tool (abandoned after
    ``timeout`` s, or never answering at all) only stops further reads. Given a reason instead
    of a reader (cpu slots), it is off entirely: no tool is called, the record says why.
    """

    def __init__(
        self,
        reader: MemoryReader | str,
        *,
        interval: float | None = None,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.interval = MEMORY_INTERVAL if interval is None else float(interval)
        self.timeout = MEMORY_TIMEOUT if timeout is None else float(timeout)
        self._clock = clock
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._last_start: float | None = None
        self._closed = False
        self.samples = self.matched = self.failed = 0
        self.peak_mib: float | None = None
        self.peak_at: float | None = None
        self.last_error: str | None = None
        self._per_pid: dict[int, float] = {}

    @property
    def reading(self) -> bool:
        """Whether this meter reads at all (False: the backend cannot, and it is off)."""
        return isinstance(self.reader, MemoryReader)

    def tick(self, pids: Collection[int], at: float) -> bool:
        """Start one read for ``pids`` (``at``: the run's clock, s) unless one is in flight or
        came too recently; True when one started."""
        if isinstance(self.reader, str):
            return False
        now = self._clock()
        with self._lock:
            if self._closed or not self._idle.is_set():
                return False
            if self._last_start is not None and now - self._last_start < self.interval:
                return False
            self._last_start = now
            self._idle.clear()
        threading.Thread(target=self._read, args=(frozenset(pids), at), daemon=True).start()
        return True

    def _read(self, pids: frozenset[int], at: float) -> None:
        assert isinstance(self.reader, MemoryReader)
        try:
            table = self.reader.read(self.timeout)
        except Exception as exc:  # ToolError, or a parser's surprise: a failed read, counted
            with self._lock:
                if not self._closed:
                    self.failed += 1
                    self.last_error = str(exc) if isinstance(exc, ToolError) else repr(exc)
        else:
            ours = {pid: mib for pid, mib in table.items() if pid in pids}
            with self._lock:
                if not self._closed:
                    self.samples += 1
                    self.matched += bool(ours)
                    total = sum(ours.values())
                    if self.peak_mib is None or total > self.peak_mib:
                        self.peak_mib, self.peak_at = total, at
                    for pid, mib in ours.items():
                        self._per_pid[pid] = max(mib, self._per_pid.get(pid, 0.0))
        finally:
            self._idle.set()

    def close(self, wait: float = 0.5) -> DeviceMemory:
        """The run's ``device_memory`` record; a read in flight gets up to ``wait`` s to end."""
        if isinstance(self.reader, str):
            return DeviceMemory(self.reader)
        self._idle.wait(max(0.0, wait))
        with self._lock:
            self._closed = True
            source = self.reader.source
            if not self.samples:
                why = (
                    f"no read of {source} succeeded ({self.failed} failed: {self.last_error})"
                    if self.failed
                    else f"the run ended before a read of {source} finished"
                )
                return DeviceMemory(why, source=source, samples=0, failed_reads=self.failed)
            return DeviceMemory(
                peak_mib=self.peak_mib,
                samples=self.samples,
                source=source,
                peak_at_seconds=None if self.peak_at is None else round(self.peak_at, 6),
                samples_with_run_processes=self.matched,
                failed_reads=self.failed,
                interval_seconds=self.interval,
                timeout_seconds=self.timeout,
                processes=tuple(PidPeak(pid, mib) for pid, mib in sorted(self._per_pid.items())),
                last_error=self.last_error,
                note=None
                if self.matched
                else (
                    f"{source} listed no process of the run: none held device memory when read, "
                    "or the tool reports pids of another pid namespace"
                ),
            )


def builtin_backends() -> list[Backend]:
    """The built-in backends in the order ``auto`` tries them: npu, cuda, then cpu slots."""
    return [NpuBackend(), CudaBackend(), CpuBackend()]


def merge_backends(results: Iterable[Iterable[Backend]]) -> list[Backend]:
    """Flatten the hook's answers in call order; the first backend of each name wins."""
    merged: dict[str, Backend] = {}
    for answer in results:
        for backend in answer or ():
            merged.setdefault(backend.name, backend)
    return list(merged.values())


def collect_backends(hook: Any | None = None) -> list[Backend]:
    """The backends that ``hook`` (pytest's ``config.hook``) offers; the built-ins without one.

    This is where a plugin's backend enters, so one that lacks members of :class:`Backend`
    (written before the Protocol named them all) is completed here, and nowhere else.
    """
    if hook is None:
        return builtin_backends()
    return [
        backend if isinstance(backend, Backend) else CompletedBackend(backend)
        for backend in merge_backends(hook.pytest_lossless_backends())
    ]


class CompletedBackend:
    """A plugin's backend that lacks some :class:`Backend` members, given the defaults the
    allocator assumed before the Protocol declared them: real devices (not emulated) that
    report usage, no problem stated, and a pool that names discovered devices."""

    def __init__(self, backend: Any) -> None:
        #: The plugin's own object; every member is read from it, on every use.
        self.backend = backend

    @property
    def name(self) -> str:
        name: str = self.backend.name
        return name

    @property
    def emulated(self) -> bool:
        return bool(getattr(self.backend, "emulated", False))

    @property
    def observes_usage(self) -> bool:
        return bool(getattr(self.backend, "observes_usage", True))

    @property
    def problem(self) -> str | None:
        problem: str | None = getattr(self.backend, "problem", None)
        return problem

    def available(self) -> bool:
        return bool(self.backend.available())

    def discover(self) -> list[Device]:
        devices: list[Device] = self.backend.discover()
        return devices

    def devices_for(self, ids: Sequence[str]) -> list[Device] | None:
        make = getattr(self.backend, "devices_for", None)
        if make is None:
            return None
        devices: list[Device] = make(ids)
        return devices

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        env: dict[str, str] = self.backend.visibility_env(devices)
        return env

    def foreign_processes(self, devices: Sequence[Device]) -> Sequence[ForeignProcess | JsonObject]:
        processes: Sequence[ForeignProcess | JsonObject] = self.backend.foreign_processes(devices)
        return processes
