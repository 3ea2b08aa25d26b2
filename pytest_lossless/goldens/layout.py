"""Where a test's goldens live: ``goldens/<module path>/<test name>/``, and the move from the
layout of earlier versions.

A test's goldens are keyed by its module's path under the rootdir without ``.py``, so two
modules of one file name in two folders never share a folder (``tests/a/test_dup.py::test_out``
-> ``goldens/tests/a/test_dup/test_out/``; a module at the rootdir, ``test_f.py::test_x`` ->
``goldens/test_f/test_x/``). The path is taken from the test id, which pytest writes relative
to the rootdir, so the plugin, ``accept`` and the orphan scan derive one and the same folder.

Earlier versions keyed by the module's file name alone (``goldens/test_dup/test_out/``). Such a
folder is moved to its new place by the first run that touches its test (one rename under the
folders' locks, reported as ``migrated``) when its ``manifest.json`` or ``plan.json`` names that
very test; when it names none, nobody can tell which module it belongs to, and the run stops
with a :class:`LegacyLayout` that gives the ``git mv`` to make. A folder that names another test
(a same-named module elsewhere) is left for that test.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..core.paths import fsync_dir, inside_root, read_regular
from ..core.records import loads_bounded
from ..core.text import printable
from ..errors import ArtifactError, GoldenError
from .manifest import MANIFEST, MAX_MANIFEST_BYTES, PLAN, safe_component
from .swap import FolderLock, UpdateEvent, lock_path, recover

__all__ = [
    "LegacyLayout",
    "Orphan",
    "folder_of",
    "golden_folders",
    "legacy_folder",
    "migrate",
    "module_parts",
    "orphans",
    "remove_orphan",
    "shared_folders",
    "split_test_id",
]

#: The suffix of the folder of a test's device-scoped goldens (:mod:`.scope` names it too).
_DEVICE = "@device"


class LegacyLayout(GoldenError):
    """A golden folder in the layout of an earlier version that cannot be moved by itself: it
    names no test (so whose it is cannot be told), or it cannot be renamed (a read-only
    checkout). ``legacy``: the folder; ``folder``: where it belongs now."""

    def __init__(self, legacy: Path, folder: Path, test_id: str, problem: str) -> None:
        self.legacy = legacy
        self.folder = folder
        self.test_id = test_id
        self.problem = problem
        super().__init__(
            printable(
                f"{legacy} holds goldens in the layout of an earlier version (one folder per "
                f"module file name, which two modules of one name would share): {problem}. "
                f"If they are the goldens of {test_id}, move them to where they belong now: "
                f"git mv {_quoted(legacy)} {_quoted(folder)}; if not, leave them and write this "
                "test's with --update-goldens"
            )
        )


def _quoted(path: Path) -> str:
    text = str(path)
    return text if re.fullmatch(r"[A-Za-z0-9_./@=,+\-]+", text) else f"'{text}'"


def split_test_id(test_id: str) -> tuple[str, str]:
    """``(module, test name)`` of a test id: the module as its path under the rootdir without
    its suffix (``tests/a/test_dup``), the test name as the rest of the id after the first
    ``::`` (``TestC::test_y[5s]``). A ``ValueError`` when the id names no test of a file."""
    file, separator, name = test_id.partition("::")
    if not separator or not name or not file:
        raise ValueError(f"the test id {test_id!r} names no test of a file")
    path = PurePosixPath(file)
    module = str(path.with_name(path.stem)) if path.suffix else str(path)
    return module, name


def module_parts(module: str) -> list[str]:
    """The folder names of ``module`` (``tests/a/test_dup`` -> three), each a safe file name.

    A module outside the rootdir (a ``..`` in its test id) has no place under the goldens
    folder: an :class:`ArtifactError` that says so."""
    parts = [p for p in module.split("/") if p not in ("", ".")]
    if not parts:
        raise ArtifactError(module, "the test module has no name to keep its goldens under")
    if ".." in parts:
        raise ArtifactError(
            module,
            "the test module lies outside the rootdir, and goldens are kept by the module's "
            "path under the rootdir: run pytest from a rootdir that holds the tests (--rootdir)",
        )
    return [safe_component(p, "test module") for p in parts]


def folder_of(goldens: Path, module: str, test_name: str) -> Path:
    """The golden folder of the test ``test_name`` of ``module`` (its default scope)."""
    return goldens.joinpath(*module_parts(module)) / safe_component(test_name, "test name")


def shared_folders(test_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The test ids that would share one golden folder, each with every id of its group, in
    order: ``test_x[a/b]``, ``test_x[a_b]`` and ``test_x[a b]`` are three tests, but one
    folder once their names are made file names (:func:`.manifest.safe_component`), where each
    would overwrite the others' goldens (#20). Folders that differ only in case are one on the
    file systems of macOS and Windows, where the repository is cloned too: they share as well.
    Ids that name no test of a file are left out."""
    groups: dict[str, list[str]] = {}
    for test_id in dict.fromkeys(test_ids):
        try:
            module, test_name = split_test_id(test_id)
            folder = PurePosixPath(*module_parts(module), safe_component(test_name, "test name"))
        except (ValueError, ArtifactError):
            continue
        groups.setdefault(str(folder).casefold(), []).append(test_id)
    return {
        test_id: tuple(sorted(group))
        for group in groups.values()
        if len(group) > 1
        for test_id in group
    }


