"""Artifact kinds: detection, fingerprint, default gate and comparison, through our hooks.

Each built-in kind (video, audio, tensor, bytes) is one plugin object whose ``trylast``
implementations of the four ``pytest_lossless_*`` kind hooks answer for that kind only, so it is
registered exactly as a user's kind is, and a plugin or conftest that implements a hook first
takes precedence. :class:`KindRegistry` is the one entry point the plugin, the golden store and
``verify`` use; :func:`plugin_manager` is the one place a private plugin manager is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pluggy

from .. import hookspecs
from ..core.artifact import Artifact
from ..errors import ArtifactError, LosslessError
from ..hookspecs import hookimpl

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..gates import Gate, GateResult
    from ..media import MediaLimits
    from ..media.hashing import FingerprintCache
    from ..settings import Settings

    #: What :attr:`KindRegistry.observers` are called with: gate, expected, obtained, result.
    Observer = Callable[[Gate, Artifact, Artifact, GateResult], None]

__all__ = [
    "BUILTIN_KIND_NAMES",
    "Artifact",
    "AudioKind",
    "BuiltinKind",
    "BytesKind",
    "KindRegistry",
    "TensorKind",
    "VideoKind",
    "builtin_kinds",
    "plugin_manager",
    "register_builtin_kinds",
]

# media and gates (numpy, libsndfile, ffmpeg) are imported where they are used: pytest loads
# this module for every run of every repository that installs the plugin.


def media_limits(settings: Settings | None) -> MediaLimits:
    """The limits on decoding work: the session's settings, or (without a session, as under
    ``verify``) the defaults and the environment, read now."""
    from ..media import MediaLimits

    return MediaLimits.from_settings(settings) if settings else MediaLimits.from_env()


class BuiltinKind:
    """One built-in kind as a plugin: its detection, fingerprint, default gate and comparers.

    A subclass names its kind, its default gate, the gates that apply to it, its fingerprint
    function (in :mod:`~pytest_lossless.media`) and exact comparer (in
    :mod:`~pytest_lossless.gates`), and implements :meth:`detect`. Functions are named, not
    imported, so that defining the kinds loads no numpy. The hook implementations answer only
    for the subclass's kind and return None for any other, as a user's kind does.
    """

    name: ClassVar[str]
    default_gate: ClassVar[str]
    #: The gates that mean something for this kind (others are refused with a hint).
    gates: ClassVar[tuple[str, ...]]
    #: For a refused gate: which gate does what it was asked for.
    hints: ClassVar[dict[str, str]] = {}
    #: ``media.<fingerprinter>(path)`` fingerprints a file of this kind.
    fingerprinter: ClassVar[str]
    #: ``gates.<comparer>(gate, expected, obtained, kind, limits=...)`` is its exact gate.
    comparer: ClassVar[str] = ""

    def __init__(self, settings: Settings | None = None) -> None:
        #: The session's settings; the limits on decoding work come from them.
        self.settings = settings

    def limits(self) -> MediaLimits:
        """The limits every decode of this kind runs under (:mod:`~.media.limits`)."""
        return media_limits(self.settings)

    def detect(self, path: Path, head: bytes) -> bool:
        """Whether the file's content is of this kind (``head``: its first bytes)."""
        raise NotImplementedError

    def fingerprint(self, path: Path) -> dict[str, Any]:
        """Metadata and digests of the file; ArtifactError for a damaged one."""
        from .. import media

        result: dict[str, Any] = getattr(media, self.fingerprinter)(path, limits=self.limits())
        return result

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        """The kind's own exact gate (``decoded``, ``elementwise``)."""
        from .. import gates

        result: GateResult = getattr(gates, self.comparer)(
            gate, expected, obtained, self.name, limits=self.limits()
        )
        return result

    def check_gate(self, gate: Gate, artifact: str = "") -> None:
        """Refuse a gate that means nothing for this kind, naming the ones that do."""
        from ..gates import check_gate_applies

        check_gate_applies(self.name, gate, self.gates, artifact, self.hints.get(gate.name, ""))

    @hookimpl(trylast=True)
    def pytest_lossless_detect_kind(self, path: Path, head: bytes) -> str | None:
        return self.name if self.detect(Path(path), head) else None

    @hookimpl(trylast=True)
    def pytest_lossless_fingerprint(self, kind: str, path: Path) -> dict[str, Any] | None:
        return self.fingerprint(Path(path)) if kind == self.name else None

    @hookimpl(trylast=True)
    def pytest_lossless_default_gate(self, kind: str) -> str | None:
        return self.default_gate if kind == self.name else None

    @hookimpl(trylast=True)
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        if kind != self.name:
            return None
        from .. import gates

        self.check_gate(gate, expected.name)
        if gate.name == "bytes":
            return gates.compare_bytes(gate, expected, obtained, kind)
        if gate.name == "tolerance":
            return gates.compare_tolerance(gate, expected, obtained, kind, limits=self.limits())
        if gate.name == "ulp":
            return gates.compare_ulp(gate, expected, obtained, kind, limits=self.limits())
        return self.compare_exact(gate, expected, obtained)


