"""One test's checks against its goldens: what the ``golden`` fixture does, without pytest.

Compare mode compares each artifact with the test's :class:`~.goldens.GoldenFolder` and notes
what a run misses of its request (:mod:`.coverage`); update mode stages artifacts (a producer
runs at least twice and must agree with itself, every run holding what was asked) and commits
the folder once the test passed. The folder itself (layout, integrity, the atomic swap) is
:mod:`.goldens`.

With ``repeat_producers`` (``--lossless-repeat-producers``), compare mode runs a producer
``producer_runs`` times too, and compares its first run with the golden only when every run
agreed; runs that differ raise :class:`UnrepeatableProducer`, an INCONCLUSIVE verdict: a flaky
output is never taken for a changed one (``python -m pytest_lossless bisect`` relies on it).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..compare.coverage import (
    CoverageMiss,
    Expect,
    RunMedia,
    check_names,
    expectation_for,
    producer_misses,
    run_misses,
    varied_runs,
)
from ..compare.repeatability import LosslessVerdict
from ..core import faults
from ..core.expect import Media
from ..core.records import JsonObject
from ..errors import Inconclusive
from ..gates import Gate, GateResult
from ..kinds.registry import Artifact
from .folder import GoldenFolder
from .manifest import ManifestEntry, artifact_name
from .swap import UpdateEvent


class UnrepeatableProducer(Inconclusive):
    """In compare mode with repeated producers, a producer's runs differed among themselves:
    INCONCLUSIVE (the control is not repeatable), never compared with the golden. ``verdict``
    holds every run's fingerprints and what varied, for the receipt."""

    def __init__(self, message: str, *, verdict: LosslessVerdict) -> None:
        super().__init__(message)
        self.verdict = verdict


