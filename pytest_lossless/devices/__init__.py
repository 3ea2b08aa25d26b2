"""Device backends (npu, cuda, cpu slots), discovery, identity and host-wide device locks.

A test that needs accelerators gets an :class:`Allocation`: a fixed set of devices, each
held through one OS file lock named by the device's stable identity, so pytest-xdist
workers and separate CI jobs on one host never share a device. The :class:`Allocator`
takes all N locks or none (never holding some while waiting for others), reports who
holds what while it waits, and records an idle proof (memory in use, foreign processes)
before and after the test.

The modules follow the flow: ``base`` (Device, the Backend Protocol, the tool runner),
``smi`` (parsers of the vendor tools' text), ``backends`` (the built-ins and the session's
list), ``locks`` (flock files and holder records), ``allocation`` and ``allocator``.
This package imports no pytest: the allocator works, and is tested, without it.
"""

from __future__ import annotations

from .allocation import Allocation as Allocation
from .allocator import Allocator as Allocator
from .backends import CpuBackend as CpuBackend
from .backends import CudaBackend as CudaBackend
from .backends import NpuBackend as NpuBackend
from .backends import builtin_backends as builtin_backends
from .backends import collect_backends as collect_backends
from .backends import merge_backends as merge_backends
from .base import Backend as Backend
from .base import Device as Device
from .base import ToolError as ToolError
from .base import normalize_bus_id as normalize_bus_id
from .locks import LockDir as LockDir
from .smi import parse_npu_smi_board as parse_npu_smi_board
from .smi import parse_npu_smi_info as parse_npu_smi_info
from .smi import parse_npu_smi_map as parse_npu_smi_map
from .smi import parse_nvidia_smi_apps as parse_nvidia_smi_apps
from .smi import parse_nvidia_smi_gpus as parse_nvidia_smi_gpus

__all__ = [
    "Allocation",
    "Allocator",
    "Backend",
    "CpuBackend",
    "CudaBackend",
    "Device",
    "LockDir",
    "NpuBackend",
    "ToolError",
    "builtin_backends",
    "collect_backends",
    "merge_backends",
    "normalize_bus_id",
    "parse_npu_smi_board",
    "parse_npu_smi_info",
    "parse_npu_smi_map",
    "parse_nvidia_smi_apps",
    "parse_nvidia_smi_gpus",
]
