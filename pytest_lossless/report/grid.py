"""The determinism matrix (#24) in the report: the grid drawn as a table of verdicts.

Rows are the settings of every axis but the last, columns the last axis's values, so a knob
that breaks equality shows as a column (or a band of rows) of FAIL or INCONCLUSIVE. Built from
the receipt's ``matrix`` block alone (receipts are read, not trusted: anything malformed is
shown as it is, never raised).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from .blocks import Block, Table, Text, mapping


def _text(value: object) -> str:
    from ..compare.matrix import value_text

    if value is None or isinstance(value, (str, int, float, bool)):
        return value_text(value)
    return str(value)


def grid_table(grid: Mapping[str, Any]) -> Table | None:
    """The grid as a table: one row per setting of the leading axes, one column per value of
    the last; each cell holds its verdict (the reference cell is marked ``(reference)``)."""
    axes = mapping(grid.get("axes"))
    if not axes or not all(isinstance(v, list) and v for v in axes.values()):
        return None
    names = list(axes)
    verdicts: dict[str, str] = {}
    for cell in grid.get("cells") or []:
        if isinstance(cell, Mapping):
            verdicts[str(cell.get("name"))] = str(cell.get("verdict"))
    reference = str(grid.get("reference"))
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
            line.append(verdicts.get(cell, "-") + (" (reference)" if cell == reference else ""))
        rows.append(tuple(line))
    return Table(head, rows)


def grid_blocks(grid: Mapping[str, Any]) -> list[Block]:
    """The grid's section: its explanation line, the grid, and every cell's verdict."""
    blocks: list[Block] = [Text(str(grid.get("explanation") or ""))]
    table = grid_table(grid)
    if table is not None:
        blocks.append(table)
    runs = grid.get("runs_per_cell")
    gates = ", ".join(sorted({str(g) for g in mapping(grid.get("gates")).values()})) or "-"
    blocks.append(
        Text(
            f"each cell ran {runs} times and was compared with the reference cell "
            f"{grid.get('reference')} (gates: {gates})"
        )
    )
    return blocks


def find_cell(grid: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for cell in grid.get("cells") or []:
        if isinstance(cell, Mapping) and cell.get("name") == name:
            return cell
    return None
