"""Options, ini settings, markers and the session's resolved settings and kinds registry.

Every option is declared once in :mod:`pytest_lossless.settings` and resolved there (marker >
CLI > env > ini); this module only hands pytest's values to that resolver, once per session.
"""

from __future__ import annotations

import itertools
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from .. import hookspecs
from ..core.text import printable
from ..errors import ConfigError
from ..settings import OPTIONS, OptionSpec, Settings, ini_type, resolve

if TYPE_CHECKING:
    from ..evidence.index import HostIdentity
    from ..kinds.registry import KindRegistry

SETTINGS_KEY = pytest.StashKey[Settings]()
KINDS_KEY = pytest.StashKey["KindRegistry"]()
#: The session's id and host identity, decided once by the controller (see :func:`session`).
SESSION_KEY = pytest.StashKey[tuple[str, "HostIdentity"]]()
#: The ``workerinput`` key by which pytest-xdist hands the controller's session to workers.
WORKERINPUT_SESSION = "lossless_session"
#: The ``workerinput`` key that tells a worker the controller runs every test on every worker.
WORKERINPUT_EACH = "lossless_dist_each"

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
        # Typed for --help ("(bool)"); every value is still checked by the resolver.
        parser.addini(spec.ini, help=spec.help, type=ini_type(spec), default=None)


#: ``config.stash[ALIASES_TAKEN_KEY]``: aliases another plugin defines, with our own flag.
ALIASES_TAKEN_KEY = pytest.StashKey[dict[str, str]]()


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Any:
    """Once every plugin and the initial conftests have added their options, and before the
    command line is parsed in full: each alias (``--update-goldens``) is added where no other
    plugin defines it (pytest-golden does), so pytest starts beside such a plugin and our own
    name (``--lossless-update-goldens``) always works."""
    result = yield
    taken = _option_names(parser)
    group = parser.getgroup("lossless")
    for spec in OPTIONS:
        if spec.alias is None:
            continue
        if spec.alias in taken:
            early_config.stash.setdefault(ALIASES_TAKEN_KEY, {})[spec.alias] = spec.flag
            continue
        group.addoption(
            spec.alias, action="store_true", default=False, dest=spec.dest, help=spec.help
        )
    return result


def _option_names(parser: pytest.Parser) -> set[str]:
    """Every option name defined so far, by any plugin or conftest (pytest keeps them in its
    groups; read defensively, as a private attribute)."""
    groups = [getattr(parser, "_anonymous", None), *getattr(parser, "_groups", [])]
    return {
        name
        for group in groups
        if group is not None
        for option in getattr(group, "options", [])
        for name in option.names()
    }


def pytest_configure(config: pytest.Config) -> None:
    _check_blocked(config)
    _check_rootdir(config)
    resolved = settings(config)  # a bad value is a usage error now, not an error in every test
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    _check_folders(config, resolved)
    _check_published(config, resolved)
    session(config)  # decided now: a bad PYTEST_LOSSLESS_HOST is a usage error, not a test's


#: The adapter's modules that only show what the others decided: ``-p no:`` may leave them out.
_OPTIONAL_MODULES = frozenset(
    {"pytest_lossless.plugin.html_report", "pytest_lossless.plugin.terminal_progress"}
)


def _check_blocked(config: pytest.Config) -> None:
    """``-p no:`` of one module of the adapter while the others run is a usage error: they carry
    the guarantees together (without ``outcomes``, a ``lossless`` test that compared nothing
    passed, with or without ``--lossless``; without ``session``, no index named a missing
    receipt). Only the report and the progress line may be left out."""
    from . import MODULES

    blocked = [
        name
        for name in MODULES
        if name not in _OPTIONAL_MODULES and config.pluginmanager.is_blocked(name)
    ]
    if blocked:
        raise pytest.UsageError(
            f"pytest-lossless: -p no:{blocked[0]} leaves the plugin running without one of its "
            "modules, and its verdicts without the rules that module keeps (a lossless test "
            "could pass unchecked): turn the whole plugin off with -p no:lossless, or leave "
            "it on (only -p no:pytest_lossless.plugin.html_report and "
            "-p no:pytest_lossless.plugin.terminal_progress may be left out)"
        )


