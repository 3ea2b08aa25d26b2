"""Artifact kinds: detection, fingerprint, default gate and comparison, through our hooks.

The built-in kinds (video, audio, tensor, bytes) are one plugin object, :data:`BUILTIN_KINDS`,
whose ``trylast`` implementations of the ``pytest_lossless_*`` hooks answer last, so a plugin or
conftest that implements a hook for its own kind takes precedence. :class:`KindRegistry` is the
one entry point the plugin and the golden store use; it works with pytest's ``config.hook`` or,
without pytest, with a private plugin manager.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .errors import ArtifactError, LosslessError
from .hookspecs import hookimpl

if TYPE_CHECKING:
    from .gates import Gate, GateResult

# media and gates (numpy, libsndfile, ffmpeg) are imported where they are used: pytest loads
# this module for every run of every repository that installs the plugin.

_DEFAULT_GATES = {"video": "decoded", "audio": "decoded", "tensor": "elementwise", "bytes": "bytes"}


@dataclass(frozen=True)
class Artifact:
    """One artifact: its name in the test, kind, fingerprint, and file.

    ``path`` is None for a digest-only golden: only the fingerprint is available.
    """

    name: str
    kind: str
    fingerprint: dict[str, Any]
    path: Path | None = None


class BuiltinKinds:
    """The built-in kinds as ``trylast`` hook implementations (registered like any plugin)."""

    @hookimpl(trylast=True)
    def pytest_lossless_detect_kind(self, path: Path, head: bytes) -> str | None:
        from . import media

        return media.detect_kind(Path(path), head)

    @hookimpl(trylast=True)
    def pytest_lossless_fingerprint(self, kind: str, path: Path) -> dict[str, Any] | None:
        from . import media

        if kind not in media.BUILTIN_KINDS:
            return None
        return media.fingerprint(kind, Path(path))

    @hookimpl(trylast=True)
    def pytest_lossless_default_gate(self, kind: str) -> str | None:
        return _DEFAULT_GATES.get(kind)

    @hookimpl(trylast=True)
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        from . import gates, media

        if kind in media.BUILTIN_KINDS:
            return gates.compare(kind, gate, expected, obtained)
        if gate.name == "bytes" and _has_file_digest(expected) and _has_file_digest(obtained):
            # Identical bytes mean the same thing for any kind, so custom kinds get it for free.
            return gates.compare_bytes(gate, expected, obtained, kind)
        return None


def _has_file_digest(artifact: Artifact) -> bool:
    return "sha256" in artifact.fingerprint and "size" in artifact.fingerprint


#: The plugin object to register on a plugin manager (pytest's, or a private one).
BUILTIN_KINDS = BuiltinKinds()


def new_plugin_manager() -> pluggy.PluginManager:
    """A private plugin manager with our hookspecs and the built-in kinds (no pytest needed)."""
    pm = pluggy.PluginManager("pytest")
    pm.add_hookspecs(hookspecs)
    pm.register(BuiltinKinds(), name="lossless-builtin-kinds")
    return pm


class KindRegistry:
    """Detects, fingerprints and compares artifacts through the ``pytest_lossless_*`` hooks.

    ``hook`` is pytest's ``config.hook`` (with :data:`BUILTIN_KINDS` registered on its plugin
    manager); with ``hook=None`` a private plugin manager is built (``plugin_manager``), so
    domain code and unit tests work without pytest.
    """

    def __init__(self, hook: Any = None) -> None:
        self.plugin_manager: pluggy.PluginManager | None = None
        if hook is None:
            self.plugin_manager = new_plugin_manager()
            hook = self.plugin_manager.hook
        self.hook = hook
        # If the built-ins are not registered where ``hook`` comes from, they still answer last.
        self._fallback = BuiltinKinds()

    def detect(self, path: Path) -> str:
        """The kind of the artifact at ``path``, from its content."""
        from . import media

        path = Path(path)
        head = media.read_head(path)
        kind = self.hook.pytest_lossless_detect_kind(path=path, head=head)
        if kind is None:
            kind = self._fallback.pytest_lossless_detect_kind(path, head)
        return str(kind) if kind else "bytes"

    def fingerprint(self, kind: str, path: Path) -> dict[str, Any]:
        """The fingerprint of ``path`` as ``kind``; ArtifactError for a damaged file."""
        from . import media

        path = Path(path)
        media.read_head(path, 1)
        result = self.hook.pytest_lossless_fingerprint(kind=kind, path=path)
        if result is None:
            result = self._fallback.pytest_lossless_fingerprint(kind, path)
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
        from .gates import Gate, parse_gate

        spec = self.hook.pytest_lossless_default_gate(kind=kind)
        if spec is None:
            spec = self._fallback.pytest_lossless_default_gate(kind)
        gate = parse_gate(spec) if spec is not None else None
        return gate if gate is not None else Gate("bytes")

    def artifact(self, name: str, path: Path, kind: str | None = None) -> Artifact:
        """Detect (unless ``kind`` is given) and fingerprint the file at ``path``."""
        path = Path(path)
        if not path.exists():
            raise ArtifactError(path, f"artifact {name!r} does not exist (was it written?)")
        found = kind or self.detect(path)
        return Artifact(name=name, kind=found, fingerprint=self.fingerprint(found, path), path=path)

    def compare(
        self,
        gate: Gate | str,
        expected: Artifact,
        obtained: Artifact,
        diagnostics_dir: Path | None = None,
    ) -> GateResult:
        """Compare ``obtained`` with ``expected`` under ``gate``.

        When ``diagnostics_dir`` is given, both files are present and the gate fails, diff
        pictures (video) or listings (audio, tensors) are written there and named in the result.
        """
        from . import gates
        from .gates import GateResult, parse_gate

        parsed = parse_gate(gate)
        if parsed is None:
            parsed = self.default_gate(expected.kind)
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
            result = self._fallback.pytest_lossless_compare(
                expected.kind, parsed, expected, obtained
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
                gates.write_diagnostics(result, expected, obtained, Path(diagnostics_dir))
            except (LosslessError, OSError) as exc:
                result.notes.append(f"diagnostics could not be written: {exc}")
        return result
