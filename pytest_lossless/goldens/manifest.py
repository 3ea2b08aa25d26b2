"""The manifest of a golden folder: names, entries, bounded reading, and integrity.

A manifest may come from a pull request, so nothing in it is trusted: it is read within a size
and a nesting limit, every field and name is checked before its words reach a message or a
path, and a golden stored in full must agree with its manifest on its bytes, its SHA-256 and
its fingerprint (recomputed from the stored file) before anything is compared with it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import faults
from ..core.digests import canonical_sha256
from ..core.paths import inside_root, open_regular, read_regular
from ..core.records import JsonObject, Record, RecordError, from_json, loads_bounded, meta, spec
from ..core.text import has_control, printable
from ..errors import ArtifactError, GoldenError, GoldenIntegrityError, LosslessError, ManifestError

if TYPE_CHECKING:
    from ..kinds.registry import KindRegistry

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
#: The test's frozen plans (:mod:`.plans`), beside the manifest in its golden folder.
PLAN = "plan.json"
#: The largest ``plan.json`` read: a plan is a few hundred bytes per label.
MAX_PLAN_BYTES = 4 << 20
#: The largest ``manifest.json`` read; ours are kilobytes (digest-only goldens keep them small).
MAX_MANIFEST_BYTES = 64 << 20
#: The longest artifact name or golden folder name, in bytes of UTF-8 (file systems allow 255,
#: and the staging sibling of a folder adds about 25).
MAX_NAME_BYTES = 200

_UNSAFE = re.compile(r"[^A-Za-z0-9.+\-]+")
_SAFE = re.compile(r"[^A-Za-z0-9._\-\[\]=,+@]")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def safe_component(text: str, what: str) -> str:
    """A folder or file name that cannot escape its parent; refuses what it cannot keep.

    A name longer than :data:`MAX_NAME_BYTES` (a long parametrize id) keeps its start and gains
    a hash of the whole text, so distinct tests keep distinct folders.
    """
    cleaned = _SAFE.sub("_", text.replace("::", "."))
    if cleaned in ("", ".", "..") or cleaned.startswith("."):
        raise ArtifactError(_shown(text), f"{what} {_shown(text)!r} cannot be used as a file name")
    if len(cleaned) > MAX_NAME_BYTES:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        cleaned = f"{cleaned[: MAX_NAME_BYTES - 17]}-{digest}"
    return cleaned


def artifact_name(name: str) -> str:
    """Validate an artifact name given to ``golden.check``: a plain file name of at most
    :data:`MAX_NAME_BYTES` bytes, with no control characters (it is printed and it names a
    file)."""
    if not isinstance(name, str) or not name:
        raise ArtifactError(str(name), "an artifact name must be a non-empty string")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = shown_name(name)
        raise ArtifactError(
            shown,
            f"the artifact name '{shown}' holds bytes that are not UTF-8 (what os.fsdecode "
            "makes of a file name it cannot decode): give the artifact a name in UTF-8, since "
            "it is written into the manifest, the receipt and the report",
        ) from None
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise ArtifactError(
            _shown(name),
            f"an artifact name is at most {MAX_NAME_BYTES} bytes of UTF-8; this one has {size}",
        )
    if has_control(name):
        raise ArtifactError(repr(name), "an artifact name must not hold control characters")
    if "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise ArtifactError(name, "an artifact name must be a plain file name (no folders)")
    if name == MANIFEST:
        raise ArtifactError(name, f"{MANIFEST!r} is reserved for the golden's manifest")
    if name == PLAN:
        raise ArtifactError(name, f"{PLAN!r} is reserved for the test's frozen plans")
    return name


def shown_name(name: object) -> str:
    """An artifact name as messages and receipts show it: bytes that are not UTF-8 (lone
    surrogates from ``os.fsdecode``) as ``\\udcff``, control characters escaped."""
    text = str(name).encode("utf-8", "backslashreplace").decode("utf-8")
    return printable(text)


def _shown(text: str, limit: int = 60) -> str:
    """``text`` as an error message shows it: escaped, and shortened when long."""
    shown = shown_name(text)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Environment(Record):
    """An environment class: what makes a device-scoped golden the right one for a run
    (:mod:`.scope`), recorded in each of its manifest entries."""

    backend: str
    model: str
    runtime: str | None = None

    @property
    def label(self) -> str:
        """``cuda / NVIDIA H200 / CUDA 13``, as messages and the terminal show it."""
        return " / ".join((self.backend, self.model, self.runtime or "runtime unknown"))

    @property
    def folder(self) -> str:
        """The class in safe characters (``cuda__NVIDIA_H200__CUDA_13``): a folder name."""
        parts = (self.backend, self.model, self.runtime or "runtime-unknown")
        name = "__".join(_UNSAFE.sub("_", p).strip("_") or "_" for p in parts)
        return name[:MAX_NAME_BYTES]

    @classmethod
    def checked(cls, data: object) -> Environment | None:
        """The class an untrusted file names; None when it is not one (not exactly these three
        fields, or words that are not printable: they reach messages and folder names)."""
        if not isinstance(data, Mapping) or set(data) != {"backend", "model", "runtime"}:
            return None
        try:
            found = from_json(cls, data)
        except RecordError:
            return None
        words = (found.backend, found.model, found.runtime or "-")
        return found if all(w and not has_control(w) for w in words) else None


def _never(entry: object) -> bool:
    return True


@dataclass(frozen=True)
class ManifestEntry(Record):
    """One artifact of a golden folder, as frozen by ``--update-goldens`` (``manifest.json``
    sorts its keys, so the order of the fields is not the file's)."""

    #: The key of its entry in the manifest's table, not a field of the entry.
    name: str = field(metadata=meta(omit=_never))
    kind: str
    gate: str
    sha256: str
    size: int
    stored: str  # "full" or "digest"
    file: str | None
    fingerprint: JsonObject
    fingerprint_sha256: str
    provenance: JsonObject = field(default_factory=dict)
    #: ``"all"`` (one golden for every environment, and not written) or ``"device"`` (one per
    #: environment class, named by ``environment``: backend, model, runtime); see :mod:`.scope`.
    scope: str = spec("all", omit=lambda e: e.scope == "all")
    environment: Environment | None = spec(None, omit=lambda e: e.scope == "all")
    #: The hash of every other field but provenance, as written (None: a manifest written
    #: before entries were hashed); :func:`check_integrity` checks it (:func:`entry_sha256`).
    entry_sha256: str | None = field(default=None, compare=False, metadata=meta(omit="none"))

    @classmethod
    def read(cls, name: str, data: object, where: Path) -> ManifestEntry:
        """An entry read from ``where``, every field checked beyond its type: the manifest may
        come from a pull request and its words end up in messages, paths and the terminal."""
        if not isinstance(data, Mapping):
            raise ManifestError(where, f"entry {name!r} is malformed (it is not an object)")
        try:
            entry = from_json(cls, {**data, "name": name})
            for key in ("kind", "gate", "stored", "scope"):
                _word(key, getattr(entry, key))
            for key in ("sha256", "fingerprint_sha256", "entry_sha256"):
                _hex64(key, getattr(entry, key))
            if entry.size < 0:
                raise ValueError(f"size must be a whole number of bytes, not {entry.size}")
            if entry.file is not None:
                artifact_name(_word("file", entry.file))
            if "environment" in data and Environment.checked(data["environment"]) is None:
                raise ValueError("environment must name its backend, model and runtime, printable")
        except (RecordError, ValueError, ArtifactError) as exc:
            raise ManifestError(where, f"entry {name!r} is malformed ({exc})") from None
        if entry.scope not in ("all", "device") or (entry.scope == "device") != bool(
            entry.environment
        ):
            raise ManifestError(
                where,
                f"entry {name!r}: scope {entry.scope!r} is not 'all', or 'device' with "
                "its environment",
            )
        if entry.stored not in ("full", "digest"):
            raise ManifestError(
                where, f"entry {name!r}: stored is {entry.stored!r}, not 'full' or 'digest'"
            )
        return entry


def _word(key: str, value: str) -> str:
    if not value or has_control(value) or len(value) > MAX_NAME_BYTES:
        raise ValueError(f"{key} {_shown(value)!r} is empty, has control characters or is too long")
    return value


def _hex64(key: str, value: str | None) -> None:
    if value is not None and not _HEX64.fullmatch(value):
        raise ValueError(f"{key} must be 64 hexadecimal digits, not {_shown(value)!r}")


def load_manifest(
    folder: Path, *, root: Path | None = None
) -> tuple[dict[str, ManifestEntry], str | None]:
    """The entries of ``folder/manifest.json`` and the SHA-256 of the bytes they were parsed
    from (``{}, None`` when the folder has none).

    With ``root``, the manifest's path is proven to stay inside it, and a link that does is
    followed; without, a link is refused. The file must be a regular file of at most
    :data:`MAX_MANIFEST_BYTES`, nesting at most ``MAX_JSON_DEPTH`` levels: anything else is a
    :class:`ManifestError` naming the file and the limit.
    """
    path = folder / MANIFEST
    if root is not None:
        inside_root(path, root, what="golden manifest")
    if not os.path.lexists(path):
        return {}, None
    try:
        raw = read_regular(
            os.path.realpath(path) if root is not None else path, limit=MAX_MANIFEST_BYTES
        )
    except OSError as exc:
        raise ManifestError(path, f"cannot be read: {exc.strerror or exc}") from None
    return parse_manifest(path, raw), hashlib.sha256(raw).hexdigest()


def parse_manifest(path: Path, raw: bytes) -> dict[str, ManifestEntry]:
    """The entries of the manifest bytes ``raw`` read from ``path`` (named in errors)."""
    try:
        data = loads_bounded(raw)
    except ValueError as exc:
        _refuse_stub(path, raw)  # a pointer checked out instead of the manifest
        raise ManifestError(path, f"cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("artifacts"), dict):
        raise ManifestError(path, "has no 'artifacts' table; it is not a pytest-lossless manifest")
    version = data.get("schema")
    if version != SCHEMA_VERSION:
        raise ManifestError(
            path,
            f"has schema {_shown(repr(version))}; this plugin reads schema {SCHEMA_VERSION}. "
            "Regenerate with --update-goldens",
        )
    entries = {}
    for name, entry in data["artifacts"].items():
        try:
            artifact_name(name)
        except ArtifactError as exc:
            raise ManifestError(
                path, f"the artifact name {_shown(name)!r} is refused: {exc.problem}"
            ) from None
        entries[name] = ManifestEntry.read(name, entry, path)
    return entries


def manifest_state(folder: Path) -> str | None:
    """What ``folder/manifest.json`` is now, to tell whether another session changed it: the
    SHA-256 of its bytes, None when there is none, or what keeps it from being read.

    The caller has proven the folder stays inside its root; a link to the folder is followed.
    """
    path = folder / MANIFEST
    if not os.path.lexists(path):
        return None
    try:
        raw = read_regular(os.path.realpath(path), limit=MAX_MANIFEST_BYTES)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return hashlib.sha256(raw).hexdigest()


def read_manifest(folder: Path, *, root: Path | None = None) -> dict[str, ManifestEntry]:
    """The entries of ``folder/manifest.json``; empty when the folder has none
    (see :func:`load_manifest`)."""
    return load_manifest(folder, root=root)[0]


def manifest_document(entries: Mapping[str, ManifestEntry], test_id: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "test": test_id,
        "artifacts": {
            name: {**entries[name].to_json(), "entry_sha256": entry_sha256(entries[name])}
            for name in sorted(entries)
        },
    }


def entry_sha256(entry: ManifestEntry) -> str:
    """The hash of an entry's name and every field of :meth:`ManifestEntry.to_json` but its
    provenance (the gate, kind, digests, scope, and whatever later fields it gains), so that a
    hand edit of the gate (``decoded`` -> ``tolerance``) is an integrity error."""
    fields = {k: v for k, v in entry.to_json().items() if k not in ("provenance", "entry_sha256")}
    return canonical_sha256({"name": entry.name, **fields})


#: The versions a golden's provenance records (``provenance["made_with"]``), as named there.
MADE_WITH = ("python", "numpy", "ffmpeg", "pytest-lossless")


def made_with(versions: Mapping[str, str | None]) -> JsonObject:
    """The versions a golden is made with, out of a session's versions (:data:`MADE_WITH`)."""
    return {name: _version(versions.get(name)) for name in MADE_WITH}


def _version(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    # "ffmpeg version 7.0.2-static https://..." -> "7.0.2-static"
    words = value.split()
    if len(words) >= 3 and words[0] == "ffmpeg" and words[1] == "version":
        return words[2]
    return value


def version_changes(entry: ManifestEntry, now: Mapping[str, str | None]) -> str:
    """``made with ffmpeg 7.0.2, now 6.1.1; numpy 1.26.4, now 2.1.0``: what differs between the
    versions a golden was made with and this session's ("" when none differs or it was made
    before manifests recorded them)."""
    recorded = entry.provenance.get("made_with")
    if not isinstance(recorded, Mapping):
        return ""
    current = made_with(now)
    changed = [
        f"{name} {_brief(recorded.get(name))}, now {_brief(current[name])}"
        for name in MADE_WITH
        if recorded.get(name) and current.get(name) and recorded.get(name) != current[name]
    ]
    return ("made with " + "; ".join(changed)) if changed else ""


def _brief(value: Any) -> str:
    return printable(str(value))[:40]


def unhashed(entries: Mapping[str, ManifestEntry]) -> list[str]:
    """The entries of a manifest written before entries were hashed (their gate is covered by
    no integrity check until they are written again by --update-goldens)."""
    return sorted(name for name, entry in entries.items() if entry.entry_sha256 is None)


def check_scope(
    entries: Mapping[str, ManifestEntry], environment: Environment | None, where: Path
) -> None:
    """Every entry of a folder's manifest belongs to that folder's scope and class, or the
    manifest was moved or edited: a :class:`ManifestError` naming both."""
    for name, entry in entries.items():
        wanted = "all" if environment is None else "device"
        found = entry.environment
        if entry.scope != wanted or (environment is not None and found != environment):
            made = found.label if found is not None else "no environment"
            raise ManifestError(
                where,
                f"entry {name!r} is a golden of scope {entry.scope!r} ({made}), but it lies in "
                f"the folder of scope {wanted!r}"
                + (f" for {environment.label}" if environment is not None else "")
                + ": the manifest was moved or edited. Regenerate it with --update-goldens",
            )


def check_integrity(
    folder: Path,
    entry: ManifestEntry,
    *,
    kinds: KindRegistry | None = None,
    root: Path | None = None,
    copy: Path | None = None,
) -> Path | None:
    """The stored file of ``entry`` after proving it matches the manifest (None: digest-only).

    The manifest cannot vouch for itself: for a golden stored in full, the stored bytes, the
    entry's SHA-256 and size, the SHA-256 its fingerprint names, and (with ``kinds``) the
    fingerprint recomputed from the stored file must all agree, or it is a
    :class:`GoldenIntegrityError`. A digest-only entry has nothing to be checked against:
    its manifest is the golden, and only review vouches for it (docs/security.md). ``root``:
    the stored file's path must stay inside it (a link that does is followed). ``copy``: the
    stored file as read together with the manifest (:func:`read_version`), checked (and
    returned) instead of the live one, which another session may have replaced since.
    """
    manifest = folder / MANIFEST
    if canonical_sha256(entry.fingerprint) != entry.fingerprint_sha256:
        raise GoldenIntegrityError(
            manifest,
            f"the fingerprint of {entry.name!r} was edited (its hash no longer matches)",
        )
    if entry.stored == "digest":
        _check_entry_hash(manifest, entry)
        return None
    if entry.file is None:
        raise GoldenIntegrityError(manifest, f"{entry.name!r} is stored but names no file")
    path = folder / entry.file
    if copy is not None:
        actual, size = _stored_digest(copy, follow=False)
    else:
        if root is not None:
            inside_root(path, root, what="stored golden")
        actual, size = _stored_digest(path, follow=root is not None)
    if actual != entry.sha256:
        _refuse_stub(path)  # a pointer checked out instead of the golden: `git lfs pull`
        raise GoldenIntegrityError(
            path,
            f"its SHA-256 is {actual[:16]}... but the manifest says {entry.sha256[:16]}...",
        )
    if size != entry.size:
        raise GoldenIntegrityError(
            path, f"its size is {size} bytes but the manifest says {entry.size}"
        )
    named = entry.fingerprint.get("sha256")
    if isinstance(named, str) and len(named) == 64 and named != entry.sha256:
        raise GoldenIntegrityError(
            manifest,
            f"the fingerprint of {entry.name!r} names a file of SHA-256 {named[:16]}..., but "
            f"the stored file's is {entry.sha256[:16]}...: the fingerprint was edited",
        )
    if kinds is not None:
        try:
            again = kinds.fingerprint(entry.kind, copy or path)
        except ArtifactError as exc:
            raise GoldenIntegrityError(
                path, f"the stored golden cannot be fingerprinted as {entry.kind}: {exc.problem}"
            ) from None
        if canonical_sha256(again) != entry.fingerprint_sha256 and not _earlier_form(again, entry):
            differ = sorted(
                str(k)
                for k in set(again) | set(entry.fingerprint)
                if again.get(k) != entry.fingerprint.get(k)
            )
            raise GoldenIntegrityError(
                manifest,
                f"the fingerprint of {entry.name!r} does not match the stored file "
                f"{entry.file!r}, fingerprinted again ({_shown(', '.join(differ))} differ): "
                "the manifest was edited, or written by another version of its kind",
            )
    _check_entry_hash(manifest, entry)  # last: the checks above name a forged file first
    return copy or path


def _earlier_form(again: JsonObject, entry: ManifestEntry) -> bool:
    """A container fingerprint written before streams other than video and audio were recorded
    (no ``other_streams``), or before video frames' pts were recorded exactly (version 1: pts
    rounded to 1 / the frame rate), matches the stored file fingerprinted again, in that
    earlier form: the gate compares what it recorded and notes the streams it did not. A
    WAV/FLAC fingerprint written before a declared channel layout was recorded (no
    ``channel_mask``) matches too: the gate then names the layout as changed, for
    ``--update-goldens``."""
    if "channel_mask" in again and "channel_mask" not in entry.fingerprint:
        earlier_audio = {k: v for k, v in again.items() if k != "channel_mask"}
        return canonical_sha256(earlier_audio) == entry.fingerprint_sha256
    if again.get("format") != "container" or entry.fingerprint.get("format") != "container":
        return False
    from ..media.container import ContainerFingerprint  # media is heavy; only this case needs it

    written = ContainerFingerprint.from_json(entry.fingerprint)
    earlier = ContainerFingerprint.from_json(again).as_made_like(written).to_json()
    return canonical_sha256(earlier) == entry.fingerprint_sha256


def _check_entry_hash(manifest: Path, entry: ManifestEntry) -> None:
    """The entry's fields still hash to its ``entry_sha256`` (a manifest written before entries
    were hashed has none to check: :func:`unhashed`)."""
    if entry.entry_sha256 is not None and entry_sha256(entry) != entry.entry_sha256:
        raise GoldenIntegrityError(
            manifest,
            f"the entry {entry.name!r} was edited by hand: its fields (gate {entry.gate!r}, "
            "kind, digests) no longer hash to its entry_sha256",
        )


def _refuse_stub(path: Path, data: bytes | None = None) -> None:
    from ..media.detect import refuse_stub  # media is heavy; only a failing read needs it

    refuse_stub(path, data)


def _stored_digest(path: Path, *, follow: bool) -> tuple[str, int]:
    """SHA-256 and size of a stored golden, read as a regular file (no FIFO, no device)."""
    try:
        fd = open_regular(os.path.realpath(path) if follow else path)
    except FileNotFoundError:
        _refuse_stub(path)  # a git-annex link whose content is not here
        raise GoldenIntegrityError(path, "the stored golden file is missing") from None
    except OSError as exc:
        _refuse_stub(path)
        raise GoldenIntegrityError(
            path, f"the stored golden cannot be read: {exc.strerror or exc}"
        ) from None
    digest, size = hashlib.sha256(), 0
    try:
        while block := os.read(fd, 1 << 20):
            digest.update(block)
            size += len(block)
    finally:
        os.close(fd)
    return digest.hexdigest(), size


# ------------------------------------------------------------------ one whole version


@dataclass(frozen=True)
class GoldenVersion:
    """A golden folder as one reader saw it: its manifest and, for each artifact stored in full,
    a copy of the stored file, all read from one and the same folder (never one version's
    manifest with another version's file)."""

    entries: dict[str, ManifestEntry]
    manifest_sha256: str | None
    #: Per artifact stored in full, the copy read with the manifest (absent: the file was not
    #: in the folder, which :func:`check_integrity` then names).
    copies: dict[str, Path]
    #: The bytes of the version's ``plan.json`` (None: it has none), read through the same
    #: descriptor, so that a test is judged by the plan frozen with these goldens (#20). It is
    #: parsed and checked by :mod:`.plans`, which names what is wrong with it.
    plan: bytes | None = None
    #: False: ``plan.json`` is there but could not be read as a plan file of this version (a
    #: FIFO, a link out of the goldens, too large); :mod:`.plans` reads it and names why.
    plan_read: bool = True


class _Replaced(Exception):
    """The folder being read was replaced by another session's update meanwhile."""


#: How often a read starts again because another session replaced the folder meanwhile.
READ_ATTEMPTS = 50


def read_version(folder: Path, into: Path, *, root: Path) -> GoldenVersion:
    """The manifest of ``folder`` and copies (in ``into``) of its stored files, one version.

    An update never changes a live golden folder: it stages a new one and exchanges the two
    whole (:mod:`.swap`), and only then deletes the old one. So everything opened through one
    descriptor of the folder belongs to one version, and a file that has gone missing from it
    means that the folder was replaced while it was read: the read starts again on the new one.
    A missing folder is an empty version (the caller tells a golden never written from one
    an update is between its two renames: :meth:`.folder.GoldenFolder.manifest`). The caller
    has proven ``folder`` stays inside ``root``.
    """
    for attempt in range(READ_ATTEMPTS):
        try:
            handle = _open_folder(folder)
        except FileNotFoundError:
            return GoldenVersion({}, None, {})
        except OSError as exc:
            raise ManifestError(folder, f"cannot be read: {exc.strerror or exc}") from None
        try:
            return _read_from(handle, folder, into, root)
        except _Replaced:
            time.sleep(min(0.001 * 2**attempt, 0.05))
        finally:
            os.close(handle)
    raise GoldenError(
        printable(
            f"{folder} was replaced {READ_ATTEMPTS} times while it was read (another session is "
            "updating it without pause): run the check again once that update is done"
        )
    )


def _open_folder(folder: Path) -> int:
    return os.open(os.path.realpath(folder), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _read_from(handle: int, folder: Path, into: Path, root: Path) -> GoldenVersion:
    path = folder / MANIFEST
    plan, plan_read = _plan_at(handle, folder, root)
    try:
        raw = _read_at(handle, MANIFEST, folder, root, limit=MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        if _replaced(handle, folder):
            raise _Replaced from None
        return GoldenVersion({}, None, {}, plan, plan_read)  # a folder of plans only
    except OSError as exc:
        raise ManifestError(path, f"cannot be read: {exc.strerror or exc}") from None
    entries = parse_manifest(path, raw)
    copies: dict[str, Path] = {}
    into.mkdir(parents=True, exist_ok=True)
    for name, entry in sorted(entries.items()):
        if entry.stored != "full" or entry.file is None:
            continue
        target = into / entry.file
        try:
            _copy_at(handle, entry.file, folder, root, target)
        except FileNotFoundError:
            if _replaced(handle, folder):
                raise _Replaced from None
            continue  # missing from this very version: check_integrity names it
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the copy, not the golden, failed
                raise ManifestError(path, faults.write_failed(exc, target)) from None
            continue  # a FIFO, a device: check_integrity names it, reading the live path
        copies[name] = target
    return GoldenVersion(entries, hashlib.sha256(raw).hexdigest(), copies, plan, plan_read)


def _plan_at(handle: int, folder: Path, root: Path) -> tuple[bytes | None, bool]:
    """The version's ``plan.json`` (a few kilobytes, read in memory: no copy), and whether it
    could be read; what is wrong with an unreadable one is named where the plan is used."""
    try:
        return _read_at(handle, PLAN, folder, root, limit=MAX_PLAN_BYTES), True
    except FileNotFoundError:
        if _replaced(handle, folder):
            raise _Replaced from None
        return None, True
    except (OSError, LosslessError):
        return None, False


def _open_at(handle: int, name: str, folder: Path, root: Path) -> int:
    """``name`` in the folder open as ``handle``, as a regular file; a link that stays inside
    ``root`` is followed by its path (:func:`~..core.paths.inside_root`)."""
    import errno
    import stat

    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=handle)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        inside_root(folder / name, root, what="stored golden")
        return open_regular(os.path.realpath(folder / name))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", str(folder / name))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_at(handle: int, name: str, folder: Path, root: Path, *, limit: int) -> bytes:
    fd = _open_at(handle, name, folder, root)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise OSError(f"larger than the limit of {limit} bytes ({size} bytes)")
        chunks = []
        while block := os.read(fd, 1 << 20):
            chunks.append(block)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _copy_at(handle: int, name: str, folder: Path, root: Path, target: Path) -> None:
    fd = _open_at(handle, name, folder, root)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)  # a copy from an attempt on an earlier version
        faults.write("write-decode-temp", target)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            while block := os.read(fd, 1 << 20):
                view = memoryview(block)
                while view:
                    view = view[os.write(out, view) :]
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _replaced(handle: int, folder: Path) -> bool:
    """Whether ``folder`` no longer names the folder open as ``handle``."""
    try:
        now = os.stat(os.path.realpath(folder))
    except OSError:
        return True
    held = os.fstat(handle)
    return (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino)
