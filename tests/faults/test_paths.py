"""Faults of the folders a session uses (issue #12: D6): checked once, at configure.

The lock folder, the goldens folder and the receipts folder: not writable, a file where a folder
is needed, on a file system without working ``flock``: each is one usage line naming the setting
and the path, before any test runs; never a traceback at setup, never "run with
--update-goldens" for a goldens path that is a file, never a NotADirectoryError at teardown.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_lossless.core.paths import flock_problem, folder_problem

GOLDEN_TEST = """
import pytest

@pytest.mark.lossless
def test_g(golden):
    golden.check("a.txt", b"data")
"""

DEVICE_TEST = """
import pytest

@pytest.mark.npu
def test_d(devices):
    assert devices.ids
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\nlossless_backend = cpu\nlossless_devices = 0,1\n")
    (root / "test_g.py").write_text(GOLDEN_TEST)
    (root / "test_d.py").write_text(DEVICE_TEST)
    return root


def _run(root: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _usage_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one line of a usage error, after checking it is one and holds ``words``."""
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stderr
    line = errors[0]
    for word in words:
        assert word in line, line
    assert "Traceback" not in result.stdout + result.stderr
    assert "--update-goldens to create" not in result.stdout + result.stderr
    assert "collected" not in result.stdout, "the check ran after collection"
    return line


def _read_only_mount() -> tuple[str, ...] | None:
    """A command prefix that runs the rest with ``$1`` mounted read-only (a private tmpfs), or
    None where this machine allows no mount namespace."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    flags = ("--mount",) if os.geteuid() == 0 else ("--map-root-user", "--mount")
    probe = subprocess.run(
        [unshare, *flags, "sh", "-c", "mount -t tmpfs -o ro tmpfs /mnt 2>/dev/null || exit 3"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return None
    return (unshare, *flags, "sh", "-c", 'mount -t tmpfs -o ro tmpfs "$1" && shift && exec "$@"')


@pytest.fixture
def read_only() -> tuple[str, ...]:
    prefix = _read_only_mount()
    if prefix is None:
        pytest.skip("no mount namespace here (unshare --mount refused): no read-only folder")
    return prefix


# ------------------------------------------------------------------ not writable


@pytest.mark.slow
def test_a_read_only_lock_folder_is_one_usage_line(tmp_path, read_only):
    """D6: was a 56-line traceback at setup, then an error in every device test."""
    root = _project(tmp_path)
    locks = tmp_path / "locks"
    locks.mkdir()
    result = _run(root, f"--lossless-lock-dir={locks}", prefix=(*read_only, "sh", str(locks)))
    line = _usage_error(result, "--lossless-lock-dir", str(locks), "not writable")
    assert "read-only" in line.lower()


@pytest.mark.slow
def test_a_read_only_goldens_folder_is_refused_only_when_updating(tmp_path, read_only):
    root = _project(tmp_path)
    goldens = root / "goldens"
    goldens.mkdir()
    mounted = (*read_only, "sh", str(goldens))
    result = _run(root, "--update-goldens", "test_g.py", prefix=mounted)
    _usage_error(result, "lossless_goldens", str(goldens), "not writable")
    # Comparing reads only: a read-only checkout of the goldens is fine.
    compared = _run(root, "--lossless", "test_g.py", prefix=mounted)
    assert compared.returncode == 1, compared.stdout + compared.stderr
    assert "no golden 'a.txt'" in compared.stdout


@pytest.mark.slow
def test_a_read_only_receipts_folder_is_one_usage_line(tmp_path, read_only):
    root = _project(tmp_path)
    receipts = root / "lossless-receipts"
    receipts.mkdir()
    result = _run(root, "--lossless", prefix=(*read_only, "sh", str(receipts)))
    _usage_error(result, "--lossless-receipts", str(receipts), "not writable")


# ------------------------------------------------------------------ a file where a folder is needed


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["--lossless", "--update-goldens"])
def test_a_goldens_path_that_is_a_file_is_one_usage_line(tmp_path, mode):
    """D6: said "run with --update-goldens to create it", and under --update-goldens raised
    NotADirectoryError at teardown."""
    root = _project(tmp_path)
    (root / "goldens").write_text("not a folder\n")
    result = _run(root, mode, "test_g.py")
    _usage_error(result, "lossless_goldens", str(root / "goldens"), "a file, not a folder")
    assert "NotADirectoryError" not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_lock_folder_that_is_a_file_is_one_usage_line(tmp_path):
    root = _project(tmp_path)
    locks = tmp_path / "locks"
    locks.write_text("not a folder\n")
    result = _run(root, f"--lossless-lock-dir={locks}")
    _usage_error(result, "--lossless-lock-dir", str(locks), "a file, not a folder")


@pytest.mark.slow
def test_a_receipts_path_that_is_a_file_is_one_usage_line(tmp_path):
    root = _project(tmp_path)
    (root / "out").write_text("a file\n")
    result = _run(root, "--lossless-receipts=out/receipts")
    _usage_error(result, "--lossless-receipts", str(root / "out"), "a file, not a folder")


@pytest.mark.slow
def test_a_goldens_path_under_a_file_is_one_usage_line(tmp_path):
    root = _project(tmp_path)
    (root / "data").write_text("a file\n")
    (root / "pytest.ini").write_text("[pytest]\nlossless_goldens = data/goldens\n")
    result = _run(root, "--update-goldens", "test_g.py")
    _usage_error(result, "ini lossless_goldens", str(root / "data"), "a file, not a folder")


# ------------------------------------------------------------------ what is fine


@pytest.mark.slow
def test_missing_folders_are_fine_and_the_receipts_folder_is_made(tmp_path):
    """A missing goldens folder in compare mode: the test says no golden. A missing receipts
    folder is made with the first receipt; a missing lock folder is made (sticky) at configure,
    as the allocator makes it."""
    root = _project(tmp_path)
    locks = tmp_path / "new" / "locks"
    result = _run(root, "--lossless", f"--lossless-lock-dir={locks}")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no golden 'a.txt'" in result.stdout
    assert "1 passed" in result.stdout  # the device test
    assert (root / "lossless-receipts").is_dir()
    assert not (root / "goldens").exists(), "comparing must not create the goldens folder"
    assert locks.is_dir()
    assert sorted(p.name for p in locks.iterdir() if "probe" in p.name) == [], "a probe was left"


@pytest.mark.slow
def test_help_is_shown_whatever_the_folders(tmp_path):
    root = _project(tmp_path)
    locks = tmp_path / "locks"
    locks.write_text("not a folder\n")
    result = _run(root, "--help", f"--lossless-lock-dir={locks}")
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ flock


def test_a_file_system_without_flock_is_one_usage_line(pytester, monkeypatch, tmp_path):
    """Probed in the lock folder: here flock fails as it does on file systems without it."""
    pytester.makepyfile(test_d=DEVICE_TEST)
    locks = tmp_path / "locks"

    def unsupported(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", unsupported)
    result = pytester.runpytest("--lossless-backend=cpu", f"--lossless-lock-dir={locks}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1, result.errlines
    assert "--lossless-lock-dir" in errors[0]
    assert str(locks) in errors[0]
    assert "flock" in errors[0]


def test_a_flock_that_does_not_exclude_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(fcntl, "flock", lambda fd, operation: None)
    problem = flock_problem(tmp_path)
    assert problem is not None
    assert "flock" in problem
    assert "exclude" in problem
    assert [p.name for p in tmp_path.iterdir()] == [], "the probe file was left"


def test_flock_works_here(tmp_path):
    assert flock_problem(tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_folder_problem_names_what_is_wrong(tmp_path):
    (tmp_path / "file").write_text("x")
    assert folder_problem(tmp_path / "file", write=False) == "is a file, not a folder"
    problem = folder_problem(tmp_path / "file" / "sub", write=True)
    assert problem is not None
    assert str(tmp_path / "file") in problem
    assert "a file, not a folder" in problem
    assert folder_problem(tmp_path / "missing" / "deeper", write=True) is None
    assert not (tmp_path / "missing").exists(), "checking creates nothing"
    assert folder_problem(tmp_path / "made", write=True, create=True) is None
    assert (tmp_path / "made").is_dir()
    os.mkfifo(tmp_path / "fifo")
    assert folder_problem(tmp_path / "fifo", write=False) == "is a FIFO, not a folder"
