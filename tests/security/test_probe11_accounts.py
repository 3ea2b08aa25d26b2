"""Co-tenancy across accounts on one host (probe 11, #20): what one account's sessions leave in
the shared lock folder must never hide the real holder of a device from another's.

Found: a holder record left by a session that died (SIGKILL) stays in a sticky lock folder
(only its owner or root can remove it, and the next holder, of another account, cannot replace
it), so every later busy message said "record of pid N is stale: that process is gone" and
named nobody, although ``/proc/locks`` knew the real holder. A co-tenant could plant such a
record on purpose (a dead pid) to hide every holder. The message now names the real holder
(pid and account) and who can remove the stale record.

The unit test runs everywhere; the one with real other accounts (forked children that drop to
other uids) needs root, and skips saying so otherwise.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from pytest_lossless.core.clock import FakeClock
from pytest_lossless.devices import Allocator, CpuBackend, LockDir
from pytest_lossless.errors import AllocationTimeout

HOST = socket.gethostname()
ACCOUNT_A, ACCOUNT_B = 23451, 23452
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="running sessions as two other accounts needs root (setuid)"
)


def allocator(locks: Path, timeout: float = 0.0) -> Allocator:
    return Allocator(
        [CpuBackend()],
        backend="cpu",
        pool=("0",),
        lock_dir=locks,
        clock=FakeClock(),
        timeout=timeout,
        host=HOST,
    )


def test_a_stale_record_of_a_dead_pid_does_not_hide_the_real_holder(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    held = LockDir(locks).lock("cpu-slot-0")
    assert held.try_acquire()
    try:
        dead = {"pid": 2**22 + 7, "pid_start": 1, "host": HOST, "test": "old::dead"}
        (locks / "cpu-slot-0.holder.json").write_text(json.dumps({**dead, "since": "then"}))
        with pytest.raises(AllocationTimeout) as info:
            allocator(locks).acquire(1, "t::waits")
        message = str(info.value)
        assert "stale" in message
        assert f"pid {os.getpid()}" in message, f"the real holder is not named: {message}"
        assert f"uid {os.geteuid()}" in message, "the holder's account is named"
    finally:
        held.release()


def as_account(uid: int, body: object) -> int:
    """Fork a child that becomes ``uid`` and runs ``body()``; its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            assert callable(body)
            body()
            code = 0
        finally:
            os._exit(code)
    return pid


@needs_root
def test_another_accounts_dead_session_does_not_hide_the_holder(shared_tmp: Path) -> None:
    """Account A's session dies holding device 0 (its record stays, A's in a sticky folder);
    account B takes the device (its own record cannot replace A's); a third session waiting
    for it is told B's pid and account, not only that A's record is stale."""
    locks = shared_tmp / "locks"
    LockDir(locks).ensure()  # root's, mode 1777: as the default folder on a host

    def session_a() -> None:
        allocator(locks).acquire(1, "a::dies")
        os._exit(0)  # as SIGKILL: the flock goes with the process, the record stays

    child = as_account(ACCOUNT_A, session_a)
    assert os.waitpid(child, 0)[1] == 0
    assert os.stat(locks / "cpu-slot-0.holder.json").st_uid == ACCOUNT_A
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()

    def session_b() -> None:
        os.close(ready_r)
        os.close(stop_w)
        allocation = allocator(locks, timeout=10).acquire(1, "b::holds")
        os.write(ready_w, b"1")
        os.read(stop_r, 1)
        allocation.release()

    holder = as_account(ACCOUNT_B, session_b)
    os.close(ready_w)
    os.close(stop_r)
    try:
        assert os.read(ready_r, 1) == b"1", "account B could not take the free device"
        with pytest.raises(AllocationTimeout) as info:
            allocator(locks).acquire(1, "c::waits")
        message = str(info.value)
        assert f"pid {holder} (uid {ACCOUNT_B})" in message, message
        assert f"uid {ACCOUNT_A}" in message, "who can remove the stale record"
    finally:
        os.write(stop_w, b"1")
        os.close(stop_w)
        os.close(ready_r)
        os.waitpid(holder, 0)


@needs_root
def test_a_lock_folder_another_account_made_first_names_who_can_fix_it(
    shared_tmp: Path,
) -> None:
    """On a fresh host the first account to run makes the lock folder (mode 1777, its own).
    Every other account is refused (its owner could delete their lock files), and the advice
    must be something they can act on: not ``chmod +t`` (it is sticky already, and not theirs
    to change) but its owner or root, named."""
    parent = shared_tmp / "var-tmp"
    parent.mkdir()
    os.chmod(parent, 0o1777)
    locks = parent / "pytest-lossless-locks"

    def first_account() -> None:
        allocator(locks).acquire(1, "a::first").release()

    child = as_account(ACCOUNT_A, first_account)
    assert os.waitpid(child, 0)[1] == 0
    assert os.stat(locks).st_uid == ACCOUNT_A
    read_r, read_w = os.pipe()

    def second_account() -> None:
        os.close(read_r)
        try:
            allocator(locks).acquire(1, "b::second").release()
            os.write(read_w, b"GRANTED")
        except Exception as exc:
            os.write(read_w, str(exc).encode())

    child = as_account(ACCOUNT_B, second_account)
    os.close(read_w)
    message = b""
    while chunk := os.read(read_r, 65536):
        message += chunk
    os.close(read_r)
    os.waitpid(child, 0)
    text = message.decode()
    assert text != "GRANTED"
    assert f"owned by uid {ACCOUNT_A}" in text
    assert "chmod +t" not in text, f"advice its reader cannot follow: {text}"
    assert f"uid {ACCOUNT_A}" in text.split(":", 2)[-1]
    assert f"chown root:root {locks}" in text


def test_a_planted_lock_link_names_the_account_that_planted_it(tmp_path: Path) -> None:
    """Only the link's owner (or root) can remove it from a sticky folder: name them."""
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (locks / "cpu-slot-0.lock").symlink_to(victim)
    with pytest.raises(Exception, match="symbolic link") as info:
        allocator(locks).acquire(1, "t::x")
    assert f"planted by {_me()}" in str(info.value)
    assert victim.read_text() == "precious"


def _me() -> str:
    import pwd

    try:
        return f"user {pwd.getpwuid(os.geteuid()).pw_name} (uid {os.geteuid()})"
    except KeyError:
        return f"uid {os.geteuid()}"
