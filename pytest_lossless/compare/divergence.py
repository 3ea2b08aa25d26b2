"""Where two runs part: two traces (see ``docs/trace.md``) aligned tensor by tensor.

Tensors are aligned by ``(name, occurrence)``, in the left trace's order. The first aligned
tensor whose bytes differ is the first divergence; the last aligned tensor still identical
before it says where the two runs were last the same. Names present in one trace only (an
operation fused away) are listed, never skipped silently. After the first divergence every
aligned tensor is measured again (differing elements, largest ULP distance, largest ``|diff|``):
how the difference grows, the curve the HTML report draws.

The API, for ``lossless.compare`` and ``lossless.matrix`` alike::

    load_trace(folder) -> Trace
    trace_folder(run) -> Path | None             # a traced run's result, a folder, a Trace
    tracing_into(folder)                         # context: runs started inside trace there
    run_trace(result, folder) -> Path | None     # where a run started under tracing_into traced
    between(left_name, left, right_name, right) -> dict  # a receipt record, errors included
    first_divergence(left, right, *, left_label="control", right_label="candidate") -> Divergence
    stage_rows(control, candidate) -> list[StageRow]

``Divergence.headline()`` is the one line a failure message carries
(``first divergence: <name> ...``); ``Divergence.to_json()`` is its receipt record.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import trace as _format
from ..core.records import Record, meta, spec
from ..errors import ArtifactError
from ..gates.lossy import abs_diff
from ..gates.ulps import FORMATS, INFINITE_STEPS, ulp_distance

#: Aligned tensors measured after the first divergence, at most (the curve's points).
GROWTH_LIMIT = 2000


def _unwritten(_: object) -> bool:
    return True


@dataclass(frozen=True)
class TraceEntry(Record):
    """One traced tensor, as its manifest line says; a divergence record names it without
    ``nbytes`` and ``offset`` (where its bytes are is the trace's business)."""

    order: int
    name: str
    occurrence: int = field(metadata=meta(absent=0))
    stage: str = field(metadata=meta(absent=""))
    dtype: str
    shape: tuple[int, ...]
    nbytes: int = field(metadata=meta(absent=0, omit=_unwritten))
    sha256: str
    offset: int | None = field(metadata=meta(omit=_unwritten))

    @property
    def key(self) -> tuple[str, int]:
        return (self.name, self.occurrence)

    @property
    def label(self) -> str:
        """``name`` for a first occurrence, ``name#3`` for a later one."""
        return self.name if self.occurrence == 0 else f"{self.name}#{self.occurrence}"


@dataclass(frozen=True)
class StageTime:
    """One ``trace.stage`` block: its path (``denoise/step 3``), start and wall time."""

    stage: str
    start: float
    seconds: float


@dataclass(frozen=True)
class Trace:
    """A trace folder, read: its tensors in order, its stage times, where the bytes are."""

    folder: Path
    entries: tuple[TraceEntry, ...]
    stages: tuple[StageTime, ...]
    data: Path
    #: Manifests of other processes that traced into the same folder (not aligned).
    others: tuple[str, ...] = ()

    def array(self, entry: TraceEntry) -> npt.NDArray[Any] | None:
        """The tensor's elements (None when only its digest was kept, or its dtype is unknown
        to numpy: a ``bfloat16`` comes back as its ``uint16`` words)."""
        raw = self.raw(entry)
        if raw is None:
            return None
        dtype = _numpy_dtype(entry.dtype)
        if dtype is None:
            return None
        return np.frombuffer(raw, dtype=dtype).reshape(entry.shape)

    def raw(self, entry: TraceEntry) -> bytes | None:
        """The tensor's stored bytes, or None when only its digest was kept."""
        if entry.offset is None:
            return None
        with open(self.data, "rb") as handle:
            handle.seek(entry.offset)
            data = handle.read(entry.nbytes)
        if len(data) != entry.nbytes:
            raise ArtifactError(
                self.data,
                f"tensor {entry.label!r} should hold {entry.nbytes} bytes at offset "
                f"{entry.offset}, but the file ends after {len(data)}: the trace is truncated",
            )
        return data

    def stage_seconds(self) -> dict[str, float]:
        """Wall seconds per stage path, summed over repeats, in first-seen order."""
        totals: dict[str, float] = {}
        for s in self.stages:
            totals[s.stage] = totals.get(s.stage, 0.0) + s.seconds
        return totals


def load_trace(folder: Path | str) -> Trace:
    """Read a trace folder; an unreadable or foreign manifest is an :class:`ArtifactError`
    naming the file and the line."""
    root = Path(folder)
    manifest = root / _format.MANIFEST
    if not manifest.is_file():
        raise ArtifactError(
            manifest,
            "no trace here: the run wrote no manifest (did it call trace.tensor, with "
            f"{_format.TRACE_DIR} set? model_run(..., trace=True) sets it)",
        )
    entries: list[TraceEntry] = []
    stages: list[StageTime] = []
    data = root / _format.DATA
    with open(manifest, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                kind = record.get("type")
                if kind == "header":
                    if record.get("format") != _format.FORMAT:
                        raise ValueError(f"format {record.get('format')!r} is not a trace")
                    if int(record.get("version", 0)) > _format.VERSION:
                        raise ValueError(
                            f"version {record['version']} is newer than this reader "
                            f"({_format.VERSION}): upgrade pytest-lossless"
                        )
                    data = root / str(record.get("data") or _format.DATA)
                elif kind == "tensor":
                    if "nbytes" not in record:  # a manifest's line says it (a record need not)
                        raise KeyError("nbytes")
                    entries.append(TraceEntry.from_json(record))
                elif kind == "stage":
                    stages.append(
                        StageTime(str(record["stage"]), float(record["start"]),
                                  float(record["seconds"]))
                    )  # fmt: skip
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                if number == _last_line(manifest) and not line.endswith("\n"):
                    break  # the run ended while writing its last line: the trace up to it
                raise ArtifactError(
                    manifest, f"line {number} is not a trace record: {exc}"
                ) from None
    others = tuple(
        sorted(p.name for p in root.glob("manifest.*.jsonl") if p.name != _format.MANIFEST)
    )
    return Trace(root, tuple(entries), tuple(stages), data, others)


def _last_line(path: Path) -> int:
    with open(path, "rb") as handle:
        return handle.read().count(b"\n") + 1


def _numpy_dtype(name: str) -> np.dtype[Any] | None:
    if name == "bfloat16":
        return np.dtype("<u2")
    try:
        dtype = np.dtype(name)
    except TypeError:
        return None
    return dtype.newbyteorder("<") if dtype.byteorder in "=><" and dtype.itemsize > 1 else dtype


def trace_folder(run: Any) -> Path | None:
    """The trace folder of a run: a :class:`Trace`, a folder, a traced ``model_run`` result
    (its record's ``trace_dir``), or a mapping holding ``trace_dir``; None when untraced."""
    if isinstance(run, Trace):
        return run.folder
    if isinstance(run, (str, os.PathLike)):
        return Path(run)
    record = getattr(run, "record", run)
    if isinstance(record, Mapping):
        found = record.get("trace_dir")
        if isinstance(found, str) and found:
            return Path(found)
    return None


@contextmanager
def tracing_into(folder: Path) -> Iterator[None]:
    """Set ``PYTEST_LOSSLESS_TRACE_DIR`` to ``folder`` for the block: every process started
    inside inherits it (a ``model_run(..., trace=True)`` run keeps a folder of its own), and a
    producer that calls ``trace.tensor`` in this process traces there too."""
    before = os.environ.get(_format.TRACE_DIR)
    os.environ[_format.TRACE_DIR] = str(folder)
    try:
        yield
    finally:
        _format.release(folder)  # an in-process producer's trace is finished with the arm
        if before is None:
            os.environ.pop(_format.TRACE_DIR, None)
        else:
            os.environ[_format.TRACE_DIR] = before


def run_trace(result: Any, folder: Path) -> Path | None:
    """Where a run made under :func:`tracing_into` (``folder``) traced: its own folder when it
    has one, else ``folder`` when something was traced there; None when nothing was."""
    own = trace_folder(result) if not isinstance(result, (str, os.PathLike)) else None
    if own is not None and (own / _format.MANIFEST).is_file():
        return own
    return folder if (folder / _format.MANIFEST).is_file() else None


def between(left_name: str, left: Path | None, right_name: str, right: Path | None) -> Departure:
    """Where two runs part (``between``: their names); a run without a trace, or a trace that
    cannot be read, is an ``error`` in it, never an exception: a divergence explains a verdict
    and never decides one."""
    pair = (left_name, right_name)
    missing = [n for n, p in ((left_name, left), (right_name, right)) if p is None]
    if missing:
        return Departure(
            pair,
            error=(
                f"no trace from {' and '.join(missing)}: the model recorded no tensor "
                "(call pytest_lossless.trace.tensor in it, see docs/trace.md)"
            ),
        )
    assert left is not None
    assert right is not None
    try:
        found = first_divergence(left, right, left_label=left_name, right_label=right_name)
    except ArtifactError as exc:
        return Departure(pair, error=str(exc))
    return Departure(pair, found=found)


def _as_trace(value: Trace | Path | str) -> Trace:
    return value if isinstance(value, Trace) else load_trace(value)


# ------------------------------------------------------------------ one tensor, two runs


@dataclass(frozen=True)
class TensorDifference(Record):
    """One aligned tensor measured in two runs. ``differing`` is None when a side kept only its
    digest (the bytes differ, by how much is unknown); ``note`` says why a figure is missing."""

    name: str
    occurrence: int
    order: int
    stage: str
    dtype: str
    shape: tuple[int, ...]
    identical: bool
    total: int
    differing: int | None = None
    max_ulp: int | None = None
    max_abs: float | None = None
    note: str = spec("", absent="")

    @property
    def label(self) -> str:
        return self.name if self.occurrence == 0 else f"{self.name}#{self.occurrence}"

    def figures(self) -> str:
        """``27315 of 436480 elements differ, largest 2 ulps, largest |diff| 3.1e-07``."""
        if self.identical:
            return "identical"
        if self.differing is None:
            return f"differs ({self.note})" if self.note else "differs"
        parts = [f"{self.differing} of {self.total} elements differ"]
        if self.max_ulp is not None:
            steps = "NaN" if self.max_ulp >= int(INFINITE_STEPS) else str(self.max_ulp)
            parts.append(f"largest {steps} ulp{'' if self.max_ulp == 1 else 's'}")
        if self.max_abs is not None:
            parts.append(f"largest |diff| {self.max_abs:.3g}")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts)


def _measure(left: Trace, a: TraceEntry, right: Trace, b: TraceEntry) -> TensorDifference:
    total = math.prod(a.shape)
    of_a = functools.partial(
        TensorDifference, a.name, a.occurrence, a.order, a.stage, a.dtype, a.shape, total=total
    )
    same_meta = a.dtype == b.dtype and a.shape == b.shape
    if same_meta and a.sha256 == b.sha256:
        return of_a(identical=True, differing=0)
    if a.dtype != b.dtype:
        return of_a(identical=False, note=f"dtype {a.dtype} against {b.dtype}")
    if not same_meta:
        return of_a(identical=False, note=f"shape {list(a.shape)} against {list(b.shape)}")
    ra, rb = left.raw(a), right.raw(b)
    if ra is None or rb is None:
        return of_a(
            identical=False, note=f"digest only: more than the raw limit ({a.nbytes} bytes)"
        )
    differing, max_ulp, max_abs, note = _figures(a.dtype, ra, rb)
    return of_a(identical=False, differing=differing, max_ulp=max_ulp, max_abs=max_abs, note=note)


def _figures(dtype: str, ra: bytes, rb: bytes) -> tuple[int, int | None, float | None, str]:
    """Differing elements, largest ULP distance (floats), largest |diff| (numbers)."""
    fmt = FORMATS.get(dtype)
    if fmt is not None:
        word = fmt.word.newbyteorder("<")
        ea = np.frombuffer(ra, dtype=word).astype(fmt.word)
        eb = np.frombuffer(rb, dtype=word).astype(fmt.word)
        steps = ulp_distance(ea, eb, fmt)
        differing = int(np.count_nonzero(ea != eb))
        with np.errstate(invalid="ignore"):
            diff = abs_diff(fmt.values(ea), fmt.values(eb))
        return differing, int(steps.max()) if steps.size else 0, _largest(diff), ""
    dt = _numpy_dtype(dtype)
    if dt is None or dt.itemsize == 0:
        xa = np.frombuffer(ra, dtype=np.uint8)
        xb = np.frombuffer(rb, dtype=np.uint8)
        return int(np.count_nonzero(xa != xb)), None, None, f"{dtype}: bytes counted"
    wa = np.frombuffer(ra, dtype=np.uint8).reshape(-1, dt.itemsize)
    wb = np.frombuffer(rb, dtype=np.uint8).reshape(-1, dt.itemsize)
    differing = int(np.count_nonzero((wa != wb).any(axis=1)))
    if dt.kind in "iubfc":
        va, vb = np.frombuffer(ra, dtype=dt), np.frombuffer(rb, dtype=dt)
        return differing, None, _largest(abs_diff(va, vb)), ""
    return differing, None, None, ""


def _largest(diff: npt.NDArray[np.float64]) -> float | None:
    """The largest ``|diff|``; None (unknown) for none, or NaN: no JSON number, no figure."""
    largest = float(diff.max()) if diff.size else math.nan
    return None if math.isnan(largest) else largest


# ------------------------------------------------------------------ two traces


def _identical(found: Divergence) -> bool:
    return found.first is None and not found.only_left and not found.only_right


@dataclass(frozen=True, kw_only=True)
class Divergence(Record):
    """Where two traces part, what the first differing tensor is, and what follows it."""

    left: str
    right: str
    folders: tuple[str, str] = ("", "")
    identical: bool = spec(derive=_identical)
    #: The first aligned tensor that differs, in the left trace's order; None: none differs.
    first: TensorDifference | None
    #: The last aligned tensor still identical before it (None: it is the first aligned one).
    last_identical: TraceEntry | None
    #: Names (with how many occurrences) present in one trace only.
    only_left: tuple[tuple[str, int], ...] = ()
    only_right: tuple[tuple[str, int], ...] = ()
    #: How many tensors were aligned, and how many of them differ.
    aligned: int
    differing: int
    #: Set when the aligned tensors run in another order in the right trace.
    order_note: str = ""
    headline_text: str = spec(key="headline", derive=lambda found: found.headline())
    #: Every aligned tensor from the first divergence on, in order: the growth curve.
    growth: tuple[TensorDifference, ...] = ()

    def headline(self) -> str:
        """One line: ``first divergence: <name> (...)``, or why there is none."""
        if self.first is None:
            if self.identical:
                return f"traces identical ({self.aligned} tensors)"
            return f"no aligned tensor differs ({self.aligned} aligned); {self._only_text()}"
        f = self.first
        where = f"occurrence {f.occurrence}" + (f", stage {f.stage}" if f.stage else "")
        last = (
            f"last identical: {self.last_identical.label}"
            + (f" (stage {self.last_identical.stage})" if self.last_identical.stage else "")
            if self.last_identical is not None
            else "no aligned tensor before it"
        )
        return f"first divergence: {f.name} ({where}): {f.figures()}; {last}"

    def _only_text(self) -> str:
        parts = []
        for side, names in ((self.left, self.only_left), (self.right, self.only_right)):
            if names:
                shown = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names[:6])
                more = f" and {len(names) - 6} more" if len(names) > 6 else ""
                parts.append(f"only in {side}: {shown}{more}")
        return "; ".join(parts)

    def lines(self) -> list[str]:
        """The headline, then what a reader needs next: one-sided names and the growth."""
        out = [self.headline()]
        if self.first is not None and (self.only_left or self.only_right):
            out.append(self._only_text())
        if self.order_note:
            out.append(self.order_note)
        if len(self.growth) > 1:
            last = self.growth[-1]
            out.append(
                f"afterwards: {self.differing} of {self.aligned} aligned tensors differ; the "
                f"last, {last.label}" + (f" (stage {last.stage})" if last.stage else "")
                + f": {last.figures()}"
            )  # fmt: skip
        return out


