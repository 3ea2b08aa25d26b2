"""An artifact and its file: the value type every stage hands on (:class:`Artifact`: its name
in the test, kind, fingerprint and file), what a test hands over (paths, arrays, bytes,
producers, run results) turned into files (:func:`materialize`), and the head of an artifact
file (:func:`read_head`: what detection and every reader looks at).

Every comparison works on files, so in-memory artifacts are written once, exactly:
arrays with ``np.save(allow_pickle=False)``, bytes as they are. numpy is imported only inside
:func:`materialize`, for a value that is not a path: importing this module loads none of it, so
the hook specifications and the gate can speak of :class:`Artifact`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ArtifactError
from . import faults
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


#: Bytes read at the start of a file for content detection.
HEAD_BYTES = 4096


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of ``path``; ArtifactError naming the file if it is unreadable
    or not a regular file. A link is followed (links inside a goldens folder are allowed), but
    what it leads to must be a regular file: a FIFO would block the open (and every reader
    after it) until a writer comes, ``/dev/zero`` would be hashed forever (#20). Opened
    without blocking and checked on the descriptor, so nothing waits on a special file."""
    import stat

    from .paths import file_kind

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as fh:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
                raise ArtifactError(
                    path,
                    f"is not a regular file ({file_kind(mode)}): an artifact is read only from "
                    "a regular file, so that reading it ends (a FIFO waits for a writer, a "
                    "device never ends)",
                )
            return fh.read(size)
    except FileNotFoundError:
        raise ArtifactError(path, "the artifact does not exist (was it written?)") from None
    except IsADirectoryError:
        raise ArtifactError(path, "is a folder, not an artifact file") from None
    except OSError as exc:
        raise ArtifactError(path, f"cannot be read: {exc.strerror or exc}") from None


def materialize(value: Any, name: str, folder: Path) -> Path:
    """A file holding ``value``: a path is checked and returned, arrays and bytes are written."""
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        if not path.exists():
            raise ArtifactError(path, f"artifact {name!r} does not exist")
        if not path.is_file():
            raise ArtifactError(path, f"artifact {name!r} is not a regular file")
        return path
    folder.mkdir(parents=True, exist_ok=True)
    import numpy as np  # only for what is not a path: detection reads heads without it

    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise ArtifactError(name, "object arrays cannot be compared bit for bit (no pickle)")
        target = folder / (name if name.endswith(".npy") else f"{name}.npy")
        try:
            faults.write("write-obtained", target)
            with open(target, "wb") as handle:
                np.save(handle, array, allow_pickle=False)
        except OSError as exc:  # a full disk: named, not a traceback
            raise ArtifactError(target, faults.write_failed(exc, target)) from None
        return target
    if isinstance(value, (bytes, bytearray, memoryview)):
        target = folder / name
        try:
            faults.write("write-obtained", target)
            target.write_bytes(bytes(value))
        except OSError as exc:
            raise ArtifactError(target, faults.write_failed(exc, target)) from None
        return target
    raise ArtifactError(
        name,
        f"cannot use a {type(value).__name__} as an artifact: give a path, a numpy array, "
        "bytes, or a zero-argument callable returning one of those",
    )


def is_producer(value: Any) -> bool:
    """A producer is a zero-argument callable that performs a run; data never is one."""
    return callable(value) and not isinstance(value, (bytes, str, os.PathLike))  # arrays are not


def produce(value: Any) -> Any:
    """Call a producer; anything else is returned as is."""
    return value() if is_producer(value) else value


def named_artifacts(result: Any, what: str) -> dict[str, Any]:
    """The ``{name: artifact}`` mapping of one run: a mapping, or a run result's ``outputs``."""
    outputs = getattr(result, "outputs", None)
    if isinstance(outputs, Mapping):
        result = outputs
    if isinstance(result, Mapping):
        return {str(k): v for k, v in result.items()}
    raise ArtifactError(
        what,
        f"returned a {type(result).__name__}; a run must return a model_run result or a "
        "mapping {name: path | array | bytes}",
    )


def materialize_all(result: Any, what: str, folder: Path) -> dict[str, Path]:
    """Every artifact of one run's result, as files under ``folder``."""
    artifacts = named_artifacts(result, what)
    return {name: materialize(value, name, folder) for name, value in artifacts.items()}


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    """What changes when a file is rewritten or replaced: device, inode, size, mtime (ns)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class KeptFiles:
    """Each run's artifact files as they were when fingerprinted, so that a comparison made
    after later runs never reads a file one of them rewrote with other data (producers that
    return one fixed path on every run): :meth:`check` before comparing."""

    noted: list[tuple[str, Artifact, tuple[int, int, int, int] | None]] = field(
        default_factory=list
    )

    def note(self, run: str, artifacts: Mapping[str, Artifact]) -> None:
        """The fingerprinted files of ``run``, right after it ended."""
        self.noted += [
            (run, a, _identity(a.path)) for a in artifacts.values() if a.path is not None
        ]

    def check(self, fingerprint: Callable[[str, Path], dict[str, Any]]) -> None:
        """ArtifactError naming the first file that was rewritten, after its run ended, with
        data whose ``fingerprint`` is not the one recorded for that run."""
        for run, artifact, identity in self.noted:
            path = artifact.path
            if path is None or _identity(path) == identity:
                continue
            if _identity(path) is None or fingerprint(artifact.name, path) != artifact.fingerprint:
                raise ArtifactError(
                    path,
                    f"artifact {artifact.name!r} of {run} changed after that run ended (a later "
                    "run wrote the same file?), so it cannot be compared: every run must keep "
                    "its own outputs. Write each run into a folder of its own (model_run's "
                    "{out}), or return the data itself (an array, bytes)",
                )