class VideoKind(BuiltinKind):
    """A container with a video stream (mp4, mkv, mov, ...): frames and PCM decoded exactly."""

    name = "video"
    default_gate = "decoded"
    gates = ("bytes", "decoded", "tolerance")
    hints: ClassVar[dict[str, str]] = {
        "elementwise": "decoded frames are compared exactly by 'decoded'"
    }

    fingerprinter = "fingerprint_video"
    comparer = "compare_container"

    def detect(self, path: Path, head: bytes) -> bool:
        from .. import media

        return media.detect_kind(path, head, limits=self.limits()) == "video"


class AudioKind(BuiltinKind):
    """WAV, RF64, FLAC, or a container holding only audio: PCM samples compared bit for bit."""

    name = "audio"
    default_gate = "decoded"
    gates = ("bytes", "decoded", "tolerance")
    hints: ClassVar[dict[str, str]] = {
        "elementwise": "PCM samples are compared bit for bit by 'decoded'"
    }

    fingerprinter = "fingerprint_audio"
    comparer = "compare_audio_file"

    def detect(self, path: Path, head: bytes) -> bool:
        from .. import media

        # The header test is cheap; a container is probed only when no header says audio.
        return (
            media.is_audio_header(head)
            or media.detect_kind(path, head, limits=self.limits()) == "audio"
        )


class TensorKind(BuiltinKind):
    """``.npy`` and ``.npz``: dtype, shape and bits (NaN payloads and signed zeros count)."""

    name = "tensor"
    default_gate = "elementwise"
    gates = ("bytes", "elementwise", "tolerance", "ulp")
    hints: ClassVar[dict[str, str]] = {
        "decoded": "tensors are compared bit for bit by 'elementwise'"
    }

    fingerprinter = "fingerprint_tensor"
    comparer = "compare_tensor"

    def detect(self, path: Path, head: bytes) -> bool:
        from .. import media

        return media.is_tensor_file(path, head)


class BytesKind(BuiltinKind):
    """Any other file: identical bytes. Also answers the ``bytes`` gate for any kind whose
    fingerprint carries the file's size and SHA-256, so a user's kind gets it for free."""

    name = "bytes"
    default_gate = "bytes"
    gates = ("bytes",)

    fingerprinter = "fingerprint_bytes"

    def detect(self, path: Path, head: bytes) -> bool:
        return True

    @hookimpl(trylast=True)
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        from .. import gates

        if kind == self.name:
            self.check_gate(gate, expected.name)
            return gates.compare_bytes(gate, expected, obtained, kind)
        if gate.name == "bytes" and _has_file_digest(expected) and _has_file_digest(obtained):
            return gates.compare_bytes(gate, expected, obtained, kind)
        return None


def _has_file_digest(artifact: Artifact) -> bool:
    return "sha256" in artifact.fingerprint and "size" in artifact.fingerprint


#: The built-in kinds, in the order detection asks them (the cheap content tests first).
BUILTIN_KIND_NAMES = ("tensor", "video", "audio", "bytes")
_BUILTIN_CLASSES: dict[str, type[BuiltinKind]] = {
    cls.name: cls for cls in (TensorKind, VideoKind, AudioKind, BytesKind)
}


def builtin_kinds(settings: Settings | None = None) -> list[BuiltinKind]:
    """A fresh plugin object per built-in kind, in detection order, decoding within the limits
    of ``settings`` (without settings: the defaults and the environment, read at each call)."""
    return [_BUILTIN_CLASSES[name](settings) for name in BUILTIN_KIND_NAMES]


def register_builtin_kinds(manager: pluggy.PluginManager, settings: Settings | None = None) -> None:
    """Register every built-in kind on ``manager`` (pytest's, or a private one), once.

    All are ``trylast``, and pluggy calls ``trylast`` implementations in the order they were
    registered, so they are registered in detection order.
    """
    for kind in builtin_kinds(settings):
        name = f"lossless-kind-{kind.name}"
        if not manager.has_plugin(name):
            manager.register(kind, name)


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
    return manager


