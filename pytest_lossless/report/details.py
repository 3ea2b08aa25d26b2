"""What the report shows under a row: the receipt's block for it, read back and drawn.

A row of the verdict table names a test and a check; the test's receipt holds the evidence: a
golden gate's ``GateResult`` with its golden and obtained files, a lossless comparison's runs
and pairwise comparisons, a speed gate's samples. :func:`match_rows` pairs rows with those
blocks and :class:`Details` turns each into :mod:`.blocks` (text, tables, pictures, copies of
the diagnostic files the gates wrote, so that they outlive pytest's temporary folders).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from .. import media
from ..core.digests import sha256_file
from ..errors import LosslessError
from ..evidence.receipts import ReceiptRecord
from .blocks import Assets, Block, Detail, Files, Pre, Side, Svg, Table, Text, mapping
from .charts import speed_svg
from .mismatch import draw
from .table import Row

#: Failing results drawn per lossless comparison.
COMPARISONS_DRAWN = 2


class Found(NamedTuple):
    """A row's receipt block (``kind``: gate, lossless, speed, matrix or matrix-cell) and the
    test's server runs; for a matrix cell's row, the block is its grid and ``cell`` its name."""

    kind: str
    block: Mapping[str, Any]
    servers: tuple[Mapping[str, Any], ...] = ()
    cell: str | None = None


def is_speed(row: Row) -> bool:
    return row.check.startswith("speed ") and row.gate.startswith("ratio <=")


def needs_receipt(row: Row) -> bool:
    """Whether the row gets a section (a failure, INCONCLUSIVE, an error, or a speed gate,
    whatever its verdict: its plot); a passing gate is shown by its row alone."""
    return is_speed(row) or not row.quiet


def drawn(row: Row, found: Found | None) -> bool:
    """Whether the row gets a section: :func:`needs_receipt`, or a determinism matrix's own row
    (its grid is drawn whatever its verdict)."""
    return needs_receipt(row) or (found is not None and found.kind == "matrix")


class _Blocks:
    """One receipt's blocks, handed out to its rows in the order the test recorded them."""

    def __init__(self, receipt: ReceiptRecord) -> None:
        self.gates = list(receipt.block("gates"))
        self.lossless = list(receipt.block("lossless"))
        self.speed = list(receipt.block("speed"))
        self.matrix = list(receipt.block("matrix"))
        self.servers = tuple(r for r in receipt.block("runs") if r.get("kind") == "server")

    def take(self, row: Row) -> Found | None:
        if is_speed(row):
            return Found("speed", self.speed.pop(0), self.servers) if self.speed else None
        for n, entry in enumerate(self.lossless):
            if entry.get("label") == row.check:
                return Found("lossless", self.lossless.pop(n), self.servers)
        for n, entry in enumerate(self.gates):
            if entry.get("artifact") == row.check:
                return Found("gate", self.gates.pop(n), self.servers)
        for grid in self.matrix:  # a matrix's row (its label), or one of its cells' rows
            label = str(grid.get("label"))
            if row.check == label:
                return Found("matrix", grid, self.servers)
            if row.check.startswith(label + ": "):
                cell = row.check[len(label) + 2 :]
                return Found("matrix-cell", grid, self.servers, cell)
        return None


def match_rows(rows: Sequence[Row], receipts: Mapping[str, ReceiptRecord]) -> list[Found | None]:
    """For each row (in the order the tests recorded them), its receipt block, if any."""
    blocks = {test: _Blocks(receipt) for test, receipt in receipts.items()}
    return [blocks[row.test].take(row) if row.test in blocks else None for row in rows]


