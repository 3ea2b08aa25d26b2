"""The allocator: all-or-none grants of N devices from a fixed pool, with a waiting line
shown to the user, a timeout that names each holder, and a gate that lets a long waiter in.

No device is granted while a process an earlier allocation of it started still runs (an
orphan, :mod:`.orphans`): the allocator names it and waits, or ends it (``orphans="kill"``).
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..core import faults
from ..core.clock import SYSTEM_CLOCK, Clock, utc_iso
from ..errors import AllocationError, AllocationTimeout, ConfigError
from ..settings import BUSY_POLICIES, ORPHAN_POLICIES
from .allocation import Allocation, IdleProof
from .base import Backend, Device, ForeignProcess, ToolError, foreign_processes, match_device
from .locks import Flock, HolderRecord, LockDir, LockFileError, holder_record
from .orphans import ORPHAN_GRACE, Orphan, OrphanWatch, describe_orphans, find_orphans, is_alive
from .runs import RunsLedger, clear_stale, read_runs, runs_problem


@dataclass
class _Attempt:
    """Why one all-or-none attempt failed: locks held by others, lock files that cannot be
    used (a planted symlink or FIFO), orphans of an earlier allocation, or foreign processes.
    ``free``: how many devices were free of all of these."""

    held: list[Device] = field(default_factory=list)
    unusable: list[tuple[Device, LockFileError]] = field(default_factory=list)
    busy: list[ForeignProcess] = field(default_factory=list)
    orphaned: list[tuple[Device, list[Orphan]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    guarded: list[tuple[Device, str]] = field(default_factory=list)
    free: int = 0
    new_orphans: bool = False
    gated: bool = False


class Allocator:
    """Hands out all-or-none allocations of ``count`` devices from a fixed pool.

    An attempt tries every candidate lock without blocking; if it cannot take ``count``
    it releases all it took, waits (jittered exponential backoff, capped so a freed
    device is seen within ``poll_cap`` seconds, five times that once a wait passes 10 s, so
    many long waiters stay cheap) and tries again: nobody holds some
    devices while waiting for others, so there is no deadlock. To keep a big ask from
    starving behind a stream of small ones, a waiter that has waited ``escalate_after``
    seconds takes the backend's gate lock exclusively: new attempts (which take the
    gate shared) then pause until it is served, while current holders finish normally.

    A device that is locked but still runs an orphan (a process that an earlier allocation
    of it started, listed in its runs record) is not free: ``orphans="wait"`` waits for it,
    naming it, ``orphans="kill"`` ends it (SIGTERM to its process group, ``orphan_grace``
    seconds, SIGKILL) when the device is needed, and the allocation records both.
    """

    def __init__(
        self,
        backends: Sequence[Backend],
        *,
        backend: str = "auto",
        pool: Sequence[str] | None = None,
        lock_dir: Path,
        timeout: float,
        busy: str = "wait",
        orphans: str = "wait",
        orphan_grace: float = ORPHAN_GRACE,
        clock: Clock = SYSTEM_CLOCK,
        on_wait: Callable[[str], None] | None = None,
        escalate_after: float | None = 2.0,
        poll_cap: float = 0.05,
        settle: float = 2.0,
        host: str | None = None,
        widen: str = "widen --lossless-devices",
    ) -> None:
        """``widen``: how to make the pool larger, as a too-large request's error says it (a
        scheduler's allocation is widened by asking the scheduler, not with an option)."""
        names = [b.name for b in backends]
        if backend != "auto" and backend not in names:
            raise ConfigError(
                "--lossless-backend", backend, f"no such backend; known: auto, {', '.join(names)}"
            )
        if busy not in BUSY_POLICIES:
            raise ConfigError("--lossless-busy", busy, f"expected one of {BUSY_POLICIES}")
        if orphans not in ORPHAN_POLICIES:
            raise ConfigError(
                "--lossless-orphans", orphans, f"expected one of {', '.join(ORPHAN_POLICIES)}"
            )
        self.backends = list(backends)
        self.backend_name = backend
        self.pool = tuple(pool) if pool is not None else None
        self.lock_dir = LockDir(lock_dir)
        self.timeout = timeout
        self.busy = busy
        self.orphans = orphans
        self.orphan_grace = orphan_grace
        self.clock = clock
        self.on_wait = on_wait
        self.escalate_after = escalate_after
        self.poll_cap = poll_cap
        self.settle = settle
        self.host = host or socket.gethostname()
        self.widen = widen
        self._random = random.Random(os.getpid() ^ id(self))
        self._chosen: Backend | None = None
        self._skip: str | None = None
        self._resolved = False
        self._pool_devices: list[tuple[str, Device]] | None = None

    # -- backend choice

    def _resolve(self) -> None:
        if self._resolved:
            return
        self._resolved = True
        hint = "run with --lossless-backend=cpu to emulate device slots on the CPU"
        if self.backend_name == "auto":
            problems = []
            for candidate in self.backends:
                if candidate.emulated:
                    continue
                if candidate.available():
                    self._chosen = candidate
                    return
                problem = candidate.problem or "unavailable"
                problems.append(f"{candidate.name}: {problem}")
            self._skip = f"no accelerator found ({'; '.join(problems) or 'no backend'}); {hint}"
            return
        chosen = next(b for b in self.backends if b.name == self.backend_name)
        if chosen.available():
            self._chosen = chosen
        else:
            self._skip = (
                f"--lossless-backend={chosen.name} is unavailable on this host "
                f"({chosen.problem or 'no devices'}); {hint}"
            )

    def skip_reason(self) -> str | None:
        """Why device tests cannot run here (no backend available), or None."""
        self._resolve()
        return self._skip

    @property
    def chosen(self) -> Backend:
        self._resolve()
        if self._chosen is None:
            raise AllocationError(self._skip or "no device backend is available")
        return self._chosen

    # -- the pool

    def pool_devices(self) -> list[tuple[str, Device]]:
        """(id as the pool spells it, device) for every device tests may take."""
        if self._pool_devices is not None:
            return self._pool_devices
        backend = self.chosen
        if self.pool is not None:
            # Slots that a backend makes up are whatever the pool names; others must be found.
            made = backend.devices_for(self.pool)
            if made is not None:
                self._pool_devices = list(zip(self.pool, made, strict=True))
                return self._pool_devices
        discovered = backend.discover()
        if self.pool is None:
            self._pool_devices = [(d.id, d) for d in discovered]
            return self._pool_devices
        chosen: list[tuple[str, Device]] = []
        for token in self.pool:
            device = match_device(token, discovered)
            if device is None:
                have = ", ".join(f"{d.id} ({d.lock_key})" for d in discovered) or "none"
                raise AllocationError(
                    f"--lossless-devices names {token!r}, which the {backend.name} backend does "
                    f"not find on {self.host}; it has: {have}",
                    device=token,
                )
            if any(device.lock_key == d.lock_key for _, d in chosen):
                raise AllocationError(
                    f"--lossless-devices names device {device.id} twice ({token!r})", device=token
                )
            chosen.append((token, device))
        self._pool_devices = chosen
        return chosen

    # -- acquisition

    def acquire(self, count: int, holder: str) -> Allocation:
        """Lock ``count`` devices of the pool for ``holder`` (a test id), all or none."""
        backend = self.chosen
        if count < 1:
            raise AllocationError(f"{holder} asks for {count} devices; ask for 1 or more")
        pool = self.pool_devices()
        labels = ",".join(label for label, _ in pool)
        if count > len(pool):
            raise AllocationError(
                f"{holder} asks for {count} {backend.name} devices but the pool has only "
                f"{len(pool)} ({labels or 'none'}): lower devices=N in its marker or "
                f"{self.widen}",
                count=count,
                pool=labels,
            )
        self.lock_dir.ensure()
        start = self.clock.monotonic()
        deadline = start + self.timeout
        gate = self.lock_dir.lock(f".gate-{backend.name}")
        escalated = False
        announced = False
        busy_keys: set[str] = set()
        failing: set[str] = set()  # under busy="fail": every device seen busy so far
        busy_seen: list[ForeignProcess] = []
        watch = OrphanWatch(self.orphans, grace=self.orphan_grace, clock=self.clock)
        delay = 0.01
        try:
            while True:
                result = self._attempt(
                    backend, pool, count, holder, busy_keys, watch, gate=None if escalated else gate
                )
                if isinstance(result, Allocation):
                    result.waited_seconds = self.clock.monotonic() - start
                    result.escalated = escalated
                    result.orphans = watch.entries()
                    faults.point("allocation")
                    return result
                if result.new_orphans:
                    announced = False  # a new orphan gets its own wait line
                if self.orphans == "kill" and self._end_orphans(result, count, holder, watch):
                    continue  # try again at once: the devices may be free now
                if count > len(pool) - len(result.unusable):
                    # Waiting cannot help: only their owner or root can remove those files.
                    raise AllocationError(
                        f"{holder} asks for {count} {backend.name} device(s) of [{labels}], "
                        f"but {len(result.unusable)} cannot be locked: "
                        + "; ".join(f"{d.id}: {exc}" for d, exc in result.unusable),
                        count=count,
                        pool=labels,
                        lock_dir=str(self.lock_dir.path),
                    )
                seen_busy = {
                    d.lock_key for label, d in pool if any(p.device == d.id for p in result.busy)
                }
                if result.busy and self.busy == "fail":
                    # Refuse only when the devices not seen busy cannot cover the request; else
                    # try again at once, with the busy ones last.
                    failing |= seen_busy
                    busy_seen += result.busy
                    if count > len(pool) - len(failing) - len(result.unusable):
                        raise AllocationError(
                            f"{holder}: {backend.name} device(s) busy with a process that is "
                            f"not a pytest-lossless holder: {_describe_busy(busy_seen)}; end "
                            "it, or run with --lossless-busy=wait",
                            processes=[p.to_json() for p in busy_seen],
                        )
                    busy_keys = set(failing)
                    continue
                busy_keys = seen_busy | {d.lock_key for d, _ in result.orphaned}
                now = self.clock.monotonic()
                if not announced and self.on_wait is not None:
                    announced = True
                    self.on_wait(
                        f"pytest-lossless: {holder} waits for {count} {backend.name} "
                        f"device(s) of [{labels}]: {self._blockers(result)} "
                        f"(timeout {self.timeout:g} s, locks in {self.lock_dir.path})"
                    )
                if now >= deadline:
                    blockers = self._blockers(result)  # read the holder records once
                    ending = (
                        "end what still runs there (or run with --lossless-orphans=kill), "
                        if result.orphaned and self.orphans == "wait"
                        else ""
                    )
                    raise AllocationTimeout(
                        f"{holder} timed out after {now - start:.1f} s waiting for {count} "
                        f"{backend.name} device(s) of [{labels}]: {blockers}. "
                        f"Raise --lossless-lock-timeout, {ending}or free the devices (locks in "
                        f"{self.lock_dir.path})",
                        holders=blockers,
                    )
                if (
                    not escalated
                    and result.held
                    and self.escalate_after is not None
                    and now - start >= self.escalate_after
                ):
                    escalated = gate.try_acquire()
                    if escalated:
                        self.lock_dir.write_record(
                            f".gate-{backend.name}",
                            self._record(holder, [f"{count} of [{labels}]"]),
                        )
                pause = delay * (0.5 + self._random.random())
                self.clock.sleep(min(pause, max(0.0, deadline - now)))
                cap = self.poll_cap if now - start < 10.0 else self.poll_cap * 5
                delay = min(delay * 1.6, cap)
        finally:
            if escalated:
                self.lock_dir.clear_record(f".gate-{backend.name}")
                gate.release()

    def _record(self, holder: str, keys: Sequence[str]) -> HolderRecord:
        return holder_record(holder, keys, host=self.host, now=self.clock.wall())

    def _end_orphans(self, result: _Attempt, count: int, holder: str, watch: OrphanWatch) -> bool:
        """Under ``orphans="kill"``: end the orphans of as many orphaned devices as the ask
        lacks (each orphan once); False when there were none to end."""
        short = count - result.free
        wanted = result.orphaned[: max(0, short)]
        targets: dict[tuple[int, int], Orphan] = {}
        for _, found in wanted:
            targets.update((o.identity, o) for o in watch.endable(found))
        if not targets:
            return False
        ids = ",".join(d.id for d, _ in wanted)
        if self.on_wait is not None:
            self.on_wait(
                f"pytest-lossless: {holder} ends what an earlier allocation left running on "
                f"{self.chosen.name} device(s) {ids} (--lossless-orphans=kill: SIGTERM to "
                f"each process group, SIGKILL after {self.orphan_grace:g} s): "
                + describe_orphans(list(targets.values()))
            )
        watch.end(list(targets.values()))
        return True

    def _attempt(
        self,
        backend: Backend,
        pool: Sequence[tuple[str, Device]],
        count: int,
        holder: str,
        busy_keys: set[str],
        watch: OrphanWatch,
        *,
        gate: Flock | None,
    ) -> Allocation | _Attempt:
        if gate is not None and not gate.try_acquire(shared=True):
            return _Attempt(gated=True)
        taken: list[tuple[str, Device, Flock]] = []
        failed: list[Device] = []
        unusable: list[tuple[Device, LockFileError]] = []
        orphaned: list[tuple[Device, list[Orphan]]] = []
        guarded: list[tuple[Device, str]] = []
        try:
            # Every runs record of the pool, read at once: a free lock is not a free device
            # while a process of an earlier allocation still runs on it.
            records, problems = read_runs(self.lock_dir, [d.lock_key for _, d in pool])
            # Devices seen busy (a foreign process, an orphan) go last: others first.
            ordered = sorted(pool, key=lambda item: item[1].lock_key in busy_keys)
            for label, device in ordered:
                lock = self.lock_dir.lock(device.lock_key)
                try:
                    locked = lock.try_acquire()
                except LockFileError as exc:
                    unusable.append((device, exc))
                    continue
                runs = records[device.lock_key]
                if not locked and lock.guarded is not None:
                    guarded.append((device, lock.guarded))  # its file went; its holder did not
                    continue
                if locked and self.lock_dir.replaced_under(device.lock_key, lock, self.host):
                    lock.release()  # a live holder still locks the file this one replaced
                    failed.append(device)
                elif lock.held:
                    found = find_orphans(
                        runs, self.host, include_live_holders=True, scan=watch.scan
                    )
                    planted = runs_problem(self.lock_dir, device.lock_key)
                    if found or planted is not None:
                        lock.release()
                        if found:
                            orphaned.append((device, found))
                        elif planted is not None:
                            unusable.append((device, LockFileError(*planted)))
                        continue
                    clear_stale(runs)  # its lock is ours and nothing of it runs: stale
                    taken.append((label, device, lock))
                    if len(taken) == count:
                        break
                else:
                    # Held: by a live allocation, or (its holder gone) by its runs, which
                    # inherited the lock; those are named, and ended under orphans="kill".
                    found = find_orphans(
                        runs, self.host, include_live_holders=False, scan=watch.scan
                    )
                    if found:
                        orphaned.append((device, found))
                    else:
                        failed.append(device)
        finally:
            if gate is not None:
                gate.release()
        new = watch.saw([(d.id, found) for d, found in orphaned])
        if len(taken) < count:
            for _, _, lock in reversed(taken):
                lock.release()
            return _Attempt(
                held=failed,
                unusable=unusable,
                orphaned=orphaned,
                problems=problems,
                guarded=guarded,
                free=len(taken),
                new_orphans=bool(new),
            )
        try:
            return self._grant(backend, taken, holder)
        except _Busy as busy:
            for _, _, lock in reversed(taken):
                lock.release()
            return _Attempt(busy=busy.processes)
        except BaseException:
            for _, _, lock in reversed(taken):
                lock.release()
            raise

    def _grant(
        self, backend: Backend, taken: Sequence[tuple[str, Device, Flock]], holder: str
    ) -> Allocation:
        taken = sorted(taken, key=lambda t: _pool_index(self._pool_devices or [], t[1]))
        devices = [d for _, d, _ in taken]
        before = self._proof(backend, devices)
        if before.foreign_processes:
            raise _Busy(list(before.foreign_processes))
        keys = [d.lock_key for d in devices]
        record = self._record(holder, keys)
        # The runs record first: a device whose runs cannot be recorded is not granted.
        ledger = RunsLedger(self.lock_dir, keys, record, alive=is_alive)
        ledger.open()
        for key, (_, _, lock) in zip(keys, taken, strict=True):
            # The lock file's identity lets a later taker see that this file was replaced.
            self.lock_dir.write_record(
                key, replace(record, lock_inode=lock.inode, lock_dev=lock.device)
            )
        allocation = Allocation(
            backend=backend.name,
            ids=tuple(label for label, _, _ in taken),
            env=backend.visibility_env(devices),
            identities=tuple(d.identity(self.host) for d in devices),
            devices=tuple(devices),
            holder=holder,
            acquired_at=record.since,
            idle_before=before,
            lock_dir=str(self.lock_dir.path),
            orphan_policy=self.orphans,
            _locks=[(k, lk) for k, (_, _, lk) in zip(keys, taken, strict=True)],
            _ledger=ledger,
            _lockdir=self.lock_dir,
            _clock=self.clock,
        )
        allocation._proof = lambda: self._proof_after(backend, devices)
        return allocation

    def _proof(self, backend: Backend, devices: Sequence[Device]) -> IdleProof:
        """Memory in use and foreign processes on ``devices`` now, where the backend can tell."""
        if not backend.observes_usage:
            return IdleProof(
                observed=False,
                at=utc_iso(self.clock.wall()),
                note=f"{backend.name} devices report no memory or processes",
            )
        try:
            now = {d.lock_key: d for d in backend.discover()}
            me = os.getpid()  # a test's own process is not foreign to its allocation
            foreign = [p for p in foreign_processes(backend, devices) if p.pid != me]
        except ToolError as exc:
            return IdleProof(observed=False, at=utc_iso(self.clock.wall()), error=str(exc))
        return IdleProof(
            observed=True,
            at=utc_iso(self.clock.wall()),
            memory_used_mib={
                d.id: now[d.lock_key].memory_used_mib if d.lock_key in now else None
                for d in devices
            },
            utilization_pct={
                d.id: now[d.lock_key].utilization_pct if d.lock_key in now else None
                for d in devices
            },
            foreign_processes=tuple(foreign),
        )

    def _proof_after(self, backend: Backend, devices: Sequence[Device]) -> IdleProof:
        # A process that just ended can linger in the tool's table for a moment.
        deadline = self.clock.monotonic() + self.settle
        while True:
            proof = self._proof(backend, devices)
            if not proof.foreign_processes or self.clock.monotonic() >= deadline:
                return proof
            self.clock.sleep(0.1)

    def _blockers(self, attempt: _Attempt) -> str:
        # Devices with the same holder are named together: "0,1 held by pid 805 (...)".
        by_holder: dict[str, list[str]] = {}
        for device in attempt.held:
            text = self.lock_dir.describe_holder(device.lock_key, self.host)
            by_holder.setdefault(text, []).append(device.id)
        for device, found in attempt.orphaned:
            by_holder.setdefault(f"not free: {describe_orphans(found)}", []).append(device.id)
        parts = [f"{','.join(ids)} {text}" for text, ids in by_holder.items()]
        parts.extend(f"{device.id} cannot be locked: {exc}" for device, exc in attempt.unusable)
        parts.extend(f"{device.id} is not free: {why}" for device, why in attempt.guarded)
        if attempt.problems:
            parts.append("runs records ignored: " + "; ".join(attempt.problems[:4]))
        if attempt.busy:
            parts.append(f"busy with {_describe_busy(attempt.busy)}")
        if attempt.gated:
            parts.append(
                "a longer waiter has priority: "
                + self.lock_dir.describe_holder(f".gate-{self.chosen.name}", self.host)
            )
        return "; ".join(parts) or "nothing (retrying)"


class _Busy(Exception):
    """Foreign processes found on freshly locked devices: the attempt lets them go again."""

    def __init__(self, processes: list[ForeignProcess]) -> None:
        super().__init__("busy")
        self.processes = processes


def _describe_busy(processes: Iterable[ForeignProcess]) -> str:
    return ", ".join(p.describe() for p in processes)


def _pool_index(pool: Sequence[tuple[str, Device]], device: Device) -> int:
    for index, (_, candidate) in enumerate(pool):
        if candidate.lock_key == device.lock_key:
            return index
    return len(pool)
