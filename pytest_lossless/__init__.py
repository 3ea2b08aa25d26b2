"""pytest-lossless: prove that a faster ML inference build changes nothing, and is faster.

The plugin loads itself through the ``pytest11`` entry point; this package also
exposes the domain API for use without pytest.
"""

from __future__ import annotations

from importlib import import_module

# Not ``from typing import TYPE_CHECKING``: typing is not loaded at startup, and ``python -m
# pytest_lossless`` imports this package before it can take the working folder off sys.path.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Media": "core.expect",
    "Verdict": "core.verdict",
    "tolerance": "gates",
    "ulp": "gates",
    "Gate": "gates",
    "GateResult": "gates",
    "parse_gate": "gates",
    "Artifact": "kinds",
    "KindRegistry": "kinds",
    "LosslessVerdict": "compare.repeatability",
    "compare_control_candidate": "compare.repeatability",
    "GoldenFolder": "goldens.folder",
    "Golden": "goldens.checks",
    "Settings": "settings",
    "LosslessError": "errors",
    "ArtifactError": "errors",
    "TruncatedArtifact": "errors",
    "GoldenMissing": "errors",
    "GoldenIntegrityError": "errors",
    "GateChanged": "errors",
    "NondeterministicProducer": "errors",
    "AllocationError": "errors",
    "AllocationTimeout": "errors",
    "RunError": "errors",
    "Inconclusive": "errors",
    "hookimpl": "hookspecs",
    "Device": "devices",
    "Allocation": "devices",
    "Allocator": "devices",
    "Launcher": "run",
    "RunResult": "run",
    "Server": "run",
    "lifecycle_verdict": "run",
    "Receipt": "evidence.receipts",
    "verify": "evidence.verify",
    "SpeedVerdict": "speed.runner",
    "run_speed_gate": "speed.runner",
    "drop_page_cache": "speed.before_arm",
    "devices_idle": "speed.before_arm",
    "percentile": "speed.stats",
}

__all__ = ["__version__", "trace", *_EXPORTS]


def __getattr__(name: str) -> Any:
    # Lazy, so `import pytest_lossless` stays cheap for pytest's plugin loading.
    if name == "trace":  # a module: the trace writer a model calls (numpy only)
        return import_module(".trace", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_lossless' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
