"""``accept``: goldens written from an export, as ``--update-goldens`` would have on its machine.

An export (``--lossless-export DIR``, :mod:`..evidence.export`) holds the obtained artifacts of
every failing or new check of a session, with ``export.json``: per artifact its test, gate, kind
and fingerprint, the runs that produced it and whether they agreed, and the test's receipt.
:func:`accept` writes goldens from it through the same machinery as ``--update-goldens``
(:meth:`~.goldens.GoldenFolder.stage` and :meth:`~.goldens.GoldenFolder.commit`: the same
manifest entries, with the provenance of the machine that ran the test, the same atomic folder
swap), for the artifacts that pass every rule below; every other one is refused, with why:

- it came from a producer that ran at least twice and every run agreed (the producer rule of
  ``--update-goldens``: a flaky run is never baked into a golden);
- its receipt passes ``verify`` (the caller's ``receipt_problems``) and records the same
  fingerprint for it;
- the file in the export still has the SHA-256 and fingerprint the export names;
- its gate is the one frozen with the golden, if there is one (a gate is changed by
  ``--update-goldens`` only, deliberately).

The goldens of a test that the export does not name are kept as they are (an export holds only
what failed or was new); each accepted test folder is replaced whole, once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import faults
from ..core.artifact import Artifact
from ..core.digests import canonical_sha256, sha256_file
from ..core.paths import inside_root, is_under, read_regular
from ..core.records import (
    JsonObject,
    Record,
    RecordError,
    from_json,
    json_object,
    json_objects,
    loads_bounded,
    meta,
    spec,
)
from ..core.text import printable
from ..errors import LosslessError
from .layout import split_test_id
from .manifest import artifact_name
from .scope import Environment
from .swap import UpdateEvent

if TYPE_CHECKING:  # the export's records are read by every session (plugin.export): light
    from ..kinds.registry import KindRegistry
    from .folder import GoldenFolder

__all__ = [
    "EXPORT_JSON",
    "EXPORT_SCHEMA",
    "MAX_EXPORT_BYTES",
    "Decision",
    "ExportEntry",
    "ExportError",
    "accept",
    "golden_names",
    "keyword_matcher",
    "read_export",
]

#: The index of an export folder, and the schema this version writes and reads.
EXPORT_JSON = "export.json"
EXPORT_SCHEMA = 1
#: The largest ``export.json`` read (it names files; the artifacts lie beside it).
MAX_EXPORT_BYTES = 64 << 20


class ExportError(LosslessError):
    """An export folder that cannot be read (``path``: the folder or its ``export.json``)."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(printable(f"{self.path}: {problem}"))


@dataclass(frozen=True, slots=True)
class RunDigest(Record):
    """One run of an exported artifact, by its digests (:mod:`..plugin.export` writes them);
    the receipt's export block records the same runs, which ``accept`` checks."""

    name: str
    sha256: str | None
    fingerprint_sha256: str

    @classmethod
    def of(cls, name: str, artifact: Artifact) -> RunDigest:
        """The digests of a run's artifact."""
        digest = artifact.fingerprint.get("sha256")
        if not (isinstance(digest, str) and len(digest) == 64):
            digest = None if artifact.path is None else sha256_file(artifact.path)
        return cls(name, digest, canonical_sha256(artifact.fingerprint))


def _unnamed(golden: GoldenTarget) -> bool:
    return golden.module is None or golden.test_name is None


@dataclass(frozen=True, slots=True)
class GoldenTarget(Record):
    """Where a ``golden.check``'s export goes when accepted: the test's golden folder, the gate
    the test asked for, the provenance it would be written with, its scope (its keys sit
    beside the entry's; module and test_name only when both are known)."""

    module: str | None = spec(None, omit=_unnamed)
    test_name: str | None = spec(None, omit=_unnamed)
    folder: str = ""
    requested_gate: str | None = None
    provenance: JsonObject = spec(default_factory=dict)
    scope: str = "all"
    environment: Environment | None = None
    #: What varied between the runs of its producer ("" when they agreed).
    varied: str = ""


