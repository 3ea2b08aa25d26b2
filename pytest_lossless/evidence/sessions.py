"""Sessions under ``verify``: each session folder is complete as its index says, and the
sessions of several folders, hosts or CI shards merge into one campaign.

A session folder is any folder that holds receipts or an ``INDEX.json``. Each must have its
index (:mod:`.index`); against it, a missing, added or changed receipt, a missing or changed
``SUMMARY.md``, a gate test that ran without a receipt and a session that did not finish are
named. Within one session, and across the shards of one campaign, records of more than one
source revision are refused unless asked; sessions of different revisions (ordinary use across
commits) are each judged on their own, and ``--revision`` requires one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.text import printable
from ..errors import ReceiptError
from ..goldens.accept import EXPORT_JSON  # an export folder's file: its receipts are copies
from .arm_sources import arm_source_lines
from .crosscheck import check_index_outcomes, check_session_canaries
from .index import (
    INDEX_NAME,
    OK_WITHOUT_RECEIPT,
    SUMMARY_NAME,
    HostIdentity,
    IndexFile,
    SessionIndex,
    host_label,
    load_index,
    sha256_regular,
)
from .provenance import SourceState
from .receipts import ReceiptRecord
from .shards import ShardedSession, shard_findings, shard_lines

Loaded = Mapping[Path, "ReceiptRecord | ReceiptError"]
INCOMPLETE = "INCOMPLETE"
#: Said, not wrong: does not fail ``verify``.
NOTE = "note:"
CONTRADICTION = "CONTRADICTION"
NO_REVISION = "no git revision"


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a session: evidence missing (``INCOMPLETE``) or evidence that
    disagrees with its index (``CONTRADICTION``)."""

    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.kind} {self.text}"


@dataclass
class Session:
    """A session folder as found: its index (``None`` when missing or unreadable), its
    receipts as loaded, and what is wrong with it."""

    folder: Path
    index: SessionIndex | None
    receipts: dict[Path, ReceiptRecord | ReceiptError]
    findings: list[Finding] = field(default_factory=list)

    @property
    def session_id(self) -> str:
        return (self.index.session_id if self.index else "") or self.folder.name

    @property
    def finished(self) -> bool:
        return self.index is not None and self.index.finished

    @property
    def host(self) -> HostIdentity | None:
        if self.index is not None and self.index.host is not None:
            return self.index.host
        for receipt in self._receipts():
            if receipt.host is not None:
                return receipt.host
        return None

    def sources(self) -> dict[str, bool]:
        """Source revision -> whether any record of it here was dirty."""
        found: dict[str, bool] = {}
        for _, revision, block in self.source_blocks():
            found[revision] = found.get(revision, False) or bool(block.dirty)
        return found

    def source_blocks(self) -> list[tuple[str, str, SourceState]]:
        """(where: ``INDEX.json`` or a receipt's file name, revision, source block) of each
        record of the rootdir's source here."""
        blocks: list[tuple[str, object]] = [(INDEX_NAME, self.index.source if self.index else None)]
        for path, receipt in self.receipts.items():
            if isinstance(receipt, ReceiptRecord):
                blocks.append((path.name, receipt.source))
        return [
            (where, state.revision or NO_REVISION, state)
            for where, block in blocks
            if isinstance(block, Mapping)
            and "revision" in block
            and (state := SourceState.read(block)) is not None
        ]

    def mixed(self) -> str | None:
        """How the records here split over revisions, when more than one: ``abc in INDEX.json
        and 3 receipts; def in 1 receipt``."""
        places: dict[str, list[str]] = {}
        for where, revision, _ in self.source_blocks():
            places.setdefault(revision, []).append(where)
        if len(places) < 2:
            return None
        return "; ".join(f"{_short(rev)} in {_places(names)}" for rev, names in places.items())

    def _receipts(self) -> list[ReceiptRecord]:
        return [r for r in self.receipts.values() if isinstance(r, ReceiptRecord)]


def _places(names: list[str]) -> str:
    receipts = sum(1 for n in names if n != INDEX_NAME)
    shown = [INDEX_NAME] if INDEX_NAME in names else []
    if receipts:
        shown.append(f"{receipts} receipt{'s' if receipts != 1 else ''}")
    return " and ".join(shown)


