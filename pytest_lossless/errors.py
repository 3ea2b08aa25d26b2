"""Exceptions of pytest-lossless.

Each carries the offending object as structured fields and builds a message
written for someone reading a CI log: what happened, which file, what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class LosslessError(Exception):
    """Base class: every error the plugin raises on purpose derives from it."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

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
        super().__init__(f"{source}={value!r}: {problem}", source=source, value=value)


class ArtifactError(LosslessError):
    """An artifact cannot be read: damaged, truncated, of an unknown layout."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        super().__init__(f"{self.path}: {problem}", path=str(path))


class TruncatedArtifact(ArtifactError):
    """The file holds less data than its own header declares."""


class GoldenError(LosslessError):
    """Base for problems with the golden store, as opposed to a mismatch."""


class GoldenMissing(GoldenError):
    """No golden exists for an artifact; goldens are never written implicitly."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        super().__init__(
            f"no golden {name!r} in {folder}: run with --update-goldens to create it",
            folder=str(folder),
            name=name,
        )


class GoldenIntegrityError(GoldenError):
    """A stored golden no longer matches its own manifest (edited, corrupted, lost)."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        super().__init__(
            f"golden integrity error: {path}: {problem}. The committed golden itself is "
            "damaged; restore it from version control or regenerate it with --update-goldens",
            path=str(path),
        )


class GateChanged(GoldenError):
    """The test asks for another gate than the one frozen in the golden's manifest."""

    def __init__(self, folder: Path, name: str, frozen: str, requested: str) -> None:
        self.frozen = frozen
        self.requested = requested
        super().__init__(
            f"gate changed for golden {name!r} in {folder}: the manifest froze gate "
            f"{frozen!r} but the test asks for {requested!r}. Gates are frozen with their "
            "goldens: run with --update-goldens to change it deliberately",
            folder=str(folder),
            name=name,
        )


class ManifestError(GoldenError):
    """``manifest.json`` cannot be read or has an unknown schema."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}", path=str(path))


class NondeterministicProducer(GoldenError):
    """Under --update-goldens, repeated runs of a producer disagreed: nothing is written."""


class AllocationError(LosslessError):
    """A device allocation cannot be granted (too many asked, unknown device, busy)."""


class AllocationTimeout(AllocationError):
    """The lock timeout passed while other holders kept the devices."""


class RunError(LosslessError):
    """A model run or server failed: non-zero exit, timeout, missing output, early death."""


class ReceiptError(LosslessError):
    """A receipt cannot be read, or contradicts itself under ``verify``."""


class Inconclusive(LosslessError):
    """A verdict of INCONCLUSIVE inside a test: reported as its own outcome, never a pass."""
