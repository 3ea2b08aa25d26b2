"""The RunSpec: what exactly ran, so a reviewer can reproduce it months later.

Source revision and state from git (dirty flag, SHA-256 of ``git diff HEAD`` with the diff
itself, untracked files, the remotes' URLs with credentials removed, and which remote-tracking
branch of a non-local remote holds the revision: a baseline on a revision nobody can fetch is a
known audit failure), plugin, Python and key package versions, ffmpeg, platform, the determinism
knobs of the environment, and the SHA-256 of declared input files.

Publication is read from local knowledge only (``git for-each-ref --contains`` over
``refs/remotes/``, bounded in time): nothing is fetched and no remote is contacted, so a
remote-tracking branch says what the remote held at the last fetch, not now.

What is stored is redacted (:meth:`RunSpec.redacted`): secret values in pytest's argv, in the
knobs and in the diff become markers; ``diff_sha256`` stays the hash of the diff as git gave
it, and ``diff_stored_sha256`` is the hash of the redacted text stored beside the receipt.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..core.digests import canonical_sha256
from ..core.records import JsonObject, Record, spec, to_json
from ..core.records import from_json as read_record
from ..core.redact import Redactor
from ..core.text import printable
from ..errors import ConfigError
from ..run.launcher import digest_inputs
from ..run.record import FileDigest
from .index import HostIdentity, SourceChange

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
            # Never a prompt, never a network: only local refs and config are read.
            env={
                **os.environ,
                "GIT_OPTIONAL_LOCKS": "0",
                "LC_ALL": "C",
                "GIT_TERMINAL_PROMPT": "0",
            },
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, b"", str(exc)
    return done.returncode, done.stdout, done.stderr.decode(errors="replace").strip()


@dataclass(frozen=True, slots=True)
class Publication(Record):
    """Which remote-tracking branches hold a revision, and whether one of a non-local remote
    does (:func:`publication`); its keys sit in the source block (:class:`SourceState`)."""

    remotes: tuple[str, ...] = ()
    remote_urls: dict[str, str] = field(default_factory=dict)
    local_remotes: tuple[str, ...] = ()
    remote_branches: tuple[str, ...] = ()
    #: None: a block written before this key existed (any remote branch counted then).
    published_branches: tuple[str, ...] | None = spec((), omit="none", absent=None)
    remote_branch: str | None = None
    remote_url: str | None = None
    #: None: could not be told (git failed); ``publication`` is then ``"unknown"``.
    published: bool | None = None
    publication: str = "unknown"
    publication_detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceState(Record):
    """One source tree as git describes it (:func:`source_state`): revision, dirty flag, the
    diff (text and SHA-256), untracked names, publication. ``to_json`` is the RunSpec's
    ``source`` block, ``compact`` the identity a manifest records (:func:`source_revision`)."""

    revision: str | None
    branch: str | None = None
    toplevel: str | None = None
    dirty: bool | None = None
    diff_sha256: str | None = None
    diff_bytes: int = 0
    #: The exact bytes of ``git diff HEAD --binary``, decoded with ``surrogateescape``.
    diff: str = spec("", omit=lambda state: state.stored)
    changed_files: int = 0
    untracked: tuple[str, ...] = ()
    publication: Publication = spec(default_factory=Publication, flatten=True)
    git_error: str | None
    #: How many untracked files a compact block (:meth:`compact`) counted; it lists none.
    untracked_count: int | None = spec(None, omit="none")
    #: Once the diff is redacted to be stored (:meth:`redacted`): whether values were hidden,
    #: how many, and the SHA-256 of the text now held (the stored ``.diff``).
    diff_redacted: bool | None = spec(None, omit="none")
    diff_redactions: int | None = spec(None, omit="none")
    diff_stored_sha256: str | None = spec(None, omit="none")
    #: As a receipt holds the block (:meth:`stored`): the diff's file in the session folder
    #: (None: no diff), written instead of the diff's text.
    diff_file: str | None = spec(None, omit=lambda state: not state.stored)
    stored: bool = spec(False, json=False)

    @classmethod
    def read(cls, block: object) -> SourceState | None:
        """A source block as recorded (a RunSpec's ``source``, a run's ``sources`` tree, a
        manifest's or the index's compact identity), read leniently for the readers that
        describe it; None when it is not an object. ``verify`` judges the recorded JSON itself
        (:func:`publication_contradictions`)."""
        if not isinstance(block, Mapping):
            return None
        state = read_record(cls, block, problems=[])
        return replace(state, revision=state.revision or None)

    @property
    def untracked_files(self) -> int:
        """How many untracked files the tree had (listed, or counted by a compact block)."""
        return len(self.untracked) if self.untracked_count is None else self.untracked_count

    def problem(self) -> str | None:
        """What keeps this tree from being a published revision, or None: not git, dirty, or
        in no remote-tracking branch of a non-local remote (or that could not be read)."""
        if not self.revision:
            return f"not a git revision ({printable(self.git_error or 'unknown')})"
        if self.dirty:
            changed = self.changed_files
            parts = [_plural(changed, "changed file")] if changed or self.diff_bytes else []
            if self.untracked_files:
                parts.append(_plural(self.untracked_files, "untracked file"))
            return "dirty: " + " and ".join(parts or ["uncommitted changes"])
        publication = self.publication
        if publication.publication == "published" and publication.published is True:
            return None
        problem = (
            f"revision {self.revision[:12]} is in no remote-tracking branch of a non-local remote"
        )
        detail = publication.publication_detail
        if publication.publication == "unknown" and detail:
            return f"{problem} as far as can be told ({printable(detail)})"
        return problem

    def describe(self) -> str:
        """The state in a few words: ``3f2a9c1e0b7d clean, published (origin/main)``."""
        revision = (self.revision or "")[:12] or "no git revision"
        if self.dirty:
            diff = (self.diff_sha256 or "")[:12]
            dirty = f"dirty (diff {diff})" if self.diff_bytes and diff else "dirty"
        else:
            dirty = "clean" if self.dirty is False else "dirty unknown"
        return printable(f"{revision} {dirty}, {self.publication_word}")

    @property
    def publication_word(self) -> str:
        """``published (origin/main)``, ``unpublished`` or ``publication unknown``."""
        publication, where = self.publication.publication, self.publication.remote_branch
        if publication == "published":
            return printable(f"published ({where})" if where else "published")
        return "unpublished" if publication == "unpublished" else "publication unknown"

    def redacted(self, redactor: Redactor) -> SourceState:
        """The block whose ``diff`` is redacted, saying so (``diff_redacted``,
        ``diff_redactions``, ``diff_stored_sha256``); ``diff_sha256`` and ``diff_bytes`` keep
        describing ``git diff HEAD --binary`` itself, the source identity manifests record too.
        Done once: a block already redacted is returned as it is."""
        if self.diff_redacted is not None:
            return self
        text, count, _ = redactor.diff(self.diff)
        stored = hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).hexdigest()
        return replace(
            self,
            diff=text,
            diff_redacted=count > 0,
            diff_redactions=count,
            diff_stored_sha256=stored,
        )

    def as_stored(self, diff_file: str | None) -> SourceState:
        """The block as a receipt holds it: the (redacted) diff's file named, its text not."""
        return replace(self, diff_file=diff_file, stored=True)

    def to_json(self) -> dict[str, Any]:
        data = to_json(self)
        if self.revision is not None:
            return data
        # Not a git revision: the shorter block receipts have always written for it.
        return {key: data[key] for key in (*_NOT_GIT, *_STORING) if key in data}

    def compact(self) -> SourceIdentity:
        """The compact source identity for manifests and the session's index: revision,
        dirty flag, diff hash, publication, without the diff text and file lists."""
        known, shown = self.revision is not None, self.publication
        return SourceIdentity(
            revision=self.revision,
            dirty=self.dirty,
            diff_sha256=self.diff_sha256,
            diff_bytes=self.diff_bytes if known else None,
            published=shown.published,
            publication=shown.publication,
            remote_url=shown.remote_url,
            remote_branch=shown.remote_branch,
            published_branches=shown.published_branches,
            publication_detail=shown.publication_detail,
            changed_files=self.changed_files if known else None,
            untracked_count=self.untracked_files,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceIdentity(Record):
    """A source tree's compact identity (:meth:`SourceState.compact`), as a golden's manifest,
    the session's ``INDEX.json``, an export and each ``model_run(sources=...)`` tree record it:
    every key written, in this order (None: not known, or not a git revision)."""

    revision: str | None
    dirty: bool | None
    diff_sha256: str | None
    diff_bytes: int | None
    published: bool | None
    publication: str
    remote_url: str | None
    remote_branch: str | None
    published_branches: tuple[str, ...] | None
    publication_detail: str
    changed_files: int | None
    untracked_count: int


#: The keys of the block of a tree that is not a git revision (all but the last three empty).
_NOT_GIT: tuple[str, ...] = ("revision", "dirty", "diff_sha256", "diff", "untracked", "published")
_NOT_GIT += ("remote_branches", "published_branches", "remote_branch", "remote_url")
_NOT_GIT += ("publication", "publication_detail", "git_error")
#: The keys redacting (:meth:`SourceState.redacted`) and storing the diff add to a block.
_STORING = ("diff_redacted", "diff_redactions", "diff_stored_sha256", "diff_file")


def source_state(root: Path, *, ignore: Sequence[Path] = ()) -> SourceState:
    """Git revision, dirty flag, diff (text and SHA-256), untracked names, publication.

    ``diff`` holds the exact bytes of ``git diff HEAD --binary`` decoded with
    ``surrogateescape``; the receipt writer stores it beside the receipt, not inside it.
    Untracked files under ``ignore`` (the plugin's own receipts) do not make the tree dirty.
    A session reads each tree once, through :class:`SourceStates`.
    """
    return _read_state(Path(root), ignore)[0]


def _read_state(root: Path, ignore: Sequence[Path]) -> tuple[SourceState, _Signature]:
    """The tree's state, and the signature of its git files (:func:`_signature`) as read."""
    code, out, err = _git(root, "rev-parse", "HEAD")
    if code != 0:
        unknown = Publication(publication_detail="not a git revision")
        git_error = err or f"git exited with {code}"
        return SourceState(revision=None, git_error=git_error, publication=unknown), None
    revision = out.decode().strip()
    _, dirs, _ = _git(
        root, "rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir"
    )
    top, git_dir, common = ([*dirs.decode().splitlines(), "", "", ""])[:3]
    _, branch, _ = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
    diff, code, err, untracked = _work_tree(root, ignore)
    text = diff.decode("utf-8", errors="surrogateescape")
    state = SourceState(
        revision=revision,
        git_error=None if code == 0 else err,
        publication=publication(root, revision, branch.decode().strip()),
        branch=branch.decode().strip() or None,
        toplevel=top.strip() or None,
        dirty=bool(diff) or bool(untracked),
        diff_sha256=hashlib.sha256(diff).hexdigest(),
        diff_bytes=len(diff),
        diff=text,
        changed_files=sum(1 for line in text.splitlines() if line.startswith("diff --git ")),
        untracked=untracked,
    )
    git_dir = git_dir.strip()
    common_dir = (root / common.strip()) if common.strip() else Path(git_dir)
    return state, _signature(Path(git_dir), common_dir) if git_dir else None


def _work_tree(root: Path, ignore: Sequence[Path]) -> tuple[bytes, int, str, tuple[str, ...]]:
    """The work tree against HEAD: ``git diff HEAD --binary`` (empty when it failed), git's exit
    status and message, and the untracked names (two git processes)."""
    # The plugin's own receipts are evidence about the source, not part of it, tracked or not.
    code, diff, err = _diff(root, ignore)
    _, untracked_raw, _ = _git(root, "ls-files", "--others", "--exclude-standard", "-z")
    untracked = sorted(
        n
        for n in untracked_raw.decode(errors="replace").split("\0")
        if n and not _under(root / n, ignore)
    )
    return diff, code, err, tuple(untracked)


def _diff(root: Path, ignore: Sequence[Path]) -> tuple[int, bytes, str]:
    """``git diff HEAD --binary`` of the whole tree but the folders ``ignore`` names inside it
    (empty when git failed), git's exit status and message: one git process. The pathspecs are
    literal (a folder named ``out[1]`` or ``g*`` excludes itself, not what a glob matches) and
    whole path components (excluding ``goldens`` leaves ``goldens_util.py`` in)."""
    excluded = [f":(exclude,literal){rel}" for rel in _relative(root, ignore)]
    code, diff, err = _git(
        root, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--", ":/", *excluded
    )
    return code, diff if code == 0 else b"", err


#: What a tree's git files looked like when it was read: (path, mtime ns, size, inode) of HEAD,
#: the branch HEAD names, packed-refs and the index; None outside git.
_Signature = tuple[tuple[str, int, int, int], ...] | None


def _signature(git_dir: Path, common_dir: Path) -> _Signature:
    """A commit, checkout, reset or ``git add`` rewrites one of these files; reading them costs
    a few ``stat`` calls, not a git process."""
    try:
        head = (git_dir / "HEAD").read_text(errors="replace").strip()
    except OSError:
        head = ""
    files = [git_dir / "HEAD", git_dir / "index", common_dir / "packed-refs"]
    if head.startswith("ref: "):
        files.append(common_dir / head[len("ref: ") :])
    return _stat(str(path) for path in files)


def _stat(names: Iterable[str]) -> tuple[tuple[str, int, int, int], ...]:
    """(name, mtime ns, size, inode) of each file; -1s for one that cannot be read."""
    found = []
    for name in names:
        try:
            info = os.stat(name)
        except OSError:
            found.append((name, -1, -1, -1))
            continue
        found.append((name, info.st_mtime_ns, info.st_size, info.st_ino))
    return tuple(found)


class SourceStates:
    """The session's source trees, each read from git once (#22: about seven git processes
    per tree, not per receipt): the rootdir for every receipt's RunSpec, the manifests and the
    index, and each tree a ``model_run(sources=...)`` names. A tree is read again only when
    its HEAD, branch, packed refs or index changed since (a commit during the session: the
    receipts after it record the new revision); edits to the work tree alone are not seen
    then, so the diff a receipt records is the tree's as first read in the session, and the
    session's end asks :meth:`changes` once whether each tree is still what was recorded.

    ``exclude`` names what the session itself writes (the goldens folder, which
    ``--update-goldens`` rewrites in the tracked tree; pytest's basetemp, its cache and the lock
    folder when they lie inside a tree): receipts record each tree in full, but the end's
    comparison leaves these folders out of the diff and of the untracked names, at both ends,
    or every session would be named by its own writes. A tree whose diff is not empty when first
    read and that holds one of them costs one ``git diff`` more then, for the comparison's digest.
    """

    def __init__(self, *, exclude: Sequence[Path] = ()) -> None:
        self._states: dict[tuple[str, tuple[str, ...]], _Known] = {}
        self._exclude = tuple(Path(p) for p in exclude)

    def state(self, root: Path | str, *, ignore: Sequence[Path] = ()) -> SourceState:
        """The tree's state, from git the first time and after its git files changed."""
        path = Path(root)
        key = (str(path.resolve()), tuple(str(Path(f).resolve()) for f in ignore))
        known = self._states.get(key)
        if known is not None and (
            known.signature is None or _stat_again(known.signature) == known.signature
        ):
            return known.state
        state, signature = _read_state(path, ignore)
        self._states[key] = _Known(
            path, tuple(ignore), state, signature, self._compared(path, ignore, state)
        )
        return state

    def _compared(
        self, root: Path, ignore: Sequence[Path], state: SourceState
    ) -> tuple[str | None, tuple[str, ...], tuple[str, ...]]:
        """What the end compares for ``state``: the diff's SHA-256 and the untracked names
        without the session's own folders, and those folders relative to the tree."""
        excluded = tuple(_relative(root, self._exclude))
        if state.revision is None or not excluded:
            return state.diff_sha256, state.untracked, excluded
        untracked = tuple(n for n in state.untracked if not _under(root / n, self._exclude))
        if not state.diff_bytes:  # nothing to leave out of an empty diff: no git process
            return state.diff_sha256, untracked, excluded
        _, diff, _ = _diff(root, (*ignore, *self._exclude))  # empty when git failed, as read
        return hashlib.sha256(diff).hexdigest(), untracked, excluded

    def changes(self) -> tuple[SourceChange, ...]:
        """Each git tree read this session whose work tree is no longer what was recorded (its
        revision, the SHA-256 of its diff, its untracked names), leaving out the session's own
        folders (``exclude``), read now: one ``git diff`` and one ``git ls-files`` per tree
        (and a ``git rev-parse`` when its git files changed)."""
        found = []
        for key, known in sorted(self._states.items()):
            was = known.state
            if was.revision is None:
                continue
            revision: str | None = was.revision
            if known.signature is None or _stat_again(known.signature) != known.signature:
                code, out, _ = _git(known.root, "rev-parse", "HEAD")
                revision = out.decode().strip() if code == 0 else None
            diff, _, _, untracked = _work_tree(known.root, (*known.ignore, *self._exclude))
            digest: str | None = hashlib.sha256(diff).hexdigest()  # empty: git failed
            was_digest, was_untracked, excluded = known.compared
            if (revision, digest, untracked) != (was.revision, was_digest, was_untracked):
                found.append(
                    SourceChange(
                        tree=key[0],
                        revision=was.revision,
                        diff_sha256=was_digest,
                        untracked_count=len(was_untracked),
                        revision_at_end=revision,
                        diff_sha256_at_end=digest,
                        untracked_count_at_end=len(untracked),
                        excluded=excluded,
                    )
                )
        return tuple(found)


@dataclass(frozen=True, slots=True)
class _Known:
    """A tree as the session last read it: where, what it ignores, its state and signature,
    and what the end compares (:meth:`SourceStates._compared`)."""

    root: Path
    ignore: tuple[Path, ...]
    state: SourceState
    signature: _Signature
    compared: tuple[str | None, tuple[str, ...], tuple[str, ...]]


def _stat_again(signature: tuple[tuple[str, int, int, int], ...]) -> _Signature:
    return _stat(name for name, *_ in signature)


# -- remotes and publication

#: ``scheme://`` at the start of a URL (``file://``, ``https://``, ``ssh://``, ...).
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
#: git's scp-like syntax, ``[user@]host:path``: a colon before any slash (not ``C:\``).
_SCP = re.compile(r"^(?:[^@/:]+@)?[^/:\\]{2,}:")
_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]")
#: What ``--lossless-require-published`` asks for, said once.
PUBLISH_FIX = (
    "commit every change, `git push` the branch to a remote others can fetch from, "
    "`git fetch` so the remote-tracking branch knows it, and run again; or run without "
    "--lossless-require-published"
)