@dataclass(frozen=True, slots=True)
class Location(Record):
    """The test's file and line (1-based; None when pytest does not know it)."""

    file: str
    line: int | None


@dataclass(frozen=True, slots=True)
class ExportEntry(Record):
    """One exported artifact: an entry of ``export.json`` (:mod:`..plugin.export` writes it,
    ``accept`` reads it back: :meth:`read`). ``golden``: a ``golden.check``'s;
    ``label``/``run``: a ``lossless.compare``'s. ``size`` None: no file was copied."""

    test: str
    artifact: str
    source: str
    status: str
    message: str
    file: str | None
    sha256: str | None
    size: int | None = field(metadata=meta(omit="none"))
    gate: str | None
    kind: str | None
    fingerprint: JsonObject
    runs: tuple[RunDigest, ...]
    agreed: bool | None
    producer: bool
    location: Location
    golden: GoldenTarget | None = spec(None, flatten=True, read_when=("source", "golden"))
    label: str | None = spec(None, omit="none")
    run: str | None = spec(None, omit="none")
    #: The copy of the test's receipt in the export (the controller's, at the session's end).
    receipt: str | None = None

    @classmethod
    def read(cls, data: object, where: Path) -> ExportEntry:
        """An entry of an untrusted ``export.json``: its types checked, its words non-empty;
        an environment class that cannot be read is None (it refuses its entry alone)."""
        if not isinstance(data, Mapping):
            raise ExportError(where, "an entry of 'entries' is not an object")
        try:
            entry = from_json(cls, {k: v for k, v in data.items() if k != "environment"})
        except RecordError as exc:
            raise ExportError(where, f"an entry is malformed ({exc})") from None
        for key in ("test", "artifact", "source", "status"):
            if not getattr(entry, key):
                raise ExportError(where, f"an entry is malformed ({key} must not be empty)")
        if entry.golden is None:
            return entry
        environment = Environment.checked(data.get("environment"))
        return replace(entry, golden=replace(entry.golden, environment=environment))

    @property
    def target(self) -> GoldenTarget:
        """Where it goes when accepted (a ``lossless.compare``'s: nowhere, the defaults)."""
        return self.golden or GoldenTarget()


@dataclass(frozen=True)
class ExportSettings(Record):
    """The settings of the session that wrote an export (read leniently: what does not fit
    reads as unknown)."""

    control_runs: int | None = None
    digest_above: int | None = None
    goldens: str | None = None


@dataclass(frozen=True)
class ExportDocument:
    """``export.json`` as read: the session it came from and its entries."""

    folder: Path
    entries: list[ExportEntry]
    settings: ExportSettings
    session: str


def read_export(folder: Path | str) -> ExportDocument:
    """The entries of ``folder/export.json``, read within a size and a nesting limit."""
    folder = Path(folder)
    path = folder / EXPORT_JSON
    if not folder.is_dir():
        raise ExportError(folder, "no such export folder")
    try:
        data = loads_bounded(read_regular(path, limit=MAX_EXPORT_BYTES))
    except FileNotFoundError:
        raise ExportError(
            folder, f"holds no {EXPORT_JSON}: it is not a folder --lossless-export wrote"
        ) from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ExportError(path, f"cannot be read ({reason})") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ExportError(path, "has no 'entries' list; it is not a pytest-lossless export")
    if data.get("schema") != EXPORT_SCHEMA:
        raise ExportError(
            path, f"has schema {data.get('schema')!r}; this version reads {EXPORT_SCHEMA}"
        )
    return ExportDocument(
        folder,
        [ExportEntry.read(e, path) for e in data["entries"]],
        from_json(ExportSettings, data.get("settings"), problems=[]),
        str(data.get("session") or ""),
    )


