"""``--lossless-export DIR``: the obtained artifacts of every failing or new check, for CI.

:mod:`.golden` records every ``golden.check`` and ``golden.check_all`` the test made (its
:class:`~.golden.Checks`), and :mod:`.lossless` tells this module of every ``lossless.compare``
verdict (:func:`comparison`). Right after the test's call, while its fixtures still stand, each
check that mismatched its golden or had none is settled: a producer runs again (the control-run
count, ``--lossless-control-runs``) so that the export shows whether its runs agree, and the
obtained file is copied into DIR. The entries ride on the teardown report (to the controller,
under xdist), and the controller writes ``export.json`` at the session's end, with a copy of
each test's receipt; the HTML report is copied in after the terminal summary drew it.
``python -m pytest_lossless accept DIR`` writes goldens from it (:mod:`..goldens.accept`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import pytest

from ..core import faults, records
from ..core.artifact import Artifact
from ..core.records import JsonValue
from ..core.text import printable
from ..errors import GoldenMissing, LosslessError
from ..goldens.accept import ExportEntry, ExportSettings, GoldenTarget, Location, RunDigest
from .config import runs_no_test, settings
from .config import session as session_of
from .evidence import receipt_for, redacted_command, source_revision
from .golden import CHECKS_KEY, Call, Failed

if TYPE_CHECKING:
    from ..evidence.export_index import ExportClaim, ExportFolder
    from ..gates import Gate
    from ..goldens.checks import Golden
    from .golden import Record

_PLUGIN_NAME = "lossless-export"
#: ``config.stash[EXPORT_KEY]``: the session's export, when ``--lossless-export`` is given.
EXPORT_KEY = pytest.StashKey["ExportPlugin"]()
#: ``item.stash[ENTRIES_KEY]``: the test's exported artifacts (``export.json`` entries).
ENTRIES_KEY = pytest.StashKey[list["ExportEntry"]]()
#: Statuses of a golden check that are exported.
EXPORTED = ("changed", "new")


def pytest_configure(config: pytest.Config) -> None:
    if settings(config).export is None or runs_no_test(config):
        return  # a session that runs no test (--collect-only, ...) keeps the export it is given
    plugin = config.stash[EXPORT_KEY] = ExportPlugin(config)
    config.pluginmanager.register(plugin, _PLUGIN_NAME)
    if not hasattr(config, "workerinput"):  # the controller holds it for its workers
        try:
            plugin.claim.acquire()
        except LosslessError as exc:
            raise pytest.UsageError(printable(f"pytest-lossless: {exc}")) from None


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.stash.get(EXPORT_KEY, None)
    if plugin is not None:
        plugin.claim.release()
        config.pluginmanager.unregister(plugin, _PLUGIN_NAME)
        del config.stash[EXPORT_KEY]


def comparison(item: pytest.Item, verdict: Any) -> None:
    """Called by :mod:`.lossless` with each verdict: a FAIL exports the candidate's differing
    artifacts, an INCONCLUSIVE the control runs that differed (for review: no golden)."""
    plugin = item.config.stash.get(EXPORT_KEY, None)
    if plugin is None or str(verdict.verdict) not in ("FAIL", "INCONCLUSIVE"):
        return
    with _kept(item):
        plugin.export_comparison(item, verdict)


class _kept:
    """An export that fails must not fail the test in other words than its own: noted."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> bool:
        if isinstance(error, Exception):  # the export is a copy: never the test's failure
            plugin = self.item.config.stash.get(EXPORT_KEY, None)
            if plugin is not None:
                label = (
                    ""
                    if isinstance(error, (OSError, LosslessError))
                    else f"{type(error).__name__}: "
                )
                plugin.problems.append(f"{self.item.nodeid} not exported: {label}{error}")
            return True
        return False


# ------------------------------------------------------------------ the records


@dataclass(frozen=True, slots=True)
class Copied:
    """The exported file: where it lies in the export folder, its SHA-256 and size."""

    file: str
    sha256: str
    size: int


