"""The determinism matrix: which knob breaks equality, one verdict per cell.

``lossless.matrix(make_run, axes)`` runs every cell of the cartesian product of ``axes`` (in the
order given) ``runs`` times. A cell's verdict comes from the contract's table
(:func:`.repeatability.lossless_table`, the one place a lossless verdict is decided), with the
reference cell (the first, unless named) as its control:

- INCONCLUSIVE when the cell's own runs disagree, or the reference's do (nothing can be judged
  against a reference that is not repeatable);
- PASS when its first run is identical to the reference's first run (LOSSY-PASS under a lossy
  gate), FAIL when it is not.

The grid's overall verdict is the worst of its cells. :func:`explain` finds the axes that
explain the cells that do not pass ("differs whenever threads > 1, whatever the batch") and
says when two axes interact; it is pure and exact (:meth:`Explanation.covers` is true of a cell
exactly when it does not pass), so the line never says more than the grid shows.
"""

from __future__ import annotations

import contextlib
import itertools
import keyword
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.artifact import KeptFiles, materialize_all
from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.paths import safe_name
from ..core.records import JsonObject, JsonValue, Record, RecordError, from_json, spec
from ..core.text import printable
from ..core.verdict import Verdict
from ..errors import ConfigError
from ..gates import Gate
from ..kinds.registry import Artifact, KindRegistry
from . import divergence as tracing
from .repeatability import (
    Comparison,
    RunRecord,
    _compare_runs,
    _resolve_gates,
    lossless_table,
    run_record,
)

#: The JSON scalars an axis value may be: it names the cell and is frozen in ``plan.json``.
AxisValue = str | int | float | bool | None
#: Cells listed by name in a message before "and N more".
LISTED = 8
_WHERE = "lossless.matrix(axes)"


# ------------------------------------------------------------------ cells


def value_text(value: AxisValue) -> str:
    """An axis value as a cell's name shows it (``4``, ``fast``, ``True``, ``None``)."""
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        return repr(value)  # 2.0 stays "2.0": never the same name as the int 2
    return printable(str(value))


@dataclass(frozen=True)
class Cell(Record):
    """One setting of every axis, in the axes' order: ``(("threads", 4), ("batch", 2))``;
    written as ``{axis: value}`` in that order (what ``make_run(**cell)`` is called with)."""

    values: tuple[tuple[str, AxisValue], ...]

    def to_json(self) -> dict[str, AxisValue]:
        return self.kwargs

    @classmethod
    def from_json(cls, data: object) -> Cell:
        if not isinstance(data, Mapping):
            raise RecordError(f"Cell: expected an object of axis values, got {data!r:.60}")
        return cls(tuple((str(k), v) for k, v in data.items()))

    @property
    def name(self) -> str:
        """``threads=4, batch=2``: the cell named in full, as every row shows it."""
        return ", ".join(f"{axis}={value_text(value)}" for axis, value in self.values)

    @property
    def kwargs(self) -> dict[str, AxisValue]:
        """What ``make_run(**cell)`` is called with."""
        return dict(self.values)

    def key(self) -> tuple[AxisValue, ...]:
        return tuple(value for _, value in self.values)

    def __getitem__(self, axis: str) -> AxisValue:
        return dict(self.values)[axis]


