"""Named intermediate tensors, traced in call order, for finding where two runs first part.

A model under test calls::

    from pytest_lossless import trace

    with trace.stage("step 3"):
        trace.tensor("block.out", array)

When the environment variable ``PYTEST_LOSSLESS_TRACE_DIR`` is unset (the default) every call
returns at once and no file is opened: the model's outputs and its speed are those of an
untraced build. When it names a folder (``model_run(..., trace=True)`` and
``lossless.compare(..., trace=True)`` set it for each run), each tensor becomes one line of
``manifest.jsonl`` there (order, name, occurrence, stage, dtype, shape, SHA-256 of its raw
little-endian bytes) and, up to a size limit, its bytes in ``tensors.bin``; each stage adds a
line with its wall time. The format is in ``docs/trace.md``, so an engine in another language
can write it too; :mod:`pytest_lossless.compare.divergence` reads it.

This module imports the standard library only (numpy when the first tensor is recorded): a model
imports it without loading any of the plugin, and the launcher reads its constants for free.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

#: The folder a run traces into; unset or empty: tracing is off.
TRACE_DIR = "PYTEST_LOSSLESS_TRACE_DIR"
#: Tensors of more bytes than this keep only their digest (default :data:`DEFAULT_RAW_LIMIT`;
#: ``0``: digests only, the cheapest tracing).
RAW_LIMIT = "PYTEST_LOSSLESS_TRACE_RAW_BYTES"
DEFAULT_RAW_LIMIT = 8 << 20
FORMAT = "pytest-lossless-trace"
VERSION = 1
MANIFEST = "manifest.jsonl"
DATA = "tensors.bin"

__all__ = [
    "DATA",
    "DEFAULT_RAW_LIMIT",
    "FORMAT",
    "MANIFEST",
    "RAW_LIMIT",
    "TRACE_DIR",
    "VERSION",
    "Tracer",
    "enabled",
    "release",
    "stage",
    "tensor",
    "torch_hooks",
]


def enabled() -> bool:
    """Whether this process traces (``PYTEST_LOSSLESS_TRACE_DIR`` names a folder).

    Guard work done only for the trace (stacking chunks into one array) with it."""
    return bool(os.environ.get(TRACE_DIR))


def tensor(name: str, array: Any) -> None:
    """Record ``array`` (numpy, anything ``numpy.asarray`` takes, or a torch tensor on any
    device, bfloat16 included) under ``name``, after every tensor recorded before it.

    A name recorded again gets the next occurrence index (0, 1, ...); the stage open at the
    call (:func:`stage`) is recorded with it. Off: returns at once."""
    folder = os.environ.get(TRACE_DIR)
    if not folder:
        return
    _tracer(folder, os.getpid()).tensor(name, array)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as stage ``name`` (nested stages join with ``/``: ``denoise/step 3``);
    tensors recorded inside it carry the stage. Off: times nothing, writes nothing."""
    folder = os.environ.get(TRACE_DIR)
    if not folder:
        yield
        return
    tracer = _tracer(folder, os.getpid())
    path = tracer.enter(name)
    started = time.perf_counter()
    try:
        yield
    finally:
        tracer.leave(path, started, time.perf_counter())


@cache
def _tracer(folder: str, pid: int) -> Tracer:
    # One writer per folder and process, made on first use; keyed by pid too, so that a forked
    # child (whose copy of the writer thread does not run) gets a writer of its own.
    return Tracer(Path(folder), raw_limit=_raw_limit())


def release(folder: str | os.PathLike[str] | None = None) -> None:
    """Finish the trace in ``folder`` (every tensor written, files closed), then forget this
    process's writers: a test process that traced an in-process producer
    (``lossless.compare(trace=True)``) keeps no file open. Others finish at exit."""
    if folder is not None:
        _tracer(os.fspath(folder), os.getpid()).close()
    _tracer.cache_clear()


def _raw_limit() -> int:
    text = os.environ.get(RAW_LIMIT, "").strip()
    if not text:
        return DEFAULT_RAW_LIMIT
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"{RAW_LIMIT}={text!r} is not a whole number of bytes: use e.g. 0 (digests only) "
            f"or {DEFAULT_RAW_LIMIT}"
        ) from None
    if value < 0:
        raise ValueError(f"{RAW_LIMIT}={value} is negative: use 0 for digests only")
    return value


