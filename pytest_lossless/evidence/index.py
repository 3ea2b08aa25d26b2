"""A session's identity and its index: who wrote a session folder, and everything it holds.

Each pytest session writes its receipts into a folder of its own,
``<receipts dir>/<session id>/``, so concurrent sessions (and hosts) never overwrite each
other. At its end the session writes ``INDEX.json`` there: its host, start and end, source
revision, the gate tests it collected with what became of each, every receipt's SHA-256 and
the SHA-256 of its ``SUMMARY.md``. ``verify`` (:mod:`.sessions`) requires the index, so a
deleted, added or changed receipt is named. Who wrote it is proven by signing the session
afterwards, outside it (:mod:`.attest`): a key inside the session could be read by the code
under test.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core import faults
from ..core.clock import utc_iso
from ..core.paths import open_regular, read_regular, safe_name, write_json_atomic
from ..core.records import JsonObject, Record, loads_bounded, spec
from ..core.records import from_json as read_record
from ..core.text import has_control, printable
from ..errors import ConfigError, ReceiptError

INDEX_NAME = "INDEX.json"
SUMMARY_NAME = "SUMMARY.md"
INDEX_SCHEMA = "pytest-lossless.session"
INDEX_VERSION = 1
#: Declares the host's name (a Kubernetes node, a CI runner's label), instead of the hostname.
HOST_ENV = "PYTEST_LOSSLESS_HOST"
#: Outcomes after which a gate test rightly has no receipt: it compared nothing.
OK_WITHOUT_RECEIPT = frozenset({"skipped", "deselected", "xfailed"})
MAX_INDEX_BYTES = 64 << 20
_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
_MACHINE_ID = re.compile(r"^[0-9a-f]{32}$")
#: What a session id looks like: sortable UTC time, the host, a short random part.
SESSION_ID = re.compile(r"^[0-9]{8}T[0-9]{6}\.[0-9]{3}Z-[A-Za-z0-9._-]{1,40}-[0-9a-f]{6}$")
_EXIT_STATES = {0: "finished", 1: "finished", 5: "finished", 2: "interrupted"}


@dataclass(frozen=True, slots=True)
class HostIdentity(Record):
    """The host a session ran on (:func:`host_identity`), as the index, each receipt's RunSpec
    and an export record it (written by :mod:`..core.records`, keys in field order)."""

    hostname: str | None
    #: ``PYTEST_LOSSLESS_HOST`` when the name was declared, else None.
    declared_by: str | None = None
    #: An app-specific hash of ``/etc/machine-id`` (never the id itself); None when unreadable.
    machine: str | None = None
    machine_source: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """What tells two hosts apart: the name and the machine hash."""
        return (self.hostname or "", self.machine or "")

    @classmethod
    def read(cls, data: object) -> HostIdentity | None:
        """A host as recorded, read leniently (a value of the wrong type reads as absent);
        None when it is not an object."""
        return read_record(cls, data, problems=[]) if isinstance(data, Mapping) else None


def host_identity(env: Mapping[str, str] | None = None) -> HostIdentity:
    """The host a session ran on: its name (``PYTEST_LOSSLESS_HOST`` when set, else the
    hostname) and an app-specific hash of ``/etc/machine-id`` when readable.

    The machine id itself is not recorded: systemd asks that it stay confidential and that
    applications use a keyed hash of it, which still tells two machines apart.
    """
    env = os.environ if env is None else env
    declared = env.get(HOST_ENV, "").strip()
    if declared and (len(declared) > 253 or has_control(declared) or " " in declared):
        raise ConfigError(HOST_ENV, declared, "a host name: at most 253 printable characters")
    machine, source = _machine_hash()
    return HostIdentity(
        hostname=declared or socket.gethostname(),
        declared_by=HOST_ENV if declared else None,
        machine=machine,
        machine_source=source,
    )


def _machine_hash() -> tuple[str | None, str | None]:
    for name in _MACHINE_ID_FILES:
        try:
            text = read_regular(Path(name), limit=256).decode("ascii", errors="replace").strip()
        except OSError:
            continue
        if _MACHINE_ID.match(text):
            digest = hmac.new(text.encode(), b"pytest-lossless host", hashlib.sha256)
            return digest.hexdigest()[:32], name
    return None, None


def host_label(host: HostIdentity | None) -> str:
    """A host as a reader names it: ``name`` or ``name (machine 1a2b3c4d)``."""
    if host is None:
        return "unknown host"
    name = printable(host.hostname or "unknown host")
    return f"{name} (machine {host.machine[:8]})" if host.machine else name


def new_session_id(host: HostIdentity, now: float | None = None) -> str:
    """``20250102T030405.678Z-<host>-<6 hex>``: sorts by start time (UTC, to the
    millisecond), names the host, and never collides with another session started at the same
    moment on the same host."""
    moment = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(moment))
    millis = int(moment * 1000) % 1000
    name = safe_name(host.hostname or "host", default="host", max_length=40)
    return f"{stamp}.{millis:03d}Z-{name}-{secrets.token_hex(3)}"


def session_state(exitstatus: int, stopped: str | None = None) -> str:
    """``finished``, or why the session did not run everything it collected."""
    if stopped and exitstatus not in (2, 3, 4):
        return f"stopped early: {stopped}"
    return _EXIT_STATES.get(exitstatus, f"ended with exit status {exitstatus}")


def sha256_regular(path: Path) -> str:
    """SHA-256 of a regular file, opened without following a link or blocking on a FIFO."""
    digest = hashlib.sha256()
    fd = open_regular(path, os.O_RDONLY)
    try:
        while block := os.read(fd, 1 << 20):
            digest.update(block)
    finally:
        os.close(fd)
    return digest.hexdigest()


def receipt_files(folder: Path) -> list[Path]:
    """The receipts directly in a session folder: ``*.json`` but the index, hidden files not."""
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix == ".json" and p.name != INDEX_NAME and not p.name.startswith(".")
    )


@dataclass(frozen=True, slots=True)
class SourceChange(Record):
    """A source tree whose work tree changed during the session (``source_changes`` of the
    index): its revision, diff SHA-256 and untracked count as the receipts recorded them, and
    as the session's end found them. Git is read once per session and tree, so the receipts
    then record one state that is not the whole session's."""

    tree: str
    revision: str | None
    diff_sha256: str | None
    untracked_count: int
    revision_at_end: str | None
    diff_sha256_at_end: str | None
    untracked_count_at_end: int
    #: The tree's folders the comparison left out, relative to it: what the session itself
    #: writes (goldens, pytest's basetemp, ...); the digests above are of the diff without them.
    excluded: tuple[str, ...] = spec((), omit="empty")

    def text(self) -> str:
        """One line: which tree, what changed, and what that means for the evidence."""
        parts = []
        if self.revision_at_end != self.revision:
            parts.append(
                f"revision {(self.revision or '')[:12]} -> {(self.revision_at_end or '')[:12]}"
            )
        if self.diff_sha256_at_end != self.diff_sha256:
            was, now = (self.diff_sha256 or "")[:12], (self.diff_sha256_at_end or "")[:12]
            parts.append(f"diff {was} -> {now}")
        if self.untracked_count_at_end != self.untracked_count:
            parts.append(f"untracked files {self.untracked_count} -> {self.untracked_count_at_end}")
        what = ", ".join(parts) or "untracked files renamed"
        if self.excluded:  # the session's own folders, which it may write
            what += f"; {', '.join(self.excluded)} left out"
        return printable(
            f"the source tree {self.tree} changed during the session ({what}): the receipts "
            "do not describe one source state (a test, a model run or an editor wrote into "
            "the tree while the session ran)"
        )


