"""The pytest adapter: the ``pytest11`` entry point, one module per fixture or feature.

Each module below is a pytest plugin of its own, like pytest's ``_pytest/`` modules: it owns
its ``StashKey``\\ s, its fixtures and its hooks, and calls into the domain packages. The
modules are registered through ``pytest_plugins``, so ``-p no:lossless`` turns them all off.
"""

from __future__ import annotations

#: Registered by pytest when it loads this entry point (in this order).
pytest_plugins = [
    # Each after the modules it imports, so that pytest imports (and may rewrite) each one
    # itself: a module imported early by another cannot be rewritten, and pytest says so.
    "pytest_lossless.plugin.config",
    "pytest_lossless.plugin.evidence",
    "pytest_lossless.plugin.outcomes",
    "pytest_lossless.plugin.devices",
    "pytest_lossless.plugin.shard",
    "pytest_lossless.plugin.terminal_progress",
    "pytest_lossless.plugin.model_run",
    "pytest_lossless.plugin.export",
    "pytest_lossless.plugin.golden",
    "pytest_lossless.plugin.lossless",
    "pytest_lossless.plugin.canary_watch",
    "pytest_lossless.plugin.speed_gate",
    "pytest_lossless.plugin.session",
    "pytest_lossless.plugin.html_report",
]