@dataclass(frozen=True, kw_only=True)
class _Header:
    """A manifest's first line: its format, and which data file its offsets point into."""

    format: str = FORMAT
    version: int = VERSION
    type: str = "header"
    pid: int
    raw_limit: int
    data: str


@dataclass(frozen=True, kw_only=True)
class _TensorLine:
    """One tensor, in call order (``sha256`` and ``offset`` are set by the writer thread)."""

    type: str = "tensor"
    order: int
    name: str
    occurrence: int
    stage: str
    dtype: str
    shape: list[int]
    nbytes: int
    sha256: str | None = None
    offset: int | None = None


@dataclass(frozen=True, kw_only=True)
class _StageLine:
    """One closed stage: its path, its start (from the tracer's start) and its wall time."""

    type: str = "stage"
    stage: str
    start: float
    seconds: float


class Tracer:
    """The writer of one trace folder: the manifest and the raw bytes, appended in call order.

    The first process to trace into a folder writes ``manifest.jsonl`` and ``tensors.bin``;
    another process tracing into the same folder (a server's second worker) writes
    ``manifest.<pid>.jsonl`` and ``tensors.<pid>.bin`` beside them, so no line is interleaved.
    The model's thread only copies each tensor (it may reuse its buffer); a writer thread
    hashes it (SHA-256 releases the GIL, so the digest overlaps the model's work) and appends
    the bytes and the line, in call order, each line flushed. The writer finishes at exit
    (:meth:`close`, registered with ``atexit``); a failure there (a full disk) is raised by the
    next call, or by :meth:`close`.
    """

    def __init__(self, folder: Path, *, raw_limit: int = DEFAULT_RAW_LIMIT) -> None:
        self.folder = folder
        self.raw_limit = int(raw_limit)
        self._lock = threading.Lock()
        self._order = 0
        self._offset = 0
        self._occurrences: dict[str, int] = {}
        self._stages: list[str] = []
        self._started = time.perf_counter()
        self._manifest: Any = None
        self._data: Any = None
        #: Work for the writer thread, in call order: (record, bytes or None), None to stop.
        self._queue: queue.Queue[tuple[_TensorLine | _StageLine, bytes | None] | None] = (
            queue.Queue(8)
        )
        self._worker: threading.Thread | None = None
        self._failure: BaseException | None = None

    def _open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        names = [(MANIFEST, DATA), (f"manifest.{os.getpid()}.jsonl", f"tensors.{os.getpid()}.bin")]
        for manifest, data in names:
            try:
                fd = os.open(self.folder / manifest, flags, 0o644)
            except FileExistsError:
                continue
            self._manifest = os.fdopen(fd, "w", encoding="utf-8")
            self._data = open(self.folder / data, "wb")  # noqa: SIM115 - lives with the tracer
            self._line(_Header(pid=os.getpid(), raw_limit=self.raw_limit, data=data))
            return
        raise FileExistsError(
            f"trace folder {self.folder} already holds a trace of this process "
            f"(manifest.{os.getpid()}.jsonl): give each run a folder of its own"
        )

    def _line(self, record: _Header | _TensorLine | _StageLine) -> None:
        self._manifest.write(json.dumps(asdict(record), separators=(",", ":")) + "\n")
        self._manifest.flush()

    def _submit(self, record: _TensorLine | _StageLine, data: bytes | None) -> None:
        """Hand one record to the writer thread (started on first use); under ``_lock``."""
        if self._failure is not None:
            raise self._failure
        if self._worker is None:
            self._worker = threading.Thread(
                target=self._write, name=f"trace-writer {self.folder}", daemon=True
            )
            self._worker.start()
            atexit.register(self.close)
        self._queue.put((record, data))

    def _write(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._failure is not None:
                continue  # drain: the failure is raised in the model's thread
            record, data = item
            try:
                if self._manifest is None:
                    self._open()
                if isinstance(record, _TensorLine) and data is not None:
                    record = replace(record, sha256=hashlib.sha256(data).hexdigest())
                    if len(data) <= self.raw_limit:
                        self._data.write(data)
                        self._data.flush()
                        record = replace(record, offset=self._offset)
                        self._offset += len(data)
                self._line(record)
            except BaseException as exc:  # raised in the model's thread, by the next call
                self._failure = exc

    def close(self) -> None:
        """Write everything recorded so far, stop the writer thread and close the files."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            self._queue.put(None)
            worker.join()
            atexit.unregister(self.close)
        for handle in (self._manifest, self._data):
            if handle is not None:
                handle.close()
        self._manifest = self._data = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def tensor(self, name: str, array: Any) -> None:
        """Append one tensor (see :func:`tensor`)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"trace.tensor: the name must be a non-empty string, not {name!r}")
        data, dtype, shape = raw_bytes(array)
        owned = bytes(data)  # the model may reuse its buffer before the writer hashes it
        with self._lock:
            occurrence = self._occurrences.get(name, 0)
            self._occurrences[name] = occurrence + 1
            record = _TensorLine(
                order=self._order,
                name=name,
                occurrence=occurrence,
                stage="/".join(self._stages),
                dtype=dtype,
                shape=list(shape),
                nbytes=len(owned),
            )
            self._order += 1
            self._submit(record, owned)

    def enter(self, name: str) -> str:
        """Open stage ``name``; its full path (``outer/inner``)."""
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(
                f"trace.stage: the name must be a non-empty string without '/', not {name!r}"
            )
        with self._lock:
            self._stages.append(name)
            return "/".join(self._stages)

    def leave(self, path: str, started: float, ended: float) -> None:
        """Close the innermost stage (opened as ``path``) and record its wall time."""
        with self._lock:
            if self._stages:
                self._stages.pop()
            start, seconds = round(started - self._started, 9), round(ended - started, 9)
            self._submit(_StageLine(stage=path, start=start, seconds=seconds), None)


