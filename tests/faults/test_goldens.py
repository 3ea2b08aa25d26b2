"""Faults of golden updates (issue #12: D3, concurrent updates): real processes, real signals.

A golden folder is replaced whole, with no moment at which it is missing; whatever a killed
writer left beside it (a staging folder, a retired golden, a link) is recovered by the next run
that touches the test and reported in one line; two sessions updating one folder never overwrite
each other silently: the later commit reports CONFLICT and writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_lossless.errors import GoldenMissing
from pytest_lossless.goldens import swap as replace
from pytest_lossless.goldens.folder import GoldenConflict, GoldenFolder, read_manifest
from pytest_lossless.goldens.swap import GoldenUpdateError
from pytest_lossless.kinds.registry import KindRegistry
from pytest_lossless.report import Row, events_from, update_lines, verdict_table

# ------------------------------------------------------------------ helpers


def _folder(root: Path, name: str = "test_x", **kwargs: object) -> GoldenFolder:
    return GoldenFolder(
        root / "goldens",
        "test_mod",
        name,
        f"test_mod.py::{name}",
        KindRegistry(),
        digest_above=1 << 20,
        rootdir=root,
        **kwargs,  # type: ignore[arg-type]
    )


def _commit(root: Path, value: bytes, name: str = "test_x") -> GoldenFolder:
    folder = _folder(root, name)
    folder.begin_update()
    source = root / f"src-{value.hex()[:16]}.bin"
    source.write_bytes(value)
    folder.stage("v.bin", source, None, {})
    folder.commit()
    return folder


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith("."))


def _stored(folder: Path) -> bytes:
    return (folder / "v.bin").read_bytes()


# ------------------------------------------------------------------ no window, no residue


def test_the_live_folder_never_goes_missing_during_a_replacement(tmp_path, monkeypatch):
    """Each rename is slowed down so that a window between two renames would be seen: a reader
    polling the live folder must find a whole golden at every moment."""
    folder = _commit(tmp_path, b"one")
    real_rename, real_replace = os.rename, os.replace

    def slow(real):
        def call(*args, **kwargs):
            result = real(*args, **kwargs)
            time.sleep(0.05)
            return result

        return call

    monkeypatch.setattr(os, "rename", slow(real_rename))
    monkeypatch.setattr(os, "replace", slow(real_replace))
    missing: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if not (folder.path / "manifest.json").is_file():
                missing.append(time.monotonic())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for round_ in range(3):
            _commit(tmp_path, f"value {round_}".encode())
    finally:
        stop.set()
        watcher.join()
    assert missing == [], "the golden folder was missing during a replacement"
    assert _stored(folder.path) == b"value 2"


def test_an_update_leaves_nothing_beside_the_folder(tmp_path):
    """No lock file, staging or retired folder stays among the goldens once a commit is done."""
    folder = _commit(tmp_path, b"one")
    _commit(tmp_path, b"two")
    assert [p.name for p in folder.path.parent.iterdir()] == ["test_x"]


def test_the_fallback_without_exchange_also_leaves_a_whole_folder(tmp_path, monkeypatch):
    """Where the kernel or file system has no RENAME_EXCHANGE, two renames are used."""
    monkeypatch.setattr(replace, "exchange", lambda a, b: False)
    folder = _commit(tmp_path, b"one")
    _commit(tmp_path, b"two")
    assert _stored(folder.path) == b"two"
    assert [p.name for p in folder.path.parent.iterdir()] == ["test_x"]


def test_a_failed_second_rename_puts_the_old_golden_back(tmp_path, monkeypatch):
    folder = _commit(tmp_path, b"one")
    monkeypatch.setattr(replace, "exchange", lambda a, b: False)
    real = os.rename
    calls: list[str] = []

    def failing(src, dst, *args, **kwargs):
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises((OSError, GoldenUpdateError)):
        _commit(tmp_path, b"two")
    monkeypatch.setattr(os, "rename", real)
    assert _stored(folder.path) == b"one"
    assert _hidden(folder.path) == []


# ------------------------------------------------------------------ recovery of strays


def test_a_stale_staging_folder_of_a_dead_owner_is_removed_and_reported(tmp_path):
    """D3: a partial copy (here 4 MB) left by a killed update survives no later run."""
    folder = _commit(tmp_path, b"one")
    pid = _dead_pid()
    # As the current layout leaves it: a work folder with its owner marker and a partial copy.
    work = folder.path.parent / f".test_x.tmp-{pid}-0123abcd"
    (work / "new").mkdir(parents=True)
    record = replace.owner_record(pid)
    (work / replace.OWNER).write_text(json.dumps(record.to_json()))
    (work / "new" / "partial.bin").write_bytes(b"\0" * (4 << 20))
    # As earlier versions left it: a flat staging folder, its owner only in its name.
    legacy = folder.path.parent / f".test_x.tmp-{pid}-deadbeef"
    legacy.mkdir()
    (legacy / "half.bin").write_bytes(b"half")

    events = _folder(tmp_path).recover()

    assert sorted(e.action for e in events) == ["cleaned", "cleaned"]
    assert all(str(pid) in e.detail for e in events), [e.detail for e in events]
    assert _hidden(folder.path) == []
    assert _stored(folder.path) == b"one"
    lines = update_lines(events)
    assert lines[0] == "cleaned: 2"
    assert len(lines) == 3, "one line per recovery"


def test_a_retired_folder_whose_live_folder_is_missing_is_restored(tmp_path):
    """D3: a kill between the two renames of an earlier version: the golden is put back."""
    folder = _commit(tmp_path, b"one")
    pid = _dead_pid()
    retired = folder.path.parent / f".test_x.old-{pid}-0badf00d"
    folder.path.rename(retired)

    events = _folder(tmp_path).recover()

    assert [e.action for e in events] == ["restored"]
    assert _stored(folder.path) == b"one"
    assert _hidden(folder.path) == []
    assert _folder(tmp_path).compare("v.bin", tmp_path / f"src-{b'one'.hex()}.bin", None).passed


def test_a_retired_link_is_removed_and_its_target_kept(tmp_path):
    """D3: a symlinked test folder left a retired link behind; it is unlinked, never followed."""
    folder = _commit(tmp_path, b"one")
    shared = tmp_path / "goldens" / "shared"
    shared.mkdir()
    (shared / "keep.txt").write_text("kept\n")
    pid = _dead_pid()
    link = folder.path.parent / f".test_x.old-{pid}-feedf00d"
    os.symlink(os.path.relpath(shared, link.parent), link)

    events = _folder(tmp_path).recover()

    assert [e.action for e in events] == ["cleaned"]
    assert not os.path.lexists(link)
    assert (shared / "keep.txt").read_text() == "kept\n"
    assert _stored(folder.path) == b"one"


def test_a_stray_whose_owner_still_runs_is_kept(tmp_path):
    folder = _commit(tmp_path, b"one")
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 10
        while replace.owner_record(owner.pid).start is None and time.monotonic() < deadline:
            time.sleep(0.01)
        work = folder.path.parent / f".test_x.tmp-{owner.pid}-00000001"
        (work / "new").mkdir(parents=True)
        (work / replace.OWNER).write_text(json.dumps(replace.owner_record(owner.pid).to_json()))
        events = _folder(tmp_path).recover()
        assert [e.action for e in events] == ["kept"]
        assert "still runs" in events[0].detail
        assert work.is_dir()
    finally:
        owner.kill()
        owner.wait()
    events = _folder(tmp_path).recover()
    assert [e.action for e in events] == ["cleaned"]
    assert not work.exists()


def test_a_marker_from_another_host_is_not_trusted_to_be_dead(tmp_path):
    folder = _commit(tmp_path, b"one")
    work = folder.path.parent / f".test_x.tmp-{_dead_pid()}-00000002"
    work.mkdir()
    record = replace.owner_record(os.getpid()).to_json() | {"host": "not-" + socket.gethostname()}
    (work / replace.OWNER).write_text(json.dumps(record))
    events = _folder(tmp_path).recover()
    assert [e.action for e in events] == ["kept"]
    assert "host" in events[0].detail
    assert work.is_dir()


def test_names_of_other_tests_are_left_alone(tmp_path):
    """``.test_x.tmp-1.tmp-...`` belongs to the test named ``test_x.tmp-1``, not ``test_x``."""
    folder = _commit(tmp_path, b"one")
    other = folder.path.parent / f".test_x.tmp-1.tmp-{_dead_pid()}-00000003"
    other.mkdir()
    assert _folder(tmp_path).recover() == []
    assert other.is_dir()


def test_recovery_runs_before_an_update_and_it_is_reported(tmp_path):
    folder = _commit(tmp_path, b"one")
    retired = folder.path.parent / f".test_x.old-{_dead_pid()}-0badf00d"
    folder.path.rename(retired)
    again = _folder(tmp_path)
    events = again.begin_update()
    assert [e.action for e in events] == ["restored"]
    source = tmp_path / "two.bin"
    source.write_bytes(b"two")
    again.stage("v.bin", source, None, {})
    assert [e.action for e in again.commit()] == ["changed"], "compared with the restored one"


# ------------------------------------------------------------------ the folder lock


def test_a_planted_lock_link_is_refused_and_its_target_untouched(tmp_path):
    folder = _commit(tmp_path, b"one")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    lock = folder.path.parent / ".test_x.lock"
    os.symlink(victim, lock)
    with pytest.raises(GoldenUpdateError, match=r"\.test_x\.lock.*symbolic link"):
        _commit(tmp_path, b"two")
    assert victim.read_text() == "precious\n"
    assert _stored(folder.path) == b"one"


def test_a_planted_lock_fifo_is_an_error_not_a_hang(tmp_path):
    folder = _commit(tmp_path, b"one")
    os.mkfifo(folder.path.parent / ".test_x.lock")
    started = time.monotonic()
    with pytest.raises(GoldenUpdateError, match="not a regular file"):
        _commit(tmp_path, b"two")
    assert time.monotonic() - started < 5


def test_a_lock_held_too_long_is_named(tmp_path):
    folder = _commit(tmp_path, b"one")
    holder = replace.FolderLock(folder.path.parent / ".test_x.lock", timeout=1)
    assert holder.acquire()
    try:
        late = _folder(tmp_path, lock_timeout=0.3)
        with pytest.raises(GoldenUpdateError, match=r"\.test_x\.lock.*0\.3 s"):
            late.begin_update()
    finally:
        holder.release()


def test_a_module_folder_that_is_a_file_is_a_clear_error(tmp_path):
    """Not a NotADirectoryError traceback at teardown."""
    (tmp_path / "goldens").mkdir()
    (tmp_path / "goldens" / "test_mod").write_text("not a folder\n")
    folder = _folder(tmp_path)
    with pytest.raises(GoldenUpdateError, match=r"test_mod.*not a folder"):
        folder.begin_update()


# ------------------------------------------------------------------ conflicts


def test_the_later_commit_of_two_updates_reports_conflict(tmp_path):
    _commit(tmp_path, b"zero")
    early, late = _folder(tmp_path), _folder(tmp_path)
    early.begin_update()
    late.begin_update()
    for folder, value in ((early, b"early"), (late, b"late")):
        source = tmp_path / f"{value.decode()}.bin"
        source.write_bytes(value)
        folder.stage("v.bin", source, None, {})
    assert [e.action for e in early.commit()] == ["changed"]
    with pytest.raises(GoldenConflict) as info:
        late.commit()
    assert str(early.path) in str(info.value)
    assert "another session" in str(info.value)
    assert [e.action for e in info.value.events] == ["conflict"]
    assert _stored(early.path) == b"early", "the later commit overwrote the earlier one"
    assert _hidden(early.path) == []


def test_a_folder_created_by_another_session_meanwhile_is_a_conflict(tmp_path):
    early, late = _folder(tmp_path), _folder(tmp_path)
    early.begin_update()
    late.begin_update()
    for folder, value in ((early, b"early"), (late, b"late")):
        source = tmp_path / f"{value.decode()}.bin"
        source.write_bytes(value)
        folder.stage("v.bin", source, None, {})
    assert [e.action for e in early.commit()] == ["created"]
    with pytest.raises(GoldenConflict, match="absent when"):
        late.commit()
    assert _stored(early.path) == b"early"


def test_conflict_restored_and_cleaned_are_reported():
    events = [
        {
            "test": "t",
            "folder": "goldens/m/t",
            "name": "v.bin",
            "action": "conflict",
            "detail": "x",
        },
        {"test": "t", "folder": "goldens/m/t", "name": "", "action": "restored", "detail": "y"},
        {"test": "t", "folder": "goldens/m/u", "name": "", "action": "cleaned", "detail": "z"},
    ]
    lines = update_lines(events_from(events))
    assert lines == [
        "conflict: 1",
        "  goldens/m/t/v.bin (x)",
        "restored: 1",
        "  goldens/m/t (y)",
        "cleaned: 1",
        "  goldens/m/u (z)",
    ]
    table = verdict_table(
        [Row("t.py::a", "v.bin", "bytes", "PASS"), Row("t.py::b", "v.bin", "bytes", "CONFLICT")]
    )
    assert table[2].startswith("CONFLICT"), "a conflict is listed with the failures"


# ------------------------------------------------------------------ real processes, real signals

TEST_X = """
import os
import pytest