def group_sessions(
    directory: Path, loaded: Loaded
) -> dict[Path, dict[Path, ReceiptRecord | ReceiptError]]:
    """Session folder -> its receipts, for every folder under ``directory`` that holds a
    receipt or an index (``directory`` itself included)."""
    groups: dict[Path, dict[Path, ReceiptRecord | ReceiptError]] = {}
    for index in sorted(directory.rglob(INDEX_NAME)):
        groups.setdefault(index.parent, {})
    for path, receipt in loaded.items():
        groups.setdefault(path.parent, {})[path] = receipt
    return dict(sorted(groups.items()))


def check_session(folder: Path, receipts: Loaded) -> Session:
    """The session of ``folder`` checked against its index (see the module's docstring)."""
    session = Session(folder, None, dict(receipts))
    found = session.findings
    index_path = folder / INDEX_NAME
    if not index_path.exists() and not index_path.is_symlink():
        found.append(
            Finding(
                INCOMPLETE,
                f"{folder}: no {INDEX_NAME}: a session writes its index when it ends, so "
                "this session was killed or is still running, or its receipts were put here "
                "by hand; without the index no one can tell whether a receipt is missing",
            )
        )
        return session
    try:
        index = session.index = load_index(index_path)
    except ReceiptError as exc:
        found.append(Finding(CONTRADICTION, str(exc)))
        return session
    label = f"{folder} (session {printable(index.session_id)})"
    if index.session_id != folder.name:
        found.append(
            Finding(
                CONTRADICTION,
                f"{folder}: the folder of session {printable(index.session_id)} was "
                "renamed (or a session was copied in under another name): a session folder "
                "keeps the name its session gave it",
            )
        )
    if index.hmac:
        found.append(
            Finding(
                NOTE,
                f"{index_path}: carries an HMAC from an older pytest-lossless; HMACs are no "
                "longer checked (the key was inside the session): sign the session instead, "
                "python -m pytest_lossless sign",
            )
        )
    if index.unsignable:
        found.append(
            Finding(
                INCOMPLETE,
                f"{label}: cannot be signed: {printable(index.unsignable)}",
            )
        )
    for change in index.source_changes:
        found.append(Finding(CONTRADICTION, f"{label}: {change.text()}"))
    if not index.finished:
        found.append(
            Finding(
                INCOMPLETE,
                f"{label}: the session did not finish ({printable(index.state)}, exit "
                f"status {index.exitstatus}): its evidence is incomplete",
            )
        )
    listed = _check_receipts(session, label)
    _check_tests(session, label, listed)
    for text in [*check_index_outcomes(index.tests, receipts), *check_session_canaries(receipts)]:
        found.append(Finding(CONTRADICTION, text))
    _check_summary_hash(session, label)
    return session


def _check_receipts(session: Session, label: str) -> dict[str, IndexFile]:
    found = session.findings
    listed: dict[str, IndexFile] = {}
    for entry in session.index.receipts if session.index else ():
        name = entry.file
        if not name or Path(name).name != name or name in (".", ".."):
            found.append(Finding(CONTRADICTION, f"{label}: the index lists {name!r}"))
            continue
        listed[name] = entry
    present = {path.name: path for path in session.receipts}
    for name in sorted(set(listed) - set(present)):
        found.append(
            Finding(
                INCOMPLETE,
                f"{session.folder / name}: listed in {INDEX_NAME} but missing: the receipt of "
                f"{printable(listed[name].test_id or 'a test')} was deleted or never "
                "copied",
            )
        )
    for name in sorted(set(present) - set(listed)):
        found.append(
            Finding(
                CONTRADICTION,
                f"{present[name]}: a receipt {INDEX_NAME} does not list: added after its "
                "session ended, or copied from another session",
            )
        )
    session_id = session.index.session_id if session.index else None
    index_host = session.index.host if session.index else None
    for name in sorted(set(present) & set(listed)):
        path, entry = present[name], listed[name]
        try:
            actual = sha256_regular(path)
        except OSError as exc:
            found.append(Finding(CONTRADICTION, f"{path}: cannot be hashed: {exc}"))
            continue
        if actual != entry.sha256:
            found.append(
                Finding(
                    CONTRADICTION,
                    f"{path}: SHA-256 {actual} differs from {entry.sha256} in "
                    f"{INDEX_NAME}: the receipt was changed after its session ended",
                )
            )
        receipt = session.receipts[path]
        if not isinstance(receipt, ReceiptRecord):
            continue
        if entry.test_id and entry.test_id != receipt.test_id:
            found.append(
                Finding(
                    CONTRADICTION,
                    f"{path}: {INDEX_NAME} lists it as the receipt of "
                    f"{printable(entry.test_id)}, but it holds the receipt of "
                    f"{printable(receipt.test_id)}",
                )
            )
        runspec = receipt.runspec or {}
        if runspec.get("session_id") not in (None, session_id):
            found.append(
                Finding(
                    CONTRADICTION,
                    f"{path}: written by session {printable(runspec['session_id'])}, not by "
                    f"{printable(session_id)} whose folder holds it",
                )
            )
        host = receipt.host
        if host is not None and host.key != (index_host.key if index_host else ("", "")):
            found.append(
                Finding(
                    CONTRADICTION,
                    f"{path}: written on {host_label(host)}, but its session ran on "
                    f"{host_label(index_host)}",
                )
            )
    return listed


