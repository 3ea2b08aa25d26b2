"""The ``devices`` fixture and the ``npu``/``gpu`` markers: a locked allocation per test.

The session's :class:`~pytest_lossless.devices.Allocator` lives under a ``StashKey`` (one per
process: each xdist worker has its own; the locks are host-wide). The allocation is held for the
whole test and released at teardown, after the processes the test started have ended. A device
on which an earlier allocation's process still runs (its pytest was killed) is waited for, or
ended with ``--lossless-orphans=kill``; the wait line names it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Generator
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from ..errors import ConfigError
from .config import settings
from .evidence import ALLOCATION_KEY
from .outcomes import failing_on_errors

if TYPE_CHECKING:
    from ..devices import Allocation, Allocator, Backend

#: The session's allocator, built on first use.
ALLOCATOR_KEY = pytest.StashKey["Allocator"]()
#: The pool the allocator takes devices from: the settings' pool, or the scheduler's allocation.
POOL_KEY = pytest.StashKey["tuple[str, ...] | None"]()
#: The session's :class:`Interruption` (signal handlers, the launchers to end).
INTERRUPTION_KEY = pytest.StashKey["Interruption"]()
#: What ends a session: CI cancel and ``timeout`` send SIGTERM, an ssh hangup SIGHUP.
INTERRUPTING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: After the first signal: every process a run started is SIGKILLed at this many seconds
#: (whatever the main thread does), and the session ends at :data:`EXIT_AFTER` at the latest.
KILL_AFTER = 4.0
EXIT_AFTER = 8.0


class Stoppable(Protocol):
    """What an interruption needs of a launcher (:class:`~pytest_lossless.run.Launcher`)."""

    def interrupt(self, reason: str) -> None: ...

    def kill_now(self, reason: str) -> None: ...


class Interruption:
    """SIGINT, SIGTERM and SIGHUP, turned into an interruption that pytest's own flow records.

    The first signal, in a test's setup or call, fails that test at once (``pytest.fail``,
    which ``except Exception`` in a test does not swallow) and asks the session to stop
    after it: its teardown then ends every run with a short grace, its receipt is written
    (``outcome.interrupted`` names the signal), and pytest exits 2 (interrupted) with one
    line. Outside a test (collection, between tests) it is a KeyboardInterrupt, as Ctrl-C
    always was; while a test tears down or the session finishes it only shortens what
    remains. A second signal during a test that ignored the first is a KeyboardInterrupt.
    Backstops, on a thread: at :data:`KILL_AFTER` s every run's process group is SIGKILLed,
    at :data:`EXIT_AFTER` s a session still not finished exits (its locks go with it).
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.session: pytest.Session | None = None
        self.signal: str | None = None
        self.item: pytest.Item | None = None
        self.phase: str | None = None  # "protocol", "setup", "call", "finish"
        self.launchers: list[Stoppable] = []
        #: Allocations held now: the exit backstop fires only while one is (its locks).
        self.holding = 0
        self.done = threading.Event()
        self._previous: dict[int, Any] = {}
        self._lock = threading.Lock()

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # handlers can only be set there; pytest's own Ctrl-C handling stays
        for sig in INTERRUPTING:
            with contextlib.suppress(OSError, ValueError):
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        self.done.set()
        for sig, previous in self._previous.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, previous)
        self._previous.clear()

    def add(self, launcher: Stoppable) -> None:
        with self._lock:
            self.launchers.append(launcher)
        if self.signal is not None:
            launcher.interrupt(self.signal)

    def remove(self, launcher: Stoppable) -> None:
        with self._lock:
            self.launchers = [x for x in self.launchers if x is not launcher]

    def begin(self, name: str) -> None:
        """Mark the session interrupted by ``name`` (also for a KeyboardInterrupt that pytest
        saw first): every launcher stops fast and records rather than raises."""
        with self._lock:
            if self.signal is not None:
                return
            self.signal = name
            launchers = list(self.launchers)
        for launcher in launchers:
            launcher.interrupt(name)
        if self.session is not None:
            self.session.shouldstop = f"pytest-lossless: interrupted by {name}"
        if self.item is not None:
            self._mark(self.item, name)
        for delay, action in ((KILL_AFTER, self._kill_all), (EXIT_AFTER, self._exit)):
            timer = threading.Timer(delay, action)
            timer.daemon = True
            timer.start()

    def _mark(self, item: pytest.Item, name: str) -> None:
        """The test's receipt says what interrupted it (created for a test that holds devices
        or runs models, even before its first record)."""
        from .evidence import RECEIPT_KEY, receipt_for

        names = getattr(item, "fixturenames", ())
        if RECEIPT_KEY in item.stash or "model_run" in names or "devices" in names:
            receipt_for(item).set_outcome("interrupted", name)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        first = self.signal is None
        self.begin(name)
        if self.phase == "finish" and self.session is not None:
            # Every test ran, but the index is not written yet: it says interrupted.
            self.session.exitstatus = pytest.ExitCode.INTERRUPTED
        if self.phase in ("setup", "call"):
            if not first:
                raise KeyboardInterrupt(f"pytest-lossless: {name} again")
            pytest.fail(
                f"pytest-lossless: interrupted by {name}: the session stops after this test "
                "(its runs are ended, its receipt is written)",
                pytrace=False,
            )
        if self.phase is None and first:
            raise KeyboardInterrupt(f"pytest-lossless: interrupted by {name}")

    def _kill_all(self) -> None:
        if self.done.is_set():
            return
        with self._lock:
            launchers = list(self.launchers)
        for launcher in launchers:
            launcher.kill_now(f"interrupted by {self.signal}: not ended within {KILL_AFTER:g} s")

    def _exit(self) -> None:
        if self.done.is_set() or self.holding == 0:
            return  # nothing held: a slow finish keeps no device from the next session
        self._kill_all()
        stream = sys.__stderr__
        if stream is not None:
            stream.write(
                f"pytest-lossless: interrupted by {self.signal}, and the session did not finish "
                f"within {EXIT_AFTER:g} s (a test ignores the interruption?): exiting now; "
                "receipts not yet written are lost\n"
            )
            stream.flush()
        os._exit(2)


