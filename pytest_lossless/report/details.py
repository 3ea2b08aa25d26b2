"""What the report shows under a row: the receipt's block for it, read back and drawn.

A row of the verdict table names a test and a check; the test's receipt holds the evidence: a
golden gate's ``GateResult`` with its golden and obtained files, a lossless comparison's runs
and pairwise comparisons, a speed gate's samples. :func:`match_rows` pairs rows with those
blocks and :class:`Details` turns each into :mod:`.blocks` (text, tables, pictures, copies of
the diagnostic files the gates wrote, so that they outlive pytest's temporary folders).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from .. import media
from ..compare.divergence import Departure, StageTimes, TensorDifference
from ..compare.matrix import Grid
from ..compare.repeatability import Comparison, LosslessVerdict, RunRecord
from ..core.digests import sha256_file
from ..core.records import JsonObject, json_object
from ..core.records import from_json as read_record
from ..core.verdict import Verdict
from ..errors import LosslessError
from ..evidence.receipts import ReceiptRecord
from ..gates.gate import GateResult
from ..goldens.folder import CheckEvidence, GoldenSide, ObtainedSide
from ..run import record as run_record
from ..speed.runner import SpeedVerdict
from .blocks import Assets, Block, Detail, Files, Pre, Side, Svg, Table, Text
from .charts import speed_svg
from .grid import find_cell, read_grid
from .mismatch import draw
from .table import Row

#: Failing results drawn per lossless comparison.
COMPARISONS_DRAWN = 2
_T = TypeVar("_T")


@dataclass(frozen=True)
class GateEntry:
    """A receipt's ``gates`` entry as the report reads it: the gate's result and the evidence
    of both sides, or the error its check raised (``error``: its label, with ``message``)."""

    result: GateResult | None
    evidence: CheckEvidence | None = None
    error: str | None = None
    message: str = ""


@dataclass(frozen=True)
class SpeedEntry:
    """A receipt's ``speed`` entry: the verdict with its samples, and the stage times beside."""

    verdict: SpeedVerdict
    stages: StageTimes | None = None


#: A receipt block read into its record (None: not even the lenient reading could make one).
ReadBlock = GateEntry | LosslessVerdict | SpeedEntry | Grid


def read_gate(data: object, problems: list[str]) -> GateEntry:
    entry = json_object(data)
    if "error" in entry:
        return GateEntry(
            None, error=str(entry.get("error")), message=str(entry.get("message") or "")
        )
    result = read_record(GateResult, entry, problems=problems)
    found = entry.get("evidence")
    evidence = None if found is None else read_record(CheckEvidence, found, problems=problems)
    return GateEntry(result, evidence)


def read_lossless(data: object, problems: list[str]) -> LosslessVerdict:
    return read_record(LosslessVerdict, data, problems=problems)


def read_speed(data: object, problems: list[str]) -> SpeedEntry:
    verdict = read_record(SpeedVerdict, data, problems=problems)
    stages = json_object(data).get("stages")
    found = None if stages is None else read_record(StageTimes, stages, problems=problems)
    return SpeedEntry(verdict, found)


def read_block(
    reader: Callable[[object, list[str]], _T], data: object
) -> tuple[_T | None, tuple[str, ...]]:
    """``data`` read by ``reader`` leniently (what does not fit is noted, and read as absent);
    a block even that cannot make a record of is None, with why: a receipt is read, not
    trusted, and one malformed block must not lose the report."""
    problems: list[str] = []
    try:
        return reader(data, problems), tuple(problems)
    except Exception as exc:  # a derived field of a hand-edited block: named, never raised
        return None, (*problems, f"{type(exc).__name__}: {exc}")


