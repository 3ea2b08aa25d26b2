"""Control repeatability and the lossless verdict (control vs candidate).

The table of the contract, as code:

====================================  =============================  ============
control runs identical to each other  candidate identical to control  verdict
====================================  =============================  ============
yes                                   yes                             PASS
yes                                   no                              FAIL
no                                    either                          INCONCLUSIVE
====================================  =============================  ============

A control that is not repeatable cannot judge anything: the verdict then names
what varied between control runs instead of blaming the candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.artifact import KeptFiles, materialize_all
from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.expect import Media
from ..core.paths import safe_name
from ..core.records import JsonValue, Record, from_json, json_object, spec, to_json
from ..core.verdict import Verdict
from ..errors import ConfigError
from ..gates import Gate, GateResult
from ..kinds.registry import Artifact, KindRegistry
from . import coverage
from . import divergence as tracing
from . import proof as dispatch


def lossless_table(control_repeatable: bool, candidate_identical: bool) -> Verdict:
    """The verdict table of the contract; the only place a lossless verdict is decided."""
    if not control_repeatable:
        return Verdict.INCONCLUSIVE
    return Verdict.PASS if candidate_identical else Verdict.FAIL


def _identical(comparison: Comparison) -> bool:
    return not comparison.missing and all(r.passed for r in comparison.results)


@dataclass(frozen=True, kw_only=True)
class Comparison(Record):
    """One pairwise comparison of two runs, artifact by artifact."""

    left: str
    right: str
    identical: bool = spec(derive=_identical)
    missing: list[str] = field(default_factory=list)
    results: list[GateResult] = field(default_factory=list)

    def differences(self) -> list[str]:
        lines = [f"{n}: present in only one of {self.left}, {self.right}" for n in self.missing]
        lines += [r.message() for r in self.results if not r.passed]
        return lines


@dataclass(frozen=True, kw_only=True)
class RunRecord(tracing.ReadsAsJson):
    """One run of a comparison (a control or the candidate of ``lossless.compare``, a run of a
    ``lossless.matrix`` cell): its name, wall seconds, artifacts (kind, file, fingerprint),
    where it traced (``traced``: it ran under ``trace=True``) and, for a candidate examined
    for dispatch proof, the finding. ``role`` is None in a matrix, whose runs have none."""

    role: str | None = spec(None, omit="none")
    name: str
    seconds: float
    artifacts: tuple[Artifact, ...] = spec((), json=False)  # written by to_json: see there
    traced: bool = spec(False, json=False)
    trace_dir: str | None = spec(None, omit=lambda run: not run.traced)
    proof: dispatch.Finding | None = spec(None, omit="none")

    def to_json(self) -> dict[str, Any]:
        """The artifacts are one object by name, after ``seconds`` (Artifact is no record)."""
        items = list(to_json(self).items())
        at = [k for k, _ in items].index("seconds") + 1
        artifacts = {
            a.name: {"kind": a.kind, "path": str(a.path), "fingerprint": a.fingerprint}
            for a in self.artifacts
        }
        return dict([*items[:at], ("artifacts", artifacts), *items[at:]])

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        """The artifacts read back from their object by name; traced: it has a ``trace_dir``."""
        record = from_json(cls, data)
        assert isinstance(data, Mapping)  # from_json refused anything else
        artifacts = tuple(
            Artifact(name, str(a["kind"]), a["fingerprint"], Path(a["path"]))
            for name, a in (data.get("artifacts") or {}).items()
        )
        return replace(record, artifacts=artifacts, traced="trace_dir" in data)


def run_record(
    name: str,
    seconds: float,
    artifacts: Mapping[str, Artifact],
    *,
    role: str | None = None,
    traced: bool = False,
    trace_dir: Path | None = None,
) -> RunRecord:
    """The record of a run just made (``trace_dir``: where it traced, if anywhere)."""
    return RunRecord(
        name=name,
        seconds=seconds,
        artifacts=tuple(artifacts.values()),
        role=role,
        traced=traced,
        trace_dir=None if trace_dir is None else str(trace_dir),
    )


def _repeatable(verdict: LosslessVerdict) -> bool:
    return all(c.identical for c in verdict.control_comparisons)


@dataclass(frozen=True, kw_only=True)
class LosslessVerdict(Record):
    """The verdict of ``lossless.compare``, with every run's fingerprints and comparisons (a
    receipt's ``lossless`` entry; keys the plugin adds beside it, such as ``gate_plan``, are
    not the verdict's)."""

    verdict: Verdict
    label: str = ""
    lossy: bool = False
    gates: dict[str, str] = field(default_factory=dict)
    control_repeatable: bool = spec(derive=_repeatable)
    runs: tuple[RunRecord, ...] = ()
    control_comparisons: tuple[Comparison, ...] = ()
    candidate_comparison: Comparison | None = None
    #: Dispatch proof: the rule and each candidate run's finding, when ``proof=`` was given.
    proof: dispatch.ProofRecord | None = None
    #: Request coverage misses, one per run and artifact: each one makes the verdict FAIL,
    #: whatever the comparisons say.
    coverage: tuple[coverage.CoverageMiss, ...] = ()
    #: The media the runs were asked for (``expect=``: one ``Media`` as a dict, or one per
    #: artifact), so ``verify`` re-derives ``coverage`` from the runs' fingerprints (#20).
    expect: JsonValue = spec(None, omit="none")
    #: With ``trace=True``: where the two runs that disagree first part (:func:`.divergence.
    #: between`): control#1 and the first control that differs, else the candidate.
    divergence: tracing.Departure | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.PASS

    def message(self) -> str:
        head = f"lossless {self.label + ' ' if self.label else ''}verdict: {self.verdict}"
        if self.coverage:
            lines = [f"{head}: an output does not hold what the run was asked for:"]
            lines += [
                f"  {miss.run} {miss.result.artifact}: {d}"
                for miss in self.coverage
                for d in miss.result.metadata_diffs
            ]
            return "\n".join(lines)
        controls = sum(1 for r in self.runs if r.role == "control")
        if self.verdict == Verdict.INCONCLUSIVE and self.control_repeatable and self.proof:
            return f"{head}: {dispatch.reason(self.proof.runs)}"
        if self.verdict == Verdict.INCONCLUSIVE:
            lines = [
                f"{head}: the control is not repeatable ({controls} control runs differ "
                "among themselves), so no candidate can be judged against it. What varied:"
            ]
            for comparison in self.control_comparisons:
                if not comparison.identical:
                    lines += [f"  {comparison.left} vs {comparison.right}:"]
                    lines += [f"    {d}" for d in comparison.differences()]
            return "\n".join(lines + self._divergence_lines())
        if self.verdict == Verdict.FAIL and self.candidate_comparison is not None:
            lines = [
                f"{head}: the control is repeatable ({controls} identical runs) but the "
                "candidate differs from it:"
            ]
            lines += [f"  {d}" for d in self.candidate_comparison.differences()]
            return "\n".join(lines + self._divergence_lines())
        kind = "within tolerance (lossy, not lossless)" if self.lossy else "bit for bit"
        names = ", ".join(sorted(self.gates))
        return f"{head}: {controls} control runs identical, candidate identical {kind} ({names})"

    def _divergence_lines(self) -> list[str]:
        """Where the two disagreeing runs first part (``trace=True``)."""
        found = self.divergence
        if found is None:
            return []
        pair = " vs ".join(found.between)
        if found.error:
            return [f"  trace ({pair}): {found.error}"]
        return [f"  trace ({pair}):"] + [f"    {x}" for x in found.lines()]

    def _divergence_short(self) -> str:
        first = None if self.divergence is None else self.divergence.first
        return f"; first divergence: {first.name}" if first is not None else ""

    def summary(self) -> str:
        """One line for the verdict table."""
        controls = sum(1 for r in self.runs if r.role == "control")
        if self.coverage:
            first = self.coverage[0]
            detail = (first.result.metadata_diffs or ["not covered"])[0]
            return f"{len(self.coverage)} output(s) miss the request; {first.run} {detail}"
        if self.verdict == Verdict.INCONCLUSIVE and self.control_repeatable and self.proof:
            return dispatch.reason(self.proof.runs)
        if self.verdict == Verdict.INCONCLUSIVE:
            return (
                f"control not repeatable over {controls} runs: {', '.join(varied(self))} varied"
                + self._divergence_short()
            )
        if self.verdict == Verdict.FAIL and self.candidate_comparison is not None:
            parts = [f"{n} missing" for n in self.candidate_comparison.missing] + [
                _short(r) for r in self.candidate_comparison.results if not r.passed
            ]
            return "candidate differs: " + "; ".join(parts) + self._divergence_short()
        how = "within tolerance" if self.lossy else "bit for bit"
        return f"{controls} control runs identical; candidate identical {how}"


