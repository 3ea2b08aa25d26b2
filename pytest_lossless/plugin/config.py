"""Options, ini settings, markers and the session's resolved settings and kinds registry.

Every option is declared once in :mod:`pytest_lossless.settings` and resolved there (marker >
CLI > env > ini); this module only hands pytest's values to that resolver, once per session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .. import hookspecs
from ..errors import ConfigError
from ..settings import OPTIONS, Settings, resolve

if TYPE_CHECKING:
    from ..kinds import KindRegistry

SETTINGS_KEY = pytest.StashKey[Settings]()
KINDS_KEY = pytest.StashKey["KindRegistry"]()

_MARKERS = (
    "npu(devices=1): the test needs a locked allocation of N NPUs (or emulated slots) "
    "for its whole duration",
    "gpu(devices=1): the test needs a locked allocation of N GPUs (or emulated slots) "
    "for its whole duration",
    "lossless: the test is a lossless gate; skipped unless --lossless is given",
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lossless", "pytest-lossless: lossless and speed gates")
    for spec in OPTIONS:
        if spec.is_flag:
            group.addoption(
                spec.flag, action="store_true", default=False, dest=spec.dest, help=spec.help
            )
        else:
            group.addoption(
                spec.flag,
                action="store",
                default=None,
                dest=spec.dest,
                choices=spec.choices,
                metavar=spec.metavar,
                help=spec.help,
            )
        parser.addini(spec.ini, help=spec.help, default=None)


def pytest_configure(config: pytest.Config) -> None:
    from ..kinds import register_builtin_kinds  # light: media and gates load on first use

    resolved = settings(config)  # a bad value is a usage error now, not an error in every test
    # The built-in kinds answer our own hooks like any plugin, last (trylast), and decode within
    # the session's limits (--lossless-ffmpeg-timeout, --lossless-decode-limit).
    register_builtin_kinds(config.pluginmanager, resolved)
    for line in _MARKERS:
        config.addinivalue_line("markers", line)


def pytest_unconfigure(config: pytest.Config) -> None:
    if SETTINGS_KEY in config.stash:
        del config.stash[SETTINGS_KEY]
    if KINDS_KEY in config.stash:
        del config.stash[KINDS_KEY]


def settings(config: pytest.Config) -> Settings:
    """The session's resolved settings (marker values are applied per test by each fixture)."""
    resolved = config.stash.get(SETTINGS_KEY, None)
    if resolved is None:
        cli = {spec.dest: config.getoption(spec.dest) for spec in OPTIONS}
        ini = {spec.dest: config.getini(spec.ini) for spec in OPTIONS}
        try:
            resolved = resolve(cli, ini, rootdir=config.rootpath)
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-lossless: {exc}") from None
        config.stash[SETTINGS_KEY] = resolved
    return resolved


def kinds(config: pytest.Config) -> KindRegistry:
    """The session's kinds registry, over pytest's own hooks (so conftest kinds answer)."""
    from ..kinds import KindRegistry

    registry = config.stash.get(KINDS_KEY, None)
    if registry is None:
        registry = KindRegistry(config.hook, settings=settings(config))
        config.stash[KINDS_KEY] = registry
    return registry


def pytest_report_header(config: pytest.Config) -> list[str]:
    resolved = settings(config)
    mode = (
        "update goldens"
        if resolved.update_goldens
        else ("gates on" if resolved.lossless else "gates off (--lossless to run them)")
    )
    devices = ",".join(resolved.devices) if resolved.devices else "all discovered"
    return [
        f"lossless: {mode}; backend {resolved.backend} ({resolved.sources['backend']}), "
        f"devices {devices}; goldens {resolved.goldens}; receipts {resolved.receipts}",
    ]
