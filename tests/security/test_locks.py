"""Security of the device lock folder and its holder records (issue #11, Build items 1 and 2).

A co-tenant on a shared host can plant anything in a shared lock folder (symlinks, FIFOs,
forged or malformed holder records) and can try to delete lock files while they are held.
Tests run as root here and in CI: a second account is a file owned by uid 12345, or a forked
child that drops to uid 12345; without root those tests skip, naming why.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.core.clock import SYSTEM_CLOCK, FakeClock
from pytest_lossless.devices import Allocator, CpuBackend, LockDir
from pytest_lossless.errors import AllocationError, AllocationTimeout

OTHER_UID = 12345
HOST = socket.gethostname()
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="simulating another account needs root (chown, setuid)"
)


def allocator(lock_dir: Path, pool: Sequence[str] = ("0",), **kwargs: Any) -> Allocator:
    kwargs.setdefault("clock", FakeClock())
    kwargs.setdefault("timeout", 5.0)
    kwargs.setdefault("host", HOST)
    return Allocator([CpuBackend()], backend="cpu", pool=pool, lock_dir=lock_dir, **kwargs)


def within(seconds: float, fn: Callable[[], Any], unblock: Callable[[], None]) -> Any:
    """``fn()``'s result (or its exception) if it ends within ``seconds``; else ``unblock()``
    (so the thread ends) and fail: the code under test hung."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        unblock()
        thread.join(5)
        pytest.fail(f"hung for more than {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def open_fifo_writer(path: Path) -> Callable[[], None]:
    """What ends a reader blocked on the FIFO at ``path``: a writer that opens and closes it."""

    def unblock() -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.close(fd)

    return unblock


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# ------------------------------------------------------------- symlinks and modes


def test_a_planted_lock_symlink_leaves_its_target_untouched(tmp_path: Path) -> None:
    """``cpu-slot-0.lock -> ~/.bashrc``: the target keeps its mode and content; the device is
    refused, naming the link, and the other devices still serve."""
    victim = tmp_path / "bashrc"
    victim.write_text("export SECRET=1\n")
    victim.chmod(0o600)
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    (locks / "cpu-slot-0.lock").symlink_to(victim)
    clock = FakeClock()
    one = allocator(locks, pool=("0", "1"), clock=clock).acquire(1, "t::one")
    assert one.ids == ("1",)
    with pytest.raises(AllocationError, match=r"cpu-slot-0\.lock.*symbolic link") as info:
        allocator(locks, pool=("0", "1"), clock=clock).acquire(2, "t::two")
    assert str(victim) in str(info.value)
    assert clock.sleeps == [], "an unusable lock file is named at once, never waited on"
    one.release()
    assert mode_of(victim) == 0o600
    assert victim.read_text() == "export SECRET=1\n"
    assert (locks / "cpu-slot-0.lock").is_symlink()


def test_a_lock_folder_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "locks"
    link.symlink_to(target)
    with pytest.raises(AllocationError, match=r"symbolic link") as info:
        allocator(link).acquire(1, "t::x")
    assert str(link) in str(info.value)
    assert "--lossless-lock-dir" in str(info.value)
    assert info.value.lock_dir == str(link)
    assert mode_of(target) == 0o700
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757], ids=oct)
def test_a_lock_folder_writable_by_others_without_the_sticky_bit_is_refused(
    tmp_path: Path, mode: int
) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    os.chmod(locks, mode)
    with pytest.raises(AllocationError, match=r"writable by .* without the sticky bit") as info:
        allocator(locks).acquire(1, "t::x")
    assert str(locks) in str(info.value)
    assert mode_of(locks) == mode, "a refused folder is left as it is"


@pytest.mark.parametrize("mode", [0o1777, 0o3770, 0o755, 0o700], ids=oct)
def test_sticky_group_shared_and_private_lock_folders_are_accepted(
    tmp_path: Path, mode: int
) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    os.chmod(locks, mode)
    allocator(locks).acquire(1, "t::x").release()
    assert mode_of(locks) == mode