def raw_bytes(array: Any) -> tuple[bytes | memoryview, str, tuple[int, ...]]:
    """A tensor's bytes (C order, little-endian), dtype name and shape: what a trace stores.

    torch tensors are read without importing torch here: moved to the host, bfloat16 by its
    16-bit words (dtype ``bfloat16``)."""
    import numpy as np

    if hasattr(array, "detach") and hasattr(array, "dtype") and not isinstance(array, np.ndarray):
        return _torch_bytes(array)
    a = np.asarray(array)
    dtype_name = a.dtype.name
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags.c_contiguous:
        a = a.copy(order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    return a.data.cast("B") if a.size else b"", dtype_name, tuple(a.shape)


def _torch_bytes(t: Any) -> tuple[bytes | memoryview, str, tuple[int, ...]]:
    import numpy as np

    torch: Any = sys.modules["torch"]  # a torch tensor was given: torch is loaded already

    host = t.detach().to("cpu").contiguous()
    name = str(host.dtype).removeprefix("torch.")
    if host.dtype == torch.bfloat16:
        words = host.view(torch.int16).numpy().view(np.uint16)
        data, _, shape = raw_bytes(words)
        return data, "bfloat16", shape
    data, dtype, shape = raw_bytes(host.numpy())
    return data, dtype if dtype else name, shape


def torch_hooks(model: Any, *, prefix: str = "") -> Any:
    """Record every module's forward output under its ``named_modules`` name (``prefix`` +
    name; the root module as ``prefix`` or ``model``), float16 and bfloat16 included.

    Returns the hook handles (call ``.remove()`` on each to stop); with tracing off, registers
    nothing and returns an empty list. A module returning a tuple or list records each tensor
    in it as ``name.0``, ``name.1``, ...; a dict, as ``name.key``. torch is not imported here:
    ``model`` is a ``torch.nn.Module`` the caller built."""
    if not enabled():
        return []
    handles = []
    for module_name, module in model.named_modules():
        label = f"{prefix}{module_name}" if module_name else (prefix.rstrip(".") or "model")

        def hook(_module: Any, _inputs: Any, output: Any, label: str = label) -> None:
            _record_output(label, output)

        handles.append(module.register_forward_hook(hook))
    return handles


def _record_output(label: str, output: Any) -> None:
    if hasattr(output, "detach"):
        tensor(label, output)
    elif isinstance(output, (tuple, list)):
        for i, item in enumerate(output):
            _record_output(f"{label}.{i}", item)
    elif isinstance(output, dict):
        for key, item in output.items():
            _record_output(f"{label}.{key}", item)
