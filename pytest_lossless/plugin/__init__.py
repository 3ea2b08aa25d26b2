"""The pytest adapter: the ``pytest11`` entry point, one module per fixture or feature.

Each module below is a pytest plugin of its own, like pytest's ``_pytest/`` modules: it owns
its ``StashKey``\\ s, its fixtures and its hooks, and calls into the domain packages. They are
registered when this entry point is (:func:`pytest_addhooks`), under their module names, so
``-p no:lossless`` turns them all off. They carry the guarantees together, so ``-p no:`` of one
of them is a usage error (:mod:`.config`), but for the report and the progress line.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

#: The adapter's modules, registered in this order (each after the modules it imports).
MODULES = (
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
)


def _rewrite_none_of_ours() -> None:
    """Take this distribution out of pytest's assertion rewriting.

    pytest marks every top-level package of a plugin's distribution for assertion rewriting
    (``Config._mark_plugins_for_rewrite``), so each module of ours imported at start-up went
    through its rewriting importer: parsed and compiled from source on every run where
    bytecode is not written (``PYTHONDONTWRITEBYTECODE=1``, common in CI images), since that
    importer caches only in files of its own. Our modules hold no test assertions, so they
    need no rewriting: this leaves them to Python's own importer (and the bytecode pip
    compiled). pytest has no public way to unmark a name; where its importer does not look as
    expected, nothing changes (everything is rewritten, as before).
    """
    top = __name__.split(".", 1)[0]
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        cache = getattr(finder, "_marked_for_rewrite_cache", None)
        if isinstance(marked, set) and isinstance(cache, dict) and top in marked:
            marked.discard(top)
            cache.clear()


_rewrite_none_of_ours()


def pytest_addhooks(pluginmanager: Any) -> None:
    """Register the adapter's modules, once, as this entry point is registered.

    Not through ``pytest_plugins``: pytest looks each name listed there up among every
    installed distribution's entry points (``import_plugin(consider_entry_points=True)``), a
    scan of all installed packages per name, and marks each for assertion rewriting."""
    for name in MODULES:
        if pluginmanager.is_blocked(name) or pluginmanager.has_plugin(name):
            continue
        pluginmanager.register(importlib.import_module(name), name)