def _check_tests(session: Session, label: str, listed: Mapping[str, IndexFile]) -> None:
    if session.index is None:
        return
    # Writing goldens compares nothing, so a gate test of such a session may leave no receipt.
    updating = "update-goldens" in str(session.index.mode)
    for test in session.index.tests:
        test_id = printable(test.test_id)
        receipt, outcome = test.receipt, test.outcome
        if not receipt and test.gate and outcome not in OK_WITHOUT_RECEIPT and not updating:
            reason = f" ({printable(test.reason)})" if test.reason else ""
            session.findings.append(
                Finding(
                    INCOMPLETE,
                    f"{label}: gate test {test_id} was collected and is {outcome}{reason}, "
                    "but wrote no receipt",
                )
            )
        elif receipt and str(receipt) not in listed:
            session.findings.append(
                Finding(
                    CONTRADICTION,
                    f"{label}: gate test {test_id} wrote {printable(receipt)}, which "
                    f"{INDEX_NAME} does not list among the session's receipts",
                )
            )


def _check_summary_hash(session: Session, label: str) -> None:
    entry = session.index.summary if session.index else None
    path = session.folder / SUMMARY_NAME
    if entry is None:
        session.findings.append(
            Finding(INCOMPLETE, f"{label}: {INDEX_NAME} records no {SUMMARY_NAME}")
        )
        return
    if not path.exists() and not path.is_symlink():
        session.findings.append(
            Finding(
                INCOMPLETE,
                f"{path}: missing ({INDEX_NAME} records SHA-256 {entry.sha256}); "
                f"regenerate it with: python -m pytest_lossless summary --write {session.folder}",
            )
        )
        return
    try:
        actual = sha256_regular(path)
    except OSError as exc:
        session.findings.append(Finding(CONTRADICTION, f"{path}: cannot be hashed: {exc}"))
        return
    if actual != entry.sha256:
        session.findings.append(
            Finding(
                CONTRADICTION,
                f"{path}: SHA-256 {actual} differs from {entry.sha256} in "
                f"{INDEX_NAME}: the summary was changed after its session ended",
            )
        )