class Details:
    """Builds the section of each row that needs one, drawing into ``assets``."""

    def __init__(
        self,
        assets: Assets,
        *,
        limits: media.MediaLimits | None = None,
        root: Path | None = None,
        store: Path | None = None,
    ) -> None:
        self.assets = assets
        self.limits = limits or media.MediaLimits.from_env()
        self.root = root
        #: The content-addressed store (``lossless_store``): the pixels of digest-only goldens.
        self.store = store

    def build(self, anchor: str, row: Row, found: Found | None) -> Detail:
        detail = Detail(anchor, row)
        try:
            if found is None:
                detail.blocks.append(Text("the test's receipt holds no block for this check"))
            elif found[0] == "speed":
                detail.blocks += self._speed(row, found[1])
            elif found[0] == "lossless":
                detail.blocks += self._lossless(row, found[1])
            elif found[0] == "matrix":
                from .grid import grid_blocks

                detail.blocks += grid_blocks(found[1])
            elif found[0] == "matrix-cell":
                detail.blocks += self._matrix_cell(row, found[1], str(found.cell))
            else:
                detail.blocks += self._gate(row, found[1])
        except Exception as exc:  # one row that cannot be drawn must not lose the others
            detail.blocks.append(
                Text(f"this section could not be drawn: {type(exc).__name__}: {exc}")
            )
        if found is not None:
            detail.blocks += [Text(server_line(run)) for run in found.servers]
        return detail

    def _draw(self, result: Mapping[str, Any], left: Side, right: Side, stem: str) -> list[Block]:
        return draw(result, left, right, assets=self.assets, limits=self.limits, stem=stem)

    def _files(self, paths: Iterable[object]) -> list[Block]:
        entries = [self.assets.copy(p) for p in paths if isinstance(p, str)]
        return [Files(entries)] if entries else []

    # -------------------------------------------------------------- golden gates

    def _gate(self, row: Row, entry: Mapping[str, Any]) -> list[Block]:
        if "error" in entry:
            message = str(entry.get("message") or "")
            if not message.strip() or message.strip() in row.detail:
                return []  # the table's row says it all: said once, not again below it
            return [Text(f"raised {entry.get('error')}"), Pre(message)]
        from ..gates import GateResult

        result = GateResult.from_dict(dict(entry))
        evidence = mapping(entry.get("evidence"))
        left = self._golden_side(result.artifact, mapping(evidence.get("golden")))
        right = _obtained_side(result.diagnostic_files, mapping(evidence.get("obtained")))
        blocks = self._draw(entry, left, right, f"{row.test}-{row.check}")
        blocks.append(Pre(result.message()))
        return blocks + self._files(result.diagnostic_files)

    def _golden_side(self, name: str, golden: Mapping[str, Any]) -> Side:
        fingerprint = mapping(golden.get("fingerprint"))
        folder = golden.get("folder")
        if golden.get("stored") == "digest":
            return stored_side(self.store, golden.get("sha256"), fingerprint)
        if not isinstance(folder, str):
            return Side("golden", None, fingerprint, "the receipt names no golden folder")
        from ..goldens.manifest import read_manifest

        try:
            entry = read_manifest(Path(folder), root=self.root).get(name)
        except (LosslessError, OSError) as exc:
            return Side("golden", None, fingerprint, f"the golden could not be read: {exc}")
        if entry is None or entry.file is None:
            return Side("golden", None, fingerprint, "the golden is no longer in its manifest")
        path = Path(folder) / entry.file
        if not same_file(path, golden.get("sha256")):
            return Side("golden", None, fingerprint, f"{path} changed since the comparison")
        return Side("golden", path, fingerprint)

    # -------------------------------------------------------------- lossless comparisons

    def _lossless(self, row: Row, entry: Mapping[str, Any]) -> list[Block]:
        runs = {str(r.get("name")): r for r in entry.get("runs") or [] if isinstance(r, Mapping)}
        controls = [c for c in entry.get("control_comparisons") or [] if isinstance(c, Mapping)]
        candidate = mapping(entry.get("candidate_comparison"))
        blocks: list[Block] = []
        if entry.get("control_repeatable") is False:
            blocks.append(
                Text(
                    "INCONCLUSIVE: the control is not repeatable, so no candidate can be judged "
                    "against it. Which runs differed, and where:"
                )
            )
            differing = [c for c in controls if not _identical(c)]
        else:
            differing = [candidate] if candidate and not _identical(candidate) else []
            if differing:
                blocks.append(Text("The control is repeatable, but the candidate differs from it:"))
            proof = mapping(entry.get("proof"))
            if proof and str(entry.get("verdict")) == "INCONCLUSIVE":
                from ..compare.proof import Finding, reason

                findings = [
                    Finding.from_json(f) for f in proof.get("runs") or [] if isinstance(f, Mapping)
                ]
                blocks.append(Text(f"INCONCLUSIVE: {reason(findings)} (rule {proof.get('rule')})"))
        blocks += _where_table(differing)
        blocks += _divergence(mapping(entry.get("divergence")))
        blocks.append(
            Table(
                ("run", "role", "seconds", "artifacts (digest)"),
                [_run_row(r) for r in runs.values()],
            )
        )
        return blocks + self._drawn(row, runs, differing)

    def _drawn(
        self, row: Row, runs: Mapping[str, Any], differing: list[Mapping[str, Any]]
    ) -> list[Block]:
        """The first :data:`COMPARISONS_DRAWN` failing results of ``differing``, each drawn
        side by side from the two runs it compared, with its diagnostic files."""
        blocks: list[Block] = []
        drawn = [(c, r) for c in differing for r in _failing(c)][:COMPARISONS_DRAWN]
        for comparison, result in drawn:
            name = str(result.get("artifact"))
            left = _run_side(runs, str(comparison.get("left")), name)
            right = _run_side(runs, str(comparison.get("right")), name)
            blocks.append(Text(f"{name}: {left.label} vs {right.label}"))
            blocks += self._draw(result, left, right, f"{row.test}-{row.check}-{name}")
            blocks += self._files(result.get("diagnostic_files") or [])
        return blocks

    # -------------------------------------------------------------- determinism matrix cells

    def _matrix_cell(self, row: Row, grid: Mapping[str, Any], name: str) -> list[Block]:
        """One cell of a matrix: its place in the grid, its runs, and where it differs (from
        its own first run when it is not repeatable, else from the reference's first run)."""
        from .grid import find_cell, grid_table

        cell = find_cell(grid, name)
        if cell is None:
            return [Text("the receipt's matrix holds no such cell")]
        reference = find_cell(grid, str(grid.get("reference"))) or {}
        runs = {
            str(r.get("name")): r
            for c in (cell, reference)
            for r in c.get("runs") or []
            if isinstance(r, Mapping)
        }
        repeats = [c for c in cell.get("repeat_comparisons") or [] if isinstance(c, Mapping)]
        against = mapping(cell.get("reference_comparison"))
        if cell.get("repeatable") is False:
            lead = "its own runs disagree, so it cannot be judged. Which runs differed, and where:"
            differing = [c for c in repeats if not _identical(c)]
        else:
            differing = [against] if against and not _identical(against) else []
            lead = f"it differs from the reference cell {grid.get('reference')}:"
        blocks: list[Block] = [Text(f"{cell.get('name')}: {cell.get('verdict')}: {lead}")]
        table = grid_table(grid)
        if table is not None:
            blocks.append(table)
        blocks += _where_table(differing)
        blocks += _divergence(mapping(cell.get("divergence")))  # lossless.matrix(trace=True)
        shown = [dict(r, role="cell") for r in cell.get("runs") or [] if isinstance(r, Mapping)]
        first = (reference.get("runs") or [None])[0]
        if isinstance(first, Mapping) and cell is not reference:
            shown.insert(0, dict(first, role="reference"))
        blocks.append(
            Table(("run", "role", "seconds", "artifacts (digest)"), [_run_row(r) for r in shown])
        )
        return blocks + self._drawn(row, runs, differing)

    # -------------------------------------------------------------- speed gates

    def _speed(self, row: Row, entry: Mapping[str, Any]) -> list[Block]:
        samples = [s for s in entry.get("samples") or [] if isinstance(s, Mapping)]
        ci = entry.get("ci")
        bounds = [_float(v) for v in ci] if isinstance(ci, list) and len(ci) == 2 else []
        interval = [b for b in bounds if b is not None] if None not in bounds else []
        target = _float(entry.get("target_ratio"))
        if target is None:
            target = 1 - (_float(entry.get("target")) or 0.0)
        chart = speed_svg(
            samples, ratio=_float(entry.get("ratio")), ci=interval or None, target_ratio=target
        )
        errors = sum(1 for s in samples if s.get("error") is not None)
        blocks_run = len({s.get("block") for s in samples})
        caption = (
            f"{len(samples)} measured arms in {blocks_run} blocks ({entry.get('design')}, seed "
            f"{entry.get('seed')}): seconds per arm, then each block's candidate/control ratio; "
            "the blue line is the estimate, the band its interval, the dashed red line the "
            f"target (ratio <= {target:.3f})"
        )
        if errors:
            caption += f"; {errors} arms raised (the crosses)"
        return [
            Svg(chart, f"{row.check}: {entry.get('verdict')}: {caption}"),
            Pre(str(entry.get("message") or entry.get("reason") or "")),
            *_stages(mapping(entry.get("stages"))),
        ]


