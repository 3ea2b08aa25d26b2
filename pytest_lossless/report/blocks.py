"""What a section of the report is made of, and the folder its pictures and copies go into.

A :class:`Detail` is a list of :data:`Block`\\ s (text, preformatted text, tables, pictures,
diagnostic files) that :mod:`.html` renders; :class:`Assets` writes pictures and copies files
into the report folder being built, under names of its own (never a name from a receipt).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ..core.paths import read_regular, safe_name
from ..core.records import JsonObject
from .raster import encode_png
from .table import Row

#: Largest diagnostic file copied into the report, and the most copied in all.
COPY_LIMIT = 32 << 20
COPY_TOTAL = 256 << 20
#: Diagnostic files copied (pictures and listings); others (an obtained clip) are only named.
COPIED_SUFFIXES = (".png", ".txt")


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Pre:
    """Preformatted text of several lines (a gate's message as the test printed it)."""

    text: str


@dataclass(frozen=True)
class Table:
    head: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]


@dataclass(frozen=True)
class Figure:
    """A picture in the report folder: ``src`` is relative to ``index.html``."""

    src: str
    caption: str
    width: int
    height: int


@dataclass(frozen=True)
class Files:
    """Diagnostic files: ``(name, src or None, note)``; src is relative, None when not copied."""

    entries: list[tuple[str, str | None, str]]


@dataclass(frozen=True)
class Svg:
    """A chart drawn inline: ``markup`` is an ``<svg>`` element built from numbers, its text
    already escaped (:func:`.details.growth_svg`); ``kind`` is its CSS class."""

    markup: str
    caption: str
    kind: str = "chart"


Block = Text | Pre | Table | Figure | Files | Svg


@dataclass
class Detail:
    """Everything shown under one row of the table."""

    anchor: str
    row: Row
    blocks: list[Block] = field(default_factory=list)


@dataclass(frozen=True)
class Side:
    """One side of a comparison: its label (``golden``, ``control#1``), its file (None when it
    is not at hand, with why), and its fingerprint."""

    label: str
    path: Path | None
    fingerprint: JsonObject
    missing: str = ""


class Assets:
    """Pictures and copied files, written under the report folder being built."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._count = 0
        self._copied = 0

    def _name(self, sub: str, stem: str, suffix: str) -> Path:
        self._count += 1
        target = self.folder / sub
        target.mkdir(exist_ok=True)
        name = safe_name(stem, default="file", max_length=80)
        return target / f"{self._count:03d}-{name}{suffix}"

    def picture(self, stem: str, pixels: npt.NDArray[np.uint8], caption: str) -> Figure:
        path = self._name("pictures", stem, ".png")
        _write_new(path, encode_png(pixels))
        return Figure(
            path.relative_to(self.folder).as_posix(),
            caption,
            int(pixels.shape[1]),
            int(pixels.shape[0]),
        )

    def copy(self, source: str) -> tuple[str, str | None, str]:
        """A diagnostic file copied in (never through a link, bounded in size), or why not."""
        name = os.path.basename(source)
        if not source.lower().endswith(COPIED_SUFFIXES):
            kind = os.path.splitext(name)[1] or "a file without a suffix"
            return (
                name,
                None,
                f"not copied (only pictures and listings, {', '.join(COPIED_SUFFIXES)}, are "
                f"copied into the report; {kind} is left where the test wrote it): {source}",
            )
        try:
            data = read_regular(source, limit=max(0, min(COPY_LIMIT, COPY_TOTAL - self._copied)))
        except FileNotFoundError:
            return name, None, f"gone (pytest's temporary folder was removed): {source}"
        except OSError as exc:
            why = exc.strerror or str(exc)
            if self._copied >= COPY_TOTAL:
                why = f"the report already holds {COPY_TOTAL >> 20} MiB of copies"
            return name, None, f"not copied ({why}): {source}"
        self._copied += len(data)
        stem, suffix = os.path.splitext(name)
        path = self._name("files", stem, suffix.lower())
        _write_new(path, data)
        return name, path.relative_to(self.folder).as_posix(), ""


def _write_new(path: Path, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(path, flags, 0o644), "wb") as handle:
        handle.write(data)
