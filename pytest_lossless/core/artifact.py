"""The value type every stage hands on: one artifact, its kind, fingerprint and file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .records import JsonObject


@dataclass(frozen=True)
class Artifact:
    """One artifact: its name in the test, kind, fingerprint, and file.

    ``path`` is None for a digest-only golden: only the fingerprint is available.
    """

    name: str
    kind: str
    fingerprint: JsonObject
    path: Path | None = None