def _check_rootdir(config: pytest.Config) -> None:
    """An option's value given after a space (``--lossless-lock-dir DIR``) is read by pytest,
    before our options are known, as a path to test, so it chooses the rootdir and the ini
    file from it: the project's ini is ignored and goldens go outside the project. Detected
    when such a value is an existing path, the rootdir lies above it, and that rootdir is not
    where the tests were started from or above it with an ini file; a usage error that says
    what happened and how to write the option instead."""
    if getattr(config.option, "rootdir", None) or hasattr(config, "workerinput"):
        return  # --rootdir decides it; a worker was started with the controller's
    # PYTEST_ADDOPTS (where CI jobs put options) goes before the command line, as pytest puts
    # it; a pair is never taken across the two.
    try:
        added = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        added = []  # pytest itself refuses it
    given = [str(a) for a in config.invocation_params.args]
    flags = {spec.flag for spec in OPTIONS if not spec.is_flag}
    root = config.rootpath.resolve()
    here = config.invocation_params.dir.resolve()
    pairs = [(*pair, " (in PYTEST_ADDOPTS)") for pair in itertools.pairwise(added)]
    pairs += [(*pair, "") for pair in itertools.pairwise(given)]
    for flag, value, where in pairs:
        if flag not in flags or value.startswith("-"):
            continue
        path = (here / value).resolve()
        if not path.exists() or not path.is_relative_to(root):
            continue
        if here.is_relative_to(root) and (root == here or config.inipath is not None):
            continue  # the rootdir it would have had anyway
        raise pytest.UsageError(
            printable(
                f"pytest-lossless: {flag} {value}{where}: pytest read {value!r} (given after a "
                f"space) as a path to test before it knew {flag}, so it chose its rootdir ({root}) "
                "and ini file from it: the project's ini file was not read "
                f"({'none was' if config.inipath is None else f'{config.inipath} was'} used "
                f"instead) and goldens and receipts would go under {root}. Write "
                f"{flag}={value} (with '='), or give --rootdir"
            )
        )


def _check_published(config: pytest.Config, resolved: Settings) -> None:
    """``--lossless-require-published``: the rootdir's revision, checked once at session start
    (by the controller; not for --help or --collect-only): a dirty tree, or a revision in no
    remote-tracking branch of a non-local remote, is a usage error naming what is wrong and the
    fix. Local refs only: nothing is fetched. The trees of ``model_run(sources=...)`` are checked
    when their runs start (:mod:`.model_run`)."""
    option = config.option
    if not resolved.require_published or hasattr(config, "workerinput"):
        return
    if getattr(option, "help", False) or getattr(option, "collectonly", False):
        return
    from ..evidence.provenance import PUBLISH_FIX
    from .evidence import source_states

    state = source_states(config).state(resolved.rootdir, ignore=resolved.written_folders)
    problem = state.problem()
    if problem is None:
        return
    detail = state.publication.publication_detail if problem.startswith("revision ") else None
    named = resolved.sources.get("require_published", "--lossless-require-published")
    raise pytest.UsageError(
        printable(
            f"pytest-lossless: {named}: the rootdir {resolved.rootdir} is not a published "
            f"revision: {problem}"
            f"{f' ({detail})' if detail else ''}. Fix: {PUBLISH_FIX}"
        )
    )