def legacy_folder(goldens: Path, module: str, test_name: str) -> Path | None:
    """Where an earlier version kept the test's goldens (``goldens/<file name>/<test>/``);
    None where that is where they belong now (a module at the rootdir)."""
    parts = module_parts(module)
    if len(parts) == 1:
        return None
    return goldens / parts[-1] / safe_component(test_name, "test name")


def _named_tests(folder: Path) -> set[str] | None:
    """The test ids the manifests and plans in ``folder`` (and, for a device-scoped folder, in
    its class folders) were written for; None when one of them names none or cannot be read."""
    found: set[str] = set()
    folders = [folder]
    if folder.name.endswith(_DEVICE):
        try:
            folders = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
        except OSError:
            return None
    for each in folders:
        for name in (MANIFEST, PLAN):
            path = each / name
            if not os.path.lexists(path):
                continue
            try:
                data = loads_bounded(read_regular(path, limit=MAX_MANIFEST_BYTES))
            except (OSError, ValueError):
                return None
            test = data.get("test") if isinstance(data, dict) else None
            if not isinstance(test, str) or not test:
                return None
            found.add(test)
    return found or None


def migrate(
    goldens: Path,
    module: str,
    test_name: str,
    test_id: str,
    *,
    lock_timeout: float = 120.0,
) -> list[UpdateEvent]:
    """Move the test's goldens (its default folder and its device-scoped one) from the layout of
    an earlier version to where they belong now; one ``migrated`` event per folder moved.

    Nothing happens when the new folder exists, when no old one does, or when the old one names
    another test. An old folder that names no test, or one that cannot be moved, is a
    :class:`LegacyLayout` with the ``git mv`` to make. The caller has proven that the folders
    stay inside the goldens folder.
    """
    old = legacy_folder(goldens, module, test_name)
    if old is None:
        return []
    new = folder_of(goldens, module, test_name)
    events = []
    for source, target in ((old, new), *_device_pair(old, new)):
        if os.path.lexists(target) or not os.path.lexists(source):
            continue
        inside_root(source, goldens, what="golden folder")
        named = _named_tests(source)
        if named is None:
            raise LegacyLayout(source, target, test_id, "its manifest names no test")
        if named != {test_id}:
            continue  # another test's (a same-named module elsewhere): left for it
        events += _move(source, target, test_id, lock_timeout=lock_timeout)
    return events


def _device_pair(old: Path, new: Path) -> Iterator[tuple[Path, Path]]:
    yield old.with_name(old.name + _DEVICE), new.with_name(new.name + _DEVICE)