def redact_url(url: str) -> str:
    """``url`` as a record may show it: no userinfo in a ``scheme://`` URL (``https://user:token@
    host/x`` is ``https://host/x``; a token is often the user name alone), and secret-named
    query values (``?access_token=``) replaced by markers. An scp-like ``git@host:path`` keeps
    its user: that syntax has no place for a password."""
    shown = url
    if _SCHEME.match(url):
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = None
        if parts is not None and "@" in parts.netloc:
            host = parts.netloc.rpartition("@")[2]
            shown = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
        elif parts is None:
            shown = re.sub(r"://[^/]*@", "://", url)
    text, _ = Redactor().text(shown)
    return printable(text)


def is_local_url(url: str) -> bool:
    """Whether a remote's URL is a path on this machine (``file://``, ``/srv/x.git``, ``../x``,
    ``C:\\x``): a clone there is another copy here, not a publication others can fetch."""
    if _SCHEME.match(url):
        if url.lower().startswith("file://"):
            return True
        try:
            host = urlsplit(url).hostname
        except ValueError:
            return False
        return _loopback(host)
    if _WINDOWS_PATH.match(url) or url.startswith(("/", ".", "~")):
        return True
    scp = _SCP.match(url)
    if scp is None:
        return True
    host = scp.group(0)[:-1].rpartition("@")[2]
    return _loopback(host[1:-1] if host.startswith("[") and host.endswith("]") else host)