@final
class ExportPlugin:
    """Settles each test's checks after its call; the controller writes the export."""

    def __init__(self, config: pytest.Config) -> None:
        from ..evidence.export_index import ExportClaim, ExportFolder

        self.config = config
        resolved = settings(config)
        assert resolved.export is not None
        self.folder: ExportFolder = ExportFolder(resolved.export)
        #: This session's hold on the folder (taken by the controller, or pytest alone).
        self.claim: ExportClaim = ExportClaim(resolved.export)
        #: The exported entries of every test, and each test's receipt, by test id.
        self.entries: dict[str, list[ExportEntry]] = {}
        self.receipts: dict[str, str] = {}
        self.problems: list[str] = []
        self.written: Path | None = None

    # -------------------------------------------------------------- in the test's process

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            return (yield)
        finally:
            checks = item.stash.get(CHECKS_KEY, None)
            if checks is not None and checks.calls:
                with _kept(item):
                    self._settle(item, checks.calls, checks.records)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when == "teardown" and item.stash.get(ENTRIES_KEY, None):
            # JSON: a report carries it to the controller under xdist.
            report.lossless_export = [e.to_json() for e in item.stash[ENTRIES_KEY]]  # type: ignore[attr-defined]
        return report

    def _add(self, item: pytest.Item, entry: ExportEntry) -> None:
        item.stash.setdefault(ENTRIES_KEY, []).append(entry)

    def _copy(self, item: pytest.Item, run: str, name: str, path: Path | None) -> Copied:
        assert path is not None  # a run's (or the checked) file: never a digest-only golden
        return Copied(*self.folder.add_artifact(item.nodeid, run, name, path))

    def _settle(self, item: pytest.Item, watched: list[Call], records: list[Record]) -> None:
        """Each check that mismatched or had no golden: exported (a producer's run again)."""
        from ..core.artifact import is_producer

        failed = [r for r in records if isinstance(r, Failed)]
        done: set[tuple[int, str]] = set()
        for index, check in enumerate(watched):
            golden = check.golden
            if check.name is None:
                if not is_producer(check.artifact):
                    continue  # its artifacts are watched one by one
                names = []
                for later in watched[index + 1 :]:
                    if later.name is None:
                        break
                    if later.golden is golden:
                        names.append(later.name)
                status = {n: _status(golden, n, failed) for n in names}
                if not any(s in EXPORTED for s in status.values()):
                    continue
                self._rerun(item, golden, check.artifact, check.gate, status)
                done.update((id(golden), n) for n in names)
                continue
            if (id(golden), check.name) in done:
                continue
            state = _status(golden, check.name, failed)
            if state not in EXPORTED:
                continue
            done.add((id(golden), check.name))
            if is_producer(check.artifact):
                producer = _named(check.name, check.artifact)
                self._rerun(item, golden, producer, check.gate, {check.name: state})
            else:
                self._single(item, golden, check, state)

    def _golden_entry(
        self,
        item: pytest.Item,
        golden: Golden,
        name: str,
        status: str,
        gate: Any,
        *,
        copied: Copied | None,
        kind: str | None,
        fingerprint: records.JsonObject,
        runs: list[RunDigest],
        used_gate: str | None,
        agreed: bool | None,
        producer: bool,
        varied: str,
    ) -> ExportEntry:
        """The entry of a ``golden.check``'s artifact."""
        from ..gates import parse_gate

        requested = parse_gate(gate)
        environment = getattr(golden.folder, "environment", None)
        module, test_name = _folder_names(item)
        return ExportEntry(
            test=item.nodeid,
            artifact=name,
            source="golden",
            status=status,
            message=_message(golden, name),
            file=None if copied is None else copied.file,
            sha256=None if copied is None else copied.sha256,
            size=None if copied is None else copied.size,
            gate=used_gate,
            kind=kind,
            fingerprint=fingerprint,
            runs=tuple(runs),
            agreed=agreed,
            producer=producer,
            location=_location(item),
            golden=GoldenTarget(
                module=module,
                test_name=test_name,
                folder=str(golden.folder.path),
                requested_gate=None if requested is None else requested.spec,
                provenance=dict(golden.provenance),
                scope="all" if environment is None else "device",
                environment=environment,
                varied=varied,
            ),
        )

    def _single(self, item: pytest.Item, golden: Golden, check: Call, status: str) -> None:
        """A file or data handed over (not a producer): exported as the one run it was."""
        from ..core.artifact import materialize

        name = str(check.name)
        obtained = _obtained(golden, name) if status == "changed" else None
        if obtained is None:
            path = materialize(check.artifact, name, golden.workdir / "export-obtained")
            obtained = golden.folder.kinds.artifact(name, path)
        entry = self._golden_entry(
            item,
            golden,
            name,
            status,
            check.gate,
            copied=self._copy(item, "obtained", name, obtained.path),
            used_gate=_used_gate(golden, name, check.gate, obtained.kind),
            kind=obtained.kind,
            fingerprint=obtained.fingerprint,
            runs=[RunDigest.of("checked", obtained)],
            agreed=None,
            producer=False,
            varied="",
        )
        self._add(item, entry)

    def _rerun(
        self,
        item: pytest.Item,
        golden: Golden,
        producer: Callable[[], Any],
        gate: Any,
        status: dict[str, str],
    ) -> None:
        """Run a producer again (the control-run count); export what differs from its golden."""
        from ..compare.coverage import varied_lines
        from ..compare.repeatability import compare_control_candidate
        from ..gates import parse_gate

        runs = settings(item.config).control_runs
        frozen = _frozen_gates(golden)
        requested = parse_gate(gate)
        gates = {n: requested or g for n, g in frozen.items()}
        workdir = golden.workdir / f"export-{len(item.stash.get(ENTRIES_KEY, []))}"
        try:
            verdict = compare_control_candidate(
                producer,
                None,
                runs=runs,
                kinds=golden.folder.kinds,
                workdir=workdir,
                gate=gates if requested is None else requested,
                label="run",
            )
        except (Exception, pytest.fail.Exception) as exc:
            why = f"running it again raised {type(exc).__name__}: {exc}"
            for name, state in status.items():
                if state in EXPORTED:
                    self._not_rerun(item, golden, name, state, gate, why)
            return
        first = {n: _artifact(n, a) for n, a in verdict.runs[0]["artifacts"].items()}
        checked = {
            n: found
            for n in first
            if status.get(n) == "changed" and (found := _obtained(golden, n)) is not None
        }
        varied = varied_lines(verdict)
        for name in sorted(first):
            spec = verdict.gates.get(name)
            against = checked.get(name)
            if against is not None and spec is not None:
                again = _compare(golden, spec, against, first[name])
                if again:
                    varied.append(f"  the checked run vs run 1:\n    {again}")
        agreed = not varied
        for name in sorted(first):
            chosen = requested or gates.get(name)
            state = status.get(name) or _status_of_file(golden, name, first[name], chosen)
            if state not in EXPORTED:
                continue
            records = [
                RunDigest.of(f"run {i + 1}", _artifact(name, run["artifacts"][name]))
                for i, run in enumerate(verdict.runs)
                if name in run["artifacts"]
            ]
            if name in checked:
                records.append(RunDigest.of("checked", checked[name]))
            # The receipt vouches for the runs (its integrity hash covers the block): accept
            # takes their agreement from it, never from export.json alone.
            runs_json: list[JsonValue] = [r.to_json() for r in records]
            receipt_for(item).add_export({"artifact": name, "runs": runs_json, "agreed": agreed})
            entry = self._golden_entry(
                item,
                golden,
                name,
                state,
                gate,
                copied=self._copy(item, "run1", name, first[name].path),
                used_gate=verdict.gates.get(name),
                kind=first[name].kind,
                fingerprint=first[name].fingerprint,
                runs=records,
                agreed=agreed,
                producer=True,
                varied="\n".join(["What varied between its runs:", *varied]) if varied else "",
            )
            self._add(item, entry)

    def _not_rerun(
        self, item: pytest.Item, golden: Golden, name: str, status: str, gate: Any, why: str
    ) -> None:
        obtained = _obtained(golden, name)
        entry = self._golden_entry(
            item,
            golden,
            name,
            status,
            gate,
            copied=None if obtained is None else self._copy(item, "obtained", name, obtained.path),
            kind=None if obtained is None else obtained.kind,
            fingerprint={} if obtained is None else obtained.fingerprint,
            runs=[] if obtained is None else [RunDigest.of("checked", obtained)],
            used_gate=None,
            agreed=False,
            producer=True,
            varied=why,
        )
        self._add(item, entry)

    def export_comparison(self, item: pytest.Item, verdict: Any) -> None:
        """The artifacts of a failing or INCONCLUSIVE ``lossless.compare``, for review."""
        runs = {r["name"]: r for r in verdict.runs}
        pairs: list[tuple[str, str]] = []
        if str(verdict.verdict) == "FAIL" and verdict.candidate_comparison is not None:
            found = verdict.candidate_comparison
            pairs += [("candidate", r.artifact) for r in found.results if not r.passed]
            pairs += [
                ("candidate", n) for n in found.missing if n in runs["candidate"]["artifacts"]
            ]
        else:
            for compared in verdict.control_comparisons:
                if compared.identical:
                    continue
                for result in compared.results:
                    if not result.passed:
                        pairs += [
                            (compared.left, result.artifact),
                            (compared.right, result.artifact),
                        ]
        for run, name in dict.fromkeys(pairs):
            artifact = runs[run]["artifacts"].get(name)
            if artifact is None:
                continue
            copied = self._copy(item, run, name, Path(artifact["path"]))
            entry = ExportEntry(
                test=item.nodeid,
                artifact=name,
                source="lossless",
                status="failed" if str(verdict.verdict) == "FAIL" else "inconclusive",
                message=verdict.summary(),
                file=copied.file,
                sha256=copied.sha256,
                size=copied.size,
                gate=verdict.gates.get(name),
                kind=artifact["kind"],
                fingerprint=artifact["fingerprint"],
                runs=tuple(
                    RunDigest.of(r["name"], _artifact(name, r["artifacts"][name]))
                    for r in verdict.runs
                    if name in r["artifacts"]
                ),
                agreed=verdict.control_repeatable,
                producer=True,
                location=_location(item),
                label=verdict.label,
                run=run,
            )
            self._add(item, entry)

    # -------------------------------------------------------------- on the controller

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == "lossless_receipt":
                self.receipts[report.nodeid] = str(value)
        entries = getattr(report, "lossless_export", None)
        if entries:
            found = [ExportEntry.from_json(e) for e in entries]
            self.entries.setdefault(report.nodeid, []).extend(found)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput"):
            return  # the controller writes export.json
        try:
            self.written = self._write()
        except (OSError, LosslessError) as exc:
            why = faults.write_failed(exc) if isinstance(exc, OSError) else exc
            self.problems.append(f"export.json was not written: {why}")
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _write(self) -> Path:
        resolved = settings(self.config)
        session_id, host = session_of(self.config)
        entries = []
        for test, found in sorted(self.entries.items()):
            receipt = self.receipts.get(test)
            copied = self.folder.add_receipt(session_id, Path(receipt)) if receipt else None
            entries += [replace(e, receipt=copied) for e in found]
        goldens = resolved.goldens
        shown = (
            goldens.relative_to(resolved.rootdir)
            if goldens.is_relative_to(resolved.rootdir)
            else goldens
        )
        return self.folder.write(
            entries,
            session=session_id,
            host=host,
            source=source_revision(self.config),
            settings=ExportSettings(resolved.control_runs, resolved.digest_above, str(shown)),
            command=redacted_command(self.config),
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        try:
            return (yield)
        finally:
            if not hasattr(self.config, "workerinput"):
                self._summary(terminalreporter)

    def _summary(self, terminalreporter: Any) -> None:
        from .html_report import REPORT_KEY

        html = self.config.stash.get(REPORT_KEY, None)
        if html is not None and html.path is not None and self.written is not None:
            try:
                self.folder.add_report(html.path.parent)
            except OSError as exc:
                self.problems.append(f"the report was not copied in: {exc}")
        for problem in self.problems:
            terminalreporter.write_line(f"pytest-lossless export: {problem}", red=True)
        if self.written is None:
            return
        count = sum(len(e) for e in self.entries.values())
        root = self.folder.root
        rootdir = settings(self.config).rootdir
        shown = root.relative_to(rootdir) if root.is_relative_to(rootdir) else root
        terminalreporter.write_line(
            f"pytest-lossless export: {shown} ({count} artifact{'s' if count != 1 else ''} of "
            f"{len(self.entries)} test{'s' if len(self.entries) != 1 else ''}); accept with "
            f"python -m pytest_lossless accept {shown}"
        )


# ------------------------------------------------------------------ helpers


def _folder_names(item: pytest.Item) -> tuple[str | None, str | None]:
    """The module and test folders of the test's goldens, as ``accept`` derives them from the
    test id (:func:`..goldens.accept.golden_names`); None when the id does not name them."""
    from ..goldens.accept import golden_names

    try:
        return golden_names(item.nodeid)
    except ValueError:
        return None, None


def _location(item: pytest.Item) -> Location:
    path, line = item.location[0], item.location[1]
    return Location(path, None if line is None else line + 1)


def _named(name: str, producer: Callable[[], Any]) -> Callable[[], dict[str, Any]]:
    """A ``golden.check`` producer as a run of one named artifact."""
    return lambda: {name: producer()}


def _status(golden: Golden, name: str, failed: list[Failed]) -> str:
    """What became of the check ``name``: ``changed``, ``new``, ``pass``, ``error`` or
    ``unchecked`` (the test stopped before it)."""
    for result in reversed(golden.results):
        if result.artifact == name:
            return "pass" if result.passed else "changed"
    for record in reversed(failed):
        if record.artifact == name:
            return "new" if record.golden_missing else "error"
    return "unchecked"


def _obtained(golden: Golden, name: str) -> Artifact | None:
    """The obtained file of the comparison of ``name`` (None: it was not compared)."""
    evidence = golden.folder.evidence.get(name)
    if evidence is None:
        return None
    side = evidence.obtained
    return Artifact(name, side.kind, side.fingerprint, Path(side.path))


def _artifact(name: str, run: Mapping[str, Any]) -> Artifact:
    """An artifact of a run (:class:`..compare.repeatability.LosslessVerdict`'s ``runs``)."""
    path = run.get("path")
    return Artifact(name, run["kind"], run["fingerprint"], None if path is None else Path(path))


def _status_of_file(golden: Golden, name: str, run: Artifact, gate: Any) -> str:
    """An artifact of a re-run that the test never reached: compared with its golden here."""
    assert run.path is not None
    try:
        result = golden.folder.compare(name, run.path, gate)
    except GoldenMissing:
        return "new"
    except LosslessError:
        return "error"
    return "pass" if result.passed else "changed"


def _frozen_gates(golden: Golden) -> dict[str, Gate]:
    from ..gates import parse_gate

    try:
        manifest = golden.folder.manifest()
    except LosslessError:
        return {}
    return {n: g for n, e in manifest.items() if (g := parse_gate(e.gate)) is not None}


def _used_gate(golden: Golden, name: str, gate: Any, kind: str) -> str:
    from ..gates import parse_gate

    requested = parse_gate(gate)
    if requested is not None:
        return requested.spec
    frozen = _frozen_gates(golden).get(name)
    return frozen.spec if frozen is not None else golden.folder.kinds.default_gate(kind).spec


def _message(golden: Golden, name: str) -> str:
    for result in reversed(golden.results):
        if result.artifact == name:
            return result.message().splitlines()[0]
    return ""


def _compare(golden: Golden, spec: str, left: Artifact, right: Artifact) -> str:
    """How two runs of one artifact differ under ``spec`` ("" when they agree)."""
    from ..gates import parse_gate

    gate = parse_gate(spec)
    assert gate is not None
    result = golden.folder.kinds.compare(gate, left, right)
    return "" if result.passed else result.message()