# ------------------------------------------------------------------ -k, as pytest reads it

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def keyword_matcher(expression: str) -> Callable[[str], bool]:
    """``-k EXPR`` as pytest reads it, over test ids: words matched as case-insensitive
    substrings, combined with ``and``, ``or``, ``not`` and parentheses. A bad expression is a
    ``ValueError`` naming it."""
    tokens = [t for t in _TOKEN.findall(expression) if t]
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        token = peek()
        if token is None:
            raise ValueError(f"-k {expression!r}: the expression ends too early")
        position += 1
        return token

    def disjunction() -> Callable[[str], bool]:
        parts = [conjunction()]
        while peek() == "or":
            take()
            parts.append(conjunction())
        return lambda text: any(p(text) for p in parts)

    def conjunction() -> Callable[[str], bool]:
        parts = [negation()]
        while peek() == "and":
            take()
            parts.append(negation())
        return lambda text: all(p(text) for p in parts)

    def negation() -> Callable[[str], bool]:
        if peek() == "not":
            take()
            inner = negation()
            return lambda text: not inner(text)
        token = take()
        if token == "(":
            inner = disjunction()
            if take() != ")":
                raise ValueError(f"-k {expression!r}: a parenthesis is not closed")
            return inner
        if token in (")", "and", "or"):
            raise ValueError(f"-k {expression!r}: unexpected {token!r}")
        word = token.lower()
        return lambda text: word in text.lower()

    if not tokens:
        return lambda text: True
    matcher = disjunction()
    if peek() is not None:
        raise ValueError(f"-k {expression!r}: unexpected {peek()!r}")
    return matcher


# ------------------------------------------------------------------ accepting


@dataclass(frozen=True)
class Decision:
    """What accept did with one exported artifact: an :class:`UpdateEvent` (``created``,
    ``changed``, ``unchanged``, ``conflict``...) or ``refused`` with the reason. ``recovered``:
    not an artifact's, but what an earlier, stopped update of the test's folder left there,
    ``restored``, ``cleaned`` or ``kept`` (``entry`` is then the test's first entry)."""

    entry: ExportEntry
    action: str
    detail: str = ""
    folder: str = ""
    recovered: bool = False

    @property
    def label(self) -> str:
        return f"{self.entry.test} {self.entry.artifact}"

    def to_event(self) -> dict[str, str]:
        entry = self.entry
        name = "" if self.recovered else entry.artifact
        return UpdateEvent(entry.test, self.folder, name, self.action, self.detail).to_dict()


def golden_names(test_id: str) -> tuple[str, str]:
    """The module and test of ``test_id``'s goldens (``<goldens>/<module path>/<test>/``): the
    test file's path under the rootdir without ``.py`` and the rest of the id, as the
    ``golden`` fixture names them (:func:`.layout.split_test_id`). A ``ValueError`` when the id
    names no test of a file."""
    return split_test_id(test_id)


def refusal(entry: ExportEntry, export: Path, receipt_problems: Callable[[Path], list[str]]) -> str:
    """Why ``entry`` may not become a golden, from what ``export.json`` itself says ("" when
    nothing there refuses it). What it claims only ever refuses: :func:`vouched` checks the
    runs against the receipt and the file against its own fingerprint."""
    if entry.source != "golden":
        return (
            f"a {entry.source} result ({entry.status}): a lossless.compare has no golden, so "
            "there is nothing to accept; it is exported for review"
        )
    if not entry.producer or len(entry.runs) < 2:
        return (
            f"produced by {len(entry.runs)} run only: the test handed golden.check a file or "
            "data, not a producer, so nothing shows that its runs agree. Hand it a producer (a "
            "zero-argument callable), or write the golden with --update-goldens"
        )
    if entry.agreed is not True:
        why = f": {entry.target.varied}" if entry.target.varied else ""
        return (
            f"its {len(entry.runs)} runs did not agree{why}; a flaky run is never baked into a "
            "golden"
        )
    if entry.file is None:
        return "the export holds no file for it"
    if entry.receipt is None:
        return "the export names no receipt for it, so nothing vouches for its runs"
    receipt = _inside(export, entry.receipt, "receipt")
    if not receipt.is_file():
        return f"its receipt {receipt} is missing from the export"
    try:
        problems = receipt_problems(receipt)
    except LosslessError as exc:
        return f"its receipt {receipt} cannot be read: {exc}"
    if problems:
        return f"its receipt {receipt} does not pass verify: " + "; ".join(problems[:3])
    path = _inside(export, entry.file, "exported artifact")
    if not path.is_file() or path.is_symlink():
        return f"the exported file {path} is missing"
    actual = sha256_file(path)
    if actual != entry.sha256:
        return (
            f"the exported file {path} has SHA-256 {actual[:16]}... but the export says "
            f"{(entry.sha256 or '')[:16]}...: it was changed after the export was written"
        )
    return ""


