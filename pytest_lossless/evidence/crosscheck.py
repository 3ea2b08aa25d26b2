"""Cross-checks between the blocks of one receipt: records that say the same thing twice.

Each block alone is re-derived elsewhere (:mod:`.verify`). An edit made consistently inside one
block (samples dropped and the interval recomputed, the control's fingerprints copied into the
candidate) still contradicts another block that recorded the same facts: the run records the
launcher wrote. These checkers name each such contradiction with the field that disagrees.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.records import JsonObject, json_object, json_objects
from ..errors import ReceiptError
from .index import IndexTest
from .receipts import ReceiptRecord

#: How far a sample's start may lie from its run's start (the two clocks are read apart).
_START_SLACK_SECONDS = 0.5
#: Run records give their start to the millisecond (ISO-8601), samples theirs in full.
_ROUNDING_SECONDS = 0.002
_RUN_NAME = re.compile(r"^(command|server)-(\d+)$")


def _epoch(value: object) -> float | None:
    """A run's ``started_at`` (ISO-8601, UTC) or a sample's (epoch seconds) as epoch seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def check_run_sequence(block: Any, receipt: ReceiptRecord, context: Any) -> list[str]:
    """Run names are numbered 01, 02, ... in the order they started: a gap is a removed
    record."""
    numbers = []
    for run in receipt.block("runs"):
        match = _RUN_NAME.match(str(run.get("name")))
        if match:
            numbers.append((int(match.group(2)), str(run.get("name"))))
    if not numbers:
        return []
    found = []
    seen = [n for n, _ in numbers]
    if seen != sorted(seen):
        found.append(f"runs: recorded out of order ({', '.join(name for _, name in numbers)})")
    missing = sorted(set(range(1, max(seen) + 1)) - set(seen))
    if missing:
        shown = ", ".join(f"{n:02d}" for n in missing[:8]) + (" ..." if len(missing) > 8 else "")
        found.append(
            f"runs: the launcher numbers every run it starts, but run number(s) {shown} of "
            f"{max(seen)} are not recorded: run records were removed"
        )
    duplicates = sorted({n for n in seen if seen.count(n) > 1})
    if duplicates:
        found.append(f"runs: run number(s) {duplicates} are recorded more than once")
    return found


_TALLIED = ("requests", "failed", "bytes_sent", "bytes_received")


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _request_failed(entry: JsonObject) -> bool:
    """Failed as the server client counts it: an error, or no 2xx answer."""
    status = _count(entry.get("status"))
    return "error" in entry or status is None or not 200 <= status < 300


def check_run_requests(block: Any, receipt: ReceiptRecord, context: Any) -> list[str]:
    """Each server run's ``request_totals`` against its request records (the kept ones add up
    to ``kept``, ``kept`` and ``omitted`` to the totals, no record removed or altered, the
    measured times are the kept requests' own), ``readiness`` against the startup fields, and
    ``device_memory``'s peak against its per-process peaks."""
    found: list[str] = []
    for run in receipt.block("runs"):
        name = f"runs: {run.get('name')}"
        totals = run.get("request_totals")
        if isinstance(totals, dict):
            found += _request_totals(name, run, totals)
        readiness = run.get("readiness")
        if isinstance(readiness, dict):
            for field, other in (("probes", "ready_polls"), ("ready_seconds", "startup_seconds")):
                if readiness.get(field) != run.get(other):
                    found.append(
                        f"{name}: readiness.{field} is {readiness.get(field)}, but the run "
                        f"records {other} {run.get(other)}"
                    )
        memory = run.get("device_memory")
        if isinstance(memory, dict):
            found += _device_memory(name, memory)
    return found