@dataclass
class Campaign:
    """Every session of the folders verified together, and what they say as a whole."""

    sessions: list[Session]
    findings: list[Finding]
    #: Receipts given as files, or copies in an export: their session's index is not here.
    single_files: list[Path] = field(default_factory=list)
    #: What is said without failing (an old index's HMAC).
    notes: list[Finding] = field(default_factory=list)
    #: Set by ``verify --attestation``: how many sessions a verified signature covers (-1: the
    #: check found problems).
    signed: int | None = None

    def revisions(self) -> dict[str, list[Session]]:
        seen: dict[str, list[Session]] = {}
        for session in self.sessions:
            for revision in session.sources():
                seen.setdefault(revision, []).append(session)
        return seen

    def hosts(self) -> dict[str, list[Session]]:
        seen: dict[str, list[Session]] = {}
        for session in self.sessions:
            seen.setdefault(host_label(session.host), []).append(session)
        return seen

    def seen_lines(self) -> list[str]:
        """The sessions, hosts and source revisions seen, and what the hashes prove."""
        finished = sum(1 for s in self.sessions if s.finished)
        hosts = self.hosts()
        lines = [
            f"sessions: {len(self.sessions)} ({finished} finished) on {len(hosts)} "
            f"host{'s' if len(hosts) != 1 else ''}"
        ]
        for name, sessions in sorted(hosts.items()):
            receipts = sum(len(s.receipts) for s in sessions)
            lines.append(f"  host {name}: {_count(sessions)}, {receipts} receipts")
        revisions = self.revisions()
        lines.append(f"source revisions: {len(revisions)} (of the rootdir)")
        for revision, sessions in sorted(revisions.items()):
            dirty = sum(1 for s in sessions if s.sources().get(revision))
            state = f"dirty in {dirty}" if dirty else "clean"
            blocks = [b for s in sessions for _, r, b in s.source_blocks() if r == revision]
            published = sorted({b.publication_word for b in blocks})
            shown = ", ".join([state, " / ".join(published)] if published else [state])
            lines.append(f"  {_short(revision)}: {_count(sessions)} ({shown})")
        for session in self.sessions:
            if (mixed := session.mixed()) is not None:
                count = mixed.count(";") + 1
                lines.append(f"  session {session.session_id} holds {count} revisions: {mixed}")
        lines += shard_lines(_sharded(self.sessions))
        lines += arm_source_lines(r for s in self.sessions for r in s._receipts())
        for path in self.single_files:
            lines.append(f"note: {path} is one receipt: its session's index was not checked")
        lines += [str(note) for note in self.notes]
        if self.signed == -1:
            lines.append("integrity: the attestation check failed: see above")
        elif self.signed is not None:
            lines.append(
                f"integrity: signed: {self.signed} session(s) checked against Statements "
                "whose ed25519 signatures verify with the given key: each was signed by the "
                "holder of its private key"
            )
        else:
            lines.append(
                "integrity: SHA-256 only (no --attestation): the hashes show that receipts, "
                "indexes and summaries were not changed by accident since their sessions "
                "wrote them; they do not prove who wrote them (anyone can recompute a "
                "SHA-256). For that, sign the sessions (python -m pytest_lossless sign DIR "
                "--key KEY) and verify with --attestation FILE --key PUBKEY"
            )
        return lines


def _sharded(sessions: list[Session]) -> list[ShardedSession]:
    return [ShardedSession(f"{s.folder} (session {s.session_id})", s.index) for s in sessions]


def _short(revision: str) -> str:
    return printable(revision if revision == NO_REVISION else revision[:12])


def _count(sessions: list[Session]) -> str:
    return f"{len(sessions)} session{'s' if len(sessions) != 1 else ''}"


def export_root(path: Path, top: Path) -> Path | None:
    """The export folder (``--lossless-export``) ``path`` lies in, at or below ``top``."""
    for folder in (path, *path.parents):
        if (folder / EXPORT_JSON).is_file():
            return folder
        if folder == top:
            break
    return None


def revision_findings(loaded: Loaded, sessions: list[Session], revision: str) -> list[Finding]:
    """Every record of the rootdir's source that does not show ``revision`` (a full SHA or a
    prefix of at least 7 hex digits): each receipt's RunSpec and each session's index."""
    wanted = revision.lower()
    found: list[Finding] = []

    def check(where: str, block: Any) -> None:
        shown = str(block.get("revision") or "") if isinstance(block, Mapping) else ""
        if not shown or not shown.lower().startswith(wanted):
            found.append(
                Finding(
                    CONTRADICTION,
                    f"{where}: source revision {_short(shown or NO_REVISION)}, but "
                    f"--revision {printable(revision)} is required",
                )
            )

    for path, receipt in loaded.items():
        if isinstance(receipt, ReceiptRecord):
            check(str(path), receipt.source)
    for session in sessions:
        if session.index is not None:
            check(str(session.folder / INDEX_NAME), session.index.source)
    return found


