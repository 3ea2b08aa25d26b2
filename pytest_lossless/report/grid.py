"""The determinism matrix (#24) in the report: the grid drawn as a table of verdicts.

Rows are the settings of every axis but the last, columns the last axis's values, so a knob
that breaks equality shows as a column (or a band of rows) of FAIL or INCONCLUSIVE. Built from
the receipt's ``matrix`` block alone (receipts are read, not trusted: anything malformed is
shown as it is, never raised).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

from ..compare.matrix import CellResult, Grid
from ..core.records import from_json, json_object
from ..errors import LosslessError
from .blocks import Block, Table, Text


def _text(value: object) -> str:
    from ..compare.matrix import value_text

    if value is None or isinstance(value, (str, int, float, bool)):
        return value_text(value)
    return str(value)


def read_grid(data: object, problems: list[str]) -> Grid | None:
    """A receipt's ``matrix`` entry read leniently (what does not fit is noted in
    ``problems``), its reference cell found among its cells by the name written; None, with
    why, when not even that makes a grid (no axes to explain it by)."""
    try:
        grid = from_json(Grid, data, problems=problems)
    except (LosslessError, LookupError, TypeError, ValueError) as exc:
        problems.append(f"Grid: {exc}")
        return None
    name = json_object(data).get("reference")
    found = next((c.cell for c in grid.cells if c.name == name), None)
    if found is None:
        problems.append(f"Grid.reference: no cell is named {name!r}")
        return grid
    return replace(grid, reference=found)


def grid_table(grid: Grid) -> Table | None:
    """The grid as a table: one row per setting of the leading axes, one column per value of
    the last; each cell holds its verdict (the reference cell is marked ``(reference)``)."""
    axes = grid.axes
    if not axes or not all(values for values in axes.values()):
        return None
    names = list(axes)
    verdicts = grid.verdicts
    reference = grid.reference_name
    *leading, last = names

    def name(values: Sequence[object]) -> str:
        return ", ".join(f"{a}={_text(v)}" for a, v in zip(names, values, strict=True))

    head = (" / ".join(leading) + " \\ " + last if leading else last, *map(_text, axes[last]))
    rows = []
    for prefix in itertools.product(*(axes[a] for a in leading)):
        label = ", ".join(f"{a}={_text(v)}" for a, v in zip(leading, prefix, strict=True))
        line = [label or "-"]
        for value in axes[last]:
            cell = name([*prefix, value])
            mark = " (reference)" if cell == reference else ""
            line.append(f"{verdicts.get(cell, '-')}{mark}")
        rows.append(tuple(line))
    return Table(head, rows)


def grid_blocks(grid: Grid) -> list[Block]:
    """The grid's section: its explanation line, the grid, and every cell's verdict."""
    blocks: list[Block] = [Text(grid.explanation)]
    table = grid_table(grid)
    if table is not None:
        blocks.append(table)
    gates = ", ".join(sorted(set(grid.gates.values()))) or "-"
    blocks.append(
        Text(
            f"each cell ran {grid.runs} times and was compared with the reference cell "
            f"{grid.reference_name} (gates: {gates})"
        )
    )
    return blocks


def find_cell(grid: Grid, name: str) -> CellResult | None:
    """The cell of ``grid`` named ``name`` (as its row names it), or None."""
    return next((c for c in grid.cells if c.name == name), None)
