"""Scoped goldens: one golden per environment class, for outputs that belong to their hardware.

A CUDA path is not bit-identical to the CPU path, nor necessarily across GPU models or runtime
versions, so ``golden.check(..., scope="device")`` keeps one golden per *environment class*:
the backend, the device model and the runtime's major version of the test's allocation
(``cuda / NVIDIA H200 / CUDA 13``; the cpu slots are ``cpu / cpu slot / <machine>``). The
default scope (``"all"``) keeps one golden for every environment.

Layout: a default golden lives in ``goldens/<module>/<test>/``; a device-scoped one in
``goldens/<module>/<test>@device/<environment class>/``, a golden folder of its own (manifest,
lock, atomic swap) whose name is the class in safe characters; each of its manifest entries says
``"scope": "device"`` and the ``environment`` it was made in. (``@`` never ends a test name, so
no test's folder can be another test's scoped folder.)
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.text import printable
from ..errors import ConfigError, GoldenMissing, LosslessError
from .manifest import Environment, check_scope, load_manifest

__all__ = ["Environment", "check_scope"]  # the entry's record and check, in :mod:`.manifest`

#: The scopes ``golden.check(scope=...)`` accepts (None is the default, ``"all"``).
SCOPES = ("all", "device")
#: The suffix of the folder that holds a test's device-scoped goldens, one subfolder per class.
DEVICE_SUFFIX = "@device"

_UNSAFE = re.compile(r"[^A-Za-z0-9.+\-]+")
_CUDA_VERSION = re.compile(r"CUDA Version\s*:?\s*(\d+)\.\d+")
_NPU_VERSION = re.compile(r"npu-smi\s+\S+\s+Version:\s*(\d+)\.")


def parse_scope(scope: object) -> str:
    """``"all"`` or ``"device"``; anything else is a :class:`ConfigError` naming the choices."""
    if scope is None:
        return "all"
    if isinstance(scope, str) and scope in SCOPES:
        return scope
    raise ConfigError("golden.check(scope=...)", scope, "expected None, 'all' or 'device'")


def environment_of(
    backend: str, identity: Sequence[Mapping[str, Any]], runtime: str | None
) -> Environment:
    """The class of an allocation: its backend, its devices' model names (distinct ones joined
    with ``+``) and the runtime (:func:`runtime_of`)."""
    names = sorted(
        {printable(str(d.get("name"))) for d in identity if d.get("name")} or {"unnamed device"}
    )
    return Environment(printable(backend), " + ".join(names), runtime)


def runtime_of(backend: object, machine: Callable[[], str] = platform.machine) -> str | None:
    """The runtime's major version where the backend can tell (None when it cannot).

    A backend of a plugin may say it itself: a ``runtime`` attribute or method returning text
    such as ``"ROCm 6"``. The built-in ones: cuda from ``nvidia-smi``'s header (``CUDA 13``), npu
    from ``npu-smi info``'s (``npu-smi 24``), cpu slots from the machine (``x86_64``)."""
    for member in (backend, getattr(backend, "backend", None)):  # a completed plugin backend
        own = getattr(member, "runtime", None)
        if callable(own):
            own = own()
        if isinstance(own, str) and own:
            return printable(own)
    name = getattr(backend, "name", None)
    if name == "cpu":
        return machine() or None
    runner, smi = getattr(backend, "runner", None), getattr(backend, "smi", None)
    if name not in ("cuda", "npu") or not callable(runner) or not isinstance(smi, str):
        return None
    from ..devices.base import ToolError

    try:
        text = runner([smi] if name == "cuda" else [smi, "info"])
    except ToolError:
        return None
    return parse_runtime(str(name), str(text))


def parse_runtime(backend: str, text: str) -> str | None:
    """The runtime named in a device tool's output: ``CUDA 13`` from ``nvidia-smi`` (its table
    header, or ``-q``/``--version``'s ``CUDA Version : 13.0``), ``npu-smi 24`` from
    ``npu-smi info``."""
    if backend == "cuda" and (match := _CUDA_VERSION.search(text)):
        return f"CUDA {match.group(1)}"
    if backend == "npu" and (match := _NPU_VERSION.search(text)):
        return f"npu-smi {match.group(1)}"
    return None


def scoped_path(folder: Path, environment: Environment | None) -> Path:
    """Where a test's goldens of ``environment`` live (its default folder for None)."""
    if environment is None:
        return folder
    return folder.with_name(folder.name + DEVICE_SUFFIX) / environment.folder


def existing(folder: Path, root: Path) -> list[str]:
    """The environment classes that have device-scoped goldens for the test whose default
    folder is ``folder`` (labels from their manifests; unreadable ones by folder name)."""
    base = folder.with_name(folder.name + DEVICE_SUFFIX)
    found = []
    try:
        children = sorted(p for p in base.iterdir() if not p.name.startswith("."))
    except OSError:
        return []
    for child in children:
        label = child.name
        try:
            entries, _ = load_manifest(child, root=root)
        except LosslessError:  # a damaged one still exists; its own run names the damage
            entries = {}
        for entry in entries.values():
            env = entry.environment
            label = env.label if env is not None else label
            break
        found.append(label)
    return found


class ScopeMissing(GoldenMissing):
    """No golden of this environment class: says which class, which exist, and how to make it."""

    def __init__(
        self,
        folder: Path,
        name: str,
        environment: Environment,
        others: Sequence[str],
        *,
        default: Path | None = None,
    ) -> None:
        self.folder = folder
        self.name = name
        self.environment = environment
        self.others = list(others)
        self.default = default
        there = (
            "goldens of scope 'device' exist for " + "; ".join(self.others)
            if self.others
            else "no environment has one yet"
        )
        if default is not None:
            there += f" (one for all environments is in {default}; this check asks for "
            there += "scope='device')"
        LosslessError.__init__(
            self,
            f"no golden {name!r} of scope 'device' for this environment, "
            f"{environment.label}, in {folder}: {there}. Create it with --update-goldens on a "
            f"{environment.label} machine: each environment's goldens are made where it runs",
        )


def missing(
    folder: Path, default_folder: Path, name: str, environment: Environment, root: Path
) -> ScopeMissing:
    """The error for a device-scoped check with no golden of its class in ``folder``."""
    try:
        unscoped = name in load_manifest(default_folder, root=root)[0]
    except LosslessError:  # the default folder's own damage is not this check's to report
        unscoped = False
    return ScopeMissing(
        folder,
        name,
        environment,
        existing(default_folder, root),
        default=default_folder if unscoped else None,
    )