def check_campaign(
    loaded_by_folder: Mapping[Path, Loaded],
    *,
    allow_mixed_revisions: bool = False,
    revision: str | None = None,
) -> Campaign:
    """Every session under the given folders checked, then the campaign as a whole: one
    session found in two folders is a contradiction (it counts once); one session, or the
    shards of one campaign, of more than one source revision are refused unless
    ``allow_mixed_revisions`` (sessions of different revisions are not: each is judged on its
    own, and a note says so); with ``revision``, every record must show that revision. An
    export's copies of receipts are loose receipts, not sessions."""
    sessions: list[Session] = []
    singles: list[Path] = []
    for directory, loaded in loaded_by_folder.items():
        if directory.is_file():
            singles.append(directory)
            continue
        for folder, receipts in group_sessions(directory, loaded).items():
            if not (folder / INDEX_NAME).exists() and export_root(folder, directory):
                singles += sorted(receipts)
                continue
            sessions.append(check_session(folder, receipts))
    findings = [f for s in sessions for f in s.findings if f.kind != NOTE]
    notes = [f for s in sessions for f in s.findings if f.kind == NOTE]
    campaign = Campaign(sessions, findings, singles, notes)
    by_id: dict[str, list[Session]] = {}
    for session in sessions:
        if session.index is not None:
            by_id.setdefault(session.session_id, []).append(session)
    for session_id, copies in sorted(by_id.items()):
        if len(copies) > 1:
            campaign.findings.append(
                Finding(
                    CONTRADICTION,
                    f"session {printable(session_id)} is in {len(copies)} folders "
                    f"({', '.join(str(s.folder) for s in copies)}): one session counts once; a "
                    "copy may stand in for a session that failed or is missing",
                )
            )
    if revision is not None:
        merged = {p: r for loaded in loaded_by_folder.values() for p, r in loaded.items()}
        campaign.findings += revision_findings(merged, sessions, revision)
    for session in sessions if not allow_mixed_revisions else ():
        if (mixed := session.mixed()) is not None:
            campaign.findings.append(
                Finding(
                    CONTRADICTION,
                    f"{session.folder} (session {printable(session.session_id)}): one session "
                    f"folder holds {mixed.count(';') + 1} revisions ({mixed}): the rootdir's "
                    "HEAD moved while the session ran, or a receipt was copied in from another "
                    "session; pass --allow-mixed-revisions to accept it",
                )
            )
    for problem in shard_findings(_sharded(sessions)):  # each shard of N there once, finished
        kind = INCOMPLETE if problem.incomplete else CONTRADICTION
        campaign.findings.append(Finding(kind, problem.text))
    # Sessions of several revisions are ordinary use across commits, each judged on its own;
    # the shards of one campaign split one selection of one revision, so they must agree.
    shards = Campaign(
        [s for s in sessions if s.index is not None and s.index.shard is not None], []
    )
    revisions = shards.revisions()
    if len(revisions) > 1 and not allow_mixed_revisions:
        seen = "; ".join(
            f"{_short(rev)} in {', '.join(s.session_id for s in found)}"
            for rev, found in sorted(revisions.items())
        )
        campaign.findings.append(
            Finding(
                CONTRADICTION,
                f"the sharded sessions are of {len(revisions)} source revisions ({seen}): "
                "the shards of a campaign split one revision's tests; verify each campaign "
                "apart, or pass --allow-mixed-revisions",
            )
        )
    elif len(campaign.revisions()) > 1 and revision is None:
        campaign.notes.append(
            Finding(
                NOTE,
                f"the sessions are of {len(campaign.revisions())} source revisions: each "
                "session is judged on its own revision; pass --revision REV to require one",
            )
        )
    return campaign


# --- pruning old sessions (lossless_receipts_keep) --------------------------------------------


@dataclass(frozen=True)
class StoredSession:
    """A finished or unfinished session folder under the receipts root, as pruning sees it."""

    folder: Path
    session_id: str
    #: When it started (``started_at`` of its index, else its id, which starts with the time).
    started: str
    finished: bool
    host: HostIdentity | None
    #: A ``sign`` output names it (a bundle's envelope or an unsigned Statement).
    signed: bool


