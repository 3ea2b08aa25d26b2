"""The RunSpec: what exactly ran, so a reviewer can reproduce it months later.

Source revision and state from git (dirty flag, SHA-256 of ``git diff HEAD`` with the diff
itself, untracked files, and whether any remote branch holds the revision: a baseline on a
revision nobody can fetch is a known audit failure), plugin, Python and key package
versions, ffmpeg, platform, the determinism knobs of the environment, and the SHA-256 of
declared input files.

What is stored is redacted (:func:`redact_runspec`): secret values in pytest's argv, in the
knobs and in the diff become markers; ``diff_sha256`` stays the hash of the diff as git gave
it, and ``diff_stored_sha256`` is the hash of the redacted text stored beside the receipt.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from ..core.digests import canonical_sha256
from ..core.redact import Redactor
from ..run import hash_inputs

#: Distributions whose versions every receipt records.
PACKAGES = (
    "pytest-lossless",
    "pytest",
    "pluggy",
    "numpy",
    "soundfile",
    "imageio-ffmpeg",
    "pytest-xdist",
    "hypothesis",
)
#: Accelerator stacks whose versions change numerics; recorded when installed (metadata only:
#: nothing is imported).
ACCELERATOR_PACKAGES = (
    "torch",
    "torch-npu",
    "triton",
    "jax",
    "jaxlib",
    "vllm",
    "cupy-cuda12x",
    "cupy-cuda13x",
)
_GIT_TIMEOUT = 30.0


def _git(root: Path, *args: str) -> tuple[int, bytes, str]:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            timeout=_GIT_TIMEOUT,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, b"", str(exc)
    return done.returncode, done.stdout, done.stderr.decode(errors="replace").strip()


def source_state(root: Path, *, ignore: Sequence[Path] = ()) -> dict[str, Any]:
    """Git revision, dirty flag, diff (text and SHA-256), untracked names, publication.

    ``diff`` holds the exact bytes of ``git diff HEAD --binary`` decoded with
    ``surrogateescape``; the receipt writer stores it beside the receipt, not inside it.
    Untracked files under ``ignore`` (the plugin's own receipts) do not make the tree dirty.
    """
    code, out, err = _git(root, "rev-parse", "HEAD")
    if code != 0:
        return {
            "revision": None,
            "dirty": None,
            "diff_sha256": None,
            "diff": "",
            "untracked": [],
            "published": None,
            "remote_branches": [],
            "publication": "unknown",
            "git_error": err or f"git exited with {code}",
        }
    revision = out.decode().strip()
    _, top, _ = _git(root, "rev-parse", "--show-toplevel")
    _, branch, _ = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
    # The plugin's own receipts are evidence about the source, not part of it, tracked or not.
    excluded = [f":(exclude){rel}" for rel in _relative(root, ignore)]
    code, diff, err = _git(
        root, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--", ":/", *excluded
    )
    if code != 0:
        diff = b""
    _, untracked_raw, _ = _git(root, "ls-files", "--others", "--exclude-standard", "-z")
    untracked = sorted(
        n
        for n in untracked_raw.decode(errors="replace").split("\0")
        if n and not _under(root / n, ignore)
    )
    _, remotes_raw, _ = _git(root, "remote")
    remotes = [r for r in remotes_raw.decode(errors="replace").split() if r]
    _, contains, _ = _git(root, "branch", "-r", "--contains", revision)
    branches = sorted(
        line.strip()
        for line in contains.decode(errors="replace").splitlines()
        if line.strip() and "->" not in line
    )
    published = bool(branches)
    return {
        "revision": revision,
        "branch": branch.decode().strip() or None,
        "toplevel": top.decode().strip() or None,
        "dirty": bool(diff) or bool(untracked),
        "diff_sha256": hashlib.sha256(diff).hexdigest(),
        "diff_bytes": len(diff),
        "diff": diff.decode("utf-8", errors="surrogateescape"),
        "untracked": untracked,
        "remotes": remotes,
        "remote_branches": branches,
        "published": published,
        # A baseline on a revision that no remote branch holds cannot be fetched by anyone.
        "publication": "published" if published else "unpublished",
        "git_error": None if code == 0 else err,
    }


def _relative(root: Path, folders: Sequence[Path]) -> list[str]:
    """``folders`` that lie inside ``root``, relative to it (git pathspecs)."""
    base = Path(root).resolve()
    found = []
    for folder in folders:
        resolved = Path(folder).resolve()
        if resolved.is_relative_to(base) and resolved != base:
            found.append(resolved.relative_to(base).as_posix())
    return found


def _under(path: Path, folders: Sequence[Path]) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(Path(f).resolve()) for f in folders)


def source_revision(root: Path | str, *, ignore: Sequence[Path] = ()) -> dict[str, Any]:
    """The compact source identity for manifests: revision, dirty flag, diff hash, publication.

    Like :func:`source_state` without the diff text and file lists.
    """
    state = source_state(Path(root), ignore=ignore)
    compact = {
        key: state.get(key)
        for key in ("revision", "dirty", "diff_sha256", "diff_bytes", "published", "publication")
    }
    compact["untracked_count"] = len(state.get("untracked") or [])
    return compact


def _ffmpeg_version() -> str | None:
    try:
        import imageio_ffmpeg

        exe = imageio_ffmpeg.get_ffmpeg_exe()
        done = subprocess.run(
            [exe, "-hide_banner", "-version"], capture_output=True, timeout=30, check=False
        )
    except Exception:  # any failure to find or run ffmpeg is recorded as "unknown"
        return None
    first = done.stdout.decode(errors="replace").splitlines()
    return first[0].strip() if first else None


def session_facts() -> dict[str, Any]:
    """What stays the same for a whole session: versions, ffmpeg, platform, interpreter.

    Computed once per session by the plugin and passed to :func:`runspec`.
    """
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    if versions["pytest-lossless"] is None:  # run from a source tree, not installed
        from .. import __version__

        versions["pytest-lossless"] = f"{__version__} (source tree)"
    for name in ACCELERATOR_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    versions["ffmpeg"] = _ffmpeg_version()
    return {
        "versions": versions,
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "platform": platform.platform(),
            "python_implementation": platform.python_implementation(),
            "python_executable": sys.executable,
            "hostname": socket.gethostname(),
            "cpu_count": os.cpu_count(),
        },
    }


def environment(knobs: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The determinism knobs present (with values) and absent, from ``env`` (default: ours)."""
    env = os.environ if env is None else env
    return {
        "knobs": {k: env[k] for k in knobs if k in env},
        "knobs_unset": [k for k in knobs if k not in env],
    }


def runspec(
    rootdir: Path | str,
    *,
    knobs: Sequence[str],
    inputs: Mapping[str, str | os.PathLike[str]] | None = None,
    facts: Mapping[str, Any] | None = None,
    ignore: Sequence[Path] = (),
    host: Mapping[str, Any] | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """The RunSpec block of a receipt.

    ``facts`` is :func:`session_facts` computed once; ``inputs`` are hashed now. The
    environment fingerprint is the SHA-256 of the knobs, versions and platform, so two
    receipts with equal fingerprints ran under the same recorded conditions. ``host``
    (:func:`.index.host_identity`) and ``session_id`` say which session on which host wrote
    the receipt; the receipt's integrity hash covers them with the rest of the RunSpec.
    """
    facts = dict(facts) if facts is not None else session_facts()
    env = environment(knobs)
    fingerprint = canonical_sha256(
        {
            "environment": env,
            "versions": facts.get("versions"),
            "platform": {k: v for k, v in (facts.get("platform") or {}).items() if k != "hostname"},
        }
    )
    spec: dict[str, Any] = {
        "invocation": {"argv": list(sys.argv), "cwd": os.getcwd(), "rootdir": str(rootdir)},
        "source": source_state(Path(rootdir), ignore=ignore),
        "versions": facts.get("versions"),
        "platform": facts.get("platform"),
        "environment": {**env, "fingerprint_sha256": fingerprint},
        "inputs": hash_inputs(inputs or {}),
    }
    if host is not None:
        spec["host"] = dict(host)
    if session_id is not None:
        spec["session_id"] = session_id
    return spec


def redact_source(source: Mapping[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A ``source`` block whose ``diff`` is redacted, saying so: ``diff_redacted``,
    ``diff_redactions`` (values hidden) and ``diff_stored_sha256`` (of the text now held, the
    ``.diff`` a receipt stores). ``diff_sha256`` and ``diff_bytes`` keep describing ``git diff
    HEAD --binary`` itself, the source identity manifests record too. Done once: a block that
    already says ``diff_redacted`` is returned as it is."""
    block = dict(source)
    if "diff_redacted" in block or "diff" not in block:
        return block
    text, count, _ = redactor.diff(str(block.get("diff") or ""))
    block["diff"] = text
    block["diff_redacted"] = count > 0
    block["diff_redactions"] = count
    block["diff_stored_sha256"] = hashlib.sha256(
        text.encode("utf-8", errors="surrogateescape")
    ).hexdigest()
    return block


def redact_runspec(spec: Mapping[str, Any], redactor: Redactor) -> dict[str, Any]:
    """The RunSpec as a receipt stores it: secrets in pytest's argv, the knobs' values (a knob
    named like a secret) and the diff hidden by ``redactor``. The environment fingerprint was
    computed from the values as they were, so it still tells conditions apart."""
    block = dict(spec)
    invocation = block.get("invocation")
    if isinstance(invocation, Mapping) and isinstance(invocation.get("argv"), list):
        argv, _ = redactor.argv([str(a) for a in invocation["argv"]])
        block["invocation"] = {**invocation, "argv": argv}
    environment = block.get("environment")
    if isinstance(environment, Mapping) and isinstance(environment.get("knobs"), Mapping):
        knobs, _ = redactor.env(environment["knobs"])
        block["environment"] = {**environment, "knobs": knobs}
    if isinstance(block.get("source"), Mapping):
        block["source"] = redact_source(block["source"], redactor)
    return block


__all__ = [
    "PACKAGES",
    "environment",
    "redact_runspec",
    "redact_source",
    "runspec",
    "session_facts",
    "source_revision",
    "source_state",
]