def _request_totals(name: str, run: JsonObject, totals: JsonObject) -> list[str]:
    found: list[str] = []
    records = json_objects(run.get("requests"))
    kept, omitted = totals.get("kept"), totals.get("omitted")
    if not isinstance(kept, dict) or not isinstance(omitted, dict):
        return [f"{name}: request_totals has no kept and omitted parts to add up"]
    derived = {
        "requests": len(records),
        "failed": sum(_request_failed(r) for r in records),
        "bytes_sent": sum(_count(r.get("bytes_sent")) or 0 for r in records),
        "bytes_received": sum(_count(r.get("bytes_received")) or 0 for r in records),
    }
    for field in _TALLIED:
        if kept.get(field) != derived[field]:
            found.append(
                f"{name}: request_totals.kept.{field} is {kept.get(field)}, but its "
                f"{len(records)} request records give {derived[field]}"
            )
        parts = (_count(kept.get(field)), _count(omitted.get(field)))
        whole = _count(totals.get(field))
        if None in parts or whole is None or whole != sum(p or 0 for p in parts):
            found.append(
                f"{name}: request_totals.{field} is {totals.get(field)}, but kept "
                f"{kept.get(field)} and omitted {omitted.get(field)} add up otherwise"
            )
    indices = [r.get("index") for r in records]
    if indices != list(range(1, len(records) + 1)):
        found.append(
            f"{name}: request indices are {_short(indices)}, not 1..{len(records)} in order: "
            "request records were removed or reordered"
        )
    marked = [r.get("index") for r in records if r.get("failed") is not _request_failed(r)]
    if marked:
        found.append(f"{name}: request(s) {_short(marked)} are marked failed against their status")
    limit = _count(totals.get("limit"))
    if limit is not None and (
        len(records) > limit or (omitted.get("requests") and len(records) != limit)
    ):
        found.append(
            f"{name}: {len(records)} request records kept with a limit of {limit} and "
            f"{omitted.get('requests')} omitted: records beyond the limit are only counted"
        )
    statuses = totals.get("statuses")
    if isinstance(statuses, dict) and sum(
        c for c in statuses.values() if isinstance(c, int)
    ) != totals.get("requests"):
        found.append(f"{name}: request_totals.statuses do not add up to its requests")
    if omitted.get("requests") == 0:
        for key, warm in (("measured_seconds", False), ("warmup_seconds", True)):
            timed = [
                r.get("seconds")
                for r in records
                if "error" not in r and bool(r.get("warmup")) is warm
            ]
            # Sorted: concurrent requests are timed in the order they end, kept by index.
            recorded = run.get(key)
            if isinstance(recorded, list) and sorted(map(str, recorded)) != sorted(map(str, timed)):
                found.append(
                    f"{name}: {key} is {_short(recorded)}, but its request records time "
                    f"{_short(timed)}"
                )
    return found


def _device_memory(name: str, memory: JsonObject) -> list[str]:
    peak = memory.get("peak_mib")
    peaks = [p.get("peak_mib") for p in json_objects(memory.get("processes"))]
    numbers = [float(p) for p in peaks if isinstance(p, (int, float))]
    if not isinstance(peak, (int, float)) or not numbers:
        return []
    slack = 1e-6
    if not max(numbers) - slack <= float(peak) <= sum(numbers) + slack:
        return [
            f"{name}: device_memory.peak_mib is {peak}, but its processes' peaks "
            f"{_short(numbers)} allow {max(numbers)} to {sum(numbers)}"
        ]
    return []


def _sample_order(label: str, samples: Sequence[JsonObject], design: str) -> list[str]:
    """Indices 0..n-1 in order, blocks 0.. contiguous and whole, only the last arm an error."""
    found: list[str] = []
    per_block = len(design) if design in ("ABBA", "AB") else None
    indices = [s.get("index") for s in samples]
    if indices != list(range(len(samples))):
        found.append(
            f"{label}: sample indices are {_short(indices)}, not 0..{len(samples) - 1} in order: "
            "samples were removed or reordered"
        )
    blocks: dict[int, list[int]] = {}
    for sample in samples:
        block, position = sample.get("block"), sample.get("position")
        if isinstance(block, int) and isinstance(position, int):
            blocks.setdefault(block, []).append(position)
    if sorted(blocks) != list(range(len(blocks))):
        found.append(
            f"{label}: blocks {_short(sorted(blocks))} are not contiguous from 0: blocks were "
            "removed"
        )
    errored = [i for i, s in enumerate(samples) if s.get("error") is not None]
    if errored and errored != [len(samples) - 1]:
        found.append(f"{label}: an arm error is recorded before the last sample ({errored})")
    if per_block is not None:
        last = max(blocks) if blocks else None
        for block, positions in sorted(blocks.items()):
            whole = positions == list(range(per_block))
            cut_short = block == last and errored and positions == list(range(len(positions)))
            if not whole and not cut_short:
                found.append(
                    f"{label}: block {block} holds positions {positions}; a {design} block holds "
                    f"{list(range(per_block))}"
                )
    return found


