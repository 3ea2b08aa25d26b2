"""One test's checks against its goldens: what the ``golden`` fixture does, without pytest.

Compare mode compares each artifact with the test's :class:`~.goldens.GoldenFolder` and notes
what a run misses of its request (:mod:`.coverage`); update mode stages artifacts (a producer
runs at least twice and must agree with itself, every run holding what was asked) and commits
the folder once the test passed. The folder itself (layout, integrity, the atomic swap) is
:mod:`.goldens`.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..compare.coverage import (
    Expect,
    RunMedia,
    check_names,
    expectation_for,
    producer_misses,
    run_misses,
    varied_runs,
)
from ..core.expect import Media
from ..gates import Gate, GateResult
from ..kinds.registry import Artifact
from .folder import GoldenFolder
from .manifest import ManifestEntry, artifact_name
from .swap import UpdateEvent


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
        provenance: Mapping[str, Any] | None = None,
        diagnostics: Path | None = None,
    ) -> None:
        self.folder = folder
        self.update = update
        self.workdir = workdir
        #: Where diff pictures, listings and the obtained file of a mismatch are written: the
        #: session folder beside the report (the plugin's choice), else the work folder.
        self.diagnostics = diagnostics if diagnostics is not None else workdir / "diagnostics"
        self.producer_runs = max(2, producer_runs)
        self.provenance = dict(provenance or {})
        self.results: list[GateResult] = []
        self.staged: list[ManifestEntry] = []
        #: Request coverage misses (``expect=``), one receipt entry each; see :mod:`.coverage`.
        self.misses: list[dict[str, Any]] = []

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
        from ..gates import parse_gate
        from ..media.artifacts import is_producer, materialize, produce

        name = artifact_name(name)
        chosen = parse_gate(gate)
        check_names(expect, [name], "golden.check")
        expect = expectation_for(expect, name)
        folder = self.workdir / "obtained"
        if self.update and is_producer(artifact):
            what = f"golden {name!r}"
            self._stage_producer(
                lambda: {name: artifact()}, chosen, what, allow_empty=allow_empty, expect=expect
            )
            return None
        path = materialize(produce(artifact), name, folder)
        if self.update:
            entry = self.folder.stage(name, path, chosen, self.provenance, allow_empty=allow_empty)
            self.staged.append(entry)
            self._cover(expect, name, entry.kind, entry.fingerprint)
            return None
        result = self.folder.compare(name, path, chosen, diagnostics_dir=self.diagnostics)
        obtained = self.folder.evidence[name]["obtained"]
        self._cover(expect, name, obtained["kind"], obtained["fingerprint"])
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
        from ..gates import parse_gate
        from ..media.artifacts import is_producer, named_artifacts

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

    def _cover(self, expect: Any, name: str, kind: str, fingerprint: dict[str, Any]) -> None:
        """Note what artifact ``name`` of one obtained run misses of ``expect`` (a miss keeps
        :meth:`commit` from writing anything)."""
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


def _named_well(producer: Any) -> Any:
    """``producer``, whose every run's artifact names are checked before anything compares or
    records them (a name that is not UTF-8 is refused, named: :func:`.manifest.artifact_name`)."""
    from ..media.artifacts import named_artifacts, produce

    def run() -> Any:
        result = produce(producer)
        for name in named_artifacts(result, "golden.check_all"):
            artifact_name(name)
        return result

    return run