def _loopback(host: str | None) -> bool:
    """``localhost``, 127.0.0.0/8 and ::1: a server on this machine, not a publication."""
    import ipaddress

    if not host:
        return False
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _remote_urls(root: Path) -> dict[str, str]:
    """Remote name -> fetch URL as git uses it (``insteadOf`` applied), not yet redacted."""
    _, raw, _ = _git(root, "remote", "-v")
    urls: dict[str, str] = {}
    for line in raw.decode(errors="replace").splitlines():
        name, _, rest = line.partition("\t")
        url, _, kind = rest.rpartition(" ")
        if name and url and (kind == "(fetch)" or name not in urls):
            urls[name] = url
    return urls


def publication(root: Path, revision: str, branch: str = "") -> Publication:
    """Which remote-tracking branches hold ``revision``, and whether one of a non-local remote
    does (then it is ``published``). Local refs only: nothing is fetched."""
    urls = _remote_urls(root)
    local = sorted(name for name, url in urls.items() if is_local_url(url))
    code, raw, err = _git(
        root,
        "for-each-ref",
        "--contains",
        revision,
        "--format=%(refname) %(symref)",
        "refs/remotes/",
    )
    holding: dict[str, str | None] = {}  # "origin/main" -> its remote's name (None: unknown)
    for line in raw.decode(errors="replace").splitlines():
        ref, _, symref = line.partition(" ")
        if not ref.startswith("refs/remotes/") or symref.strip():
            continue  # refs/remotes/origin/HEAD points at a branch that is listed itself
        short = ref[len("refs/remotes/") :]
        owners = [name for name in urls if short.startswith(name + "/")]
        holding[short] = max(owners, key=len) if owners else None
    published_on = sorted(b for b, r in holding.items() if r is not None and r not in local)
    chosen = _choose(published_on, branch)
    remote = holding.get(chosen) if chosen else _home_remote(root, branch, urls)
    remote_url = redact_url(urls[remote]) if remote in urls else None
    known = Publication(
        remotes=tuple(sorted(urls)),
        remote_urls={name: redact_url(url) for name, url in sorted(urls.items())},
        local_remotes=tuple(local),
        remote_branches=tuple(sorted(holding)),
        published_branches=tuple(published_on),
        remote_branch=chosen,
        remote_url=remote_url,
    )
    if code != 0:
        why = printable(err or f"git exited with {code}")
        return replace(known, publication_detail=f"which remote branches hold it is unknown: {why}")
    return replace(
        known,
        published=bool(published_on),
        publication="published" if published_on else "unpublished",
        publication_detail=_detail(holding, local, chosen, remote_url, urls),
    )