class KindRegistry:
    """Detects, fingerprints and compares artifacts through the ``pytest_lossless_*`` hooks.

    ``hook`` is pytest's ``config.hook`` (with the built-in kinds registered on its plugin
    manager); with ``hook=None`` a private :func:`plugin_manager` is built (``plugin_manager``),
    so domain code and unit tests work without pytest. ``settings`` gives the limits on decoding
    work (:func:`media_limits`) of the golden-derived check and of diagnostics.
    """

    def __init__(self, hook: Any = None, *, settings: Settings | None = None) -> None:
        self.settings = settings
        self.plugin_manager: pluggy.PluginManager | None = None
        if hook is None:
            self.plugin_manager = plugin_manager()
            hook = self.plugin_manager.hook
        self.hook = hook
        #: Called after every :meth:`compare` with ``(gate, expected, obtained, result)``; it may
        #: raise (the plugin's canary, :mod:`~.compare.canary`, raises CanaryError there).
        self.observers: list[Observer] = []
        #: The session's fingerprints by file identity: a file compared several times (a
        #: candidate against its control runs and a golden) is decoded once. Made on first use.
        self.fingerprints: FingerprintCache | None = None

    def detect(self, path: Path) -> str:
        """The kind of the artifact at ``path``, from its content."""
        from .. import media

        path = Path(path)
        head = media.read_head(path)
        kind = self.hook.pytest_lossless_detect_kind(path=path, head=head)
        return str(kind) if kind else "bytes"

    def fingerprint(self, kind: str, path: Path) -> dict[str, Any]:
        """The fingerprint of ``path`` as ``kind``; ArtifactError for a damaged file."""
        from .. import media

        path = Path(path)
        media.read_head(path, 1)  # a missing file is named as such, whatever the kind
        if self.fingerprints is None:
            from ..media.hashing import FingerprintCache

            self.fingerprints = FingerprintCache()
        result = self.fingerprints.fingerprint(
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

    def default_gate(self, kind: str) -> Gate:
        """The gate used when a test names none."""
        from ..gates import Gate, parse_gate

        spec = self.hook.pytest_lossless_default_gate(kind=kind)
        gate = parse_gate(spec) if spec is not None else None
        return gate if gate is not None else Gate("bytes")

    def artifact(
        self,
        name: str,
        path: Path,
        kind: str | None = None,
        *,
        golden: Mapping[str, Any] | None = None,
    ) -> Artifact:
        """Detect (unless ``kind`` is given) and fingerprint the file at ``path``.

        With ``golden``, the fingerprint of the golden it is compared with, a video or audio
        file is first checked from its headers against limits derived from that golden (it may
        not decode much more than the golden does: :meth:`~.media.MediaLimits.for_golden`), so
        that an obtained decode bomb is refused before it is decoded.
        """
        path = Path(path)
        if not path.exists():
            raise ArtifactError(path, f"artifact {name!r} does not exist (was it written?)")
        found = kind or self.detect(path)
        if golden is not None and found in ("video", "audio"):
            from .. import media

            media.check_declared(found, path, media_limits(self.settings).for_golden(golden))
        return Artifact(name=name, kind=found, fingerprint=self.fingerprint(found, path), path=path)

    def gate_for(self, gate: Gate | str | None, kind: str) -> Gate:
        """``gate`` parsed, or the default gate of ``kind`` when the test names none."""
        from ..gates import parse_gate

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

        When ``diagnostics_dir`` is given, both files are present and the gate fails, diff
        pictures (video) or listings (audio, tensors) are written there and named in the result.
        Each of :attr:`observers` is then told of the comparison.
        """
        parsed = self.gate_for(gate, expected.kind)
        result = self.compare_only(parsed, expected, obtained, diagnostics_dir)
        for observer in list(self.observers):
            observer(parsed, expected, obtained, result)
        return result

    def compare_only(
        self,
        gate: Gate | str | None,
        expected: Artifact,
        obtained: Artifact,
        diagnostics_dir: Path | None = None,
    ) -> GateResult:
        """:meth:`compare` without telling the observers (the canary judges its copies so)."""
        from .. import gates
        from ..gates import GateResult

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
        if (
            diagnostics_dir is not None
            and not result.passed
            and expected.kind in ("video", "audio", "tensor")
        ):
            missing = [
                side
                for side, art in (("expected", expected), ("obtained", obtained))
                if art.path is None
            ]
            if missing:
                result.notes.append(
                    f"no diff pictures or listings: the {' and '.join(missing)} side is kept as "
                    "digests only"
                )
            try:
                gates.write_diagnostics(
                    result,
                    expected,
                    obtained,
                    Path(diagnostics_dir),
                    limits=media_limits(self.settings),
                )
            except (LosslessError, OSError) as exc:
                result.notes.append(f"diagnostics could not be written: {exc}")
        return result