def _check_folders(config: pytest.Config, resolved: Settings) -> None:
    """The folders the session needs, checked once: a lock folder, goldens folder or receipts
    folder that is not writable, is a file, or (locks) has no working ``flock`` is one usage
    line naming the setting and the path, not an error in every test or at teardown.

    Only what the session needs: goldens are written only under --update-goldens, so a missing
    goldens folder is fine when comparing (each test then says no golden); a missing receipts
    folder must be one that can be made (it is made with the first receipt). A folder that
    leads out of the rootdir through a link is left to the refusal where it is used, which
    names the link. Not for --help, --collect-only, or an xdist worker (its controller
    checked).
    """
    option = config.option
    if getattr(option, "help", False) or getattr(option, "collectonly", False):
        return
    if hasattr(config, "workerinput"):
        return
    from ..core.paths import PathOutsideRoot, flock_problem, folder_problem, inside_root
    from ..devices.locks import LockDir
    from ..errors import AllocationError

    def refuse(dest: str, role: str, path: Path, problem: str, fix: str) -> NoReturn:
        raise pytest.UsageError(
            printable(
                f"pytest-lossless: {role} {path} ({_named_by(resolved, dest)}) {problem}: {fix}"
            )
        )

    def inside(path: Path, what: str) -> bool:
        try:
            inside_root(path, resolved.rootdir, what=what)
        except PathOutsideRoot:
            return False
        return True

    locks = resolved.lock_dir
    problem = folder_problem(locks, write=True)
    if problem is None:
        try:
            LockDir(locks).ensure()  # made sticky when missing; refused when unsafe to share
        except AllocationError as exc:
            raise pytest.UsageError(printable(f"pytest-lossless: {exc}")) from None
        problem = flock_problem(locks)
    if problem is not None:
        refuse(
            "lock_dir",
            "the device lock folder",
            locks,
            problem,
            "name another with --lossless-lock-dir",
        )
    goldens = resolved.goldens
    if inside(goldens, "goldens folder"):
        problem = None
        if resolved.update_goldens:
            problem = folder_problem(goldens, write=True)
        elif os.path.lexists(goldens):
            problem = folder_problem(goldens, write=False)
        if problem is not None:
            refuse(
                "goldens",
                "the goldens folder",
                goldens,
                problem,
                "name another with ini lossless_goldens or --lossless-goldens",
            )
    receipts = resolved.receipts
    if inside(receipts, "receipts folder"):
        problem = folder_problem(receipts, write=True)
        if problem is not None:
            refuse(
                "receipts",
                "the receipts folder",
                receipts,
                problem,
                "name another with --lossless-receipts",
            )


def _named_by(resolved: Settings, dest: str) -> str:
    """Where a setting's value came from, in the words a user types to change it."""
    spec = next(s for s in OPTIONS if s.dest == dest)
    source = resolved.sources.get(dest, "default")
    if source == "default":
        return f"the default of {spec.flag}, ini {spec.ini}"
    return f"set by {source}"


def pytest_unconfigure(config: pytest.Config) -> None:
    if SETTINGS_KEY in config.stash:
        del config.stash[SETTINGS_KEY]
    if KINDS_KEY in config.stash:
        del config.stash[KINDS_KEY]
    if SESSION_KEY in config.stash:
        del config.stash[SESSION_KEY]


#: pytest's options for sessions that collect but run no test (their ``dest`` names).
_NO_TEST_MODES = ("collectonly", "setuponly", "setupplan", "showfixtures", "show_fixtures_per_test")


def runs_no_test(config: pytest.Config) -> bool:
    """--collect-only, --setup-only, --setup-plan, --fixtures, --fixtures-per-test: the session
    collects every test and finishes, but runs none, so it claims nothing and changes nothing
    on disk (no golden folder removed as an orphan, no report, index or summary written)."""
    return any(getattr(config.option, dest, False) for dest in _NO_TEST_MODES)


