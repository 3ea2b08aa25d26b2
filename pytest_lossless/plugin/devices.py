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
import sys
from collections.abc import Generator
from typing import TYPE_CHECKING

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
DEVICE_MARKERS = ("npu", "gpu")
#: Which backends a marker accepts (cpu slots emulate both; a plugin's own backend is trusted).
_MARKER_REFUSES = {"npu": ("cuda",), "gpu": ("npu",)}


@pytest.hookimpl(trylast=True)
def pytest_lossless_backends() -> list[Backend]:
    """The built-in npu, cuda and cpu backends, last, so a plugin's backend of a name wins."""
    from ..devices import builtin_backends

    return builtin_backends()


def pytest_configure(config: pytest.Config) -> None:
    """The pool, decided now: a command-line pool larger than the scheduler's allocation is a
    usage error at the start, not an error in every device test."""
    pool(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    if ALLOCATOR_KEY in config.stash:
        del config.stash[ALLOCATOR_KEY]
    if POOL_KEY in config.stash:
        del config.stash[POOL_KEY]


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
            )
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-lossless: {exc}") from None
        config.stash[ALLOCATOR_KEY] = found
    return found


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
            terminal.write_line(line)


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
    with failing_on_errors():
        allocation = chosen.acquire(count, holder=item.nodeid)
    item.stash[ALLOCATION_KEY] = allocation
    try:
        yield allocation
    finally:
        with failing_on_errors():  # a lock file replaced under the test is named, not traced
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
