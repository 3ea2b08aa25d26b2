"""Receipts as standard attestations: in-toto Statements, signed in DSSE envelopes.

``python -m pytest_lossless sign DIR`` turns each session folder into two in-toto Statements
(v1) about the same subjects (the source revisions, as ``gitCommit`` digests, and the SHA-256
of every candidate's obtained artifacts):

- the Test Result predicate (``https://in-toto.io/attestation/test-result/v0.1``), which policy
  engines read: ``result`` and the tests by outcome, with the frozen plans, the golden manifests
  and the session's ``INDEX.json`` (which holds every receipt's SHA-256) as configuration;
- this project's predicate (:data:`LOSSLESS_TYPE`, documented in ``docs/receipts.md``): each
  test's verdict, gates, ratio and interval per workload, and each receipt's SHA-256.

With an ed25519 key each Statement is signed in a DSSE envelope, one JSON line each in one
``.intoto.jsonl`` bundle; without one, the Statements and their predicates are written for the
CI's own signer. Signing happens here, never in the pytest session: the code under test runs as
the same user as pytest and could read any key the session held.

The same builders re-derive both Statements from the folders on disk at ``verify --attestation``
time (:func:`check_bundle`), so any digest that differs is named, not just "bad signature".
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ..core import faults
from ..core.paths import inside_root, read_regular, write_atomic
from ..core.records import (
    JsonObject,
    JsonValue,
    Record,
    json_object,
    json_objects,
    loads_bounded,
    spec,
)
from ..core.text import printable
from ..core.verdict import Verdict
from ..errors import LosslessError, ReceiptError
from .index import INDEX_NAME, HostIdentity, IndexFile, SessionIndex, load_index, sha256_regular
from .provenance import SourceState
from .receipts import GateRow, ReceiptRecord

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
#: This project's predicate: the lossless detail of one session (docs/receipts.md).
LOSSLESS_TYPE = "urn:pytest-lossless:predicate:session:v1"
#: The bundle a signed campaign is written to, in the ``--out`` folder.
BUNDLE_NAME = "lossless.intoto.jsonl"
#: Test outcomes of a gate test that was never in the session's selection.
_NOT_SELECTED = frozenset({"deselected"})
MAX_BUNDLE_BYTES = 256 << 20
PASSED, WARNED, FAILED = "PASSED", "WARNED", "FAILED"


class AttestationError(LosslessError):
    """A bundle, key or session that cannot be signed or checked; the message says why."""


# --- the statements -------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionFiles:
    """One session folder as signed: its index (and the index file's SHA-256) and the
    receipts the index lists, loaded."""

    folder: Path
    index: SessionIndex
    index_sha256: str
    receipts: Mapping[str, ReceiptRecord]

    @property
    def session_id(self) -> str:
        return self.index.session_id

    @classmethod
    def read(cls, folder: Path) -> SessionFiles:
        """The session of ``folder``; :class:`AttestationError` when its index or a listed
        receipt cannot be read (a folder that cannot be read cannot be signed)."""
        from .receipts import load

        path = folder / INDEX_NAME
        try:
            index = load_index(path)
            digest = sha256_regular(path)
        except (ReceiptError, OSError) as exc:
            raise AttestationError(f"{path}: {exc}") from None
        receipts: dict[str, ReceiptRecord] = {}
        for entry in index.receipts:
            name = entry.file
            if not name or Path(name).name != name:
                raise AttestationError(f"{path}: lists a receipt named {name!r}")
            try:
                receipts[name] = load(folder / name)
            except (ReceiptError, OSError) as exc:
                raise AttestationError(f"{folder / name}: {exc}") from None
        return cls(folder, index, digest, receipts)


@dataclass(frozen=True, slots=True)
class Subject(Record):
    """One in-toto subject of a session's Statements: a name, one digest by its algorithm
    (``gitCommit`` of a source revision, ``sha256`` of a stored diff or an obtained artifact)
    and its annotations (none for an artifact), as in-toto lists it."""

    name: str
    digest: dict[str, str]
    annotations: dict[str, str | bool] | None = spec(None, omit="none")


def _relative(path: Any, rootdir: Any) -> str | None:
    """A path a receipt records (absolute on the machine that ran it), relative to that
    machine's rootdir: the name the same file has in any checkout. None when outside it."""
    if not path or not rootdir:
        return None
    try:
        relative = Path(os.path.normpath(str(path))).relative_to(os.path.normpath(str(rootdir)))
    except ValueError:
        return None
    text = relative.as_posix()
    return None if text.startswith("..") else text


def source_subjects(session: SessionFiles) -> list[Subject]:
    """One ``gitCommit`` subject per source tree and revision the session's records name: the
    rootdir's (index and receipts) and each run's ``sources=`` trees. A dirty tree says so in
    its annotations (the commit alone is not what ran)."""
    found: dict[tuple[str, str], Subject] = {}

    def add(name: str, block: object) -> None:
        state = SourceState.read(block)
        if state is None or not state.revision:
            return
        key = (name, state.revision)
        entry = found.get(key) or Subject(name, {"gitCommit": state.revision}, {"dirty": False})
        if state.dirty:
            notes = dict(entry.annotations or {})
            notes["dirty"] = True
            if state.diff_sha256:
                notes["diff_sha256"] = state.diff_sha256
            entry = replace(entry, annotations=notes)
        found[key] = entry

    add("source", session.index.source)
    for receipt in session.receipts.values():
        add("source", receipt.source)
        rootdir = session.index.rootdir
        for run in receipt.block("runs"):
            for tree, state in json_object(run.get("sources")).items():
                add(f"source:{_relative(tree, rootdir) or tree}", state)
    return [found[k] for k in sorted(found)]


def diff_subjects(session: SessionFiles) -> list[Subject]:
    """The SHA-256 of each source diff the session stores (``diffs/<sha256>.diff``, or an older
    receipt's ``<name>.diff``), hashed from the file on disk, so a diff changed after signing
    is named; a receipt's ``diff_sha256`` annotation alone is git's diff before redaction."""
    from .receipts import LEGACY_DIFF, STORED_DIFF

    found: dict[str, Subject] = {}
    for receipt in session.receipts.values():
        name = str((receipt.source or {}).get("diff_file") or "")
        if name in found or not (STORED_DIFF.match(name) or LEGACY_DIFF.match(name)):
            continue
        try:
            digest = sha256_regular(session.folder / name)
        except OSError:
            continue  # a missing diff is verify's to name (signing refuses the session)
        found[name] = Subject(name, {"sha256": digest}, {"role": "source diff"})
    return [found[k] for k in sorted(found)]


def artifact_subjects(session: SessionFiles) -> list[Subject]:
    """The SHA-256 of every candidate's obtained artifact: each golden check's obtained file
    and each ``lossless.compare`` candidate's outputs (by the run record of its path)."""
    found: dict[str, Subject] = {}
    for receipt in session.receipts.values():
        test = receipt.test_id
        outputs = {
            str(entry.get("path")): entry.get("sha256")
            for run in receipt.block("runs")
            for entry in json_object(run.get("outputs")).values()
            if isinstance(entry, dict)
        }
        for gate in receipt.block("gates"):
            obtained = json_object(gate.get("evidence")).get("obtained")
            if isinstance(obtained, dict) and obtained.get("sha256"):
                name = f"{test}/{gate.get('artifact')}"
                found[name] = Subject(name, {"sha256": str(obtained["sha256"])})
        for entry in receipt.block("lossless"):
            label = entry.get("label") or "lossless"
            for run in json_objects(entry.get("runs")):
                if run.get("role") != "candidate":
                    continue
                for artifact, recorded in json_object(run.get("artifacts")).items():
                    path = recorded.get("path") if isinstance(recorded, dict) else None
                    digest = outputs.get(str(path)) if path else None
                    if digest:
                        name = f"{test}/{label}/{artifact}"
                        found[name] = Subject(name, {"sha256": str(digest)})
    return [found[k] for k in sorted(found)]


def subjects(session: SessionFiles) -> list[Subject]:
    """The statement's subjects: source revisions and their stored diffs first, then the
    obtained artifacts."""
    return source_subjects(session) + diff_subjects(session) + artifact_subjects(session)


@dataclass(frozen=True, slots=True)
class Descriptor(Record):
    """An in-toto ResourceDescriptor of the Test Result ``configuration``: a JSON file the
    session was judged by, by its SHA-256."""

    name: str
    digest: dict[str, str]
    annotations: dict[str, str]
    uri: str | None = spec(None, omit="none")
    media_type: str = spec("application/json", key="mediaType")


def configuration(session: SessionFiles, project: Path) -> tuple[list[Descriptor], list[str]]:
    """The Test Result ``configuration``: the session's ``INDEX.json`` by digest, and each
    golden manifest and frozen plan the receipts name, by the digest of the file as it is in
    ``project`` (a checkout of the revision the session ran). Also returns what does not agree:
    a file missing from ``project``, or a manifest whose digest is not the one the receipt was
    judged against."""
    problems: list[str] = []
    rootdir = session.index.rootdir
    descriptors = [
        Descriptor(
            INDEX_NAME,
            {"sha256": session.index_sha256},
            {"session_id": session.session_id},
            uri=f"pytest-lossless:session/{session.session_id}/{INDEX_NAME}",
        )
    ]
    files: dict[str, tuple[str, str | None]] = {}  # relative path -> (what, recorded digest)
    for name, receipt in sorted(session.receipts.items()):
        for gate in receipt.block("gates"):
            golden = json_object(gate.get("evidence")).get("golden")
            if isinstance(golden, dict) and golden.get("folder"):
                relative = _relative(Path(str(golden["folder"])) / "manifest.json", rootdir)
                if relative is None:
                    problems.append(f"{name}: golden folder {golden['folder']} outside {rootdir}")
                    continue
                digest = golden.get("manifest_sha256")
                files.setdefault(relative, ("manifest", None if digest is None else str(digest)))
        for block in ("lossless", "speed"):
            for entry in receipt.block(block):
                plan = entry.get("gate_plan")
                if isinstance(plan, dict) and plan.get("frozen") and plan.get("file"):
                    relative = _relative(plan["file"], rootdir)
                    if relative is None:
                        problems.append(f"{name}: plan {plan['file']} outside {rootdir}")
                        continue
                    files.setdefault(relative, ("plan", None))
    for relative, (what, recorded) in sorted(files.items()):
        path = project / relative
        try:
            digest = sha256_regular(path)
        except OSError as exc:
            problems.append(
                f"{what} {relative}: not readable in {project} ({exc.strerror or exc}): run "
                "from a checkout of the revision the session ran"
            )
            continue
        if recorded and digest != recorded:
            problems.append(
                f"{what} {relative}: SHA-256 {digest} in {project}, but the session was judged "
                f"against {recorded}: the checkout is not the revision the session ran, or the "
                "golden changed since"
            )
        descriptors.append(Descriptor(relative, {"sha256": digest}, {"role": what}))
    return descriptors, problems


@dataclass(frozen=True)
class GateOutcome:
    """What one selected gate test counts as in the Test Result predicate, and why."""

    test_id: str
    counts_as: str  # PASSED, WARNED or FAILED
    why: str


def effective_verdict(receipt: ReceiptRecord) -> Verdict | None:
    """The receipt's verdict with each lossless and speed verdict that matched its test's
    ``expect=`` counted as PASS (the test asserted it); every other part as in the receipt's
    ``verdicts.overall`` (:meth:`.receipts.ReceiptParts.effective`, the same derivation).
    None when the receipt judged nothing."""
    return receipt.parts.effective()


def gate_outcomes(session: SessionFiles) -> list[GateOutcome]:
    """Each selected gate test of the session (every gate the index lists, deselected ones
    left out) and what it counts as: PASSED when it passed under pytest and every part of its
    receipt is PASS (or the verdict its ``expect=`` asserted), WARNED for LOSSY-PASS, FAILED
    otherwise: a failed, skipped or unreached test, no receipt, or nothing judged."""
    outcomes: list[GateOutcome] = []
    by_file = dict(session.receipts)
    for test in session.index.tests:
        test_id, outcome = test.test_id, test.outcome
        if outcome in _NOT_SELECTED or not (test.gate or test.receipt):
            continue
        receipt = by_file.get(test.receipt) if test.receipt else None
        if outcome != "passed":
            reason = f": {test.reason}" if test.reason else ""
            outcomes.append(GateOutcome(test_id, FAILED, f"pytest outcome {outcome}{reason}"))
            continue
        if receipt is None:
            outcomes.append(GateOutcome(test_id, FAILED, "no receipt"))
            continue
        verdict = effective_verdict(receipt)
        if verdict is None:
            outcomes.append(GateOutcome(test_id, FAILED, "its receipt judged nothing"))
        elif verdict == Verdict.PASS:
            outcomes.append(GateOutcome(test_id, PASSED, "PASS"))
        elif verdict == Verdict.LOSSY_PASS:
            outcomes.append(GateOutcome(test_id, WARNED, "LOSSY-PASS"))
        else:
            outcomes.append(GateOutcome(test_id, FAILED, verdict.value))
    return outcomes


def overall_result(outcomes: Sequence[GateOutcome], *, finished: bool) -> str:
    """PASSED when every selected gate test passed (and there was one, and the session
    finished), WARNED when the worst was a LOSSY-PASS, else FAILED."""
    counts = {o.counts_as for o in outcomes}
    if not outcomes or not finished or FAILED in counts:
        return FAILED
    return WARNED if WARNED in counts else PASSED


@dataclass(frozen=True, slots=True)
class LosslessSummary(Record):
    """One ``lossless.compare`` of a test in the lossless predicate, as its receipt records it."""

    label: JsonValue
    verdict: JsonValue
    gates: JsonValue
    lossy: bool
    expect_verdict: JsonValue


@dataclass(frozen=True, slots=True)
class SpeedSummary(Record):
    """One speed workload of a test in the lossless predicate, as its receipt records it."""

    workload: JsonValue
    verdict: JsonValue
    ratio: JsonValue
    interval: JsonValue
    confidence: JsonValue
    target_ratio: JsonValue
    pairs: JsonValue
    expect_verdict: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class TestDetail(Record):
    """One selected gate test in the lossless predicate: what it counts as and why, its
    receipt's overall verdict (no key without a receipt), gates, comparisons and workloads."""

    __test__ = False  # not a pytest test class
    test_id: str
    counts_as: str
    why: str
    verdict: JsonValue = spec(None, omit=lambda test: not test.judged)
    gates: tuple[GateRow, ...] = ()
    lossless: tuple[LosslessSummary, ...] = ()
    speed: tuple[SpeedSummary, ...] = ()
    judged: bool = spec(False, json=False)

    @classmethod
    def of(cls, outcome: GateOutcome, receipt: ReceiptRecord | None) -> TestDetail:
        made = cls(test_id=outcome.test_id, counts_as=outcome.counts_as, why=outcome.why)
        if receipt is None:
            return made
        lossless = [
            LosslessSummary(
                e.get("label"),
                e.get("verdict"),
                e.get("gates"),
                bool(e.get("lossy")),
                e.get("expect_verdict"),
            )
            for e in receipt.block("lossless")
        ]
        keys = ("workload", "verdict", "ratio", "ci", "confidence", "target_ratio", "pairs")
        speed = [
            SpeedSummary(*(e.get(k) for k in (*keys, "expect_verdict")))
            for e in receipt.block("speed")
        ]
        return replace(
            made,
            verdict=(receipt.recorded_verdicts or {}).get("overall"),
            gates=receipt.parts.gates,
            lossless=tuple(lossless),
            speed=tuple(speed),
            judged=True,
        )


@dataclass(frozen=True, slots=True)
class TestResultPredicate(Record):
    """The in-toto Test Result predicate (:data:`TEST_RESULT_TYPE`)."""

    __test__ = False
    TYPE: ClassVar[str] = TEST_RESULT_TYPE
    result: str
    configuration: tuple[Descriptor, ...]
    passed: tuple[str, ...] = spec(key="passedTests")
    warned: tuple[str, ...] = spec(key="warnedTests")
    failed: tuple[str, ...] = spec(key="failedTests")


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionDetail(Record):
    """The session a lossless predicate is about, as its ``INDEX.json`` says."""

    id: str
    host: HostIdentity | None
    started_at: str | None
    ended_at: str | None
    state: str | None
    finished: bool
    mode: str | None
    index_sha256: str


@dataclass(frozen=True, slots=True)
class LosslessPredicate(Record):
    """This project's predicate (:data:`LOSSLESS_TYPE`): the session, its result, each
    selected gate test's detail and each receipt's SHA-256."""

    TYPE: ClassVar[str] = LOSSLESS_TYPE
    session: SessionDetail
    result: str
    tests: tuple[TestDetail, ...]
    receipts: tuple[IndexFile, ...]


@dataclass(frozen=True, slots=True)
class Statement(Record):
    """An in-toto Statement v1 about the session's subjects (signed as JSON with sorted keys:
    :func:`statement_bytes`)."""

    subject: tuple[Subject, ...]
    predicate: TestResultPredicate | LosslessPredicate
    predicate_type: str = spec(key="predicateType", derive=lambda s: s.predicate.TYPE)
    statement_type: str = spec(key="_type", derive=lambda _: STATEMENT_TYPE)


def statements(session: SessionFiles, project: Path) -> tuple[list[Statement], list[str]]:
    """The session's two Statements (Test Result, then the lossless detail), and what in the
    project disagrees with them (see :func:`configuration`)."""
    subject = tuple(subjects(session))
    config, problems = configuration(session, project)
    outcomes = gate_outcomes(session)
    index = session.index
    result = overall_result(outcomes, finished=index.finished)
    test_result = TestResultPredicate(
        result,
        tuple(config),
        *(
            tuple(sorted(o.test_id for o in outcomes if o.counts_as == c))
            for c in (PASSED, WARNED, FAILED)
        ),
    )
    receipts_by_test = {r.test_id: r for r in session.receipts.values()}
    detail = LosslessPredicate(
        SessionDetail(
            id=session.session_id,
            host=index.host,
            started_at=index.started_at,
            ended_at=index.ended_at,
            state=index.state,
            finished=index.finished,
            mode=index.mode,
            index_sha256=session.index_sha256,
        ),
        result,
        tuple(TestDetail.of(o, receipts_by_test.get(o.test_id)) for o in outcomes),
        tuple(sorted(index.receipts, key=lambda e: e.file)),
    )
    return [Statement(subject, test_result), Statement(subject, detail)], problems


def statement_bytes(statement: JsonObject) -> bytes:
    """A Statement as the payload bytes signed: JSON, sorted keys, no spaces, UTF-8."""
    return json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# --- DSSE ----------------------------------------------------------------------------------


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the signature covers."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
    except ModuleNotFoundError:
        raise AttestationError(
            "signing and checking signatures need the 'cryptography' package: "
            "pip install 'pytest-lossless[sign]'"
        ) from None
    return serialization


def _load_key(path: Path, *, private: bool) -> Any:
    """An ed25519 key from a PEM file: the private half (unencrypted) to sign, the public
    half to check; :class:`AttestationError` naming the file and how to make the right one."""
    serialization = _crypto()
    from cryptography.hazmat.primitives.asymmetric import ed25519

    wanted: type[Any]
    if private:
        load, wanted = serialization.load_pem_private_key, ed25519.Ed25519PrivateKey
        what = "an unencrypted PEM private key"
        advice = "make one with: openssl genpkey -algorithm ed25519 -out key.pem"
    else:
        load, wanted = serialization.load_pem_public_key, ed25519.Ed25519PublicKey
        what = "a PEM public key"
        advice = "give the public half: openssl pkey -in key.pem -pubout -out key.pub"
    try:
        data = read_regular(path, limit=1 << 16)
        key = load(data, password=None) if private else load(data)
    except OSError as exc:
        raise AttestationError(f"--key {path}: cannot be read: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:
        raise AttestationError(f"--key {path}: not {what} ({exc}); {advice}") from None
    if not isinstance(key, wanted):
        raise AttestationError(f"--key {path}: a {type(key).__name__}, not an ed25519 key")
    return key


def load_private_key(path: Path) -> Any:
    """An ed25519 private key from an unencrypted PEM file."""
    return _load_key(path, private=True)


def load_public_key(path: Path) -> Any:
    """An ed25519 public key from a PEM file (``openssl pkey -in key.pem -pubout``)."""
    return _load_key(path, private=False)


def keyid(public_key: Any) -> str:
    """The key's id in signatures: SHA-256 of its DER SubjectPublicKeyInfo, in hex."""
    serialization = _crypto()
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


@dataclass(frozen=True, slots=True)
class Signature(Record):
    """One DSSE signature: the key's id (:func:`keyid`) and the signature, base64."""

    keyid: str
    sig: str


@dataclass(frozen=True, slots=True)
class Envelope(Record):
    """A DSSE envelope: the Statement's bytes (base64) and their signatures."""

    payload: str
    signatures: tuple[Signature, ...]
    payload_type: str = spec(PAYLOAD_TYPE, key="payloadType")


def envelope(statement: JsonObject, private_key: Any) -> Envelope:
    """A DSSE envelope holding ``statement`` (its JSON), signed with ``private_key``."""
    payload = statement_bytes(statement)
    signature = private_key.sign(pae(PAYLOAD_TYPE, payload))
    sig = Signature(keyid(private_key.public_key()), base64.b64encode(signature).decode("ascii"))
    return Envelope(base64.b64encode(payload).decode("ascii"), (sig,))


@dataclass(frozen=True)
class Opened:
    """One line of a bundle: its Statement (None when unreadable), whether a signature by the
    given key verified, and what is wrong with it."""

    line: int
    #: As the envelope's payload holds it: each reader narrows what it reads.
    statement: JsonObject | None
    signed: bool
    problem: str | None = None

    @property
    def session_id(self) -> str | None:
        return statement_session(self.statement) if self.statement is not None else None


def statement_session(statement: JsonObject) -> str | None:
    """The session a Statement is about: from its ``INDEX.json`` configuration (Test Result)
    or its ``session.id`` (the lossless detail)."""
    predicate = statement.get("predicate")
    if not isinstance(predicate, dict):
        return None
    if statement.get("predicateType") == LOSSLESS_TYPE:
        session = predicate.get("session")
        return str(session.get("id")) if isinstance(session, dict) else None
    for descriptor in json_objects(predicate.get("configuration")):
        if descriptor.get("name") == INDEX_NAME:
            annotations = descriptor.get("annotations")
            if isinstance(annotations, dict) and annotations.get("session_id"):
                return str(annotations["session_id"])
    return None


def open_envelope(line: int, data: Any, public_key: Any) -> Opened:
    """Check one envelope's signature with ``public_key`` and read its Statement."""
    from cryptography.exceptions import InvalidSignature

    if not isinstance(data, Mapping) or not isinstance(data.get("signatures"), list):
        return Opened(line, None, False, "not a DSSE envelope (payload, payloadType, signatures)")
    if data.get("payloadType") != PAYLOAD_TYPE:
        return Opened(line, None, False, f"payloadType {data.get('payloadType')!r}")
    try:
        payload = base64.b64decode(str(data.get("payload")), validate=True)
        statement = loads_bounded(payload)
    except ValueError as exc:
        return Opened(line, None, False, f"its payload cannot be read ({exc})")
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        return Opened(line, None, False, "the payload is not an in-toto Statement v1")
    signed = False
    for signature in data["signatures"]:
        try:
            raw = base64.b64decode(str(signature.get("sig")), validate=True)
            public_key.verify(raw, pae(PAYLOAD_TYPE, payload))
        except (InvalidSignature, ValueError, AttributeError):
            continue
        signed = True
        break
    return Opened(line, statement, signed)


def read_bundle(path: Path, public_key: Any) -> list[Opened]:
    """Every envelope of a ``.intoto.jsonl`` bundle, opened with ``public_key``."""
    try:
        text = read_regular(path, limit=MAX_BUNDLE_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AttestationError(f"--attestation {path}: cannot be read: {exc}") from None
    opened = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = loads_bounded(line)
        except ValueError as exc:
            opened.append(Opened(number, None, False, f"not JSON ({exc})"))
            continue
        opened.append(open_envelope(number, data, public_key))
    if not opened:
        raise AttestationError(f"--attestation {path}: holds no envelope")
    return opened


# --- sign ------------------------------------------------------------------------------------


@dataclass
class Signed:
    """What ``sign`` did: the files written, the sessions signed, and the ones refused."""

    written: list[Path] = field(default_factory=list)
    sessions: list[tuple[str, str]] = field(default_factory=list)  # (session id, result)
    refused: list[str] = field(default_factory=list)
    #: What a stopped ``sign`` left beside a statements folder, restored or removed (#20).
    recovered: list[str] = field(default_factory=list)


def session_folders(directory: Path) -> list[Path]:
    """Every session folder under ``directory`` (a folder holding ``INDEX.json``), itself
    included; exports' copies of receipts (no index) are not sessions."""
    if (directory / INDEX_NAME).is_file():
        return [directory]
    return sorted(p.parent for p in directory.rglob(INDEX_NAME))


def signing_problems(folder: Path, *, kinds: Any = None) -> list[str]:
    """Why a session folder must not be signed: its own index says it is unsignable (a
    process it started outlived it), or its receipts contradict their index or themselves
    (changed since the session ended). An incomplete session is signed: its result says so."""
    from .sessions import CONTRADICTION, check_session
    from .verify import verify_folder

    found: list[str] = []
    checked = verify_folder(folder, kinds=kinds, skip=lambda p: p.parent != folder)
    loaded = checked.receipts
    session = check_session(folder, loaded)
    found += [f.text for f in session.findings if f.kind == CONTRADICTION]
    unsignable = session.index.unsignable if session.index else None
    if unsignable:
        found.append(f"{folder / INDEX_NAME}: the session says it cannot be signed: {unsignable}")
    for path, receipt in loaded.items():
        if path not in checked.problems:  # not even JSON of a receipt
            found.append(str(receipt))
            continue
        found += [f"{path}: {p}" for p in checked.problems[path][:3]]
    return found


def sign(
    directory: Path,
    *,
    out: Path,
    project: Path,
    private_key: Any | None = None,
    kinds: Any = None,
) -> Signed:
    """Every session under ``directory`` as Statements: with ``private_key``, one envelope per
    Statement in ``out/lossless.intoto.jsonl``; without, each session's Statements and their
    predicates (and a ``subjects.sha256`` checksums file) in ``out/<session id>/`` for the
    CI's own signer. A session with a problem (:func:`signing_problems`, or a golden or plan
    that disagrees in ``project``) is refused and nothing of it is written."""
    # Signing runs on a checkout of the pull request: an output folder (or a session's folder
    # in it) committed as a link out of the project is refused, never written through (#20).
    inside_root(out, project, what="attestation folder")
    done = Signed()
    lines: list[str] = []
    for folder in session_folders(directory):
        problems = signing_problems(folder, kinds=kinds)
        if not problems:
            try:
                session = SessionFiles.read(folder)
            except AttestationError as exc:
                problems = [str(exc)]
        if not problems:
            made, problems = statements(session, project)
        if problems:
            done.refused += [f"{folder}: {printable(p)}" for p in problems]
            continue
        done.sessions.append((session.session_id, made[0].predicate.result))
        if private_key is not None:
            lines += [
                json.dumps(envelope(s.to_json(), private_key).to_json(), sort_keys=True)
                for s in made
            ]
            continue
        target = out / session.session_id
        inside_root(target, project, what="attestation folder")
        done.written += _write_statements(target, made, done)
    if private_key is not None and lines and not done.refused:
        out.mkdir(parents=True, exist_ok=True)
        bundle = out / BUNDLE_NAME
        faults.point("sign-write")
        write_atomic(bundle, ("\n".join(lines) + "\n").encode())
        done.written.append(bundle)
        faults.point("sign-written")
    return done


#: How long ``sign`` waits for another ``sign`` writing the same statements folder (seconds).
_LOCK_TIMEOUT = 120.0
#: The files of a session's unsigned statements folder, in the order they are listed.
_STATEMENT_FILES = (
    "test-result.statement.json",
    "test-result.predicate.json",
    "lossless.statement.json",
    "lossless.predicate.json",
    "subjects.sha256",
)


def _write_statements(target: Path, made: Sequence[Statement], done: Signed) -> list[Path]:
    """A session's unsigned statements folder, replaced whole (#20): staged beside it and
    swapped into place as a golden folder is (:func:`..goldens.swap.replace_folder`, under its
    lock), so a stopped ``sign`` leaves the old folder or the whole new one, never a part; what
    a stopped one left there is recovered first, and named in ``done.recovered``."""
    from ..errors import GoldenError
    from ..goldens.swap import FolderLock, lock_path, recover, replace_folder

    statements = [s.to_json() for s in made]
    contents = []
    for statement in statements:
        for value in (statement, statement["predicate"]):
            contents.append((json.dumps(value, indent=2, sort_keys=True) + "\n").encode())
    contents.append(_checksums(made[0].subject).encode())

    def fill(staged: Path) -> None:
        for name, data in zip(_STATEMENT_FILES, contents, strict=True):
            write_atomic(staged / name, data)

    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FolderLock(lock_path(target), timeout=_LOCK_TIMEOUT, of="the statements beside it"):
            found = recover(target, test="")
            done.recovered += [f"{e.action.upper()} {target} ({e.detail})" for e in found]
            faults.point("sign-write")
            replace_folder(target, fill)
    except GoldenError as exc:
        raise AttestationError(f"{target}: cannot be written: {exc}") from None
    faults.point("sign-written")
    return [target / name for name in _STATEMENT_FILES]


def _checksums(subject: Iterable[Subject]) -> str:
    """The sha256 subjects in ``sha256sum`` format (``actions/attest``'s subject-checksums);
    ``gitCommit`` subjects have no place there (the CI's signer binds the commit itself)."""
    return "".join(f"{s.digest['sha256']}  {s.name}\n" for s in subject if "sha256" in s.digest)


# --- verify --attestation ---------------------------------------------------------------------


def _by_name(descriptors: JsonValue) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for d in json_objects(descriptors):
        if isinstance(digest := d.get("digest"), dict):
            found.setdefault(str(d.get("name")), {}).update(
                {str(k): str(v) for k, v in digest.items()}
            )
    return found


def compare_descriptors(what: str, signed: JsonValue, on_disk: JsonValue) -> list[str]:
    """Each descriptor (subject or configuration) that the signed Statement and the files on
    disk disagree on, named with both digests."""
    a, b = _by_name(signed), _by_name(on_disk)
    found = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            found.append(f"{what} {name!r} {_digests(a[name])} is signed but not on disk")
        elif name not in a:
            found.append(f"{what} {name!r} {_digests(b[name])} is on disk but not signed")
        elif a[name] != b[name]:
            found.append(
                f"{what} {name!r}: signed {_digests(a[name])}, on disk {_digests(b[name])}"
            )
    return found


def _digests(digest: Mapping[str, str]) -> str:
    return ", ".join(f"{k}:{v[:16]}" for k, v in sorted(digest.items()))


@dataclass(frozen=True)
class BundleFinding:
    """One thing an attestation check found: ``SIGNATURE`` (an envelope the key does not
    verify), ``NOT SIGNED`` (evidence no signed Statement covers), ``MISMATCH`` (signed
    digests the files on disk do not match), ``DUPLICATE`` (one signed session twice)."""

    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.kind} {self.text}"


def check_bundle(
    bundle: Path,
    public_key: Any,
    *,
    folders: Sequence[Path],
    single_receipts: Sequence[Path],
    project: Path,
) -> tuple[list[BundleFinding], list[JsonObject]]:
    """Every session folder and loose receipt against the signed Statements of ``bundle``:
    each envelope verifies with ``public_key``; each session on disk is signed once, under its
    own name, and its subjects and configuration re-derived from disk equal the signed ones;
    each signed session is on disk once; each loose receipt (a receipt given as a file, or an
    export's copy) is one a signed session lists. Returns the findings and the signed Test
    Result Statements that verified."""
    found: list[BundleFinding] = []
    signed: dict[str, dict[str, JsonObject]] = {}
    for opened in read_bundle(bundle, public_key):
        where = f"{bundle}:{opened.line}"
        if opened.problem is not None:
            found.append(BundleFinding("SIGNATURE", f"{where}: {opened.problem}"))
            continue
        session = opened.session_id or "?"
        if not opened.signed:
            found.append(
                BundleFinding(
                    "SIGNATURE",
                    f"{where} (session {printable(session)}): no signature verifies with this "
                    f"key (keyid {keyid(public_key)[:16]}): signed with another key, or the "
                    "envelope was changed after signing",
                )
            )
            continue
        assert opened.statement is not None
        kind = str(opened.statement.get("predicateType"))
        slot = signed.setdefault(session, {})
        if kind in slot:
            found.append(
                BundleFinding(
                    "DUPLICATE", f"{where}: a second {kind} Statement for session {session}"
                )
            )
        slot[kind] = opened.statement
    on_disk: dict[str, list[Path]] = {}
    for folder in folders:
        try:
            session_id = load_index(folder / INDEX_NAME).session_id
        except ReceiptError:
            session_id = ""
        on_disk.setdefault(session_id or folder.name, []).append(folder)
    for session_id, places in sorted(on_disk.items()):
        if len(places) > 1:
            found.append(
                BundleFinding(
                    "DUPLICATE",
                    f"session {printable(session_id)} is in {len(places)} folders "
                    f"({', '.join(str(p) for p in places)}): one signed session counts once; "
                    "a copy may stand in for a session that is missing",
                )
            )
        for folder in places:
            if folder.name != session_id:
                found.append(
                    BundleFinding(
                        "MISMATCH",
                        f"{folder}: holds session {printable(session_id)} under another name: "
                        "a session folder keeps the name its session gave it",
                    )
                )
            statements_signed = signed.get(session_id, {})
            if TEST_RESULT_TYPE not in statements_signed:
                found.append(
                    BundleFinding(
                        "NOT SIGNED",
                        f"{folder}: no Statement in {bundle} signs session "
                        f"{printable(session_id)}: a signature is required for every session",
                    )
                )
                continue
            found += [
                BundleFinding("MISMATCH", f"{folder}: {p}")
                for p in _compare_session(folder, statements_signed, project)
            ]
    # Loose receipts alone (one file, an export) are checked against the bundle without their
    # sessions; once any session folder is verified, every signed session must be there.
    for session_id in sorted(set(signed) - set(on_disk)) if folders else ():
        found.append(
            BundleFinding(
                "MISMATCH",
                f"signed session {printable(session_id)} is not among the folders verified: "
                "its folder is missing, or was replaced",
            )
        )
    signed_receipts = {
        str(r.get("sha256"))
        for slot in signed.values()
        if LOSSLESS_TYPE in slot
        for r in _listed_receipts(slot[LOSSLESS_TYPE])
    }
    for path in single_receipts:
        try:
            digest = sha256_regular(path)
        except OSError as exc:
            found.append(BundleFinding("NOT SIGNED", f"{path}: cannot be hashed ({exc})"))
            continue
        if digest not in signed_receipts:
            found.append(
                BundleFinding(
                    "NOT SIGNED",
                    f"{path}: SHA-256 {digest[:16]} is the digest of no receipt a signed "
                    f"session in {bundle} lists: an unsigned (or changed) receipt",
                )
            )
    results = [slot[TEST_RESULT_TYPE] for slot in signed.values() if TEST_RESULT_TYPE in slot]
    return found, results


def _compare_session(folder: Path, signed: Mapping[str, JsonObject], project: Path) -> list[str]:
    """A signed session against its folder: the index file's digest first (it holds every
    receipt's), then each receipt, subject and configuration file re-derived from disk."""
    test_result = signed[TEST_RESULT_TYPE]
    predicate = json_object(test_result.get("predicate"))
    signed_index = _by_name(predicate.get("configuration")).get(INDEX_NAME, {})
    found: list[str] = []
    try:
        index_digest = sha256_regular(folder / INDEX_NAME)
    except OSError as exc:
        return [f"{INDEX_NAME} cannot be hashed ({exc})"]
    if signed_index.get("sha256") != index_digest:
        found.append(
            f"{INDEX_NAME} SHA-256 {index_digest[:16]} differs from the signed "
            f"{str(signed_index.get('sha256'))[:16]}: the index was changed after signing"
        )
    detail = signed.get(LOSSLESS_TYPE)
    if detail is not None:
        signed_receipts = {
            str(r.get("file")): str(r.get("sha256")) for r in _listed_receipts(detail)
        }
        for name, digest in sorted(signed_receipts.items()):
            try:
                actual = sha256_regular(folder / name)
            except OSError:
                found.append(f"receipt {name} is signed but missing")
                continue
            if actual != digest:
                found.append(
                    f"receipt {name}: SHA-256 {actual[:16]} differs from the signed "
                    f"{digest[:16]}: the receipt was changed after signing"
                )
    try:
        session = SessionFiles.read(folder)
    except AttestationError as exc:
        return [*found, str(exc)]
    again = statements(session, project)[0][0].to_json()
    found += compare_descriptors("subject", test_result.get("subject"), again["subject"])
    found += compare_descriptors(
        "configuration", predicate.get("configuration"), again["predicate"]["configuration"]
    )
    for key in ("result", "passedTests", "warnedTests", "failedTests"):
        if predicate.get(key) != again["predicate"][key]:
            found.append(
                f"predicate {key}: signed {predicate.get(key)!r}, the receipts "
                f"on disk give {again['predicate'][key]!r}"
            )
    if detail is not None and detail.get("subject") != test_result.get("subject"):
        found.append("the two signed Statements of the session name different subjects")
    return found


def signed_receipts(bundle: Path, public_key: Any) -> dict[str, str]:
    """SHA-256 -> session id of every receipt a verified lossless Statement of ``bundle``
    lists (envelopes that do not verify with ``public_key`` vouch for nothing)."""
    found: dict[str, str] = {}
    for opened in read_bundle(bundle, public_key):
        statement = opened.statement
        if (
            not opened.signed
            or statement is None
            or statement.get("predicateType") != (LOSSLESS_TYPE)
        ):
            continue
        for entry in _listed_receipts(statement):
            if entry.get("sha256"):
                found[str(entry["sha256"])] = str(opened.session_id)
    return found


def _listed_receipts(statement: JsonObject) -> list[JsonObject]:
    """The receipts (file, SHA-256) a signed lossless Statement lists."""
    return json_objects(json_object(statement.get("predicate")).get("receipts"))


def revisions_of(statement: JsonObject) -> set[str]:
    """The ``gitCommit`` digests a Statement's subjects name."""
    digests = [json_object(s.get("digest")) for s in json_objects(statement.get("subject"))]
    return {str(d["gitCommit"]) for d in digests if "gitCommit" in d}


__all__ = [
    "BUNDLE_NAME",
    "LOSSLESS_TYPE",
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "TEST_RESULT_TYPE",
    "AttestationError",
    "BundleFinding",
    "SessionFiles",
    "check_bundle",
    "envelope",
    "gate_outcomes",
    "load_private_key",
    "load_public_key",
    "pae",
    "read_bundle",
    "revisions_of",
    "session_folders",
    "sign",
    "signed_receipts",
    "statements",
]
