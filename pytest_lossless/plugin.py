"""The pytest11 entry point: options, markers, fixtures and hooks.

Each hook is a few lines that call into the domain modules; the state of a session
lives in plain objects kept under ``StashKey``\\ s.
"""

from __future__ import annotations

import pytest

from . import hookspecs
from .errors import ConfigError, Inconclusive
from .settings import OPTIONS, Settings, resolve

SETTINGS_KEY = pytest.StashKey[Settings]()

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


def _settings(config: pytest.Config) -> Settings:
    """The session's resolved settings (marker values are applied per test by each fixture)."""
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        cli = {spec.dest: config.getoption(spec.dest) for spec in OPTIONS}
        ini = {spec.dest: config.getini(spec.ini) for spec in OPTIONS}
        try:
            settings = resolve(cli, ini, rootdir=config.rootpath)
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-lossless: {exc}") from None
        config.stash[SETTINGS_KEY] = settings
    return settings


# ------------------------------------------------------------------ verdicts as outcomes


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("lossless") and not _settings(item.config).lossless:
        pytest.skip("lossless gate: run with --lossless to compare (it never passes unchecked)")


def act_on_verdict(verdict: object) -> None:
    """Inside a test: FAIL fails it; INCONCLUSIVE becomes its own outcome (never a pass)."""
    value = getattr(verdict, "verdict", None)
    message_of = getattr(verdict, "message", None)
    message = message_of() if callable(message_of) else str(verdict)
    if value == "FAIL":
        pytest.fail(message, pytrace=False)
    if value == "INCONCLUSIVE":
        raise Inconclusive(message)


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