class Golden:
    """What the ``golden`` fixture does for one test, without pytest.

    In compare mode, :meth:`check` compares and returns the :class:`GateResult`.
    In update mode it stages the artifact (a producer runs at least twice and must
    agree with itself) and :meth:`commit` writes the folder once the test passed.
    """

    def __init__(
        self,
        folder: GoldenFolder,
        *,
        update: bool,
        workdir: Path,
        producer_runs: int = 2,
        provenance: JsonObject | None = None,
        repeat_producers: bool = False,
        diagnostics: Path | None = None,
    ) -> None:
        self.folder = folder
        self.update = update
        self.workdir = workdir
        #: Where diff pictures, listings and the obtained file of a mismatch are written: the
        #: session folder beside the report (the plugin's choice), else the work folder.
        self.diagnostics = diagnostics if diagnostics is not None else workdir / "diagnostics"
        self.producer_runs = max(2, producer_runs)
        #: Compare mode runs a producer ``producer_runs`` times too (:meth:`repeated_run`).
        self.repeat_producers = repeat_producers
        self.provenance = dict(provenance or {})
        self.results: list[GateResult] = []
        self.staged: list[ManifestEntry] = []
        #: Request coverage misses (``expect=``), one receipt entry each; see :mod:`.coverage`.
        self.misses: list[CoverageMiss] = []

    def check(
        self,
        name: str,
        artifact: Any,
        gate: Gate | str | None = None,
        *,
        allow_empty: bool = False,
        expect: Expect = None,
    ) -> GateResult | None:
        """Compare (or stage) one artifact; with ``expect``, a miss of the request is added to
        :attr:`misses` and, under --update-goldens, nothing of that run is staged."""
        from ..core.artifact import is_producer, materialize, produce
        from ..gates import parse_gate

        name = artifact_name(name)
        chosen = parse_gate(gate)
        if expect is not None:  # what the run was asked for: only a check given one asks
            check_names(expect, [name], "golden.check")
            expect = expectation_for(expect, name)
        folder = self.workdir / "obtained"
        if self.update and is_producer(artifact):
            what = f"golden {name!r}"
            self._stage_producer(
                lambda: {name: artifact()}, chosen, what, allow_empty=allow_empty, expect=expect
            )
            return None
        if self.repeat_producers and is_producer(artifact):
            artifact = self.repeated_run(lambda: {name: artifact()}, chosen, f"golden {name!r}")[
                name
            ]
        path = materialize(produce(artifact), name, folder)
        if self.update:
            entry = self.folder.stage(name, path, chosen, self.provenance, allow_empty=allow_empty)
            self.staged.append(entry)
            self._cover(expect, name, entry.kind, entry.fingerprint)
            return None
        faults.point("compare")
        result = self.folder.compare(name, path, chosen, diagnostics_dir=self.diagnostics)
        obtained = self.folder.evidence[name].obtained
        self._cover(expect, name, obtained.kind, obtained.fingerprint)
        if not result.passed and self.folder.stored_in_full(name):
            keep = self.diagnostics / "obtained-for-upload"  # the report looks for it so
            keep.mkdir(parents=True, exist_ok=True)
            target = keep / name
            if path.resolve() != target.resolve():
                shutil.copyfile(path, target)
            result.diagnostic_files.append(str(target))
        self.results.append(result)
        return result

    def stage_run(
        self,
        artifacts: Any,
        gate: Gate | str | None = None,
        *,
        allow_empty: bool = False,
        expect: Expect = None,
    ) -> list[ManifestEntry] | None:
        """Under --update-goldens, stage every artifact of a producer's run, once it has run
        at least twice with identical results, each run holding what ``expect`` asks for;
        returns None in compare mode (nothing done)."""
        from ..core.artifact import is_producer, named_artifacts
        from ..gates import parse_gate

        if not self.update:
            return None
        if is_producer(artifacts):
            return self._stage_producer(
                artifacts, parse_gate(gate), "goldens", allow_empty=allow_empty, expect=expect
            )
        named = named_artifacts(artifacts, "golden.check_all")
        check_names(expect, named, "golden.check_all")
        before = len(self.staged)
        for name, value in named.items():
            wanted = expectation_for(expect, name)
            if isinstance(expect, Media):
                wanted = RunMedia.of(expect)  # the run's clip and track, not its tensors
            self.check(name, value, gate, allow_empty=allow_empty, expect=wanted)
        return self.staged[before:]

    def repeated_run(self, producer: Any, gate: Gate | None, what: str) -> dict[str, Path]:
        """Compare mode with ``repeat_producers``: run ``producer`` ``producer_runs`` times and
        return its first run's artifacts (files), once every run agreed; raise
        :class:`UnrepeatableProducer` when they did not. What the runs were asked for
        (``expect=``) is checked on the first run, when it is compared with the golden."""
        from ..compare.coverage import varied_runs
        from ..compare.repeatability import compare_control_candidate
        from ..core.verdict import Verdict

        index = sum(1 for _ in self.workdir.glob("repeated-*")) if self.workdir.exists() else 0
        verdict = compare_control_candidate(
            producer,
            None,
            runs=self.producer_runs,
            kinds=self.folder.kinds,
            workdir=self.workdir / f"repeated-{index}",
            gate=gate,
            label=f"{what} producer",
        )
        if verdict.verdict == Verdict.INCONCLUSIVE:
            raise UnrepeatableProducer(
                f"the {what} producer of {self.folder.test_id} gave different results in "
                f"{self.producer_runs} runs (--lossless-repeat-producers), so its output cannot "
                "be judged against the golden: the control is not repeatable.\n"
                + varied_runs(verdict),
                verdict=verdict,
            )
        return {name: Path(run["path"]) for name, run in verdict.runs[0]["artifacts"].items()}

    def _cover(self, expect: Any, name: str, kind: str, fingerprint: JsonObject) -> None:
        """Note what artifact ``name`` of one obtained run misses of ``expect`` (a miss keeps
        :meth:`commit` from writing anything)."""
        if expect is None:
            return
        found = {name: Artifact(name=name, kind=kind, fingerprint=fingerprint, path=None)}
        self.misses += run_misses(expect, found, "obtained")

    def _stage_producer(
        self,
        producer: Any,
        gate: Gate | None,
        what: str,
        *,
        allow_empty: bool = False,
        expect: Expect = None,
    ) -> list[ManifestEntry]:
        """Run a producer at least twice; stage its first run only if every run agreed."""
        from ..compare.repeatability import compare_control_candidate
        from ..core.verdict import Verdict
        from ..errors import NondeterministicProducer

        verdict = compare_control_candidate(
            _named_well(producer),
            None,
            runs=self.producer_runs,
            kinds=self.folder.kinds,
            workdir=self.workdir / f"producer-{len(self.staged)}",
            gate=gate,
            label="run",
            expect=expect,
        )
        check_names(expect, verdict.runs[0]["artifacts"], "golden.check_all")
        self.misses += producer_misses(verdict.coverage)
        if verdict.coverage:  # a run missed the request: nothing of it becomes a golden
            return []
        if verdict.verdict == Verdict.INCONCLUSIVE:
            raise NondeterministicProducer(
                f"refusing to write the {what} of {self.folder.test_id}: the producer gave "
                f"different results in {self.producer_runs} runs, and a flaky run is never "
                "baked into a golden. Nothing was written.\n" + varied_runs(verdict)
            )
        staged = []
        for name, run in sorted(verdict.runs[0]["artifacts"].items()):
            # Already fingerprinted by the repeatability check: stage without decoding again.
            fingerprinted = Artifact(
                name=name, kind=run["kind"], fingerprint=run["fingerprint"], path=Path(run["path"])
            )
            staged.append(
                self.folder.stage(
                    name,
                    Path(run["path"]),
                    gate,
                    self.provenance,
                    artifact=fingerprinted,
                    allow_empty=allow_empty,
                )
            )
        self.staged += staged
        return staged

    def unchecked(self) -> list[str]:
        """Golden artifacts of this test's manifest that were not compared in this run."""
        if self.update or not self.folder.path.exists():
            return []
        checked = {r.artifact for r in self.results}
        return sorted(set(self.folder.manifest()) - checked)

    def commit(self) -> list[UpdateEvent]:
        if not self.update or not self.staged or self.misses:  # a miss is never written
            return []
        return self.folder.commit()