def check_axes(axes: Mapping[str, Sequence[AxisValue]]) -> dict[str, list[AxisValue]]:
    """``axes`` checked: a non-empty mapping of keyword names to non-empty lists of distinct
    JSON scalars (each names a cell and is frozen in ``plan.json``)."""
    if not isinstance(axes, Mapping) or not axes:
        raise ConfigError(_WHERE, axes, 'give a mapping of axes, e.g. {"threads": [1, 2, 4]}')
    checked: dict[str, list[AxisValue]] = {}
    for axis, values in axes.items():
        if not isinstance(axis, str) or not axis.isidentifier() or keyword.iskeyword(axis):
            raise ConfigError(_WHERE, axis, "an axis name must be a keyword argument name")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ConfigError(
                f"{_WHERE}[{axis!r}]", values, "give a non-empty list of values, e.g. [1, 2, 4]"
            )
        names: set[str] = set()
        for value in values:
            if value is not None and not isinstance(value, (str, int, float, bool)):
                raise ConfigError(
                    f"{_WHERE}[{axis!r}]",
                    value,
                    "an axis value must be a string, a number, a boolean or None: it names the "
                    "cell and is frozen in plan.json",
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{_WHERE}[{axis!r}]", value, "a value must be finite")
            text = value_text(value)
            if text in names:
                raise ConfigError(f"{_WHERE}[{axis!r}]", value, "this value is given twice")
            names.add(text)
        checked[axis] = list(values)
    return checked


def cells(axes: Mapping[str, Sequence[AxisValue]]) -> list[Cell]:
    """Every cell: the cartesian product of the axes, the first axis varying slowest."""
    checked = check_axes(axes)
    return [
        Cell(tuple(zip(checked, combination, strict=True)))
        for combination in itertools.product(*checked.values())
    ]


def find_cell(found: Sequence[Cell], key: object, what: str) -> Cell:
    """The cell ``key`` names: its full name (``"threads=4, batch=2"``), a tuple of its values
    in the axes' order, or a mapping of every axis to its value."""
    for cell in found:
        if _names(cell, key):
            return cell
    shown = "; ".join(c.name for c in found[:LISTED]) + ("; ..." if len(found) > LISTED else "")
    raise ConfigError(what, key, f"names no cell of the matrix (its cells: {shown})")


def _names(cell: Cell, key: object) -> bool:
    if isinstance(key, str):
        return _squash(key) == _squash(cell.name)
    if isinstance(key, tuple):
        return len(key) == len(cell.values) and all(
            _same_value(a, b) for a, b in zip(key, cell.key(), strict=True)
        )
    if isinstance(key, Mapping):
        return set(key) == {axis for axis, _ in cell.values} and all(
            _same_value(key[axis], value) for axis, value in cell.values
        )
    return False


def _squash(name: str) -> str:
    return "".join(name.split())


def _same_value(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


# ------------------------------------------------------------------ running it


def _repeatable(result: CellResult) -> bool:
    return all(c.identical for c in result.repeat_comparisons)


def _identical(result: CellResult) -> bool:
    """Its first run identical to the reference's first (the reference is to itself)."""
    return result.reference_comparison is None or result.reference_comparison.identical


@dataclass(frozen=True, kw_only=True)
class CellResult(Record):
    """One cell: its runs, its runs compared with its first, and its first compared with the
    reference's first (None for the reference itself), and the verdict they give."""

    name: str = spec(derive=lambda result: result.cell.name)
    cell: Cell
    verdict: Verdict
    repeatable: bool = spec(derive=_repeatable)
    identical: bool = spec(derive=_identical)
    runs: tuple[RunRecord, ...]
    repeat_comparisons: tuple[Comparison, ...]
    reference_comparison: Comparison | None
    #: What the cell ran under, besides its axes (the devices it was given): the JSON that
    #: the ``cell_context`` manager yielded, recorded as it is.
    context: JsonObject = field(default_factory=dict)
    #: With ``trace=True``: where the two runs that explain the verdict first part
    #: (:func:`.divergence.between`'s record): the reference's first run and the cell's first
    #: (FAIL), or the cell's first run and the first of its own that differs (not repeatable);
    #: None when the verdict has no two such runs, or the grid is not traced.
    divergence: tracing.Departure | None = None

    def summary(self) -> str:
        """The cell's line in the verdict table."""
        if not self.repeatable:
            varied = sorted(
                {n for c in self.repeat_comparisons for n in c.missing}
                | {r.artifact for c in self.repeat_comparisons for r in c.results if not r.passed}
            )
            return (
                f"not repeatable over {len(self.runs)} runs: {', '.join(varied)} varied"
                + self._divergence_short()
            )
        if self.verdict == Verdict.INCONCLUSIVE:
            return f"{len(self.runs)} runs identical; the reference is not repeatable"
        if self.reference_comparison is None:
            return f"reference cell: {len(self.runs)} runs identical"
        if not self.identical:
            comparison = self.reference_comparison
            parts = [f"{n} missing" for n in comparison.missing] + [
                f"{r.artifact} ({r.mismatch_count} of {r.total} {r.unit}s, first "
                f"{r.first_mismatch})"
                if not r.metadata_diffs
                else f"{r.artifact} ({r.metadata_diffs[0]})"
                for r in comparison.results
                if not r.passed
            ]
            return "differs from the reference: " + "; ".join(parts) + self._divergence_short()
        how = "within tolerance" if self.verdict == Verdict.LOSSY_PASS else "bit for bit"
        return f"{len(self.runs)} runs identical; identical to the reference {how}"

    def _divergence_short(self) -> str:
        """``; first divergence: block.proj`` (``trace=True``), or why there is none."""
        found = self.divergence
        if found is None:
            return ""
        if found.first is not None:
            return f"; first divergence: {found.first.name}"
        if found.error:
            return f"; trace: {found.error}"
        headline = found.headline()
        return f"; trace: {headline}" if headline else ""


def _worst(grid: Grid) -> Verdict:
    return Verdict.worst(c.verdict for c in grid.cells) or Verdict.PASS


@dataclass(frozen=True, kw_only=True)
class Grid(Record):
    """What ``lossless.matrix`` returns: a verdict per cell, the evidence of each, the overall
    verdict (the worst cell) and the line naming the axes that explain the differences (a
    receipt's ``matrix[i]``; keys the plugin adds beside it, such as ``gate_plan``, are not
    the grid's)."""

    label: str = ""
    axes: dict[str, list[AxisValue]] = field(default_factory=dict)
    #: Written as its name; :meth:`from_json` finds it among the cells.
    reference: Cell = spec(Cell(()), json=False)
    reference_name: str = spec(key="reference", derive=lambda grid: grid.reference.name)
    runs: int = spec(key="runs_per_cell")
    gates: dict[str, str] = field(default_factory=dict)
    lossy: bool = False
    trace: bool = False
    verdict: Verdict = spec(derive=_worst)
    explanation: str = spec(
        derive=lambda grid: explanation_line(grid.axes, grid.verdicts, grid.reference.name)
    )
    cells: tuple[CellResult, ...] = ()

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def verdicts(self) -> dict[str, Verdict]:
        """``{"threads=4, batch=2": Verdict.FAIL, ...}``: every cell's verdict, by name."""
        return {c.name: c.verdict for c in self.cells}

    def __getitem__(self, key: object) -> CellResult:
        """A cell's result, by its name, its tuple of values or a mapping of its axes."""
        cell = find_cell([c.cell for c in self.cells], key, "grid[...]")
        return next(c for c in self.cells if c.cell == cell)

    def __iter__(self) -> Iterator[CellResult]:
        return iter(self.cells)

    def __len__(self) -> int:
        return len(self.cells)

    def message(self) -> str:
        head = f"lossless matrix {self.label + ' ' if self.label else ''}verdict: {self.verdict}"
        lines = [f"{head}: {self.explanation}"]
        lines += [f"  {c.name}: {c.verdict}: {c.summary()}" for c in self.cells]
        return "\n".join(lines)

    def summary(self) -> str:
        return self.explanation

    @classmethod
    def from_json(cls, data: object) -> Grid:
        """The grid, its reference found among its cells by the name written."""
        grid = from_json(cls, data)
        assert isinstance(data, Mapping)  # from_json refused anything else
        return replace(
            grid, reference=next(c.cell for c in grid.cells if c.name == data["reference"])
        )


#: Given a cell, the context its runs happen in; what it yields is recorded with the cell.
CellContext = Callable[[Cell], AbstractContextManager[Mapping[str, JsonValue]]]


@contextlib.contextmanager
def _no_context(cell: Cell) -> Iterator[Mapping[str, JsonValue]]:
    yield {}


def check_runs(runs: object) -> int:
    """``runs`` checked: a whole number of at least 2 (a cell must run twice to show it
    repeats); checked before it is frozen in ``plan.json`` or compared with a frozen one."""
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ConfigError(
            "lossless.matrix(runs=...)", runs, "a cell must run at least twice to show it repeats"
        )
    return runs


def run_matrix(
    make_run: Callable[..., Callable[[], Any]],
    axes: Mapping[str, Sequence[AxisValue]],
    *,
    runs: int,
    kinds: KindRegistry,
    workdir: Path,
    reference: object = None,
    gate: Gate | Mapping[str, Gate] | None = None,
    label: str = "",
    trace: bool = False,
    cell_context: CellContext | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Grid:
    """Run every cell ``runs`` times (``make_run(**cell)`` gives its producer) and judge each
    against the reference cell. ``cell_context`` wraps each cell's runs (the plugin narrows
    the test's devices there for a ``devices`` axis). With ``trace``, every run traces into a
    folder of its own (:func:`.divergence.tracing_into`, as ``lossless.compare`` does), and
    each cell that is FAIL or not repeatable names where its two disagreeing runs first part."""
    check_runs(runs)
    if not callable(make_run):
        raise ConfigError("lossless.matrix(make_run)", make_run, "give a function of the axes")
    found = cells(axes)
    ref = (
        found[0] if reference is None else find_cell(found, reference, "lossless.matrix(reference)")
    )
    around = cell_context or _no_context
    fingerprints: dict[str, dict[str, Artifact]] = {}
    kept = KeptFiles()
    records: dict[Cell, list[RunRecord]] = {}
    contexts: dict[Cell, JsonObject] = {}
    traces: dict[str, Path | None] = {}
    # The reference first: every other cell is compared with its first run.
    for index, cell in enumerate([ref, *(c for c in found if c != ref)]):
        with around(cell) as context:
            contexts[cell] = dict(context)
            producer = make_run(**cell.kwargs)
            if not callable(producer):
                raise ConfigError(
                    f"lossless.matrix(make_run) for {cell.name}",
                    producer,
                    "make_run(**cell) must return a producer (a zero-argument callable)",
                )
            records[cell] = []
            for n in range(runs):
                name = run_name(cell, n)
                place = workdir / f"cell{index}-{safe_name(cell.name, default='cell')}"
                started = clock.monotonic()
                if trace:
                    with tracing.tracing_into(place / f"trace-r{n}"):
                        result = producer()
                    traces[name] = tracing.run_trace(result, place / f"trace-r{n}")
                else:
                    result = producer()
                seconds = clock.monotonic() - started
                folder = place / f"r{n}"
                paths = materialize_all(result, name, folder)
                fingerprints[name] = {k: kinds.artifact(k, p) for k, p in paths.items()}
                kept.note(name, fingerprints[name])
                records[cell].append(
                    run_record(
                        name, seconds, fingerprints[name], traced=trace, trace_dir=traces.get(name)
                    )
                )
    kept.check(lambda name, path: kinds.artifact(name, path).fingerprint)
    reference_first = run_name(ref, 0)
    gates = _resolve_gates(gate, fingerprints[reference_first], kinds)
    lossy = any(not g.lossless for g in gates.values())
    diagnostics = workdir / "diagnostics"

    def compare(left: str, right: str) -> Comparison:
        return _compare_runs(
            left, fingerprints[left], right, fingerprints[right], gates, kinds, diagnostics
        )

    results: dict[Cell, CellResult] = {}
    for cell in [ref, *(c for c in found if c != ref)]:
        first = run_name(cell, 0)
        repeats = [compare(first, run_name(cell, n)) for n in range(1, runs)]
        against = None if cell == ref else compare(reference_first, first)
        results[cell] = CellResult(
            cell=cell,
            verdict=Verdict.PASS,
            runs=tuple(records[cell]),
            repeat_comparisons=tuple(repeats),
            reference_comparison=against,
            context=contexts[cell],
        )
    reference_repeatable = results[ref].repeatable
    for cell, result in results.items():
        verdict = cell_verdict(
            reference_repeatable, result.repeatable, result.identical, lossy=lossy
        )
        pairs = [(c.right, c.identical) for c in result.repeat_comparisons]
        pair = divergence_pair(result.runs[0].name, reference_first, verdict, pairs)
        located = None
        if trace and pair is not None:
            left, right = pair
            located = tracing.between(left, traces.get(left), right, traces.get(right))
        results[cell] = replace(result, verdict=verdict, divergence=located)
    return Grid(
        label=label,
        axes=check_axes(axes),
        reference=ref,
        cells=tuple(results[c] for c in found),
        gates={name: g.spec for name, g in gates.items()},
        lossy=lossy,
        runs=runs,
        trace=trace,
    )


def run_name(cell: Cell, index: int) -> str:
    """``threads=4, batch=2 #1``: a run's name, unique across the grid."""
    return f"{cell.name} #{index + 1}"


def divergence_pair(
    first: str, reference_first: str, verdict: Verdict, repeats: Sequence[tuple[str, bool]]
) -> tuple[str, str] | None:
    """The two runs whose traces explain a cell's verdict, as ``lossless.compare`` picks them:
    its first run and the first of its own that differs (``repeats``: each later run's name and
    whether it is identical to the first), else, for a FAIL, the reference's first run and its
    first. None when no two runs disagree (a pass, or INCONCLUSIVE for the reference's sake)."""
    for right, identical in repeats:
        if not identical:
            return first, right
    return (reference_first, first) if verdict == Verdict.FAIL else None


def cell_verdict(
    reference_repeatable: bool, repeatable: bool, identical: bool, *, lossy: bool
) -> Verdict:
    """The contract's table with the reference as control and the cell as candidate; a cell's
    own runs that disagree make it INCONCLUSIVE too. A lossy gate's match is LOSSY-PASS."""
    verdict = lossless_table(reference_repeatable and repeatable, identical)
    return Verdict.LOSSY_PASS if verdict == Verdict.PASS and lossy else verdict


# ------------------------------------------------------------------ re-derived from a receipt


def _items(value: JsonValue) -> list[JsonValue]:
    """A recorded list's items; any other value but null or empty is one unreadable item."""
    if isinstance(value, list):
        return value
    return [None] if value else []


def _objects(value: JsonValue) -> list[JsonObject]:
    """The objects of a recorded list (what is not an object is left out)."""
    return [v for v in _items(value) if isinstance(v, Mapping)]


def _recorded_identical(comparison: JsonValue) -> bool:
    if not isinstance(comparison, Mapping):
        return False
    return not comparison.get("missing") and all(
        isinstance(r, Mapping) and r.get("passed") is True
        for r in _items(comparison.get("results"))
    )


def rederive(block: Mapping[str, JsonValue]) -> dict[str, Verdict]:
    """Every cell's verdict, recomputed from a receipt's recorded comparisons (``matrix[i]``):
    the same table, fed from the raw records instead of live results."""
    entries = _objects(block.get("cells"))
    reference = next((c for c in entries if c.get("name") == block.get("reference")), None)

    def repeatable(entry: JsonObject | None) -> bool:
        return entry is not None and all(
            _recorded_identical(c) for c in _items(entry.get("repeat_comparisons"))
        )

    lossy = block.get("lossy") is not False
    found: dict[str, Verdict] = {}
    for entry in entries:
        against = entry.get("reference_comparison")
        is_reference = entry is reference
        identical = is_reference or _recorded_identical(against)
        if not is_reference and against is None:
            identical = False  # a cell never compared with the reference matches nothing
        found[str(entry.get("name"))] = cell_verdict(
            repeatable(reference), repeatable(entry), identical, lossy=lossy
        )
    return found


def divergence_problems(block: Mapping[str, JsonValue]) -> list[str]:
    """Where a receipt's matrix (``matrix[i]``) records a divergence that its own evidence does
    not call for: on a grid that was not traced, on a cell whose re-derived verdict has no two
    disagreeing runs, or between other runs than :func:`divergence_pair` picks; and a traced
    cell that needs one but records none. The traces themselves may be gone by then, so the
    record is checked for consistency, not re-measured."""
    entries = _objects(block.get("cells"))
    reference = next((c for c in entries if c.get("name") == block.get("reference")), None)
    ref_runs = _objects((reference or {}).get("runs"))
    ref_first = str(ref_runs[0].get("name")) if ref_runs else ""
    verdicts = rederive(block)
    traced = block.get("trace") is True
    found: list[str] = []
    for entry in entries:
        name = str(entry.get("name"))
        recorded = entry.get("divergence")
        runs = _objects(entry.get("runs"))
        if not runs:
            continue
        repeats = [
            (str(c.get("right")), _recorded_identical(c))
            for c in _objects(entry.get("repeat_comparisons"))
        ]
        verdict = verdicts.get(name, Verdict.INCONCLUSIVE)
        pair = divergence_pair(str(runs[0].get("name")), ref_first, verdict, repeats)
        if recorded is None:
            if traced and pair is not None:
                found.append(f"cell {name}: traced and {verdict}, but no divergence recorded")
            continue
        if not isinstance(recorded, Mapping):
            found.append(f"cell {name}: its divergence is not a mapping")
        elif not traced:
            found.append(f"cell {name}: a divergence recorded but the grid was not traced")
        elif pair is None:
            why = "passes" if verdict.passed else "has no two runs that disagree"
            found.append(f"cell {name}: a divergence recorded for a cell that {why}")
        elif _items(recorded.get("between")) != list(pair):
            shown = " and ".join(str(x) for x in _items(recorded.get("between"))) or "no runs"
            found.append(
                f"cell {name}: its divergence is between {shown}, not {pair[0]} and {pair[1]}"
            )
    return found


# ------------------------------------------------------------------ the explanation


@dataclass(frozen=True)
class Clause:
    """``threads > 1``: an axis and the values of it that the clause holds for."""

    axis: str
    values: frozenset[str]  # value_text of each value
    text: str


@dataclass(frozen=True)
class Explanation:
    """Which cells do not pass, as the axes explain them.

    ``form``: ``none`` (every cell passes), ``all`` (no cell passes), ``axis`` (one clause
    holds exactly for them), ``and``/``or`` (two clauses on two axes that interact),
    ``cells`` (they are listed, restricted to the ``relevant`` axes). ``ignored`` are the axes
    whose value does not matter.
    """

    form: str
    clauses: tuple[Clause, ...] = ()
    relevant: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    listed: tuple[tuple[tuple[str, str], ...], ...] = ()

    def covers(self, cell: Mapping[str, str]) -> bool:
        """Whether the explanation says ``cell`` (axis -> value text) does not pass."""
        if self.form == "none":
            return False
        if self.form == "all":
            return True
        hits = [cell[c.axis] in c.values for c in self.clauses]
        if self.form == "axis":
            return hits[0]
        if self.form == "and":
            return all(hits)
        if self.form == "or":
            return any(hits)
        return tuple((axis, cell[axis]) for axis in self.relevant) in self.listed

    @property
    def interacting(self) -> bool:
        return self.form in ("and", "or", "cells") and len(self.relevant) > 1

    def text(self, verb: str = "differs") -> str:
        whatever = ""
        if self.ignored:
            whatever = ", whatever the " + _and([a for a in self.ignored])
        if self.form == "none":
            return f"no cell {verb}"
        if self.form == "all":
            return f"every cell {verb}"
        if self.form == "axis":
            return f"{verb} whenever {self.clauses[0].text}{whatever}"
        interact = f" ({_and(list(self.relevant))} interact)" if self.interacting else ""
        if self.form == "and":
            joined = " and ".join(c.text for c in self.clauses)
            return f"{verb} only when {joined}{whatever}{interact}"
        if self.form == "or":
            joined = " or ".join(c.text for c in self.clauses)
            return f"{verb} whenever {joined}{whatever}{interact}"
        shown = [", ".join(f"{a}={v}" for a, v in combo) for combo in self.listed[:LISTED]]
        if len(self.relevant) > 1:
            shown = [f"({cell})" for cell in shown]
        more = f" and {len(self.listed) - LISTED} more" if len(self.listed) > LISTED else ""
        return f"{verb} at {', '.join(shown)}{more}{whatever}{interact}"


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def explain(axes: Mapping[str, Sequence[AxisValue]], bad: set[tuple[str, ...]]) -> Explanation:
    """The axes that explain ``bad`` (the cells, as tuples of value texts in the axes' order,
    that do not pass). Pure: the result :meth:`~Explanation.covers` exactly the ``bad`` cells.
    """
    names = list(axes)
    texts = {a: [value_text(v) for v in axes[a]] for a in names}
    every = list(itertools.product(*(texts[a] for a in names)))
    bad = {c for c in bad if c in set(every)}
    if not bad:
        return Explanation("none")
    if len(bad) == len(every):
        return Explanation("all")
    relevant = [i for i, a in enumerate(names) if _depends(every, bad, i)]
    ignored = tuple(a for i, a in enumerate(names) if i not in relevant and len(texts[a]) > 1)
    rel_names = tuple(names[i] for i in relevant)
    projected = {tuple(c[i] for i in relevant) for c in bad}
    if len(relevant) == 1:
        (i,) = relevant
        values = frozenset(c[0] for c in projected)
        return Explanation("axis", (_clause(names[i], axes[names[i]], values),), rel_names, ignored)
    if len(relevant) == 2:
        a, b = relevant
        left = frozenset(c[0] for c in projected)
        right = frozenset(c[1] for c in projected)
        all_pairs = set(itertools.product(texts[names[a]], texts[names[b]]))
        clauses = (
            _clause(names[a], axes[names[a]], left),
            _clause(names[b], axes[names[b]], right),
        )
        if projected == set(itertools.product(left, right)):
            return Explanation("and", clauses, rel_names, ignored)
        # Whole rows and whole columns of bad pairs: their union may be exactly the bad ones.
        rows = frozenset(
            x for x in texts[names[a]] if all((x, y) in projected for y in texts[names[b]])
        )
        cols = frozenset(
            y for y in texts[names[b]] if all((x, y) in projected for x in texts[names[a]])
        )
        union = {p for p in all_pairs if p[0] in rows or p[1] in cols}
        if rows and cols and union == projected:
            clauses = (
                _clause(names[a], axes[names[a]], rows),
                _clause(names[b], axes[names[b]], cols),
            )
            return Explanation("or", clauses, rel_names, ignored)
    listed = tuple(
        tuple(zip(rel_names, combo, strict=True))
        for combo in sorted(projected, key=lambda c: _order(axes, rel_names, c))
    )
    return Explanation("cells", (), rel_names, ignored, listed)


def _order(
    axes: Mapping[str, Sequence[AxisValue]], names: Sequence[str], combo: Sequence[str]
) -> tuple[int, ...]:
    return tuple(
        [value_text(v) for v in axes[a]].index(text) for a, text in zip(names, combo, strict=True)
    )


def _depends(every: Sequence[tuple[str, ...]], bad: set[tuple[str, ...]], index: int) -> bool:
    """Whether changing only axis ``index`` ever changes whether a cell passes."""
    groups: dict[tuple[str, ...], set[bool]] = {}
    for cell in every:
        rest = cell[:index] + cell[index + 1 :]
        groups.setdefault(rest, set()).add(cell in bad)
    return any(len(seen) > 1 for seen in groups.values())


def _is_number(value: AxisValue) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _clause(axis: str, values: Sequence[AxisValue], chosen: frozenset[str]) -> Clause:
    """``threads = 4`` (one value), ``threads > 1`` (a numeric axis whose chosen values are all
    above the others), ``batch < 8``, ``mode in {a, b}``."""
    inside = [v for v in values if value_text(v) in chosen]
    outside = [v for v in values if value_text(v) not in chosen]
    numeric = all(_is_number(v) for v in values)
    if len(inside) == 1:
        text = f"{axis} = {value_text(inside[0])}"
    elif numeric and outside and min(_num(v) for v in inside) > max(_num(v) for v in outside):
        text = f"{axis} > {value_text(max(outside, key=_num))}"
    elif numeric and outside and max(_num(v) for v in inside) < min(_num(v) for v in outside):
        text = f"{axis} < {value_text(min(outside, key=_num))}"
    else:
        text = f"{axis} in {{{', '.join(value_text(v) for v in inside)}}}"
    return Clause(axis, chosen, text)


def _num(value: AxisValue) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def explanation_line(
    axes: Mapping[str, Sequence[AxisValue]], verdicts: Mapping[str, Verdict], reference: str
) -> str:
    """The grid's line: which axes explain the cells that do not pass ("differs whenever
    threads > 1, whatever the batch"), and, where some cells are INCONCLUSIVE, which ones
    could not be judged. ``verdicts`` maps each cell's name to its verdict."""
    found = cells(axes)
    by_name = {c.name: c for c in found}

    def tuples(words: set[Verdict]) -> set[tuple[str, ...]]:
        return {
            tuple(value_text(v) for v in by_name[name].key())
            for name, verdict in verdicts.items()
            if name in by_name and Verdict.parse(verdict) in words
        }

    ref_verdict = Verdict.parse(verdicts.get(reference))
    if ref_verdict == Verdict.INCONCLUSIVE:
        return (
            f"the reference cell {reference} is not repeatable, so no cell can be judged against it"
        )
    failing = tuples({Verdict.FAIL, Verdict.INCONCLUSIVE})
    if not failing:
        lossy = tuples({Verdict.LOSSY_PASS})
        how = "within tolerance" if lossy else "bit for bit"
        return f"every cell matches the reference ({reference}) {how}"
    line = explain(axes, failing).text("differs")
    unrepeatable = tuples({Verdict.INCONCLUSIVE})
    if unrepeatable and unrepeatable != failing:
        line += "; " + explain(axes, unrepeatable).text("not repeatable")
    elif unrepeatable:
        line += " (its own runs disagree: not repeatable)"
    return line


# ------------------------------------------------------------------ what the test expects

#: An expected grid: one verdict word for the whole grid, or ``{cell name: word}`` (a cell not
#: named is expected to pass: PASS or LOSSY-PASS).
Expected = str | dict[str, str]
_PASSES = (Verdict.PASS.value, Verdict.LOSSY_PASS.value)


def expected_grid(expect: object, found: Sequence[Cell]) -> Expected | None:
    """``expect=`` of ``lossless.matrix``, checked: one verdict for the grid, or a mapping of
    cells (by name, tuple of values or mapping of axes) to verdicts, normalised to names."""
    if expect is None:
        return None
    if isinstance(expect, Mapping):
        return {
            find_cell(found, key, "lossless.matrix(expect)").name: _word(word, key)
            for key, word in expect.items()
        }
    return _word(expect, None)


def _word(word: object, key: object) -> str:
    verdict = Verdict.parse(word)
    if verdict is None:
        where = "lossless.matrix(expect)" + ("" if key is None else f"[{key!r}]")
        raise ConfigError(where, word, "give PASS, LOSSY-PASS, FAIL or INCONCLUSIVE")
    return verdict.value


def unmet(expected: Expected, grid: Grid) -> list[str]:
    """What of ``expected`` the grid does not give: one line per cell (or for the grid)."""
    if isinstance(expected, str):
        got = grid.verdict.value
        return [] if got == expected else [f"the grid: expected {expected}, got {got}"]
    lines = []
    for cell in grid.cells:
        want = expected.get(cell.name)
        got = cell.verdict.value
        if want is None and got not in _PASSES:
            lines.append(f"{cell.name}: expected a pass (not named in expect), got {got}")
        elif want is not None and want != got:
            lines.append(f"{cell.name}: expected {want}, got {got}")
    return lines
