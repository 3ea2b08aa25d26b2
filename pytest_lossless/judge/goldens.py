"""The golden store: layout, manifest, integrity, atomic update, digest-only mode.

Layout: ``<goldens>/<test module>/<test name>/`` holds the stored artifacts and a
``manifest.json``. Each manifest entry freezes the artifact's kind, its gate, the
SHA-256 of the stored bytes and the decoded fingerprint, with provenance. Artifacts
above a size threshold are kept as digests only, so repositories stay small.

A test folder is only ever replaced whole (staged in a hidden sibling, then renamed
into place), so a crash or a parallel worker never leaves a half-written golden.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.digests import canonical_sha256, sha256_file
from ..errors import (
    ArtifactError,
    GateChanged,
    GoldenIntegrityError,
    GoldenMissing,
    ManifestError,
)
from ..gates import Gate, GateResult
from ..kinds import Artifact, KindRegistry

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"

_SAFE = re.compile(r"[^A-Za-z0-9._\-\[\]=,+@]")


def safe_component(text: str, what: str) -> str:
    """A folder or file name that cannot escape its parent; refuses what it cannot keep."""
    cleaned = _SAFE.sub("_", text.replace("::", "."))
    if cleaned in ("", ".", "..") or cleaned.startswith("."):
        raise ArtifactError(text, f"{what} {text!r} cannot be used as a file name")
    return cleaned


def artifact_name(name: str) -> str:
    """Validate an artifact name given to ``golden.check``: a plain file name."""
    if not isinstance(name, str) or not name:
        raise ArtifactError(str(name), "an artifact name must be a non-empty string")
    if any(ord(c) < 32 or c == "\x7f" for c in name):
        raise ArtifactError(repr(name), "an artifact name must not hold control characters")
    if "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise ArtifactError(name, "an artifact name must be a plain file name (no folders)")
    if name == MANIFEST:
        raise ArtifactError(name, f"{MANIFEST!r} is reserved for the golden's manifest")
    return name


@dataclass
class ManifestEntry:
    """One artifact of a golden folder, as frozen by ``--update-goldens``."""

    name: str
    kind: str
    gate: str
    sha256: str
    size: int
    stored: str  # "full" or "digest"
    file: str | None
    fingerprint: dict[str, Any]
    fingerprint_sha256: str
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "gate": self.gate,
            "sha256": self.sha256,
            "size": self.size,
            "stored": self.stored,
            "file": self.file,
            "fingerprint": self.fingerprint,
            "fingerprint_sha256": self.fingerprint_sha256,
            "provenance": self.provenance,
        }

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any], where: Path) -> ManifestEntry:
        try:
            return cls(
                name=name,
                kind=str(data["kind"]),
                gate=str(data["gate"]),
                sha256=str(data["sha256"]),
                size=int(data["size"]),
                stored=str(data["stored"]),
                file=None if data.get("file") is None else artifact_name(str(data["file"])),
                fingerprint=dict(data["fingerprint"]),
                fingerprint_sha256=str(data["fingerprint_sha256"]),
                provenance=dict(data.get("provenance") or {}),
            )
        except (KeyError, TypeError, ValueError, ArtifactError) as exc:
            raise ManifestError(where, f"entry {name!r} is malformed ({exc})") from None


def read_manifest(folder: Path) -> dict[str, ManifestEntry]:
    """The entries of ``folder/manifest.json``; empty when the folder has none."""
    path = folder / MANIFEST
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(path, f"cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("artifacts"), dict):
        raise ManifestError(path, "has no 'artifacts' table; it is not a pytest-lossless manifest")
    version = data.get("schema")
    if version != SCHEMA_VERSION:
        raise ManifestError(
            path,
            f"has schema {version!r}; this plugin reads schema {SCHEMA_VERSION}. "
            "Regenerate with --update-goldens",
        )
    return {
        name: ManifestEntry.from_dict(name, entry, path)
        for name, entry in data["artifacts"].items()
    }


def manifest_document(entries: Mapping[str, ManifestEntry], test_id: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "test": test_id,
        "artifacts": {name: entries[name].to_dict() for name in sorted(entries)},
    }


def check_integrity(folder: Path, entry: ManifestEntry) -> Path | None:
    """The stored file of ``entry`` after proving it matches the manifest (None: digest-only)."""
    if canonical_sha256(entry.fingerprint) != entry.fingerprint_sha256:
        raise GoldenIntegrityError(
            folder / MANIFEST,
            f"the fingerprint of {entry.name!r} was edited (its hash no longer matches)",
        )
    if entry.stored == "digest":
        return None
    if entry.file is None:
        raise GoldenIntegrityError(folder / MANIFEST, f"{entry.name!r} is stored but names no file")
    path = folder / entry.file
    if not path.is_file():
        raise GoldenIntegrityError(path, "the stored golden file is missing")
    actual = sha256_file(path)
    if actual != entry.sha256:
        raise GoldenIntegrityError(
            path,
            f"its SHA-256 is {actual[:16]}... but the manifest says {entry.sha256[:16]}...",
        )
    return path


@dataclass
class UpdateEvent:
    """What ``--update-goldens`` did to one artifact: created, changed, unchanged or removed."""

    test: str
    folder: str
    name: str
    action: str
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "test": self.test,
            "folder": self.folder,
            "name": self.name,
            "action": self.action,
            "detail": self.detail,
        }


@dataclass
class StagedArtifact:
    entry: ManifestEntry
    source: Path | None


class GoldenFolder:
    """The goldens of one test: compares artifacts, or stages them for an atomic update."""

    def __init__(
        self,
        root: Path,
        module: str,
        test_name: str,
        test_id: str,
        kinds: KindRegistry,
        *,
        digest_above: int,
    ) -> None:
        self.root = root
        self.path = (
            root / safe_component(module, "test module") / safe_component(test_name, "test name")
        )
        self.test_id = test_id
        self.kinds = kinds
        self.digest_above = digest_above
        self._staged: dict[str, StagedArtifact] = {}
        self._manifest: dict[str, ManifestEntry] | None = None
        self._manifest_sha256: str | None = None
        #: Per compared artifact, the raw evidence a receipt keeps: both fingerprints.
        self.evidence: dict[str, dict[str, Any]] = {}

    # ---------------------------------------------------------------- comparing

    def manifest(self) -> dict[str, ManifestEntry]:
        if self._manifest is None:
            self._manifest = read_manifest(self.path)
        return self._manifest

    def manifest_sha256(self) -> str:
        """SHA-256 of ``manifest.json`` as read for this test (hashed once, not per check)."""
        if self._manifest_sha256 is None:
            self._manifest_sha256 = sha256_file(self.path / MANIFEST)
        return self._manifest_sha256

    def compare(
        self,
        name: str,
        obtained_path: Path,
        gate: Gate | None,
        *,
        diagnostics_dir: Path | None = None,
    ) -> GateResult:
        """Compare an artifact with its golden; raises for a missing, damaged or re-gated golden."""
        name = artifact_name(name)
        entry = self.manifest().get(name)
        if entry is None:
            raise GoldenMissing(self.path, name)
        stored = check_integrity(self.path, entry)
        kind = self.kinds.detect(obtained_path)
        requested = gate if gate is not None else self.kinds.default_gate(kind)
        if requested.spec != entry.gate:
            raise GateChanged(self.path, name, entry.gate, requested.spec)
        obtained = self.kinds.artifact(name, obtained_path, kind)
        expected = Artifact(name=name, kind=entry.kind, fingerprint=entry.fingerprint, path=stored)
        self.evidence[name] = {
            "golden": {
                "folder": str(self.path),
                "kind": entry.kind,
                "gate": entry.gate,
                "sha256": entry.sha256,
                "stored": entry.stored,
                "manifest_sha256": self.manifest_sha256(),
                "fingerprint": entry.fingerprint,
            },
            "obtained": {
                "path": str(obtained_path),
                "kind": obtained.kind,
                "sha256": _file_sha256(obtained),
                "fingerprint": obtained.fingerprint,
            },
        }
        # A kind that differs from the golden's is reported by the registry, like any mismatch.
        return self.kinds.compare(requested, expected, obtained, diagnostics_dir=diagnostics_dir)

    def stored_in_full(self, name: str) -> bool:
        entry = self.manifest().get(name)
        return entry is not None and entry.stored == "full"

    # ---------------------------------------------------------------- updating

    def stage(
        self,
        name: str,
        path: Path,
        gate: Gate | None,
        provenance: Mapping[str, Any],
        *,
        artifact: Artifact | None = None,
    ) -> ManifestEntry:
        """Fingerprint an artifact for the next :meth:`commit`; nothing is written yet.

        ``artifact``, when the caller already fingerprinted ``path`` (a producer's run),
        is used as it is: the file is not decoded a second time.
        """
        name = artifact_name(name)
        if name in self._staged:
            raise ArtifactError(name, "checked twice in one test; give each artifact its own name")
        if artifact is None:
            artifact = self.kinds.artifact(name, path)
        kind, fingerprint = artifact.kind, artifact.fingerprint
        resolved = gate if gate is not None else self.kinds.default_gate(kind)
        size = path.stat().st_size
        stored = "digest" if size > self.digest_above else "full"
        suffix = "".join(path.suffixes[-1:])
        file = (
            name
            if (stored == "full" and Path(name).suffix)
            else (f"{name}{suffix}" if stored == "full" else None)
        )
        entry = ManifestEntry(
            name=name,
            kind=kind,
            gate=resolved.spec,
            sha256=_file_sha256(artifact),
            size=size,
            stored=stored,
            file=file,
            fingerprint=fingerprint,
            fingerprint_sha256=canonical_sha256(fingerprint),
            provenance=dict(provenance),
        )
        self._staged[name] = StagedArtifact(entry, path if stored == "full" else None)
        return entry

    def commit(self) -> list[UpdateEvent]:
        """Replace the test's golden folder with the staged artifacts, atomically.

        Unchanged artifacts keep their old manifest entry (and provenance), so a
        regeneration that changes nothing leaves nothing to review in the diff.
        """
        try:
            old = read_manifest(self.path)
        except ManifestError:
            old = {}
        events: list[UpdateEvent] = []
        final: dict[str, ManifestEntry] = {}
        for name, staged in sorted(self._staged.items()):
            before = old.get(name)
            entry = staged.entry
            if before is None:
                events.append(self._event(name, "created", f"{entry.kind}, gate {entry.gate}"))
                final[name] = entry
            elif (
                before.sha256 == entry.sha256
                and before.gate == entry.gate
                and before.stored == entry.stored
                and before.fingerprint == entry.fingerprint
            ):
                events.append(self._event(name, "unchanged"))
                final[name] = before
            else:
                events.append(self._event(name, "changed", _what_changed(before, entry)))
                final[name] = entry
        for name in sorted(set(old) - set(self._staged)):
            events.append(self._event(name, "removed", "no longer checked by the test"))
        if all(e.action == "unchanged" for e in events) and events:
            return events
        self._write(final)
        self._staged.clear()
        self._manifest = None
        return events

    def _event(self, name: str, action: str, detail: str = "") -> UpdateEvent:
        return UpdateEvent(self.test_id, str(self.path), name, action, detail)

    def _write(self, entries: Mapping[str, ManifestEntry]) -> None:
        parent = self.path.parent
        parent.mkdir(parents=True, exist_ok=True)
        token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staging = parent / f".{self.path.name}.tmp-{token}"
        staging.mkdir()
        try:
            for name, entry in entries.items():
                if entry.stored != "full" or entry.file is None:
                    continue
                staged = self._staged.get(name)
                source = staged.source if staged else self.path / entry.file
                if source is None:
                    continue
                shutil.copyfile(source, staging / entry.file)
            document = manifest_document(entries, self.test_id)
            (staging / MANIFEST).write_text(
                json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8"
            )
            _fsync_dir(staging)
            retired = parent / f".{self.path.name}.old-{token}"
            if self.path.exists():
                os.replace(self.path, retired)
            os.replace(staging, self.path)
            shutil.rmtree(retired, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _varied(verdict: Any) -> str:
    """What differed between a producer's runs, in a producer's words (run 1 vs run 2)."""
    lines = ["What varied between its runs:"]
    for comparison in verdict.control_comparisons:
        if comparison.identical:
            continue
        left = comparison.left.replace("control#", "run ")
        right = comparison.right.replace("control#", "run ")
        lines.append(f"  {left} vs {right}:")
        lines += ["    " + d.replace("\n", "\n    ") for d in comparison.differences()]
    return "\n".join(lines)


def _file_sha256(artifact: Artifact) -> str:
    """The file's SHA-256: built-in fingerprints carry it; a custom kind's may not."""
    digest = artifact.fingerprint.get("sha256")
    if isinstance(digest, str) and len(digest) == 64:
        return digest
    assert artifact.path is not None
    return sha256_file(artifact.path)


def _what_changed(before: ManifestEntry, after: ManifestEntry) -> str:
    parts = []
    if before.gate != after.gate:
        parts.append(f"gate {before.gate} -> {after.gate}")
    if before.kind != after.kind:
        parts.append(f"kind {before.kind} -> {after.kind}")
    if before.sha256 != after.sha256:
        parts.append(f"sha256 {before.sha256[:12]} -> {after.sha256[:12]}")
    if before.stored != after.stored:
        parts.append(f"stored {before.stored} -> {after.stored}")
    if before.fingerprint != after.fingerprint and before.sha256 == after.sha256:
        parts.append("fingerprint")
    return ", ".join(parts) or "entry"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
    ) -> None:
        self.folder = folder
        self.update = update
        self.workdir = workdir
        self.producer_runs = max(2, producer_runs)
        self.provenance = dict(provenance or {})
        self.results: list[GateResult] = []
        self.staged: list[ManifestEntry] = []

    def check(self, name: str, artifact: Any, gate: Gate | str | None = None) -> GateResult | None:
        from ..gates import parse_gate
        from ..media.artifacts import is_producer, materialize, produce

        name = artifact_name(name)
        chosen = parse_gate(gate)
        folder = self.workdir / "obtained"
        if self.update and is_producer(artifact):
            self._stage_producer(lambda: {name: artifact()}, chosen, f"golden {name!r}")
            return None
        path = materialize(produce(artifact), name, folder)
        if self.update:
            self.staged.append(self.folder.stage(name, path, chosen, self.provenance))
            return None
        result = self.folder.compare(
            name, path, chosen, diagnostics_dir=self.workdir / "diagnostics"
        )
        if not result.passed and self.folder.stored_in_full(name):
            keep = self.workdir / "obtained-for-upload"
            keep.mkdir(parents=True, exist_ok=True)
            target = keep / name
            if path.resolve() != target.resolve():
                shutil.copyfile(path, target)
            result.diagnostic_files.append(str(target))
        self.results.append(result)
        return result

    def stage_run(
        self, artifacts: Any, gate: Gate | str | None = None
    ) -> list[ManifestEntry] | None:
        """Under --update-goldens, stage every artifact of a producer's run, once it has run
        at least twice with identical results; returns None in compare mode (nothing done)."""
        from ..gates import parse_gate
        from ..media.artifacts import is_producer, materialize, named_artifacts

        if not self.update:
            return None
        chosen = parse_gate(gate)
        if is_producer(artifacts):
            return self._stage_producer(artifacts, chosen, "goldens")
        staged = []
        for name, value in named_artifacts(artifacts, "golden.check_all").items():
            path = materialize(value, artifact_name(name), self.workdir / "obtained")
            staged.append(self.folder.stage(name, path, chosen, self.provenance))
        self.staged += staged
        return staged

    def _stage_producer(self, producer: Any, gate: Gate | None, what: str) -> list[ManifestEntry]:
        """Run a producer at least twice; stage its first run only if every run agreed."""
        from ..core.verdict import Verdict
        from ..errors import NondeterministicProducer
        from .repeatability import compare_control_candidate

        verdict = compare_control_candidate(
            producer,
            None,
            runs=self.producer_runs,
            kinds=self.folder.kinds,
            workdir=self.workdir / f"producer-{len(self.staged)}",
            gate=gate,
            label="run",
        )
        if verdict.verdict == Verdict.INCONCLUSIVE:
            raise NondeterministicProducer(
                f"refusing to write the {what} of {self.folder.test_id}: the producer gave "
                f"different results in {self.producer_runs} runs, and a flaky run is never "
                "baked into a golden. Nothing was written.\n" + _varied(verdict)
            )
        staged = []
        for name, run in sorted(verdict.runs[0]["artifacts"].items()):
            # Already fingerprinted by the repeatability check: stage without decoding again.
            fingerprinted = Artifact(
                name=name, kind=run["kind"], fingerprint=run["fingerprint"], path=Path(run["path"])
            )
            staged.append(
                self.folder.stage(
                    name, Path(run["path"]), gate, self.provenance, artifact=fingerprinted
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
        if not self.update or not self.staged:
            return []
        return self.folder.commit()
