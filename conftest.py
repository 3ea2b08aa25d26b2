"""Repository-level pytest configuration: enables ``pytester`` for the plugin's own tests.

Where bytecode is not written (``PYTHONDONTWRITEBYTECODE=1``, common in CI images), every
Python process the tests start (pytest sessions in subprocesses, ``python -m pytest_lossless
verify``, the demo model) would compile the package's modules from source again: about 0.2-0.3
CPU-s each, several hundred times in ``pytest -n 2`` (benchmarks/RESULTS.md, "Command 2").
The package, the demo model and the tests' helpers are compiled once here instead, before
pytest-xdist starts its workers; Python reads bytecode that exists whatever that setting says.
"""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

#: What the tests' own processes import: compiled where Python would not write bytecode itself.
COMPILED = ("pytest_lossless", "fixtures", "tests")


def pytest_configure(config: pytest.Config) -> None:
    if not sys.dont_write_bytecode:
        return  # Python writes it on first import
    root = Path(__file__).parent
    for name in COMPILED:
        # quiet=2: nothing printed, errors included (a module that does not compile fails its
        # own tests, with the error where it belongs).
        compileall.compile_dir(root / name, quiet=2, workers=1)
