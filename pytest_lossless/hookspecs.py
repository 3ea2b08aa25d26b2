"""Our own hooks, ``pytest_lossless_*``, registered from ``pytest_addhooks``.

Built-in artifact kinds (video, audio, tensor, bytes) and device backends (npu, cuda,
cpu) are implemented with these same hooks, as ``trylast`` implementations, so a
plugin or conftest that implements them first takes precedence.

This module imports pluggy and the light value types its hooks speak of (no numpy, no pytest):
domain code may use it without pytest, and it sits in the layers below every package that
implements or calls these hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pathlib import Path

    from .core.artifact import Artifact
    from .core.records import JsonObject
    from .devices.base import Backend
    from .gates.gate import Gate, GateResult

__all__ = ["Artifact", "Backend", "Gate", "GateResult", "hookimpl", "hookspec"]

#: The value types the hooks speak of, importable from here as before; loaded on first use, so
#: that registering the hooks at start-up loads none of them (PEP 562).
_TYPES = {
    "Artifact": "core.artifact",
    "Backend": "devices.base",
    "Gate": "gates.gate",
    "GateResult": "gates.gate",
}


def __getattr__(name: str) -> Any:
    module = _TYPES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


hookspec = pluggy.HookspecMarker("pytest")
#: Implementations of our hooks: pytest's project name, so pytest's own manager accepts them.
hookimpl = pluggy.HookimplMarker("pytest")


@hookspec(firstresult=True)
def pytest_lossless_detect_kind(path: Path, head: bytes) -> str | None:
    """Name the artifact kind of ``path`` from its content (``head`` is its first 4 KiB).

    Return ``None`` to let the next implementation decide. Built-ins answer
    ``"video"``, ``"audio"``, ``"tensor"``, and finally ``"bytes"``.
    """


@hookspec(firstresult=True)
def pytest_lossless_fingerprint(kind: str, path: Path) -> JsonObject | None:
    """A JSON-able fingerprint of the artifact at ``path``: metadata plus digests.

    Must raise :class:`~pytest_lossless.errors.ArtifactError` for a damaged file.
    """


@hookspec(firstresult=True)
def pytest_lossless_default_gate(kind: str) -> str | None:
    """The gate used when a test names none (``"decoded"`` for media...)."""


@hookspec(firstresult=True)
def pytest_lossless_compare(
    kind: str, gate: Gate, expected: Artifact, obtained: Artifact
) -> GateResult | None:
    """Compare two artifacts of ``kind`` under ``gate``; the result names the first mismatch."""


@hookspec(firstresult=True)
def pytest_lossless_perturb(kind: str, gate: Gate, path: Path, out: Path) -> str | None:
    """The canary's perturbation for a kind: write to ``out`` a copy of the artifact at ``path``
    with exactly one unit (row, record, sample...) changed so that ``gate`` must fail, and
    return a description of that unit (``"row 2"``); ``None`` leaves it to the built-in
    perturbation (one decoded frame byte, PCM sample or tensor bit for the built-in kinds; one
    flipped byte of the file for any other). The kind's compare must then say FAIL, or the gate
    cannot fail (:mod:`pytest_lossless.kinds.canary`).
    """


@hookspec(firstresult=True)
def pytest_lossless_pictures(
    kind: str, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
) -> list[str] | None:
    """Write into ``folder`` what a person looks at when ``result`` failed (PNG pictures, shown
    in the HTML report; text listings, linked) and return their paths; ``None`` for a kind this
    implementation does not know. Built-ins draw the first differing frame (video, image) or
    list the first differing samples (audio) or elements (tensor)."""


@hookspec
def pytest_lossless_kinds() -> list[Any]:  # type: ignore[empty-body]
    """Kinds this plugin provides, each a :class:`~pytest_lossless.kinds.Kind` (one object
    answering the kind hooks above for its own name), registered before the first comparison,
    ahead of the built-in kinds."""


@hookspec
def pytest_lossless_backends() -> list[Backend]:  # type: ignore[empty-body]
    """Device backends this plugin provides (each has a unique ``name``)."""
