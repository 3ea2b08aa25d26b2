"""Exceptions of pytest-lossless.

Each carries the offending object as typed attributes (like pluggy's
``PluginValidationError(plugin, message)``) and builds a message written for someone reading a
CI log: what happened, which file, what to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class LosslessError(Exception):
    """Base class: every error the plugin raises on purpose derives from it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(LosslessError):
    """A bad option, ini value, marker argument or environment variable.

    ``source`` names where the value came from (``--lossless-devices``,
    ``ini lossless_lock_timeout``, ``marker npu(devices=...)``).
    """

    def __init__(self, source: str, value: object, problem: str) -> None:
        self.source = source
        self.value = value
        self.problem = problem
        super().__init__(f"{source}={value!r}: {problem}")


class ArtifactError(LosslessError):
    """An artifact cannot be read: damaged, truncated, of an unknown layout."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class TruncatedArtifact(ArtifactError):
    """The file holds less data than its own header declares."""


class GoldenError(LosslessError):
    """Base for problems with the golden store, as opposed to a mismatch."""


class GoldenMissing(GoldenError):
    """No golden exists for an artifact; goldens are never written implicitly."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        super().__init__(f"no golden {name!r} in {folder}: run with --update-goldens to create it")


class GoldenIntegrityError(GoldenError):
    """A stored golden no longer matches its own manifest (edited, corrupted, lost)."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(
            f"golden integrity error: {path}: {problem}. The committed golden itself is "
            "damaged; restore it from version control or regenerate it with --update-goldens"
        )


class GateChanged(GoldenError):
    """The test asks for another gate than the one frozen in the golden's manifest, or (with
    ``subject``, e.g. ``speed_gate '5s'``) another plan than the one frozen in ``file``, the
    test's ``plan.json``; ``frozen`` and ``requested`` then name the fields that differ."""

    def __init__(
        self,
        folder: Path,
        name: str,
        frozen: str,
        requested: str,
        *,
        subject: str | None = None,
        file: Path | None = None,
    ) -> None:
        self.folder = folder
        self.name = name
        self.frozen = frozen
        self.requested = requested
        self.subject = subject
        self.file = file
        if subject is not None:
            super().__init__(
                f"plan changed for {subject} in {file or folder}: --update-goldens froze "
                f"{frozen} but this run asks for {requested} (in the test code, or for pairs "
                "the --lossless-speed-pairs default). Gates and targets are frozen with the "
                "goldens: run with --update-goldens --lossless to change them deliberately"
            )
            return
        super().__init__(
            f"gate changed for golden {name!r} in {folder}: the manifest froze gate "
            f"{frozen!r} but the test asks for {requested!r}. Gates are frozen with their "
            "goldens: run with --update-goldens to change it deliberately"
        )


class ManifestError(GoldenError):
    """``manifest.json`` cannot be read or has an unknown schema."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class NondeterministicProducer(GoldenError):
    """Under --update-goldens, repeated runs of a producer disagreed: nothing is written."""


class AllocationError(LosslessError):
    """A device allocation cannot be granted (too many asked, unknown device, busy).

    Each attribute is set where it explains the refusal: the ``device`` named in the pool, the
    ``count`` asked against the ``pool``, the foreign ``processes`` found on the devices, the
    ``lock_dir`` that could not be used.
    """

    def __init__(
        self,
        message: str,
        *,
        device: str | None = None,
        count: int | None = None,
        pool: str | None = None,
        processes: Sequence[Mapping[str, Any]] = (),
        lock_dir: str | None = None,
    ) -> None:
        super().__init__(message)
        self.device = device
        self.count = count
        self.pool = pool
        self.processes = list(processes)
        self.lock_dir = lock_dir


class AllocationTimeout(AllocationError):
    """The lock timeout passed while other holders kept the devices (``holders``: who, as the
    wait line names them)."""

    def __init__(self, message: str, *, holders: str = "") -> None:
        super().__init__(message)
        self.holders = holders


class RunError(LosslessError):
    """A model run or server failed: non-zero exit, timeout, missing output, early death.

    ``record`` is the run's raw lifecycle record, as the receipt holds it; ``argv`` the command.
    """

    def __init__(
        self,
        message: str,
        *,
        record: Mapping[str, Any] | None = None,
        argv: Sequence[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.record = record
        self.argv = None if argv is None else list(argv)


class ReceiptError(LosslessError):
    """A receipt cannot be read, or contradicts itself under ``verify`` (``path``: its file)."""

    def __init__(self, message: str, *, path: Path | str | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)


class Inconclusive(LosslessError):
    """A verdict of INCONCLUSIVE inside a test: reported as its own outcome, never a pass."""


class CanaryError(LosslessError):
    """A gate that cannot fail: the built-in canary changed one unit of a copy of a real
    artifact and the comparator still said PASS, or did not name that unit.

    ``kind`` and ``gate`` name the comparator, ``artifact`` the artifact the copy was made of,
    ``unit`` what was changed, ``verdict`` what the comparator said of the copy.
    """

    def __init__(
        self, message: str, *, kind: str, gate: str, artifact: str, unit: str, verdict: str
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.gate = gate
        self.artifact = artifact
        self.unit = unit
        self.verdict = verdict
