"""The built-in backends (npu through ``npu-smi``, cuda through ``nvidia-smi``, emulated cpu
slots) and the session's backend list: the hook's answers merged, a plugin's backend first."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..settings import parse_device_list
from .base import Backend, Device, Runner, ToolError, run_tool, visible_filter
from .smi import (
    CUDA_APPS_QUERY,
    CUDA_QUERY,
    NpuChip,
    NpuProcess,
    parse_npu_smi_board,
    parse_npu_smi_info,
    parse_npu_smi_map,
    parse_nvidia_smi_apps,
    parse_nvidia_smi_gpus,
)


class _ToolBackend:
    """A real backend read through its vendor tool (``nvidia-smi``, ``npu-smi``)."""

    name = ""
    emulated = False
    observes_usage = True
    #: What :meth:`available` says when the tool answers but lists nothing usable.
    nothing_listed = "lists no device"

    def __init__(
        self, *, smi: str, runner: Runner | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        self.smi = smi
        self.runner = runner or run_tool
        self.env = env
        #: Why the backend is unavailable, once :meth:`available` said so.
        self.problem: str | None = None

    def discover(self) -> list[Device]:
        raise NotImplementedError

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

    def __init__(
        self,
        *,
        smi: str = "nvidia-smi",
        runner: Runner | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(smi=smi, runner=runner, env=env)

    def discover(self) -> list[Device]:
        text = self.runner([self.smi, f"--query-gpu={CUDA_QUERY}", "--format=csv,noheader,nounits"])
        env = os.environ if self.env is None else self.env
        return visible_filter(parse_nvidia_smi_gpus(text), env.get("CUDA_VISIBLE_DEVICES"))

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(d.uuid or d.id for d in devices),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }

    def foreign_processes(self, devices: Sequence[Device]) -> list[dict[str, Any]]:
        text = self.runner(
            [self.smi, f"--query-compute-apps={CUDA_APPS_QUERY}", "--format=csv,noheader,nounits"]
        )
        by_uuid = {d.uuid: d for d in devices if d.uuid}
        return [
            {"device": by_uuid[app["uuid"]].id, **app}
            for app in parse_nvidia_smi_apps(text)
            if app["uuid"] in by_uuid
        ]


class NpuBackend(_ToolBackend):
    """Ascend NPUs through ``npu-smi``; children see them by logical id, ascending."""

    name = "npu"
    nothing_listed = "info lists no NPU chip"

    def __init__(
        self,
        *,
        smi: str = "npu-smi",
        runner: Runner | None = None,
        env: Mapping[str, str] | None = None,
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
        # Older npu-smi without -m: the runtime numbers chips in the table's order.
        ordered = sorted(chips, key=lambda c: (c.npu, c.chip))
        return {
            (c.npu, c.chip): c.phy_id if c.phy_id is not None else i for i, c in enumerate(ordered)
        }

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
        devices = []
        for chip in chips:
            logical = logic.get((chip.npu, chip.chip))
            if logical is None:
                continue
            devices.append(
                Device(
                    id=str(logical),
                    bus_id=chip.bus_id,
                    name=chip.name,
                    memory_used_mib=chip.memory_used_mib,
                    utilization_pct=chip.aicore_pct,
                    serial=self._serial(chip.npu),
                    backend="npu",
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

    def foreign_processes(self, devices: Sequence[Device]) -> list[dict[str, Any]]:
        _, processes, logic = self._table()
        wanted = {d.id for d in devices}
        found = []
        for proc in processes:
            logical = logic.get((proc.npu, proc.chip))
            if logical is not None and str(logical) in wanted:
                found.append(
                    {
                        "device": str(logical),
                        "pid": proc.pid,
                        "process": proc.process,
                        "used_memory_mib": proc.memory_mib,
                    }
                )
        return found


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

    def foreign_processes(self, devices: Sequence[Device]) -> list[dict[str, Any]]:
        return []


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

    def foreign_processes(self, devices: Sequence[Device]) -> list[dict[str, Any]]:
        processes: list[dict[str, Any]] = self.backend.foreign_processes(devices)
        return processes
