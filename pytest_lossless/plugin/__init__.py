"""The pytest adapter: the ``pytest11`` entry point, one module per fixture or feature.

Each module below is a pytest plugin of its own, like pytest's ``_pytest/`` modules: it owns
its ``StashKey``\\ s, its fixtures and its hooks, and calls into the domain packages. The
modules are registered through ``pytest_plugins``, so ``-p no:lossless`` turns them all off.
"""

from __future__ import annotations

import sys


def _rewrite_only_the_adapter() -> None:
    """Narrow pytest's assertion rewriting from the whole distribution to this package.

    pytest marks every top-level package of a plugin's distribution for assertion rewriting
    (``Config._mark_plugins_for_rewrite``), so each domain module imported at start-up went
    through its rewriting importer: parsed and compiled from source on every run where
    bytecode is not written (``PYTHONDONTWRITEBYTECODE=1``, common in CI images), since that
    importer caches only in files of its own. The domain modules hold no test assertions, so
    they need no rewriting: this leaves them to Python's own importer (and the bytecode pip
    compiled). pytest has no public way to unmark a name; where its importer does not look as
    expected, nothing changes (everything is rewritten, as before).
    """
    top, adapter = __name__.split(".", 1)[0], __name__
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        cache = getattr(finder, "_marked_for_rewrite_cache", None)
        if isinstance(marked, set) and isinstance(cache, dict) and top in marked:
            marked.discard(top)
            marked.add(adapter)
            cache.clear()


_rewrite_only_the_adapter()

#: Registered by pytest when it loads this entry point (in this order).
pytest_plugins = [
    # Each after the modules it imports, so that pytest imports (and may rewrite) each one
    # itself: a module imported early by another cannot be rewritten, and pytest says so.
    "pytest_lossless.plugin.config",
    "pytest_lossless.plugin.evidence",
    "pytest_lossless.plugin.outcomes",
    "pytest_lossless.plugin.devices",
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
