"""``verify``: every derived value and hash of a receipt re-derived from its raw blocks.

Each re-derivation is a :data:`Checker` of one block, listed in :func:`default_checkers`
(block name -> checker); a contradiction is a line naming the block and what disagrees. Kinds
that plugins add are re-derived through the same plugins pytest loads (:class:`Context`).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..core.artifact import Artifact
from ..core.digests import sha256_file
from ..core.records import JsonObject, JsonValue, json_object
from ..core.redact import MARKER_RE
from ..errors import ReceiptError
from ..kinds.registry import KindRegistry
from ..run import lifecycle_verdict
from .crosscheck import (
    check_lossless_outputs,
    check_run_requests,
    check_run_sequence,
    check_speed_runs,
)
from .provenance import publication_contradictions
from .receipts import (
    LEGACY_DIFF,
    STORED_DIFF,
    Integrity,
    ReceiptParts,
    ReceiptRecord,
    load_json,
    raw_sha256,
    receipt_paths,
)
from .summary_md import check_summaries


@dataclass
class Context:
    """What a checker may use besides the receipt: its file, the kinds to re-judge with, and
    the receipt read once as a typed record (:meth:`parts`: what its verdicts derive from)."""

    path: Path
    kinds: KindRegistry = field(default_factory=KindRegistry)
    record: ReceiptRecord | None = None

    @cached_property
    def parts(self) -> ReceiptParts | None:
        return None if self.record is None else self.record.parts


MARKER_BYTES = re.compile(MARKER_RE.pattern.encode())

#: A re-derivation: (the block's value, the whole receipt as JSON, its context) ->
#: contradictions. A plugin's checker is one; the built-in ones read the receipt's record
#: (:data:`RecordChecker`, adapted by :func:`on_record`) except the integrity hash, which
#: hashes the JSON as written.
Checker = Callable[[Any, JsonObject, Context], list[str]]
#: A built-in re-derivation: (the block's value as JSON, the receipt's record, its context).
RecordChecker = Callable[[Any, ReceiptRecord, Context], list[str]]


def on_record(check: RecordChecker) -> Checker:
    """``check`` as the checkers table holds it: given the receipt's JSON, it reads the record
    :func:`verify_receipt` made of it (or makes one: a caller outside verify)."""

    def checker(block: Any, receipt: JsonObject, context: Context) -> list[str]:
        record = context.record if context.record is not None else ReceiptRecord.from_json(receipt)
        return check(block, record, context)

    checker.__name__ = checker.__qualname__ = getattr(check, "__name__", "checker")
    checker.__doc__ = check.__doc__
    return checker


def check_integrity(block: Any, receipt: JsonObject, context: Context) -> list[str]:
    """The raw blocks still hash to what was recorded when the receipt was written."""
    recorded = Integrity.read(block)
    if recorded is None:
        return ["integrity block missing: the raw blocks cannot be checked for edits"]
    actual = raw_sha256(receipt)
    if recorded.raw_sha256 != actual:
        return [
            f"raw blocks were changed after the receipt was written: integrity.raw_sha256 "
            f"is {recorded.raw_sha256} but the raw blocks hash to {actual}"
        ]
    return []


def check_runspec(block: Any, receipt: ReceiptRecord, context: Context) -> list[str]:
    """Diff file against its hash, dirty flag and publication against their evidence."""
    if block is None:
        missing = "runs were recorded but the runspec is missing"
        return [missing] if receipt.block("runs") else []
    if not isinstance(block, Mapping):
        return ["runspec is not a mapping"]
    found: list[str] = []
    source = block.get("source") or {}
    if not isinstance(source, dict):
        found.append(f"runspec: source is not an object but {type(source).__name__}")
        source = {}
    if source.get("revision"):
        diff_file = source.get("diff_file")
        diff_dirty = bool(source.get("diff_bytes"))
        if diff_file:
            found += _check_diff_file(context.path.parent, str(diff_file), source)
        elif diff_dirty:
            found.append("runspec: the diff is non-empty but no diff file is recorded")
        expected_dirty = diff_dirty or bool(source.get("untracked"))
        if source.get("dirty") is not expected_dirty:
            untracked = len(source.get("untracked") or [])
            found.append(
                f"runspec: dirty={source.get('dirty')} but the diff has "
                f"{source.get('diff_bytes')} bytes and {untracked} untracked files"
            )
        found += publication_contradictions(source, "runspec")
    for run in receipt.block("runs"):  # each run's sources=[...] trees, as recorded
        for tree, state in json_object(run.get("sources")).items():
            if isinstance(state, Mapping):
                found += publication_contradictions(state, f"runs {run.get('name')} {tree}")
    found += _check_hashes("runspec input", block.get("inputs"))
    return found


def _check_diff_file(folder: Path, diff_file: str, source: JsonObject) -> list[str]:
    """The diff a receipt names: ``diffs/<sha256>.diff`` in its session folder (named by the
    digest the receipt records for it) or, in a receipt written before diffs were shared,
    ``<name>.diff`` beside it; nothing else, so a receipt cannot point verify elsewhere."""
    shared = STORED_DIFF.match(diff_file)
    if shared is None and not LEGACY_DIFF.match(diff_file):
        return [
            f"runspec: diff_file {diff_file!r} is neither diffs/<sha256>.diff in the session "
            "folder nor a .diff beside the receipt"
        ]
    path = folder / diff_file
    if not path.is_file() or path.is_symlink():
        return [f"runspec: the diff {path} the receipt records is missing"]
    found = _check_stored_diff(path, source)
    if shared is not None and not found:
        key = "diff_stored_sha256" if source.get("diff_redacted") is True else "diff_sha256"
        if shared["digest"] != source.get(key):
            found.append(
                f"runspec: the stored diff {path} is not named by its SHA-256 "
                f"{source.get(key)} ({key})"
            )
    return found


def _check_stored_diff(path: Path, source: JsonObject) -> list[str]:
    """The stored ``.diff`` against its hash: ``diff_sha256`` when it is git's diff as it was,
    ``diff_stored_sha256`` when secrets were redacted from it (then it must hold the markers
    it says it has, and differ from git's diff)."""
    digest, markers = _read_diff(path)
    if "diff_redacted" not in source:  # a receipt written before diffs were redacted
        key = "diff_sha256"
    elif source.get("diff_redacted") is True:
        key = "diff_stored_sha256"
        count = source.get("diff_redactions")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            return [f"runspec: diff_redacted is true but diff_redactions is {count!r}"]
        if source.get("diff_stored_sha256") == source.get("diff_sha256"):
            return ["runspec: the diff is said to be redacted but is stored as git gave it"]
        if markers < count:
            return [
                f"runspec: {path} holds {markers} redaction markers but the receipt records "
                f"{count} redactions: the stored diff is not the redacted one"
            ]
    else:
        key = "diff_sha256"
        if source.get("diff_redactions") != 0 or source.get("diff_stored_sha256") != source.get(
            "diff_sha256"
        ):
            return [
                "runspec: diff_redacted is false but diff_redactions or diff_stored_sha256 "
                "say the stored diff differs from git's"
            ]
    recorded = source.get(key)
    if digest != recorded:
        return [f"runspec: {path} does not match {key} {recorded}: the stored diff was changed"]
    return []


def _read_diff(path: Path) -> tuple[str, int]:
    """SHA-256 of a stored diff and how many redaction markers it holds, read line by line."""
    digest = hashlib.sha256()
    markers = 0
    with open(path, "rb") as handle:
        for line in handle:
            digest.update(line)
            markers += len(MARKER_BYTES.findall(line))
    return digest.hexdigest(), markers


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
            found.append(
                f"{what} {name!r}: {file} no longer matches its recorded SHA-256 {entry['sha256']}"
            )
    return found


def check_runs(block: Any, receipt: ReceiptRecord, context: Context) -> list[str]:
    """Each run's lifecycle re-derived from its raw record; its outputs re-hashed."""
    if not isinstance(block, list):
        return ["runs is not a list"]
    found: list[str] = []
    for index, run in enumerate(block):
        if not isinstance(run, Mapping):
            found.append(f"runs[{index}] is not a mapping")
            continue
        label = f"runs[{index}] ({run.get('name')})"
        again = lifecycle_verdict(run).to_json()
        stored = run.get("lifecycle")
        if not isinstance(stored, Mapping):
            found.append(f"{label}: no lifecycle verdict recorded")
        else:
            if stored.get("clean") is not again["clean"]:
                why = "; ".join(again["reasons"]) or "every process ended cleanly"
                found.append(
                    f"{label}: recorded lifecycle clean={stored.get('clean')} but the "
                    f"raw record gives clean={again['clean']} ({why})"
                )
            elif stored.get("summary") != again["summary"]:
                found.append(
                    f"{label}: recorded summary {stored.get('summary')!r} differs from "
                    f"the one generated from the raw record {again['summary']!r}"
                )
        processes = run.get("processes")
        for process in processes if isinstance(processes, list) else []:
            received = process.get("signals_received") if isinstance(process, Mapping) else None
            if isinstance(received, list) and "forced" in process:
                forced = any(isinstance(s, Mapping) and s.get("forced") for s in received)
                if process.get("forced") is not forced:
                    found.append(
                        f"{label}: pid {process.get('pid')} recorded forced="
                        f"{process.get('forced')} but its signals received give {forced}"
                    )
        main = processes[0] if isinstance(processes, list) and processes else None
        if (
            isinstance(main, Mapping)
            and ("exit_code" in run or "signal" in run)
            and (run.get("exit_code"), run.get("signal"))
            != (main.get("exit_code"), main.get("signal"))
        ):
            found.append(
                f"{label}: exit_code/signal {run.get('exit_code')}/{run.get('signal')} "
                f"differ from the main process's {main.get('exit_code')}/"
                f"{main.get('signal')}"
            )
        found += [f"{label}: {p}" for p in _check_hashes("output", run.get("outputs"))]
        found += [f"{label}: {p}" for p in _check_hashes("input", run.get("inputs"))]
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def check_verdicts(block: Any, receipt: ReceiptRecord, context: Context) -> list[str]:
    """The ``verdicts`` block equals the one derived from the raw blocks now."""
    again = receipt.verdicts().to_json()
    if not isinstance(block, Mapping):
        return ["verdicts block missing or not a mapping"]
    return [
        f"verdicts.{key}: recorded {block.get(key)!r} but the raw blocks give {value!r}"
        for key, value in again.items()
        if not _same(block.get(key), value)
    ]


def check_speed(block: Any, receipt: ReceiptRecord, context: Context) -> list[str]:
    """Each speed verdict re-derived from its raw samples (``speed.contradictions``)."""
    try:
        from ..speed.runner import contradictions
    except ImportError:  # the speed module is optional for reading receipts
        return []
    if not isinstance(block, list):
        return ["speed is not a list"]
    return [
        f"speed[{i}]: {p}"
        for i, entry in enumerate(block)
        if isinstance(entry, Mapping)
        for p in [*contradictions(entry), *_speed_fields(entry), *_plan_fields("speed", entry)]
    ]


def _speed_fields(entry: Mapping[str, Any]) -> list[str]:
    """``target_ratio`` (what the verdict line and the signed detail show) is ``1 - target``."""
    target: Any = entry.get("target")
    ratio: Any = entry.get("target_ratio")
    if _is_number(target) and _is_number(ratio) and not math.isclose(ratio, 1 - target):
        return [f"recorded target_ratio={ratio} but target={target} gives {1 - target:g}"]
    return []


def _rejudge(
    kinds: KindRegistry, gate_spec: str, name: str, left: JsonValue, right: JsonValue
) -> bool | None:
    """Re-run a lossless gate on two recorded fingerprints (None: not re-derivable)."""
    from ..gates import parse_gate

    gate = parse_gate(gate_spec)
    if gate is None or not gate.lossless:
        return None  # a lossy gate needs the data itself: its statistics are checked instead
    a, b = _recorded(name, left), _recorded(name, right)
    if a.kind != b.kind:
        return False
    return bool(kinds.compare(gate, a, b).passed)


def _recorded(name: str, side: JsonValue) -> Artifact:
    """One side of a recorded comparison (its ``kind`` and ``fingerprint``) as the artifact a
    gate compares; a ValueError or KeyError when it has no such shape (named by verify)."""
    recorded = _object(side, f"the recorded {name!r}")
    fingerprint = _object(recorded["fingerprint"], f"the fingerprint of {name!r}")
    return Artifact(name=name, kind=str(recorded["kind"]), fingerprint=fingerprint, path=None)


def _object(value: JsonValue, what: str) -> JsonObject:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not an object but {type(value).__name__}")
    return value


def _rejudge_results(
    kinds: KindRegistry,
    pair: str,
    comparison: JsonObject,
    left: JsonObject,
    right: JsonObject,
    gates: JsonObject,
) -> list[str]:
    """Each result of one recorded comparison of two runs re-judged from their fingerprints
    (under the gate the entry names for the artifact, else the result's own)."""
    found = []
    results = comparison.get("results") or []
    if not isinstance(results, list):
        raise ValueError(f"{pair}: results is not a list but {type(results).__name__}")
    for result in (_object(r, f"{pair}: a result") for r in results):
        name = str(result["artifact"])
        gate = str(gates.get(name, result.get("gate")))
        again = _rejudge(kinds, gate, name, left[name], right[name])
        if again is not None and again != result.get("passed"):
            found.append(
                f"{pair} {name}: recorded passed={result.get('passed')} but the "
                f"fingerprints give {again}"
            )
    return found


def _lossy_contradictions(entry: JsonObject) -> list[str]:
    """A lossy gate (``tolerance``, ``ulp``) cannot be re-run on digests, but its recorded
    statistics must agree with its recorded pass: a pass has no position beyond the bound and
    its largest distance within it, a failure shows what differs, the 99th percentile is not
    above the largest."""
    from ..errors import LosslessError
    from ..gates import parse_gate

    try:
        gate = parse_gate(str(entry.get("gate")))
    except LosslessError:
        return []  # an unreadable gate is _rejudge's to name
    if gate is None or gate.lossless:
        return []
    stats = json_object(entry.get("diagnostics"))
    unit = "ulp" if gate.name == "ulp" else "abs_diff"
    largest: Any = stats.get(f"max_{unit}")
    beyond: Any = stats.get("count_beyond")
    p99: Any = stats.get(f"p99_{unit}")
    passed, differs = entry.get("passed"), bool(entry.get("metadata_diffs"))
    if not all(_is_number(v) for v in (largest, beyond)):
        # The built-in kinds always record them; a plugin's own lossy comparer may not.
        if passed is True and entry.get("kind") in ("video", "audio", "tensor"):
            return [f"recorded a {gate.spec} pass without max_{unit} and count_beyond to show it"]
        return []
    found = []
    if passed is True and (beyond != 0 or differs):
        found.append(f"recorded passed=True with count_beyond={beyond} under {gate.spec}")
    if passed is False and beyond == 0 and not differs:
        found.append("recorded passed=False with count_beyond=0 and no metadata that differs")
    bound = gate.ulps if gate.name == "ulp" else (gate.atol if not gate.rtol else None)
    if bound is not None and (largest <= bound) != (beyond == 0) and not differs:
        found.append(f"max_{unit}={largest} and count_beyond={beyond} disagree under {gate.spec}")
    if _is_number(p99) and p99 > largest:
        found.append(f"p99_{unit}={p99} is above max_{unit}={largest}")
    if entry.get("unit") == "element" and entry.get("mismatch_count") not in (None, beyond):
        found.append(f"mismatch_count={entry.get('mismatch_count')} but count_beyond={beyond}")
    return found


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def check_gates(block: Any, receipt: ReceiptRecord, context: Context) -> list[str]:
    """Each golden gate's pass/fail re-derived from the two recorded fingerprints."""
    if block is None:
        return []
    if not isinstance(block, list):
        return ["gates is not a list"]
    kinds = context.kinds
    found = []
    for index, entry in enumerate(block):
        evidence = entry.get("evidence") if isinstance(entry, Mapping) else None
        if not evidence:
            if isinstance(entry, Mapping) and entry.get("passed") is True:
                found.append(
                    f"gates[{index}] {entry.get('artifact')}: recorded passed=True "
                    "with no fingerprints to show it"
                )
            continue
        again = _rejudge(
            kinds,
            str(entry.get("gate")),
            str(entry.get("artifact")),
            evidence["golden"],
            evidence["obtained"],
        )
        if again is not None and again != entry.get("passed"):
            found.append(
                f"gates[{index}] {entry.get('artifact')}: recorded passed="
                f"{entry.get('passed')} but its fingerprints give passed={again}"
            )
        found += [
            f"gates[{index}] {entry.get('artifact')}: {p}" for p in _lossy_contradictions(entry)
        ]
        found += [
            f"gates[{index}] {entry.get('artifact')}: {p}" for p in _gate_fields(entry, evidence)
        ]
        if entry.get("passed") is True:
            found += [
                f"gates[{index}] {entry.get('artifact')}: {p}"
                for p in _check_stored_golden(kinds, str(entry.get("artifact")), evidence)
            ]
    return found


def _gate_lossless(spec: object) -> bool | None:
    """Whether the gate ``spec`` names is lossless (None: not a gate spec this verify reads:
    ``coverage``, or a malformed one, which the re-judging names)."""
    from ..errors import LosslessError
    from ..gates import parse_gate

    try:
        gate = parse_gate(spec) if isinstance(spec, str) else None
    except LosslessError:
        return None
    return None if gate is None else gate.lossless


def _gate_fields(entry: Mapping[str, Any], evidence: Mapping[str, Any]) -> list[str]:
    """The fields of a golden gate entry that decide its verdict, against the records they
    derive from (#20): ``lossless`` (PASS or LOSSY-PASS) is the gate's own; a pass is judged
    under the gate frozen in the golden's manifest; each side's ``sha256`` (the attested
    subject) is the one its fingerprint holds; a lossless pass counts no differing unit."""
    found = []
    gate = entry.get("gate")
    lossless = _gate_lossless(gate)
    if lossless is not None and entry.get("lossless") is not lossless:
        found.append(
            f"recorded lossless={entry.get('lossless')} but its gate {gate} is "
            f"{'lossless' if lossless else 'lossy'}"
        )
    golden = evidence.get("golden")
    if (
        entry.get("passed") is True
        and isinstance(golden, Mapping)
        and golden.get("gate") is not None
        and golden.get("gate") != gate
    ):
        found.append(
            f"recorded a pass under {gate}, but the golden's manifest froze {golden.get('gate')}"
        )
    for side in ("golden", "obtained"):
        recorded = evidence.get(side)
        if not isinstance(recorded, Mapping) or not isinstance(recorded.get("fingerprint"), dict):
            continue
        inner = recorded["fingerprint"].get("sha256")
        if recorded.get("sha256") is not None and inner is not None and recorded["sha256"] != inner:
            found.append(
                f"the {side} artifact's sha256 {str(recorded['sha256'])[:16]} differs from its "
                f"fingerprint's {str(inner)[:16]}"
            )
    if entry.get("passed") is True and lossless and entry.get("mismatch_count") not in (None, 0):
        found.append(f"recorded passed=True with mismatch_count={entry.get('mismatch_count')}")
    return found


def _check_stored_golden(kinds: KindRegistry, name: str, evidence: JsonObject) -> list[str]:
    """A PASS is only as good as the golden it was judged by: where that golden is still on
    this machine, unchanged since (same manifest bytes), the stored file must agree with the
    manifest (bytes, SHA-256, recomputed fingerprint) and the manifest with the receipt. A
    golden that is gone or was updated since cannot be re-checked and is skipped."""
    from ..errors import GoldenError
    from ..goldens.manifest import check_integrity, load_manifest

    golden = evidence.get("golden")
    if not isinstance(golden, dict) or golden.get("stored") != "full":
        return []
    folder = Path(str(golden.get("folder") or ""))
    if not golden.get("folder") or not folder.is_dir():
        return []
    try:
        entries, manifest_sha256 = load_manifest(folder)
    except GoldenError:
        return []  # changed since, into something unreadable: not the golden it was judged by
    entry = entries.get(name)
    if entry is None or manifest_sha256 != golden.get("manifest_sha256"):
        return []
    if entry.fingerprint != golden.get("fingerprint") or entry.sha256 != golden.get("sha256"):
        return [f"the golden recorded differs from the manifest in {folder} it names"]
    try:
        check_integrity(folder, entry, kinds=kinds)
    except GoldenError as exc:
        problem = getattr(exc, "problem", str(exc))
        return [f"judged PASS against a stored golden that contradicts its manifest: {problem}"]
    return []


def check_lossless(block: Any, receipt: ReceiptRecord, context: Context) -> list[str]:
    """Each lossless verdict re-derived: comparisons from the runs' fingerprints, then the table."""
    from ..compare.repeatability import rederive

    if block is None:
        return []
    if not isinstance(block, list):
        return ["lossless is not a list"]
    kinds = context.kinds
    found = []
    for index, entry in enumerate(block):
        if not isinstance(entry, Mapping):
            found.append(f"lossless[{index}] is not a mapping")
            continue
        runs = {r["name"]: r["artifacts"] for r in entry.get("runs") or []}
        comparisons = _comparisons(entry, "control_comparisons", "candidate_comparison")
        found += _rejudge_pairs(kinds, f"lossless[{index}]", comparisons, runs, entry)
        verdict = rederive(entry)
        if verdict != entry.get("verdict"):
            found.append(
                f"lossless[{index}]: recorded {entry.get('verdict')} but its "
                f"comparisons give {verdict}"
            )
        found += [f"lossless[{index}]: {p}" for p in _lossless_fields(entry)]
        found += [f"lossless[{index}]: {p}" for p in _coverage_again(kinds, entry)]
        found += [f"lossless[{index}]: {p}" for p in _plan_fields("lossless", entry)]
    return found


def _lossless_fields(entry: Mapping[str, Any]) -> list[str]:
    """The fields of a lossless entry derived from its gates and comparisons (#20): ``lossy``
    (PASS or LOSSY-PASS) is whether any of its gates is lossy; ``control_repeatable`` whether
    every control comparison found its runs identical."""
    from ..compare.repeatability import control_repeatable

    found = []
    gates = entry.get("gates")
    if isinstance(gates, Mapping) and gates:
        kinds = [_gate_lossless(g) for g in gates.values()]
        if None not in kinds and entry.get("lossy") is not (False in kinds):
            found.append(
                f"recorded lossy={entry.get('lossy')} but its gates "
                f"({', '.join(f'{k}: {g}' for k, g in sorted(gates.items()))}) give "
                f"lossy={False in kinds}"
            )
    for miss in entry.get("coverage") or []:
        if isinstance(miss, Mapping) and miss.get("passed") is not False:
            found.append(
                f"coverage of {miss.get('run')} {miss.get('artifact')}: recorded "
                f"passed={miss.get('passed')}, but a coverage entry is a miss"
            )
    proof = entry.get("proof")
    for finding in proof.get("runs") or [] if isinstance(proof, Mapping) else []:
        if (
            isinstance(finding, Mapping)
            and finding.get("found") is True
            and not finding.get("evidence")
        ):
            found.append(f"proof of {finding.get('run')}: found with no evidence to show it")
    if "control_repeatable" in entry and entry.get("control_repeatable") is not (
        again := control_repeatable(entry)
    ):
        found.append(
            f"recorded control_repeatable={entry.get('control_repeatable')} but its control "
            f"comparisons give {again}"
        )
    return found


def _frozen_plan(entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    record = entry.get("gate_plan")
    if not isinstance(record, Mapping) or record.get("frozen") is not True:
        return None
    plan = record.get("plan")
    return plan if isinstance(plan, Mapping) else None


def _coverage_again(kinds: KindRegistry, entry: Mapping[str, Any]) -> list[str]:
    """Request coverage re-derived (#20): the media asked for (the entry's ``expect``, else
    its frozen plan's) against each run's recorded fingerprints must miss exactly the runs and
    artifacts the entry's ``coverage`` names. A miss removed from the list (a FAIL made a PASS)
    or one added is named. Without a record of what was asked, nothing can be re-derived."""
    from ..compare.coverage import run_misses
    from ..core.expect import Media

    plan = _frozen_plan(entry)
    asked = entry["expect"] if "expect" in entry else (plan or {}).get("expect")
    if asked is None:
        recorded = [c for c in entry.get("coverage") or [] if isinstance(c, Mapping)]
        return (
            []
            if plan is None or not recorded
            else [
                f"records {len(recorded)} coverage miss(es), but its frozen plan asked for no media"
            ]
        )
    expect: Media | dict[str, Media]
    if isinstance(asked, Mapping) and "seconds" not in asked:
        expect = {str(k): Media(**v) for k, v in asked.items()}
    else:
        expect = Media(**asked)
    again: set[tuple[str, str]] = set()
    for run in entry.get("runs") or []:
        artifacts = {
            name: _recorded(name, side) for name, side in (run.get("artifacts") or {}).items()
        }
        again |= {
            (m.run, m.result.artifact) for m in run_misses(expect, artifacts, str(run.get("name")))
        }
    recorded_misses = {
        (str(c.get("run")), str(c.get("artifact")))
        for c in entry.get("coverage") or []
        if isinstance(c, Mapping)
    }
    found = []
    for run, artifact in sorted(again - recorded_misses):
        found.append(
            f"{run} {artifact} misses the media asked for ({asked}) by its recorded fingerprint, "
            "but the entry's coverage does not name it"
        )
    for run, artifact in sorted(recorded_misses - again):
        found.append(
            f"coverage names {run} {artifact} as a miss, but its recorded fingerprint holds "
            f"the media asked for ({asked})"
        )
    return found


def _plan_fields(section: str, entry: Mapping[str, Any]) -> list[str]:
    """What a frozen plan fixes beyond the gates and targets (#20): the dispatch-proof rule
    (a proof record dropped turns an INCONCLUSIVE into a PASS), the number of control runs,
    and the verdicts the test asserts (``expect_verdict``: a verdict asserted counts as a pass
    in the signed result, so one added by hand would hide a FAIL)."""
    plan = _frozen_plan(entry)
    if plan is None:
        return []
    found = []
    if "proof" in plan:
        proof = entry.get("proof")
        rule = proof.get("rule") if isinstance(proof, Mapping) else proof
        if rule != plan["proof"]:
            found.append(f"ran with proof rule {rule!r} but the frozen plan says {plan['proof']!r}")
    if section == "lossless" and isinstance(plan.get("runs"), int):
        controls = sum(
            1
            for r in entry.get("runs") or []
            if isinstance(r, Mapping) and r.get("role") == "control"
        )
        if controls != plan["runs"]:
            found.append(
                f"ran {controls} control runs but the frozen plan says runs={plan['runs']}"
            )
    asserted = plan.get("expect_verdict")
    if entry.get("expect_verdict") != asserted and not (
        isinstance(asserted, list) and entry.get("expect_verdict") == sorted(asserted)
    ):
        found.append(
            f"records expect_verdict={entry.get('expect_verdict')!r} but the frozen plan asserts "
            f"{asserted!r}"
        )
    return found


def check_matrix(block: Any, receipt: ReceiptRecord, context: Context) -> list[str]:
    """Each determinism matrix (#24) re-derived: every comparison from the runs' fingerprints,
    every cell's verdict from its comparisons (:func:`..compare.matrix.rederive`), the grid's
    verdict as its worst cell and its explanation line from the cells' verdicts; a traced
    cell's first divergence is carried between the runs its verdict calls for."""
    from ..compare.matrix import divergence_problems, explanation_line, rederive
    from ..core.verdict import Verdict

    if block is None:
        return []
    if not isinstance(block, list):
        return ["matrix is not a list"]
    found: list[str] = []
    for index, grid in enumerate(block):
        where = f"matrix[{index}]"
        if not isinstance(grid, Mapping):
            found.append(f"{where} is not a mapping")
            continue
        cells = [c for c in grid.get("cells") or [] if isinstance(c, Mapping)]
        runs = {
            str(r.get("name")): r.get("artifacts") or {}
            for c in cells
            for r in c.get("runs") or []
            if isinstance(r, Mapping)
        }
        for cell in cells:
            comparisons = _comparisons(cell, "repeat_comparisons", "reference_comparison")
            found += _rejudge_pairs(context.kinds, where, comparisons, runs, grid)
        verdicts = rederive(grid)
        for cell in cells:
            again_word = verdicts.get(str(cell.get("name")))
            if again_word != cell.get("verdict"):
                found.append(
                    f"{where} cell {cell.get('name')}: recorded {cell.get('verdict')} but its "
                    f"comparisons give {again_word}"
                )
        found += [f"{where} {problem}" for problem in divergence_problems(grid)]
        worst = Verdict.worst(verdicts.values())
        if worst is not None and grid.get("verdict") != worst:
            found.append(f"{where}: recorded {grid.get('verdict')} but its cells give {worst}")
        axes = grid.get("axes")
        if isinstance(axes, Mapping) and verdicts:
            line = explanation_line(axes, verdicts, str(grid.get("reference")))
            if grid.get("explanation") != line:
                found.append(
                    f"{where}: the explanation {grid.get('explanation')!r} is not the one its "
                    f"cells give ({line!r})"
                )
    return found


def _comparisons(entry: Any, many: str, one: str) -> list[Any]:
    """The comparisons an entry records: the list ``many``, then the single ``one`` if any."""
    listed = list(entry.get(many) or [])
    return [*listed, entry[one]] if entry.get(one) else listed


def _rejudge_pairs(
    kinds: KindRegistry, where: str, comparisons: list[Any], runs: Any, entry: Any
) -> list[str]:
    """Each comparison of two recorded runs re-judged (:func:`_rejudge_results`, under the
    ``gates`` of ``entry``); one that names a run not recorded is named."""
    found = []
    for comparison in comparisons:
        pair = f"{where} {comparison.get('left')} vs {comparison.get('right')}"
        left, right = runs.get(comparison.get("left")), runs.get(comparison.get("right"))
        if left is None or right is None:
            found.append(f"{pair}: names a run that is not recorded")
            continue
        found += _rejudge_results(kinds, pair, comparison, left, right, entry.get("gates") or {})
    return found


def check_canary(block: Any, receipt: ReceiptRecord, context: Context) -> list[str]:
    """The canary block's shape and statuses (:func:`..kinds.canary.check_records`)."""
    from ..kinds.canary import check_records

    return check_records(block, receipt.to_json())


def check_frozen_plans(block: Any, receipt: ReceiptRecord, context: Context) -> list[str]:
    """Each lossless and speed entry ran what the frozen plan it records says (``gate_plan``)."""
    from ..goldens.plans import receipt_contradictions

    return receipt_contradictions(receipt.to_json())


def default_checkers() -> dict[str, Checker]:
    """Block name -> re-derivation. Add an entry here to verify a new block."""
    built_in: dict[str, RecordChecker] = {
        "runspec": check_runspec,
        "runs": check_runs,
        "speed": check_speed,
        "gates": check_gates,
        "lossless": check_lossless,
        "verdicts": check_verdicts,
        "canary": check_canary,
        "matrix": check_matrix,
        # Cross-checks between blocks: the same fact recorded twice must agree.
        "runs/sequence": check_run_sequence,
        "runs/requests": check_run_requests,
        "speed/runs": check_speed_runs,
        "lossless/outputs": check_lossless_outputs,
        "lossless+speed/plans": check_frozen_plans,
    }
    checkers: dict[str, Checker] = {"integrity": check_integrity}  # the JSON as written
    checkers.update({name: on_record(check) for name, check in built_in.items()})
    return checkers


def verify_receipt(
    path: Path | str,
    checkers: Mapping[str, Checker] | None = None,
    *,
    receipt: JsonObject | None = None,
    kinds: KindRegistry | None = None,
) -> list[str]:
    """Contradictions in one receipt (empty: consistent); unreadable raises ReceiptError.
    ``receipt`` is the receipt already loaded from ``path``, when the caller has it; ``kinds``
    re-judges gates (default: the built-in kinds only)."""
    path = Path(path)
    if receipt is None:
        receipt = load_json(path)
    try:  # read once into its record: the checkers judge the blocks it holds
        record = ReceiptRecord.from_json(receipt)
    except ReceiptError as exc:
        return [f"the receipt cannot be read: {exc}"]
    context = Context(path, kinds or KindRegistry(), record)
    found: list[str] = []
    for block, check in (checkers if checkers is not None else default_checkers()).items():
        try:
            found += check(receipt.get(block), receipt, context)
        except Exception as exc:  # a malformed block is a finding, not a crash of verify
            found.append(f"{block}: cannot be re-derived ({type(exc).__name__}: {exc})")
    return found


def verify(
    directory: Path | str,
    *,
    checkers: Mapping[str, Checker] | None = None,
    kinds: KindRegistry | None = None,
) -> list[str]:
    """Every contradiction in every receipt of ``directory``, each prefixed with its file, and
    every ``SUMMARY.md`` that differs from the receipts it summarises. Whether each session
    folder is complete (its ``INDEX.json``) is :func:`.sessions.check_campaign`'s part."""
    root = Path(directory)
    if not root.exists():
        return [f"{root}: no such receipts folder"]
    found: list[str] = []
    checked = verify_folder(root, checkers, kinds=kinds)
    for path, receipt in checked.receipts.items():
        if path not in checked.problems:  # not even JSON of a receipt
            found.append(str(receipt))
        found += [f"{path}: {p}" for p in checked.problems.get(path, ())]
    return found + check_summaries(root, checked.receipts)


@dataclass(frozen=True)
class Checked:
    """The receipts of a folder as :func:`verify_folder` read them: each one's record (or why
    it cannot be read) and the contradictions its checkers found (only for readable JSON)."""

    receipts: dict[Path, ReceiptRecord | ReceiptError]
    problems: dict[Path, list[str]]


def verify_folder(
    directory: Path | str,
    checkers: Mapping[str, Checker] | None = None,
    *,
    kinds: KindRegistry | None = None,
    skip: Callable[[Path], bool] | None = None,
) -> Checked:
    """Every receipt under ``directory`` read once: its JSON as written goes to the checkers
    (they hash and re-derive it as it is on disk), its record to the readers after them
    (summaries, sessions). ``skip``: files that are not receipts (an export's table)."""
    kinds = kinds or KindRegistry()
    receipts: dict[Path, ReceiptRecord | ReceiptError] = {}
    problems: dict[Path, list[str]] = {}
    for path in receipt_paths(directory):
        if skip is not None and skip(path):
            continue
        try:
            receipt = load_json(path)
        except ReceiptError as exc:
            receipts[path] = exc
            continue
        problems[path] = verify_receipt(path, checkers, receipt=receipt, kinds=kinds)
        try:
            receipts[path] = ReceiptRecord.from_json(receipt)
        except ReceiptError as exc:  # its checkers named it already
            receipts[path] = ReceiptError(f"{path}: the receipt cannot be read: {exc}", path=path)
    return Checked(receipts, problems)