def sessions_to_prune(
    stored: list[StoredSession], *, keep: int, host: HostIdentity, current: str
) -> list[StoredSession]:
    """The session folders to remove so that the last ``keep`` remain (``keep`` 0: none):
    of the ones older than the ``keep`` newest, only the finished sessions of ``host`` that
    no ``sign`` output names, and never ``current``. Pure: it removes nothing."""
    if keep <= 0:
        return []
    newest = sorted(stored, key=lambda s: (s.started, s.session_id), reverse=True)
    return [
        s
        for s in newest[keep:]
        if s.finished
        and not s.signed
        and s.session_id != current
        and s.host is not None
        and s.host.key == host.key
    ]


def stored_sessions(root: Path, signed: set[str]) -> list[StoredSession]:
    """Every session folder directly under ``root`` that holds a readable index (a folder
    that is a link, or whose index is a link or cannot be read, is left out: never pruned)."""
    found: list[StoredSession] = []
    try:
        children = sorted(root.iterdir())
    except OSError:
        return found
    for folder in children:
        if folder.is_symlink() or not folder.is_dir():
            continue
        try:
            index = load_index(folder / INDEX_NAME)
        except ReceiptError:
            continue
        session_id = index.session_id
        if session_id != folder.name:
            continue  # renamed or copied in: not a folder this plugin wrote under that name
        found.append(
            StoredSession(
                folder=folder,
                session_id=session_id,
                started=index.started_at or session_id,
                finished=index.finished,
                host=index.host,
                signed=session_id in signed or _signs_inside(folder),
            )
        )
    return found


def _signs_inside(folder: Path) -> bool:
    """A ``sign`` output put into the session folder itself."""
    return any(folder.glob("*.intoto.jsonl")) or any(folder.glob("*.statement.json"))


#: The folders that ``sign`` output is looked for in: ``--out``'s default, under the rootdir.
SIGN_OUT_DEFAULT = "lossless-attestation"
#: How many files the search for ``sign`` output reads at most (a bigger tree keeps all).
_MAX_SIGN_FILES = 10_000


def signed_session_ids(places: list[Path]) -> tuple[set[str], str | None]:
    """The sessions that ``python -m pytest_lossless sign`` output under ``places`` names:
    each envelope of a ``*.intoto.jsonl`` bundle (its Statement read, its signature not
    checked: a key is not needed to keep a session) and each unsigned ``*.statement.json``
    (and the ``<session id>`` folder it was written in). The second value, when not None,
    says why the answer cannot be trusted (a bundle that cannot be read): prune nothing then."""
    import base64
    import json
    import os

    from ..core.paths import read_regular
    from ..core.records import loads_bounded
    from .attest import MAX_BUNDLE_BYTES, statement_session

    ids: set[str] = set()
    seen = 0
    for place in places:
        if place.is_symlink() or not place.is_dir():
            continue
        for here, dirs, files in os.walk(place):  # links to folders are not followed
            dirs.sort()
            for name in sorted(files):
                if not (name.endswith(".intoto.jsonl") or name.endswith(".statement.json")):
                    continue
                seen += 1
                path = Path(here) / name
                if seen > _MAX_SIGN_FILES:
                    return ids, f"more than {_MAX_SIGN_FILES} signing files under {place}"
                try:
                    text = read_regular(path, limit=MAX_BUNDLE_BYTES).decode()
                    if name.endswith(".statement.json"):
                        ids.add(Path(here).name)
                        statements = [loads_bounded(text.encode())]
                    else:
                        statements = [
                            loads_bounded(base64.b64decode(json.loads(line)["payload"]))
                            for line in text.splitlines()
                            if line.strip()
                        ]
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    return ids, f"{path} cannot be read ({exc}), so no session is pruned"
                for statement in statements:
                    if isinstance(statement, dict) and (sid := statement_session(statement)):
                        ids.add(sid)
    return ids, None


__all__ = [
    "EXPORT_JSON",
    "Campaign",
    "Finding",
    "Session",
    "StoredSession",
    "check_campaign",
    "check_session",
    "group_sessions",
    "sessions_to_prune",
    "signed_session_ids",
    "stored_sessions",
]