def session(config: pytest.Config) -> tuple[str, HostIdentity]:
    """The session's id and host identity: decided once by the process that runs the session
    (the xdist controller, or pytest alone) and handed to xdist workers through
    ``workerinput``, so every receipt of one session goes into one folder of its own."""
    found = config.stash.get(SESSION_KEY, None)
    if found is None:
        from ..evidence.index import SESSION_ID, HostIdentity, host_identity, new_session_id

        given = getattr(config, "workerinput", {}).get(WORKERINPUT_SESSION)
        known = HostIdentity.read(given.get("host")) if isinstance(given, dict) else None
        if isinstance(given, dict) and known is not None and SESSION_ID.match(str(given.get("id"))):
            found = (str(given["id"]), known)
        else:
            try:
                host = host_identity()
            except ConfigError as exc:
                raise pytest.UsageError(f"pytest-lossless: {exc}") from None
            found = (new_session_id(host), host)
        config.stash[SESSION_KEY] = found
    return found


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, on the controller, before it starts a worker: hand it the session."""
    session_id, host = session(node.config)
    node.workerinput[WORKERINPUT_SESSION] = {"id": session_id, "host": host.to_json()}
    node.workerinput[WORKERINPUT_EACH] = each_on_every_worker(node.config)


def each_on_every_worker(config: pytest.Config) -> bool:
    """pytest-xdist's ``--dist each``: every test runs once on every worker (a worker's own
    ``dist`` option reads "no": the controller says so in ``workerinput``)."""
    workerinput = getattr(config, "workerinput", None)
    if isinstance(workerinput, dict):
        return bool(workerinput.get(WORKERINPUT_EACH))
    return getattr(config.option, "dist", None) == "each"


def settings(config: pytest.Config) -> Settings:
    """The session's resolved settings (marker values are applied per test by each fixture)."""
    resolved = config.stash.get(SETTINGS_KEY, None)
    if resolved is None:
        cli = {spec.dest: config.getoption(spec.dest) for spec in OPTIONS}
        ini = {spec.dest: _ini_value(config, spec) for spec in OPTIONS}
        try:
            resolved = resolve(cli, ini, rootdir=config.rootpath)
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-lossless: {exc}") from None
        config.stash[SETTINGS_KEY] = resolved
    return resolved


def _ini_value(config: pytest.Config, spec: OptionSpec) -> Any:
    """The ini value of ``spec`` as pytest reads it (a boolean key already a bool); a value
    pytest cannot read as its type is a usage error naming the key, not a traceback."""
    try:
        return config.getini(spec.ini)
    except (ValueError, pytest.UsageError) as exc:  # pytest 9 raises the latter itself
        raise pytest.UsageError(
            f"pytest-lossless: ini {spec.ini}: {exc}: expected a boolean (true/false, 1/0, yes/no)"
        ) from None


def kinds(config: pytest.Config) -> KindRegistry:
    """The session's kinds registry, over pytest's own hooks (so conftest kinds answer), made
    when a test first compares something (a session of plain tests never loads numpy or the
    kinds' code): the plugins' :class:`~..kinds.Kind` objects are registered then, and the
    registry runs the canary after each comparison (``--lossless-no-canary``: recorded as
    skipped)."""
    from ..kinds.registry import KindRegistry, register_builtin_kinds, register_plugin_kinds

    registry = config.stash.get(KINDS_KEY, None)
    if registry is None:
        resolved = settings(config)
        # The built-in kinds answer our own hooks like any plugin, last (trylast), and decode
        # within the session's limits (--lossless-ffmpeg-timeout, --lossless-decode-limit);
        # registered here, not at start-up, so that a session of plain tests never imports them.
        register_builtin_kinds(config.pluginmanager, resolved)
        register_plugin_kinds(config.pluginmanager, resolved)
        canary = "skip" if resolved.no_canary else "on"
        registry = KindRegistry(config.hook, settings=resolved, canary=canary)
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
    lines = [
        f"lossless: {mode}; backend {resolved.backend} ({resolved.sources['backend']}), "
        f"devices {devices}; goldens {resolved.goldens}; receipts {resolved.receipts}",
    ]
    for alias, flag in sorted(config.stash.get(ALIASES_TAKEN_KEY, {}).items()):
        lines.append(f"lossless: {alias} belongs to another plugin here; ours is {flag}")
    return lines