def _short(result: GateResult) -> str:
    if result.metadata_diffs:
        return f"{result.artifact} ({result.metadata_diffs[0]})"
    return (
        f"{result.artifact} ({result.mismatch_count} of {result.total} {result.unit}s, "
        f"first {result.first_mismatch})"
    )


def control_repeatable(block: Mapping[str, Any]) -> bool:
    """Whether a recorded lossless entry's control runs were identical: every control
    comparison complete and every result passed (``control_repeatable``, re-derived)."""
    return all(
        not c.get("missing") and all(r.get("passed") for r in c.get("results", []))
        for c in block.get("control_comparisons") or []
    )


def rederive(block: Mapping[str, Any]) -> Verdict:
    """Recompute a recorded lossless verdict from its raw comparison records."""
    repeatable = control_repeatable(block)
    candidate: Mapping[str, Any] = block.get("candidate_comparison") or {}
    identical = (
        bool(candidate)
        and not candidate.get("missing")
        and all(r.get("passed") for r in candidate.get("results", []))
    )
    proof = block.get("proof")
    findings = dispatch.ProofRecord.from_json(proof).runs if isinstance(proof, Mapping) else None
    if block.get("coverage"):
        return Verdict.FAIL  # an output that misses the request fails, whatever it equals
    return dispatch.apply(lossless_table(repeatable, identical), findings)