def check_speed_runs(block: Any, receipt: ReceiptRecord, context: Any) -> list[str]:
    """Speed samples against the run records: each sample's run exists, is timed once, took the
    recorded time, and every run started while the gate ran is one of its samples."""
    runs = {str(r.get("name")): r for r in receipt.block("runs")}
    found: list[str] = []
    claimed: dict[str, str] = {}
    for number, entry in enumerate(receipt.block("speed")):
        label = f"speed[{number}]" + (f" {entry['workload']!r}" if entry.get("workload") else "")
        samples = json_objects(entry.get("samples"))
        found += _sample_order(label, samples, str(entry.get("design")))
        linked = [s for s in samples if isinstance(s.get("run"), str)]
        for sample in linked:
            name = str(sample["run"])
            run = runs.get(name)
            where = f"{label} sample #{sample.get('index')}"
            if run is None:
                found.append(f"{where}: timed run {name}, which is not recorded in runs")
                continue
            if name in claimed:
                found.append(f"{where}: run {name} is already the time of {claimed[name]}")
            claimed[name] = where
            found += _sample_against_run(where, sample, run)
        # Which runs each arm started is recorded by the plugin (``runs``): with it, a run that
        # started while the gate ran but belongs to no sample was dropped with its sample.
        if samples and all(isinstance(s.get("runs"), list) for s in samples):
            started = {
                str(n) for s in samples for r in [s["runs"]] if isinstance(r, list) for n in r
            }
            found += _unsampled_runs(label, samples, runs, started)
    return found


def _sample_against_run(where: str, sample: JsonObject, run: JsonObject) -> list[str]:
    seconds, found = sample.get("seconds"), []
    expected = run.get("wall_seconds")
    if run.get("kind") == "server":
        listed = run.get("measured_seconds")
        requests = listed if isinstance(listed, list) else []
        timed = [t for t in requests if isinstance(t, (int, float))]
        expected = sum(timed) if timed else None
        if len(timed) != len(requests):
            found.append(f"{where}: its run's measured_seconds {_short(requests)} are not numbers")
    if (
        isinstance(seconds, (int, float))
        and isinstance(expected, (int, float))
        and not math.isclose(float(seconds), float(expected), rel_tol=1e-9, abs_tol=1e-9)
    ):
        found.append(f"{where}: {seconds} s, but its run {run.get('name')} records {expected} s")
    start, began = _epoch(sample.get("started_at")), _epoch(run.get("started_at"))
    if start is not None and began is not None and began + _START_SLACK_SECONDS < start:
        found.append(f"{where}: its run {run.get('name')} started before the sample did")
    return found


def _unsampled_runs(
    label: str,
    samples: Sequence[JsonObject],
    runs: Mapping[str, JsonObject],
    sampled: set[str],
) -> list[str]:
    """Runs that started inside the gate's time span but that no sample refers to: dropped."""
    starts = [t for s in samples if (t := _epoch(s.get("started_at"))) is not None]
    ends = [
        t + float(arm)
        for s in samples
        if (t := _epoch(s.get("started_at"))) is not None
        and isinstance(arm := s.get("arm_seconds"), (int, float))
    ]
    if not starts or not ends:
        return []
    # A run of the gate starts after its sample did (the sample's clock is read first), so
    # the span opens at the first sample, less the run records' millisecond rounding; a run
    # that had ended by then (the lossless.compare before the gate) is not the gate's.
    first, last = min(starts) - _ROUNDING_SECONDS, max(ends) + _START_SLACK_SECONDS
    dropped = sorted(
        name
        for name, run in runs.items()
        if name not in sampled
        and (began := _epoch(run.get("started_at"))) is not None
        and first <= began <= last
        and not ((ended := _epoch(run.get("ended_at"))) is not None and ended <= min(starts))
    )
    if not dropped:
        return []
    return [
        f"{label}: run(s) {', '.join(dropped)} started while the gate ran, but no sample "
        f"refers to them ({len(samples)} samples): samples were removed"
    ]