def _choose(branches: list[str], branch: str) -> str | None:
    """The branch to name: ``origin/<current branch>``, else one on origin, else the first."""
    for wanted in (f"origin/{branch}", "origin/"):
        for candidate in branches:
            if candidate == wanted or (wanted.endswith("/") and candidate.startswith(wanted)):
                return candidate
    return branches[0] if branches else None


def _home_remote(root: Path, branch: str, urls: Mapping[str, str]) -> str | None:
    """Where an unpublished revision would go: the branch's upstream remote, origin, or the
    only remote."""
    if branch and branch != "HEAD":
        _, raw, _ = _git(root, "config", "--get", f"branch.{branch}.remote")
        if raw.decode(errors="replace").strip() in urls:
            return raw.decode(errors="replace").strip()
    if "origin" in urls:
        return "origin"
    return next(iter(urls)) if len(urls) == 1 else None


def _detail(
    holding: Mapping[str, str | None],
    local: Sequence[str],
    chosen: str | None,
    url: str | None,
    urls: Mapping[str, str],
) -> str:
    if chosen is not None:
        return f"in {chosen} of {url} (as of the last fetch)"
    if not urls and not holding:
        return "no remotes are configured: only this clone holds the revision"
    if not holding:
        return "in no remote-tracking branch: never pushed, or pushed but not fetched since"
    notes = []
    for short, remote in sorted(holding.items()):
        if remote is None:
            notes.append(f"{short}, whose remote is not configured (its URL is unknown)")
        else:
            notes.append(f"{short}, but {remote} is a local clone ({redact_url(urls[remote])})")
    return "only in " + "; ".join(notes) + ": not published where others can fetch it"