def vouched(
    entry: ExportEntry, export: Path, receipt: JsonObject, kinds: KindRegistry
) -> tuple[str, Artifact | None]:
    """The exported file fingerprinted here, when the receipt (which passed ``verify``) vouches
    for it: ``("", artifact)``; else ``(why, None)``.

    The receipt must be the entry's test's, and record the export's re-run of this artifact
    (its ``export`` block, covered by the receipt's integrity hash): the same runs as
    ``export.json`` names, at least two, agreeing; the file must fingerprint, through this
    machine's kinds, to what its first run recorded and to the fingerprint the export names.
    """
    if receipt.get("test_id") != entry.test:
        return (
            f"its receipt is the receipt of {printable(str(receipt.get('test_id')))}, "
            f"not of {entry.test}",
            None,
        )
    blocks = [b for b in json_objects(receipt.get("export")) if b.get("artifact") == entry.artifact]
    if not blocks:
        return (
            "the receipt does not vouch for these runs: it records no re-run of "
            f"{entry.artifact} for the export",
            None,
        )
    block = blocks[-1]
    runs = entry.runs
    if block.get("runs") != [r.to_json() for r in runs]:
        return (
            "the receipt does not vouch for these runs: export.json names other runs than the "
            "receipt records",
            None,
        )
    if block.get("agreed") is not True or len(runs) < 2:
        return f"its receipt records that its {len(runs)} runs did not agree", None
    path = _inside(export, str(entry.file), "exported artifact")
    artifact = kinds.artifact(entry.artifact, path)
    digest = canonical_sha256(artifact.fingerprint)
    if artifact.kind != entry.kind:
        from ..media.detect import kind_noun

        found = kind_noun(artifact.kind)
        return f"the exported file is {found} here, not the {entry.kind} it names", None
    if digest != canonical_sha256(entry.fingerprint):
        return (
            "the exported file does not have the fingerprint the export names (fingerprinted "
            "here): it was changed after the export was written",
            None,
        )
    named = artifact.fingerprint.get("sha256")
    sha256 = named if isinstance(named, str) and len(named) == 64 else sha256_file(path)
    if runs[0].fingerprint_sha256 != digest or runs[0].sha256 != sha256:
        return (
            "the exported file is not the one its receipt records for its first run: it was "
            "changed after the export was written",
            None,
        )
    return "", artifact


def _inside(export: Path, relative: str, what: str) -> Path:
    path = export / relative
    inside_root(path, export, what=what)
    if not is_under(path, export):
        raise ExportError(path, f"names a {what} outside the export folder {export}")
    return path


def _recorded_fingerprint(receipt: JsonObject, name: str) -> JsonObject | None:
    """The obtained fingerprint a receipt's gate block records for ``name`` (None: none)."""
    for gate in json_objects(receipt.get("gates")):
        if gate.get("artifact") == name:
            obtained = json_object(json_object(gate.get("evidence")).get("obtained"))
            fingerprint = obtained.get("fingerprint")
            if isinstance(fingerprint, dict):
                return fingerprint
    return None


def _coverage_missed(receipt: JsonObject, name: str) -> str:
    """What a receipt's request-coverage blocks say ``name`` missed ("" when none failed): an
    output short of what its run was asked for is never written as a golden."""
    for gate in json_objects(receipt.get("gates")):
        if gate.get("artifact") != name:
            continue
        if gate.get("gate") == "coverage" and gate.get("passed") is not True:
            diffs = gate.get("metadata_diffs")
            said = [d for d in diffs if isinstance(d, str)] if isinstance(diffs, list) else []
            return printable("; ".join(said) or "request coverage failed")
    return ""


def _compared_golden(receipt: JsonObject, name: str) -> str | None:
    """The SHA-256 of the golden a receipt's gate block compared ``name`` with (None: none)."""
    for gate in json_objects(receipt.get("gates")):
        if gate.get("artifact") == name:
            sha = json_object(json_object(gate.get("evidence")).get("golden")).get("sha256")
            if isinstance(sha, str):
                return sha
    return None


