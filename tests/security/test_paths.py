"""Paths inside the project stay inside it: goldens, test folders and receipts (issue #11).

A pull request can commit symbolic links. A module folder, a test folder, the goldens folder or
the receipts folder that links out of the rootdir is refused, naming the link and where it
points; nothing outside is read, written or deleted. FIFOs where the plugin reads or locks are
named errors, never a hang.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_lossless.core.paths import PathOutsideRoot, inside_root, read_regular
from pytest_lossless.errors import GoldenIntegrityError, ManifestError, ReceiptError
from pytest_lossless.evidence.receipts import Receipt, load_all
from pytest_lossless.evidence.summary_md import check_summary, write_summary
from pytest_lossless.goldens.folder import GoldenFolder, read_manifest
from pytest_lossless.kinds.registry import KindRegistry

GOLDEN_TEST = """
import numpy as np
import pytest

@pytest.mark.lossless
def test_x(golden):
    golden.check("t.npy", np.array([1.0, 2.0], dtype=np.float32))
"""


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: file bytes, or what a link points to."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = path.read_bytes()
        else:
            found[key] = "dir"
    return found


def _outside_golden(outside: Path) -> Path:
    """A golden-looking folder outside the project, which must survive untouched."""
    test = outside / "test_x"
    test.mkdir(parents=True)
    (test / "manifest.json").write_text('{"precious": true}\n')
    (test / "keep.txt").write_text("outside the project\n")
    return test


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def _within(seconds: float, call: Callable[[], Any], unblock: Callable[[], None]) -> Any:
    """``call()``'s result or exception, or fail when it is still blocked after ``seconds``
    (``unblock`` then releases the thread, so a hang fails the test instead of the suite)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        unblock()
        thread.join(5)
        pytest.fail(f"still blocked after {seconds} s: a FIFO made it hang")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _unblock_fifo(path: Path) -> Callable[[], None]:
    def unblock() -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.close(fd)

    return unblock


# ------------------------------------------------------------------ inside_root


def test_inside_root_accepts_real_folders_and_links_that_stay_inside(tmp_path):
    (tmp_path / "real" / "sub").mkdir(parents=True)
    os.symlink("real", tmp_path / "alias")
    assert inside_root(tmp_path / "real" / "sub" / "new" / "file", tmp_path, what="x")
    assert inside_root(tmp_path / "alias" / "sub", tmp_path, what="x") == tmp_path / "alias/sub"


def test_inside_root_names_the_link_and_where_it_points(tmp_path):
    root, outside = tmp_path / "project", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    _link(root / "goldens" / "test_mod", outside)
    with pytest.raises(PathOutsideRoot) as caught:
        inside_root(root / "goldens" / "test_mod" / "test_x", root, what="golden folder")
    error = caught.value
    assert error.link == root / "goldens" / "test_mod"
    assert error.target == "../../outside"
    assert error.resolved == outside
    text = str(error)
    assert "goldens/test_mod" in text
    assert "../../outside" in text
    assert str(root) in text


def test_a_dangling_link_leaving_the_root_is_refused_too(tmp_path):
    os.symlink("/nonexistent/elsewhere", tmp_path / "receipts")
    with pytest.raises(PathOutsideRoot, match="nonexistent"):
        inside_root(tmp_path / "receipts", tmp_path, what="receipts folder")


def test_a_link_escaping_through_an_inner_link_is_refused(tmp_path):
    root = tmp_path / "project"
    (root / "a").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink("a", root / "alias")
    os.symlink("../../outside", root / "a" / "out")
    with pytest.raises(PathOutsideRoot):
        inside_root(root / "alias" / "out" / "f", root, what="x")


# ------------------------------------------------------------------ goldens, end to end


@pytest.mark.slow
@pytest.mark.parametrize("where", ["goldens", "goldens/test_links", "goldens/test_links/test_x"])
def test_update_goldens_refuses_a_link_out_of_the_rootdir(pytester, tmp_path_factory, where):
    outside = tmp_path_factory.mktemp("outside")
    pytester.makepyfile(test_links=GOLDEN_TEST)
    # The link points at a folder that looks like the one the plugin would replace.
    target = {
        "goldens": outside,
        "goldens/test_links": outside,
        "goldens/test_links/test_x": outside / "test_x",
    }[where]
    _outside_golden(outside)
    if where == "goldens":
        (outside / "test_links").mkdir()
        (outside / "test_links" / "keep.txt").write_text("outside\n")
    _link(pytester.path / where, target)
    before = _snapshot(outside)

    result = pytester.runpytest("--update-goldens")

    assert result.ret != 0
    text = result.stdout.str()
    assert "PathOutsideRoot" in text
    assert "symbolic link" in text
    assert where in text
    assert os.readlink(pytester.path / where) in text
    assert "Traceback" not in text
    assert "inside_root(" not in text, "a traceback instead of the message"
    assert _snapshot(outside) == before, "a file outside the project was written or deleted"
    assert (pytester.path / where).is_symlink(), "the link was replaced"