@pytest.mark.lossless
def test_x(golden):
    value = os.environ["GOLDEN_VALUE"].encode()
    golden.check("v.bin", value * 100)
    golden.check("w.bin", b"second artifact: " + value)
"""


def _pytest(
    root: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != replace.FAULT_ENV}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _project(tmp_path: Path, source: str = TEST_X, name: str = "test_x") -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / f"{name}.py").write_text(source)
    return root


def _value(folder: Path) -> bytes:
    """The value a whole golden folder holds; fails on a half-written one."""
    manifest = read_manifest(folder)
    assert sorted(manifest) == ["v.bin", "w.bin"], f"{folder}: {sorted(manifest)}"
    data = (folder / "v.bin").read_bytes()
    value = data[: len(data) // 100]
    assert data == value * 100
    assert (folder / "w.bin").read_bytes() == b"second artifact: " + value
    return value


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "kept", "action"),
    [
        ("golden-staged", b"one", "cleaned"),
        ("no-exchange,golden-retired", b"one", "restored"),
        ("no-exchange,golden-swapped", b"two", "cleaned"),
        ("golden-swapped", b"two", "cleaned"),
    ],
    ids=["staged", "between-renames", "after-renames", "after-exchange"],
)
def test_sigkill_during_an_update_loses_no_golden_and_the_next_run_recovers(
    tmp_path, fault, kept, action
):
    root = _project(tmp_path)
    folder = root / "goldens" / "test_x" / "test_x"
    assert _pytest(root, "--update-goldens", env={"GOLDEN_VALUE": "one"}).returncode == 0
    killed = _pytest(
        root,
        "--update-goldens",
        env={"GOLDEN_VALUE": "two", replace.FAULT_ENV: fault},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:]
    # What the killed writer left: its work folder, and its lock file (no longer locked).
    assert [n.split("-")[0] for n in _hidden(folder)] == [".test_x.lock", ".test_x.tmp"]

    after = _pytest(root, "--lossless", "-rA", env={"GOLDEN_VALUE": kept.decode()})

    assert after.returncode == 0, after.stdout[-3000:]
    assert "no golden" not in after.stdout
    lines = after.stdout.splitlines()
    assert f"{action}: 1" in lines, after.stdout[-3000:]
    detail = lines[lines.index(f"{action}: 1") + 1]
    assert "goldens/test_x/test_x" in detail
    assert _value(folder) == kept
    assert _hidden(folder) == []


@pytest.mark.slow
@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_two_sessions_updating_one_golden_the_later_reports_conflict(tmp_path, existing):
    """Both start before either commits; the early one writes, the late one writes nothing and
    fails naming the folder."""
    source = TEST_X.replace(
        'value = os.environ["GOLDEN_VALUE"].encode()',
        """value = os.environ["GOLDEN_VALUE"].encode()
    from pathlib import Path
    import time
    here = Path(__file__).parent
    deadline = time.monotonic() + 60
    (here / ("started-" + os.environ["GOLDEN_VALUE"])).touch()
    while value != b"zero" and len(list(here.glob("started-*"))) < 2:
        assert time.monotonic() < deadline, "the other session never started"
        time.sleep(0.02)
    manifest = here / "goldens/test_x/test_x/manifest.json"
    while value == b"late" and not (
        manifest.exists() and b"early" in (manifest.parent / "w.bin").read_bytes()
    ):
        assert time.monotonic() < deadline, "the early session never wrote its golden"
        time.sleep(0.02)""",
    )
    root = _project(tmp_path, source)
    folder = root / "goldens" / "test_x" / "test_x"
    if existing:
        assert _pytest(root, "--update-goldens", env={"GOLDEN_VALUE": "zero"}).returncode == 0
        for marker in root.glob("started-*"):
            marker.unlink()
    environment = {k: v for k, v in os.environ.items() if k != replace.FAULT_ENV}
    sessions = {
        value: subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--update-goldens", "-rA"],
            cwd=root,
            env=environment | {"GOLDEN_VALUE": value},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for value in ("early", "late")
    }
    out = {value: session.communicate(timeout=120)[0] for value, session in sessions.items()}
    assert sessions["early"].returncode == 0, out["early"][-3000:]
    assert sessions["late"].returncode == 1, out["late"][-3000:]
    assert _value(folder) == b"early", "the later session overwrote the earlier one"
    late = out["late"]
    assert "conflict: 2" in late.splitlines(), late[-3000:]
    assert "CONFLICT" in late
    assert "GoldenConflict" in late
    assert "goldens/test_x/test_x" in late
    assert "another session" in late
    assert "Traceback" not in late
    assert _hidden(folder) == []


MANY = """
import os
import pytest

