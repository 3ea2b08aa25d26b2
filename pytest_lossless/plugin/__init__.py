"""The pytest11 entry point: options, markers, fixtures and hooks.

Each hook is a few lines that call into the domain modules; the state of a session
lives in plain objects kept under ``StashKey``\\ s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .. import hookspecs, report
from ..errors import ConfigError, Inconclusive, LosslessError
from ..settings import OPTIONS, Settings, resolve

if TYPE_CHECKING:
    from ..gates import Gate, GateResult
    from ..judge.goldens import Golden
    from ..judge.repeatability import LosslessVerdict
    from ..kinds import KindRegistry

SETTINGS_KEY = pytest.StashKey[Settings]()
KINDS_KEY = pytest.StashKey["KindRegistry"]()
ROWS_KEY = pytest.StashKey[list[report.Row]]()
EVENTS_KEY = pytest.StashKey[list[dict[str, str]]]()
CALL_PASSED_KEY = pytest.StashKey[bool]()

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
    from ..kinds import register_builtin_kinds  # light: media and gates load on first use

    _settings(config)  # a bad value is a usage error now, not an error in every test
    # The built-in kinds answer our own hooks like any plugin, last (trylast).
    register_builtin_kinds(config.pluginmanager)
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
    settings = _settings(item.config)
    if not item.get_closest_marker("lossless"):
        return
    if not (settings.lossless or settings.update_goldens):
        pytest.skip("lossless gate: run with --lossless to compare (it never passes unchecked)")
    if (settings.update_goldens and not settings.lossless
            and "golden" not in getattr(item, "fixturenames", ())):
        # Regenerating goldens should not spend minutes on timings that write nothing.
        pytest.skip("--update-goldens: this gate has no golden to write (add --lossless to "
                    "run it too)")


def _expected(expect: str | tuple[str, ...] | None) -> tuple[str, ...] | None:
    if expect is None:
        return None
    wanted = (expect,) if isinstance(expect, str) else tuple(expect)
    unknown = set(wanted) - {"PASS", "FAIL", "INCONCLUSIVE"}
    if unknown or not wanted:
        raise pytest.UsageError(f"expect={expect!r}: give PASS, FAIL or INCONCLUSIVE")
    return wanted


def settle_verdict(verdict: Any, *, act: bool, expect: tuple[str, ...] | None) -> str:
    """Act on a verdict inside a test; returns the verdict as the summary table shows it.

    With ``expect``, the test asserts the verdict itself (a suite proving its gates can FAIL
    or be INCONCLUSIVE stays green only while they do); without it, :func:`act_on_verdict`.
    """
    __tracebackhide__ = True
    value = str(verdict.verdict)
    if expect is not None:
        if value not in expect:
            pytest.fail(f"expected verdict {' or '.join(expect)}, got {value}:\n"
                        f"{verdict.message()}", pytrace=False)
        return f"{value} (expected)"
    if act:
        act_on_verdict(verdict)
    return value


def act_on_verdict(verdict: object) -> None:
    """Inside a test: FAIL fails it; INCONCLUSIVE becomes its own outcome (never a pass)."""
    value = getattr(verdict, "verdict", None)
    message_of = getattr(verdict, "message", None)
    message = message_of() if callable(message_of) else str(verdict)
    if value == "FAIL":
        pytest.fail(message, pytrace=False)
    if value == "INCONCLUSIVE":
        raise Inconclusive(message)



@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    # Carried to the controller under xdist; keywords would also match a folder named lossless.
    rep.lossless_gate = item.get_closest_marker("lossless") is not None  # type: ignore[attr-defined]
    if call.when == "call":
        if rep.passed and item.get_closest_marker("lossless") and not item.stash.get(ROWS_KEY, []):
            rep.outcome = "failed"
            rep.longrepr = (
                f"{item.nodeid} is marked lossless but compared nothing: a lossless gate must "
                "call golden.check, lossless.compare or speed_gate (it never passes unchecked)"
            )
        item.stash[CALL_PASSED_KEY] = rep.passed
        if call.excinfo is not None and isinstance(call.excinfo.value, Inconclusive):
            rep.outcome = "failed"
            rep.longrepr = f"INCONCLUSIVE: {call.excinfo.value}"
            rep.lossless_verdict = "INCONCLUSIVE"  # type: ignore[attr-defined]
            # junitxml writes the properties of the teardown report, copied from the item.
            item.user_properties.append(("lossless_verdict", "INCONCLUSIVE"))
    if call.when == "teardown":
        # Attached to the last report so pytest-xdist carries them to the controller.
        rep.lossless_rows = [r.to_dict() for r in item.stash.get(ROWS_KEY, [])]  # type: ignore[attr-defined]
        rep.lossless_golden_events = item.stash.get(EVENTS_KEY, [])  # type: ignore[attr-defined]
    return rep


def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, tuple[str, Mapping[str, bool]]] | None:
    if report.when == "call" and getattr(report, "lossless_verdict", None) == "INCONCLUSIVE":
        return "inconclusive", "I", ("INCONCLUSIVE", {"yellow": True})
    return None


# ------------------------------------------------------------------ golden & lossless


def _kinds(config: pytest.Config) -> KindRegistry:
    from ..kinds import KindRegistry

    kinds = config.stash.get(KINDS_KEY, None)
    if kinds is None:
        kinds = config.stash[KINDS_KEY] = KindRegistry(config.hook)
    return kinds



def _add_row(item: pytest.Item, row: report.Row) -> None:
    item.stash.setdefault(ROWS_KEY, []).append(row)


def _record_verdict(item: pytest.Item, row: report.Row, verdict: Any, *, act: bool,
                    expect: tuple[str, ...] | None, lossy: bool = False) -> None:
    """Act on a lossless or speed verdict, and put its row in the table as it was settled."""
    __tracebackhide__ = True
    try:
        shown = settle_verdict(verdict, act=act, expect=expect)
    except BaseException:
        _add_row(item, dataclasses.replace(row, verdict=str(verdict.verdict)))
        raise
    _add_row(item, dataclasses.replace(
        row, verdict="LOSSY-PASS" if shown == "PASS" and lossy else shown))


def _test_name(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name


class GoldenFixture:
    """The ``golden`` fixture: ``golden.check(name, artifact, gate=None)``."""

    def __init__(self, item: pytest.Item, golden: Golden) -> None:
        self._item = item
        self._golden = golden

    @property
    def folder(self) -> Path:
        return self._golden.folder.path

    def check(self, name: str, artifact: Any, gate: Gate | str | None = None) -> GateResult | None:
        """Compare ``artifact`` with the golden ``name`` (or stage it under --update-goldens)."""
        __tracebackhide__ = True
        failure = None
        try:
            result = self._golden.check(name, artifact, gate)
        except LosslessError as exc:
            label = type(exc).__name__
            self._record_error(name, gate, label, str(exc))
            failure = f"{label}: {exc}"
        if failure is not None:  # raised outside ``except``: one message, no chained echo
            pytest.fail(failure, pytrace=False)
        if result is None:
            entry = self._golden.staged[-1]
            _add_row(self._item, report.Row(
                self._item.nodeid, name, entry.gate, "STAGED",
                f"{entry.kind}, {entry.stored}; written when the test passes"))
            return None
        _add_row(self._item, report.gate_row(self._item.nodeid, result))
        evidence = self._golden.folder.evidence.get(name, {})
        receipt_for(self._item).add_gate({**result.to_dict(), "evidence": evidence})
        if not result.passed:
            pytest.fail(result.message(), pytrace=False)
        return result

    def check_all(self, artifacts: Any, gate: Gate | str | None = None) -> list[GateResult]:
        """Check every artifact of one run: a mapping ``{name: artifact}``, a model_run result,
        or a producer returning one. Under --update-goldens a producer runs at least twice and
        nothing is written when its runs disagree."""
        __tracebackhide__ = True
        failure = None
        try:
            staged = self._golden.stage_run(artifacts, gate)
        except LosslessError as exc:
            self._record_error("(run)", gate, type(exc).__name__, str(exc))
            failure = f"{type(exc).__name__}: {exc}"
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        if staged is not None:
            for entry in staged:
                _add_row(self._item, report.Row(
                    self._item.nodeid, entry.name, entry.gate, "STAGED",
                    f"{entry.kind}, {entry.stored}; written when the test passes"))
            return []
        from ..media.artifacts import named_artifacts, produce

        results = []
        for name, value in named_artifacts(produce(artifacts), "golden.check_all").items():
            result = self.check(name, value, gate)
            if result is not None:
                results.append(result)
        return results

    def _record_error(self, name: str, gate: object, label: str, message: str) -> None:
        _add_row(self._item, report.Row(self._item.nodeid, name, str(gate or "default"), "ERROR",
                                        f"{label}: {message.splitlines()[0]}"))
        receipt_for(self._item).add_gate({"artifact": name, "error": label, "message": message,
                                          "passed": False})


@pytest.fixture
def golden(request: pytest.FixtureRequest, tmp_path: Path) -> Generator[GoldenFixture, None, None]:
    """Compare artifacts with this test's committed goldens; writes them under --update-goldens."""
    from ..judge.goldens import Golden, GoldenFolder

    item = request.node
    settings = _settings(request.config)
    folder = GoldenFolder(
        settings.goldens, item.path.stem, _test_name(item), item.nodeid, _kinds(request.config),
        digest_above=settings.digest_above,
    )
    golden = Golden(
        folder, update=settings.update_goldens, workdir=tmp_path / "golden",
        producer_runs=settings.control_runs, provenance=_golden_provenance(request),
    )
    yield GoldenFixture(item, golden)
    passed = item.stash.get(CALL_PASSED_KEY, False)
    if settings.update_goldens and passed:
        events = [e.to_dict() for e in golden.commit()]
        for event in events:
            event["folder"] = str(Path(event["folder"]).relative_to(settings.rootdir)) \
                if Path(event["folder"]).is_relative_to(settings.rootdir) else event["folder"]
        item.stash.setdefault(EVENTS_KEY, []).extend(events)
        actions = {e["name"]: e["action"].upper() for e in events}
        item.stash[ROWS_KEY] = [
            dataclasses.replace(r, verdict=actions[r.check], detail=r.detail.split(";")[0])
            if r.verdict == "STAGED" and r.check in actions else r
            for r in item.stash.get(ROWS_KEY, [])
        ]
    elif not settings.update_goldens and passed and (unchecked := golden.unchecked()):
        # A golden the test stopped checking would otherwise pass silently: the truncated
        # audio track that a validator never looked at.
        names = ", ".join(repr(n) for n in unchecked)
        noun, verb = ("golden", "was") if len(unchecked) == 1 else ("goldens", "were")
        for name in unchecked:
            _add_row(item, report.Row(item.nodeid, name, "-", "UNCHECKED",
                                      "in the manifest, but the test did not check it"))
            receipt_for(item).add_gate({"artifact": name, "error": "Unchecked", "passed": False,
                                        "message": "in the golden's manifest, but not checked"})
        pytest.fail(f"{noun} {names} in {folder.path / 'manifest.json'} {verb} not checked by "
                    f"{item.nodeid}; check it, or run with --update-goldens to remove it",
                    pytrace=False)
    elif settings.update_goldens and golden.staged:
        item.stash.setdefault(EVENTS_KEY, []).extend(
            {"test": item.nodeid, "folder": str(folder.path), "name": e.name,
             "action": "refused", "detail": "the test did not pass; nothing written"}
            for e in golden.staged
        )


