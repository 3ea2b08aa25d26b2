"""A rule-based state machine of the device lock protocol (issue #23, the method): sessions
acquire and release all-or-none allocations from one pool, die without releasing (their
descriptors close, their records stay), and a tmp cleaner deletes the lock folder under them.

Invariants after every step: no device is held by two live allocations (safety), and an ask
that the free devices can cover is granted at once (liveness: a dead holder, a stale record
or a deleted folder never keeps a free device). Real flocks, real guards, real files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from pytest_lossless.core.clock import FakeClock
from pytest_lossless.devices import Allocation, Allocator, CpuBackend
from pytest_lossless.errors import AllocationError, AllocationTimeout
from tests.faults import tiers

pytestmark = pytest.mark.deep

POOL = ("0", "1", "2", "3")


def die(allocation: Allocation) -> None:
    """What the kernel does when the holder's process dies: every descriptor closes (so its
    flocks and guards go); nothing else runs (records and runs files stay)."""
    for _, lock in allocation._locks:
        for fd in lock.filenos:
            os.close(fd)
        lock._fd = None
        if lock._guard is not None and lock._guard._sock is not None:
            lock._guard._sock.detach()
            lock._guard._sock = None
    allocation._locks.clear()
    allocation.released_at = "died"


class LockProtocol(RuleBasedStateMachine):
    held = Bundle("held")

    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="lock-machine-"))
        self.locks = self.base / "locks"
        self.live: dict[int, tuple[Allocation, frozenset[str], bool]] = {}
        self.count = 0

    def allocator(self) -> Allocator:
        return Allocator(
            [CpuBackend()],
            backend="cpu",
            pool=POOL,
            lock_dir=self.locks,
            timeout=0,
            clock=FakeClock(),
            host=socket.gethostname(),
            escalate_after=None,
        )

    def taken(self) -> set[str]:
        return {d for _, ids, _ in self.live.values() for d in ids}

    @rule(target=held, n=st.integers(1, len(POOL)))
    def acquire(self, n: int) -> int:
        free = len(POOL) - len(self.taken())
        self.count += 1
        try:
            allocation = self.allocator().acquire(n, f"t::s{self.count}")
        except AllocationTimeout:
            assert free < n, f"{n} of {free} free devices were refused"
            return -1
        ids = frozenset(allocation.ids)
        assert not ids & self.taken(), f"{sorted(ids & self.taken())} granted twice"
        self.live[self.count] = (allocation, ids, False)
        return self.count

    @rule(key=consumes(held))
    def release(self, key: int) -> None:
        if key not in self.live:
            return
        allocation, _, folder_went = self.live.pop(key)
        if folder_went:
            with pytest.raises(AllocationError, match="while held"):
                allocation.release()
        else:
            allocation.release()

    @rule(key=consumes(held))
    def kill(self, key: int) -> None:
        if key in self.live:
            die(self.live.pop(key)[0])

    @rule()
    def delete_folder(self) -> None:
        shutil.rmtree(self.locks, ignore_errors=True)
        self.live = {k: (a, ids, True) for k, (a, ids, _) in self.live.items()}

    @invariant()
    def held_locks_still_exclude(self) -> None:
        for allocation, _, _ in self.live.values():
            assert allocation._locks, "a live allocation lost its locks"

    def teardown(self) -> None:
        for allocation, _, _ in self.live.values():
            with contextlib.suppress(AllocationError):
                allocation.release()
        shutil.rmtree(self.base, ignore_errors=True)


# Examples: the profile tests/conftest.py registers (bounded in CI; PYTEST_LOSSLESS_FULL_HARNESS=1
# for the thorough run; 40 before the profiles, #24).
LockProtocol.TestCase.settings = settings(
    settings.get_profile(tiers.machine_profile()), stateful_step_count=25
)
TestLockProtocol = LockProtocol.TestCase
