"""The golden store: layout, comparison, atomic update, digest-only mode.

Layout: ``<goldens>/<test module>/<test name>/`` holds the stored artifacts and a
``manifest.json``. Each manifest entry freezes the artifact's kind, its gate, the
SHA-256 of the stored bytes and the decoded fingerprint, with provenance. Artifacts
above a size threshold are kept as digests only, so repositories stay small.

A test folder is only ever replaced whole, under a lock on it, by one exchange of a staged
sibling with the live folder (:mod:`.replace`), so a crash or a parallel worker never leaves a
half-written or missing golden; what a killed writer left is recovered by the next run that
touches the test. An update remembers the manifest it started from: when another session
changed the folder meanwhile, its commit writes nothing and reports a :class:`GoldenConflict`.

Goldens arrive in pull requests, so nothing here trusts them: every path is proven to stay
inside the rootdir before it is read, written or deleted (:func:`~..core.paths.inside_root`);
a manifest is read within a size and a nesting limit; and a golden stored in full is checked
against its own manifest (bytes, SHA-256 and a recomputed fingerprint) before any comparison,
so that a manifest cannot vouch for itself (:mod:`.manifest`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core import faults
from ..core.digests import canonical_sha256, sha256_file
from ..core.paths import (
    PathOutsideRoot,
    folder_problem,
    fsync_file,
    inside_root,
    is_under,
    write_new,
)
from ..core.records import JsonObject, Record
from ..errors import ArtifactError, GateChanged, GoldenMissing, ManifestError
from ..gates import Gate, GateResult
from ..kinds.registry import Artifact, KindRegistry
from ..media.detect import not_the_kind
from .layout import folder_of, migrate
from .manifest import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    MAX_NAME_BYTES,
    READ_ATTEMPTS,
    SCHEMA_VERSION,
    GoldenVersion,
    ManifestEntry,
    artifact_name,
    check_integrity,
    check_scope,
    load_manifest,
    manifest_document,
    manifest_state,
    read_manifest,
    read_version,
    safe_component,
    unhashed,
)
from .plans import PlanBook, StagedPlan, carry_plan
from .scope import Environment, scoped_path
from .store import ContentStore
from .swap import (
    FolderLock,
    GoldenConflict,
    GoldenUpdateError,
    UpdateEvent,
    has_strays,
    lock_path,
    recover,
    replace_folder,
)

__all__ = [
    "MANIFEST",
    "MAX_MANIFEST_BYTES",
    "MAX_NAME_BYTES",
    "SCHEMA_VERSION",
    "CheckEvidence",
    "GoldenConflict",
    "GoldenFolder",
    "GoldenUpdateError",
    "ManifestEntry",
    "StagedArtifact",
    "UpdateEvent",
    "artifact_name",
    "check_integrity",
    "load_manifest",
    "manifest_document",
    "read_manifest",
    "safe_component",
]


@dataclass(frozen=True, slots=True)
class GoldenSide(Record):
    """The golden a comparison was made against, as the receipt records it."""

    folder: str
    kind: str
    gate: str
    sha256: str
    stored: str
    manifest_sha256: str
    fingerprint: JsonObject


@dataclass(frozen=True, slots=True)
class ObtainedSide(Record):
    """The file a comparison was made of: where it is, its kind, its digest, its fingerprint."""

    path: str
    kind: str
    sha256: str
    fingerprint: JsonObject


@dataclass(frozen=True, slots=True)
class CheckEvidence(Record):
    """Both sides of one comparison: the raw evidence a receipt keeps (``"evidence"`` of its
    gate entry, which ``verify`` and the report read from the receipt)."""

    golden: GoldenSide
    obtained: ObtainedSide


@dataclass
class StagedArtifact:
    entry: ManifestEntry
    source: Path | None
    #: The obtained file, digest-only ones too: kept in the content store (:mod:`.store`).
    path: Path | None = None


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
        rootdir: Path | None = None,
        lock_timeout: float = 120.0,
        store: Path | None = None,
        environment: Environment | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.root = root
        self.store = store
        self.module = module
        self.test_name = test_name
        #: The test's folder of the default scope; ``path`` is this scope's (:mod:`.scope`).
        #: ``module`` is the module's path under the rootdir without ``.py`` (:mod:`.layout`).
        self.default_path = folder_of(root, module, test_name)
        self.environment = environment
        self.path = scoped_path(self.default_path, environment)
        #: Nothing is read, written or deleted through a link that leaves the goldens folder
        #: (a committed link to a project folder would make an update replace that folder).
        self.boundary = root
        #: The goldens folder itself may not lead out of the rootdir when it lies inside it.
        self.rootdir = rootdir if rootdir is not None and is_under(root, rootdir) else None
        self.test_id = test_id
        self.kinds = kinds
        self.digest_above = digest_above
        self.lock_timeout = lock_timeout
        #: The state of ``manifest.json`` when the update began (:meth:`begin_update`).
        self._baseline: str | None = None
        self._began = False
        self._staged: dict[str, StagedArtifact] = {}
        self._manifest: dict[str, ManifestEntry] | None = None
        self._manifest_sha256: str | None = None
        #: Where the stored files read with the manifest are copied (:func:`read_version`):
        #: the caller's folder, else a temporary one removed with this object.
        self._workdir = workdir
        self._copies: dict[str, Path] = {}
        self._reads = 0
        #: Per compared artifact, the raw evidence a receipt keeps: both fingerprints.
        self.evidence: dict[str, CheckEvidence] = {}
        #: The test's plans, committed by this folder's swap with the goldens (#20): its
        #: ``plan.json`` is staged with them, so no version mixes new goldens and an old plan.
        #: None (``accept``, a device-scoped folder): the live plan is carried over as it is.
        self.plans: PlanBook | None = None

    def inside(self, path: Path, what: str) -> Path:
        """``path`` after proving that no link takes it out of the goldens folder, nor the
        goldens folder out of the rootdir (:class:`~..core.paths.PathOutsideRoot` names it)."""
        if self.rootdir is not None:
            inside_root(self.root, self.rootdir, what="goldens folder")
        return inside_root(path, self.boundary, what=what)

    def migrate(self) -> list[UpdateEvent]:
        """Move the test's goldens from the layout of an earlier version (:mod:`.layout`).
        A folder that leads out of the goldens folder is left to the refusal where it is used."""
        try:
            self.inside(self.default_path, "golden folder")
        except PathOutsideRoot:
            return []
        return migrate(
            self.root, self.module, self.test_name, self.test_id, lock_timeout=self.lock_timeout
        )

    # ---------------------------------------------------------------- comparing

    def manifest(self) -> dict[str, ManifestEntry]:
        """The manifest as read for this test, with its stored files: one whole version, even
        while another session replaces the folder (:func:`.manifest.read_version`)."""
        if self._manifest is None:
            self.inside(self.path, "golden folder")
            version = self._read()
            for attempt in range(READ_ATTEMPTS):
                if version.manifest_sha256 is not None or not has_strays(self.path):
                    break
                # Missing while an update's work folder lies beside it: the update is between
                # the two renames of the fallback (wait for it) or was killed there (put back).
                if not self.recover():
                    time.sleep(min(0.002 * 2**attempt, 0.1))
                version = self._read()
            plans = self.plans
            if plans is not None and plans.folder == self.path:
                # The plan the test is judged by is the one read with these goldens (#20).
                plans.adopt(version.plan, version.plan_read)
            check_scope(version.entries, self.environment, self.path / MANIFEST)
            self._manifest, self._manifest_sha256 = version.entries, version.manifest_sha256
            self._copies = version.copies
        return self._manifest

    def hold_plans(self, plans: PlanBook) -> None:
        """The test's plans: judged by the ``plan.json`` of the very version whose goldens this
        folder reads (:meth:`manifest`; the plan is read first through it too), when this is
        the folder that holds them, and committed by its swap under update (#20)."""
        self.plans = plans
        if plans.folder == self.path:
            plans.read_with = self.manifest

    def _read(self) -> GoldenVersion:
        self._reads += 1
        into = self._snapshots() / f"read-{self._reads}"
        return read_version(self.path, into, root=self.boundary)

    def _snapshots(self) -> Path:
        if self._workdir is None:
            made = Path(tempfile.mkdtemp(prefix="lossless-golden-"))
            weakref.finalize(self, shutil.rmtree, made, True)
            self._workdir = made
        return self._workdir / "golden-read"

    def manifest_sha256(self) -> str:
        """SHA-256 of ``manifest.json`` as read for this test: of the very bytes parsed."""
        self.manifest()
        return self._manifest_sha256 or ""

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
        stored = check_integrity(
            self.path,
            entry,
            kinds=self.kinds,
            root=self.boundary,
            copy=self._copies.get(name),
        )
        # Under a gate other than bytes the file must be of the golden's kind: the kind's
        # fingerprint may tell, in one pass, instead of a probe before it (#21).
        named = gate if gate is not None else self.kinds.gate_for(entry.gate, entry.kind)
        expected_kind = entry.kind if named.name != "bytes" else None
        kind = self.kinds.detect(obtained_path, expected=expected_kind)
        if gate is None:
            # The test named no gate: the one frozen with the golden applies, whatever the
            # obtained file turned out to be (never a "gate changed" for an empty output).
            requested = self.kinds.gate_for(entry.gate, entry.kind)
        else:
            requested = gate
            if requested.spec != entry.gate:
                raise GateChanged(self.path, name, entry.gate, requested.spec)
        if kind != entry.kind and requested.name != "bytes":
            raise ArtifactError(obtained_path, not_the_kind(obtained_path, entry.kind, kind))
        obtained = self.kinds.artifact(name, obtained_path, kind, golden=entry.fingerprint)
        expected = Artifact(name=name, kind=entry.kind, fingerprint=entry.fingerprint, path=stored)
        self.evidence[name] = CheckEvidence(
            GoldenSide(
                folder=str(self.path),
                kind=entry.kind,
                gate=entry.gate,
                sha256=entry.sha256,
                stored=entry.stored,
                manifest_sha256=self.manifest_sha256(),
                fingerprint=entry.fingerprint,
            ),
            ObtainedSide(
                path=str(obtained_path),
                kind=obtained.kind,
                sha256=_file_sha256(obtained),
                fingerprint=obtained.fingerprint,
            ),
        )
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
        provenance: JsonObject,
        *,
        artifact: Artifact | None = None,
        allow_empty: bool = False,
    ) -> ManifestEntry:
        """Fingerprint an artifact for the next :meth:`commit`; nothing is written yet.

        ``artifact``, when the caller already fingerprinted ``path`` (a producer's run),
        is used as it is: the file is not decoded a second time. A golden folder that leads
        out of the rootdir is refused here already, before any work is done for it.
        """
        name = artifact_name(name)
        self.inside(self.path, "golden folder")
        if not self._began:
            self.begin_update()
        if name in self._staged:
            raise ArtifactError(name, "checked twice in one test; give each artifact its own name")
        if not allow_empty and path.is_file() and path.stat().st_size == 0:
            raise ArtifactError(
                path,
                f"empty file (0 bytes): refusing to store it as the golden {name!r}. If an empty "
                "output is what the test expects, pass allow_empty=True",
            )
        if artifact is None:
            artifact = self.kinds.artifact(name, path)
        lacking = None if allow_empty else self.kinds.emptiness(artifact)
        if lacking is not None:
            raise ArtifactError(
                path,
                f"{lacking}: refusing to store it as the golden {name!r}. If an empty output "
                "is what the test expects, pass allow_empty=True",
            )
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
            scope="all" if self.environment is None else "device",
            environment=None if self.environment is None else self.environment,
        )
        self._staged[name] = StagedArtifact(entry, path if stored == "full" else None, path)
        return entry

    def recover(self) -> list[UpdateEvent]:
        """What killed updates left beside this folder, restored or removed (one event each).

        For a comparing run: nothing is waited for (an update under way owns what lies there),
        and a folder that leads out of the rootdir is left to the refusal where it is used.
        """
        try:
            self.inside(self.path, "golden folder")
        except PathOutsideRoot:
            return []
        if not has_strays(self.path):
            return []
        lock = FolderLock(lock_path(self.path), timeout=self.lock_timeout)
        try:
            if not lock.acquire(wait=False):
                return []
        except GoldenUpdateError as exc:
            return [self._event("", "kept", f"nothing recovered: {exc}")]
        try:
            events = recover(self.path, test=self.test_id)
        finally:
            lock.release()
        self._manifest = None
        return events

    def begin_update(self) -> list[UpdateEvent]:
        """Start an update: recover what killed writers left, and note the manifest as it is
        now, so that :meth:`commit` can tell whether another session changed it meanwhile."""
        try:
            self.inside(self.path, "golden folder")
        except PathOutsideRoot:
            return []  # stage() refuses it, naming the link
        if not os.path.lexists(self.path.parent):
            self._baseline, self._began = None, True  # nothing to recover; nothing made yet
            return []
        with self._locked():
            events = recover(self.path, test=self.test_id)
            self._baseline = manifest_state(self.path)
        self._began = True
        self._manifest = None
        return events

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The folder's lock held; its module folder made first."""
        parent = self.path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = folder_problem(parent, write=True) or f"cannot be made ({exc.strerror})"
            raise GoldenUpdateError(
                parent, f"{problem}: the golden folder {self.path.name} cannot be written there"
            ) from None
        with FolderLock(lock_path(self.path), timeout=self.lock_timeout):
            yield

    def commit(self, *, keep: bool = False) -> list[UpdateEvent]:
        """Replace the test's golden folder with the staged artifacts, atomically.

        ``keep``: the goldens not staged are kept as they are (``accept``, from an export that
        holds only what failed), instead of removed as no longer checked.

        Unchanged artifacts keep their old manifest entry (and provenance), so a
        regeneration that changes nothing leaves nothing to review in the diff. When the
        folder's manifest is no longer the one the update began from, another session wrote
        it meanwhile: nothing is written and :class:`GoldenConflict` is raised.
        """
        self.inside(self.path, "golden folder")
        if not self._began:
            self.begin_update()
        if self.store is not None:  # each artifact also kept whole by SHA-256 (lossless_store)
            ContentStore(self.store).put_all(self._staged.values())
        plans = self._plans()
        if plans is not None:
            plans.handed = True  # committed with the goldens below, or not at all
        with self._locked():
            # A session killed since this one began may have left the folder missing.
            recovered = recover(self.path, test=self.test_id)
            found = manifest_state(self.path)
            if found != self._baseline:
                detail = "another session changed the folder while this test ran; nothing written"
                conflicts = [self._event(n, "conflict", detail) for n in sorted(self._staged)]
                raise GoldenConflict(self.path, self._baseline, found, recovered + conflicts)
            events = recovered + self._apply(keep, None if plans is None else plans.staged())
        self._staged.clear()
        self._manifest = None
        return events

    def _plans(self) -> PlanBook | None:
        """The test's plans when this folder is the one that holds them, under update."""
        plans = self.plans
        if plans is None or not plans.update or plans.folder != self.path:
            return None
        return plans

    def _apply(self, keep: bool = False, plan: StagedPlan | None = None) -> list[UpdateEvent]:
        """Under the lock: the events of the staged artifacts (and of the plan, when the test's
        plans are committed here) against the folder as it is, and the folder replaced unless
        nothing changed."""
        try:
            old = read_manifest(self.path, root=self.boundary)
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
            if keep:
                final[name] = old[name]
                continue
            events.append(self._event(name, "removed", "no longer checked by the test"))
        unchanged = all(e.action == "unchanged" for e in events) and events
        plan_events = [] if plan is None else list(plan.events)
        if unchanged and not unhashed(old) and (plan is None or not plan.changed):
            return events + plan_events  # nothing to review; an old manifest is rewritten once
        self._write(final, plan)
        events += plan_events
        self._baseline = manifest_state(self.path)  # a later commit of this folder starts here
        return events

    def _event(self, name: str, action: str, detail: str = "") -> UpdateEvent:
        return UpdateEvent(self.test_id, str(self.path), name, action, detail)

    def _write(self, entries: Mapping[str, ManifestEntry], plan: StagedPlan | None = None) -> None:
        # Checked again right before writing: the folder is replaced under the lock.
        self.inside(self.path, "golden folder")
        held = _subfolders(self.path)
        if held:
            # tests/test_a.py::test_x and tests/test_a/test_x.py share goldens/tests/test_a/
            # test_x/: replacing the test's folder whole would delete the module's goldens.
            raise GoldenUpdateError(
                self.path,
                f"holds the folder {held[0]!r}, the goldens of another test module whose path "
                f"is this test's folder ({self.test_id}): a module and a test of one name side "
                "by side. Rename one of them; nothing was written",
            )

        def fill(staging: Path) -> None:
            for name, entry in entries.items():
                if entry.stored != "full" or entry.file is None:
                    continue
                staged = self._staged.get(name)
                source = staged.source if staged else self.path / entry.file
                if source is None:
                    continue
                if staged is None:
                    self.inside(source, "stored golden")
                faults.write("write-golden-stage", staging / entry.file)
                _copy_durably(source, staging / entry.file)
            document = manifest_document(entries, self.test_id)
            text = json.dumps(document, indent=2, sort_keys=True) + "\n"
            faults.write("write-golden-manifest", staging / MANIFEST)
            write_new(staging / MANIFEST, text.encode("utf-8"))
            if plan is None:
                carry_plan(self.path, staging)  # the test's frozen plans (.plans) stay with it
            else:
                plan.write(staging)  # committed with the goldens, in this one swap (#20)

        try:
            replace_folder(self.path, fill)
        except OSError as exc:
            raise GoldenUpdateError(
                self.path,
                f"cannot be replaced ({faults.write_failed(exc)}): the previous golden is kept",
            ) from None


def _subfolders(path: Path) -> list[str]:
    """The folders (not hidden) inside a live golden folder, which holds files only."""
    try:
        with os.scandir(path) as entries:
            return sorted(
                e.name
                for e in entries
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
            )
    except (FileNotFoundError, NotADirectoryError):
        return []


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


def _copy_durably(source: Path, target: Path) -> None:
    """Copy a stored golden and flush it to disk before the folder is swapped into place."""
    shutil.copyfile(source, target)
    fsync_file(target)