def _golden_provenance(request: pytest.FixtureRequest) -> dict[str, Any]:
    from .. import __version__
    from ..core.clock import utc_iso

    config = request.config
    revision = _source_revision(config)
    identity: Any = None
    if request.node.get_closest_marker("npu") or request.node.get_closest_marker("gpu"):
        allocation = request.getfixturevalue("devices")
        identity = getattr(allocation, "identity", None)
    return {
        "when": utc_iso(),
        "plugin_version": __version__,
        "source_revision": revision,
        "command": ["pytest", *config.invocation_params.args],
        "device_identity": identity,
    }


REVISION_KEY = pytest.StashKey[dict[str, Any]]()


def _source_revision(config: pytest.Config) -> dict[str, Any]:
    """The session's source identity (computed once); its own receipts do not make it dirty."""
    from ..evidence.provenance import source_revision

    revision = config.stash.get(REVISION_KEY, None)
    if revision is None:
        settings = _settings(config)
        revision = config.stash[REVISION_KEY] = dict(
            source_revision(settings.rootdir, ignore=(settings.receipts,)))
    return revision


class LosslessFixture:
    """The ``lossless`` fixture: ``lossless.compare(control, candidate, *, runs, gate)``."""

    def __init__(self, item: pytest.Item, settings: Settings, kinds: KindRegistry,
                 workdir: Path) -> None:
        self._item = item
        self._settings = settings
        self._kinds = kinds
        self._workdir = workdir
        self._count = 0

    def compare(
        self,
        control: Callable[[], Any],
        candidate: Callable[[], Any],
        *,
        runs: int | None = None,
        gate: Gate | str | Mapping[str, Gate | str] | None = None,
        label: str | None = None,
        act: bool = True,
        expect: str | tuple[str, ...] | None = None,
    ) -> LosslessVerdict:
        """Run the control ``runs`` times, then the candidate; PASS, FAIL or INCONCLUSIVE.

        ``act=False`` only returns the verdict; ``expect="FAIL"`` makes the test assert it.
        """
        __tracebackhide__ = True
        wanted = _expected(expect)
        from ..gates import parse_gate
        from ..judge.repeatability import compare_control_candidate

        self._count += 1
        name = label or f"compare#{self._count}"
        if isinstance(gate, Mapping):
            gates: Gate | Mapping[str, Gate] | None = {
                k: g for k, v in gate.items() if (g := parse_gate(v)) is not None
            }
        else:
            gates = parse_gate(gate)
        failure = None
        try:
            verdict = compare_control_candidate(
                control, candidate, runs=runs or self._settings.control_runs,
                kinds=self._kinds, workdir=self._workdir / name.replace("#", ""), gate=gates,
                label=name,
            )
        except LosslessError as exc:
            failure = f"lossless.compare {name}: {type(exc).__name__}: {exc}"
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        gate_text = ", ".join(sorted(set(verdict.gates.values())))
        receipt_for(self._item).add_lossless(verdict.to_dict())
        row = report.Row(self._item.nodeid, name, gate_text, verdict.verdict, verdict.summary())
        _record_verdict(self._item, row, verdict, act=act, expect=wanted, lossy=verdict.lossy)
        return verdict