@pytest.mark.slow
def test_comparing_refuses_a_module_folder_that_links_out(pytester, tmp_path_factory):
    pytester.makepyfile(test_links=GOLDEN_TEST)
    assert pytester.runpytest("--update-goldens").ret == 0
    outside = tmp_path_factory.mktemp("outside")
    goldens = pytester.path / "goldens" / "test_links"
    goldens.rename(outside / "test_links")
    _link(goldens, outside / "test_links")
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*PathOutsideRoot*goldens/test_links*symbolic link*"])
    assert "inside_root(" not in result.stdout.str()
    # A test that checks nothing still reads its manifest (for unchecked goldens): refused too.
    unmarked = GOLDEN_TEST.replace("@pytest.mark.lossless\n", "")
    pytester.makepyfile(test_links=unmarked.replace('golden.check("t.npy", ', "print("))
    result = pytester.runpytest("--lossless")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*PathOutsideRoot*goldens/test_links*symbolic link*"])
    assert "inside_root(" not in result.stdout.str()


@pytest.mark.slow
def test_links_inside_the_rootdir_keep_working(pytester):
    pytester.makepyfile(test_links=GOLDEN_TEST)
    (pytester.path / "store").mkdir()
    os.symlink("store", pytester.path / "goldens")
    assert pytester.runpytest("--update-goldens").ret == 0
    assert (pytester.path / "store" / "test_links" / "test_x" / "manifest.json").is_file()
    pytester.runpytest("--lossless").assert_outcomes(passed=1)


def test_the_golden_folder_replacement_never_follows_a_link(tmp_path):
    root = tmp_path / "project"
    kinds = KindRegistry()
    source = tmp_path / "a.npy"
    np.save(source, np.array([1.0], dtype=np.float32))
    # A test folder linked to another folder inside the project: replaced, not written through.
    shared = root / "goldens" / "shared"
    shared.mkdir(parents=True)
    (shared / "keep.txt").write_text("kept\n")
    _link(root / "goldens" / "mod" / "test", shared)
    folder = GoldenFolder(
        root / "goldens", "mod", "test", "mod.py::test", kinds, digest_above=1 << 20, rootdir=root
    )
    folder.stage("a.npy", source, None, {})
    folder.commit()
    assert not folder.path.is_symlink()
    assert sorted(p.name for p in folder.path.iterdir()) == ["a.npy", "manifest.json"]
    assert sorted(p.name for p in shared.iterdir()) == ["keep.txt"]
    assert [p.name for p in folder.path.parent.iterdir()] == ["test"], "a retired link was left"


def test_a_stored_golden_file_that_links_out_is_refused(tmp_path):
    root = tmp_path / "project"
    kinds = KindRegistry()
    source = tmp_path / "a.npy"
    np.save(source, np.array([1.0], dtype=np.float32))
    folder = GoldenFolder(
        root / "goldens", "mod", "test", "mod.py::test", kinds, digest_above=1 << 20, rootdir=root
    )
    folder.stage("a.npy", source, None, {})
    folder.commit()
    stolen = tmp_path / "secret.npy"
    (folder.path / "a.npy").rename(stolen)
    os.symlink(stolen, folder.path / "a.npy")
    again = GoldenFolder(
        root / "goldens", "mod", "test", "mod.py::test", kinds, digest_above=1 << 20, rootdir=root
    )
    with pytest.raises(PathOutsideRoot, match=r"a\.npy"):
        again.compare("a.npy", source, None)


# ------------------------------------------------------------------ receipts


RECEIPT_TEST = """
import pytest

@pytest.mark.lossless
def test_r(golden):
    golden.check("n.txt", b"data")
"""


@pytest.mark.slow
def test_a_committed_receipts_link_overwrites_nothing_outside(pytester, tmp_path_factory):
    pytester.makepyfile(test_receipt=RECEIPT_TEST)
    assert pytester.runpytest("--update-goldens", "-p", "no:cacheprovider").ret == 0
    outside = tmp_path_factory.mktemp("outside")
    # The very files a run would write, outside the project.
    for name in ("test_receipt.py__test_r.json", "test_receipt.py__test_r.diff", "SUMMARY.md"):
        (outside / name).write_text("precious\n")
    # A committed link: in the checkout in place of the folder the update session wrote.
    shutil.rmtree(pytester.path / "lossless-receipts", ignore_errors=True)
    _link(pytester.path / "lossless-receipts", outside)
    before = _snapshot(outside)

    result = pytester.runpytest("--lossless")

    assert result.ret != 0, "the session passed although its receipt was not written"
    result.stdout.fnmatch_lines(["*receipt*not written*lossless-receipts*symbolic link*"])
    assert _snapshot(outside) == before