@dataclass(frozen=True, slots=True)
class IndexTest(Record):
    """One gate test the session collected (or any test that wrote a receipt): what became
    of it, and its receipt's file name (None: it wrote none)."""

    test_id: str
    gate: bool
    outcome: str
    receipt: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class SummaryFile(Record):
    """A file the index vouches for by its SHA-256 alone: the session's ``SUMMARY.md``."""

    file: str
    sha256: str | None


@dataclass(frozen=True, slots=True)
class IndexFile(Record):
    """A receipt the index vouches for by its SHA-256, with the test that wrote it."""

    file: str
    sha256: str | None
    test_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionIndex(Record):
    """A session's ``INDEX.json`` (schema :data:`INDEX_VERSION`), written by the records'
    serialiser (:mod:`..core.records`) and read leniently after :func:`load_index` checked its
    schema and lists.

    ``source`` and ``shard`` are the JSON of the records that made them (the provenance's
    source identity, the shard split), kept as read: ``verify`` judges what the file says;
    ``hmac`` is only read, from an index an older pytest-lossless signed with a key inside the
    session."""

    schema: str = spec(derive=lambda _: INDEX_SCHEMA)
    schema_version: int = spec(derive=lambda _: INDEX_VERSION)
    session_id: str
    host: HostIdentity | None
    started_at: str | None
    ended_at: str | None
    finished: bool
    state: str | None
    exitstatus: int | None
    mode: str | None
    workers: int
    rootdir: str | None
    source: JsonObject | None
    tests: tuple[IndexTest, ...]
    receipts: tuple[IndexFile, ...]
    summary: SummaryFile | None
    unsignable: str | None = spec(None, omit="empty")
    shard: JsonObject | None = spec(None, omit="empty")
    hmac: JsonObject | None = spec(None, omit="none")
    #: The trees that changed while the session ran (:class:`SourceChange`); written when any.
    source_changes: tuple[SourceChange, ...] = spec((), omit="empty")

    @classmethod
    def read(cls, data: object) -> SessionIndex:
        """An index read leniently: a value of the wrong type reads as absent (what
        :func:`load_index` gives, once it checked the schema and the lists)."""
        return read_record(cls, data, problems=[])