# ------------------------------------------------------------------ traces


def _divergence(found: Mapping[str, Any]) -> list[Block]:
    """Where two traced runs part (``lossless.compare(trace=True)``): the lines, then the curve
    of how the difference grows over the trace."""
    if not found:
        return []
    pair = " vs ".join(str(x) for x in found.get("between") or [])
    if found.get("error"):
        return [Text(f"Trace ({pair}): {found['error']}")]
    lines = [str(x) for x in found.get("lines") or [found.get("headline", "")]]
    blocks: list[Block] = [Text(f"Trace ({pair}): where the two runs part"), Pre("\n".join(lines))]
    growth = [g for g in found.get("growth") or [] if isinstance(g, Mapping)]
    if len(growth) > 1:
        caption = (
            f"After the first divergence ({pair}), each aligned tensor in trace order: the share "
            "of its elements that differ (blue, left scale) and log10(1 + largest ULP distance) "
            "(orange, right scale); hover a point for its name and stage"
        )
        blocks.append(Svg(growth_svg(growth), caption, "divergence-growth"))
    return blocks


def _stages(found: Mapping[str, Any]) -> list[Block]:
    """Where the time went (``speed_gate(trace=True)``): one row per stage, from one traced run
    of each arm apart from the timed ones."""
    if not found:
        return []
    if found.get("error"):
        return [Text(f"Stage times: {found['error']}")]

    def seconds(value: object) -> str:
        number = _float(value)
        return "-" if number is None else f"{number:.4f}"

    rows = [
        (
            str(r.get("stage")),
            seconds(r.get("control_seconds")),
            seconds(r.get("candidate_seconds")),
            "-" if _float(r.get("ratio")) is None else f"{_float(r.get('ratio')):.3f}",
        )
        for r in found.get("rows") or []
        if isinstance(r, Mapping)
    ]
    return [
        Text("Stage times, from one traced run of each arm (not the timed runs):"),
        Table(("stage", "control s", "candidate s", "candidate/control"), rows),
    ]