class ReadsAsJson(Record):
    """A record that a test, or a user following the docs, reads like the JSON it writes:
    ``verdict.divergence["first"]["name"]``, ``run["artifacts"]`` (each read goes through
    :meth:`to_json`, so it is the receipt's value)."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)


@dataclass(frozen=True)
class Departure(ReadsAsJson):
    """Where two runs of a verdict part (``between``: their names): the receipt's
    ``divergence`` record. ``error`` says why there is no :class:`Divergence` (a run without a
    trace, or one that cannot be read): a divergence explains a verdict, never decides one."""

    between: tuple[str, str]
    error: str | None = spec(None, omit="none")
    found: Divergence | None = spec(None, flatten=True)
    #: What the verdict message shows of ``found`` (its :meth:`Divergence.lines`).
    shown: tuple[str, ...] = spec(
        key="lines",
        derive=lambda d: () if d.found is None else tuple(d.found.lines()),
        omit=lambda d: d.found is None,
    )

    @property
    def first(self) -> TensorDifference | None:
        return None if self.found is None else self.found.first

    def headline(self) -> str | None:
        return None if self.found is None else self.found.headline()

    def lines(self) -> list[str]:
        """What the verdict message shows under ``trace (a vs b):``."""
        if self.error is not None:
            return [self.error]
        return [] if self.found is None else self.found.lines()


def _one_sided(entries: Sequence[TraceEntry], keys: set[tuple[str, int]]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for e in entries:
        if e.key not in keys:
            counts[e.name] = counts.get(e.name, 0) + 1
    return list(counts.items())


def first_divergence(
    left: Trace | Path | str,
    right: Trace | Path | str,
    *,
    left_label: str = "control",
    right_label: str = "candidate",
    growth_limit: int = GROWTH_LIMIT,
) -> Divergence:
    """Align two traces by ``(name, occurrence)`` and find where they first part."""
    a, b = _as_trace(left), _as_trace(right)
    right_by_key = {e.key: e for e in b.entries}
    left_keys = {e.key for e in a.entries}
    aligned = [(e, right_by_key[e.key]) for e in a.entries if e.key in right_by_key]
    order_note = ""
    previous = -1
    for ea, eb in aligned:
        if eb.order < previous:
            order_note = (
                f"{ea.label} comes earlier in {right_label} than in {left_label}: the two "
                "traces run their aligned tensors in another order"
            )
            break
        previous = eb.order
    first: TensorDifference | None = None
    last_identical: TraceEntry | None = None
    growth: list[TensorDifference] = []
    differing = 0
    for ea, eb in aligned:
        same = ea.sha256 == eb.sha256 and ea.dtype == eb.dtype and ea.shape == eb.shape
        if first is None and same:
            last_identical = ea
        elif first is None or len(growth) < growth_limit:  # measured: the growth curve
            point = _measure(a, ea, b, eb)
            first = point if first is None else first
            growth.append(point)
            differing += not point.identical
        elif not same:
            differing += 1
    return Divergence(
        left=left_label,
        right=right_label,
        first=first,
        last_identical=last_identical if first is not None else None,
        only_left=tuple(_one_sided(a.entries, set(right_by_key))),
        only_right=tuple(_one_sided(b.entries, left_keys)),
        aligned=len(aligned),
        differing=differing,
        growth=tuple(growth),
        order_note=order_note,
        folders=(str(a.folder), str(b.folder)),
    )


# ------------------------------------------------------------------ stage times


def _ratio(row: StageRow) -> float | None:
    c, d = row.control_seconds, row.candidate_seconds
    return None if c is None or d is None or c <= 0 else d / c


@dataclass(frozen=True)
class StageRow(Record):
    """One stage's wall seconds in a control trace and a candidate trace (None: not run)."""

    stage: str
    control_seconds: float | None
    candidate_seconds: float | None
    ratio: float | None = spec(derive=_ratio)


