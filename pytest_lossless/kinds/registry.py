"""The kinds registry: detects, fingerprints and compares artifacts through our hooks, and runs
the canary after each comparison.

Each kind is one plugin object (:class:`~.base.Kind`), one module each: :mod:`.video`,
:mod:`.audio`, :mod:`.tensor`, :mod:`.image`, :mod:`.bytes`. The built-ins' ``trylast`` hook
implementations answer for their own kind only, so they are registered exactly as a user's kind
is, and a plugin or conftest that implements a hook first takes precedence. A plugin's
:class:`~.base.Kind` objects come from its ``pytest_lossless_kinds`` hook
(:func:`register_plugin_kinds`). :class:`KindRegistry` is the one entry point the plugin, the
golden store and ``verify`` use; :func:`plugin_manager` is the one place a private plugin
manager is built.
"""

from __future__ import annotations

import copy
import importlib
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from .. import hookspecs
from ..core.artifact import Artifact
from ..errors import ArtifactError, LosslessError
from .interface import BuiltinKind, Kind, media_limits

if TYPE_CHECKING:
    from ..core.records import JsonObject
    from ..gates import Gate, GateResult
    from ..media.limits import MediaLimits
    from ..settings import Settings
    from .canary import Canary

__all__ = [
    "BUILTIN_KIND_NAMES",
    "Artifact",
    "BuiltinKind",
    "Kind",
    "KindRegistry",
    "builtin_kind",
    "builtin_kinds",
    "fingerprint",
    "media_limits",
    "plugin_manager",
    "register_builtin_kinds",
    "register_plugin_kinds",
]

#: The built-in kinds, in the order detection asks them (the cheap content tests first), and
#: the module and class of each: a kind's module is imported when it is registered; numpy,
#: media and the comparers load inside it on first use.
BUILTIN_KIND_NAMES = ("tensor", "image", "video", "audio", "bytes")
_BUILTIN_CLASSES = {
    "tensor": ("tensor", "TensorKind"),
    "image": ("image", "ImageKind"),
    "video": ("video", "VideoKind"),
    "audio": ("audio", "AudioKind"),
    "bytes": ("bytes", "BytesKind"),
}


def builtin_kind(
    name: str, settings: Settings | None = None, *, limits: MediaLimits | None = None
) -> BuiltinKind | None:
    """A fresh plugin object of the built-in kind ``name`` (None for any other name)."""
    found = _BUILTIN_CLASSES.get(name)
    if found is None:
        return None
    module = importlib.import_module(f"{__package__}.{found[0]}")
    kind: BuiltinKind = getattr(module, found[1])(settings, limits=limits)
    return kind


def fingerprint(kind: str, path: Path, *, limits: MediaLimits | None = None) -> JsonObject:
    """The fingerprint (as JSON) of a file of the built-in kind ``kind``, outside a session: its
    work bounded by ``limits`` (the defaults and the environment without them)."""
    from ..core.artifact import read_head

    found = builtin_kind(kind, limits=limits)
    if found is None:
        raise LosslessError(
            f"no built-in fingerprint for kind {kind!r} (built-ins: "
            f"{', '.join(BUILTIN_KIND_NAMES)})"
        )
    path = Path(path)
    read_head(path, 1)  # a missing file is named as such, whatever the kind
    return found.fingerprint(path)


def builtin_kinds(settings: Settings | None = None) -> list[BuiltinKind]:
    """A fresh plugin object per built-in kind, in detection order, decoding within the limits
    of ``settings`` (without settings: the defaults and the environment, read at each call)."""
    return [k for k in (builtin_kind(n, settings) for n in BUILTIN_KIND_NAMES) if k is not None]


def register_builtin_kinds(manager: pluggy.PluginManager, settings: Settings | None = None) -> None:
    """Register every built-in kind on ``manager`` (pytest's, or a private one), once.

    All are ``trylast``, and pluggy calls ``trylast`` implementations in the order they were
    registered, so they are registered in detection order.
    """
    for name in BUILTIN_KIND_NAMES:
        plugin = f"lossless-kind-{name}"
        if not manager.has_plugin(plugin):
            kind = builtin_kind(name, settings)
            manager.register(kind, plugin)


