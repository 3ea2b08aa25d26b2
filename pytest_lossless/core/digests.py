"""SHA-256 of files and JSON values, atomic writes, safe file names, bounded JSON parsing:
defined once, used by all."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

CHUNK = 1 << 20
#: How deep a JSON document the plugin reads (a manifest, a receipt) may nest. Ours nest about
#: a dozen levels; a hostile one of 100,000 would otherwise end in a RecursionError.
MAX_JSON_DEPTH = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def sha256_file(path: Path | str, chunk: int = CHUNK) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """A JSON value in canonical form (sorted keys, no spaces, ASCII); other values as str."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def canonical_sha256(value: Any) -> str:
    """Hex SHA-256 of a JSON value in canonical form."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def safe_name(text: str, *, default: str = "_", max_length: int = 150) -> str:
    """A file name for ``text``: letters, digits, ``.``, ``_`` and ``-`` only, never hidden.

    Runs of other characters become one ``_``; a name longer than ``max_length`` keeps its
    start and gains a hash of the whole text, so distinct texts keep distinct names.
    """
    stem = _UNSAFE.sub("_", text).strip("._") or default
    if len(stem) > max_length:
        stem = f"{stem[: max_length - 20]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return stem


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, rename it into place.

    A reader sees the old file or the whole new one, never half of it; a failure leaves no
    temporary file behind. The file is private (0600, as the temporary file is made) unless
    ``mode`` says otherwise (0644 for what is committed beside the goldens).
    """
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed before the rename
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    )
    try:
        with handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)  # replaces a link or FIFO at ``path``, never follows it
    except OSError as exc:
        Path(handle.name).unlink(missing_ok=True)
        if exc.filename is None:  # a write's error names no file: name the one meant
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_new(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Create ``path`` (never an existing file, never through a link) with ``data``, flushed to
    disk: a file of a folder being staged, which is renamed into place whole afterwards."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        if exc.filename is None:  # a write's error names no file: name the one meant
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    finally:
        os.close(fd)


def fsync_file(path: Path | str) -> None:
    """Flush a file just written (a copy) to disk before it is renamed or swapped into place."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (best effort: some file systems refuse)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(
    path: Path, value: Any, *, indent: int | None = 2, default: Any = None
) -> None:
    """:func:`write_atomic` of ``value`` as JSON with sorted keys and a final newline."""
    text = json.dumps(value, indent=indent, sort_keys=True, default=default)
    write_atomic(path, (text + "\n").encode("utf-8"))


def loads_bounded(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` of UTF-8 ``data`` that nests at most ``max_depth`` levels.

    ``ValueError`` (a ``JSONDecodeError``, a ``UnicodeDecodeError``, or one naming the depth
    limit) for anything else: never a ``RecursionError``, whatever the document holds.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than the limit of {max_depth} levels") from None
    if json_depth(value, stop_above=max_depth) > max_depth:
        raise ValueError(f"nested deeper than the limit of {max_depth} levels")
    return value


def json_depth(value: Any, *, stop_above: int | None = None) -> int:
    """How many levels of lists and objects ``value`` nests (a scalar is 0), without recursion;
    counting stops once it passes ``stop_above``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if stop_above is not None and deepest > stop_above:
            break
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest
