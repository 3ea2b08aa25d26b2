"""Receipts: one JSON record of a test's evidence, and ``verify`` that re-derives it.

A receipt holds raw blocks (runspec, allocation, runs, gates, lossless, speed, outcome)
and a ``verdicts`` block derived from them by code. ``verify`` recomputes every derived
value and hash from the raw blocks and reports each contradiction; new re-derivations
are added as entries of :func:`default_checkers` (block name -> checker). The schema is
documented in ``docs/receipts.md``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..core.clock import utc_iso
from ..core.digests import canonical_sha256, sha256_file
from ..errors import ReceiptError
from ..run import lifecycle_verdict

SCHEMA = "pytest-lossless.receipt"
SCHEMA_VERSION = 1
#: The raw blocks, covered by ``integrity.raw_sha256``; everything else is derived.
RAW_BLOCKS = ("test_id", "runspec", "allocation", "runs", "gates", "lossless", "speed",
              "outcome")
_VERDICT_ORDER = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}

#: A re-derivation: (the block's value, the whole receipt, its path) -> contradictions.
Checker = Callable[[Any, Mapping[str, Any], Path], list[str]]


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
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", test_id.replace("::", "__")).strip("._") or "test"
    if len(stem) > 150:
        stem = f"{stem[:130]}-{hashlib.sha256(test_id.encode()).hexdigest()[:16]}"
    return stem


def raw_sha256(receipt: Mapping[str, Any]) -> str:
    """The hash of a receipt's raw blocks, with each run's derived ``lifecycle`` left out."""
    raw = {name: receipt.get(name) for name in RAW_BLOCKS}
    if isinstance(raw["runs"], list):
        raw["runs"] = [{k: v for k, v in run.items() if k != "lifecycle"}
                       if isinstance(run, Mapping) else run for run in raw["runs"]]
    return canonical_sha256(raw)


def derive_verdicts(receipt: Mapping[str, Any]) -> dict[str, Any]:
    """The ``verdicts`` block, computed from the raw blocks only."""
    runs = [r for r in receipt.get("runs") or [] if isinstance(r, Mapping)]
    lifecycles = [{"name": r.get("name"), **{k: v for k, v in lifecycle_verdict(r).items()
                                            if k in ("clean", "summary")}} for r in runs]
    gates = [g for g in receipt.get("gates") or [] if isinstance(g, Mapping)]
    gate_verdicts = ["PASS" if g.get("passed") is True else "FAIL" for g in gates]
    lossless = [str(v.get("verdict")) for v in receipt.get("lossless") or []
                if isinstance(v, Mapping)]
    speed = [str(v.get("verdict")) for v in receipt.get("speed") or [] if isinstance(v, Mapping)]
    every = gate_verdicts + lossless + speed
    known = [v for v in every if v in _VERDICT_ORDER]
    overall = None
    if every:
        overall = "FAIL" if len(known) < len(every) else max(known, key=_VERDICT_ORDER.__getitem__)
    return {
        "lifecycle": {"clean": all(lc["clean"] for lc in lifecycles) if lifecycles else None,
                      "runs": lifecycles},
        "gates": {"passed": gate_verdicts.count("PASS"), "failed": gate_verdicts.count("FAIL"),
                  "lossless": all(g.get("lossless") is True for g in gates) if gates else None},
        "lossless": lossless,
        "speed": speed,
        "overall": overall,
    }


class Receipt:
    """One test's evidence, filled while it runs and written at its end.

    Raw blocks are added by the fixtures; ``verdicts`` and ``integrity`` are only ever
    computed, in :meth:`to_dict`.
    """

    def __init__(self, test_id: str) -> None:
        self.test_id = test_id
        self.created_at = utc_iso()
        self.runspec: dict[str, Any] | None = None
        self._allocation: _HasToDict | Mapping[str, Any] | None = None
        self.runs: list[dict[str, Any]] = []
        self.gates: list[dict[str, Any]] = []
        self.lossless: list[dict[str, Any]] = []
        self.speed: list[dict[str, Any]] = []
        self.outcome: dict[str, str] = {}

    @property
    def name(self) -> str:
        return receipt_name(self.test_id)

    @property
    def allocation(self) -> dict[str, Any] | None:
        """The allocation block, read when asked, so a late read shows its release."""
        return None if self._allocation is None else _plain(self._allocation)

    def set_runspec(self, runspec: Mapping[str, Any]) -> None:
        self.runspec = dict(runspec)

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

    def set_outcome(self, phase: str, outcome: str) -> None:
        self.outcome[phase] = outcome

    @property
    def verdicts(self) -> dict[str, Any]:
        """The derived verdicts, as :meth:`to_dict` would write them now."""
        return dict(self.to_dict()["verdicts"])

    @property
    def empty(self) -> bool:
        return not (self.runs or self.gates or self.lossless or self.speed)

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
        data = json.loads(json.dumps(data, default=_json_default))  # what a reader will see
        data["verdicts"] = derive_verdicts(data)
        data["integrity"] = {"raw_sha256": raw_sha256(data), "covers": list(RAW_BLOCKS)}
        return data

    def write(self, directory: Path | str) -> Path:
        """Write ``<dir>/<name>.json`` atomically, and ``<name>.diff`` when the tree is dirty."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        diff = str(((self.runspec or {}).get("source") or {}).get("diff") or "")
        if diff:
            write_atomic(folder / f"{self.name}.diff",
                         diff.encode("utf-8", errors="surrogateescape"))
        path = folder / f"{self.name}.json"
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False, ensure_ascii=False)
        write_atomic(path, (text + "\n").encode())
        return path


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


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path``, then rename it into place."""
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed before the rename
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    try:
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------ reading and verifying


def load(path: Path | str) -> dict[str, Any]:
    """A receipt as written; :class:`ReceiptError` naming the file when it cannot be used."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReceiptError(f"{path}: cannot read the receipt: {exc.strerror or exc}",
                           path=str(path)) from None
    except ValueError as exc:
        raise ReceiptError(f"{path}: not valid JSON ({exc}); the receipt is damaged or was "
                           "edited by hand", path=str(path)) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ReceiptError(f"{path}: not a pytest-lossless receipt (no \"schema\": "
                           f"\"{SCHEMA}\")", path=str(path))
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReceiptError(f"{path}: receipt schema version {version!r}; this pytest-lossless "
                           f"reads version {SCHEMA_VERSION}: use the version that wrote it",
                           path=str(path))
    return data


def check_integrity(block: Any, receipt: Mapping[str, Any], path: Path) -> list[str]:
    """The raw blocks still hash to what was recorded when the receipt was written."""
    if not isinstance(block, Mapping) or "raw_sha256" not in block:
        return ["integrity block missing: the raw blocks cannot be checked for edits"]
    actual = raw_sha256(receipt)
    if block["raw_sha256"] != actual:
        return [f"raw blocks were changed after the receipt was written: integrity.raw_sha256 "
                f"is {block['raw_sha256']} but the raw blocks hash to {actual}"]
    return []


def check_runspec(block: Any, receipt: Mapping[str, Any], path: Path) -> list[str]:
    """Diff file against its hash, dirty flag and publication against their evidence."""
    if block is None:
        return [] if not receipt.get("runs") else ["runs were recorded but the runspec is missing"]
    if not isinstance(block, Mapping):
        return ["runspec is not a mapping"]
    found: list[str] = []
    source = block.get("source") or {}
    if source.get("revision"):
        diff_file, recorded = source.get("diff_file"), source.get("diff_sha256")
        diff_dirty = bool(source.get("diff_bytes"))
        if diff_file:
            diff_path = path.parent / str(diff_file)
            if not diff_path.is_file():
                found.append(f"runspec: the diff {diff_path} recorded beside the receipt is "
                             "missing")
            elif sha256_file(diff_path) != recorded:
                found.append(f"runspec: {diff_path} does not match diff_sha256 {recorded}: the "
                             "stored diff was changed")
        elif diff_dirty:
            found.append("runspec: the diff is non-empty but no diff file is recorded")
        expected_dirty = diff_dirty or bool(source.get("untracked"))
        if source.get("dirty") is not expected_dirty:
            untracked = len(source.get("untracked") or [])
            found.append(f"runspec: dirty={source.get('dirty')} but the diff has "
                         f"{source.get('diff_bytes')} bytes and {untracked} untracked files")
        published = bool(source.get("remote_branches"))
        if source.get("published") is not published or source.get("publication") != (
                "published" if published else "unpublished"):
            found.append(f"runspec: publication {source.get('publication')!r} contradicts the "
                         f"remote branches {source.get('remote_branches')!r}")
    found += _check_hashes("runspec input", block.get("inputs"))
    return found