@pytest.mark.lossless
@pytest.mark.parametrize("i", range({count}))
def test_many(golden, i):
    value = (os.environ["GOLDEN_VALUE"] + str(i)).encode()
    golden.check("v.bin", value * 100)
    golden.check("w.bin", b"second artifact: " + value)
"""


def _many_values(root: Path, count: int) -> dict[int, bytes | None]:
    """Per test, the value its whole folder holds (None: no folder)."""
    found: dict[int, bytes | None] = {}
    for i in range(count):
        folder = root / "goldens" / "test_many" / f"test_many[{i}]"
        found[i] = _value(folder) if os.path.lexists(folder) else None
    return found


# Deep tier (#24): three -n 4 sessions, 28 s on a shared 2-core machine. The normal test command
# keeps the same guarantee for one session killed between the renames
# (test_sigkill_during_an_update_loses_no_golden_and_the_next_run_recovers[between-renames]) and
# for an update under xdist (tests/e2e/test_golden.py::test_update_goldens_under_xdist_...).
@pytest.mark.slow
@pytest.mark.deep
def test_xdist_workers_killed_between_the_renames_lose_no_golden(tmp_path):
    """Under -n 4 every worker is SIGKILLed at its first commit, between the two renames; the
    next run (compare mode) restores every folder and reports each in one line."""
    count = 6
    root = _project(tmp_path, MANY.format(count=count), "test_many")
    xdist = ("-p", "xdist", "-n", "4")
    assert _pytest(root, "--update-goldens", *xdist, env={"GOLDEN_VALUE": "one"}).returncode == 0
    killed = _pytest(
        root,
        "--update-goldens",
        *xdist,
        env={"GOLDEN_VALUE": "two", replace.FAULT_ENV: "no-exchange,golden-retired"},
        timeout=300,
    )
    assert killed.returncode != 0
    assert "crashed" in killed.stdout, killed.stdout[-3000:]
    missing = [i for i, v in _many_values(root, count).items() if v is None]
    assert missing, "no worker was killed between the renames"

    after = _pytest(root, "--lossless", *xdist, env={"GOLDEN_VALUE": "one"})

    assert after.returncode == 0, after.stdout[-3000:]
    assert f"restored: {len(missing)}" in after.stdout.splitlines(), after.stdout[-3000:]
    assert _many_values(root, count) == {i: f"one{i}".encode() for i in range(count)}
    assert sorted(p.name for p in (root / "goldens" / "test_many").iterdir()) == sorted(
        f"test_many[{i}]" for i in range(count)
    )


# Deep tier (#24): five -n 4 sessions, 41 s on a shared 2-core machine. The normal test command
# keeps a SIGKILL at each step of the swap (..._the_next_run_recovers[staged, between-renames,
# after-renames, after-exchange]) and a whole update under xdist.
@pytest.mark.slow
@pytest.mark.deep
def test_sigkill_of_an_xdist_session_at_random_moments_writes_every_folder_whole(tmp_path):
    """The whole process group of a -n 4 update is killed at several moments; every folder
    holds the old or the new goldens, whole, and a later update leaves nothing stray."""
    count = 8
    root = _project(tmp_path, MANY.format(count=count), "test_many")
    xdist = ("-p", "xdist", "-n", "4")
    assert _pytest(root, "--update-goldens", *xdist, env={"GOLDEN_VALUE": "a"}).returncode == 0
    environment = {k: v for k, v in os.environ.items() if k != replace.FAULT_ENV}
    for round_, delay in enumerate((2.0, 3.0, 4.0)):
        value = f"r{round_}"
        session = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--update-goldens", *xdist],
            cwd=root,
            env=environment | {"GOLDEN_VALUE": value},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session.pid, signal.SIGKILL)
        session.wait()
        for i, found in _many_values(root, count).items():
            assert found is not None, f"test_many[{i}] lost its golden"
    done = _pytest(root, "--update-goldens", *xdist, env={"GOLDEN_VALUE": "z"})
    assert done.returncode == 0, done.stdout[-3000:]
    assert _many_values(root, count) == {i: f"z{i}".encode() for i in range(count)}
    assert sorted(p.name for p in (root / "goldens" / "test_many").iterdir()) == sorted(
        f"test_many[{i}]" for i in range(count)
    ), "a stray staging, retired or lock file was left"
    assert _pytest(root, "--lossless", *xdist, env={"GOLDEN_VALUE": "z"}).returncode == 0


def test_a_stored_array_golden_round_trips_through_the_new_layout(tmp_path):
    """The replacement keeps every stored file byte for byte (a regular golden, end to end)."""
    folder = _folder(tmp_path)
    folder.begin_update()
    source = tmp_path / "a.npy"
    np.save(source, np.arange(12, dtype=np.float32), allow_pickle=False)
    folder.stage("a.npy", source, None, {})
    assert [e.action for e in folder.commit()] == ["created"]
    assert (folder.path / "a.npy").read_bytes() == source.read_bytes()
    assert _folder(tmp_path).compare("a.npy", source, None).passed


# ------------------------------------------------------------------ readers see one version (#20)

_WRITER = """
import sys, time
from pathlib import Path
from pytest_lossless.goldens.folder import GoldenFolder
from pytest_lossless.kinds.registry import KindRegistry