def _move(source: Path, target: Path, test_id: str, *, lock_timeout: float) -> list[UpdateEvent]:
    """``source`` renamed to ``target`` under both folders' locks (the new one first, so two
    sessions moving one test take them in one order), after recovering what a killed update
    left beside the old one."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with ExitStack() as held:
            held.enter_context(FolderLock(lock_path(target), timeout=lock_timeout))
            held.enter_context(FolderLock(lock_path(source), timeout=lock_timeout))
            events = recover(source, test=test_id)
            if os.path.lexists(target) or not os.path.lexists(source):
                return events  # another session moved it meanwhile
            os.rename(source, target)
            fsync_dir(target.parent)
    except OSError as exc:
        raise LegacyLayout(
            source, target, test_id, f"it cannot be moved ({exc.strerror or exc})"
        ) from None
    with contextlib.suppress(OSError):
        os.rmdir(source.parent)  # the old module folder, once it holds nothing
    detail = f"moved from {source}: goldens are kept by the module's path under the rootdir"
    return [*events, UpdateEvent(test_id, str(target), "", "migrated", detail)]


# ------------------------------------------------------------------ golden folders of no test


@dataclass(frozen=True)
class Orphan:
    """A golden folder whose test this session did not collect: renamed, deleted, or moved."""

    folder: Path
    #: The test id its manifest or plan names (None: it names none, or several).
    test: str | None
    why: str
    #: Whether an update of an unfiltered, unsharded session that finished may remove it: the
    #: folder is where its test keeps its goldens, and is not device-scoped (a device's
    #: goldens are only ever judged where that device runs).
    removable: bool


def golden_folders(goldens: Path) -> list[Path]:
    """Every test folder under ``goldens`` (a folder holding a manifest or a plan, or a test's
    ``@device`` folder), found without following a link or looking into hidden folders."""
    found: list[Path] = []
    for here, folders, files in os.walk(goldens, followlinks=False):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        path = Path(here)
        if path != goldens and (MANIFEST in files or PLAN in files or here.endswith(_DEVICE)):
            found.append(path)
            folders[:] = []
    return found


def orphans(
    goldens: Path,
    rootdir: Path,
    *,
    collected: set[Path],
    modules: set[str],
    left_out: Callable[[str], bool] | None = None,
) -> list[Orphan]:
    """The test folders under ``goldens`` that no collected test uses (``collected``: the folders
    of the tests collected, default scope), judged only where this session can tell: the test's
    module was collected (``modules``: their files, as test ids name them) without the test, or
    its file no longer exists. A folder whose module exists but was not collected is not judged,
    nor one whose test its collected module still defines but this session's collection left out
    without saying so (``left_out``: an ini setting such as ``python_functions`` or a plugin
    narrowed it, #20).
    """
    expected = collected | {f.with_name(f.name + _DEVICE) for f in collected}
    found: list[Orphan] = []
    for folder in golden_folders(goldens):
        if folder in expected:
            continue
        device = folder.name.endswith(_DEVICE)
        named = _named_tests(folder)
        if named is None or len(named) != 1:
            why = "its manifest names no test" if named is None else "it names several tests"
            found.append(Orphan(folder, None, why, False))
            continue
        test = next(iter(named))
        try:
            module, name = split_test_id(test)
            home = folder_of(goldens, module, name)
        except (ValueError, ArtifactError):
            found.append(Orphan(folder, test, "it names no test of a file", False))
            continue
        if folder not in (home, home.with_name(home.name + _DEVICE)):
            why = f"it is not where {test} keeps its goldens ({home})"
            found.append(Orphan(folder, test, why, False))
            continue
        file = test.split("::", 1)[0]
        if file in modules:
            if left_out is not None and left_out(test):
                continue  # still defined, left out by a narrowed collection: not judged
            why = f"{file} no longer has this test (renamed or deleted)"
        elif not os.path.lexists(rootdir / file):
            why = f"{file} no longer exists"
        else:
            continue  # its module was not collected by this session: not judged
        if device:
            why += "; device-scoped goldens are removed by hand, where their device runs"
        found.append(Orphan(folder, test, why, not device))
    return found


def remove_orphan(orphan: Orphan, goldens: Path, *, lock_timeout: float = 120.0) -> None:
    """Remove a removable orphan folder under its lock (never through a link), then the module
    folders it leaves empty."""
    inside_root(orphan.folder, goldens, what="golden folder")
    with FolderLock(lock_path(orphan.folder), timeout=lock_timeout):
        if os.path.lexists(orphan.folder) and not os.path.islink(orphan.folder):
            shutil.rmtree(orphan.folder)
    parent = orphan.folder.parent
    while parent != goldens and parent.is_relative_to(goldens):
        try:
            os.rmdir(parent)
        except OSError:
            break
        parent = parent.parent
