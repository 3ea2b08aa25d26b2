"""What a session reports: the terminal table and lines, and the HTML report with its pictures.

``table`` holds the terminal's verdict table and summary lines (pure text, re-exported here so
that ``report.Row`` and ``report.verdict_table`` read as before); ``html`` writes the static
page (``report/index.html`` beside the receipts) and ``pictures`` draws what it shows. The page
and its pictures load numpy and media only when a report is written.
"""

from __future__ import annotations

from .table import (
    Row,
    counts_line,
    events_from,
    evidence_line,
    gate_row,
    outcome_row,
    speed_row,
    update_lines,
    verdict_table,
)

__all__ = [
    "Row",
    "counts_line",
    "events_from",
    "evidence_line",
    "gate_row",
    "outcome_row",
    "speed_row",
    "update_lines",
    "verdict_table",
]
