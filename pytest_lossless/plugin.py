"""The pytest11 entry point: options, markers, fixtures and hooks.

Each hook is a few lines that call into the domain modules; the state of a session
lives in plain objects kept under ``StashKey``\\ s.
"""

from __future__ import annotations

import pytest

from . import hookspecs
from .settings import OPTIONS

# ------------------------------------------------------------------ options & markers


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lossless", "pytest-lossless: lossless and speed gates")
    for spec in OPTIONS:
        if spec.is_flag:
            group.addoption(spec.flag, action="store_true", default=False, dest=spec.dest,
                            help=spec.help)
        else:
            group.addoption(spec.flag, action="store", default=None, dest=spec.dest,
                            choices=spec.choices, metavar=spec.metavar, help=spec.help)
        parser.addini(spec.ini, help=spec.help, default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "npu(devices=1): the test needs a locked allocation of N NPUs (or emulated slots) "
        "for its whole duration",
    )
    config.addinivalue_line(
        "markers",
        "gpu(devices=1): the test needs a locked allocation of N GPUs (or emulated slots) "
        "for its whole duration",
    )
    config.addinivalue_line(
        "markers",
        "lossless: the test is a lossless gate; skipped unless --lossless is given",
    )


# ==== devices ====
# (owner: devices engineer) the `devices` fixture, marker handling, allocator under a StashKey
# ==== end devices ====


# ==== model_run ====
# (owner: launch engineer) the `model_run` fixture
# ==== end model_run ====


# ==== receipts ====
# (owner: launch engineer) per-test Receipt under item.stash, written at teardown
# ==== end receipts ====


# ==== speed_gate ====
# (owner: speed engineer) the `speed_gate` fixture
# ==== end speed_gate ====