@pytest.fixture
def lossless(request: pytest.FixtureRequest, tmp_path: Path) -> LosslessFixture:
    """Compare a candidate with a control that must first prove itself repeatable."""
    return LosslessFixture(request.node, _settings(request.config), _kinds(request.config),
                           tmp_path / "lossless")


class SummaryPlugin:
    """Gathers verdict rows and golden updates from every report (workers' too, under xdist)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        #: The session's verdict rows and golden updates, gathered from every report.
        self.rows: list[report.Row] = []
        self.events: list[dict[str, str]] = []
        self.inconclusive: list[tuple[str, str]] = []
        self.receipts = 0
        #: Why lossless gates were skipped, with how many: a skipped gate compared nothing.
        self.skipped: dict[str, int] = {}

    @property
    def all_gates_skipped(self) -> bool:
        """--lossless was given, gates were selected, and every one of them was skipped."""
        return _settings(self.config).lossless and bool(self.skipped) and not self.rows

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.all_gates_skipped and session.exitstatus == pytest.ExitCode.OK:
            # A green run in which no gate compared anything would read as "lossless".
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if getattr(report, "lossless_verdict", None) == "INCONCLUSIVE":
            self.inconclusive.append((report.nodeid, str(report.longrepr)))
        if (report.skipped and getattr(report, "lossless_gate", False)
                and not hasattr(report, "wasxfail")):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(
                report.longrepr)
            reason = reason.removeprefix("Skipped: ")
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
        for row in getattr(report, "lossless_rows", None) or []:
            self.rows.append(_row_from(row))
        self.events.extend(getattr(report, "lossless_golden_events", None) or [])
        if report.when == "teardown":
            self.receipts += sum(1 for key, _ in report.user_properties
                                 if key == "lossless_receipt")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        settings = _settings(self.config)
        if self.inconclusive:
            # pytest shows failures only for its own categories: show these apart, in full.
            terminalreporter.write_sep("=", "INCONCLUSIVE (not a pass)", yellow=True)
            for nodeid, text in self.inconclusive:
                terminalreporter.write_sep("_", nodeid)
                terminalreporter.write_line(text)
        if self.events or settings.update_goldens:
            terminalreporter.write_sep("=", "pytest-lossless: golden updates")
            lines = report.update_lines(self.events) or ["no golden was written"]
            for line in lines:
                terminalreporter.write_line(line)
        if self.rows:
            terminalreporter.write_sep("=", "pytest-lossless: gates and verdicts")
            width = max(80, terminalreporter._tw.fullwidth)
            for line in report.verdict_table(self.rows, width=width):
                terminalreporter.write_line(line)
        elif settings.lossless:
            # Never let a green run be read as "the gates passed" when none ran.
            terminalreporter.write_sep("=", "pytest-lossless: gates and verdicts")
            terminalreporter.write_line(
                "no gate compared anything: --lossless was given, but no test that ran called "
                "golden.check, lossless.compare or speed_gate (check -m and -k)", yellow=True)
            if self.all_gates_skipped and hasattr(self.config, "workerinput") is False:
                terminalreporter.write_line(
                    "every selected lossless gate was skipped, so this session fails",
                    red=True)
        if self.skipped:
            for reason, count in sorted(self.skipped.items()):
                gates = "gate" if count == 1 else "gates"
                terminalreporter.write_line(f"{count} lossless {gates} skipped: {reason}",
                                            yellow=True)
        if self.receipts and not hasattr(self.config, "workerinput"):
            from ..evidence.summary import write_summary

            try:
                written = f"; summary {write_summary(settings.receipts)}"
            except OSError as exc:
                written = f"; the summary could not be written: {exc}"
            source = _source_revision(self.config)
            terminalreporter.write_line(report.evidence_line(self.receipts, str(settings.receipts),
                                                             source) + written)


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = _settings(config)
    mode = "update goldens" if settings.update_goldens else (
        "gates on" if settings.lossless else "gates off (--lossless to run them)")
    devices = ",".join(settings.devices) if settings.devices else "all discovered"
    return [
        f"lossless: {mode}; backend {settings.backend} ({settings.sources['backend']}), "
        f"devices {devices}; goldens {settings.goldens}; receipts {settings.receipts}",
    ]


def _row_from(data: Mapping[str, Any]) -> report.Row:
    # Module level: inside pytest_runtest_logreport the name ``report`` is the TestReport.
    return report.Row.from_dict(data)


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if not config.pluginmanager.has_plugin("lossless-summary"):
        config.pluginmanager.register(SummaryPlugin(config), "lossless-summary")


# ==== devices ====
# (owner: devices engineer) the `devices` fixture, marker handling, allocator under a StashKey

if TYPE_CHECKING:
    from ..devices import Allocation, Allocator, Backend

#: The session's allocator (one per process: each xdist worker has its own; locks are host-wide).
ALLOCATOR_KEY = pytest.StashKey["Allocator"]()
#: ``item.stash[ALLOCATION_KEY]``: the test's allocation, for its receipt.
ALLOCATION_KEY = pytest.StashKey["Allocation"]()
DEVICE_MARKERS = ("npu", "gpu")
#: Which backends a marker accepts (cpu slots emulate both; a plugin's own backend is trusted).
_MARKER_REFUSES = {"npu": ("cuda",), "gpu": ("npu",)}


@pytest.hookimpl(trylast=True)
def pytest_lossless_backends() -> list[Backend]:
    """The built-in npu, cuda and cpu backends, last, so a plugin's backend of a name wins."""
    from ..devices import BuiltinBackends

    return BuiltinBackends().pytest_lossless_backends()


