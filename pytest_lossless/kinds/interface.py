"""The one interface a kind of artifact implements: :class:`Kind`.

A kind is one plugin object that answers our ``pytest_lossless_*`` kind hooks for its own name
and returns None for any other: detection, fingerprint, default gate, comparison, the canary's
perturbation and the pictures of a mismatch. The built-in kinds (``video``, ``audio``,
``tensor``, ``image``, ``bytes``, one module each in this package) are subclasses of
:class:`BuiltinKind`, which only marks the same hook implementations ``trylast`` so that any
plugin or conftest answers first. A user's kind is a subclass of :class:`Kind` in a module of
its own, returned by that module's ``pytest_lossless_kinds`` hook; a kind written as plain
module-level hook functions (the README's older form) keeps working unchanged.

Standard library only: pytest loads this module for every run of every repository that
installs the plugin; numpy, media and the comparers load where a kind uses them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..hookspecs import hookimpl

if TYPE_CHECKING:
    from ..core.artifact import Artifact
    from ..core.records import JsonObject
    from ..gates import Gate, GateResult
    from ..media import MediaLimits
    from ..settings import Settings

__all__ = ["BuiltinKind", "Kind", "media_limits"]


def media_limits(settings: Settings | None) -> MediaLimits:
    """The limits on decoding work: the session's settings, or (without a session, as under
    ``verify``) the defaults and the environment, read now."""
    from ..media.limits import MediaLimits

    return MediaLimits.from_settings(settings) if settings else MediaLimits.from_env()


class Kind:
    """One kind of artifact, behind our hooks.

    A subclass sets :attr:`name` and implements :meth:`detect`, :meth:`fingerprint` and, unless
    its only gate is ``bytes``, :meth:`compare`. :meth:`perturb` (the canary: one unit changed
    in a copy, so that the gate must fail there) and :meth:`pictures` (what a person looks at
    when the gate fails) are optional: without them the canary flips one byte of the file, and
    a mismatch has no pictures.
    """

    name: ClassVar[str]
    default_gate: ClassVar[str] = "bytes"
    #: The gates that mean something for this kind (others are refused with a hint).
    gates: ClassVar[tuple[str, ...]] = ("bytes",)
    #: For a refused gate: which gate does what it was asked for.
    hints: ClassVar[dict[str, str]] = {}
    #: What every file of this kind has at its start, as ``(offset, bytes)`` pairs, unless it
    #: is named with one of :attr:`suffixes`: a file with neither is never of this kind, so
    #: detection does not ask :meth:`detect` (no probe, no read). None: always ask.
    signatures: ClassVar[tuple[tuple[int, bytes], ...] | None] = None
    suffixes: ClassVar[frozenset[str]] = frozenset()
    #: Signatures (as :attr:`signatures`) of files whose kind :meth:`BuiltinKind.
    #: fingerprint_within` decides itself, refusing one of another kind as detection would:
    #: detection of such a file, expected to be of this kind, leaves the question to it
    #: instead of a probe of its own.
    decided_by_fingerprint: ClassVar[tuple[tuple[int, bytes], ...]] = ()

    def __init__(
        self, settings: Settings | None = None, *, limits: MediaLimits | None = None
    ) -> None:
        #: The session's settings; the limits on decoding work come from them.
        self.settings = settings
        #: Limits given outright (a fingerprint made outside a session), over the settings'.
        self.given_limits = limits

    # ---------------------------------------------------------------- what a kind implements

    def detect(self, path: Path, head: bytes) -> bool:
        """Whether the file's content is of this kind (``head``: its first 4 KiB)."""
        raise NotImplementedError

    def fingerprint(self, path: Path) -> JsonObject:
        """Metadata and digests of the file (JSON-able); ArtifactError for a damaged one. With
        ``size`` and ``sha256`` in it, the ``bytes`` gate works for this kind for free."""
        raise NotImplementedError

    def compare(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        """The comparison under ``gate`` (one of :attr:`gates`, already checked)."""
        from .bytes import compare_bytes

        return compare_bytes(gate, expected, obtained, self.name)

    def perturb(self, gate: Gate, path: Path, out: Path) -> str | None:
        """The canary's change: write to ``out`` a copy of ``path`` with one unit changed so
        that ``gate`` must fail, and say which (``"row 2"``); None flips one byte instead."""
        return None

    def pictures(
        self, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str] | None:
        """Files a person looks at for a failed comparison (PNG pictures are shown in the
        report, text listings linked), written into ``folder``; their paths (None: this kind
        has no pictures)."""
        return None

    # ---------------------------------------------------------------- shared

    def limits(self) -> MediaLimits:
        """The limits every decode of this kind runs under (:mod:`~.media.limits`)."""
        return self.given_limits or media_limits(self.settings)

    def check_gate(self, gate: Gate, artifact: str = "") -> None:
        """Refuse a gate that means nothing for this kind, naming the ones that do."""
        from ..gates.gate import check_gate_applies

        check_gate_applies(self.name, gate, self.gates, artifact, self.hints.get(gate.name, ""))

    # ---------------------------------------------------------------- the hooks

    @hookimpl
    def pytest_lossless_detect_kind(self, path: Path, head: bytes) -> str | None:
        return self.name if self.detect(Path(path), head) else None

    @hookimpl
    def pytest_lossless_fingerprint(self, kind: str, path: Path) -> JsonObject | None:
        return self.fingerprint(Path(path)) if kind == self.name else None

    @hookimpl
    def pytest_lossless_default_gate(self, kind: str) -> str | None:
        return self.default_gate if kind == self.name else None

    @hookimpl
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        if kind != self.name:
            return None
        self.check_gate(gate, expected.name)
        return self.compare(gate, expected, obtained)

    @hookimpl
    def pytest_lossless_perturb(self, kind: str, gate: Gate, path: Path, out: Path) -> str | None:
        return self.perturb(gate, Path(path), Path(out)) if kind == self.name else None

    @hookimpl
    def pytest_lossless_pictures(
        self, kind: str, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str] | None:
        return (
            self.pictures(result, expected, obtained, Path(folder)) if kind == self.name else None
        )


class BuiltinKind(Kind):
    """A kind that ships with the plugin: the same hooks, ``trylast``, so that any plugin or
    conftest answers first; and the canary's own :meth:`plan` (a built-in kind is never
    perturbed by a hook, or a hook could make its canary "prove" with a copy of its choice)."""

    def compare(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        """``bytes`` and ``ulp`` are the gates' own; ``tolerance`` is the kind's
        :meth:`compare_tolerance` and the rest its :meth:`compare_exact`."""
        if gate.name == "bytes":
            from .bytes import compare_bytes

            return compare_bytes(gate, expected, obtained, self.name)
        if gate.name == "tolerance":
            return self.compare_tolerance(gate, expected, obtained)
        if gate.name == "ulp":
            from ..gates.ulps import compare_ulp

            return compare_ulp(gate, expected, obtained, self.name, limits=self.limits())
        return self.compare_exact(gate, expected, obtained)

    def compare_exact(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        """The kind's own exact gate (``decoded``, ``elementwise``)."""
        raise NotImplementedError

    def compare_tolerance(self, gate: Gate, expected: Artifact, obtained: Artifact) -> GateResult:
        """The kind's side of the lossy gate ``tolerance`` (built on :mod:`~..gates.lossy`)."""
        raise NotImplementedError

    def fingerprint_within(self, path: Path, limits: MediaLimits) -> JsonObject:
        """The fingerprint of an obtained file whose every decode stays within ``limits``
        (derived from its golden): its declared sizes are checked first, when the kind has a
        ``check_declared``. A kind that checks them while it decodes does it in one pass."""
        check = getattr(self, "check_declared", None)
        if check is not None:
            check(path, limits)
        return self.fingerprint(path)

    def emptiness(self, artifact: Artifact) -> str | None:
        """What ``artifact`` lacks when it holds nothing of its kind's content (a video none of
        whose frames decodes, audio with no sample, a tensor with no element), in a few words;
        None when it holds something. ``--update-goldens`` refuses such an output as the golden
        unless ``allow_empty=True``: a golden of nothing would let every later output that lost
        everything PASS."""
        return None

    def plan(self, gate: Gate, artifact: Artifact, folder: Path) -> Any:
        """The canary's perturbed copy (a :class:`~.canary.Plan`) of ``artifact`` under a gate
        other than ``bytes``."""
        from .canary import Unavailable

        raise Unavailable(f"no perturbation of {self.name} artifacts under {gate.spec}")

    @hookimpl(trylast=True)
    def pytest_lossless_detect_kind(self, path: Path, head: bytes) -> str | None:
        return super().pytest_lossless_detect_kind(path, head)

    @hookimpl(trylast=True)
    def pytest_lossless_fingerprint(self, kind: str, path: Path) -> JsonObject | None:
        return super().pytest_lossless_fingerprint(kind, path)

    @hookimpl(trylast=True)
    def pytest_lossless_default_gate(self, kind: str) -> str | None:
        return super().pytest_lossless_default_gate(kind)

    @hookimpl(trylast=True)
    def pytest_lossless_compare(
        self, kind: str, gate: Gate, expected: Artifact, obtained: Artifact
    ) -> GateResult | None:
        return super().pytest_lossless_compare(kind, gate, expected, obtained)

    @hookimpl(trylast=True)
    def pytest_lossless_perturb(self, kind: str, gate: Gate, path: Path, out: Path) -> str | None:
        return None  # the canary asks a built-in kind's own plan(), never a hook

    @hookimpl(trylast=True)
    def pytest_lossless_pictures(
        self, kind: str, result: GateResult, expected: Artifact, obtained: Artifact, folder: Path
    ) -> list[str] | None:
        return super().pytest_lossless_pictures(kind, result, expected, obtained, folder)