def publication_problem(source: SourceState) -> str | None:
    """What keeps a source tree from being a published revision (:meth:`SourceState.problem`),
    or None."""
    return source.problem()


def publication_contradictions(source: JsonObject, label: str) -> list[str]:
    """Where a recorded ``published``/``publication`` disagrees with the branches recorded
    beside it (``verify``, on the block as the file holds it). Receipts written before
    ``published_branches`` existed counted any remote-tracking branch; a ``publication`` of
    ``"unknown"`` (git failed) claims nothing."""
    if not source.get("revision") or source.get("publication") == "unknown":
        return []
    branches, recorded = source.get("remote_branches"), source.get("published_branches")
    if recorded is None and branches is None:
        return []
    listed = branches if recorded is None else recorded
    holding = list(listed) if isinstance(listed, list) else []
    found = [
        f"{label}: published branch {b} is not among the remote branches {branches!r}"
        for b in holding
        if isinstance(branches, list) and b not in branches
    ]
    if source.get("remote_branch") not in (None, *holding):
        found.append(f"{label}: remote branch {source['remote_branch']} is not a published one")
    local = source.get("local_remotes")
    local = local if isinstance(local, list) else []
    found += [
        f"{label}: published branch {b} counts, but {r} is a local remote (a clone here)"
        for b in holding
        for r in local
        if str(b).startswith(f"{r}/")
    ]
    published = bool(holding)
    if source.get("published") is not published or source.get("publication") != (
        "published" if published else "unpublished"
    ):
        found.append(
            f"{label}: publication {source.get('publication')!r} contradicts the remote "
            f"branches {holding!r} of non-local remotes"
        )
    return found


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


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