def interruption(config: pytest.Config) -> Interruption | None:
    return config.stash.get(INTERRUPTION_KEY, None)


def pytest_configure(config: pytest.Config) -> None:
    state = config.stash[INTERRUPTION_KEY] = Interruption(config)
    state.install()
    # The pool, decided now: a command-line pool larger than the scheduler's allocation is a
    # usage error at the start, not an error in every device test.
    pool(config)


def pytest_sessionstart(session: pytest.Session) -> None:
    state = interruption(session.config)
    if state is not None:
        state.session = session


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    state = interruption(item.config)
    if state is None:
        return (yield)
    state.item, state.phase = item, "protocol"
    try:
        return (yield)
    finally:
        state.item, state.phase = None, None


def _phase(item: pytest.Item, name: str) -> Generator[None, object, object]:
    state = interruption(item.config)
    if state is None:
        return (yield)
    if state.signal is not None and name == "setup":
        pytest.fail(f"pytest-lossless: interrupted by {state.signal}", pytrace=False)
    state.phase = name
    try:
        return (yield)
    finally:
        state.phase = "protocol"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item, "call"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, object, object]:
    from ..core import faults

    state = interruption(session.config)
    if state is not None:
        state.phase = "finish"  # first: a signal from here on only shortens the finish
    faults.point("session-finish")
    if state is not None and session.exitstatus == pytest.ExitCode.INTERRUPTED:
        state.begin(state.signal or "SIGINT")
    return (yield)


DEVICE_MARKERS = ("npu", "gpu")
#: Which backends a marker accepts (cpu slots emulate both; a plugin's own backend is trusted).
_MARKER_REFUSES = {"npu": ("cuda",), "gpu": ("npu",)}


@pytest.hookimpl(trylast=True)
def pytest_lossless_backends() -> list[Backend]:
    """The built-in npu, cuda and cpu backends, last, so a plugin's backend of a name wins."""
    from ..devices import builtin_backends

    return builtin_backends()


def pytest_unconfigure(config: pytest.Config) -> None:
    if ALLOCATOR_KEY in config.stash:
        del config.stash[ALLOCATOR_KEY]
    if POOL_KEY in config.stash:
        del config.stash[POOL_KEY]
    state = config.stash.get(INTERRUPTION_KEY, None)
    if state is not None:
        state.uninstall()
        del config.stash[INTERRUPTION_KEY]


def pool(config: pytest.Config) -> tuple[str, ...] | None:
    """The devices tests may take: ``--lossless-devices`` (or the ini's), or, inside a Slurm
    job given devices, its allocation (:func:`..devices.scheduler.scheduler_pool`)."""
    from ..devices import collect_backends
    from ..devices.scheduler import scheduler_pool, slurm_job

    if POOL_KEY in config.stash:
        return config.stash[POOL_KEY]
    resolved = settings(config)
    try:
        job = slurm_job(os.environ)
        found = resolved.devices
        if job is not None and job.allocated:
            named = [b for b in collect_backends(config.hook) if b.name == resolved.backend]
            found = scheduler_pool(
                job,
                resolved.devices,
                source=resolved.sources.get("devices", "default"),
                emulated=bool(named and named[0].emulated),
            )
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-lossless: {exc}") from None
    config.stash[POOL_KEY] = found
    return found


def pytest_report_header(config: pytest.Config) -> list[str]:
    from ..devices.scheduler import slurm_job

    try:
        job = slurm_job(os.environ)
    except ConfigError:
        return []
    if job is None:
        return []
    chosen = pool(config)
    taken = ",".join(chosen) if chosen is not None else "all discovered"
    return [
        f"lossless: Slurm job {job.name} on {job.node or 'an unnamed node'} "
        f"({job.describe()}): devices {taken}"
    ]