def register_plugin_kinds(manager: pluggy.PluginManager, settings: Settings | None = None) -> None:
    """Register the :class:`~.base.Kind` objects plugins return from ``pytest_lossless_kinds``
    (each once, by its name), so that they answer the kind hooks before the built-ins."""
    for kinds in manager.hook.pytest_lossless_kinds():
        for kind in kinds or []:
            if not isinstance(kind, Kind):
                raise LosslessError(
                    f"pytest_lossless_kinds returned {type(kind).__name__}, not a "
                    "pytest_lossless.kinds.Kind: subclass Kind and return an instance"
                )
            plugin = f"lossless-kind-{kind.name}"
            if not manager.has_plugin(plugin):
                if kind.settings is None:
                    kind.settings = settings
                manager.register(kind, plugin)


class _PluginManager(pluggy.PluginManager):
    """Like pytest's: a ``pytest_lossless_*`` function counts as an implementation without
    ``@hookimpl``, so a module written for pytest registers here unchanged."""

    def parse_hookimpl_opts(self, plugin: object, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if (
            opts is None
            and name.startswith("pytest_lossless_")
            and callable(getattr(plugin, name, None))
        ):
            return {
                "wrapper": False,
                "hookwrapper": False,
                "optionalhook": False,
                "tryfirst": False,
                "trylast": False,
                "specname": None,
            }
        return opts


def plugin_manager(
    modules: Sequence[str] = (), *, entry_points: bool = False
) -> pluggy.PluginManager:
    """A plugin manager with our hook specifications and the built-in kinds, without pytest.

    ``entry_points=True`` also loads the ``pytest11`` entry points, as pytest would; each name in
    ``modules`` is imported and registered, as pytest's ``-p MODULE`` does. ``verify`` uses this
    to re-derive the receipts of kinds that plugins add.
    """
    manager = _PluginManager("pytest")
    manager.add_hookspecs(hookspecs)
    register_builtin_kinds(manager)
    if entry_points:
        manager.load_setuptools_entrypoints("pytest11")
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise LosslessError(f"-p {name}: the plugin module cannot be imported: {exc}") from None
        if not manager.is_registered(module):
            manager.register(module, name)
    register_plugin_kinds(manager)
    return manager


def _may_be(kind: Kind, head: bytes, suffix: str) -> bool:
    """Whether ``kind``'s declared signatures or suffixes leave the file possible."""
    signatures = kind.signatures
    if signatures is None or suffix in kind.suffixes:
        return True
    return any(head[offset : offset + len(magic)] == magic for offset, magic in signatures)


class KindRegistry:
    """Detects, fingerprints and compares artifacts through the ``pytest_lossless_*`` hooks.

    ``hook`` is pytest's ``config.hook`` (with the built-in kinds registered on its plugin
    manager); with ``hook=None`` a private :func:`plugin_manager` is built (``plugin_manager``),
    so domain code and unit tests work without pytest. ``settings`` gives the limits on decoding
    work (:func:`media_limits`) of the golden-derived check and of diagnostics. ``canary``:
    ``"on"`` runs the canary (:mod:`.canary`) after each :meth:`compare`, ``"skip"`` records
    each (kind, gate) as skipped (``--lossless-no-canary``), ``"off"`` (the default: ``verify``,
    unit tests) has none.
    """

    def __init__(
        self, hook: Any = None, *, settings: Settings | None = None, canary: str = "off"
    ) -> None:
        self.settings = settings
        self.plugin_manager: pluggy.PluginManager | None = None
        if hook is None:
            self.plugin_manager = plugin_manager()
            hook = self.plugin_manager.hook
        self.hook = hook
        #: The session's fingerprints by file identity: a file compared several times (a
        #: candidate against its control runs and a golden) is decoded once. Made on first use.
        self.fingerprints: FingerprintCache | None = None
        #: The built-in kinds' own objects, by name, made on first use (the canary's plans).
        self._builtins: dict[str, BuiltinKind | None] = {}
        #: The session's canary (None: ``canary="off"``); its records wait in ``canary.fresh``.
        self.canary: Canary | None = None
        if canary not in ("on", "skip", "off"):
            raise LosslessError(f"KindRegistry(canary={canary!r}): one of on, skip, off")
        if canary != "off":
            from .canary import Canary

            self.canary = Canary(self, skip=canary == "skip")

    def builtin(self, name: str) -> BuiltinKind | None:
        """The built-in kind ``name`` (None for a plugin's kind), decoding within this
        registry's limits."""
        if name not in self._builtins:
            self._builtins[name] = builtin_kind(name, self.settings)
        return self._builtins[name]

    def detect(self, path: Path, expected: str | None = None) -> str:
        """The kind of the artifact at ``path``, from its content.

        ``expected``: the kind its golden has, when the caller fingerprints it next with
        ``artifact(..., golden=...)``. A kind whose fingerprint decides files of some
        signatures (:attr:`~.base.Kind.decided_by_fingerprint`: an mp4 or mkv is a video
        unless it holds audio only) is then not asked to probe such a file: when no kind
        before it in detection order claims it, the answer is ``expected`` and the fingerprint
        decides."""
        from ..core.artifact import read_head

        path = Path(path)
        head = read_head(path)
        ordered = self._kinds_in_call_order("pytest_lossless_detect_kind")
        if ordered is not None:
            # Only kinds answer: each is asked in the hook's order, except those whose
            # signatures rule the file out (a plain file is not probed as a video).
            suffix = path.suffix.lower()
            for kind in ordered:
                if not _may_be(kind, head, suffix):
                    continue
                if kind.name == expected and self._decided_by_fingerprint(kind, head):
                    return kind.name
                if kind.detect(path, head):
                    return kind.name
            return "bytes"
        found = self.hook.pytest_lossless_detect_kind(path=path, head=head)
        return str(found) if found else "bytes"

    def _decided_by_fingerprint(self, kind: Kind, head: bytes) -> bool:
        """Whether the file (its first bytes ``head``) is one whose kind ``kind``'s own
        fingerprint decides, and that fingerprint is the one a golden check of it takes (a
        built-in kind that no other implementation overrides)."""
        return (
            isinstance(kind, BuiltinKind)
            and any(
                head[at : at + len(magic)] == magic for at, magic in kind.decided_by_fingerprint
            )
            and self._answers_alone(kind, "pytest_lossless_fingerprint")
        )

    def _kinds_in_call_order(self, hook_name: str) -> list[Kind] | None:
        """The :class:`~.base.Kind` objects implementing ``hook_name``, in the order pluggy
        calls them; None when anything else implements it (a conftest function, a wrapper)."""
        caller = getattr(self.hook, hook_name, None)
        impls = getattr(caller, "get_hookimpls", None)
        if impls is None:
            return None
        kinds: list[Kind] = []
        for impl in reversed(impls()):
            if impl.hookwrapper or getattr(impl, "wrapper", False):
                return None
            if not isinstance(impl.plugin, Kind):
                return None
            kinds.append(impl.plugin)
        return kinds

    def fingerprint(self, kind: str, path: Path) -> JsonObject:
        """The fingerprint of ``path`` as ``kind``; ArtifactError for a damaged file."""
        from ..core.artifact import read_head

        path = Path(path)
        read_head(path, 1)  # a missing file is named as such, whatever the kind
        result = self._cached(
            kind, path, lambda: self.hook.pytest_lossless_fingerprint(kind=kind, path=path)
        )
        if result is None:
            raise LosslessError(
                f"no plugin fingerprints artifacts of kind {kind!r} ({path}): implement "
                "pytest_lossless_fingerprint for it"
            )
        if not isinstance(result, dict):
            raise LosslessError(
                f"pytest_lossless_fingerprint for kind {kind!r} returned {type(result).__name__}, "
                "not a dict"
            )
        return result

    def emptiness(self, artifact: Artifact) -> str | None:
        """What a built-in kind's ``artifact`` lacks when it holds nothing of its content
        (:meth:`~.interface.BuiltinKind.emptiness`); None for one that holds something, and
        for a plugin's kind (its own fingerprint says what it holds)."""
        own = self.builtin(artifact.kind)
        return own.emptiness(artifact) if own is not None else None

    def default_gate(self, kind: str) -> Gate:
        """The gate used when a test names none."""
        from ..gates.gate import Gate, parse_gate

        spec = self.hook.pytest_lossless_default_gate(kind=kind)
        gate = parse_gate(spec) if spec is not None else None
        return gate if gate is not None else Gate("bytes")

    def artifact(
        self,
        name: str,
        path: Path,
        kind: str | None = None,
        *,
        golden: JsonObject | None = None,
    ) -> Artifact:
        """Detect (unless ``kind`` is given) and fingerprint the file at ``path``.

        With ``golden``, the fingerprint of the golden it is compared with, a decoded file
        (video, audio, image) is first checked from its headers against limits derived from
        that golden (it may not decode much more than the golden does:
        :meth:`~.media.MediaLimits.for_golden`), so that an obtained decode bomb is refused
        before it is decoded.
        """
        path = Path(path)
        if not path.exists():
            raise ArtifactError(path, f"artifact {name!r} does not exist (was it written?)")
        found = kind or self.detect(path)
        own = self.builtin(found) if golden is not None else None
        check = getattr(own, "check_declared", None)
        if own is None or check is None or golden is None:
            return Artifact(name, found, self.fingerprint(found, path), path=path)
        limits = media_limits(self.settings).for_golden(golden)
        if self.canary is not None:
            # The canary's copies are made from the file while it is decoded (the common
            # case: the file equals its golden; otherwise they are made again after).
            self.canary.rehearse(
                self.default_gate(found), Artifact(name, found, dict(golden), path)
            )
        within = getattr(own, "fingerprint_within", None)
        if within is not None and self._answers_alone(own, "pytest_lossless_fingerprint"):
            # The kind checks the declared sizes while it starts decoding, under the same
            # limits: one pass over the file, no probe of its own before it.
            fingerprint = self._cached(found, path, lambda: within(path, limits), key=limits)
            return Artifact(name, found, fingerprint, path=path)
        check(path, limits)
        return Artifact(name, found, self.fingerprint(found, path), path=path)

    def _answers_alone(self, kind: Kind, hook_name: str) -> bool:
        """Whether ``kind`` (or the registered object of its class) is the one implementation
        of ``hook_name`` that answers for its name: every other one is a
        :class:`~.base.Kind` of another name (a plugin or conftest function could answer for
        any kind, and it goes first; so could another kind object of the same name)."""
        caller = getattr(self.hook, hook_name, None)
        impls = getattr(caller, "get_hookimpls", None)
        if impls is None:
            return False
        answering = 0
        for impl in impls():
            plugin = impl.plugin
            if not isinstance(plugin, Kind) or impl.hookwrapper or getattr(impl, "wrapper", False):
                return False
            if plugin.name == kind.name:
                if type(plugin) is not type(kind):
                    return False
                answering += 1
        return answering == 1

    def _cached(
        self, kind: str, path: Path, compute: Callable[[], JsonObject], key: Hashable = None
    ) -> JsonObject:
        """``compute()``, or the session's fingerprint of the unchanged file."""
        if self.fingerprints is None:
            self.fingerprints = FingerprintCache()
        return self.fingerprints.fingerprint(kind, path, compute, key=key)

    def gate_for(self, gate: Gate | str | None, kind: str) -> Gate:
        """``gate`` parsed, or the default gate of ``kind`` when the test names none."""
        from ..gates.gate import parse_gate

        parsed = parse_gate(gate)
        return self.default_gate(kind) if parsed is None else parsed

    def compare(
        self,
        gate: Gate | str | None,
        expected: Artifact,
        obtained: Artifact,
        diagnostics_dir: Path | None = None,
    ) -> GateResult:
        """Compare ``obtained`` with ``expected`` under ``gate`` (the kind's default if None).

        When ``diagnostics_dir`` is given, both files are present and the gate fails, the
        kind's pictures or listings are written there and named in the result. Then the canary
        of this (kind, gate) runs, once per session (:meth:`.canary.Canary.check`): it raises
        :class:`~..errors.CanaryError` where the gate cannot fail.
        """
        parsed = self.gate_for(gate, expected.kind)
        result = self.compare_only(parsed, expected, obtained, diagnostics_dir)
        if self.canary is not None:
            self.canary.check(parsed, expected, obtained)
        return result

    def compare_only(
        self,
        gate: Gate | str | None,
        expected: Artifact,
        obtained: Artifact,
        diagnostics_dir: Path | None = None,
    ) -> GateResult:
        """:meth:`compare` without the canary (the canary judges its copies so)."""
        from ..gates.gate import GateResult

        parsed = self.gate_for(gate, expected.kind)
        if expected.kind != obtained.kind and parsed.name != "bytes":
            return GateResult(
                artifact=expected.name,
                kind=expected.kind,
                gate=parsed.spec,
                lossless=parsed.lossless,
                passed=False,
                metadata_diffs=[f"kind: expected {expected.kind}, obtained {obtained.kind}"],
                unit="byte",
            )
        result: GateResult | None = self.hook.pytest_lossless_compare(
            kind=expected.kind, gate=parsed, expected=expected, obtained=obtained
        )
        if result is None:
            raise LosslessError(
                f"no plugin compares artifacts of kind {expected.kind!r} under gate "
                f"{parsed.spec!r} ({expected.name!r}): implement pytest_lossless_compare for it"
            )
        if not parsed.lossless:
            result.lossless = False  # a lossy gate never reports a lossless result
        if diagnostics_dir is not None and not result.passed:
            self._pictures(result, expected, obtained, Path(diagnostics_dir))
        return result

    def _pictures(
        self, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> None:
        """The kind's pictures of a failed comparison, named in the result (never an error)."""
        relay = getattr(self.hook, "pytest_lossless_pictures", None)  # a foreign relay may lack it
        if relay is None:
            return
        missing = [
            side
            for side, art in (("expected", expected), ("obtained", obtained))
            if art.path is None
        ]
        try:
            written = relay(
                kind=expected.kind,
                result=result,
                expected=expected,
                obtained=obtained,
                folder=folder,
            )
        except (LosslessError, OSError) as exc:
            result.notes.append(f"diagnostics could not be written: {exc}")
            return
        if written is None:
            return  # a kind with no pictures
        if missing:
            result.notes.append(
                f"no diff pictures or listings: the {' and '.join(missing)} side is kept as "
                "digests only"
            )
        result.diagnostic_files.extend(
            str(p) for p in written if str(p) not in result.diagnostic_files
        )


# ------------------------------------------------------------------ a session's fingerprints


@dataclass(frozen=True)
class FileIdentity:
    """What ``stat`` says of one file's content: the same inode with the same size, mtime and
    ctime (which no ``touch`` can set back) has not been written since."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity | None:
        """The identity of the regular file at ``path``; None when there is none."""
        try:
            info = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        return cls(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class FingerprintCache:
    """The fingerprints one session computed, so that a file is decoded once however many
    times it is compared (a candidate against several control runs and a golden).

    An entry is keyed by the kind, the resolved path, ``key`` (the limits it was computed
    under) and the file's :class:`FileIdentity`; it is used only when the file's identity,
    taken again just before, is unchanged, and stored only when the identity did not change
    while it was computed. Callers get a copy. At most ``entries`` are kept (least recently
    used go first); a session object, never module state."""

    def __init__(self, entries: int = 512) -> None:
        self.entries = entries
        self.hits = 0
        self.misses = 0
        self._store: OrderedDict[Hashable, JsonObject] = OrderedDict()
        self._lock = threading.Lock()

    def fingerprint(
        self,
        kind: str,
        path: Path,
        compute: Callable[[], JsonObject],
        *,
        key: Hashable = None,
    ) -> JsonObject:
        """The fingerprint of ``path`` as ``kind``: cached, or ``compute()`` (and kept)."""
        before = FileIdentity.of(path)
        if before is None:
            return compute()
        entry = (kind, str(Path(path).resolve()), key, before)
        with self._lock:
            hit = self._store.get(entry)
            if hit is not None:
                self._store.move_to_end(entry)
        if hit is not None and FileIdentity.of(path) == before:
            self.hits += 1
            return copy.deepcopy(hit)
        self.misses += 1
        result = compute()
        if FileIdentity.of(path) == before:
            with self._lock:
                self._store[entry] = copy.deepcopy(result)
                while len(self._store) > self.entries:
                    self._store.popitem(last=False)
        return result

    def clear(self) -> None:
        with self._lock:
            self._store.clear()