def build_index(
    folder: Path | str,
    *,
    session_id: str,
    host: HostIdentity | None = None,
    started_at: str | None = None,
    ended_at: str | None = None,
    rootdir: str | None = None,
    source: JsonObject | None = None,
    tests: Iterable[IndexTest] = (),
    exitstatus: int = 0,
    state: str | None = None,
    mode: str = "lossless",
    workers: int = 0,
    digests: Mapping[str, str] | None = None,
    unsignable: str | None = None,
    shard: JsonObject | None = None,
    source_changes: Iterable[SourceChange] = (),
) -> SessionIndex:
    """The index of ``folder`` as it is now: every receipt in it hashed, the ``SUMMARY.md``
    hashed (``null`` when there is none), and ``tests``, one entry per gate test the session
    collected (``test_id``, ``gate``, ``outcome``, ``receipt`` file name or ``null``,
    ``reason``). ``mode`` is what the session did with its gates: ``lossless`` (compared),
    ``update-goldens`` (wrote goldens; a gate test then may write no receipt),
    ``update-goldens+lossless``, or ``off`` (gates skipped). ``digests``: receipt file name ->
    the SHA-256 the session held in memory when it wrote it (listed instead of what the file
    holds now). ``unsignable``: why the session must not be signed (a process it started
    outlived it, a receipt changed on disk while it ran). ``shard`` (``--lossless-shard``:
    index, count, source, the selection split) is recorded when given, and so are
    ``source_changes``: the trees that changed while the session ran."""
    folder = Path(folder)
    entries = sorted(tests, key=lambda t: t.test_id)
    by_receipt = {t.receipt: t.test_id for t in entries if t.receipt}
    known = dict(digests or {})
    receipts = tuple(
        IndexFile(p.name, known.get(p.name) or sha256_regular(p), by_receipt.get(p.name))
        for p in receipt_files(folder)
    )
    summary_path = folder / SUMMARY_NAME
    summary = (
        SummaryFile(SUMMARY_NAME, sha256_regular(summary_path))
        if os.path.lexists(summary_path)
        else None
    )
    state = state if state is not None else session_state(exitstatus)
    return SessionIndex(
        session_id=session_id,
        host=host if host is not None else host_identity(),
        started_at=started_at or utc_iso(),
        ended_at=ended_at or utc_iso(),
        finished=state == "finished",
        state=state,
        exitstatus=exitstatus,
        mode=mode,
        workers=workers,
        rootdir=rootdir,
        source=dict(source) if source is not None else None,
        tests=tuple(entries),
        receipts=receipts,
        summary=summary,
        unsignable=unsignable,
        shard=dict(shard) if shard is not None else None,
        source_changes=tuple(source_changes),
    )


def write_index(folder: Path | str, index: SessionIndex) -> Path:
    """Write ``<folder>/INDEX.json`` atomically (a reader sees none or all of it)."""
    path = Path(folder) / INDEX_NAME
    faults.write("write-session-index", path)
    write_json_atomic(path, index.to_json())
    return path


def load_index(path: Path | str) -> SessionIndex:
    """An index as written; :class:`ReceiptError` naming the file when it cannot be used."""
    path = Path(path)
    try:
        data = loads_bounded(read_regular(path, limit=MAX_INDEX_BYTES))
    except OSError as exc:
        raise ReceiptError(
            f"{path}: cannot read the session's index: {exc.strerror or exc}", path=path
        ) from None
    except ValueError as exc:
        raise ReceiptError(
            f"{path}: not valid JSON ({exc}); the index is damaged or was edited by hand",
            path=path,
        ) from None
    if not isinstance(data, dict) or data.get("schema") != INDEX_SCHEMA:
        raise ReceiptError(
            f'{path}: not a pytest-lossless session index (no "schema": "{INDEX_SCHEMA}")',
            path=path,
        )
    if data.get("schema_version") != INDEX_VERSION:
        raise ReceiptError(
            f"{path}: index schema version {data.get('schema_version')!r}; this "
            f"pytest-lossless reads version {INDEX_VERSION}: use the version that wrote it",
            path=path,
        )
    for name in ("receipts", "tests"):
        if not isinstance(data.get(name), list) or not all(isinstance(e, dict) for e in data[name]):
            raise ReceiptError(f"{path}: {name!r} is not a list of entries", path=path)
    return SessionIndex.read(data)


__all__ = [
    "HOST_ENV",
    "INDEX_NAME",
    "OK_WITHOUT_RECEIPT",
    "HostIdentity",
    "IndexFile",
    "IndexTest",
    "SessionIndex",
    "SourceChange",
    "SummaryFile",
    "build_index",
    "host_identity",
    "host_label",
    "load_index",
    "new_session_id",
    "receipt_files",
    "session_state",
    "write_index",
]