def trace_artifacts(
    name: str,
    trace: Any,
    gate: Gate | str | Mapping[str, Gate | str] | None,
    names: Any,
    folder: Path,
) -> list[tuple[str, Path, Gate | None]]:
    """The goldens ``golden.check_trace`` checks: one per traced tensor, in trace order.

    ``trace``: a traced run's result, a trace folder or a :class:`~..compare.divergence.Trace`;
    ``names``: glob patterns matched against each tensor's ``name`` and ``name#occurrence``
    (None: every tensor). A tensor pinned bit for bit (no gate, or ``bytes``) becomes a digest
    file (``<name>.<tensor>.sha256``: dtype, shape and SHA-256, one line); under any other gate
    its elements (``<name>.<tensor>.npy``, bfloat16 as its uint16 words), which the trace must
    have kept. ``gate`` is one gate, or a mapping from glob patterns to gates (first match)."""
    from fnmatch import fnmatchcase

    import numpy as np

    from ..compare.divergence import Trace, load_trace, trace_folder
    from ..core.paths import safe_name
    from ..errors import ArtifactError, ConfigError
    from ..gates import parse_gate

    where = trace_folder(trace)
    if where is None:
        raise ConfigError(
            "golden.check_trace(trace=...)",
            trace,
            "not a traced run: give model_run(..., trace=True)'s result or a trace folder",
        )
    read = trace if isinstance(trace, Trace) else load_trace(where)
    patterns = [names] if isinstance(names, str) else list(names) if names is not None else None
    if isinstance(gate, Mapping):
        rules = [(str(p), parse_gate(g)) for p, g in gate.items()]
    else:
        rules = [("*", parse_gate(gate))]

    def matches(pattern: str, label: str, plain: str) -> bool:
        return fnmatchcase(label, pattern) or fnmatchcase(plain, pattern)

    folder.mkdir(parents=True, exist_ok=True)
    chosen: list[tuple[str, Path, Gate | None]] = []
    for entry in read.entries:
        label = f"{entry.name}#{entry.occurrence}"
        if patterns is not None and not any(matches(p, label, entry.name) for p in patterns):
            continue
        rule = next((g for p, g in rules if matches(p, label, entry.name)), None)
        stem = f"{name}.{safe_name(label, default='tensor')}"
        if rule is None or rule.name == "bytes":
            path = folder / f"{stem}.sha256"
            path.write_text(f"{entry.dtype} {list(entry.shape)} {entry.sha256}\n")
            chosen.append((path.name, path, parse_gate("bytes")))
            continue
        array = read.array(entry)
        if array is None:
            raise ArtifactError(
                read.data,
                f"tensor {label!r} was kept as a digest only, so gate {rule.spec} cannot compare "
                "its elements: raise PYTEST_LOSSLESS_TRACE_RAW_BYTES above "
                f"{entry.nbytes}, or pin it bit for bit (no gate)",
            )
        path = folder / f"{stem}.npy"
        np.save(path, np.ascontiguousarray(array), allow_pickle=False)
        chosen.append((path.name, path, rule))
    if not chosen:
        raise ConfigError(
            "golden.check_trace(names=...)",
            names,
            f"no tensor of the trace in {where} matches; its names: "
            + ", ".join(sorted({e.name for e in read.entries})[:10]),
        )
    return chosen


def _named_well(producer: Any) -> Any:
    """``producer``, whose every run's artifact names are checked before anything compares or
    records them (a name that is not UTF-8 is refused, named: :func:`.manifest.artifact_name`)."""
    from ..core.artifact import named_artifacts, produce

    def run() -> Any:
        result = produce(producer)
        for name in named_artifacts(result, "golden.check_all"):
            artifact_name(name)
        return result

    return run
