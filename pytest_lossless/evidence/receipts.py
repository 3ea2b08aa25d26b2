"""Receipts: one JSON record of a test's evidence, written atomically, and read back.

A receipt holds raw blocks (runspec, allocation, runs, gates, lossless, speed, outcome)
and a ``verdicts`` block derived from them by code (:func:`derive_verdicts`); ``verify``
(:mod:`.verify`) re-derives it. The schema is documented in ``docs/receipts.md``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from ..core import faults
from ..core.clock import utc_iso
from ..core.digests import canonical_sha256
from ..core.paths import inside_root, read_regular, safe_name, write_atomic
from ..core.records import JsonObject, Record, json_objects, loads_bounded, spec
from ..core.records import from_json as read_record
from ..core.redact import Redactor
from ..core.verdict import Verdict, outcome_verdict
from ..errors import ReceiptError
from ..run import lifecycle_verdict
from .index import INDEX_NAME, HostIdentity
from .provenance import RunSpec

SCHEMA = "pytest-lossless.receipt"
#: 2: lossless and speed entries record their frozen plan (``gate_plan``), speed samples what
#: ran before each arm (``before_arm``); see docs/receipts.md.
#: 3: the test's own pytest outcome is one of the parts of the overall verdict (``verdicts.test``),
#: a call stopped by INCONCLUSIVE is recorded as ``inconclusive``, lossless and speed entries
#: record the verdicts the test asserts (``expect_verdict``) and ``verdicts.expected`` says
#: whether a failing overall verdict is exactly what was asserted.
SCHEMA_VERSION = 3
#: Versions this release reads: a version-1 receipt (no plans) is checked by the same rules, the
#: fields it lacks read as absent (its speed gates re-derive with the mean block summary); a
#: version 1 or 2 receipt re-derives its overall verdict without its outcome, as it was written.
READABLE_VERSIONS = (1, 2, 3)
#: The first version whose overall verdict counts the test's own outcome.
OUTCOME_COUNTS_FROM = 3
#: The raw blocks, covered by ``integrity.raw_sha256``; everything else is derived.
RAW_BLOCKS = ("test_id", "runspec", "allocation", "runs", "gates", "lossless", "speed", "outcome")
#: Raw blocks that only a receipt holding them covers (older receipts hash without them).
OPTIONAL_BLOCKS = ("canary", "export", "matrix", "updates")
#: The largest receipt read back: a long video's frame digests, twice, fit many times over.
MAX_RECEIPT_BYTES = 256 << 20
#: The session's stored source diffs, one file per distinct diff, named by its SHA-256 (#20).
DIFFS_DIR = "diffs"
#: How a receipt names its stored diff: ``diffs/<sha256>.diff`` in its session folder, or (a
#: receipt written before diffs were shared) ``<receipt name>.diff`` beside it.
STORED_DIFF = re.compile(rf"^{DIFFS_DIR}/(?P<digest>[0-9a-f]{{64}})\.diff$")
LEGACY_DIFF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*\.diff$")


def stored_diff_name(digest: str) -> str:
    """Where a session stores the diff whose stored bytes hash to ``digest``."""
    return f"{DIFFS_DIR}/{digest}.diff"


class _ReadLate(Protocol):
    """An allocation, read when the receipt is written (so its block shows the release)."""

    def to_dict(self) -> JsonObject: ...


def receipt_name(test_id: str) -> str:
    """A file stem for a test id: safe characters only; long ids shortened with a hash.

    Distinct test ids keep distinct files: an id that loses characters on the way (the brackets
    of a parameter id, a ``/`` or a space in it) gains a hash of the whole id, since
    ``test_x[a_b]``, ``test_x_a[b]`` and ``test_x_a_b`` would otherwise share one file and
    the last receipt written would replace the others (#20). Ids of plain test functions keep
    the names they always had (``tests_e2e_test_m.py__test_a``).
    """
    file, separator, rest = test_id.partition("::")
    plain = file.replace("/", "_") + ("__" + rest.replace("::", "__") if separator else "")
    name = safe_name(test_id.replace("::", "__"), default="test")
    if name != plain:
        digest = hashlib.sha256(test_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:129]}-{digest}"
    return f"{name}_" if name.upper() == "INDEX" else name  # the session's INDEX.json


def raw_sha256(receipt: JsonObject) -> str:
    """The hash of a receipt's raw blocks, with each run's derived ``lifecycle`` left out."""
    raw = {name: receipt.get(name) for name in RAW_BLOCKS}
    raw.update({name: receipt[name] for name in OPTIONAL_BLOCKS if name in receipt})
    runs = raw["runs"]
    if isinstance(runs, list):
        raw["runs"] = [
            {k: v for k, v in run.items() if k != "lifecycle"} if isinstance(run, dict) else run
            for run in runs
        ]
    return canonical_sha256(raw)


@dataclass(frozen=True, slots=True)
class GateRow(Record):
    """What the evidence layer judges of one golden gate entry (``GateResult.to_dict()``, the
    gates layer's JSON): the artifact, its kind and gate, and whether it passed losslessly."""

    artifact: str | None
    kind: str | None
    gate: str | None
    passed: bool | None
    lossless: bool | None

    @property
    def verdict(self) -> Verdict:
        """FAIL unless it passed; a pass under a lossy gate is LOSSY-PASS."""
        if self.passed is not True:
            return Verdict.FAIL
        return Verdict.PASS if self.lossless is True else Verdict.LOSSY_PASS

    @classmethod
    def read(cls, entry: object) -> GateRow:
        """The row read leniently: a value of the wrong type reads as None (not said)."""
        return read_record(cls, entry, problems=[])


@dataclass(frozen=True, slots=True)
class CheckRow:
    """What the evidence layer judges of one ``lossless`` or ``speed`` entry: its verdict word,
    whether a lossless comparison was lossy, and the verdicts its test asserted (``expect=``)."""

    block: str
    word: str
    lossy: bool | None
    expect_verdict: tuple[str, ...] | None

    @property
    def verdict_word(self) -> str:
        """The word it counts as: a lossless comparison that passed under lossy gates (or one
        that does not say) is LOSSY-PASS; an unknown word is kept (it counts as FAIL)."""
        if self.block == "lossless" and self.word == Verdict.PASS and self.lossy is not False:
            return Verdict.LOSSY_PASS.value
        return self.word

    @property
    def expected(self) -> bool:
        """Its verdict is one its test asserted: the test wanted this outcome."""
        return self.expect_verdict is not None and self.word in self.expect_verdict

    @classmethod
    def from_json(cls, block: str, entry: JsonObject) -> CheckRow:
        lossy, asserted = entry.get("lossy"), entry.get("expect_verdict")
        return cls(
            block=block,
            word=str(entry.get("verdict")),
            lossy=lossy if isinstance(lossy, bool) else None,  # unsaid: counted as lossy
            expect_verdict=tuple(map(str, asserted)) if isinstance(asserted, list) else None,
        )


@dataclass(frozen=True, slots=True)
class RunLifecycle(Record):
    """One run's lifecycle as ``verdicts.lifecycle.runs`` records it."""

    name: str | None
    clean: bool
    summary: str


@dataclass(frozen=True, slots=True)
class GateCounts(Record):
    """``verdicts.gates``: how many golden gates passed, failed, passed lossy; all lossless."""

    passed: int
    failed: int
    lossy_passed: int
    lossless: bool | None


@dataclass(frozen=True, slots=True)
class Lifecycle(Record):
    """``verdicts.lifecycle``: whether every run was clean (None: no runs), and each run's."""

    clean: bool | None
    runs: tuple[RunLifecycle, ...]


def _before_outcome(verdicts: Verdicts) -> bool:
    return not verdicts.counts_outcome


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdicts(Record):
    """The derived ``verdicts`` block (:meth:`ReceiptParts.verdicts`).
    ``test`` and ``expected`` exist from :data:`OUTCOME_COUNTS_FROM` on (``counts_outcome``);
    ``matrix`` only in a receipt with a determinism matrix."""

    lifecycle: Lifecycle
    gates: GateCounts
    lossless: tuple[str, ...]
    speed: tuple[str, ...]
    overall: str | None
    matrix: tuple[str, ...] | None = spec(None, omit="none")
    counts_outcome: bool = spec(True, json=False)
    test: str | None = spec(None, omit=_before_outcome)
    expected: bool = spec(False, omit=_before_outcome)


@dataclass(frozen=True, slots=True)
class ReceiptParts:
    """The parts of a receipt its verdicts are derived from, read once from its raw blocks:
    the test's outcome, each run's lifecycle, each golden gate, lossless and speed entry, and
    each determinism matrix's worst cell. The one derivation of a receipt's verdict: the
    ``verdicts`` block, ``verify``, SUMMARY.md and ``sign`` all read it from here."""

    schema_version: object
    outcome: object
    runs: tuple[RunLifecycle, ...]
    gates: tuple[GateRow, ...]
    checks: tuple[CheckRow, ...]
    matrix: tuple[str, ...] | None

    @classmethod
    def from_json(cls, receipt: JsonObject) -> ReceiptParts:
        """The parts of a receipt as JSON (one being written, or a checker's receipt)."""
        return cls._of(
            receipt.get("schema_version"),
            receipt.get("outcome"),
            {name: json_objects(receipt.get(name)) for name in (*LIST_BLOCKS, "matrix")},
            has_matrix="matrix" in receipt,
        )

    @classmethod
    def of(cls, record: ReceiptRecord) -> ReceiptParts:
        """The parts of a receipt as read (:func:`load`)."""
        return cls._of(
            record.schema_version, record.outcome, record.entries, has_matrix=record.has("matrix")
        )

    @classmethod
    def _of(
        cls,
        version: object,
        outcome: object,
        blocks: Mapping[str, Sequence[JsonObject]],
        *,
        has_matrix: bool,
    ) -> ReceiptParts:
        runs = []
        for record in blocks.get("runs", ()):
            lifecycle = lifecycle_verdict(record)
            name = record.get("name")
            runs.append(RunLifecycle(_text(name), lifecycle.clean, lifecycle.summary))
        return cls(
            schema_version=version,
            outcome=outcome,
            runs=tuple(runs),
            gates=tuple(GateRow.read(g) for g in blocks.get("gates", ())),
            checks=tuple(
                CheckRow.from_json(block, entry)
                for block in ("lossless", "speed")
                for entry in blocks.get(block, ())
            ),
            matrix=(
                tuple(_matrix_verdict(m) for m in blocks.get("matrix", ()))
                if has_matrix  # only receipts with a determinism matrix (#24)
                else None
            ),
        )

    @property
    def counts_outcome(self) -> bool:
        version = self.schema_version
        return not isinstance(version, int) or version >= OUTCOME_COUNTS_FROM

    def _unclean(self) -> list[str]:
        return [Verdict.FAIL.value for run in self.runs if run.clean is not True]

    def verdicts(self) -> Verdicts:
        """The ``verdicts`` block: the overall verdict is the worst of the test's parts: the
        test's own pytest outcome (a phase that failed is a FAIL, one stopped by INCONCLUSIVE
        is INCONCLUSIVE), every golden gate (a lossy gate that passed is LOSSY-PASS), every
        lossless comparison (LOSSY-PASS when its gates were lossy), every speed gate, every
        determinism matrix, and every run's lifecycle (an unclean run is a FAIL, whatever
        ``check`` said). A clean lifecycle or a passed outcome alone judges nothing: a receipt
        of runs only has no overall verdict. Receipts of schema versions before
        :data:`OUTCOME_COUNTS_FROM` re-derive as they were written: without their outcome."""
        gate_words = [g.verdict.value for g in self.gates]
        lossless = [c.verdict_word for c in self.checks if c.block == "lossless"]
        speed = [c.word for c in self.checks if c.block == "speed"]
        unclean = self._unclean()
        parts = gate_words + lossless + speed + unclean + list(self.matrix or ())
        counts_outcome = self.counts_outcome
        test = outcome_verdict(self.outcome) if counts_outcome else None
        worst = Verdict.worst(parts + ([test.value] if test is not None else []))
        return Verdicts(
            lifecycle=Lifecycle(all(r.clean for r in self.runs) if self.runs else None, self.runs),
            gates=GateCounts(
                passed=sum(1 for w in gate_words if w != Verdict.FAIL),
                failed=gate_words.count(Verdict.FAIL.value),
                lossy_passed=gate_words.count(Verdict.LOSSY_PASS.value),
                lossless=all(g.lossless is True for g in self.gates) if self.gates else None,
            ),
            lossless=tuple(lossless),
            speed=tuple(speed),
            overall=None if worst is None else worst.value,  # unknown words: FAIL
            matrix=self.matrix,
            counts_outcome=counts_outcome,
            test=None if test is None else test.value,
            expected=counts_outcome and self._all_expected(gate_words + unclean, test, worst),
        )

    def _all_expected(self, others: list[str], test: Verdict | None, worst: Verdict | None) -> bool:
        """Whether an overall verdict that is not a pass is exactly what the test asserted:
        every lossless and speed entry that did not pass has its verdict in its
        ``expect_verdict``, no golden gate failed, every run was clean, and the test itself
        passed (the row's "(expected)", as the terminal table shows it)."""
        if worst is None or worst.passed or test is not None:
            return False
        if any(not (Verdict.parse(word) or Verdict.FAIL).passed for word in others):
            return False
        return all(
            (Verdict.parse(c.word) or Verdict.FAIL).passed or c.expected for c in self.checks
        )

    def effective(self) -> Verdict | None:
        """The verdict with each lossless and speed verdict that matched its test's
        ``expect=`` counted as PASS (the test asserted it), the test's outcome left out (the
        caller judges it): what a signed Test Result counts. None when nothing was judged."""
        words = [g.verdict.value for g in self.gates]
        words += [Verdict.PASS.value if c.expected else c.verdict_word for c in self.checks]
        words += self._unclean() + list(self.matrix or ())
        return Verdict.worst(words) if words else None


@dataclass(frozen=True, slots=True)
class Integrity(Record):
    """The ``integrity`` block: the SHA-256 of the raw blocks named in ``covers``."""

    raw_sha256: str
    covers: tuple[str, ...]

    @classmethod
    def read(cls, block: object) -> Integrity | None:
        """The block as recorded; None when it is missing or not of this shape."""
        if not isinstance(block, Mapping) or not isinstance(block.get("raw_sha256"), str):
            return None
        covers = block.get("covers")
        return cls(block["raw_sha256"], tuple(map(str, covers if isinstance(covers, list) else ())))


#: The blocks of a receipt that are lists of entries, in the order a receipt is written.
LIST_BLOCKS = ("runs", "gates", "lossless", "speed")


@dataclass(frozen=True)
class ReceiptRecord:
    """A receipt as written and read, serialised here only (:meth:`to_json`, :meth:`from_json`).

    The evidence layer's own blocks are typed: the test's outcome, the derived verdicts
    (:attr:`parts`, re-derived from the raw blocks) and the integrity block. The blocks other
    layers record are kept as the JSON read (:data:`JsonObject`: the RunSpec, the allocation,
    each run record, gate result, lossless and speed verdict, canary, matrix, export and update
    event), since ``verify`` judges what the file says, edited or not, and re-derives from it:
    ``entries`` holds each list block present, by name, in the order it is written."""

    schema_version: int
    test_id: str
    created_at: str | None
    written_at: str | None
    outcome: dict[str, str]
    runspec: JsonObject | None
    allocation: JsonObject | None
    entries: dict[str, list[JsonObject]]
    #: As recorded: ``verify`` compares it with the one the raw blocks give now.
    recorded_verdicts: JsonObject | None
    integrity: Integrity | None

    @property
    def source(self) -> JsonObject | None:
        """The RunSpec's ``source`` block: the rootdir's revision, diff and publication."""
        source = (self.runspec or {}).get("source")
        return source if isinstance(source, dict) else None

    @property
    def host(self) -> HostIdentity | None:
        """The RunSpec's ``host``: the host its session ran on (:func:`.index.host_identity`)."""
        return HostIdentity.read((self.runspec or {}).get("host"))

    def block(self, name: str) -> list[JsonObject]:
        """The entries of a list block (``runs``, ``gates``, ``lossless``, ``speed``,
        ``canary``, ``export``, ``matrix``, ``updates``), in order; empty when absent."""
        return self.entries.get(name, [])

    def has(self, name: str) -> bool:
        """Whether the receipt holds the list block ``name`` (an optional block may be absent)."""
        return name in self.entries

    @property
    def parts(self) -> ReceiptParts:
        """What its verdicts derive from, re-read from its raw blocks."""
        return ReceiptParts.of(self)

    def verdicts(self) -> Verdicts:
        """Its verdicts, re-derived from its raw blocks (not the recorded ones)."""
        return self.parts.verdicts()

    def to_json(self) -> JsonObject:
        data: JsonObject = {
            "schema": SCHEMA,
            "schema_version": self.schema_version,
            "test_id": self.test_id,
            "created_at": self.created_at,
            "written_at": self.written_at,
            "outcome": {**self.outcome},
            "runspec": self.runspec,
            "allocation": self.allocation,
        }
        for name in (*LIST_BLOCKS, *OPTIONAL_BLOCKS):
            if name in LIST_BLOCKS or name in self.entries:
                data[name] = [*self.entries.get(name, [])]
        data["verdicts"] = self.recorded_verdicts
        data["integrity"] = None if self.integrity is None else self.integrity.to_json()
        return data

    @classmethod
    def from_json(cls, data: JsonObject) -> ReceiptRecord:
        """A receipt :func:`load` read; :class:`ReceiptError` when a block has the wrong
        shape (a list block that is not a list of objects, an outcome that is not words)."""

        def block(name: str) -> JsonObject | None:
            value = data.get(name)
            if value is not None and not isinstance(value, dict):
                raise ReceiptError(f"{name} is not an object")
            return value

        entries: dict[str, list[JsonObject]] = {}
        for name in (*LIST_BLOCKS, *OPTIONAL_BLOCKS):
            value = data.get(name)
            if value is None and (name in LIST_BLOCKS or name not in data):
                continue
            if not isinstance(value, list):
                raise ReceiptError(f"{name} is not a list of objects")
            objects = [e for e in value if isinstance(e, dict)]
            if len(objects) != len(value):
                raise ReceiptError(f"{name} is not a list of objects")
            entries[name] = objects
        outcome = data.get("outcome") or {}
        if not isinstance(outcome, dict):
            raise ReceiptError("outcome is not an object of words")
        words = {phase: w for phase, w in outcome.items() if isinstance(w, str)}
        if len(words) != len(outcome):
            raise ReceiptError("outcome is not an object of words")
        version, test_id = data.get("schema_version"), data.get("test_id")
        return cls(
            schema_version=version if isinstance(version, int) else SCHEMA_VERSION,
            test_id=str(test_id),
            created_at=_text(data.get("created_at")),
            written_at=_text(data.get("written_at")),
            outcome=words,
            runspec=block("runspec"),
            allocation=block("allocation"),
            entries=entries,
            recorded_verdicts=block("verdicts"),
            integrity=Integrity.read(data.get("integrity")),
        )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def derive_verdicts(receipt: JsonObject) -> JsonObject:
    """The ``verdicts`` block of a receipt as JSON, derived from its raw blocks only
    (:meth:`ReceiptParts.verdicts`)."""
    return ReceiptParts.from_json(receipt).verdicts().to_json()


def _matrix_verdict(grid: JsonObject) -> str:
    """A determinism matrix counts as its worst cell (each cell re-derived by ``verify``)."""
    worst = Verdict.worst([_text(c.get("verdict")) for c in json_objects(grid.get("cells"))])
    return Verdict.FAIL.value if worst is None else worst.value  # a grid of no cells: FAIL


class Receipt:
    """One test's evidence, filled while it runs and written at its end.

    Raw blocks are added by the fixtures; ``verdicts`` and ``integrity`` are only ever
    computed, in :meth:`to_dict`.
    """

    def __init__(self, test_id: str, *, redactor: Redactor | None = None) -> None:
        self.test_id = test_id
        #: The session's redaction rules (``lossless_redact``), applied to the RunSpec.
        self.redactor = redactor if redactor is not None else Redactor()
        self.created_at = utc_iso()
        self.runspec: RunSpec | None = None
        self._allocation: _ReadLate | None = None
        #: Each list block's entries, as the fixtures add them: ``runs``, ``gates``,
        #: ``lossless``, ``speed``; the canaries that ran (:mod:`..kinds.canary`, or were
        #: skipped); ``export``, the producers run again for ``--lossless-export`` (per artifact,
        #: its runs and whether they agreed: what ``accept`` requires); ``matrix``, the
        #: determinism matrices of the test (``lossless.matrix``: every cell's evidence).
        self.entries: dict[str, list[JsonObject]] = {
            name: [] for name in (*LIST_BLOCKS, "canary", "export", "matrix")
        }
        self.outcome: dict[str, str] = {}
        #: What --update-goldens did to this test's goldens (created, changed, unchanged...).
        self.updates: list[dict[str, str]] = []

    @property
    def name(self) -> str:
        return receipt_name(self.test_id)

    @property
    def runs(self) -> list[JsonObject]:
        """The run records so far, in the order the runs started."""
        return self.entries["runs"]

    @property
    def gates(self) -> list[JsonObject]:
        """The golden gate entries so far (``GateResult.to_dict()`` with its evidence)."""
        return self.entries["gates"]

    @property
    def allocation(self) -> JsonObject | None:
        """The allocation block, read when asked, so a late read shows its release."""
        return None if self._allocation is None else self._allocation.to_dict()

    def set_runspec(self, runspec: RunSpec | JsonObject) -> None:
        """The RunSpec (or a recorded one's JSON), redacted as it is stored: no secret of
        argv, knobs or the diff."""
        spec = runspec if isinstance(runspec, RunSpec) else RunSpec.read(runspec)
        self.runspec = spec.redacted(self.redactor)

    def set_allocation(self, allocation: _ReadLate | None) -> None:
        self._allocation = allocation

    # Each entry is the JSON of its producer's record (``RunRecord``, ``GateResult`` with its
    # evidence, a lossless or speed verdict, ...), written as it is.
    def add_run(self, record: JsonObject) -> None:
        self.entries["runs"].append(dict(record))

    def add_gate(self, result: JsonObject) -> None:
        self.entries["gates"].append(dict(result))

    def add_lossless(self, verdict: JsonObject) -> None:
        self.entries["lossless"].append(dict(verdict))

    def add_speed(self, verdict: JsonObject) -> None:
        self.entries["speed"].append(dict(verdict))

    def add_canary(self, record: JsonObject) -> None:
        self.entries["canary"].append(dict(record))

    def add_export(self, record: JsonObject) -> None:
        self.entries["export"].append(dict(record))

    def add_matrix(self, grid: JsonObject) -> None:
        self.entries["matrix"].append(dict(grid))

    def set_updates(self, events: Sequence[Mapping[str, str]]) -> None:
        self.updates = [dict(e) for e in events]

    def set_outcome(self, phase: str, outcome: str) -> None:
        self.outcome[phase] = outcome

    @property
    def verdicts(self) -> Verdicts:
        """The derived verdicts, as :meth:`to_dict` would write them now."""
        return ReceiptParts.from_json(self.to_dict()).verdicts()

    @property
    def empty(self) -> bool:
        return not any(self.entries[name] for name in (*LIST_BLOCKS, "matrix"))

    def _stored_diff(self) -> tuple[str, bytes] | None:
        """The diff as stored (already redacted by :meth:`set_runspec`) and its file name
        in the session folder, named by the SHA-256 of those bytes; None for a clean tree."""
        text = self.runspec.source.diff if self.runspec is not None else ""
        if not text:
            return None
        data = text.encode("utf-8", errors="surrogateescape")
        return stored_diff_name(hashlib.sha256(data).hexdigest()), data

    def _runspec_block(self) -> JsonObject | None:
        """The RunSpec as written: its diff's file named in place of its text."""
        if self.runspec is None:
            return None
        stored = self._stored_diff()
        source = self.runspec.source.as_stored(stored[0] if stored else None)
        return replace(self.runspec, source=source).to_json()

    def record(self) -> ReceiptRecord:
        """The receipt as it would be written now: raw blocks as JSON (what a reader will
        see), then the verdicts derived from them and the integrity hash over them."""
        raw = {
            "schema_version": SCHEMA_VERSION,
            "test_id": self.test_id,
            "created_at": self.created_at,
            "written_at": utc_iso(),
            "outcome": dict(self.outcome),
            "runspec": self._runspec_block(),
            "allocation": self.allocation,
            "runs": [{**run, "lifecycle": lifecycle_verdict(run).to_json()} for run in self.runs],
            "gates": list(self.entries["gates"]),
            "lossless": list(self.entries["lossless"]),
            "speed": list(self.entries["speed"]),
        }
        for name in OPTIONAL_BLOCKS:
            entries = self.updates if name == "updates" else self.entries[name]
            if entries:
                raw[name] = entries
        data = json.loads(json.dumps(raw, default=_json_default))  # what a reader will see
        record = ReceiptRecord.from_json(data)
        covers = (*RAW_BLOCKS, *(b for b in OPTIONAL_BLOCKS if b in data))
        return replace(
            record,
            recorded_verdicts=ReceiptParts.from_json(data).verdicts().to_json(),
            integrity=Integrity(raw_sha256(data), covers),
        )

    def to_dict(self) -> JsonObject:
        return self.record().to_json()

    def write(self, directory: Path | str, *, root: Path | str | None = None) -> Path:
        """Write ``<dir>/<name>.json`` atomically, and, when the tree is dirty, its diff as
        ``<dir>/diffs/<sha256>.diff`` unless the session stored that diff already (every
        receipt of a session usually shares one).

        The folder must not lead out of ``root`` (default: the rootdir its RunSpec records)
        through a symbolic link: a committed ``lossless-receipts`` link is refused with
        :class:`~..core.paths.PathOutsideRoot` and nothing is written. A link or FIFO at the
        receipt's own path is replaced, never followed.
        """
        folder = Path(directory)
        boundary = root if root is not None else self._rootdir()
        if boundary is not None:
            inside_root(folder, boundary, what="receipts folder")
        folder.mkdir(parents=True, exist_ok=True)
        stored = self._stored_diff()
        if stored is not None:
            _store_diff(folder, *stored, root=boundary)
        path = folder / f"{self.name}.json"
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False, ensure_ascii=False)
        faults.write("write-receipt", path)
        write_atomic(path, (text + "\n").encode())
        return path

    def _rootdir(self) -> str | None:
        invocation = self.runspec.invocation if self.runspec is not None else None
        return invocation.rootdir if invocation is not None and invocation.rootdir else None


def _store_diff(folder: Path, name: str, data: bytes, *, root: Path | str | None) -> None:
    """Write a content-addressed diff once: a regular file of its size already there is the
    same diff (its name is its hash; ``verify`` re-hashes it); anything else is replaced."""
    target = folder / name
    if root is not None:
        inside_root(target.parent, root, what="diffs folder")
    target.parent.mkdir(exist_ok=True)
    try:
        existing = os.lstat(target)
    except FileNotFoundError:
        existing = None
    if existing is None or not stat.S_ISREG(existing.st_mode) or existing.st_size != len(data):
        faults.write("write-receipt-diff", target)
        write_atomic(target, data)


def _json_default(value: object) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return item()
    return repr(value)


# ------------------------------------------------------------------ reading


def load_json(path: Path | str) -> JsonObject:
    """A receipt's JSON as written, its schema and version checked (``verify`` hashes it as it
    is); :class:`ReceiptError` naming the file when it cannot be used."""
    path = Path(path)
    try:
        # Not followed through a link, never blocked on a FIFO, bounded in size and depth.
        data = loads_bounded(read_regular(path, limit=MAX_RECEIPT_BYTES))
    except OSError as exc:
        raise ReceiptError(
            f"{path}: cannot read the receipt: {exc.strerror or exc}", path=str(path)
        ) from None
    except ValueError as exc:
        raise ReceiptError(
            f"{path}: not valid JSON ({exc}); the receipt is damaged or was edited by hand",
            path=str(path),
        ) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ReceiptError(
            f'{path}: not a pytest-lossless receipt (no "schema": "{SCHEMA}")', path=str(path)
        )
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise ReceiptError(
            f"{path}: receipt schema version {version!r}; this pytest-lossless "
            f"reads versions {', '.join(map(str, READABLE_VERSIONS))}: use the version that "
            "wrote it",
            path=str(path),
        )
    return data


def load(path: Path | str) -> ReceiptRecord:
    """A receipt as read into its record; :class:`ReceiptError` naming the file when it cannot
    be used (not JSON, not a receipt, a version this release does not read, a block of the
    wrong shape)."""
    data = load_json(path)
    try:
        return ReceiptRecord.from_json(data)
    except ReceiptError as exc:
        raise ReceiptError(f"{path}: the receipt cannot be read: {exc}", path=str(path)) from None


def receipt_paths(directory: Path | str) -> list[Path]:
    """Every receipt under ``directory``, in every session folder (a single receipt file is
    accepted too); sessions' ``INDEX.json`` files are not receipts."""
    root = Path(directory)
    if root.is_file():
        return [root]
    return sorted(
        p for p in root.rglob("*.json") if not p.name.startswith(".") and p.name != INDEX_NAME
    )


def load_all(directory: Path | str) -> dict[Path, ReceiptRecord | ReceiptError]:
    """Every receipt of a folder, read once: the receipt, or why it cannot be read."""
    loaded: dict[Path, ReceiptRecord | ReceiptError] = {}
    for path in receipt_paths(directory):
        try:
            loaded[path] = load(path)
        except ReceiptError as exc:
            loaded[path] = exc
    return loaded