class Found(NamedTuple):
    """A row's receipt block (``kind``: gate, lossless, speed, matrix or matrix-cell), read into
    its record (None when unreadable; ``problems``: what the reading could not use), and the
    test's server runs; for a matrix cell's row, the block is its grid and ``cell`` its name."""

    kind: str
    block: ReadBlock | None
    servers: tuple[run_record.RunRecord, ...] = ()
    cell: str | None = None
    problems: tuple[str, ...] = ()


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
    """One receipt's blocks, each read once into its record, handed out to its rows in the
    order the test recorded them."""

    def __init__(self, receipt: ReceiptRecord) -> None:
        def read(name: str, reader: Callable[[object, list[str]], Any], key: str) -> list[Any]:
            return [(json_object(e).get(key), *read_block(reader, e)) for e in receipt.block(name)]

        self.gates = read("gates", read_gate, "artifact")
        self.lossless = read("lossless", read_lossless, "label")
        self.speed = read("speed", read_speed, "")
        self.matrix = read("matrix", read_grid, "label")
        self.servers = tuple(
            run_record.RunRecord.from_json(r)
            for r in receipt.block("runs")
            if r.get("kind") == "server"
        )

    def take(self, row: Row) -> Found | None:
        if is_speed(row):
            if not self.speed:
                return None
            _, block, problems = self.speed.pop(0)
            return Found("speed", block, self.servers, problems=problems)
        for kind, entries in (("lossless", self.lossless), ("gate", self.gates)):
            for n, (key, block, problems) in enumerate(entries):
                if key == row.check:
                    entries.pop(n)
                    return Found(kind, block, self.servers, problems=problems)
        for key, grid, problems in self.matrix:  # a matrix's row (its label), or a cell's row
            label = str(key)
            if row.check == label:
                return Found("matrix", grid, self.servers, problems=problems)
            if row.check.startswith(label + ": "):
                cell = row.check[len(label) + 2 :]
                return Found("matrix-cell", grid, self.servers, cell, problems)
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
            else:
                detail.blocks += self._section(row, found)
        except Exception as exc:  # one row that cannot be drawn must not lose the others
            detail.blocks.append(
                Text(f"this section could not be drawn: {type(exc).__name__}: {exc}")
            )
        if found is not None:
            detail.blocks += [Text(server_line(run)) for run in found.servers]
        return detail

    def _section(self, row: Row, found: Found) -> list[Block]:
        block = found.block
        blocks: list[Block] = []
        if found.problems:
            shown = "; ".join(found.problems[:5])
            more = f" (and {len(found.problems) - 5} more)" if len(found.problems) > 5 else ""
            blocks.append(Text(f"the receipt's block is read in part (edited?): {shown}{more}"))
        if block is None:
            blocks.append(Text("the receipt's block for this check could not be read"))
        if isinstance(block, SpeedEntry):
            blocks += self._speed(row, block)
        elif isinstance(block, LosslessVerdict):
            blocks += self._lossless(row, block)
        elif isinstance(block, Grid) and found.kind == "matrix":
            from .grid import grid_blocks

            blocks += grid_blocks(block)
        elif isinstance(block, Grid):
            blocks += self._matrix_cell(row, block, str(found.cell))
        elif isinstance(block, GateEntry):
            blocks += self._gate(row, block)
        return blocks

    def _draw(self, result: GateResult, left: Side, right: Side, stem: str) -> list[Block]:
        """The two sides drawn; a pair that cannot be (one side is not of the kind the other
        is: a tensor and an error page) is named in their place, so the rest of the section
        (where they differ, the runs) stays."""
        try:
            return draw(result, left, right, assets=self.assets, limits=self.limits, stem=stem)
        except (LosslessError, OSError) as exc:
            return [Text(f"not drawn: {exc}")]

    def _files(self, paths: Iterable[object]) -> list[Block]:
        entries = [self.assets.copy(p) for p in paths if isinstance(p, str)]
        return [Files(entries)] if entries else []

    # -------------------------------------------------------------- golden gates

    def _gate(self, row: Row, entry: GateEntry) -> list[Block]:
        result = entry.result
        if result is None:
            message = entry.message
            if not message.strip() or message.strip() in row.detail:
                return []  # the table's row says it all: said once, not again below it
            return [Text(f"raised {entry.error}"), Pre(message)]
        evidence = entry.evidence
        left = self._golden_side(result.artifact, None if evidence is None else evidence.golden)
        right = _obtained_side(
            result.diagnostic_files, None if evidence is None else evidence.obtained
        )
        blocks = self._draw(result, left, right, f"{row.test}-{row.check}")
        blocks.append(Pre(result.message()))
        return blocks + self._files(result.diagnostic_files)

    def _golden_side(self, name: str, golden: GoldenSide | None) -> Side:
        fingerprint = json_object(golden.fingerprint) if golden is not None else {}
        if golden is not None and golden.stored == "digest":
            return stored_side(self.store, golden.sha256, fingerprint)
        if golden is None or not golden.folder:
            return Side("golden", None, fingerprint, "the receipt names no golden folder")
        from ..goldens.manifest import read_manifest

        folder = golden.folder
        try:
            entry = read_manifest(Path(folder), root=self.root).get(name)
        except (LosslessError, OSError) as exc:
            return Side("golden", None, fingerprint, f"the golden could not be read: {exc}")
        if entry is None or entry.file is None:
            return Side("golden", None, fingerprint, "the golden is no longer in its manifest")
        path = Path(folder) / entry.file
        if not same_file(path, golden.sha256):
            return Side("golden", None, fingerprint, f"{path} changed since the comparison")
        return Side("golden", path, fingerprint)

    # -------------------------------------------------------------- lossless comparisons

    def _lossless(self, row: Row, verdict: LosslessVerdict) -> list[Block]:
        runs = {r.name: r for r in verdict.runs}
        candidate = verdict.candidate_comparison
        blocks: list[Block] = []
        if not verdict.control_repeatable:
            blocks.append(
                Text(
                    "INCONCLUSIVE: the control is not repeatable, so no candidate can be judged "
                    "against it. Which runs differed, and where:"
                )
            )
            differing = [c for c in verdict.control_comparisons if not c.identical]
        else:
            differing = [candidate] if candidate is not None and not candidate.identical else []
            if differing:
                blocks.append(Text("The control is repeatable, but the candidate differs from it:"))
            proof = verdict.proof
            if proof is not None and verdict.verdict == Verdict.INCONCLUSIVE:
                from ..compare.proof import reason

                blocks.append(Text(f"INCONCLUSIVE: {reason(proof.runs)} (rule {proof.rule})"))
        blocks += _where_table(differing)
        blocks += _divergence(verdict.divergence)
        blocks.append(
            Table(
                ("run", "role", "seconds", "artifacts (digest)"),
                [_run_row(r) for r in runs.values()],
            )
        )
        return blocks + self._drawn(row, runs, differing)

    def _drawn(
        self, row: Row, runs: Mapping[str, RunRecord], differing: list[Comparison]
    ) -> list[Block]:
        """The first :data:`COMPARISONS_DRAWN` failing results of ``differing``, each drawn
        side by side from the two runs it compared, with its diagnostic files."""
        blocks: list[Block] = []
        drawn = [(c, r) for c in differing for r in c.results if not r.passed]
        for comparison, result in drawn[:COMPARISONS_DRAWN]:
            name = result.artifact
            left = _run_side(runs, comparison.left, name)
            right = _run_side(runs, comparison.right, name)
            blocks.append(Text(f"{name}: {left.label} vs {right.label}"))
            blocks += self._draw(result, left, right, f"{row.test}-{row.check}-{name}")
            blocks += self._files(result.diagnostic_files)
        return blocks

    # -------------------------------------------------------------- determinism matrix cells

    def _matrix_cell(self, row: Row, grid: Grid, name: str) -> list[Block]:
        """One cell of a matrix: its place in the grid, its runs, and where it differs (from
        its own first run when it is not repeatable, else from the reference's first run)."""
        from .grid import grid_table

        cell = find_cell(grid, name)
        if cell is None:
            return [Text("the receipt's matrix holds no such cell")]
        reference = find_cell(grid, grid.reference_name)
        runs = {r.name: r for c in (cell, reference) if c is not None for r in c.runs}
        against = cell.reference_comparison
        if not cell.repeatable:
            lead = "its own runs disagree, so it cannot be judged. Which runs differed, and where:"
            differing = [c for c in cell.repeat_comparisons if not c.identical]
        else:
            differing = [against] if against is not None and not against.identical else []
            lead = f"it differs from the reference cell {grid.reference_name}:"
        blocks: list[Block] = [Text(f"{cell.name}: {cell.verdict}: {lead}")]
        table = grid_table(grid)
        if table is not None:
            blocks.append(table)
        blocks += _where_table(differing)
        blocks += _divergence(cell.divergence)  # lossless.matrix(trace=True)
        shown = [_run_row(r, "cell") for r in cell.runs]
        if reference is not None and reference.runs and cell is not reference:
            shown.insert(0, _run_row(reference.runs[0], "reference"))
        blocks.append(Table(("run", "role", "seconds", "artifacts (digest)"), shown))
        return blocks + self._drawn(row, runs, differing)

    # -------------------------------------------------------------- speed gates

    def _speed(self, row: Row, entry: SpeedEntry) -> list[Block]:
        verdict = entry.verdict
        samples = verdict.samples
        bounds = [_float(v) for v in verdict.ci] if verdict.ci is not None else []
        interval = [b for b in bounds if b is not None] if None not in bounds else []
        target = verdict.target_ratio
        chart = speed_svg(
            samples, ratio=_float(verdict.ratio), ci=interval or None, target_ratio=target
        )
        errors = sum(1 for s in samples if s.error is not None)
        blocks_run = len({s.block for s in samples})
        caption = (
            f"{len(samples)} measured arms in {blocks_run} blocks ({verdict.design}, seed "
            f"{verdict.seed}): seconds per arm, then each block's candidate/control ratio; "
            "the blue line is the estimate, the band its interval, the dashed red line the "
            f"target (ratio <= {target:.3f})"
        )
        if errors:
            caption += f"; {errors} arms raised (the crosses)"
        return [
            Svg(chart, f"{row.check}: {verdict.verdict}: {caption}"),
            Pre(verdict.message()),
            *_stages(entry.stages),
        ]