def growth_svg(points: Sequence[Mapping[str, Any]], width: int = 640, height: int = 220) -> str:
    """An inline SVG of the growth curve: the share of differing elements per aligned tensor,
    and the largest ULP distance on a log scale (both from the divergence record)."""
    from html import escape

    left, right, top, bottom = 48, 48, 12, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(points)

    def x(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    shares: list[float | None] = []
    steps: list[float | None] = []
    for p in points:
        total, differing = _float(p.get("total")), _float(p.get("differing"))
        shares.append(differing / total if total and differing is not None else None)
        ulp = _float(p.get("max_ulp"))
        steps.append(math.log10(1 + ulp) if ulp is not None else None)
    top_steps = max([s for s in steps if s is not None] or [1.0]) or 1.0

    def line(values: list[float | None], scale: float, colour: str) -> str:
        coords = [
            f"{x(i):.1f},{top + plot_h * (1 - v / scale):.1f}"
            for i, v in enumerate(values)
            if v is not None
        ]
        if not coords:
            return ""
        return (
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
            f'points="{" ".join(coords)}"/>'
        )

    dots = []
    for i, (p, share) in enumerate(zip(points, shares, strict=True)):
        label = f"{p.get('name')}#{p.get('occurrence')} {p.get('stage') or ''}".strip()
        y = top + plot_h * (1 - (share if share is not None else 0.0))
        what = "identical" if p.get("identical") else (
            f"{p.get('differing')} of {p.get('total')} differ, largest {p.get('max_ulp')} ulps"
        )  # fmt: skip
        dots.append(
            f'<circle cx="{x(i):.1f}" cy="{y:.1f}" r="2.5" fill="#1f77b4">'
            f"<title>{escape(label)}: {escape(what)}</title></circle>"
        )
    axes = (
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#888"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#888"/>'
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end" font-size="10">100%</text>'
        f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end" font-size="10">0%</text>'
        f'<text x="{left + plot_w + 4}" y="{top + 4}" font-size="10">{top_steps:.1f}</text>'
        f'<text x="{left}" y="{height - 8}" font-size="10">'
        f"{escape(str(points[0].get('name')))}</text>"
        f'<text x="{left + plot_w}" y="{height - 8}" text-anchor="end" font-size="10">'
        f"{n} tensors</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">{axes}'
        f"{line(steps, top_steps, '#ff7f0e')}{line(shares, 1.0, '#1f77b4')}{''.join(dots)}</svg>"
    )


# ------------------------------------------------------------------ server runs


def _bytes(value: object) -> str:
    n = _float(value)
    if n is None:
        return "?"
    if n < 1024:
        return f"{n:.0f} B"
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def server_line(run: Mapping[str, Any]) -> str:
    """One server run in a line: its requests, failed ones (by status), bytes each way, the
    readiness cadence and the peak device memory, as its record says (read, not trusted)."""
    totals = mapping(run.get("request_totals"))
    parts = [str(run.get("name"))]
    if totals:
        statuses = mapping(totals.get("statuses"))
        bad = [f"{k} x{v}" for k, v in sorted(statuses.items()) if not str(k).startswith("2")]
        failed = f"{totals.get('failed')} failed" + (f" ({', '.join(bad)})" if bad else "")
        omitted = mapping(totals.get("omitted")).get("requests")
        kept = f", {omitted} beyond the {totals.get('limit')} kept records" if omitted else ""
        parts.append(
            f"{totals.get('requests')} requests, {failed}, {_bytes(totals.get('bytes_sent'))} "
            f"sent, {_bytes(totals.get('bytes_received'))} received{kept}"
        )
    else:
        requests = run.get("requests")
        parts.append(f"{len(requests) if isinstance(requests, list) else 0} requests recorded")
    readiness = mapping(run.get("readiness"))
    share = _float(readiness.get("probe_share"))
    if readiness.get("ready_seconds") is not None:
        parts.append(
            f"ready after {_float(readiness.get('ready_seconds')) or 0:.2f} s, "
            f"{readiness.get('probes')} probes {readiness.get('interval_seconds')} s apart"
            + (f" (up to {share:.0%} of the startup is the probe's)" if share is not None else "")
        )
    memory = mapping(run.get("device_memory"))
    if "unavailable" in memory:
        parts.append(f"peak device memory: unavailable ({memory.get('unavailable')})")
    elif _float(memory.get("peak_mib")) is not None:
        parts.append(
            f"peak device memory {_float(memory.get('peak_mib')):.0f} MiB "
            f"({memory.get('source')}, {memory.get('samples')} samples)"
        )
    return "; ".join(parts)


# ------------------------------------------------------------------ helpers


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def same_file(path: Path, sha256: object) -> bool:
    """Whether ``path`` is a regular file (not a link) with the recorded SHA-256 (if any)."""
    try:
        if path.is_symlink() or not path.is_file():
            return False
        return not isinstance(sha256, str) or sha256_file(path) == sha256
    except OSError:
        return False


def stored_side(store: Path | None, sha256: object, fingerprint: Mapping[str, Any]) -> Side:
    """The golden side of a digest-only golden: its file from the content store, hashed first."""
    if store is None:
        why = "kept as digests only: the golden pixels were not kept (no lossless_store)"
        return Side("golden", None, fingerprint, why)
    from ..goldens.store import ContentStore, StoreError

    try:
        path = ContentStore(store).get(str(sha256))
    except StoreError as exc:
        return Side("golden", None, fingerprint, f"the stored golden is refused: {exc}")
    if path is None:
        why = f"the golden is kept as digests only, and the store {store} holds no copy of it"
        return Side("golden", None, fingerprint, why)
    return Side("golden", path, fingerprint)


def _obtained_side(diagnostic_files: Sequence[str], obtained: Mapping[str, Any]) -> Side:
    fingerprint = mapping(obtained.get("fingerprint"))
    kept = [p for p in diagnostic_files if Path(p).parent.name == "obtained-for-upload"]
    for candidate in [obtained.get("path"), *kept]:
        if isinstance(candidate, str) and same_file(Path(candidate), obtained.get("sha256")):
            return Side("obtained", Path(candidate), fingerprint)
    where = obtained.get("path") or "(no path recorded)"
    why = f"the obtained file is gone (pytest's temporary folder was removed): {where}"
    return Side("obtained", None, fingerprint, why)


def _identical(comparison: Mapping[str, Any]) -> bool:
    results = comparison.get("results") or []
    return not comparison.get("missing") and all(
        isinstance(r, Mapping) and r.get("passed") for r in results
    )


def _failing(comparison: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        r for r in comparison.get("results") or [] if isinstance(r, Mapping) and not r.get("passed")
    ]


def _pair(comparison: Mapping[str, Any]) -> str:
    return f"{comparison.get('left')} vs {comparison.get('right')}"


def _where_table(differing: list[Mapping[str, Any]]) -> list[Block]:
    """Where each differing comparison first differs, and artifacts only one run made."""
    where = [_where(c, r) for c in differing for r in _failing(c)]
    where += [
        (_pair(c), str(name), "present in one run only", "")
        for c in differing
        for name in c.get("missing") or []
    ]
    return [Table(("runs", "artifact", "first difference", "how many"), where)] if where else []


def _where(comparison: Mapping[str, Any], result: Mapping[str, Any]) -> tuple[str, ...]:
    first = result.get("first_mismatch") or "; ".join(map(str, result.get("metadata_diffs") or []))
    count = f"{result.get('mismatch_count')} of {result.get('total')} {result.get('unit')}s"
    return _pair(comparison), str(result.get("artifact")), str(first or "differs"), count


def _digest(fingerprint: Mapping[str, Any]) -> str:
    for key in ("pcm_sha256", "data_sha256", "sha256"):
        value = fingerprint.get(key)
        if isinstance(value, str):
            return value[:12]
    return "-"


def _run_row(run: Mapping[str, Any]) -> tuple[str, ...]:
    artifacts = mapping(run.get("artifacts"))
    seconds = _float(run.get("seconds"))
    digests = ", ".join(
        f"{name}: {_digest(mapping(mapping(a).get('fingerprint')))}"
        for name, a in sorted(artifacts.items())
    )
    return (
        str(run.get("name")),
        str(run.get("role")),
        "-" if seconds is None else f"{seconds:.3f}",
        digests,
    )


def _run_side(runs: Mapping[str, Mapping[str, Any]], run: str, name: str) -> Side:
    artifact = mapping(mapping(mapping(runs.get(run)).get("artifacts")).get(name))
    fingerprint = mapping(artifact.get("fingerprint"))
    path = artifact.get("path")
    if isinstance(path, str) and same_file(Path(path), fingerprint.get("sha256")):
        return Side(run, Path(path), fingerprint)
    why = f"its file is gone (pytest's temporary folder was removed): {path}"
    return Side(run, None, fingerprint, why)