def _check_hashes(what: str, entries: Any) -> list[str]:
    """Files that still exist must still hash to what was recorded (gone files are skipped)."""
    found: list[str] = []
    if not isinstance(entries, Mapping):
        return found
    for name, entry in entries.items():
        if not isinstance(entry, Mapping) or not entry.get("sha256") or not entry.get("path"):
            continue
        file = Path(str(entry["path"]))
        if file.is_file() and sha256_file(file) != entry["sha256"]:
            found.append(f"{what} {name!r}: {file} no longer matches its recorded SHA-256 "
                         f"{entry['sha256']}")
    return found


def check_runs(block: Any, receipt: Mapping[str, Any], path: Path) -> list[str]:
    """Each run's lifecycle re-derived from its raw record; its outputs re-hashed."""
    if not isinstance(block, list):
        return ["runs is not a list"]
    found: list[str] = []
    for index, run in enumerate(block):
        if not isinstance(run, Mapping):
            found.append(f"runs[{index}] is not a mapping")
            continue
        label = f"runs[{index}] ({run.get('name')})"
        again = lifecycle_verdict(run)
        stored = run.get("lifecycle")
        if not isinstance(stored, Mapping):
            found.append(f"{label}: no lifecycle verdict recorded")
        else:
            if stored.get("clean") is not again["clean"]:
                why = "; ".join(again["reasons"]) or "every process ended cleanly"
                found.append(f"{label}: recorded lifecycle clean={stored.get('clean')} but the "
                             f"raw record gives clean={again['clean']} ({why})")
            elif stored.get("summary") != again["summary"]:
                found.append(f"{label}: recorded summary {stored.get('summary')!r} differs from "
                             f"the one generated from the raw record {again['summary']!r}")
        processes = run.get("processes")
        main = processes[0] if isinstance(processes, list) and processes else None
        if isinstance(main, Mapping) and ("exit_code" in run or "signal" in run) and (
                run.get("exit_code"), run.get("signal")) != (main.get("exit_code"),
                                                             main.get("signal")):
            found.append(f"{label}: exit_code/signal {run.get('exit_code')}/{run.get('signal')} "
                         f"differ from the main process's {main.get('exit_code')}/"
                         f"{main.get('signal')}")
        found += [f"{label}: {p}" for p in _check_hashes("output", run.get("outputs"))]
        found += [f"{label}: {p}" for p in _check_hashes("input", run.get("inputs"))]
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def check_verdicts(block: Any, receipt: Mapping[str, Any], path: Path) -> list[str]:
    """The ``verdicts`` block equals the one derived from the raw blocks now."""
    again = derive_verdicts(receipt)
    if not isinstance(block, Mapping):
        return ["verdicts block missing or not a mapping"]
    return [f"verdicts.{key}: recorded {block.get(key)!r} but the raw blocks give {value!r}"
            for key, value in again.items() if not _same(block.get(key), value)]


def check_speed(block: Any, receipt: Mapping[str, Any], path: Path) -> list[str]:
    """Each speed verdict re-derived from its raw samples (``speed.contradictions``)."""
    try:
        from ..judge.speed import contradictions
    except ImportError:  # the speed module is optional for reading receipts
        return []
    if not isinstance(block, list):
        return ["speed is not a list"]
    return [f"speed[{i}]: {p}" for i, entry in enumerate(block) if isinstance(entry, Mapping)
            for p in contradictions(entry)]


def _rejudge(kinds: Any, gate_spec: str, name: str, left: Mapping[str, Any],
             right: Mapping[str, Any]) -> bool | None:
    """Re-run a lossless gate on two recorded fingerprints (None: not re-derivable)."""
    from ..gates import parse_gate
    from ..kinds import Artifact

    gate = parse_gate(gate_spec)
    if gate is None or not gate.lossless:
        return None  # a tolerance gate needs the data itself, not digests
    a = Artifact(name=name, kind=str(left["kind"]), fingerprint=dict(left["fingerprint"]),
                 path=None)
    b = Artifact(name=name, kind=str(right["kind"]), fingerprint=dict(right["fingerprint"]),
                 path=None)
    if a.kind != b.kind:
        return False
    return bool(kinds.compare(gate, a, b).passed)