def _allocator(config: pytest.Config) -> Allocator:
    """The session's allocator, built on first use from the resolved settings."""
    from ..devices import Allocator, collect_backends

    allocator = config.stash.get(ALLOCATOR_KEY, None)
    if allocator is None:
        settings = _settings(config)
        try:
            allocator = Allocator(
                collect_backends(config.hook), backend=settings.backend, pool=settings.devices,
                lock_dir=settings.lock_dir, timeout=settings.lock_timeout, busy=settings.busy,
                on_wait=lambda line: _announce(config, line),
            )
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-lossless: {exc}") from None
        config.stash[ALLOCATOR_KEY] = allocator
    return allocator


def _announce(config: pytest.Config, line: str) -> None:
    """Show a waiting test's line now, past output capture (a worker's stderr under xdist)."""
    import sys

    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else _nullcontext():
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if hasattr(config, "workerinput") or terminal is None:
            stream = sys.__stderr__
            if stream is not None:
                stream.write(line + "\n")
                stream.flush()
        else:
            terminal.write_line(line)


def _nullcontext() -> Any:
    import contextlib

    return contextlib.nullcontext()


def _device_request(item: pytest.Item) -> tuple[str | None, int]:
    """(marker name, N) of the closest ``npu``/``gpu`` marker; (None, 1) without one."""
    from ..settings import marker_device_count

    for marker in item.iter_markers():
        if marker.name in DEVICE_MARKERS:
            failure = None
            try:
                return marker.name, marker_device_count(marker.args, marker.kwargs, marker.name)
            except ConfigError as exc:
                failure = f"{item.nodeid}: {exc}"
            pytest.fail(failure, pytrace=False)
    return None, 1