def allocator(config: pytest.Config) -> Allocator:
    """The session's allocator, built on first use from the resolved settings."""
    from ..devices import Allocator, collect_backends

    found = config.stash.get(ALLOCATOR_KEY, None)
    if found is None:
        resolved = settings(config)
        try:
            found = Allocator(
                collect_backends(config.hook),
                backend=resolved.backend,
                pool=pool(config),
                lock_dir=resolved.lock_dir,
                timeout=resolved.lock_timeout,
                busy=resolved.busy,
                orphans=resolved.orphans,
                on_wait=lambda line: _announce(config, line),
                widen=_widen(),
            )
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-lossless: {exc}") from None
        config.stash[ALLOCATOR_KEY] = found
    return found


def _widen() -> str:
    """How to make the pool larger: inside a Slurm job given devices the pool is at most its
    allocation, so a larger one is asked of Slurm (a larger --lossless-devices is an error)."""
    from ..devices.scheduler import slurm_job

    default = "widen --lossless-devices"
    try:
        job = slurm_job(os.environ)
    except ConfigError:
        return default
    if job is None or not job.allocated:
        return default
    return (
        f"ask Slurm for more: the pool is at most the allocation of the Slurm job {job.name} "
        f"({job.describe()}), so submit the task with more devices (--gres=gpu:N)"
    )


def _announce(config: pytest.Config, line: str) -> None:
    """Show a waiting test's line now, past output capture (a worker's stderr under xdist)."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if hasattr(config, "workerinput") or terminal is None:
            stream = sys.__stderr__
            if stream is not None:
                stream.write(line + "\n")
                stream.flush()
        else:
            _write_own_line(terminal, line, config.stash.get(WAITING_KEY, None))


#: ``config.stash[WAITING_KEY]``: the test whose setup is acquiring devices (its wait line).
WAITING_KEY = pytest.StashKey["pytest.Item | None"]()


def _write_own_line(terminal: Any, line: str, item: pytest.Item | None) -> None:
    """``line`` on a line of its own, never inside pytest's progress line: a newline first
    when that line is open (under ``-q`` pytest's dots leave it open), and then the waiting
    test's prefix (its file, or its id under ``-v``) written again, so its result and the
    percentage land where pytest puts them, not on a bare line."""
    writer = terminal._tw
    terminal.ensure_newline()
    if writer.width_of_current_line:
        writer.line()
    if item is not None and (terminal.showlongtestinfo or terminal.showfspath):
        writer.write(line)
        terminal.currentfspath = None  # the prefix is written again, ending our line
        terminal.pytest_runtest_logstart(item.nodeid, item.location)
    else:
        writer.line(line)
    writer.flush()


def device_request(item: pytest.Item) -> tuple[str | None, int]:
    """(marker name, N) of the closest ``npu``/``gpu`` marker; (None, 1) without one."""
    from ..settings import marker_device_count

    __tracebackhide__ = True
    for marker in item.iter_markers():
        if marker.name in DEVICE_MARKERS:
            with failing_on_errors(f"{item.nodeid}: "):
                return marker.name, marker_device_count(marker.args, marker.kwargs, marker.name)
    return None, 1


def holds_devices(item: pytest.Item) -> bool:
    """Whether the test is marked ``npu`` or ``gpu``."""
    return any(m.name in DEVICE_MARKERS for m in item.iter_markers())


@pytest.fixture
def devices(request: pytest.FixtureRequest) -> Generator[Allocation, None, None]:
    """The test's locked allocation: ``.backend``, ``.ids``, ``.env``, ``.identity``.

    Held for the whole test; released at teardown after its finalizers (the processes
    the test started are ended first).
    """
    item = request.node
    chosen = allocator(request.config)
    reason = chosen.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    marker, count = device_request(item)
    backend = chosen.chosen.name
    if marker is not None and backend in _MARKER_REFUSES[marker]:
        pytest.skip(
            f"marked {marker}, but the device backend is {backend} "
            f"(choose one with --lossless-backend)"
        )
    request.config.stash[WAITING_KEY] = item
    try:
        with failing_on_errors():
            allocation = chosen.acquire(count, holder=item.nodeid)
    finally:
        request.config.stash[WAITING_KEY] = None
    item.stash[ALLOCATION_KEY] = allocation
    state = interruption(request.config)
    if state is not None:
        state.holding += 1
    try:
        yield allocation
    finally:
        if state is not None:
            state.holding -= 1
        if state is not None and state.signal is not None:
            # Interrupted: pytest may be tearing down while it finishes, where a raise is a
            # traceback. The allocation's own record (lock_problems) says what happened.
            with contextlib.suppress(Exception):
                allocation.release()
        else:
            with failing_on_errors():  # a lock file replaced under the test is named
                allocation.release()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``npu``/``gpu`` hold their allocation even without naming ``devices``.

    Done by adding ``devices`` to those tests' fixtures (first, so the allocation is held before
    the test's other fixtures start anything), not with an autouse fixture: an autouse fixture
    would cost every plain test of the repository a fixture setup and teardown.
    """
    for item in items:
        names = getattr(item, "fixturenames", None)
        if isinstance(names, list) and "devices" not in names and holds_devices(item):
            # A new list: parametrized siblings share the old one, and their marks may differ.
            item.fixturenames = ["devices", *names]  # type: ignore[attr-defined]