def source_revision(root: Path | str, *, ignore: Sequence[Path] = ()) -> SourceIdentity:
    """The compact source identity for manifests (:meth:`SourceState.compact`) of a tree read
    now; a session reads it once through :class:`SourceStates`."""
    return source_state(Path(root), ignore=ignore).compact()


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


@dataclass(frozen=True)
class SessionFacts:
    """What stays the same for a whole session (:func:`session_facts`): the versions of
    Python, the packages and ffmpeg, the platform, and the scheduler job it runs in."""

    versions: dict[str, str | None]
    platform: dict[str, str | int | None]
    #: The scheduler job (:func:`scheduler_identity`), as the scheduler module records it.
    scheduler: JsonObject | None = None


def session_facts() -> SessionFacts:
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
    return SessionFacts(
        versions=versions,
        platform={
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "platform": platform.platform(),
            "python_implementation": platform.python_implementation(),
            "python_executable": sys.executable,
            "hostname": socket.gethostname(),
            "cpu_count": os.cpu_count(),
        },
        scheduler=scheduler_identity(os.environ),
    )


def scheduler_identity(env: Mapping[str, str]) -> JsonObject | None:
    """The scheduler job this session runs in (Slurm: job id, array task, node, and the
    allocation as Slurm gave it), or None outside one. Recorded in each receipt's RunSpec,
    outside the environment fingerprint: job ids differ on every run."""
    from ..devices.scheduler import RECORDED, slurm_job

    try:
        job = slurm_job(env)
    except ConfigError as exc:  # a damaged variable is recorded as it is, with the problem
        given: JsonObject = {n: env[n] for n in RECORDED if n in env}
        return {"name": "slurm", "allocation": given, "problem": str(exc)}
    return job.record() if job is not None else None