@pytest.fixture
def devices(request: pytest.FixtureRequest) -> Generator[Allocation, None, None]:
    """The test's locked allocation: ``.backend``, ``.ids``, ``.env``, ``.identity``.

    Held for the whole test; released at teardown after its finalizers (the processes
    the test started are ended first).
    """
    from ..errors import AllocationError

    item = request.node
    allocator = _allocator(request.config)
    reason = allocator.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    marker, count = _device_request(item)
    backend = allocator.chosen.name
    if marker is not None and backend in _MARKER_REFUSES[marker]:
        pytest.skip(f"marked {marker}, but the device backend is {backend} "
                    f"(choose one with --lossless-backend)")
    failure = None
    try:
        allocation = allocator.acquire(count, holder=item.nodeid)
    except AllocationError as exc:
        failure = f"{type(exc).__name__}: {exc}"
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    item.stash[ALLOCATION_KEY] = allocation
    try:
        yield allocation
    finally:
        allocation.release()


@pytest.fixture(autouse=True)
def _lossless_marked_devices(request: pytest.FixtureRequest) -> None:
    """Tests marked ``npu``/``gpu`` hold their allocation even without naming ``devices``."""
    if any(m.name in DEVICE_MARKERS for m in request.node.iter_markers()):
        request.getfixturevalue("devices")

