"""The session's summary: verdict rows and golden updates gathered from every report.

Under xdist the workers attach their rows to their reports and the controller gathers them
here, so the terminal table, the INCONCLUSIVE section and SUMMARY.md cover the whole session.
At the session's end the controller writes the session folder's ``SUMMARY.md``, then its
``INDEX.json`` (every receipt's hash, the gate tests collected and what became of each), then
the merged ``SUMMARY.md`` of the receipts root.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .. import report
from ..core import faults
from ..core.verdict import Verdict
from ..errors import LosslessError
from ..report import events_from as report_events
from .canary_watch import summary_lines as canary_lines
from .config import runs_no_test, settings
from .config import session as session_of
from .evidence import (
    session_folder,
    source_revision,
    source_state,
    source_states,
    write_interrupted,
)
from .outcomes import RUN_ONCE_KEY
from .shard import record as shard_record

if TYPE_CHECKING:
    from ..evidence.index import HostIdentity, IndexTest, SourceChange
    from ..goldens.swap import UpdateEvent
    from ..run.reaper import Reaper  # noqa: F401 - named in a StashKey below

_PLUGIN_NAME = "lossless-summary"
#: ``config.stash[REAPER_KEY]``: the session's reaper, started by the first ``model_run``.
REAPER_KEY = pytest.StashKey["Reaper"]()
#: ``config.stash[OUTER_TOKEN_KEY]``: the token an enclosing in-process session had set.
OUTER_TOKEN_KEY = pytest.StashKey["str | None"]()


def start_reaper(config: pytest.Config, test: str) -> None:
    """Start the session's reaper (:mod:`..run.reaper`) once, before the first run: if pytest
    dies without finishing (SIGKILL, pytest-timeout's ``os._exit``), it ends every process
    the session started within seconds and marks the session folder interrupted."""
    if REAPER_KEY in config.stash or not sys.platform.startswith("linux"):
        return
    from ..core import faults

    if faults.switch("no-reaper"):
        return
    from ..run.reaper import TOKEN_ENV, Reaper

    token = f"{session_of(config)[0]}-{uuid.uuid4().hex[:12]}"
    try:
        reaper = Reaper(token)
    except OSError:
        return  # no process to spare: the orphan record is still there
    config.stash[REAPER_KEY] = reaper
    config.stash[OUTER_TOKEN_KEY] = os.environ.get(TOKEN_ENV)  # an enclosing session's (pytester)
    os.environ[TOKEN_ENV] = token  # every run inherits it: that is how the reaper finds them
    reaper.send("folder", str(session_folder(config)))
    reaper.send("test", test)  # the test starting it; later tests are sent as they start


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if not config.pluginmanager.has_plugin(_PLUGIN_NAME):
        config.pluginmanager.register(SummaryPlugin(config), _PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    reaper = config.stash.get(REAPER_KEY, None)
    if reaper is not None:
        from ..run.reaper import TOKEN_ENV

        reaper.done()
        outer = config.stash.get(OUTER_TOKEN_KEY, None)
        if outer is None:
            os.environ.pop(TOKEN_ENV, None)
        else:
            os.environ[TOKEN_ENV] = outer
        del config.stash[REAPER_KEY]
    plugin = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _PLUGIN_NAME)


def _row_from(data: Mapping[str, Any]) -> report.Row:
    # Module level: inside pytest_runtest_logreport the name ``report`` is the TestReport.
    return report.Row.from_dict(data)


class SummaryPlugin:
    """Gathers verdict rows and golden updates from every report (workers' too, under xdist)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: list[report.Row] = []
        self.events: list[UpdateEvent] = []
        self.inconclusive: list[tuple[str, str]] = []
        self.receipts = 0
        #: Why lossless gates were skipped, with how many: a skipped gate compared nothing.
        self.skipped: dict[str, int] = {}
        self.tests = GateLedger()
        self.started_at = _now()
        #: What the session end wrote (the session folder), or why it could not.
        self.written: Path | None = None
        self.not_written: str | None = None
        #: Why the session cannot be signed (see ``_unsignable``), or None.
        self.unsignable: str | None = None
        #: The source trees that changed while the session ran (workers' too), read at its end.
        self.source_changes: list[SourceChange] = []
        #: (pid, comm) of each process a receipt records without its end: checked at the end.
        self.unended: list[tuple[Any, ...]] = []
        #: Where each test is defined (file relative to the rootdir, 1-based line): annotations.
        self.locations: dict[str, tuple[str, int | None]] = {}
        #: The old session folders removed at the end (lossless_receipts_keep), and why some
        #: could not be.
        self.pruned: list[str] = []
        self.prune_problems: list[str] = []

    @property
    def all_gates_skipped(self) -> bool:
        """--lossless was given, gates were selected, and every one of them was skipped."""
        return settings(self.config).lossless and bool(self.skipped) and not self.rows

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.tests.collected(i.nodeid for i in session.items if i.get_closest_marker("lossless"))

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.tests.deselected(i.nodeid for i in items if i.get_closest_marker("lossless"))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """pytest-xdist, on the controller: a worker's collected and deselected gate tests."""
        output = getattr(node, "workeroutput", None) or {}
        self.tests.collected(output.get("lossless_gates_collected") or [])
        self.tests.deselected(output.get("lossless_gates_deselected") or [])
        from ..core.records import from_json as read_record
        from ..evidence.index import SourceChange

        for change in output.get("lossless_source_changes") or []:
            self.source_changes.append(read_record(SourceChange, change, problems=[]))

    @property
    def collect_only(self) -> bool:
        """--collect-only (or another mode that runs no test): nothing ran, so nothing is
        claimed and no session folder written."""
        return runs_no_test(self.config)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.collect_only:
            return
        # Tests stopped before their teardown ended: receipts that say so, indexed as such.
        for test_id, receipt in write_interrupted(session).items():
            self.tests.interrupted(test_id, receipt)
            self.receipts += receipt is not None
        if self.all_gates_skipped and session.exitstatus == pytest.ExitCode.OK:
            # A green run in which no gate compared anything would read as "lossless".
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller writes the index
            workeroutput["lossless_gates_collected"] = sorted(self.tests.gates)
            workeroutput["lossless_gates_deselected"] = sorted(self.tests.unselected)
            changes = source_states(self.config).changes()  # this worker's receipts' trees
            workeroutput["lossless_source_changes"] = [c.to_json() for c in changes]
            return
        resolved = settings(self.config)
        compared = resolved.lossless and not resolved.update_goldens
        # A session folder the controller was told of no receipt for: a worker wrote one.
        written = session_folder(self.config).is_dir()
        # A shard of a gate campaign always leaves its index, even one that got no gate test:
        # the merged verify tells a shard that ran empty from one that never ran.
        sharded = resolved.lossless and shard_record(self.config) is not None
        if self.receipts or (compared and self.tests.ran_a_gate) or written or sharded:
            self._write_session(session)

    def _write_session(self, session: pytest.Session) -> None:
        """The session folder's SUMMARY.md, then its INDEX.json, then the merged SUMMARY.md;
        evidence that cannot be written fails the session."""
        from ..core.paths import inside_root
        from ..evidence.index import build_index, session_state, write_index
        from ..evidence.summary_md import write_summary

        resolved = settings(self.config)
        folder = session_folder(self.config)
        session_id, host = session_of(self.config)
        exitstatus = int(session.exitstatus)
        stopped = session.shouldfail or session.shouldstop
        # Stopping early (-x, --maxfail) matters to the evidence only when a gate was left out.
        left_out = bool(self.tests.gates - set(self.tests.seen))
        state = session_state(exitstatus, str(stopped) if stopped and left_out else None)
        unsignable = self.unsignable = self._unsignable(folder)
        try:
            # Never through a link out of the project (a committed lossless-receipts link).
            inside_root(folder, resolved.rootdir, what="receipts folder")
            folder.mkdir(parents=True, exist_ok=True)
            write_summary(folder, root=resolved.rootdir)
            # Each tree the receipts recorded, read once more: did it change while we ran?
            self.source_changes += source_states(self.config).changes()
            index = build_index(
                folder,
                session_id=session_id,
                host=host,
                started_at=self.started_at,
                rootdir=str(resolved.rootdir),
                source=source_revision(self.config).to_json(),
                tests=self.tests.entries(state),
                exitstatus=exitstatus,
                state=state,
                mode=_mode(resolved.lossless, resolved.update_goldens),
                workers=_workers(self.config),
                digests=self.tests.digests,
                unsignable=unsignable,
                shard=shard_record(self.config),
                source_changes=self.source_changes,
            )
            write_index(folder, index)
            self.written = folder
            self._prune(session_id, host)
            write_summary(resolved.receipts, root=resolved.rootdir)
        except (OSError, LosslessError) as exc:
            self.not_written = faults.write_failed(exc) if isinstance(exc, OSError) else f"{exc}"
            if self.written is None and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _prune(self, session_id: str, host: HostIdentity) -> None:
        """Keep the last ``lossless_receipts_keep`` session folders: older finished sessions
        of this host that no ``sign`` output names are removed; never under sharding or a
        scheduler, whose shared folder holds sessions still to be merged."""
        import os
        import shutil

        from ..evidence.sessions import (
            SIGN_OUT_DEFAULT,
            sessions_to_prune,
            signed_session_ids,
            stored_sessions,
        )

        resolved = settings(self.config)
        if resolved.receipts_keep <= 0 or resolved.shard is not None:
            return
        if shard_record(self.config) is not None or os.environ.get("SLURM_JOB_ID"):
            return
        root = resolved.receipts
        signed, problem = signed_session_ids([root, resolved.rootdir / SIGN_OUT_DEFAULT])
        if problem is not None:
            self.prune_problems.append(problem)
            return
        stored = stored_sessions(root, signed)
        for old in sessions_to_prune(
            stored, keep=resolved.receipts_keep, host=host, current=session_id
        ):
            try:
                shutil.rmtree(old.folder)
            except OSError as exc:
                self.prune_problems.append(f"{old.folder}: {exc.strerror or exc}")
            else:
                self.pruned.append(old.session_id)

    def _unsignable(self, folder: Path) -> str | None:
        """Why the session must not be signed: a process it started still runs (waited for a
        few seconds: it could rewrite the evidence after the index), or a receipt on disk is
        no longer what the session wrote (``None``: signable)."""
        import time

        from ..core.procfs import process_stat
        from ..evidence.index import sha256_regular

        deadline = time.monotonic() + 5.0
        while True:
            alive = [
                f"{pid} ({comm})"
                for pid, comm in self.unended
                if isinstance(pid, int)
                and (stat := process_stat(pid)) is not None
                and stat.state not in ("Z", "X", "x")
                and stat.comm == comm
            ]
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        why = []
        if alive:
            why.append(f"process(es) it started still run: {', '.join(sorted(set(alive)))}")
        for name, digest in sorted(self.tests.digests.items()):
            try:
                changed = sha256_regular(folder / name) != digest
            except OSError:
                changed = True
            if changed:
                why.append(f"receipt {name} changed on disk after the session wrote it")
        return "; ".join(why) or None

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        reaper = self.config.stash.get(REAPER_KEY, None)
        if reaper is not None:  # what the reaper names if pytest dies in this test
            reaper.send("test", nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Every report's outcome: the failing call of a test not marked lossless carries none
        # of ours, and its receipt is named only by its teardown report (which passed). The
        # index lists only gate tests and tests with a receipt.
        self.tests.record(report)
        if not (
            getattr(report, "lossless_gate", False)
            or getattr(report, "lossless_verdict", None)
            or getattr(report, "lossless_rows", None)
            or report.user_properties
        ):
            return  # a plain test's report: nothing more of ours on it
        self.unended += [tuple(p) for p in getattr(report, "lossless_unended", None) or []]
        path, line = report.location[0], report.location[1]
        self.locations[report.nodeid] = (path, None if line is None else line + 1)
        if getattr(report, "lossless_verdict", None) == Verdict.INCONCLUSIVE:
            self.inconclusive.append((report.nodeid, str(report.longrepr)))
        if (
            report.skipped
            and getattr(report, "lossless_gate", False)
            and not hasattr(report, "wasxfail")
        ):
            reason = (
                report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            )
            reason = reason.removeprefix("Skipped: ")
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
        for row in getattr(report, "lossless_rows", None) or []:
            self.rows.append(_row_from(row))
        self.events += report_events(getattr(report, "lossless_golden_events", None))
        if report.when == "teardown":
            self.receipts += sum(
                1 for key, _ in report.user_properties if key == "lossless_receipt"
            )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.collect_only:
            return
        resolved = settings(self.config)
        write = terminalreporter.write_line
        if self.inconclusive:
            # pytest shows failures only for its own categories: show these apart, in full.
            terminalreporter.write_sep("=", "INCONCLUSIVE (not a pass)", yellow=True)
            for nodeid, text in self.inconclusive:
                terminalreporter.write_sep("_", nodeid)
                write(text)
        if self.events or resolved.update_goldens:
            terminalreporter.write_sep("=", "pytest-lossless: golden updates")
            for line in report.update_lines(self.events) or ["no golden was written"]:
                write(line)
        if self.rows:
            terminalreporter.write_sep("=", "pytest-lossless: gates and verdicts")
            width = max(80, terminalreporter._tw.fullwidth)
            for line in report.verdict_table(self.rows, width=width):
                write(line)
        elif resolved.lossless:
            # Never let a green run be read as "the gates passed" when none ran.
            terminalreporter.write_sep("=", "pytest-lossless: gates and verdicts")
            failed = self.tests.failed_gates()
            if failed:  # they were selected and ran: their failures say why nothing compared
                tests = "gate test" if len(failed) == 1 else "gate tests"
                write(
                    f"no gate compared anything: {len(failed)} lossless {tests} failed before "
                    f"comparing: {', '.join(failed)} (their failures are above)",
                    red=True,
                )
            else:
                write(
                    "no gate compared anything: --lossless was given, but no test that ran "
                    "called golden.check, lossless.compare or speed_gate (check -m and -k)",
                    yellow=True,
                )
            if self.all_gates_skipped and not hasattr(self.config, "workerinput"):
                write("every selected lossless gate was skipped, so this session fails", red=True)
        run_once = self.config.stash.get(RUN_ONCE_KEY, 0)
        if run_once:
            tests = "gate test" if run_once == 1 else "gate tests"
            write(
                "pytest-lossless: --reruns does not apply to lossless gates (a gate that failed "
                f"once has failed): {run_once} {tests} ran once",
                yellow=True,
            )
        for reason, count in sorted(self.skipped.items()):
            gates = "gate" if count == 1 else "gates"
            write(f"{count} lossless {gates} skipped: {reason}", yellow=True)
        for line in canary_lines(self.config):  # what each gate was seen to fail on, once
            write(line, red="CANNOT FAIL" in line, yellow="not run" in line or "skipped" in line)
        if hasattr(self.config, "workerinput"):
            return
        self._github(terminalreporter)
        if self.unsignable:
            write(f"pytest-lossless: this session cannot be signed: {self.unsignable}", red=True)
        if self.source_changes:
            texts = "; ".join(c.text() for c in self.source_changes)
            write(f"pytest-lossless: {texts}; verify names it and sign refuses it", red=True)
        if self.written is not None:
            line = report.evidence_line(
                self.receipts, _shown(self.written, resolved.rootdir), source_state(self.config)
            )
            tail = f"; merged summary: {self.not_written}" if self.not_written else ""
            missing = sorted({r.test for r in self.rows} - self.tests.with_receipt())
            if missing:  # checks made, but no receipt to audit them by
                noun = "test" if len(missing) == 1 else "tests"
                tail += f"; {len(missing)} {noun} wrote no receipt: {', '.join(missing)}"
            write(line + tail, red=bool(missing))
            self._pruned_lines(write, resolved.receipts_keep)
        elif self.not_written:
            write(
                f"pytest-lossless: the session's evidence was not written: {self.not_written}",
                red=True,
            )

    def _pruned_lines(self, write: Any, keep: int) -> None:
        if self.pruned:
            count = len(self.pruned)
            folders = "session folder" if count == 1 else "session folders"
            write(
                f"pytest-lossless: pruned {count} old {folders} of this host (keeping the last "
                f"{keep}: lossless_receipts_keep; 0 keeps all): {', '.join(self.pruned)}"
            )
        for problem in self.prune_problems:
            write(f"pytest-lossless: old session folders not pruned: {problem}", yellow=True)

    def _github(self, terminalreporter: Any) -> None:
        """Under GitHub Actions (``$GITHUB_STEP_SUMMARY`` set): the verdict table appended to
        the job's summary as Markdown, and each failing gate an ``::error`` annotation on its
        test (printed on stdout, where the runner reads workflow commands)."""
        import os

        target = os.environ.get("GITHUB_STEP_SUMMARY")
        if not target or not self.rows:
            return  # not on GitHub, or a session with no gate: nothing to summarise
        from ..evidence.export_index import annotation, append_step_summary, markdown_table
        from ..report.html import ordered

        rows = [self.rows[i] for i in ordered(self.rows)]
        cells = [(r.verdict, r.test, r.check, r.gate, r.detail) for r in rows]
        try:
            append_step_summary(target, markdown_table(cells, title="pytest-lossless: verdicts"))
        except OSError as exc:
            terminalreporter.write_line(
                f"pytest-lossless: GITHUB_STEP_SUMMARY {target} could not be written: {exc}",
                red=True,
            )
        for row in rows:
            if not row.failing:
                continue
            path, line = self.locations.get(row.test, (row.test.split("::", 1)[0], None))
            message = f"{row.check} ({row.gate}): {row.verdict}: {row.detail}"
            terminalreporter.write_line(
                annotation(path, line, message, title=f"pytest-lossless {row.verdict}: {row.test}")
            )


def _workers(config: pytest.Config) -> int:
    """How many xdist workers ran the session (0: none)."""
    count = getattr(config.option, "numprocesses", None)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def _mode(lossless: bool, update: bool) -> str:
    if update:
        return "update-goldens+lossless" if lossless else "update-goldens"
    return "lossless" if lossless else "off"


def _now() -> str:
    from ..core.clock import utc_iso

    return utc_iso()


def _shown(folder: Path, rootdir: Path) -> str:
    """A folder as the user would type it: relative to the rootdir when inside it."""
    try:
        return str(folder.relative_to(rootdir))
    except ValueError:
        return str(folder)


@dataclasses.dataclass
class LedgerEntry:
    """What became of one test, as the index records it (``tests[]`` of ``INDEX.json``)."""

    gate: bool
    outcome: str = "passed"
    receipt: str | None = None
    reason: str | None = None

    def to_index(self, test_id: str) -> IndexTest:
        """The index's entry of it."""
        from ..evidence.index import IndexTest

        return IndexTest(test_id, self.gate, self.outcome, self.receipt, self.reason)


class GateLedger:
    """The session's gate tests (marked ``lossless``) and every test that wrote a receipt:
    what became of each, for the index, so a gate test that wrote no receipt is named."""

    def __init__(self) -> None:
        self.gates: set[str] = set()
        self.unselected: set[str] = set()
        self.seen: dict[str, LedgerEntry] = {}
        #: Tests whose teardown report came: the others that started were interrupted.
        self.ended: set[str] = set()
        #: Receipt file name -> the SHA-256 it was written with (held here, not re-read).
        self.digests: dict[str, str] = {}

    def collected(self, test_ids: Any) -> None:
        self.gates.update(str(t) for t in test_ids)

    def deselected(self, test_ids: Any) -> None:
        self.unselected.update(str(t) for t in test_ids)

    def failed_gates(self) -> list[str]:
        """The gate tests that failed (in any phase)."""
        return sorted(t for t, e in self.seen.items() if e.gate and e.outcome == "failed")

    def with_receipt(self) -> set[str]:
        """The tests that wrote a receipt."""
        return {test for test, entry in self.seen.items() if entry.receipt}

    @property
    def ran_a_gate(self) -> bool:
        return any(e.gate and e.outcome not in ("skipped", "xfailed") for e in self.seen.values())

    def record(self, report: pytest.TestReport) -> None:
        entry = self.seen.setdefault(report.nodeid, LedgerEntry(gate=False))
        entry.gate = entry.gate or bool(getattr(report, "lossless_gate", False))
        if report.failed:
            entry.outcome = "failed"
            entry.reason = entry.reason or f"{report.when} failed"
        elif report.skipped and entry.outcome != "failed":
            entry.outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            entry.reason = str(reason).removeprefix("Skipped: ")[:500]
        for key, value in report.user_properties:
            if key == "lossless_receipt":
                entry.receipt = Path(str(value)).name
                digest = getattr(report, "lossless_receipt_sha256", None)
                if digest:
                    self.digests[entry.receipt] = str(digest)
        if report.when == "teardown":
            self.ended.add(report.nodeid)

    def interrupted(self, test_id: str, receipt: str | None) -> None:
        """A test stopped before its teardown ended, and the receipt written for it."""
        entry = self.seen.setdefault(test_id, LedgerEntry(gate=test_id in self.gates))
        entry.receipt = receipt or entry.receipt

    def entries(self, state: str) -> list[IndexTest]:
        """One entry per gate test and per test with a receipt, in the index's form."""
        found = []
        stopped = "" if state == "finished" else f": {state}"
        for test_id in sorted(self.gates | self.unselected | set(self.seen)):
            seen = self.seen.get(test_id)
            gate = test_id in self.gates or test_id in self.unselected
            if seen is not None:
                entry = dataclasses.replace(seen, gate=seen.gate or gate)
                if test_id not in self.ended and entry.outcome != "failed":
                    # It started and never ended its teardown: never "passed".
                    entry.outcome, entry.reason = "interrupted", "stopped before its end" + stopped
            elif test_id in self.unselected and test_id not in self.gates:
                entry = LedgerEntry(True, "deselected", None, "deselected (-m, -k or a plugin)")
            else:
                entry = LedgerEntry(True, "not run", None, "the session did not reach it" + stopped)
            if entry.gate or entry.receipt:
                found.append(entry.to_index(test_id))
        return found
