"""The export for CI: the obtained artifacts of every failing or new check, ready for an upload.

``--lossless-export DIR`` fills a folder that a CI step uploads as it is::

    DIR/export.json                  one entry per exported artifact (see below)
    DIR/artifacts/<test>/<name>      the obtained artifact (of a producer: its first run again)
    DIR/receipts/<session>/...       a copy of each exported test's receipt (and its diff)
    DIR/report/                      a copy of the session's HTML report
    DIR/.lossless-export.lock        held by the session writing DIR (removed when it ends)

An entry names the test, the artifact, the gate, the kind and fingerprint, the runs that
produced it (a producer whose artifact mismatched ran again: the control-run count) and whether
they agreed, and the copy of the test's receipt. ``python -m pytest_lossless accept DIR``
(:mod:`..goldens.accept`) writes goldens from it.

Also here: what a GitHub Actions job shows of a session, the verdict table as Markdown for
``$GITHUB_STEP_SUMMARY`` and the failing gates as ``::error`` workflow commands.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..core import faults
from ..core.clock import utc_iso
from ..core.digests import sha256_file
from ..core.paths import fsync_dir, fsync_file, read_regular, safe_name, write_json_atomic
from ..core.records import Record
from ..core.text import printable
from ..errors import ConfigError, ReceiptError
from ..goldens.accept import EXPORT_JSON, EXPORT_SCHEMA, ExportSettings
from ..goldens.swap import FolderLock, GoldenUpdateError
from .index import HostIdentity
from .provenance import SourceIdentity

__all__ = [
    "ARTIFACTS",
    "CLAIM",
    "RECEIPTS",
    "REPORT",
    "ExportClaim",
    "ExportFolder",
    "annotation",
    "append_step_summary",
    "markdown_table",
]

ARTIFACTS = "artifacts"
RECEIPTS = "receipts"
REPORT = "report"
#: The lock file of the session writing an export folder.
CLAIM = ".lossless-export.lock"


class ExportClaim:
    """One session's hold on an export folder, from its start to its end. ``export.json`` names
    one session (its host, settings, receipts), so two sessions writing one folder at once
    would leave the last writer's entries listed and the other's artifacts unlisted beside
    them: the second is refused at its start instead, naming the pid of the first (#20). An
    exclusive ``flock`` on ``DIR/.lossless-export.lock`` (its own file, never a device lock),
    which names its holder's pid and is removed by it at release; a process that dies drops
    its flock with it, so a stale file never refuses anyone."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / CLAIM
        self._lock: FolderLock | None = None

    def acquire(self) -> None:
        """Hold the folder, or a :class:`ConfigError` naming the session that holds it."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                "--lossless-export", str(self.root), f"cannot be made ({exc.strerror or exc})"
            ) from None
        lock = FolderLock(self.path, timeout=0, writable=True, of="the export folder")
        try:
            held = lock.acquire(wait=False)
        except GoldenUpdateError as exc:  # a link, a FIFO, an unlockable file: named
            raise ConfigError("--lossless-export", str(self.root), str(exc)) from None
        if not held:
            raise ConfigError(
                "--lossless-export",
                str(self.root),
                f"is being written by another session ({self._holder()}): two sessions "
                "cannot share one export (export.json names one session); give each its "
                "own folder, or run this one after that one ended",
            )
        self._lock = lock
        with contextlib.suppress(OSError):  # the pid only names the holder (a full disk: not)
            assert lock.fd is not None
            os.ftruncate(lock.fd, 0)
            os.write(lock.fd, f"{os.getpid()}\n".encode())

    def _holder(self) -> str:
        try:
            text = read_regular(self.path, limit=64).decode("ascii", "replace").strip()
        except OSError:
            text = ""
        return f"pid {text}" if text.isdigit() else "pid unknown"

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()  # removes its file, and closing it drops the flock


class ExportFolder:
    """The export folder: artifacts copied in atomically, ``export.json`` written last."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def add_artifact(self, test: str, run: str, name: str, source: Path) -> tuple[str, str, int]:
        """Copy ``source`` in as the artifact ``name`` of ``test`` (``run``: which run made
        it); returns its path relative to the export, its SHA-256 and its size."""
        tag = hashlib.sha256(test.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        folder = self.root / ARTIFACTS / f"{safe_name(test, default='test')}-{tag}" / safe_name(run)
        target = folder / safe_name(name, default="artifact")
        _copy_atomic(source, target)
        return target.relative_to(self.root).as_posix(), sha256_file(target), target.stat().st_size

    def add_receipt(self, session: str, receipt: Path) -> str:
        """Copy a receipt (and the source diff it names: ``diffs/<sha256>.diff``, or an older
        receipt's ``<name>.diff`` beside it) in; returns its relative path."""
        from .receipts import LEGACY_DIFF, STORED_DIFF, load

        folder = self.root / RECEIPTS / safe_name(session or "session")
        target = folder / receipt.name
        _copy_atomic(receipt, target)
        try:
            source = load(receipt).source or {}
        except ReceiptError:
            source = {}  # copied as it is: verify names what is wrong with it
        name = str(source.get("diff_file") or "")
        stored, copy = receipt.parent / name, folder / name
        named = STORED_DIFF.match(name) or LEGACY_DIFF.match(name)
        if named and stored.is_file() and not copy.is_file():  # by its digest: copied once
            _copy_atomic(stored, copy)
        return target.relative_to(self.root).as_posix()

    def add_report(self, report: Path) -> Path | None:
        """Copy the session's HTML report folder in (replacing an older copy)."""
        if not report.is_dir():
            return None
        target = self.root / REPORT
        staging = self.root / f".{REPORT}-{os.getpid()}-{secrets.token_hex(4)}"
        shutil.copytree(report, staging, symlinks=True)
        if target.exists():
            shutil.rmtree(target)
        os.rename(staging, target)
        return target

    def write(
        self,
        entries: Sequence[Record],
        *,
        session: str,
        host: HostIdentity,
        source: SourceIdentity,
        settings: ExportSettings,
        command: Sequence[str],
    ) -> Path:
        """Write ``export.json`` (atomically, last: a reader sees a complete export): the
        entries (each one artifact, :class:`..goldens.accept.Exported` reads them back) sorted
        by test and artifact, the source's revision and dirty flag."""
        self.root.mkdir(parents=True, exist_ok=True)
        document = {
            "schema": EXPORT_SCHEMA,
            "what": "pytest-lossless export: accept with python -m pytest_lossless accept DIR",
            "written_at": utc_iso(),
            "session": session,
            "host": host.to_json(),
            "source": {"revision": source.revision, "dirty": source.dirty},
            "settings": settings.to_json(),
            "command": list(command),
            "entries": sorted(
                (e.to_json() for e in entries), key=lambda e: (str(e["test"]), str(e["artifact"]))
            ),
        }
        path = self.root / EXPORT_JSON
        faults.write("write-export", path)
        write_json_atomic(path, document, default=str)
        return path


def _copy_atomic(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` through a temporary file beside it, flushed, renamed in."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        shutil.copyfile(source, temporary)
        fsync_file(temporary)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


# ------------------------------------------------------------------ GitHub Actions


def _cell(text: object) -> str:
    """A Markdown table cell: no line breaks, pipes escaped, control characters visible."""
    shown = printable(str(text), newlines=True).replace("\n", " ")
    return shown.replace("\\", "\\\\").replace("|", "\\|")


def markdown_table(rows: Iterable[Sequence[object]], *, title: str) -> str:
    """The verdict table as GitHub-flavoured Markdown: ``rows`` of (verdict, test, check,
    gate, key figure), in the order given."""
    lines = [
        f"### {title}",
        "",
        "| verdict | test | check | gate | key figure |",
        "|---|---|---|---|---|",
    ]
    body = [
        "| " + " | ".join(_cell(c) if i else f"**{_cell(c)}**" for i, c in enumerate(row)) + " |"
        for row in rows
    ]
    lines += body or ["| - | no gate compared anything | | | |"]
    return "\n".join(lines) + "\n"


def append_step_summary(path: Path | str, text: str) -> None:
    """Append to ``$GITHUB_STEP_SUMMARY`` (the runner made the file; it is only appended)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text + "\n")


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(printable(text)).replace(":", "%3A").replace(",", "%2C")


def annotation(file: str, line: int | None, message: str, *, title: str | None = None) -> str:
    """A GitHub ``::error`` workflow command naming ``file`` (and ``line``), escaped as the
    runner reads it: ``%``, CR and LF in the message; also ``:`` and ``,`` in properties."""
    props = [f"file={_escape_property(file)}"]
    if line is not None:
        props.append(f"line={int(line)}")
    if title:
        props.append(f"title={_escape_property(title)}")
    return f"::error {','.join(props)}::{_escape_data(printable(message, newlines=True))}"