# ------------------------------------------------------------------ traces


def _divergence(found: Departure | None) -> list[Block]:
    """Where two traced runs part (``lossless.compare(trace=True)``): the lines, then the curve
    of how the difference grows over the trace."""
    if found is None:
        return []
    pair = " vs ".join(found.between)
    if found.error:
        return [Text(f"Trace ({pair}): {found.error}")]
    lines = list(found.shown) or [found.headline() or ""]
    blocks: list[Block] = [Text(f"Trace ({pair}): where the two runs part"), Pre("\n".join(lines))]
    growth = found.found.growth if found.found is not None else ()
    if len(growth) > 1:
        caption = (
            f"After the first divergence ({pair}), each aligned tensor in trace order: the share "
            "of its elements that differ (blue, left scale) and log10(1 + largest ULP distance) "
            "(orange, right scale); hover a point for its name and stage"
        )
        blocks.append(Svg(growth_svg(growth), caption, "divergence-growth"))
    return blocks


def _stages(found: StageTimes | None) -> list[Block]:
    """Where the time went (``speed_gate(trace=True)``): one row per stage, from one traced run
    of each arm apart from the timed ones."""
    if found is None:
        return []
    if found.error:
        return [Text(f"Stage times: {found.error}")]

    def seconds(value: float | None) -> str:
        number = _float(value)
        return "-" if number is None else f"{number:.4f}"

    rows = [
        (
            r.stage,
            seconds(r.control_seconds),
            seconds(r.candidate_seconds),
            "-" if (ratio := _float(r.ratio)) is None else f"{ratio:.3f}",
        )
        for r in found.rows
    ]
    return [
        Text("Stage times, from one traced run of each arm (not the timed runs):"),
        Table(("stage", "control s", "candidate s", "candidate/control"), rows),
    ]


