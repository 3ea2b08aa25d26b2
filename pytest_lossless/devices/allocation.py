"""An allocation: a test's locked devices, the environment its children get, and the idle
proof before and after; releasing it runs the test's finalizers before the locks go.

Its runs inherit the lock descriptors (:attr:`Allocation.lock_fds`) and are listed in the
allocation's runs record (:meth:`Allocation.note_processes`), so that no later allocation of
a device is granted while any of them still runs, whatever happened to this process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.clock import SYSTEM_CLOCK, Clock, utc_iso
from ..core.records import Record, spec
from ..errors import AllocationError
from .base import Device, DeviceIdentity, ForeignProcess
from .locks import Flock, LockDir
from .orphans import OrphanEntry
from .runs import ListedRun, Member, RunsLedger


@dataclass(frozen=True)
class IdleProof(Record):
    """What the devices showed when an allocation was granted (``idle_before``) or released
    (``idle_after``): memory in use and utilisation per device id, and the processes the
    backend lists on them (:class:`ForeignProcess`). ``observed`` False: the
    backend cannot tell (``note``) or its tool failed (``error``)."""

    observed: bool = spec(absent=False)
    at: str | None = spec(None, omit="none")
    note: str | None = spec(None, omit="none")
    error: str | None = spec(None, omit="none")
    memory_used_mib: dict[str, float | None] | None = spec(None, omit="none")
    utilization_pct: dict[str, float | None] | None = spec(None, omit="none")
    foreign_processes: tuple[ForeignProcess, ...] | None = spec(None, omit="none")


@dataclass(frozen=True)
class AllocationRecord(Record):
    """The receipt's ``allocation`` block: an :class:`Allocation` as it stands when read.
    An older receipt lacks the fields after ``identity``: each reads as its default."""

    backend: str
    ids: tuple[str, ...]
    env: dict[str, str]
    identity: tuple[DeviceIdentity, ...]
    lock_keys: tuple[str, ...] = ()
    lock_dir: str = ""
    holder: str = ""
    acquired_at: str = ""
    released_at: str | None = None
    waited_seconds: float = 0.0
    escalated: bool = False
    idle_before: IdleProof = IdleProof(observed=False)
    idle_after: IdleProof | None = None
    finalizer_errors: tuple[str, ...] = ()
    lock_problems: tuple[str, ...] = ()
    orphan_policy: str = "wait"
    orphans: tuple[OrphanEntry, ...] = ()
    left_running: tuple[ListedRun, ...] = ()
    runs_records: tuple[str, ...] = ()
    runs_record_problems: tuple[str, ...] = ()


@dataclass
class Allocation:
    """A test's locked devices: ids, the environment for its children, identity, evidence.

    ``release`` runs the finalizers (LIFO: "end every process group I started"), records
    the idle proof after, and only then releases the locks, even when a finalizer raises.
    A lock file deleted or replaced while held (its inode is recorded when taken) is named in
    ``lock_problems`` and, once every lock is let go, raised as an :class:`AllocationError`:
    the test did not hold its devices alone for all its run.

    ``orphans`` lists what an earlier allocation of these devices had left running when this
    one was asked for, and what was done (waited for, or ended); ``left_running`` what this
    one's runs left behind at release (it stays in the runs record, which keeps the devices
    from being granted while it lives).
    """

    backend: str
    ids: tuple[str, ...]
    env: dict[str, str]
    identities: tuple[DeviceIdentity, ...]
    devices: tuple[Device, ...] = ()
    holder: str = ""
    acquired_at: str = ""
    waited_seconds: float = 0.0
    escalated: bool = False
    idle_before: IdleProof = IdleProof(observed=False)
    idle_after: IdleProof | None = None
    released_at: str | None = None
    lock_dir: str = ""
    finalizer_errors: list[str] = field(default_factory=list)
    lock_problems: list[str] = field(default_factory=list)
    orphan_policy: str = "wait"
    orphans: tuple[OrphanEntry, ...] = ()
    left_running: tuple[ListedRun, ...] = ()
    _locks: list[tuple[str, Flock]] = field(default_factory=list, repr=False)
    _ledger: RunsLedger | None = field(default=None, repr=False)
    _finalizers: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _proof: Callable[[], IdleProof] | None = field(default=None, repr=False)
    _lockdir: LockDir | None = field(default=None, repr=False)
    _clock: Clock = field(default=SYSTEM_CLOCK, repr=False)

    @property
    def lock_keys(self) -> tuple[str, ...]:
        return tuple(d.lock_key for d in self.devices)

    @property
    def identity(self) -> list[dict[str, str]]:
        """Per device what names it (``id``, ``backend``, ``host``, ``lock_key``, and
        ``uuid``, ``bus_id``, ``name``, ``serial`` where the backend can tell): the
        ``devices`` fixture's ``.identity``, as the receipt records it."""
        return [i.to_json() for i in self.identities]

    @property
    def released(self) -> bool:
        return self.released_at is not None

    @property
    def lock_fds(self) -> tuple[int, ...]:
        """The descriptors holding the device locks: every run inherits them, so each flock
        stays held while any run process keeps its copy, even after this process is gone."""
        return tuple(fd for _, lock in self._locks for fd in lock.filenos)

    def note_processes(self, run: str, processes: Sequence[Member]) -> None:
        """The live processes of ``run`` now (``pid``, ``start``, ``pgid``, ``sid``, ``comm``,
        ``argv``), into the runs record; a run that ended reports none."""
        if self._ledger is not None and not self.released:
            self._ledger.note(run, processes)

    def add_finalizer(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` at release, before the locks go (last added runs first)."""
        if self.released:
            raise AllocationError(f"allocation of {self.holder} was already released")
        self._finalizers.append(fn)

    def check_locks(self) -> list[str]:
        """One line per lock file deleted or replaced since it was taken (none: all hold)."""
        return [problem for _, lock in self._locks if (problem := lock.check()) is not None]

    def release(self) -> None:
        """Finalizers (LIFO), idle proof after, then the locks; idempotent."""
        if self.released_at is not None:
            return
        errors: list[BaseException] = []
        try:
            while self._finalizers:
                fn = self._finalizers.pop()
                try:
                    fn()
                except BaseException as exc:
                    # Every finalizer runs, even after Ctrl-C or a pytest outcome; the first
                    # error is raised once all have run.
                    errors.append(exc)
                    self.finalizer_errors.append(f"{type(exc).__name__}: {exc}")
            if self._proof is not None:
                try:
                    self.idle_after = self._proof()
                except Exception as exc:  # evidence is best effort; the locks must go
                    self.idle_after = IdleProof(observed=False, error=str(exc))
        finally:
            if self._ledger is not None:
                # Whatever still runs stays listed, so no later allocation is granted while
                # it lives; an empty record is removed.
                try:
                    self.left_running = self._ledger.close()
                except Exception as exc:  # the locks must go
                    self.finalizer_errors.append(f"runs record: {type(exc).__name__}: {exc}")
            self.lock_problems.extend(self.check_locks())
            for key, lock in reversed(self._locks):
                if self._lockdir is not None:
                    self._lockdir.clear_record(key)
                lock.release()
            self._locks.clear()
            self.released_at = utc_iso(self._clock.wall())
        if errors:
            raise errors[0]
        if self.lock_problems:
            raise AllocationError(
                f"{self.holder}: {'; '.join(self.lock_problems)}. The test did not hold its "
                "devices alone for all its run: another job may have used them meanwhile. "
                f"Something deletes files in the lock folder {self.lock_dir} (a tmp cleaner?): "
                "keep it from there, or choose another folder with --lossless-lock-dir",
                lock_dir=self.lock_dir,
            )

    def __enter__(self) -> Allocation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def record(self) -> AllocationRecord:
        """The allocation as it stands now (read late, a record shows its release)."""
        ledger = self._ledger
        return AllocationRecord(
            backend=self.backend,
            ids=tuple(self.ids),
            env=dict(self.env),
            identity=self.identities,
            lock_keys=self.lock_keys,
            lock_dir=self.lock_dir,
            holder=self.holder,
            acquired_at=self.acquired_at,
            released_at=self.released_at,
            waited_seconds=round(self.waited_seconds, 6),
            escalated=self.escalated,
            idle_before=self.idle_before,
            idle_after=self.idle_after,
            finalizer_errors=tuple(self.finalizer_errors),
            lock_problems=tuple(self.lock_problems),
            orphan_policy=self.orphan_policy,
            orphans=self.orphans,
            left_running=self.left_running,
            runs_records=tuple(str(p) for p in ledger.paths) if ledger else (),
            runs_record_problems=tuple(ledger.problems) if ledger else (),
        )

    def to_dict(self) -> dict[str, Any]:
        """The receipt's allocation block: :meth:`record`'s JSON (the receipt reads it when
        written, after the release)."""
        return self.record().to_json()