def check_gates(block: Any, receipt: Mapping[str, Any], path: Path) -> list[str]:
    """Each golden gate's pass/fail re-derived from the two recorded fingerprints."""
    from ..kinds import KindRegistry

    if block is None:
        return []
    if not isinstance(block, list):
        return ["gates is not a list"]
    kinds = KindRegistry()
    found = []
    for index, entry in enumerate(block):
        evidence = entry.get("evidence") if isinstance(entry, Mapping) else None
        if not evidence:
            if isinstance(entry, Mapping) and entry.get("passed") is True:
                found.append(f"gates[{index}] {entry.get('artifact')}: recorded passed=True "
                             "with no fingerprints to show it")
            continue
        again = _rejudge(kinds, str(entry.get("gate")), str(entry.get("artifact")),
                         evidence["golden"], evidence["obtained"])
        if again is not None and again != entry.get("passed"):
            found.append(f"gates[{index}] {entry.get('artifact')}: recorded passed="
                         f"{entry.get('passed')} but its fingerprints give passed={again}")
    return found


def check_lossless(block: Any, receipt: Mapping[str, Any], path: Path) -> list[str]:
    """Each lossless verdict re-derived: comparisons from the runs' fingerprints, then the table."""
    from ..judge.repeatability import rederive
    from ..kinds import KindRegistry

    if block is None:
        return []
    if not isinstance(block, list):
        return ["lossless is not a list"]
    kinds = KindRegistry()
    found = []
    for index, entry in enumerate(block):
        if not isinstance(entry, Mapping):
            found.append(f"lossless[{index}] is not a mapping")
            continue
        runs = {r["name"]: r["artifacts"] for r in entry.get("runs") or []}
        gates = entry.get("gates") or {}
        comparisons = list(entry.get("control_comparisons") or [])
        if entry.get("candidate_comparison"):
            comparisons.append(entry["candidate_comparison"])
        for comparison in comparisons:
            left, right = runs.get(comparison["left"]), runs.get(comparison["right"])
            if left is None or right is None:
                found.append(f"lossless[{index}]: comparison {comparison['left']} vs "
                             f"{comparison['right']} names a run that is not recorded")
                continue
            for result in comparison.get("results") or []:
                name = result["artifact"]
                again = _rejudge(kinds, str(gates.get(name, result["gate"])), name, left[name],
                                 right[name])
                if again is not None and again != result.get("passed"):
                    found.append(f"lossless[{index}] {comparison['left']} vs "
                                 f"{comparison['right']} {name}: recorded passed="
                                 f"{result.get('passed')} but the fingerprints give {again}")
        verdict = rederive(entry)
        if verdict != entry.get("verdict"):
            found.append(f"lossless[{index}]: recorded {entry.get('verdict')} but its "
                         f"comparisons give {verdict}")
    return found


def default_checkers() -> dict[str, Checker]:
    """Block name -> re-derivation. Add an entry here to verify a new block."""
    return {
        "integrity": check_integrity,
        "runspec": check_runspec,
        "runs": check_runs,
        "speed": check_speed,
        "gates": check_gates,
        "lossless": check_lossless,
        "verdicts": check_verdicts,
    }


def verify_receipt(path: Path | str, checkers: Mapping[str, Checker] | None = None,
                   *, receipt: Mapping[str, Any] | None = None) -> list[str]:
    """Contradictions in one receipt (empty: consistent); unreadable raises ReceiptError.
    ``receipt`` is the receipt already loaded from ``path``, when the caller has it."""
    path = Path(path)
    if receipt is None:
        receipt = load(path)
    found: list[str] = []
    for block, check in (checkers if checkers is not None else default_checkers()).items():
        try:
            found += check(receipt.get(block), receipt, path)
        except Exception as exc:  # a malformed block is a finding, not a crash of verify
            found.append(f"{block}: cannot be re-derived ({type(exc).__name__}: {exc})")
    return found


def receipt_paths(directory: Path | str) -> list[Path]:
    """Every receipt under ``directory`` (a single receipt file is accepted too)."""
    root = Path(directory)
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.json") if not p.name.startswith("."))