root, seconds = Path(sys.argv[1]), float(sys.argv[2])
end = time.monotonic() + seconds
count = 0
while time.monotonic() < end:
    value = (b"A" if count % 2 else b"B") * 300_000
    folder = GoldenFolder(root / "goldens", "test_mod", "test_x", "test_mod.py::test_x",
                          KindRegistry(), digest_above=1 << 30, rootdir=root)
    folder.begin_update()
    source = root / "src.bin"
    source.write_bytes(value)
    folder.stage("v.bin", source, None, {})
    folder.commit()
    count += 1
print(count)
"""


def test_a_check_during_another_sessions_updates_never_reads_a_torn_golden(tmp_path):
    """Another process replaces the golden folder over and over (two versions, A and B) while
    this one compares: every comparison reads one whole version (it passes against A or fails
    as a mismatch against B), never one version's manifest with the other's file (a false
    "golden integrity error")."""
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"A" * 300_000)
    b.write_bytes(b"B" * 300_000)
    _commit(tmp_path, b"A" * 300_000)
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path), "6"],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    outcomes: dict[str, int] = {}
    try:
        while writer.poll() is None:
            folder = _folder(tmp_path)
            try:
                result = folder.compare("v.bin", a, None)
            except GoldenMissing:
                outcomes["missing"] = outcomes.get("missing", 0) + 1
                continue
            key = "pass" if result.passed else "mismatch"
            outcomes[key] = outcomes.get(key, 0) + 1
    finally:
        commits = int((writer.communicate()[0] or b"0").strip() or 0)
    assert writer.returncode == 0
    assert commits > 10, "the writer barely ran: the test proves nothing"
    assert outcomes.get("pass", 0) + outcomes.get("mismatch", 0) > 10
    assert set(outcomes) <= {"pass", "mismatch"}, outcomes