def _stale(entry: ExportEntry, before: str | None, compared: str | None) -> str:
    """Why the golden on this checkout is not the one the export judged ("" when it is, when
    there is none, or when it already is the exported one): a golden committed since the
    export is never overwritten by it."""
    if before is None or before == entry.sha256:
        return ""
    if entry.status == "new":
        return (
            f"a golden was written since the export (which found none): this checkout holds "
            f"SHA-256 {before[:12]}...; run the gates on this checkout and export again"
        )
    if compared is not None and compared != before:
        return (
            f"the golden changed since the export compared with it (SHA-256 {compared[:12]}..."
            f" then, {before[:12]}... on this checkout): run the gates on this checkout and "
            "export again"
        )
    return ""


def _check(
    entry: ExportEntry,
    export: Path,
    kinds: KindRegistry,
    receipt_problems: Callable[[Path], list[str]],
    load_receipt: Callable[[Path], JsonObject],
) -> tuple[str, Artifact | None]:
    """Every rule of :func:`refusal` and :func:`vouched`, and the receipt's gate block."""
    try:
        golden_names(entry.test)
        artifact_name(entry.artifact)
    except (ValueError, LosslessError) as exc:
        return f"it names no golden of a test: {exc}", None
    why = refusal(entry, export, receipt_problems)
    if why:
        return why, None
    receipt = load_receipt(_inside(export, str(entry.receipt), "receipt"))
    missed = _coverage_missed(receipt, entry.artifact)
    if missed:
        return (
            f"its run missed what it was asked for ({missed}): an output short of its request "
            "is never written as a golden"
        ), None
    recorded = _recorded_fingerprint(receipt, entry.artifact)
    if recorded is not None and canonical_sha256(recorded) != canonical_sha256(entry.fingerprint):
        return "its receipt records another fingerprint for it than the export names", None
    return vouched(entry, export, receipt, kinds)


def accept(
    export: Path | str,
    *,
    goldens: Path,
    rootdir: Path,
    kinds: KindRegistry,
    receipt_problems: Callable[[Path], list[str]],
    load_receipt: Callable[[Path], JsonObject],
    keyword: str | None = None,
    store: Path | None = None,
    digest_above: int | None = None,
    lock_timeout: float = 120.0,
) -> list[Decision]:
    """Write goldens from ``export`` into ``goldens``; one :class:`Decision` per artifact.

    ``goldens``: this project's goldens folder (the caller's; the export's own is never
    used). Each test's folder is derived from its test id (:func:`golden_names`).
    ``receipt_problems(path)``: the contradictions ``verify`` finds in a receipt (empty:
    consistent); ``load_receipt(path)``: the receipt as a mapping. ``keyword``: ``-k``.
    ``digest_above``: default, the export's own setting (what its machine would have kept).
    """
    document = read_export(export)
    folder = document.folder
    wanted = keyword_matcher(keyword) if keyword else None
    above = digest_above if digest_above is not None else document.settings.digest_above
    if above is None:
        above = 1 << 20
    decisions: list[Decision] = []
    chosen: dict[tuple[str, Environment | None], list[tuple[ExportEntry, Artifact]]] = {}
    compared: dict[int, str | None] = {}
    for entry in document.entries:
        if wanted is not None and not wanted(entry.test):
            continue
        try:
            why, artifact = _check(entry, folder, kinds, receipt_problems, load_receipt)
        except LosslessError as exc:  # a path that leads out of the export, say
            why, artifact = str(exc), None
        if why or artifact is None:
            decisions.append(Decision(entry, "refused", why))
            continue
        environment = None
        if entry.target.scope == "device":
            environment = entry.target.environment
            if environment is None:
                why = "a device-scoped golden whose export names no environment class"
                decisions.append(Decision(entry, "refused", why))
                continue
        receipt = load_receipt(_inside(folder, str(entry.receipt), "receipt"))
        compared[id(entry)] = _compared_golden(receipt, entry.artifact)
        chosen.setdefault((entry.test, environment), []).append((entry, artifact))
    faults.point("accept-checked")
    for (test, environment), accepted in chosen.items():
        module, test_name = golden_names(test)
        try:
            from .folder import GoldenFolder

            golden = GoldenFolder(
                goldens,
                module,
                test_name,
                test,
                kinds,
                digest_above=above,
                rootdir=rootdir,
                lock_timeout=lock_timeout,
                store=store,
                environment=environment,
            )
        except LosslessError as exc:
            decisions += [Decision(e, "refused", str(exc)) for e, _ in accepted]
            continue
        decisions += _accept_test(golden, accepted, compared)
        faults.point("accept-committed")
    return decisions