@dataclass(frozen=True, slots=True)
class Invocation(Record):
    """How pytest was started: its arguments (redacted as stored), directory and rootdir."""

    argv: tuple[str, ...] = ()
    cwd: str | None = None
    rootdir: str | None = None


@dataclass(frozen=True, slots=True)
class Knobs(Record):
    """The determinism knobs present (with values, redacted as stored) and absent; in a
    RunSpec with the environment fingerprint (:func:`runspec`)."""

    knobs: dict[str, str | None] = spec(default_factory=dict)
    knobs_unset: tuple[str, ...] = ()
    fingerprint_sha256: str | None = spec(None, omit="none")


def environment(knobs: Sequence[str], env: Mapping[str, str] | None = None) -> Knobs:
    """The determinism knobs present (with values) and absent, from ``env`` (default: ours)."""
    env = os.environ if env is None else env
    return Knobs({k: env[k] for k in knobs if k in env}, tuple(k for k in knobs if k not in env))


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec(Record):
    """A receipt's ``runspec`` block (:func:`runspec`): what exactly ran. The fields a recorded
    one lacks (an older or a hand-made one, :meth:`read`) read as absent."""

    invocation: Invocation | None = spec(None, omit="none")
    source: SourceState = spec(default_factory=lambda: SourceState(revision=None, git_error=None))
    versions: dict[str, str | None] = spec(default_factory=dict)
    platform: dict[str, str | int | None] = spec(default_factory=dict)
    environment: Knobs = spec(default_factory=Knobs)
    inputs: dict[str, FileDigest] = spec(default_factory=dict)
    #: The scheduler's job, as :mod:`..devices.scheduler` records it (:func:`scheduler_identity`).
    scheduler: JsonObject | None = spec(None, omit="none")
    host: HostIdentity | None = spec(None, omit="none")
    session_id: str | None = spec(None, omit="none")

    @classmethod
    def read(cls, block: object) -> RunSpec:
        """A RunSpec as recorded (JSON), read leniently: what does not fit reads as absent."""
        return read_record(cls, block, problems=[])

    def redacted(self, redactor: Redactor) -> RunSpec:
        """The RunSpec as a receipt stores it: secrets in pytest's argv, the knobs' values (a
        knob named like a secret) and the diff hidden by ``redactor``. The environment
        fingerprint was computed from the values as they were, so it still tells conditions
        apart."""
        invocation = self.invocation
        if invocation is not None:
            invocation = replace(invocation, argv=tuple(redactor.argv(invocation.argv)[0]))
        knobs, _ = redactor.env(self.environment.knobs)
        return replace(
            self,
            invocation=invocation,
            environment=replace(self.environment, knobs=knobs),
            source=self.source.redacted(redactor),
        )


