"""The golden store under concurrent update, check and kill: a hypothesis rule-based machine.

Writers are real processes (forked), each updating one golden folder to a value of its own and
pausing at every stop point of the folder swap (``swap.fault``: staged, retired, swapped) until
the machine lets it go on, or SIGKILLs it there. A reader (a thread of this process) compares
an artifact with the golden and pauses before every file it opens, so hypothesis interleaves
each read with each step of each update, with or without ``RENAME_EXCHANGE``.

What must hold, whatever the order (#20):
- a check never reports a golden integrity error: it reads one version's manifest with that
  same version's file, and its verdict is the verdict against that version;
- a check never finds the golden missing once one was written, unless it ran out of attempts
  while a writer sat between the two renames of the fallback;
- a check that reads the goldens and the frozen plan (``plan.json``) the test is judged by, in
  either order, sees the plan of the very version whose goldens it compared against; or, when
  the plan was read first and another session swapped the folder before the goldens were read,
  fails naming the folder ("replaced by another session during this test: run again"), never a
  silent mix;
- once no writer runs, the folder holds one whole version that some writer committed (a killed
  writer's leftovers recovered by the next update): its goldens, its manifest and its frozen plan
  (``plan.json``, which each writer commits with its goldens, #20) all of that one version.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pytest_lossless.errors import GoldenError, GoldenIntegrityError, GoldenMissing
from pytest_lossless.goldens import manifest as manifest_module
from pytest_lossless.goldens import swap
from pytest_lossless.goldens.folder import GoldenConflict, GoldenFolder, read_manifest
from pytest_lossless.goldens.plans import PlanBook, SpeedPlan, read_plans, speed_plan
from pytest_lossless.kinds.registry import KindRegistry
from tests.faults import tiers

# Deep tier (#24): the normal test command keeps the guarantee with real sessions (test_goldens.py:
# test_a_check_during_another_sessions_updates_never_reads_a_torn_golden).
pytestmark = [
    pytest.mark.deep,
    pytest.mark.skipif(sys.platform != "linux", reason="forks writers; Linux only"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

SIZE = 20_000
TEST_ID = "tests/m/test_mod.py::test_x"


def _value(index: int) -> bytes:
    return bytes([65 + index % 26]) * SIZE


def _plan(value: bytes) -> SpeedPlan:
    """The frozen plan each version commits with its golden: its target names the version."""
    return speed_plan(target=float(value[0]), pairs=8, design="ABBA", confidence=0.95, workload="w")


def _book(root: Path, value: bytes) -> PlanBook:
    book = PlanBook(_folder(root).path, TEST_ID, boundary=root / "goldens", update=True)
    book.check("speed", "w", _plan(value))
    return book


def _folder(root: Path, workdir: Path | None = None) -> GoldenFolder:
    return GoldenFolder(
        root / "goldens",
        "tests/m/test_mod",
        "test_x",
        TEST_ID,
        KindRegistry(),
        digest_above=1 << 30,
        rootdir=root,
        lock_timeout=5,
        workdir=workdir,
    )


class Writer:
    """One forked update, paused at each stop point of the swap until told to go on."""

    def __init__(self, root: Path, value: bytes, *, exchange: bool, together: bool) -> None:
        self.value = value
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        source = root / f"src-{hashlib.sha256(value).hexdigest()[:8]}.bin"
        source.write_bytes(value)
        pid = os.fork()
        if pid == 0:  # the writer: never returns into pytest
            code = 0
            try:
                os.close(self._to_child)
                os.close(self._from_child)
                if not exchange:
                    os.environ[swap.FAULT_ENV] = "no-exchange"

                def pause(point: str) -> None:
                    os.write(from_child_w, point.encode() + b"\n")
                    if os.read(to_child_r, 1) != b"g":
                        os._exit(3)

                swap.fault = pause  # type: ignore[assignment]
                folder = _folder(root)
                folder.begin_update()
                folder.stage("v.bin", source, None, {})
                book = _book(root, value)
                if together:  # the plan staged into the golden swap (#20)
                    folder.plans = book
                try:
                    folder.commit()
                    book.commit()  # nothing more once handed to the swap; else a second commit
                except GoldenConflict:
                    code = 4
            except BaseException:
                code = 5
            finally:
                os._exit(code)
        os.close(to_child_r)
        os.close(from_child_w)
        self.pid = pid
        self.point: str | None = None
        self.status: int | None = None
        self._lines = os.fdopen(self._from_child, "rb")
        self._next()

    def _next(self) -> None:
        line = self._lines.readline()
        if line:
            self.point = line.decode().strip()
            return
        self.point = None
        _, status = os.waitpid(self.pid, 0)
        self.status = os.waitstatus_to_exitcode(status)
        self._close()

    def step(self) -> None:
        os.write(self._to_child, b"g")
        self._next()

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self.status = -signal.SIGKILL
        self._close()

    def _close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._to_child)
        self._lines.close()

    @property
    def running(self) -> bool:
        return self.status is None


class Reader:
    """A check in a thread of its own, paused before each file it opens: it compares the golden
    and reads its frozen plan (``plan.json``), as a test's ``golden.check`` and its first
    ``lossless.compare`` or ``speed_gate`` do, in either order (``plan_first``)."""

    def __init__(self, root: Path, obtained: Path, workdir: Path, *, plan_first: bool) -> None:
        self.go: queue.Queue[bool] = queue.Queue()
        self.events: queue.Queue[str] = queue.Queue()
        self.outcome: Any = None
        self.done = False
        self.plan_first = plan_first
        self.thread = threading.Thread(target=self._run, args=(root, obtained, workdir))
        self.thread.start()
        self._wait()

    def pause(self) -> None:
        if threading.current_thread() is self.thread:
            self.events.put("paused")
            self.go.get()

    def _run(self, root: Path, obtained: Path, workdir: Path) -> None:
        self.pause()
        try:
            folder = _folder(root, workdir)
            # The test's plans, as the plugin hands them to its golden folder (#20).
            book = PlanBook(folder.path, TEST_ID, boundary=root / "goldens", update=False)
            folder.hold_plans(book)
            plan = self._plan(book) if self.plan_first else None
            result = folder.compare("v.bin", obtained, None)
            if not self.plan_first:
                plan = self._plan(book)
            self.outcome = (result.passed, folder.evidence["v.bin"].golden.sha256, plan)
        except GoldenError as exc:
            self.outcome = exc
        finally:
            self.done = True
            self.events.put("done")

    def _plan(self, book: PlanBook) -> Any:
        """The frozen plan the test is judged by, read after a pause of its own (another
        session may swap the folder between the goldens and the plan)."""
        self.pause()
        return book.frozen().get(("speed", "w"))

    def _wait(self) -> None:
        self.events.get(timeout=60)

    def step(self) -> None:
        self.go.put(True)
        self._wait()


class GoldenStore(RuleBasedStateMachine):
    #: Writers commit their plan in the golden swap (#20); False: after it, as a second commit
    #: (what the plugin did before), which the machine must catch.
    plans_together = True

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="golden-machine-"))
        self.root = self.tmp / "project"
        self.root.mkdir()
        self.writer: Writer | None = None
        self.reader: Reader | None = None
        self.made = 0
        #: SHA-256 of every value a writer was started with (what the folder may hold).
        self.versions: set[str] = set()
        #: The value of each of those, by SHA-256 (the plan each version froze is of its value).
        self.values: dict[str, bytes] = {}
        #: A writer stepped or was killed while the reader read (the folder may have changed).
        self.moved = False
        self.committed: set[str] = set()
        self.readers = 0
        #: A writer sat between the fallback's two renames while the reader read.
        self.window = False

    # ---------------------------------------------------------------- set up

    @initialize()
    def first_golden(self) -> None:
        value = _value(0)
        self.versions.add(hashlib.sha256(value).hexdigest())
        self.values[hashlib.sha256(value).hexdigest()] = value
        self.committed.add(hashlib.sha256(value).hexdigest())
        folder = _folder(self.root)
        folder.begin_update()
        source = self.root / "first.bin"
        source.write_bytes(value)
        folder.stage("v.bin", source, None, {})
        folder.plans = _book(self.root, value)
        folder.commit()
        self.obtained = source

    # ---------------------------------------------------------------- writers

    @precondition(lambda self: self.writer is None or not self.writer.running)
    @rule(exchange=st.booleans())
    def start_update(self, exchange: bool) -> None:
        self.made += 1
        value = _value(self.made)
        self.versions.add(hashlib.sha256(value).hexdigest())
        self.values[hashlib.sha256(value).hexdigest()] = value
        self.writer = Writer(self.root, value, exchange=exchange, together=self.plans_together)
        self._note_window()

    @precondition(lambda self: self.writer is None or not self.writer.running)
    @rule(exchange=st.booleans())
    def whole_update(self, exchange: bool) -> None:
        """Another session's update, start to end, between two steps of the check."""
        self.start_update(exchange)
        while self.writer is not None and self.writer.running:
            self.step_update()

    @precondition(lambda self: self.writer is not None and self.writer.running)
    @rule()
    def step_update(self) -> None:
        assert self.writer is not None
        self.moved = self.moved or self.reader is not None
        self.writer.step()
        self._note_window()
        if not self.writer.running:
            assert self.writer.status in (0, 4), f"the writer failed ({self.writer.status})"
            if self.writer.status == 0:
                self.committed.add(hashlib.sha256(self.writer.value).hexdigest())

    @precondition(lambda self: self.writer is not None and self.writer.running)
    @rule()
    def kill_update(self) -> None:
        assert self.writer is not None
        self.moved = self.moved or self.reader is not None
        self._note_window()
        self.writer.kill()

    def _note_window(self) -> None:
        if self.writer is not None and self.writer.point == "golden-retired":
            self.window = True

    # ---------------------------------------------------------------- the check

    @precondition(lambda self: self.reader is None)
    @rule(plan_first=st.booleans())
    def start_check(self, plan_first: bool) -> None:
        self.readers += 1
        self.window = self.writer is not None and self.writer.point == "golden-retired"
        self.moved = False
        workdir = self.tmp / f"reader-{self.readers}"
        self.reader = Reader(self.root, self.obtained, workdir, plan_first=plan_first)

    @precondition(lambda self: self.reader is not None)
    @rule()
    def step_check(self) -> None:
        assert self.reader is not None
        self.reader.step()
        if self.reader.done:
            self._judge(self.reader.outcome)
            self.reader.thread.join()
            self.reader = None

    def _judge(self, outcome: Any) -> None:
        assert not isinstance(outcome, GoldenIntegrityError), f"a torn read: {outcome}"
        if isinstance(outcome, GoldenMissing):
            assert self.window, "the golden went missing although no writer was between renames"
            return
        if isinstance(outcome, GoldenError) and "replaced by another session" in str(outcome):
            # The plan was read first and another session swapped the folder before the goldens
            # were read: the test fails, naming the folder, instead of mixing two versions.
            assert self.moved, f"no writer ran while the check read, yet: {outcome}"
            assert str(_folder(self.root).path) in str(outcome)
            assert "run again" in str(outcome).lower()
            return
        assert not isinstance(outcome, Exception), outcome
        passed, sha256, plan = outcome
        assert sha256 in self.versions, "a golden nobody wrote"
        assert passed == (sha256 == hashlib.sha256(_value(0)).hexdigest())
        value = self.values[sha256]
        assert plan == _plan(value), (
            f"a mixed version read: the golden of version {chr(value[0])} judged by the plan of "
            f"{'none' if plan is None else chr(int(plan.target))}"
        )

    # ---------------------------------------------------------------- invariants

    @invariant()
    def a_whole_golden_once_no_writer_runs(self) -> None:
        if self.writer is not None and self.writer.running:
            return
        if self.reader is not None:
            return  # the reader may be recovering; judged when it finishes
        path = _folder(self.root).path
        if not path.exists():
            # Only a writer killed between the fallback's renames leaves it missing.
            assert self.writer is not None
            assert self.writer.point == "golden-retired"
            return
        entries = read_manifest(path)
        stored = (path / "v.bin").read_bytes()
        assert hashlib.sha256(stored).hexdigest() == entries["v.bin"].sha256
        assert entries["v.bin"].sha256 in self.versions
        plan = read_plans(path, root=self.root / "goldens").get(("speed", "w"))
        assert plan == _plan(stored), (
            f"a mixed version: the golden of version {chr(stored[0])} with the plan of "
            f"{'none' if plan is None else chr(int(plan.target))}"
        )

    def teardown(self) -> None:
        if self.reader is not None:
            while not self.reader.done:
                self.reader.step()
            self.reader.thread.join()
        if self.writer is not None and self.writer.running:
            self.writer.kill()
        import shutil

        shutil.rmtree(self.tmp, ignore_errors=True)


