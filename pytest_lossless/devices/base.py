"""What a device is and what a backend must offer: the value types every other devices module
builds on, the vendor-tool runner, and how a device is named (id, uuid prefix, bus id)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..core.records import JsonObject, Record, from_json, spec

#: Seconds one call of ``nvidia-smi`` / ``npu-smi`` may take before the backend gives up.
TOOL_TIMEOUT = 30.0


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

    def identity(self, host: str) -> DeviceIdentity:
        """What a receipt records about the device: everything that names it, no readings."""
        return DeviceIdentity(
            id=self.id,
            backend=self.backend,
            host=host,
            lock_key=self.lock_key,
            uuid=self.uuid,
            bus_id=self.bus_id,
            name=self.name,
            serial=self.serial,
        )


@dataclass(frozen=True)
class DeviceIdentity(Record):
    """One device of an allocation as its receipt names it (the ``identity`` entries): what
    names it on ``host``, never its readings. A name the backend cannot tell is None, and
    absent from the JSON."""

    id: str
    backend: str
    host: str
    lock_key: str
    uuid: str | None = spec(None, omit="none")
    bus_id: str | None = spec(None, omit="none")
    name: str | None = spec(None, omit="none")
    serial: str | None = spec(None, omit="none")


@runtime_checkable
class Backend(Protocol):
    """A kind of device: how to find them, and how to make a child process see a subset.

    These are all the members the allocator uses. A plugin's backend that lacks some of them
    (written before they were named here) is completed with defaults where it enters, in
    :func:`~pytest_lossless.devices.backends.collect_backends`.
    """

    @property
    def name(self) -> str:
        """The backend's name, as ``--lossless-backend`` spells it; unique in a session."""
        ...

    @property
    def emulated(self) -> bool:
        """True for devices that are not hardware (cpu slots): ``auto`` never picks them."""
        ...

    @property
    def observes_usage(self) -> bool:
        """Whether :meth:`discover` and :meth:`foreign_processes` tell memory and processes;
        when not, an allocation's idle proof says it was not observed."""
        ...

    @property
    def problem(self) -> str | None:
        """Why the backend is unavailable, once :meth:`available` said so; else None."""
        ...

    def available(self) -> bool:
        """Whether this host has such devices (a missing tool means no)."""
        ...

    def discover(self) -> list[Device]:
        """Every device of this kind on the host, with current memory and utilisation."""
        ...

    def devices_for(self, ids: Sequence[str]) -> list[Device] | None:
        """The devices a pool of ``ids`` names, one per id, for a backend whose devices are
        whatever the pool names (cpu slots); None for one whose pool must name devices that
        :meth:`discover` finds."""
        ...

    def visibility_env(self, devices: Sequence[Device]) -> dict[str, str]:
        """The environment that makes a child process see exactly ``devices``."""
        ...

    def foreign_processes(self, devices: Sequence[Device]) -> Sequence[ForeignProcess | JsonObject]:
        """Processes now running on ``devices``; a plugin's backend may give each as the JSON
        object of a :class:`ForeignProcess` (read by :func:`foreign_processes`)."""
        ...


@dataclass(frozen=True)
class ForeignProcess(Record):
    """A process a backend lists on a device (the busy check, an idle proof): the device id,
    the GPU's uuid (cuda), pid, name and the device memory it holds, None where not told."""

    device: str | None = spec(None, omit="none")
    uuid: str | None = spec(None, omit="none")
    pid: int | None = None
    process: str | None = None
    used_memory_mib: float | None = None

    def describe(self) -> str:
        """``device 0: pid 4242 (python3, 900 MiB)``, for the wait line and the errors."""
        memory = "" if self.used_memory_mib is None else f", {self.used_memory_mib:g} MiB"
        return f"device {self.device}: pid {self.pid} ({self.process or '?'}{memory})"


def foreign_processes(backend: Backend, devices: Sequence[Device]) -> list[ForeignProcess]:
    """What ``backend`` lists on ``devices``; a plugin's JSON entry is read leniently (a device
    id given as a number is its text, as the built-in backends write it; a value of another
    type reads as None)."""
    return [
        p
        if isinstance(p, ForeignProcess)
        else from_json(ForeignProcess, _device_text(p), problems=[])
        for p in backend.foreign_processes(devices)
    ]


def _device_text(entry: JsonObject) -> JsonObject:
    device = entry.get("device") if isinstance(entry, dict) else None
    if isinstance(device, int) and not isinstance(device, bool):
        return {**entry, "device": str(device)}
    return entry


class ToolError(Exception):
    """A device tool is missing or failed; the backend is then unavailable (never escapes)."""


#: Runs a device tool's argv and returns its stdout (:func:`run_tool`, or a test's fake).
Runner = Callable[[Sequence[str]], str]


def run_tool(argv: Sequence[str], *, timeout: float = TOOL_TIMEOUT) -> str:
    """Run a device tool (no shell) and return its stdout; raise :class:`ToolError` otherwise."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise ToolError(f"{argv[0]} not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{' '.join(argv)} did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise ToolError(f"{argv[0]} cannot run: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        raise ToolError(f"{' '.join(argv)} exited with {done.returncode}: {' / '.join(tail)}")
    return done.stdout


def normalize_bus_id(text: str) -> str | None:
    """``00000000:1A:00.0`` and ``0000:1a:00.0`` both into ``0000:1a:00.0``; None if not one."""
    match = re.fullmatch(
        r"\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})"
        r"\.([0-7])\s*",
        text,
    )
    if not match:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def match_device(token: str, devices: Sequence[Device]) -> Device | None:
    """The device a ``--lossless-devices`` entry names: id, uuid (or unique prefix), bus id."""
    for device in devices:
        if token == device.id:
            return device
    lowered = token.lower()
    prefixed = [
        d for d in devices if d.uuid and d.uuid.lower().startswith(lowered) and not token.isdigit()
    ]
    if len(prefixed) == 1:
        return prefixed[0]
    bus = normalize_bus_id(token)
    for device in devices:
        if bus is not None and device.bus_id == bus:
            return device
    return None


def visible_filter(devices: list[Device], inherited: str | None) -> list[Device]:
    """Narrow ``devices`` to those an inherited ``*_VISIBLE_DEVICES`` value names.

    A CI scheduler that hands this job GPUs 2 and 3 sets the variable; taking GPU 0
    would step on another job, so the pool never reaches beyond it.
    """
    if inherited is None:
        return devices
    tokens = [t.strip() for t in inherited.split(",") if t.strip()]
    # Like CUDA itself: an index, or a UUID prefix that names exactly one device.
    named = {id(d) for token in tokens if (d := match_device(token, devices)) is not None}
    return [d for d in devices if id(d) in named]