def test_a_lock_folder_under_a_parent_writable_by_others_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "open"
    parent.mkdir()
    os.chmod(parent, 0o777)
    with pytest.raises(AllocationError, match=r"open.*writable by .* without the sticky bit"):
        allocator(parent / "locks").acquire(1, "t::x")
    assert not (parent / "locks").exists()


@needs_root
def test_a_lock_folder_owned_by_another_account_is_refused(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    os.chown(locks, OTHER_UID, OTHER_UID)
    with pytest.raises(AllocationError, match=rf"owned by uid {OTHER_UID}") as info:
        allocator(locks).acquire(1, "t::x")
    assert str(locks) in str(info.value)


def test_the_folder_the_plugin_creates_is_sticky_and_files_keep_their_modes(
    tmp_path: Path,
) -> None:
    """Mode 1777 like /tmp, lock files and records 0644, whatever the umask."""
    locks = tmp_path / "new" / "locks"
    old = os.umask(0o077)
    try:
        allocation = allocator(locks, pool=("0", "1")).acquire(2, "t::x")
    finally:
        os.umask(old)
    assert mode_of(locks) == 0o1777
    assert mode_of(locks / "cpu-slot-0.lock") == 0o644
    assert mode_of(locks / "cpu-slot-0.holder.json") == 0o644
    assert mode_of(locks / "gate-cpu.lock") == 0o644
    allocation.release()


def test_every_open_is_nofollow_nonblock_cloexec_and_modes_are_set_only_on_new_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No chmod through a path; fchmod only on a descriptor of a file just made."""
    real_open, real_fchmod, real_mkdir = os.open, os.fchmod, os.mkdir
    opened: dict[int, tuple[str, int]] = {}
    made: set[str] = set()
    problems: list[str] = []

    def spy_open(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        fd = real_open(path, flags, mode, **kw)
        opened[fd] = (os.fspath(path), flags)
        wanted = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        if flags & wanted != wanted:
            problems.append(f"open({path}, {flags:#o}) lacks O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC")
        return fd

    def spy_mkdir(path: Any, mode: int = 0o777, **kw: Any) -> None:
        real_mkdir(path, mode, **kw)
        made.add(os.fspath(path))

    def spy_fchmod(fd: int, mode: int) -> None:
        path, flags = opened.get(fd, ("?", 0))
        created = flags & (os.O_CREAT | os.O_EXCL) == os.O_CREAT | os.O_EXCL
        if not (created or path in made):
            problems.append(f"fchmod({path}) on a file it did not just create")
        real_fchmod(fd, mode)

    def no_chmod(*args: Any, **kwargs: Any) -> None:
        problems.append(f"chmod through a path: {args}")

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "mkdir", spy_mkdir)
    monkeypatch.setattr(os, "fchmod", spy_fchmod)
    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(os, "lchmod", no_chmod, raising=False)
    monkeypatch.setattr(Path, "chmod", no_chmod)
    locks = tmp_path / "locks"
    first = allocator(locks, pool=("0", "1"), timeout=0).acquire(1, "t::first")
    second = allocator(locks, pool=("0", "1"), timeout=0).acquire(1, "t::second")
    with pytest.raises(AllocationTimeout):
        allocator(locks, pool=("0", "1"), timeout=0).acquire(1, "t::third")
    first.release()
    second.release()
    allocator(locks, pool=("0", "1"), timeout=0).acquire(2, "t::again").release()
    monkeypatch.undo()
    assert opened, "the spy saw no open: it checked nothing"
    assert problems == []


# ------------------------------------------------------------------ FIFOs


def test_a_fifo_in_place_of_a_lock_file_is_named_not_waited_on(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    fifo = locks / "cpu-slot-0.lock"
    os.mkfifo(fifo)
    clock = FakeClock()

    def acquire() -> Any:
        return allocator(locks, clock=clock, timeout=3).acquire(1, "t::fifo")

    with pytest.raises(AllocationError, match=r"cpu-slot-0\.lock.*FIFO.*not a regular file"):
        within(5, acquire, open_fifo_writer(fifo))
    assert clock.sleeps == []


def test_a_fifo_gate_lock_is_named_not_waited_on(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    fifo = locks / "gate-cpu.lock"
    os.mkfifo(fifo)
    with pytest.raises(AllocationError, match=r"gate-cpu\.lock.*FIFO"):
        within(5, lambda: allocator(locks).acquire(1, "t::gate"), open_fifo_writer(fifo))


def test_a_fifo_in_place_of_a_holder_record_is_ignored_and_named(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    fifo = locks / "cpu-slot-0.holder.json"
    os.mkfifo(fifo)
    unblock = open_fifo_writer(fifo)
    # A free device: the record is read (was the lock file replaced under a live holder?).
    free = within(5, lambda: allocator(locks).acquire(1, "t::free"), unblock)
    assert free.ids == ("0",)
    free.release()
    os.mkfifo(fifo)  # the grant replaced it with a real record; plant it again
    held = LockDir(locks).lock("cpu-slot-0")
    assert held.try_acquire()
    try:
        with pytest.raises(AllocationTimeout, match=r"holder\.json is a FIFO.*ignored"):
            within(5, lambda: allocator(locks, timeout=0.5).acquire(1, "t::waits"), unblock)
    finally:
        held.release()


# ------------------------------------------------------------ forged and malformed records


def forged(**fields: Any) -> dict[str, Any]:
    record = {"pid": 1, "host": HOST, "test": "forged::record", "since": "2000-01-01T00:00:00Z"}
    return {**record, "lock_inode": 1, "locks": ["cpu-slot-0"], **fields}


@pytest.mark.parametrize(
    "fields",
    [
        {},  # pid 1: alive, but it holds no lock
        {"pid": os.getpid()},  # alive, this very host, still holding nothing
        {"pid": os.getpid(), "pid_start": None, "lock_inode": 2},
        {"pid": 2**22 + 7},  # no such process
    ],
    ids=["init", "self", "self-no-start", "no-process"],
)
def test_a_forged_record_never_delays_a_free_device(tmp_path: Path, fields: dict[str, Any]) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    (locks / "cpu-slot-0.holder.json").write_text(json.dumps(forged(**fields)))
    clock = FakeClock()
    allocation = allocator(locks, clock=clock, timeout=30).acquire(1, "t::free")
    assert clock.sleeps == [], "a forged record delayed a free device"
    assert allocation.waited_seconds == 0
    allocation.release()


def test_a_forged_record_delays_a_free_device_by_no_more_than_a_poll(tmp_path: Path) -> None:
    """The same, on the real clock: the measurement in the report."""
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    (locks / "cpu-slot-0.holder.json").write_text(json.dumps(forged()))
    chosen = allocator(locks, clock=SYSTEM_CLOCK, timeout=5)
    started = time.monotonic()
    chosen.acquire(1, "t::free").release()
    assert time.monotonic() - started < chosen.poll_cap


def test_a_held_lock_names_its_real_holder_not_a_forged_record(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    held = LockDir(locks).lock("cpu-slot-0")
    assert held.try_acquire()
    try:
        (locks / "cpu-slot-0.holder.json").write_text(json.dumps(forged(test="fake::holder")))
        with pytest.raises(AllocationTimeout) as info:
            allocator(locks, timeout=0).acquire(1, "t::waits")
        message = str(info.value)
        assert f"pid {os.getpid()}" in message, "the real holder, from /proc/locks"
        assert "fake::holder" in message
        assert "ignored" in message
    finally:
        held.release()


SPARSE = 4 << 30


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("[]", "not a JSON object"),
        ('"text"', "not a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "over the 65536 bytes"),  # as found: 200 kB
        ("[" * 30_000 + "]" * 30_000, "nested deeper"),  # deep enough, and within the bound
        ('{"a":' * 10_000 + "1" + "}" * 10_000, "nested deeper"),
        ('{"pid": 1,', "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (SPARSE, "over the 65536 bytes"),
    ],
    ids=[
        "list",
        "string",
        "deep-100000",
        "deep-list",
        "deep-object",
        "truncated",
        "binary",
        "sparse-4GiB",
    ],
)
def test_a_malformed_record_is_ignored_and_named(
    tmp_path: Path, content: str | bytes | int, why: str
) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o755)
    record = locks / "cpu-slot-0.holder.json"
    if isinstance(content, int):
        with record.open("wb") as sparse:
            sparse.truncate(content)
    elif isinstance(content, bytes):
        record.write_bytes(content)
    else:
        record.write_text(content)
    tracemalloc.start()
    try:
        clock = FakeClock()
        allocation = allocator(locks, clock=clock).acquire(1, "t::free")  # read, while free
        assert clock.sleeps == []
        allocation.release()
        if isinstance(content, int):
            with record.open("wb") as sparse:  # the release removed it; plant it again
                sparse.truncate(content)
        else:
            record.write_bytes(content if isinstance(content, bytes) else content.encode())
        held = LockDir(locks).lock("cpu-slot-0")
        assert held.try_acquire()
        try:
            text = LockDir(locks).describe_holder("cpu-slot-0", HOST)  # read, while held
        finally:
            held.release()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "cpu-slot-0.holder.json" in text
    assert "ignored" in text
    assert any(part in text for part in why.split("|")), text
    assert peak < 8 << 20, f"reading a bad record took {peak} bytes"


# ------------------------------------------------------- lock files deleted under a holder


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_lock_file_deleted_or_replaced_under_a_holder_is_named(tmp_path: Path, how: str) -> None:
    locks = tmp_path / "locks"
    allocation = allocator(locks, pool=("0", "1")).acquire(2, "t::holds")
    assert allocation.check_locks() == []
    lock = locks / "cpu-slot-1.lock"
    inode = lock.stat().st_ino
    lock.unlink()
    if how == "replaced":
        lock.write_text("")
    problems = allocation.check_locks()
    assert len(problems) == 1
    assert str(lock) in problems[0]
    assert how in problems[0]
    assert str(inode) in problems[0]
    with pytest.raises(AllocationError, match=rf"cpu-slot-1\.lock was {how}") as info:
        allocation.release()
    assert "another job may have used" in str(info.value)
    assert allocation.released
    assert allocation.to_dict()["lock_problems"] == problems
    # Every lock was let go even so: both devices are free again.
    allocator(locks, pool=("0", "1")).acquire(2, "t::next").release()


@needs_root
def test_another_account_cannot_delete_a_held_lock_file(shared_tmp: Path) -> None:
    """In the folder the plugin creates (sticky), uid 12345 can neither delete nor replace a
    held lock file or its record, so a second job cannot take the same device."""
    locks = shared_tmp / "locks"
    held = allocator(locks, pool=("0",)).acquire(1, "t::holder")
    lock, record = locks / "cpu-slot-0.lock", locks / "cpu-slot-0.holder.json"
    pid = os.fork()
    if pid == 0:  # the other account: plain syscalls only, then _exit
        code = 0
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            for victim in (lock, record):
                try:
                    os.unlink(victim)
                    code |= 1
                except PermissionError:
                    pass
            planted = locks / "planted"
            with open(planted, "w") as out:
                out.write("{}")
            try:
                os.rename(planted, record)
                code |= 2
            except PermissionError:
                os.unlink(planted)
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    assert os.WEXITSTATUS(status) == 0, {1: "deleted", 2: "replaced", 4: "crashed"}.get(
        os.WEXITSTATUS(status), "deleted and replaced"
    )
    assert lock.exists()
    assert json.loads(record.read_text())["test"] == "t::holder"
    with pytest.raises(AllocationTimeout, match="t::holder"):
        allocator(locks, pool=("0",), timeout=0).acquire(1, "t::second")
    held.release()


# ------------------------------------------- one default folder per host (issue #23, Devices)


@pytest.mark.parametrize("env_name", ["TMPDIR", "TEMP", "TMP"])
def test_the_default_lock_folder_is_one_per_host_whatever_the_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env_name: str
) -> None:
    """Two CI jobs with their own temp folders must still see each other's locks."""
    from pytest_lossless.settings import resolve

    seen = set()
    for job in ("job-1", "job-2"):
        folder = tmp_path / job
        folder.mkdir()
        monkeypatch.setenv(env_name, str(folder))
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads the variable anew
        chosen = resolve({}, {}, {env_name: str(folder)}, rootdir=tmp_path).lock_dir
        assert tmp_path not in chosen.parents, chosen
        seen.add(chosen)
    assert len(seen) == 1, seen
    assert seen == {Path("/var/tmp/pytest-lossless-locks")}


def test_an_explicit_lock_folder_still_wins_over_the_host_default(tmp_path: Path) -> None:
    from pytest_lossless.settings import resolve

    env = {"PYTEST_LOSSLESS_LOCK_DIR": str(tmp_path / "env")}
    assert resolve({}, {}, env, rootdir=tmp_path).lock_dir == tmp_path / "env"
    ini = {"lock_dir": str(tmp_path / "ini")}
    assert resolve({}, ini, {}, rootdir=tmp_path).lock_dir == tmp_path / "ini"
    cli = {"lock_dir": str(tmp_path / "cli")}
    assert resolve(cli, ini, env, rootdir=tmp_path).lock_dir == tmp_path / "cli"


def test_the_default_lock_folder_skips_a_missing_or_linked_parent(tmp_path: Path) -> None:
    from pytest_lossless.settings import default_lock_dir

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    chosen = default_lock_dir((str(tmp_path / "missing"), str(tmp_path / "link"), str(real)))
    assert chosen == real / "pytest-lossless-locks"


# --------------------------------- a lock folder deleted or replaced while held (issue #23)


@pytest.mark.parametrize("how", ["deleted", "replaced", "files deleted"])
def test_a_lock_folder_deleted_while_held_does_not_let_a_second_session_in(
    tmp_path: Path, how: str
) -> None:
    """A tmp cleaner removes the folder (or its files) while session A holds devices: session
    B makes a new folder and new lock files, but must not get the same devices."""
    import shutil

    locks = tmp_path / "locks"
    held = allocator(locks, pool=("0", "1")).acquire(2, "t::holder")
    if how == "deleted":
        shutil.rmtree(locks)
    elif how == "replaced":
        locks.rename(tmp_path / "aside")
        locks.mkdir()
    else:
        for path in locks.iterdir():
            path.unlink()
    with pytest.raises(AllocationTimeout) as info:
        allocator(locks, pool=("0", "1"), timeout=0).acquire(1, "t::second")
    message = str(info.value)
    assert "deleted or replaced while held" in message, message
    assert f"pid {os.getpid()}" in message, message
    # The holder still learns at release that its lock files went.
    with pytest.raises(AllocationError, match="while held"):
        held.release()
    allocator(locks, pool=("0", "1")).acquire(2, "t::after").release()


# ----------------------------------------------- a folder flooded with files (issue #23)


def test_a_flooded_lock_folder_fails_closed_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the scan limit a runs record may be unread: the device is not granted, and the
    error names the flood (a co-tenant can fill a sticky folder; only they can empty it)."""
    from pytest_lossless.devices import runs

    monkeypatch.setattr(runs, "SCAN_LIMIT", 50)
    locks = tmp_path / "locks"
    LockDir(locks).ensure()
    for n in range(60):
        (locks / f"aaa-flood-{n:03d}").write_text("")
    with pytest.raises(AllocationError) as info:
        allocator(locks, pool=("0",), timeout=0).acquire(1, "t::flooded")
    message = str(info.value)
    assert "holds over 50 entries" in message, message
    assert "no device is granted" in message, message
    assert str(locks) in message


# ------------------------------------------------------ a full lock folder (issue #23)


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "full"
    mount.mkdir()
    import subprocess

    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace')}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> None:
    with open(folder / "filler", "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_full_lock_folder_gets_advice_about_space_not_a_missing_file(tiny_tmpfs: Path) -> None:
    locks = tiny_tmpfs / "locks"
    LockDir(locks).ensure()
    fill(tiny_tmpfs)
    with pytest.raises(AllocationError) as info:
        allocator(locks, pool=("0",), timeout=0).acquire(1, "t::full")
    message = str(info.value)
    assert "full" in message, message
    assert "Remove it" not in message, message
    assert "free space" in message, message
