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
This package imports no pytest: the allocator works, and is tested, without it. Its names load
on first use, so that naming :class:`Backend` (as ``hookspecs`` does) costs one small module.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

#: Each public name, by the submodule that defines it.
_LAZY = {
    "Allocation": "allocation",
    "Allocator": "allocator",
    "CpuBackend": "backends",
    "CudaBackend": "backends",
    "NpuBackend": "backends",
    "builtin_backends": "backends",
    "collect_backends": "backends",
    "merge_backends": "backends",
    "Backend": "base",
    "Device": "base",
    "ToolError": "base",
    "normalize_bus_id": "base",
    "LockDir": "locks",
    "parse_npu_smi_board": "smi",
    "parse_npu_smi_info": "smi",
    "parse_npu_smi_map": "smi",
    "parse_nvidia_smi_apps": "smi",
    "parse_nvidia_smi_gpus": "smi",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