def growth_svg(points: Sequence[TensorDifference], width: int = 640, height: int = 220) -> str:
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
        total, differing = _float(p.total), _float(p.differing)
        shares.append(differing / total if total and differing is not None else None)
        ulp = _float(p.max_ulp)
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
        label = f"{p.name}#{p.occurrence} {p.stage or ''}".strip()
        y = top + plot_h * (1 - (share if share is not None else 0.0))
        what = "identical" if p.identical else (
            f"{p.differing} of {p.total} differ, largest {p.max_ulp} ulps"
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
        f"{escape(str(points[0].name))}</text>"
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


def server_line(run: run_record.RunRecord) -> str:
    """One server run in a line: its requests, failed ones (by status), bytes each way, the
    readiness cadence and the peak device memory, as its record says (read, not trusted)."""
    server = run.server
    parts = [str(run.name)]
    totals = None if server is None else server.request_totals
    if server is not None and totals is not None and (totals.all.requests or not server.requests):
        bad = [f"{k} x{v}" for k, v in sorted(totals.statuses.items()) if not k.startswith("2")]
        failed = f"{totals.all.failed} failed" + (f" ({', '.join(bad)})" if bad else "")
        omitted = totals.omitted.requests
        kept = f", {omitted} beyond the {totals.limit} kept records" if omitted else ""
        parts.append(
            f"{totals.all.requests} requests, {failed}, {_bytes(totals.all.bytes_sent)} "
            f"sent, {_bytes(totals.all.bytes_received)} received{kept}"
        )
    else:  # a record older than its totals
        parts.append(f"{len(server.requests) if server else 0} requests recorded")
    readiness = None if server is None else server.readiness
    if readiness is not None and readiness.ready_seconds is not None:
        share = _float(readiness.probe_share)
        parts.append(
            f"ready after {_float(readiness.ready_seconds) or 0:.2f} s, "
            f"{readiness.probes} probes {readiness.interval_seconds} s apart"
            + (f" (up to {share:.0%} of the startup is the probe's)" if share is not None else "")
        )
    memory = run.device_memory
    peak = None if memory is None else _float(memory.peak_mib)
    if memory is not None and memory.unavailable is not None:
        parts.append(f"peak device memory: unavailable ({memory.unavailable})")
    elif memory is not None and peak is not None:
        parts.append(
            f"peak device memory {peak:.0f} MiB ({memory.source}, {memory.samples} samples)"
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
        return not isinstance(sha256, str) or not sha256 or sha256_file(path) == sha256
    except OSError:
        return False


def stored_side(store: Path | None, sha256: str, fingerprint: JsonObject) -> Side:
    """The golden side of a digest-only golden: its file from the content store, hashed first."""
    if store is None:
        why = "kept as digests only: the golden pixels were not kept (no lossless_store)"
        return Side("golden", None, fingerprint, why)
    from ..goldens.store import ContentStore, StoreError

    try:
        path = ContentStore(store).get(sha256)
    except StoreError as exc:
        return Side("golden", None, fingerprint, f"the stored golden is refused: {exc}")
    if path is None:
        why = f"the golden is kept as digests only, and the store {store} holds no copy of it"
        return Side("golden", None, fingerprint, why)
    return Side("golden", path, fingerprint)


def _obtained_side(diagnostic_files: Sequence[str], obtained: ObtainedSide | None) -> Side:
    fingerprint = json_object(obtained.fingerprint) if obtained is not None else {}
    recorded = obtained.path if obtained is not None else ""
    kept = [p for p in diagnostic_files if Path(p).parent.name == "obtained-for-upload"]
    for candidate in [recorded, *kept]:
        digest = obtained.sha256 if obtained is not None else None
        if candidate and same_file(Path(candidate), digest):
            return Side("obtained", Path(candidate), fingerprint)
    where = recorded or "(no path recorded)"
    why = f"the obtained file is gone (pytest's temporary folder was removed): {where}"
    return Side("obtained", None, fingerprint, why)


def _pair(comparison: Comparison) -> str:
    return f"{comparison.left} vs {comparison.right}"


def _where_table(differing: list[Comparison]) -> list[Block]:
    """Where each differing comparison first differs, and artifacts only one run made."""
    where = [_where(c, r) for c in differing for r in c.results if not r.passed]
    where += [
        (_pair(c), name, "present in one run only", "") for c in differing for name in c.missing
    ]
    return [Table(("runs", "artifact", "first difference", "how many"), where)] if where else []


def _where(comparison: Comparison, result: GateResult) -> tuple[str, ...]:
    first = result.first_mismatch or "; ".join(result.metadata_diffs)
    return _pair(comparison), result.artifact, first or "differs", _how_many(result)


def _how_many(result: GateResult) -> str:
    """How many positions differ, in words where a count is missing (#20): runs that differ
    only in metadata (another kind, another sample rate) counted nothing, or nothing that
    differs; a digest-only side knows only that a chunk differs."""
    count, total, unit = result.mismatch_count, result.total, result.unit
    if result.metadata_diffs and not count:
        if count == 0 and total:
            return f"only the metadata differs (0 of {total} {unit}s)"
        return "only the metadata differs (nothing counted)"
    if total is None:
        return "not counted" if count is None else f"{count} {unit}s"
    return f"{'an unknown number' if count is None else count} of {total} {unit}s"


def _digest(fingerprint: JsonObject) -> str:
    for key in ("pcm_sha256", "data_sha256", "sha256"):
        value = fingerprint.get(key)
        if isinstance(value, str):
            return value[:12]
    return "-"


def _run_row(run: RunRecord, role: str | None = None) -> tuple[str, ...]:
    """A run's row: its name, role (a matrix's runs have none: the report names theirs),
    seconds and each artifact's digest."""
    seconds = _float(run.seconds)
    digests = ", ".join(
        f"{a.name}: {_digest(json_object(a.fingerprint))}"
        for a in sorted(run.artifacts, key=lambda a: a.name)
    )
    return (
        run.name,
        str(role or run.role),
        "-" if seconds is None else f"{seconds:.3f}",
        digests,
    )


def _run_side(runs: Mapping[str, RunRecord], run: str, name: str) -> Side:
    record = runs.get(run)
    artifact = next((a for a in record.artifacts if a.name == name), None) if record else None
    fingerprint = json_object(artifact.fingerprint) if artifact is not None else {}
    path = None if artifact is None or artifact.path is None else str(artifact.path)
    if path is not None and same_file(Path(path), fingerprint.get("sha256")):
        return Side(run, Path(path), fingerprint)
    why = f"its file is gone (pytest's temporary folder was removed): {path}"
    return Side(run, None, fingerprint, why)
