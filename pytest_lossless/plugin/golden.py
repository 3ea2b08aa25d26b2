"""The ``golden`` fixture: artifacts compared with the test's committed goldens.

Under ``--update-goldens`` the fixture stages what the test hands over and writes it when the
test passes; otherwise a golden the test stops checking fails it (the truncated audio track a
validator never looked at). At setup, what a killed update left beside the test's folder is
recovered (reported among the golden updates); at commit, a folder another session changed
since the test started is a CONFLICT: nothing is written and the test fails.

``expect=Media(...)`` checks every obtained run against the request (each run of a producer
under ``--update-goldens`` too): a miss is its own FAIL row and receipt entry, and nothing is
written. ``scope="device"`` keeps the golden of the allocation's environment class
(:mod:`..goldens.scope`), in a folder of its own, made at the first such check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from .. import report
from ..core.records import JsonObject
from ..core.text import printable
from ..core.verdict import Status, Update, status_of
from ..errors import ConfigError, GoldenMissing, Inconclusive, LosslessError
from .config import kinds, runs_no_test, settings
from .devices import allocator, holds_devices
from .evidence import (
    ALLOCATION_KEY,
    FACTS_KEY,
    receipt_for,
    redacted_command,
    session_folder,
    source_revision,
)
from .outcomes import CALL_PASSED_KEY, EVENTS_KEY, ROWS_KEY, add_row, fail_on, failing_on_errors

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..compare.coverage import CoverageMiss, Expect
    from ..compare.repeatability import LosslessVerdict
    from ..core.records import JsonObject
    from ..gates import Gate, GateResult
    from ..goldens.checks import Golden, UnrepeatableProducer
    from ..goldens.folder import CheckEvidence, ManifestEntry, UpdateEvent
    from ..goldens.scope import Environment

#: The runtime of each backend, read once per session (``nvidia-smi`` is not asked per test).
RUNTIMES_KEY = pytest.StashKey[dict[str, "str | None"]]()
#: ``item.stash[CHECKS_KEY]``: what the test's golden checks recorded (:class:`Checks`).
CHECKS_KEY = pytest.StashKey["Checks"]()


# ------------------------------------------------------------------ what a check records
#
# A check compares and records; the test's table rows and receipt entries are made from the
# records before each of its reports (:func:`file_records`), not inside the check.


@dataclass(frozen=True)
class Call:
    """One ``golden.check`` (``name``) or ``golden.check_all`` (``name`` None) as the test made
    it: what :mod:`.export` settles after the call."""

    golden: Golden
    name: str | None
    artifact: Any
    gate: Any


@dataclass(frozen=True)
class Compared:
    """A comparison with the golden: its result and the evidence of both files."""

    result: GateResult
    evidence: CheckEvidence | None

    def file(self, item: pytest.Item) -> None:
        add_row(item, report.gate_row(item.nodeid, self.result))
        evidence = self.evidence.to_json() if self.evidence is not None else {}
        receipt_for(item).add_gate({**self.result.to_dict(), "evidence": evidence})


@dataclass(frozen=True)
class Failed:
    """A check that raised: one of our errors (``label``: its class), or the producer's own
    (``ProducerFailed``). ``golden_missing``: a fact for the export, not a class name to match."""

    artifact: str
    gate: str
    label: str
    message: str
    golden_missing: bool = False

    def file(self, item: pytest.Item) -> None:
        detail = f"{self.label}: {self.message.splitlines()[0]}"
        add_row(item, report.Row(item.nodeid, self.artifact, self.gate, Status.ERROR, detail))
        entry: JsonObject = {
            "artifact": self.artifact,
            "error": self.label,
            "message": self.message,
            "passed": False,
        }
        if self.golden_missing:
            entry["golden_missing"] = True
        receipt_for(item).add_gate(entry)


@dataclass(frozen=True)
class Missed:
    """What one run misses of its request (``expect=``): a coverage miss, its own FAIL."""

    miss: CoverageMiss

    def file(self, item: pytest.Item) -> None:
        miss = self.miss
        detail = "; ".join(miss.result.metadata_diffs or ["misses the request"])
        check = f"{miss.result.artifact} ({miss.run})"
        add_row(item, report.Row(item.nodeid, check, miss.result.gate, Status.FAIL, detail))
        receipt_for(item).add_gate(miss.to_json())


@dataclass(frozen=True)
class Staged:
    """An artifact staged under --update-goldens, written when the test passes."""

    entry: ManifestEntry

    def file(self, item: pytest.Item) -> None:
        entry = self.entry
        detail = f"{entry.kind}, {entry.stored}; written when the test passes"
        add_row(item, report.Row(item.nodeid, entry.name, entry.gate, Update.STAGED, detail))


@dataclass(frozen=True)
class Unrepeatable:
    """A producer whose repeated runs differed: a lossless entry whose control is not
    repeatable, INCONCLUSIVE."""

    verdict: LosslessVerdict

    def file(self, item: pytest.Item) -> None:
        verdict = self.verdict
        receipt_for(item).add_lossless(verdict.to_json())
        gates = ", ".join(sorted(set(verdict.gates.values())))
        status, _ = status_of(verdict.verdict)
        add_row(item, report.Row(item.nodeid, verdict.label, gates, status, verdict.summary()))


@dataclass(frozen=True)
class Unchecked:
    """A golden of the manifest that the test did not check."""

    artifact: str

    def file(self, item: pytest.Item) -> None:
        detail = "in the manifest, but the test did not check it"
        add_row(item, report.Row(item.nodeid, self.artifact, "-", Status.UNCHECKED, detail))
        receipt_for(item).add_gate(
            {
                "artifact": self.artifact,
                "error": "Unchecked",
                "passed": False,
                "message": "in the golden's manifest, but not checked",
            }
        )


Record = Compared | Failed | Missed | Staged | Unrepeatable | Unchecked


@dataclass
class Checks:
    """A test's golden checks: the calls as made (for the export) and the records, in order;
    ``filed``: how many records are in the table and the receipt already."""

    calls: list[Call] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    filed: int = 0


def checks_of(item: pytest.Item) -> Checks:
    checks = item.stash.get(CHECKS_KEY, None)
    if checks is None:
        checks = item.stash[CHECKS_KEY] = Checks()
    return checks


def file_records(item: pytest.Item, *, done: bool = False) -> None:
    """The records made since the last report: into the test's rows and receipt, in order.
    ``done``: the calls are no longer needed (the export settled them after the call), so the
    artifacts they hold are let go."""
    checks = item.stash.get(CHECKS_KEY, None)
    if checks is None:
        return
    new, checks.filed = checks.records[checks.filed :], len(checks.records)
    for record in new:
        record.file(item)
    if done:
        checks.calls.clear()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Before each phase's report is made and decided: what the test's checks recorded."""
    file_records(item, done=call.when != "setup")
    return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A test interrupted after a check (Ctrl-C) made no report: its records go into its
    receipt, which the session's end writes as interrupted."""
    for item in getattr(session, "items", ()):  # an xdist controller collects none
        if CHECKS_KEY in item.stash:
            file_records(item, done=True)