def check_lossless_outputs(block: Any, receipt: ReceiptRecord, context: Any) -> list[str]:
    """Each lossless run's fingerprints against the output digests its run record carries."""
    outputs: dict[str, tuple[str, JsonObject]] = {}
    for run in receipt.block("runs"):
        for entry in json_object(run.get("outputs")).values():
            if isinstance(entry, dict) and entry.get("path"):
                outputs[str(entry["path"])] = (str(run.get("name")), entry)
    found: list[str] = []
    for number, entry in enumerate(receipt.block("lossless")):
        for compared in json_objects(entry.get("runs")):
            for name, artifact in json_object(compared.get("artifacts")).items():
                if not isinstance(artifact, dict):
                    continue
                source = outputs.get(str(artifact.get("path")))
                fingerprint = artifact.get("fingerprint")
                if source is None or not isinstance(fingerprint, dict):
                    continue
                run_name, output = source
                digest = fingerprint.get("sha256")
                if digest is not None and output.get("sha256") not in (None, digest):
                    found.append(
                        f"lossless[{number}] {compared.get('name')} {name}: fingerprint of "
                        f"sha256 {str(digest)[:16]}... but run {run_name} recorded that output "
                        f"with sha256 {str(output.get('sha256'))[:16]}..."
                    )
    return found


def _short(values: Sequence[object]) -> str:
    text = ", ".join(str(v) for v in values[:12])
    return f"[{text}{', ...' if len(values) > 12 else ''}]"


# --- a session's receipts against each other and against its index ----------------------------

#: The phases a receipt records an outcome for (``interrupted`` names a signal, not a phase).
_PHASES = ("setup", "call", "teardown")
#: What a receipt's phase outcomes make of its test, as the session's index records a test
#: (:class:`~.index.IndexTest`), -> the index outcomes that agree. A failed phase fails the
#: test (``inconclusive`` is pytest's failed); a test stopped before its end is
#: ``interrupted``, or ``failed`` where its xdist worker died (xdist reports a crash as
#: failed); a skip is ``skipped`` or, for an xfail, ``xfailed``; every phase passed (an
#: xpass too) is ``passed``.
_AGREEING = {
    "failed": frozenset({"failed"}),
    "interrupted": frozenset({"interrupted", "failed"}),
    "skipped": frozenset({"skipped", "xfailed"}),
    "passed": frozenset({"passed"}),
}
#: The reason the index records for a test whose xdist worker crashed (its report's phase is
#: ``???``): the worker may die after the test's receipt was written, before its report came.
_WORKER_CRASH = "??? failed"


def receipt_test_outcome(outcome: Mapping[str, str]) -> str | None:
    """A receipt's phase outcomes as its test's one outcome (a key of :data:`_AGREEING`), or
    None when they say too little to tell (no phase, or a word pytest does not report)."""
    words = [outcome[p] for p in _PHASES if p in outcome]
    if not words or not set(words) <= {
        "passed",
        "failed",
        "inconclusive",
        "skipped",
        "interrupted",
    }:
        return None
    if "failed" in words or "inconclusive" in words:
        return "failed"
    if "interrupted" in words:
        return "interrupted"
    return "skipped" if "skipped" in words else "passed"


def check_index_outcomes(
    tests: Sequence[IndexTest], receipts: Mapping[Path, ReceiptRecord | ReceiptError]
) -> list[str]:
    """Each receipt's outcome against its test's outcome in the session's index (#20): the
    index records every report pytest made (the controller's, under xdist), the receipt the
    phases its test ran; a receipt that says passed where the index says failed (or the
    reverse) was edited. ``tests``: the index's :class:`~.index.IndexTest` entries;
    ``receipts``: path -> the receipt read there. Receipts the index names for no test, and
    receipts too old or too short to say an outcome, are not judged here."""
    by_file = {str(t.receipt): t for t in tests if t.receipt}
    found = []
    for path, receipt in receipts.items():
        test = by_file.get(path.name)
        if test is None or not isinstance(receipt, ReceiptRecord):
            continue
        said = receipt_test_outcome(receipt.outcome)
        if said is None or test.outcome in _AGREEING[said]:
            continue
        if test.outcome == "interrupted" or (
            test.outcome == "failed" and test.reason == _WORKER_CRASH
        ):
            continue  # stopped (or its worker died) after the receipt was written
        phases = ", ".join(f"{p} {w}" for p, w in receipt.outcome.items())
        found.append(
            f"{path}: the receipt of {receipt.test_id} records its test {said} ({phases}), "
            f"but the session's INDEX.json records {test.test_id} as {test.outcome}: the "
            "receipt's outcome or the index was changed after the session"
        )
    return found