def _pausing(reader_of: Any) -> Any:
    """``manifest._open_at`` and ``_open_folder``, each preceded by the reader's pause."""

    def wrap(real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            reader = reader_of()
            if reader is not None:
                reader.pause()
            return real(*args, **kwargs)

        return call

    return wrap


def test_the_golden_store_under_concurrent_update_check_and_kill(monkeypatch):
    current: dict[str, Reader | None] = {"reader": None}
    original_init = Reader.__init__

    def init(self: Reader, *args: Any, **kwargs: Any) -> None:
        current["reader"] = self
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(Reader, "__init__", init)
    wrap = _pausing(lambda: current["reader"])
    monkeypatch.setattr(manifest_module, "_open_at", wrap(manifest_module._open_at))
    monkeypatch.setattr(manifest_module, "_open_folder", wrap(manifest_module._open_folder))
    profile = settings.get_profile(tiers.machine_profile())
    run_state_machine_as_test(
        GoldenStore,
        # Examples: the profile tests/conftest.py registers (bounded in CI, thorough with
        # PYTEST_LOSSLESS_FULL_HARNESS=1; 25 before the profiles, #24), or this variable's.
        settings=settings(
            profile,
            max_examples=int(os.environ.get("LOSSLESS_MACHINE_EXAMPLES", profile.max_examples)),
            stateful_step_count=30,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


@pytest.mark.slow
def test_the_machine_finds_the_torn_read_of_a_reader_that_opens_files_by_path(monkeypatch):
    """The machine can fail: a reader that takes the manifest from the folder it opened but the
    stored file from the live path (what the plugin did before) is caught reading one version's
    manifest with another version's file."""
    current: dict[str, Reader | None] = {"reader": None}
    original_init = Reader.__init__

    def init(self: Reader, *args: Any, **kwargs: Any) -> None:
        current["reader"] = self
        original_init(self, *args, **kwargs)

    real_open_at = manifest_module._open_at

    def by_path(handle: int, name: str, folder: Path, root: Path) -> int:
        if name == "manifest.json":
            return real_open_at(handle, name, folder, root)
        return os.open(folder / name, os.O_RDONLY)

    monkeypatch.setattr(Reader, "__init__", init)
    wrap = _pausing(lambda: current["reader"])
    monkeypatch.setattr(manifest_module, "_open_at", wrap(by_path))
    monkeypatch.setattr(manifest_module, "_open_folder", wrap(manifest_module._open_folder))
    with pytest.raises(AssertionError, match="torn read"):
        run_state_machine_as_test(
            GoldenStore,
            settings=settings(
                max_examples=300,
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
                database=None,
                print_blob=False,
                phases=[Phase.generate],  # found is enough: no shrinking
            ),
        )


@pytest.mark.slow
def test_the_machine_finds_a_plan_committed_after_the_golden_swap(monkeypatch):
    """The machine can fail: writers that write the plan after the golden swap, as a second
    commit (what the plugin did before, #20), are caught when one is killed between the two
    (at ``golden-swapped``): the new golden with the old plan."""
    monkeypatch.setattr(GoldenStore, "plans_together", False)
    with pytest.raises(AssertionError, match="mixed version"):
        run_state_machine_as_test(
            GoldenStore,
            settings=settings(
                max_examples=300,
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
                database=None,
                print_blob=False,
                phases=[Phase.generate],  # found is enough: no shrinking
            ),
        )


@pytest.mark.slow
def test_the_machine_finds_a_plan_read_by_path_after_the_goldens(monkeypatch):
    """The machine can fail: a check that reads its goldens through the folder but its frozen
    plan by path, at its first speed_gate (what the plugin did before, #20), is caught judging
    one version's goldens by another version's plan when a swap falls between the two."""

    def by_path(self: GoldenFolder, plans: PlanBook) -> None:
        """Nothing: the plans were handed to the folder only for its commit, and read alone."""

    monkeypatch.setattr(GoldenFolder, "hold_plans", by_path)
    with pytest.raises(AssertionError, match="mixed version read"):
        run_state_machine_as_test(
            GoldenStore,
            settings=settings(
                max_examples=300,
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
                database=None,
                print_blob=False,
                phases=[Phase.generate],  # found is enough: no shrinking
            ),
        )