# ==== end devices ====


# ==== model_run ====
# (owner: launch engineer) the `model_run` fixture

if TYPE_CHECKING:
    from ..run import Launcher

#: ``item.stash[LAUNCHER_KEY]``: the test's launcher (its records feed the receipt).
LAUNCHER_KEY = pytest.StashKey["Launcher"]()


@pytest.fixture
def model_run(request: pytest.FixtureRequest, tmp_path: Path) -> Generator[Launcher, None, None]:
    """Launch commands (``model_run(argv, outputs=..., timeout=...)``) and servers
    (``model_run.server(argv, ready=...)``) under the test's allocation.

    Every process is recorded (exit or signal, forced kills, peak memory) into the test's
    receipt; whatever is still running is ended at teardown, before the device locks go.
    """
    from ..run import Launcher

    item = request.node
    settings = _settings(request.config)
    allocation = None
    # Marked, or asking for ``devices`` itself: either way the runs belong to the allocation
    # (they see its devices, and end before its locks go, whatever the argument order).
    if "devices" in request.fixturenames or any(
            m.name in DEVICE_MARKERS for m in item.iter_markers()):
        allocation = request.getfixturevalue("devices")
    receipt = receipt_for(item)
    if allocation is not None:
        receipt.set_allocation(allocation)
    launcher = Launcher(allocation=allocation, out_dir=tmp_path / "model_run",
                        run_timeout=settings.run_timeout, knobs=settings.determinism_knobs,
                        on_record=receipt.add_run)
    item.stash[LAUNCHER_KEY] = launcher
    try:
        yield launcher
    finally:
        launcher.close()

# ==== end model_run ====


# ==== receipts ====
# (owner: launch engineer) per-test Receipt under item.stash, written at teardown

if TYPE_CHECKING:
    from ..evidence.receipts import Receipt

#: ``item.stash[RECEIPT_KEY]``: the test's receipt, created by the first fixture that asks.
RECEIPT_KEY = pytest.StashKey["Receipt"]()
#: Session-constant parts of every RunSpec (versions, ffmpeg, platform), computed once.
_FACTS_KEY = pytest.StashKey[dict[str, Any]]()


def receipt_for(item: pytest.Item) -> Receipt:
    """The test's receipt, created on first use; written into ``--lossless-receipts`` at
    the end of the test (after teardown, so the allocation block shows its release)."""
    from ..evidence.receipts import Receipt

    receipt = item.stash.get(RECEIPT_KEY, None)
    if receipt is None:
        receipt = item.stash[RECEIPT_KEY] = Receipt(item.nodeid)
    return receipt