def _compare_runs(
    left_name: str,
    left: Mapping[str, Artifact],
    right_name: str,
    right: Mapping[str, Artifact],
    gates: Mapping[str, Gate],
    kinds: KindRegistry,
    diagnostics_dir: Path | None,
) -> Comparison:
    missing = sorted(set(left) ^ set(right))
    results = []
    for name in sorted(set(left) & set(right)):
        pair = f"{left_name}-vs-{right_name}"
        folder = None if diagnostics_dir is None else diagnostics_dir / pair
        results.append(kinds.compare(gates[name], left[name], right[name], diagnostics_dir=folder))
    return Comparison(left=left_name, right=right_name, missing=missing, results=results)


def compare_control_candidate(
    control: Callable[[], Any],
    candidate: Callable[[], Any] | None,
    *,
    runs: int,
    kinds: KindRegistry,
    workdir: Path,
    gate: Gate | Mapping[str, Gate] | None = None,
    label: str = "",
    clock: Clock = SYSTEM_CLOCK,
    on_run: Callable[[str, float], None] | None = None,
    proof: dispatch.Proof | None = None,
    expect: Media | Mapping[str, Media] | None = None,
    trace: bool = False,
) -> LosslessVerdict:
    """Run the control ``runs`` times, then the candidate once, and apply the verdict table.

    With ``candidate=None`` only the control's repeatability is judged (PASS when
    repeatable); ``--update-goldens`` uses this to refuse a flaky producer. With ``proof``, the
    candidate run must show that its path ran, or a PASS is INCONCLUSIVE. With ``expect``
    (``Media``, or a mapping of artifact name to ``Media``), every run's outputs must hold what
    was asked for, or the verdict is FAIL. With ``trace``, each run traces into a folder of its
    own (see :mod:`.divergence`), and a FAIL or an INCONCLUSIVE names where the two runs that
    disagree first part.
    """
    rule = dispatch.check_rule(proof, "lossless.compare(proof)")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ConfigError(
            "lossless.compare(runs=...)",
            runs,
            "a control must run at least twice to show it is repeatable",
        )
    arms: list[tuple[str, Callable[[], Any]]] = [(f"control#{i + 1}", control) for i in range(runs)]
    if candidate is not None:
        arms.append(("candidate", candidate))
    fingerprints: dict[str, dict[str, Artifact]] = {}
    records: list[RunRecord] = []
    findings: list[dispatch.Finding] = []
    misses: list[coverage.CoverageMiss] = []
    traces: dict[str, Path | None] = {}
    kept = KeptFiles()
    for index, (name, arm) in enumerate(arms):
        started = clock.monotonic()
        if trace:
            folder = workdir / f"trace{index}-{safe_name(name)}"
            with tracing.tracing_into(folder):
                result = arm()
            traces[name] = tracing.run_trace(result, folder)
        else:
            result = arm()
        seconds = clock.monotonic() - started
        paths = materialize_all(result, name, workdir / f"run{index}-{safe_name(name)}")
        fingerprints[name] = {n: kinds.artifact(n, p) for n, p in paths.items()}
        kept.note(name, fingerprints[name])
        # One Media for the whole run covers its clip and track, not a tensor beside them.
        misses += coverage.run_misses(expect, fingerprints[name], name)
        record = run_record(
            name,
            seconds,
            fingerprints[name],
            role="candidate" if name == "candidate" else "control",
            traced=trace,
            trace_dir=traces.get(name),
        )
        if rule is not None and name == "candidate":
            findings.append(dispatch.examine(rule, result))
            record = replace(record, proof=findings[-1])
        records.append(record)
        if on_run is not None:
            on_run(name, seconds)
    kept.check(lambda name, path: kinds.artifact(name, path).fingerprint)
    first = fingerprints[arms[0][0]]
    gates = _resolve_gates(gate, first, kinds)
    diagnostics = workdir / "diagnostics"
    control_comparisons = [
        _compare_runs(arms[0][0], first, name, fingerprints[name], gates, kinds, diagnostics)
        for name, _ in arms[1:runs]
    ]
    candidate_comparison = None
    if candidate is not None:
        candidate_comparison = _compare_runs(
            arms[0][0], first, "candidate", fingerprints["candidate"], gates, kinds, diagnostics
        )
    repeatable = all(c.identical for c in control_comparisons)
    identical = candidate_comparison.identical if candidate_comparison is not None else True
    evidence = None
    if rule is not None and candidate is not None:
        evidence = dispatch.ProofRecord(str(dispatch.describe(rule)), tuple(findings))
    verdict = dispatch.apply(
        lossless_table(repeatable, identical), None if evidence is None else findings
    )
    pair = _disagreeing(arms[0][0], control_comparisons, candidate_comparison) if trace else None
    located = None
    if pair is not None:
        located = tracing.between(pair[0], traces.get(pair[0]), pair[1], traces.get(pair[1]))
    return LosslessVerdict(
        divergence=located,
        verdict=Verdict.FAIL if misses else verdict,
        runs=tuple(records),
        control_comparisons=tuple(control_comparisons),
        candidate_comparison=candidate_comparison,
        gates={name: g.spec for name, g in gates.items()},
        lossy=any(not g.lossless for g in gates.values()),
        label=label,
        proof=evidence,
        coverage=tuple(misses),
        expect=_expect_json(expect),
    )