def runspec(
    rootdir: Path | str,
    *,
    knobs: Sequence[str],
    inputs: Mapping[str, str | os.PathLike[str]] | None = None,
    facts: SessionFacts | None = None,
    ignore: Sequence[Path] = (),
    host: HostIdentity | None = None,
    session_id: str | None = None,
    sources: SourceStates | None = None,
) -> RunSpec:
    """The RunSpec block of a receipt.

    ``facts`` is :func:`session_facts` computed once; ``inputs`` are hashed now. The
    environment fingerprint is the SHA-256 of the knobs, versions and platform, so two
    receipts with equal fingerprints ran under the same recorded conditions. ``host``
    (:func:`.index.host_identity`) and ``session_id`` say which session on which host wrote
    the receipt; the receipt's integrity hash covers them with the rest of the RunSpec.
    ``sources`` is the session's :class:`SourceStates`: the rootdir is read from git once.
    """
    facts = facts if facts is not None else session_facts()
    env = environment(knobs)
    fingerprint = canonical_sha256(
        {
            "environment": env.to_json(),
            "versions": facts.versions,
            "platform": {k: v for k, v in facts.platform.items() if k != "hostname"},
        }
    )
    return RunSpec(
        invocation=Invocation(tuple(sys.argv), os.getcwd(), str(rootdir)),
        source=(sources or SourceStates()).state(rootdir, ignore=ignore),
        versions=facts.versions,
        platform=facts.platform,
        environment=replace(env, fingerprint_sha256=fingerprint),
        inputs=digest_inputs(inputs or {}),
        scheduler=facts.scheduler,
        host=host,
        session_id=session_id,
    )


__all__ = [
    "PACKAGES",
    "PUBLISH_FIX",
    "Invocation",
    "Knobs",
    "Publication",
    "RunSpec",
    "SessionFacts",
    "SourceChange",
    "SourceIdentity",
    "SourceState",
    "SourceStates",
    "environment",
    "is_local_url",
    "publication",
    "publication_contradictions",
    "publication_problem",
    "redact_url",
    "runspec",
    "scheduler_identity",
    "session_facts",
    "source_revision",
    "source_state",
]