#: ``item.stash[SHARED_FOLDER_KEY]``: the ids of the tests (this one among them) whose golden
#: folder is this test's once their names are made file names.
SHARED_FOLDER_KEY = pytest.StashKey[tuple[str, ...]]()
#: The fixtures whose tests keep goldens or plans in their golden folder.
_FOLDER_FIXTURES = frozenset({"golden", "lossless", "speed_gate"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests whose ids differ only in characters a folder name cannot hold (``test_x[a/b]``,
    ``test_x[a_b]``) would share one golden folder and overwrite each other's goldens: each is
    marked here, before ``-k`` or ``--lf`` deselect any of them, and fails at its setup."""
    from ..goldens.layout import shared_folders

    keeping = [i for i in items if _FOLDER_FIXTURES.intersection(getattr(i, "fixturenames", ()))]
    shared = shared_folders(item.nodeid for item in keeping)
    for item in keeping:
        if item.nodeid in shared:
            item.stash[SHARED_FOLDER_KEY] = shared[item.nodeid]


def _by_case(group: Sequence[str]) -> bool:
    """Whether the tests of ``group`` share a golden folder only where case is ignored."""
    from ..goldens.layout import folder_of, split_test_id

    with contextlib.suppress(ValueError, LosslessError):
        return len({folder_of(Path(), *split_test_id(test_id)) for test_id in group}) > 1
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from ..goldens.layout import folder_of

    _refuse_outside_rootdir(item)
    group = item.stash.get(SHARED_FOLDER_KEY, None)
    if not group:
        return
    resolved = settings(item.config)
    folder = folder_of(resolved.goldens, *golden_key(item))
    with contextlib.suppress(ValueError):
        folder = folder.relative_to(resolved.rootdir)
    case = " on a file system that ignores case (macOS, Windows)" if _by_case(group) else ""
    pytest.fail(
        printable(
            f"{' and '.join(group)} share the golden folder {folder} once their ids are made "
            f"file names{case}: each would overwrite the others' goldens. Give them ids that "
            "differ in more than case, in letters, digits or '._-[]=,+@' "
            "(pytest.param(..., id=...), or ids=)"
        ),
        pytrace=False,
    )


def _refuse_outside_rootdir(item: pytest.Item) -> None:
    """A test that keeps goldens or plans in a file outside the rootdir (``-c ci/other.ini``
    makes ``ci/`` the rootdir) has no path under it to key them by: pytest names such a file by
    how the command line reached it, so ``tests/x/test_d.py`` and ``tests/y/test_d.py`` became
    one id and one golden folder, each overwriting the other's goldens (#20)."""
    if not _FOLDER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return
    rootdir = settings(item.config).rootdir
    path = Path(item.path)
    if path.is_relative_to(rootdir) or path.resolve().is_relative_to(rootdir.resolve()):
        return
    shown = os.path.relpath(path, item.config.invocation_params.dir)
    pytest.fail(
        printable(
            f"{shown} is outside the rootdir {rootdir}: its goldens are kept by its path under "
            "the rootdir, and it has none (pytest names it by how the command line reached it, "
            "so files of one name in two folders would share a golden folder). Give "
            "--rootdir=<the project's root>, or keep the ini file there"
        ),
        pytrace=False,
    )


def golden_key(item: pytest.Item) -> tuple[str, str]:
    """The module (its path under the rootdir, without ``.py``) and the test name that key the
    test's goldens (:func:`..goldens.layout.split_test_id`)."""
    from ..goldens.layout import split_test_id

    try:
        return split_test_id(item.nodeid)
    except ValueError:
        return item.path.stem, item.name


def golden_boundary(goldens: Path, rootdir: Path) -> Path:
    """What no link under the goldens folder may lead out of: the goldens folder itself; or the
    rootdir when the goldens folder is a link out of it (refused where used, naming the link)."""
    from ..core.paths import PathOutsideRoot, inside_root, is_under

    if is_under(goldens, rootdir):
        try:
            inside_root(goldens, rootdir, what="goldens folder")
        except PathOutsideRoot:
            return rootdir
    return goldens


def migrate_plans(
    item: pytest.Item, goldens: Path, module: str, test_name: str, boundary: Path
) -> None:
    """A test's plans in the layout of an earlier version, moved to where they belong now
    (:mod:`..goldens.layout`); what cannot be moved is reported among the golden updates."""
    from ..core.paths import PathOutsideRoot, inside_root
    from ..goldens.layout import folder_of, migrate
    from ..goldens.swap import UpdateEvent

    try:
        inside_root(folder_of(goldens, module, test_name), boundary, what="golden folder")
    except (PathOutsideRoot, LosslessError):
        return  # refused where the plan is read or written, naming the link
    try:
        events = migrate(goldens, module, test_name, item.nodeid)
    except LosslessError as exc:
        events = [UpdateEvent(item.nodeid, str(goldens), "", "kept", str(exc))]
    _record_events(item, events, settings(item.config).rootdir)


class GoldenFixture:
    """The ``golden`` fixture: ``golden.check(name, artifact, gate=None, *, expect=None,
    scope=None)`` and ``golden.check_all(producer, *, expect=None)``."""

    def __init__(
        self, item: pytest.Item, golden: Golden, scoped: Callable[[], Golden] | None = None
    ) -> None:
        self._item = item
        self._golden = golden
        self._make_scoped = scoped
        self._scoped: Golden | None = None

    @property
    def folder(self) -> Path:
        return self._golden.folder.path

    @property
    def goldens(self) -> list[Golden]:
        """The test's goldens of each scope it used: the default one first."""
        return [self._golden] + ([self._scoped] if self._scoped is not None else [])

    def _of(self, scope: object) -> Golden:
        if scope is None:  # the default: one golden for every environment
            return self._golden
        from ..goldens.scope import parse_scope

        if parse_scope(scope) == "all":
            return self._golden
        if self._scoped is None:
            if self._make_scoped is None:
                raise ConfigError("golden.check(scope='device')", self._item.nodeid, "no device")
            self._scoped = self._make_scoped()
        return self._scoped

    def check(
        self,
        name: str,
        artifact: Any,
        gate: Gate | str | None = None,
        *,
        expect: Expect = None,
        scope: str | None = None,
        allow_empty: bool = False,
    ) -> GateResult | None:
        """Compare ``artifact`` with the golden ``name`` (or stage it under --update-goldens).

        ``expect``: the ``Media`` the run was asked for (or ``{name: Media}``); every obtained
        run is checked against it, and a miss fails the test and is never written. ``scope``:
        ``"device"`` keeps one golden per environment class of the test's allocation. An empty
        file is never stored as a golden unless ``allow_empty=True`` says that an empty output
        is what the test expects. A mismatch fails the test with what differs and, last, the
        command that accepts it if it is intended.
        """
        __tracebackhide__ = True
        return self._check(
            name, artifact, gate, expect=expect, scope=scope, allow_empty=allow_empty, advise=True
        )

    def _check(
        self,
        name: str,
        artifact: Any,
        gate: Gate | str | None = None,
        *,
        expect: Expect = None,
        scope: str | None = None,
        allow_empty: bool = False,
        advise: bool,
    ) -> GateResult | None:
        __tracebackhide__ = True
        from ..goldens.checks import UnrepeatableProducer
        from ..goldens.manifest import artifact_name

        unrepeatable = None
        with self._recording_failures(name, gate):
            artifact_name(name)  # before its name is recorded anywhere (an export, a receipt)
            golden = self._of(scope)
            self._checks.calls.append(Call(golden, name, artifact, gate))
            staged, missed = len(golden.staged), len(golden.misses)
            try:
                result = golden.check(name, artifact, gate, allow_empty=allow_empty, expect=expect)
            except GoldenMissing as exc:
                raise _scope_missing(golden, exc) from None
            except UnrepeatableProducer as exc:
                unrepeatable = exc  # INCONCLUSIVE is its own outcome, not an error's failure
        if unrepeatable is not None:
            self._inconclusive(unrepeatable)
        misses = golden.misses[missed:]
        if result is None:
            self._add_staged(golden.staged[staged:])
            self._fail_misses(misses)
            return None
        self._checks.records.append(Compared(result, golden.folder.evidence.get(name)))
        self._fail_misses(misses, result)
        if not result.passed:
            lines = [result.message()]
            made = self._made_with(golden, name)
            if made:
                lines.append(made)
            if advise:
                lines.append(accept_advice(self._item))
            pytest.fail(printable("\n".join(lines), newlines=True), pytrace=False)
        return result

    def _made_with(self, golden: Golden, name: str) -> str:
        """What differs between the versions the golden was made with and this session's."""
        from ..goldens.manifest import version_changes

        try:
            entry = golden.folder.manifest().get(name)
        except LosslessError:
            return ""
        if entry is None:
            return ""
        return version_changes(entry, session_versions(self._item.config))

    def check_all(
        self,
        artifacts: Any,
        gate: Gate | str | None = None,
        *,
        expect: Expect = None,
        scope: str | None = None,
        allow_empty: bool = False,
    ) -> list[GateResult]:
        """Check every artifact of one run: a mapping ``{name: artifact}``, a model_run result,
        or a producer returning one. Under --update-goldens a producer runs at least twice and
        nothing is written when its runs disagree, or when any run misses ``expect``."""
        __tracebackhide__ = True
        from ..compare.coverage import MEDIA_KINDS, RunMedia, check_names, expectation_for
        from ..core.expect import Media
        from ..errors import ConfigError
        from ..gates import parse_gate

        with self._recording_failures("(run)", gate):
            golden = self._of(scope)
            self._checks.calls.append(Call(golden, None, artifacts, gate))
            before, missed = len(golden.staged), len(golden.misses)
            staged = golden.stage_run(artifacts, gate, allow_empty=allow_empty, expect=expect)
        if staged is not None:
            self._add_staged(golden.staged[before:])
            self._fail_misses(golden.misses[missed:])
            return []
        from ..core.artifact import is_producer, named_artifacts, produce
        from ..goldens.checks import UnrepeatableProducer

        unrepeatable: UnrepeatableProducer | None = None
        with self._recording_failures("(run)", gate):
            if golden.repeat_producers and is_producer(artifacts):
                try:
                    artifacts = golden.repeated_run(artifacts, parse_gate(gate), "golden.check_all")
                except UnrepeatableProducer as exc:
                    unrepeatable = exc
            if unrepeatable is None:
                named = named_artifacts(produce(artifacts), "golden.check_all")
        if unrepeatable is not None:
            self._inconclusive(unrepeatable)
        with failing_on_errors(on_error=lambda exc: self._record_error("(run)", gate, exc)):
            check_names(expect, named, "golden.check_all")
        results: list[GateResult] = []
        failures: list[str] = []
        for name, value in named.items():
            wanted = expectation_for(expect, name)
            if isinstance(expect, Media):
                wanted = RunMedia.of(expect)  # the run's clip and track, not its tensors
            try:  # every artifact is compared and reported; the test fails after the last
                result = self._check(
                    name,
                    value,
                    gate,
                    expect=wanted,
                    scope=scope,
                    allow_empty=allow_empty,
                    advise=False,
                )
            except pytest.fail.Exception as failed:
                failures.append(str(failed.msg))
                continue
            if result is not None:
                results.append(result)
        if failures:
            mismatched = any(not r.passed for g in self.goldens for r in g.results)
            count = f"{len(failures)} of {len(named)} artifacts of the run"
            lines = [f"{count} failed their check (each is reported):", *failures]
            if mismatched:
                lines.append(accept_advice(self._item))
            pytest.fail("\n\n".join(lines), pytrace=False)
        if (
            isinstance(expect, Media)
            and results
            and all(r.kind not in MEDIA_KINDS for r in results)
        ):
            with failing_on_errors(on_error=lambda exc: self._record_error("(run)", gate, exc)):
                raise ConfigError(
                    "golden.check_all(expect=...)",
                    expect,
                    "the run produced no video or audio artifact, so the Media checked nothing",
                )
        return results

    def check_trace(
        self,
        name: str,
        trace: Any,
        gate: Gate | str | Mapping[str, Gate | str] | None = None,
        *,
        names: str | Sequence[str] | None = None,
    ) -> list[GateResult]:
        """Pin a trace (a ``model_run(..., trace=True)`` result, or a trace folder) as goldens:
        every tensor, or those whose ``name`` or ``name#occurrence`` matches a glob of
        ``names``; bit for bit as digests by default. ``gate``: one gate, or a mapping from glob
        patterns to gates (``{"attn.*": "ulp(2)", "*": "elementwise"}``). Checked in trace
        order, so the first failure is the first divergence from the golden trace."""
        __tracebackhide__ = True
        from ..goldens.checks import trace_artifacts

        with failing_on_errors(on_error=lambda exc: self._record_error(name, gate, exc)):
            folder = self._golden.workdir / "trace" / name
            chosen = trace_artifacts(name, trace, gate, names, folder)
        results = []
        for artifact, path, rule in chosen:
            result = self.check(artifact, path, rule)
            if result is not None:
                results.append(result)
        return results

    def _fail_misses(self, misses: list[CoverageMiss], result: GateResult | None = None) -> None:
        """Each miss of the request: its own FAIL row and receipt entry; then the test fails."""
        __tracebackhide__ = True
        from ..compare.coverage import describe

        if not misses:
            return
        self._checks.records += [Missed(miss) for miss in misses]
        update = self._golden.update
        lines = [
            f"{'nothing was written: ' if update else ''}an output does not hold what the run "
            "was asked for (expect=):",
            *(f"  {line}" for line in describe(misses)),
        ]
        if result is not None and not result.passed:
            lines += ["and it differs from its golden:", result.message()]
        pytest.fail(printable("\n".join(lines), newlines=True), pytrace=False)

    def _add_staged(self, staged: list[ManifestEntry]) -> None:
        self._checks.records += [Staged(entry) for entry in staged]

    def _inconclusive(self, error: UnrepeatableProducer) -> NoReturn:
        """A producer whose repeated runs differed: its verdict in the receipt (a lossless entry
        whose control is not repeatable) and the table, then the test is INCONCLUSIVE."""
        __tracebackhide__ = True
        self._checks.records.append(Unrepeatable(error.verdict))
        raise Inconclusive(printable(str(error), newlines=True)) from None

    @property
    def _checks(self) -> Checks:
        return checks_of(self._item)

    @contextlib.contextmanager
    def _recording_failures(self, name: str, gate: object) -> Iterator[None]:
        """Anything the check raises is recorded (an ERROR row and a receipt entry), so the
        session never reads "no gate compared anything" when the test did call a check. One of
        our errors then fails the test with its message only (:func:`.outcomes.fail_on`); a
        producer's own exception (``ProducerFailed``) goes on as it was."""
        __tracebackhide__ = True
        try:
            yield
        except LosslessError as exc:
            self._record_error(name, gate, exc)
            fail_on(exc)
        except Exception as exc:
            self._record_failure(
                name, gate, "ProducerFailed", f"the producer failed: {type(exc).__name__}: {exc}"
            )
            raise

    def _record_error(self, name: str, gate: object, exc: LosslessError) -> None:
        from ..goldens.manifest import shown_name

        self._record_failure(
            name, gate, type(exc).__name__, shown_name(exc), missing=isinstance(exc, GoldenMissing)
        )

    def _record_failure(
        self, name: str, gate: object, label: str, message: str, *, missing: bool = False
    ) -> None:
        from ..goldens.manifest import shown_name

        name = shown_name(name)  # a name that is not UTF-8 would end the session at its receipt
        failed = Failed(name, str(gate or "default"), label, shown_name(message), missing)
        self._checks.records.append(failed)


@pytest.fixture
def golden(request: pytest.FixtureRequest, tmp_path: Path) -> Generator[GoldenFixture, None, None]:
    """Compare artifacts with this test's committed goldens; writes them under --update-goldens."""
    from ..goldens.checks import Golden
    from ..goldens.folder import GoldenFolder

    item = request.node
    resolved = settings(request.config)

    def make(environment: Environment | None) -> Golden:
        module, test_name = golden_key(item)
        workdir = tmp_path / ("golden" if environment is None else "golden-device")
        folder = GoldenFolder(
            resolved.goldens,
            module,
            test_name,
            item.nodeid,
            kinds(request.config),
            digest_above=resolved.digest_above,
            rootdir=resolved.rootdir,
            store=resolved.store,
            environment=environment,
            workdir=workdir,
        )
        with failing_on_errors():  # a lock file or module folder that cannot be used: its message
            recovered = folder.migrate()  # from the layout of an earlier version
            recovered += folder.begin_update() if resolved.update_goldens else folder.recover()
        _record_events(item, recovered, resolved.rootdir)
        if environment is None:  # the test's plan is read with these goldens, one version (#20)
            from .lossless import plan_book

            folder.hold_plans(plan_book(item))
        return Golden(
            folder,
            update=resolved.update_goldens,
            workdir=workdir,
            producer_runs=resolved.control_runs,
            provenance=_golden_provenance(request),
            repeat_producers=resolved.repeat_producers and resolved.lossless,
            diagnostics=diagnostics_folder(item, device=environment is not None),
        )

    fixture = GoldenFixture(item, make(None), lambda: make(_environment(request)))
    yield fixture
    passed = item.stash.get(CALL_PASSED_KEY, False)
    goldens = fixture.goldens
    if resolved.update_goldens and passed:
        # Written once every other fixture's teardown passed too (pytest_runtest_teardown).
        item.stash[COMMIT_KEY] = goldens
    elif not resolved.update_goldens and passed:
        for golden in goldens:
            with failing_on_errors():
                unchecked = golden.unchecked()
            if unchecked:
                _fail_unchecked(item, unchecked, golden.folder.path / "manifest.json")
    elif resolved.update_goldens:
        _refuse(item, goldens)


#: ``item.stash[COMMIT_KEY]``: the goldens of a test whose call passed, written once its whole
#: teardown has passed too.
COMMIT_KEY = pytest.StashKey[list["Golden"]]()


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    """Write the goldens staged by a test whose call passed, after every fixture's teardown:
    a fixture torn down after ``golden`` that raises, or a cleanup stopped by pytest-timeout,
    makes the test an error, which writes nothing (#20). Inside the plans' wrapper
    (:mod:`.lossless`), which settles them after this commit."""
    goldens: list[Golden] = []
    try:
        result = yield
    except BaseException:
        staged = item.stash.get(COMMIT_KEY, goldens)
        _refuse(item, staged)
        raise
    finally:
        goldens = item.stash.get(COMMIT_KEY, goldens)
        with contextlib.suppress(KeyError):
            del item.stash[COMMIT_KEY]
    rootdir = settings(item.config).rootdir
    with failing_on_errors():  # a folder refused at commit: its message, no traceback
        for golden in goldens:
            _commit(item, golden, rootdir, moved=any(g.staged for g in goldens))
    return result


def _refuse(item: pytest.Item, goldens: Sequence[Golden]) -> None:
    """The staged goldens of a test that did not pass: named, nothing written."""
    item.stash.setdefault(EVENTS_KEY, []).extend(
        {
            "test": item.nodeid,
            "folder": str(golden.folder.path),
            "name": e.name,
            "action": "refused",
            "detail": "the test did not pass; nothing written",
        }
        for golden in goldens
        for e in golden.staged
    )


def _environment(request: pytest.FixtureRequest) -> Environment:
    """The environment class of the test's allocation, for ``scope="device"``."""
    from ..goldens.scope import environment_of, runtime_of

    item = request.node
    allocation = item.stash.get(ALLOCATION_KEY, None)
    if allocation is None and "devices" in getattr(item, "fixturenames", ()):
        allocation = request.getfixturevalue("devices")
    if allocation is None:
        raise ConfigError(
            "golden.check(scope='device')",
            item.nodeid,
            "a device-scoped golden is chosen by the test's device allocation, and this test "
            "holds none: mark it @pytest.mark.npu or @pytest.mark.gpu (or use the devices "
            "fixture), or check with the default scope",
        )
    runtimes = request.config.stash.setdefault(RUNTIMES_KEY, {})
    if allocation.backend not in runtimes:
        runtimes[allocation.backend] = runtime_of(allocator(request.config).chosen)
    return environment_of(allocation.backend, allocation.identity, runtimes[allocation.backend])


def _scope_missing(golden: Golden, error: GoldenMissing) -> GoldenMissing:
    """A device-scoped check with no golden of its class: which class, which exist, and how."""
    from ..goldens.scope import ScopeMissing, missing

    folder = golden.folder
    if folder.environment is None or isinstance(error, ScopeMissing):
        return error
    return missing(
        folder.path, folder.default_path, error.name, folder.environment, folder.boundary
    )


def _commit(item: pytest.Item, golden: Golden, rootdir: Path, *, moved: bool = False) -> None:
    """Write the staged goldens; the rows say what was created, changed or kept, or that
    another session changed the folder meanwhile (CONFLICT: nothing written, the test fails).
    ``moved``: the test staged goldens in another scope, so a folder of this one that it no
    longer checks at all has its entries removed (a test moved to ``scope="device"``)."""
    from ..goldens.folder import GoldenConflict
    from .lossless import plan_book

    # The test's plans go into this folder's swap when it is the folder that holds them (#20):
    # goldens, manifest and plan.json are committed together, or not at all.
    golden.folder.plans = plan_book(item)
    try:
        if golden.staged or not moved or golden.misses or not golden.folder.manifest():
            events = _record_events(item, golden.commit(), rootdir)
        else:
            events = _record_events(item, golden.folder.commit(), rootdir)
    except GoldenConflict as conflict:
        _mark_rows(item, _record_events(item, conflict.events, rootdir))
        raise
    _mark_rows(item, events)


def _record_events(
    item: pytest.Item, updates: Iterable[UpdateEvent], rootdir: Path
) -> list[dict[str, str]]:
    """The test's golden updates and recoveries, for the terminal's golden-updates lines."""
    events = [e.to_dict() for e in updates]
    for event in events:
        folder = Path(event["folder"])
        if folder.is_relative_to(rootdir):
            event["folder"] = str(folder.relative_to(rootdir))
    item.stash.setdefault(EVENTS_KEY, []).extend(events)
    return events


def _mark_rows(item: pytest.Item, events: list[dict[str, str]]) -> None:
    """Each STAGED row now says what became of its artifact."""
    actions = {e["name"]: Update.of_action(e["action"]) for e in events if e["name"]}
    item.stash[ROWS_KEY] = [
        dataclasses.replace(r, status=update, detail=r.detail.split(";")[0])
        if r.status is Update.STAGED and (update := actions.get(r.check)) is not None
        else r
        for r in item.stash.get(ROWS_KEY, [])
    ]


def _fail_unchecked(item: pytest.Item, unchecked: list[str], manifest: Path) -> None:
    """A golden the test stopped checking would otherwise pass silently."""
    __tracebackhide__ = True
    names = ", ".join(repr(n) for n in unchecked)
    noun, verb = ("golden", "was") if len(unchecked) == 1 else ("goldens", "were")
    checks_of(item).records.extend(Unchecked(name) for name in unchecked)
    pytest.fail(
        f"{noun} {names} in {manifest} {verb} not checked by {item.nodeid}; check it, or run "
        "with --update-goldens to remove it",
        pytrace=False,
    )


def _golden_provenance(request: pytest.FixtureRequest) -> JsonObject:
    from .. import __version__
    from ..core.clock import utc_iso

    config = request.config
    identity: Any = None
    if holds_devices(request.node):
        identity = getattr(request.getfixturevalue("devices"), "identity", None)
    from ..goldens.manifest import made_with

    return {
        "when": utc_iso(),
        "plugin_version": __version__,
        "source_revision": source_revision(config).to_json(),
        "command": redacted_command(config),
        "device_identity": identity,
        # So that a later mismatch can say "made with ffmpeg X, now Y".
        "made_with": made_with(session_versions(config)),
    }


def session_versions(config: pytest.Config) -> dict[str, str | None]:
    """The session's versions (Python, packages, ffmpeg), computed once for every receipt."""
    from ..evidence import provenance

    facts = config.stash.get(FACTS_KEY, None)
    if facts is None:
        facts = config.stash[FACTS_KEY] = provenance.session_facts()
    return dict(facts.versions)


def diagnostics_folder(item: pytest.Item, *, device: bool = False) -> Path:
    """Where a mismatch's diff pictures, listings and obtained file go: the session folder,
    beside the report (pytest's temporary folders are deleted after three runs)."""
    from ..goldens.manifest import safe_component

    name = safe_component(item.nodeid, "test id")
    return session_folder(item.config) / "diagnostics" / (f"{name}@device" if device else name)


def accept_advice(item: pytest.Item) -> str:
    """The command that accepts a mismatch of ``item`` if it is intended: ``--update-goldens``
    for this test, and ``accept`` from this session's export when there is one."""
    import shlex

    module = item.nodeid.split("::", 1)[0]
    words = shlex.quote(item.name)
    advice = (
        f"If the change is intended, accept it: pytest {shlex.quote(module)} --update-goldens "
        f"-k {words}"
    )
    resolved = settings(item.config)
    if resolved.export is not None:
        folder = resolved.export
        if folder.is_relative_to(resolved.rootdir):
            folder = folder.relative_to(resolved.rootdir)
        advice += (
            f", or from this run's export: python -m pytest_lossless accept "
            f"{shlex.quote(str(folder))} -k {words}"
        )
    return advice


# ------------------------------------------------------------------ golden folders of no test

_ORPHANS_PLUGIN = "lossless-golden-orphans"


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # an xdist worker sees only its share
        config.pluginmanager.register(OrphanWatch(config), _ORPHANS_PLUGIN)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_ORPHANS_PLUGIN)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _ORPHANS_PLUGIN)