def test_receipt_write_refuses_a_folder_that_links_out_of_its_rootdir(tmp_path):
    root, outside = tmp_path / "project", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    _link(root / "lossless-receipts", outside)
    receipt = Receipt("t.py::test")
    receipt.set_runspec({"invocation": {"rootdir": str(root)}, "source": {}})
    with pytest.raises(PathOutsideRoot, match="lossless-receipts"):
        receipt.write(root / "lossless-receipts")
    with pytest.raises(PathOutsideRoot):
        Receipt("t.py::test").write(root / "lossless-receipts", root=root)
    assert list(outside.iterdir()) == []


def test_a_fifo_at_the_summary_lock_is_an_error_not_a_hang(tmp_path):
    lock = tmp_path / ".summary.lock"
    os.mkfifo(lock)
    with pytest.raises(ReceiptError, match=r"\.summary\.lock.*not a regular file"):
        _within(5, lambda: write_summary(tmp_path), _unblock_fifo(lock))


def test_a_link_at_the_summary_lock_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("content\n")
    folder = tmp_path / "receipts"
    folder.mkdir()
    os.symlink(victim, folder / ".summary.lock")
    with pytest.raises(ReceiptError, match="symbolic link"):
        write_summary(folder)
    assert victim.read_text() == "content\n"


def test_a_summary_lock_held_elsewhere_is_waited_on_for_a_bounded_time(tmp_path):
    import fcntl

    write_summary(tmp_path)
    fd = os.open(tmp_path / ".summary.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(ReceiptError, match="held"):
            _within(10, lambda: write_summary(tmp_path, lock_timeout=0.3), lambda: None)
    finally:
        os.close(fd)


def test_a_fifo_at_a_receipt_path_is_named_not_waited_on(tmp_path):
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    loaded = _within(5, lambda: load_all(tmp_path), _unblock_fifo(fifo))
    assert isinstance(loaded[fifo], ReceiptError)
    assert "not a regular file" in str(loaded[fifo])
    os.unlink(fifo)
    os.mkfifo(tmp_path / "SUMMARY.md")
    found = _within(5, lambda: check_summary(tmp_path), _unblock_fifo(tmp_path / "SUMMARY.md"))
    assert any("not a regular file" in line for line in found)


def test_writing_a_receipt_over_a_fifo_replaces_it(tmp_path):
    receipt = Receipt("t.py::test")
    fifo = tmp_path / f"{receipt.name}.json"
    os.mkfifo(fifo)
    path = _within(5, lambda: receipt.write(tmp_path), _unblock_fifo(fifo))
    assert json.loads(path.read_text())["test_id"] == "t.py::test"


# ------------------------------------------------------------------ manifests and stored files


def test_a_fifo_manifest_is_a_manifest_error_not_a_hang(tmp_path):
    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(ManifestError, match="not a regular file"):
        _within(5, lambda: read_manifest(tmp_path), _unblock_fifo(tmp_path / "manifest.json"))


def test_a_fifo_stored_golden_is_an_integrity_error(tmp_path):
    kinds = KindRegistry()
    source = tmp_path / "a.npy"
    np.save(source, np.array([1.0], dtype=np.float32))
    folder = GoldenFolder(tmp_path / "goldens", "m", "t", "m.py::t", kinds, digest_above=1 << 20)
    folder.stage("a.npy", source, None, {})
    folder.commit()
    stored = folder.path / "a.npy"
    stored.unlink()
    os.mkfifo(stored)
    again = GoldenFolder(tmp_path / "goldens", "m", "t", "m.py::t", kinds, digest_above=1 << 20)
    with pytest.raises(GoldenIntegrityError):
        _within(5, lambda: again.compare("a.npy", source, None), _unblock_fifo(stored))


def test_read_regular_refuses_links_fifos_and_oversized_files(tmp_path):
    (tmp_path / "f").write_bytes(b"12345")
    assert read_regular(tmp_path / "f", limit=5) == b"12345"
    with pytest.raises(OSError, match="larger than"):
        read_regular(tmp_path / "f", limit=4)
    os.symlink("f", tmp_path / "l")
    with pytest.raises(OSError, match="symbolic link"):
        read_regular(tmp_path / "l", limit=5)
    os.mkfifo(tmp_path / "p")
    with pytest.raises(OSError, match="not a regular file"):
        read_regular(tmp_path / "p", limit=5)