def _accept_test(
    golden: GoldenFolder,
    accepted: Sequence[tuple[ExportEntry, Artifact]],
    compared: Mapping[int, str | None],
) -> list[Decision]:
    """Stage and commit one test's accepted artifacts (its other goldens are kept), each with
    the fingerprint accept computed for it."""
    shown = _shown(golden)
    entries = [entry for entry, _ in accepted]
    fingerprinted = {id(entry): artifact for entry, artifact in accepted}
    try:
        golden.migrate()  # from the layout of an earlier version, when the folder is the test's
        recovered = golden.begin_update()
        frozen = golden.manifest()
    except LosslessError as exc:
        return [
            Decision(e, "refused", f"the golden folder cannot be updated: {exc}") for e in entries
        ]
    # What a stopped update (an accept or a session) left beside the folder, named (#20).
    decisions = _recovered(entries[0], recovered, shown)
    staged: list[ExportEntry] = []
    for entry in entries:
        before = frozen.get(entry.artifact)
        stale = _stale(entry, before.sha256 if before else None, compared.get(id(entry)))
        if stale:
            decisions.append(Decision(entry, "refused", stale, shown))
            continue
        requested = entry.target.requested_gate
        gate = requested or (before.gate if before is not None else None)
        if before is not None and requested and requested != before.gate:
            decisions.append(
                Decision(
                    entry,
                    "refused",
                    f"its gate is frozen as {before.gate} with the golden, but the test asks for "
                    f"{requested}: a gate is changed by --update-goldens only",
                    shown,
                )
            )
            continue
        from ..gates import parse_gate

        artifact = fingerprinted[id(entry)]
        assert artifact.path is not None  # fingerprinted from the exported file
        try:
            golden.stage(
                entry.artifact,
                artifact.path,
                parse_gate(gate),
                entry.target.provenance,
                artifact=artifact,
            )
        except LosslessError as exc:
            decisions.append(Decision(entry, "refused", str(exc), shown))
            continue
        staged.append(entry)
    if not staged:
        return decisions
    by_name = {e.artifact: e for e in staged}
    try:
        events = golden.commit(keep=True)
    except LosslessError as exc:
        found = getattr(exc, "events", None)
        if found:
            events = list(found)
        else:
            return decisions + [Decision(e, "refused", str(exc), shown) for e in staged]
    decisions += _recovered(entries[0], [e for e in events if not e.name], shown)
    decisions += [
        Decision(by_name[e.name], e.action, e.detail, shown) for e in events if e.name in by_name
    ]
    return decisions


def _recovered(entry: ExportEntry, events: Iterable[UpdateEvent], shown: str) -> list[Decision]:
    """The recovery events of a test's folder (``restored``, ``cleaned``, ``kept``)."""
    return [
        Decision(entry, e.action, e.detail, shown, recovered=True)
        for e in events
        if not e.name and e.action in ("restored", "cleaned", "kept")
    ]


def _shown(golden: GoldenFolder) -> str:
    try:
        return str(golden.path.relative_to(Path.cwd()))
    except ValueError:
        return str(golden.path)


def events(decisions: Iterable[Decision]) -> list[dict[str, str]]:
    """The decisions as golden-update events (``report.update_lines`` prints them)."""
    return [d.to_event() for d in decisions]


def refused(decisions: Iterable[Decision]) -> list[Decision]:
    return [d for d in decisions if d.action in ("refused", "conflict")]