class OrphanWatch:
    """Golden folders of renamed or deleted tests: reported by every lossless session that can
    tell (:func:`..goldens.layout.orphans`), removed only by ``--update-goldens`` in a session
    that collected everything (no ``-k``, ``-m``, deselection, path arguments, ``--lf``, shard
    or xdist) and finished (no collection error, not stopped early nor interrupted). A test its
    module still defines but the collection left out (``python_functions``, ``python_classes``:
    ini or ``-o``) is neither reported nor removed (:meth:`left_out`)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tests: list[str] = []
        #: The collected test ids without their parameters (``f.py::test_p[1]`` -> ``test_p``).
        self.bases: set[str] = set()
        self.modules: set[str] = set()
        #: The module collectors by file, to ask whether a test left out is still defined.
        self.module_nodes: dict[str, pytest.Module] = {}
        self.deselected = False
        self.collection_errors = False
        self.found: list[Any] = []
        self.removed: list[Any] = []
        self.problems: list[str] = []

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        if isinstance(collector, pytest.Module):
            self.module_nodes[collector.nodeid] = collector

    def left_out(self, test: str) -> bool:
        """Whether ``test`` is still defined by its collected module but this session's
        collection left it out without saying so: ``python_functions``, ``python_classes`` (an
        ini setting or ``-o``) or a plugin's hook narrowed it (#20). A case of a parametrized
        test whose other cases were collected is not left out: that case is gone."""
        file, _, name = test.partition("::")
        node = self.module_nodes.get(file)
        if node is None or not name:
            return False
        base = test.split("[", 1)[0]
        if base in self.bases:
            return False
        missing = object()
        found: Any = node.obj  # imported already: the module was collected
        for part in base.split("::")[1:]:
            found = inspect.getattr_static(found, part, missing)
            if found is missing:
                return False
        return True

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        nodeid = report.nodeid
        if report.failed:
            self.collection_errors = True
        if "::" not in nodeid and nodeid.endswith(".py") and report.passed:
            # A module skipped at import (pytest.importorskip) collected none of its tests,
            # so it is not counted: its goldens are never judged by this session.
            self.modules.add(nodeid)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected = True
        self.tests += [item.nodeid for item in items]
        self.bases.update(item.nodeid.split("[", 1)[0] for item in items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.tests += [item.nodeid for item in session.items]
        self.bases.update(item.nodeid.split("[", 1)[0] for item in session.items)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from ..goldens.layout import folder_of, orphans, remove_orphan, split_test_id

        resolved = settings(self.config)
        if not (resolved.lossless or resolved.update_goldens) or not resolved.goldens.is_dir():
            return
        if runs_no_test(self.config) or _workers(self.config):
            return
        if getattr(self.config.option, "lf", False):
            # --lf filters while collecting (a module without failures is collected empty, the
            # others keep only their failed tests) and never says which tests it left out: a
            # test not looked at cannot be told from one that is gone.
            return
        collected = set()
        for test in self.tests:
            try:
                collected.add(folder_of(resolved.goldens, *split_test_id(test)))
            except (ValueError, LosslessError):
                continue
        boundary = golden_boundary(resolved.goldens, resolved.rootdir)
        if boundary != resolved.goldens:
            return  # the goldens folder leads out of the rootdir: refused where it is used
        self.found = orphans(
            resolved.goldens,
            resolved.rootdir,
            collected=collected,
            modules=self.modules,
            left_out=self.left_out,
        )
        why_not = self._why_not_removed(session, int(exitstatus))
        if why_not:
            self.problems.append(why_not)
            return
        for orphan in self.found:
            if not orphan.removable:
                continue
            try:
                remove_orphan(orphan, resolved.goldens)
            except (OSError, LosslessError) as exc:
                self.problems.append(f"{orphan.folder} could not be removed: {exc}")
                continue
            self.removed.append(orphan)

    def _why_not_removed(self, session: pytest.Session, exitstatus: int) -> str:
        """Why this session may not remove golden folders ("" when it may)."""
        resolved = settings(self.config)
        option = self.config.option
        if not resolved.update_goldens:
            return "remove them with --update-goldens in a session that runs every test"
        filters = [
            ("-k", getattr(option, "keyword", "")),
            ("-m", getattr(option, "markexpr", "")),
            ("--lf", getattr(option, "lf", False)),
            ("--deselect", getattr(option, "deselect", None)),
            ("--lossless-shard", getattr(option, "lossless_shard", None)),
            ("deselection", self.deselected),
        ]
        used = [name for name, value in filters if value]
        if self.config.args_source == pytest.Config.ArgsSource.ARGS:
            used.append("path arguments")
        if used:
            return f"not removed: the session was filtered ({', '.join(used)})"
        if self.collection_errors:
            return "not removed: a module could not be collected"
        stopped = session.shouldfail or session.shouldstop
        if stopped or exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            return "not removed: the session did not finish"
        return ""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.found:
            return
        rootdir = settings(self.config).rootdir
        terminalreporter.write_sep("=", "pytest-lossless: golden folders of no test")
        removed = {id(o) for o in self.removed}
        for orphan in self.found:
            folder = orphan.folder
            shown = folder.relative_to(rootdir) if folder.is_relative_to(rootdir) else folder
            action = "removed" if id(orphan) in removed else "kept"
            terminalreporter.write_line(printable(f"{action}: {shown} ({orphan.why})"))
        for problem in self.problems:
            terminalreporter.write_line(printable(problem), yellow=True)


def _workers(config: pytest.Config) -> int:
    count = getattr(config.option, "numprocesses", None)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0