def _write_receipt(item: pytest.Item, receipt: Receipt) -> Path:
    from ..evidence import provenance

    config = item.config
    settings = _settings(config)
    facts = config.stash.get(_FACTS_KEY, None)
    if facts is None:
        facts = config.stash[_FACTS_KEY] = provenance.session_facts()
    allocation = item.stash.get(ALLOCATION_KEY, None)
    if allocation is not None:
        receipt.set_allocation(allocation)
    inputs = {f"{run.get('name')}:{name}": entry["path"] for run in receipt.runs
              for name, entry in (run.get("inputs") or {}).items()}
    receipt.set_runspec(provenance.runspec(settings.rootdir, knobs=settings.determinism_knobs,
                                           ignore=(settings.receipts,),
                                           inputs=inputs, facts=facts))
    return receipt.write(settings.receipts)


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_makereport")
def pytest_runtest_makereport_receipts(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Record each phase's outcome in the receipt; write the receipt after teardown."""
    report = yield
    receipt = item.stash.get(RECEIPT_KEY, None)
    if receipt is None:
        return report
    receipt.set_outcome(report.when, report.outcome)
    if report.when != "teardown":
        return report
    try:
        path = _write_receipt(item, receipt)
    except (OSError, LosslessError) as exc:
        # Evidence that cannot be written is a failure of the test, not a silent gap.
        report.outcome = "failed"
        report.longrepr = f"pytest-lossless: the receipt of {item.nodeid} was not written: {exc}"
        return report
    report.user_properties.append(("lossless_receipt", str(path)))
    report.sections.append(("pytest-lossless receipt", str(path)))
    return report

# ==== end receipts ====


# ==== speed_gate ====
# (owner: speed engineer) the `speed_gate` fixture

if TYPE_CHECKING:
    from ..judge.speed import SpeedVerdict


class SpeedGateFixture:
    """The ``speed_gate`` fixture: ``speed_gate(control, candidate, *, target, pairs, ...)``.

    Each call is one workload's verdict, recorded in the test's receipt and the summary table;
    gains are never added up across calls.
    """

    def __init__(self, item: pytest.Item, settings: Settings) -> None:
        self._item = item
        self._settings = settings
        self._count = 0
        self.verdicts: list[SpeedVerdict] = []

    def __call__(
        self,
        control: Callable[[], Any],
        candidate: Callable[[], Any],
        *,
        target: float,
        pairs: int | None = None,
        design: str = "ABBA",
        workload: str | None = None,
        act: bool = True,
        seed: int | None = None,
        confidence: float = 0.95,
        expect: str | tuple[str, ...] | None = None,
    ) -> SpeedVerdict:
        """Time control and candidate arms in blocks of A B B A; PASS, FAIL or INCONCLUSIVE.

        ``target=0.30`` claims "candidate time at least 30% lower" (ratio at most 0.70).
        ``pairs`` defaults to ``--lossless-speed-pairs``, ``seed`` to ``--lossless-speed-seed``
        (else random, recorded). With ``act=False`` the verdict is only returned; with
        ``expect=("FAIL", "INCONCLUSIVE")`` the test asserts the verdict (an A/A check).
        """
        __tracebackhide__ = True
        wanted = _expected(expect)
        from ..judge.speed import run_speed_gate

        self._count += 1
        name = workload or f"speed#{self._count}"
        failure = None
        try:
            verdict = run_speed_gate(
                control, candidate, target=target,
                pairs=pairs if pairs is not None else self._settings.speed_pairs,
                design=design, workload=workload,
                seed=seed if seed is not None else self._settings.speed_seed,
                confidence=confidence,
            )
        except LosslessError as exc:
            failure = f"speed gate {name}: {type(exc).__name__}: {exc}"
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        self.verdicts.append(verdict)
        receipt_for(self._item).add_speed(verdict.to_dict())
        _record_verdict(self._item, report.speed_row(self._item.nodeid, name, verdict), verdict,
                        act=act, expect=wanted)
        return verdict


@pytest.fixture
def speed_gate(request: pytest.FixtureRequest) -> SpeedGateFixture:
    """Paired, interleaved timing of a control and a candidate against a stated target."""
    return SpeedGateFixture(request.node, _settings(request.config))


# ==== end speed_gate ====