def verify(directory: Path | str, *, checkers: Mapping[str, Checker] | None = None,
           ) -> list[str]:
    """Every contradiction in every receipt of ``directory``, each prefixed with its file."""
    root = Path(directory)
    if not root.exists():
        return [f"{root}: no such receipts folder"]
    found: list[str] = []
    loaded = load_all(root)
    for path, receipt in loaded.items():
        if isinstance(receipt, ReceiptError):
            found.append(str(receipt))
        else:
            found += [f"{path}: {p}" for p in verify_receipt(path, checkers, receipt=receipt)]
    return found + check_summary(root, loaded)


SUMMARY_NAME = "SUMMARY.md"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def load_all(directory: Path | str) -> dict[Path, dict[str, Any] | ReceiptError]:
    """Every receipt of a folder, read once: the receipt, or why it cannot be read."""
    loaded: dict[Path, dict[str, Any] | ReceiptError] = {}
    for path in receipt_paths(directory):
        try:
            loaded[path] = load(path)
        except ReceiptError as exc:
            loaded[path] = exc
    return loaded


def summary_lines(directory: Path | str,
                  loaded: Mapping[Path, dict[str, Any] | ReceiptError] | None = None,
                  ) -> list[str]:
    """The summary of a receipts folder, generated from the receipts alone (never by hand):
    one row per test with its outcome and the verdicts re-derived from its raw blocks.
    ``loaded`` is :func:`load_all` of the folder, when the caller has read it already."""
    rows: list[tuple[str, ...]] = []
    counts: dict[str, int] = {}
    for path, receipt in (load_all(directory) if loaded is None else loaded).items():
        if isinstance(receipt, ReceiptError):
            rows.append((path.name, "unreadable", "", "", "", "", _cell(receipt), ""))
            counts["UNREADABLE"] = counts.get("UNREADABLE", 0) + 1
            continue
        derived = derive_verdicts(receipt)
        outcome = receipt.get("outcome") or {}
        phases = ", ".join(f"{k} {v}" for k, v in outcome.items() if v != "passed") or "passed"
        clean = derived["lifecycle"]["clean"]
        gates = derived["gates"]
        overall = derived["overall"] or "-"
        counts[overall] = counts.get(overall, 0) + 1
        rows.append((
            _cell(receipt.get("test_id")), _cell(phases),
            "-" if clean is None else ("clean" if clean else "NOT clean"),
            f"{gates['passed']} passed, {gates['failed']} failed" if receipt.get("gates") else "-",
            ", ".join(derived["lossless"]) or "-", ", ".join(derived["speed"]) or "-", overall,
            _cell(receipt.get("written_at") or "-"),
        ))
    lines = [
        "# pytest-lossless summary",
        "",
        "Generated by `python -m pytest_lossless summary` from the receipts in this folder; "
        "`verify` fails when this file does not match them.",
        "",
        "| test | outcome | lifecycle | golden gates | lossless | speed | verdict | written |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    total = ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no receipts"
    lines += ["", f"{len(rows)} receipts: {total}", ""]
    return lines


def write_summary(directory: Path | str) -> Path:
    """Write ``SUMMARY.md`` beside the receipts, atomically, under a lock on the folder, so
    that two sessions finishing together leave the summary of every receipt."""
    import fcntl

    folder = Path(directory)
    path = folder / SUMMARY_NAME
    fd = os.open(folder / ".summary.lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        write_atomic(path, "\n".join(summary_lines(folder)).encode())
    finally:
        os.close(fd)
    return path


def check_summary(directory: Path | str,
                  loaded: Mapping[Path, dict[str, Any] | ReceiptError] | None = None,
                  ) -> list[str]:
    """A ``SUMMARY.md`` that differs from the one the receipts generate was edited or is stale."""
    path = Path(directory) / SUMMARY_NAME
    if not Path(directory).is_dir() or not path.exists():
        return []
    generated = "\n".join(summary_lines(directory, loaded))
    if path.read_text(encoding="utf-8", errors="replace") != generated:
        return [f"{path}: does not match the receipts beside it (edited by hand, or stale); "
                f"regenerate it with: python -m pytest_lossless summary --write {directory}"]
    return []


__all__ = ["RAW_BLOCKS", "SCHEMA", "SCHEMA_VERSION", "Checker", "Receipt", "canonical_sha256",
           "default_checkers", "derive_verdicts", "load", "raw_sha256", "receipt_name",
           "receipt_paths", "summary_lines", "verify", "verify_receipt", "write_atomic",
           "write_summary"]
