"""Receipts: one JSON record of a test's evidence, written atomically, and read back.

A receipt holds raw blocks (runspec, allocation, runs, gates, lossless, speed, outcome)
and a ``verdicts`` block derived from them by code (:func:`derive_verdicts`); ``verify``
(:mod:`.verify`) re-derives it. The schema is documented in ``docs/receipts.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..core import faults
from ..core.clock import utc_iso
from ..core.digests import canonical_sha256, loads_bounded, safe_name, write_atomic
from ..core.paths import inside_root, read_regular
from ..core.redact import Redactor
from ..core.verdict import Verdict, outcome_verdict
from ..errors import ReceiptError
from ..run import lifecycle_verdict
from .index import INDEX_NAME
from .provenance import redact_runspec

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


class _HasToDict(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


def _plain(value: _HasToDict | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        result = to_dict()
        if isinstance(result, Mapping):
            return dict(result)
    raise TypeError(f"expected a mapping or an object with to_dict(), got {value!r}")


def receipt_name(test_id: str) -> str:
    """A file stem for a test id: safe characters only; long ids shortened with a hash."""
    name = safe_name(test_id.replace("::", "__"), default="test")
    return f"{name}_" if name.upper() == "INDEX" else name  # the session's INDEX.json


def raw_sha256(receipt: Mapping[str, Any]) -> str:
    """The hash of a receipt's raw blocks, with each run's derived ``lifecycle`` left out."""
    raw = {name: receipt.get(name) for name in RAW_BLOCKS}
    raw.update({name: receipt[name] for name in OPTIONAL_BLOCKS if name in receipt})
    if isinstance(raw["runs"], list):
        raw["runs"] = [
            {k: v for k, v in run.items() if k != "lifecycle"} if isinstance(run, Mapping) else run
            for run in raw["runs"]
        ]
    return canonical_sha256(raw)


def derive_verdicts(receipt: Mapping[str, Any]) -> dict[str, Any]:
    """The ``verdicts`` block, computed from the raw blocks only.

    The overall verdict is the worst of the test's parts: the test's own pytest outcome (a
    phase that failed is a FAIL, one stopped by INCONCLUSIVE is INCONCLUSIVE), every golden
    gate (a lossy gate that passed is LOSSY-PASS), every lossless comparison (LOSSY-PASS when
    its gates were lossy), every speed gate, and every run's lifecycle (an unclean run is a
    FAIL, whatever ``check`` said). A clean lifecycle or a passed outcome alone judges nothing:
    a receipt of runs only has no overall verdict. Receipts of schema versions before
    :data:`OUTCOME_COUNTS_FROM` re-derive as they were written: without their outcome.
    """
    runs = [r for r in receipt.get("runs") or [] if isinstance(r, Mapping)]
    lifecycles = [
        {
            "name": r.get("name"),
            **{k: v for k, v in lifecycle_verdict(r).items() if k in ("clean", "summary")},
        }
        for r in runs
    ]
    gates = [g for g in receipt.get("gates") or [] if isinstance(g, Mapping)]
    gate_verdicts = [_gate_verdict(g) for g in gates]
    lossless = [
        _lossless_verdict(v) for v in receipt.get("lossless") or [] if isinstance(v, Mapping)
    ]
    speed = [str(v.get("verdict")) for v in receipt.get("speed") or [] if isinstance(v, Mapping)]
    unclean = [Verdict.FAIL.value for lc in lifecycles if lc.get("clean") is not True]
    matrix = [_matrix_verdict(m) for m in receipt.get("matrix") or [] if isinstance(m, Mapping)]
    parts = gate_verdicts + lossless + speed + unclean + matrix
    version = receipt.get("schema_version")
    counts_outcome = not isinstance(version, int) or version >= OUTCOME_COUNTS_FROM
    test = outcome_verdict(receipt.get("outcome")) if counts_outcome else None
    worst = Verdict.worst(parts + ([test.value] if test is not None else []))
    overall = None if worst is None else worst.value  # unknown words: FAIL
    derived: dict[str, Any] = {
        "lifecycle": {
            "clean": all(lc["clean"] for lc in lifecycles) if lifecycles else None,
            "runs": lifecycles,
        },
        "gates": {
            "passed": sum(1 for v in gate_verdicts if v != Verdict.FAIL),
            "failed": gate_verdicts.count(Verdict.FAIL.value),
            "lossy_passed": gate_verdicts.count(Verdict.LOSSY_PASS.value),
            "lossless": all(g.get("lossless") is True for g in gates) if gates else None,
        },
        "lossless": lossless,
        "speed": speed,
        "overall": overall,
    }
    if "matrix" in receipt:  # only receipts with a determinism matrix (#24) have this key
        derived["matrix"] = matrix
    if counts_outcome:
        derived["test"] = None if test is None else test.value
        derived["expected"] = _all_expected(receipt, gate_verdicts + unclean, test, worst)
    return derived


def _all_expected(
    receipt: Mapping[str, Any], others: list[str], test: Verdict | None, worst: Verdict | None
) -> bool:
    """Whether an overall verdict that is not a pass is exactly what the test asserted: every
    lossless and speed entry that did not pass has its verdict in its ``expect_verdict``, no
    golden gate failed, every run was clean, and the test itself passed (the row's
    "(expected)", as the terminal table shows it)."""
    if worst is None or worst.passed or test is not None:
        return False
    if any(not (Verdict.parse(word) or Verdict.FAIL).passed for word in others):
        return False
    for block in ("lossless", "speed"):
        for entry in receipt.get(block) or []:
            if not isinstance(entry, Mapping):
                return False
            word = Verdict.parse(entry.get("verdict")) or Verdict.FAIL
            asserted = entry.get("expect_verdict")
            if not word.passed and not (isinstance(asserted, list) and word.value in asserted):
                return False
    return True


def _gate_verdict(gate: Mapping[str, Any]) -> str:
    if gate.get("passed") is not True:
        return Verdict.FAIL.value
    return Verdict.PASS.value if gate.get("lossless") is True else Verdict.LOSSY_PASS.value


def _matrix_verdict(grid: Mapping[str, Any]) -> str:
    """A determinism matrix counts as its worst cell (each cell re-derived by ``verify``)."""
    cells = [c.get("verdict") for c in grid.get("cells") or [] if isinstance(c, Mapping)]
    worst = Verdict.worst(cells)
    return Verdict.FAIL.value if worst is None else worst.value  # a grid of no cells: FAIL


def _lossless_verdict(entry: Mapping[str, Any]) -> str:
    word = str(entry.get("verdict"))
    if word == Verdict.PASS and entry.get("lossy") is not False:
        return Verdict.LOSSY_PASS.value  # a lossy comparison (or one that does not say) is lossy
    return word


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
        self.runspec: dict[str, Any] | None = None
        self._allocation: _HasToDict | Mapping[str, Any] | None = None
        self.runs: list[dict[str, Any]] = []
        self.gates: list[dict[str, Any]] = []
        self.lossless: list[dict[str, Any]] = []
        self.speed: list[dict[str, Any]] = []
        #: The canaries that ran in this test (:mod:`..kinds.canary`), or were skipped.
        self.canary: list[dict[str, Any]] = []
        #: The producers run again for ``--lossless-export``: per artifact, its runs and
        #: whether they agreed (what ``accept`` requires of an exported artifact).
        self.export: list[dict[str, Any]] = []
        #: The determinism matrices of the test (``lossless.matrix``): every cell's evidence.
        self.matrix: list[dict[str, Any]] = []
        self.outcome: dict[str, str] = {}
        #: What --update-goldens did to this test's goldens (created, changed, unchanged...).
        self.updates: list[dict[str, str]] = []

    @property
    def name(self) -> str:
        return receipt_name(self.test_id)

    @property
    def allocation(self) -> dict[str, Any] | None:
        """The allocation block, read when asked, so a late read shows its release."""
        return None if self._allocation is None else _plain(self._allocation)

    def set_runspec(self, runspec: Mapping[str, Any]) -> None:
        """The RunSpec, redacted as it is stored: no secret of argv, knobs or the diff."""
        self.runspec = redact_runspec(runspec, self.redactor)

    def set_allocation(self, allocation: _HasToDict | Mapping[str, Any] | None) -> None:
        self._allocation = allocation

    def add_run(self, record: Mapping[str, Any]) -> None:
        self.runs.append(dict(record))

    def add_gate(self, result: _HasToDict | Mapping[str, Any]) -> None:
        self.gates.append(_plain(result))

    def add_lossless(self, verdict: _HasToDict | Mapping[str, Any]) -> None:
        self.lossless.append(_plain(verdict))

    def add_speed(self, verdict: _HasToDict | Mapping[str, Any]) -> None:
        self.speed.append(_plain(verdict))

    def add_canary(self, record: _HasToDict | Mapping[str, Any]) -> None:
        self.canary.append(_plain(record))

    def add_export(self, record: Mapping[str, Any]) -> None:
        self.export.append(_plain(record))

    def add_matrix(self, grid: _HasToDict | Mapping[str, Any]) -> None:
        self.matrix.append(_plain(grid))

    def set_updates(self, events: Sequence[Mapping[str, str]]) -> None:
        self.updates = [dict(e) for e in events]

    def set_outcome(self, phase: str, outcome: str) -> None:
        self.outcome[phase] = outcome

    @property
    def verdicts(self) -> dict[str, Any]:
        """The derived verdicts, as :meth:`to_dict` would write them now."""
        return dict(self.to_dict()["verdicts"])

    @property
    def empty(self) -> bool:
        return not (self.runs or self.gates or self.lossless or self.speed or self.matrix)

    def _runspec_block(self) -> dict[str, Any] | None:
        if self.runspec is None:
            return None
        block = dict(self.runspec)
        source = dict(block.get("source") or {})
        diff = source.pop("diff", "")
        source["diff_file"] = f"{self.name}.diff" if diff else None
        block["source"] = source
        return block

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "test_id": self.test_id,
            "created_at": self.created_at,
            "written_at": utc_iso(),
            "outcome": dict(self.outcome),
            "runspec": self._runspec_block(),
            "allocation": self.allocation,
            "runs": [{**run, "lifecycle": lifecycle_verdict(run)} for run in self.runs],
            "gates": list(self.gates),
            "lossless": list(self.lossless),
            "speed": list(self.speed),
        }
        if self.canary:
            data["canary"] = list(self.canary)
        if self.export:
            data["export"] = list(self.export)
        if self.matrix:
            data["matrix"] = list(self.matrix)
        if self.updates:
            data["updates"] = list(self.updates)
        data = json.loads(json.dumps(data, default=_json_default))  # what a reader will see
        data["verdicts"] = derive_verdicts(data)
        covers = [*RAW_BLOCKS, *(b for b in OPTIONAL_BLOCKS if b in data)]
        data["integrity"] = {"raw_sha256": raw_sha256(data), "covers": covers}
        return data

    def write(self, directory: Path | str, *, root: Path | str | None = None) -> Path:
        """Write ``<dir>/<name>.json`` atomically, and ``<name>.diff`` when the tree is dirty.

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
        diff = str(((self.runspec or {}).get("source") or {}).get("diff") or "")
        if diff:
            faults.write("write-receipt-diff", folder / f"{self.name}.diff")
            write_atomic(
                folder / f"{self.name}.diff", diff.encode("utf-8", errors="surrogateescape")
            )
        path = folder / f"{self.name}.json"
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False, ensure_ascii=False)
        faults.write("write-receipt", path)
        write_atomic(path, (text + "\n").encode())
        return path

    def _rootdir(self) -> str | None:
        invocation = (self.runspec or {}).get("invocation")
        rootdir = invocation.get("rootdir") if isinstance(invocation, Mapping) else None
        return str(rootdir) if rootdir else None


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


def load(path: Path | str) -> dict[str, Any]:
    """A receipt as written; :class:`ReceiptError` naming the file when it cannot be used."""
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


def receipt_paths(directory: Path | str) -> list[Path]:
    """Every receipt under ``directory``, in every session folder (a single receipt file is
    accepted too); sessions' ``INDEX.json`` files are not receipts."""
    root = Path(directory)
    if root.is_file():
        return [root]
    return sorted(
        p for p in root.rglob("*.json") if not p.name.startswith(".") and p.name != INDEX_NAME
    )


def load_all(directory: Path | str) -> dict[Path, dict[str, Any] | ReceiptError]:
    """Every receipt of a folder, read once: the receipt, or why it cannot be read."""
    loaded: dict[Path, dict[str, Any] | ReceiptError] = {}
    for path in receipt_paths(directory):
        try:
            loaded[path] = load(path)
        except ReceiptError as exc:
            loaded[path] = exc
    return loaded