def check_session_canaries(receipts: Mapping[Path, ReceiptRecord | ReceiptError]) -> list[str]:
    """Every (kind, gate) the session compared under has its canary record (#20) in one of
    the session's receipts: the canary runs once per session (per xdist worker) for each
    (kind, gate) after its first comparison, and the plugin files its record in the receipt
    of the test that made it (proved, cannot-fail, not run with its reason, or skipped under
    ``--lossless-no-canary``). A record removed from a receipt (its block emptied, the
    receipt resealed) leaves a compared gate unproven, which is named here.

    Not required: a session whose receipts hold no canary block at all (written before the
    canary); a comparison of two kinds (no comparator ran), or of no file (nothing to copy);
    and a (kind, gate) compared only by tests that failed or were interrupted (a canary that
    raised, or a test stopped before its records were filed)."""
    from ..kinds.canary import STATUSES

    readable = {p: r for p, r in receipts.items() if isinstance(r, ReceiptRecord)}
    if not any(r.has("canary") or "canary" in _covers(r) for r in readable.values()):
        return []  # the session predates the canary
    recorded: set[tuple[str, str]] = set()
    for receipt in readable.values():
        for entry in receipt.block("canary"):
            status = entry.get("status")
            if status in STATUSES and (status != "unavailable" or entry.get("reason")):
                recorded.add((str(entry.get("kind")), str(entry.get("gate"))))
    compared: dict[tuple[str, str], list[Path]] = {}
    for path, receipt in readable.items():
        if receipt_test_outcome(receipt.outcome) in ("failed", "interrupted", None) or (
            "interrupted" in receipt.outcome
        ):
            continue
        for pair in sorted(_compared_pairs(receipt)):
            compared.setdefault(pair, []).append(path)
    found = []
    for (kind, gate), paths in sorted(compared.items()):
        if (kind, gate) in recorded:
            continue
        more = f" (and {len(paths) - 1} other receipt(s))" if len(paths) > 1 else ""
        found.append(
            f"{paths[0]}{more}: compared under the {kind} gate {gate}, but no receipt of its "
            f"session holds the canary record of {kind}/{gate} (proved, cannot-fail, not run "
            "with its reason, or skipped under --lossless-no-canary): a canary record was "
            "removed, so that gate is not shown able to fail"
        )
    return found


def _covers(receipt: ReceiptRecord) -> tuple[str, ...]:
    return receipt.integrity.covers if receipt.integrity is not None else ()


def _compared_pairs(receipt: ReceiptRecord) -> set[tuple[str, str]]:
    """The (kind, gate) of each comparison a receipt records that the canary follows: each
    golden gate entry (not an error) and each result of a lossless comparison, where both
    sides were of its kind (or the gate is ``bytes``) and one side was a file."""
    pairs: set[tuple[str, str]] = set()
    for entry in receipt.block("gates"):
        evidence = json_object(entry.get("evidence"))
        golden, obtained = (
            json_object(evidence.get("golden")),
            json_object(evidence.get("obtained")),
        )
        if entry.get("error") or not obtained.get("path"):
            continue
        if _compared(entry, golden.get("kind"), obtained.get("kind")):
            pairs.add((str(entry.get("kind")), str(entry.get("gate"))))
    for entry in receipt.block("lossless"):
        runs = {
            str(r.get("name")): json_object(r.get("artifacts"))
            for r in json_objects(entry.get("runs"))
        }
        comparisons = [*json_objects(entry.get("control_comparisons"))]
        comparisons += json_objects([entry.get("candidate_comparison")])
        for comparison in comparisons:
            left = runs.get(str(comparison.get("left")), {})
            right = runs.get(str(comparison.get("right")), {})
            for result in json_objects(comparison.get("results")):
                name = str(result.get("artifact"))
                a, b = json_object(left.get(name)), json_object(right.get(name))
                if not (a.get("path") or b.get("path")):
                    continue
                if _compared(result, a.get("kind"), b.get("kind")):
                    pairs.add((str(result.get("kind")), str(result.get("gate"))))
    return pairs


def _compared(result: JsonObject, expected: object, obtained: object) -> bool:
    """Whether a comparator judged ``result`` (the registry answers two kinds itself)."""
    if not isinstance(result.get("kind"), str) or not isinstance(result.get("gate"), str):
        return False
    diffs = result.get("metadata_diffs")
    if isinstance(diffs, list) and any(str(d).startswith("kind: expected ") for d in diffs):
        return False
    return expected == obtained or result.get("gate") == "bytes"