def stage_rows(control: Trace | Path | str, candidate: Trace | Path | str) -> list[StageRow]:
    """One row per stage (control's order, then the candidate's own): where the time went.

    Read from traced runs only: a traced run pays for its tracing, so these rows explain a
    speed verdict and never make one."""
    c, d = _as_trace(control).stage_seconds(), _as_trace(candidate).stage_seconds()
    names = list(c) + [n for n in d if n not in c]
    return [StageRow(n, c.get(n), d.get(n)) for n in names]


@dataclass(frozen=True)
class StageTimes(ReadsAsJson):
    """The ``stages`` record of a speed gate (``speed_gate(trace=True)``): one row per stage,
    from one traced run of each arm (``traces``: where each traced, None when it left no
    trace), or the ``error`` that kept them from being compared."""

    note: str = "from one traced run of each arm, apart from the timed runs"
    traces: dict[str, str | None] = field(default_factory=dict)
    error: str | None = spec(None, omit="none")
    rows: tuple[StageRow, ...] = spec((), omit=lambda times: times.error is not None)


def traced_stage_times(
    control: Callable[[], Any], candidate: Callable[[], Any], folder: Path
) -> StageTimes:
    """Run ``control`` and ``candidate`` once each, traced, and compare their stage times.
    These runs are separate from the timed ones, whose times they never enter: a traced run
    pays for tracing. A run without stage records is an ``error`` in the record, never an
    exception."""
    found: dict[str, Path | None] = {}
    for name, arm in (("control", control), ("candidate", candidate)):
        where = folder / f"stages-{name}"
        with tracing_into(where):
            result = arm()
        found[name] = run_trace(result, where)
    traces = {k: None if v is None else str(v) for k, v in found.items()}
    control_trace, candidate_trace = found["control"], found["candidate"]
    if control_trace is None or candidate_trace is None:
        missing = " and ".join(k for k, v in found.items() if v is None)
        why = "the model recorded no trace.stage (see docs/trace.md)"
        return StageTimes(traces=traces, error=f"no trace from the {missing} run: {why}")
    try:
        return StageTimes(traces=traces, rows=tuple(stage_rows(control_trace, candidate_trace)))
    except ArtifactError as exc:
        return StageTimes(traces=traces, error=str(exc))