def _expect_json(expect: Media | Mapping[str, Media] | None) -> JsonValue:
    """``expect=`` as the entry records it: a ``Media`` as its dict, a mapping by name."""
    if expect is None:
        return None
    if isinstance(expect, Media):
        return json_object(expect.to_dict())
    return {str(name): json_object(media.to_dict()) for name, media in sorted(expect.items())}


def _disagreeing(
    first: str, controls: Sequence[Comparison], candidate: Comparison | None
) -> tuple[str, str] | None:
    """The two runs whose traces explain the verdict: the first control run that differs from
    the first (INCONCLUSIVE), else the candidate (FAIL; on a PASS, its traces are identical, or
    the record says where they part even so)."""
    for comparison in controls:
        if not comparison.identical:
            return first, comparison.right
    return None if candidate is None else (first, candidate.right)


def _resolve_gates(
    gate: Gate | Mapping[str, Gate] | None,
    artifacts: Mapping[str, Artifact],
    kinds: KindRegistry,
) -> dict[str, Gate]:
    resolved: dict[str, Gate] = {}
    for name, artifact in artifacts.items():
        chosen = gate.get(name) if isinstance(gate, Mapping) else gate
        resolved[name] = chosen if chosen is not None else kinds.default_gate(artifact.kind)
    return resolved


def varied(verdict: LosslessVerdict) -> Sequence[str]:
    """The artifacts that differed between control runs (empty when repeatable)."""
    names: set[str] = set()
    for comparison in verdict.control_comparisons:
        names.update(comparison.missing)
        names.update(r.artifact for r in comparison.results if not r.passed)
    return sorted(names)
