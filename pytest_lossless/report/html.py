"""The HTML report: one static page beside the receipts, readable with no JavaScript and no
network (its stylesheet and pictures lie beside it, every link is relative).

The page has one row per check of the session (every gate, lossless comparison and speed gate,
as in the terminal table), worst verdicts first, each with its key figure; below the table, a
section per failing, INCONCLUSIVE or erroring check and per speed gate shows what differed
(:mod:`.details`). Everything that comes from a receipt or a test id is escaped.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import faults
from ..core.clock import utc_iso
from ..core.paths import inside_root
from ..core.text import printable
from ..core.verdict import Status, Update
from ..evidence.receipts import ReceiptRecord
from .blocks import Assets, Block, Detail, Figure, Pre, Svg, Table, Text
from .details import Details, drawn, match_rows
from .table import _UPDATE_ACTIONS, Row, counts_line

if TYPE_CHECKING:
    from ..goldens.swap import UpdateEvent

#: The report's folder inside the receipts folder, and its files.
REPORT_DIR = "report"
INDEX = "index.html"
STYLE = "style.css"
#: Rows drawn in detail at most (the others are listed in the table only).
MAX_DETAILS = 40

_STYLE = """\
body { font: 15px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px;
       padding: 0 1em; color: #1a1a1a; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin: 0 0 0.5em; }
code, pre, td.test { font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
                     font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
/* Words never break mid-word; only long ids (a test id, a path) may break anywhere. */
td { word-break: normal; overflow-wrap: normal; hyphens: manual; }
td.test, td code { overflow-wrap: anywhere; }
svg.chart { max-width: 100%; height: auto; overflow: visible; }
svg.chart text { font: 11px system-ui, sans-serif; fill: #1a1a1a; }
.verdict { font-weight: 600; white-space: nowrap; padding: 0.05em 0.4em; border-radius: 3px; }
.v-fail { background: #fde0e0; color: #8a0000; }
.v-inconclusive { background: #fff1c2; color: #6b4d00; }
.v-lossy { background: #e6f0ff; color: #0b3d91; }
.v-pass { background: #e2f5e2; color: #135e13; }
.v-other { background: #eee; color: #333; }
section.detail { border-top: 2px solid #ddd; margin-top: 1.5em; padding-top: 0.8em; }
figure { margin: 0.8em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; image-rendering: pixelated; }
figcaption { color: #444; font-size: 0.92em; margin-top: 0.2em; }
pre { background: #f7f7f7; border: 1px solid #e2e2e2; padding: 0.6em; overflow-x: auto;
      white-space: pre-wrap; }
p.meta { color: #555; margin: 0.1em 0; }
ul.files { padding-left: 1.2em; }
"""


def _e(text: object) -> str:
    """Escaped for HTML text and attributes; control characters made visible first."""
    return html.escape(printable(text), quote=True)


def _e_lines(text: object) -> str:
    return html.escape(printable(text, newlines=True), quote=True)


def verdict_class(row: Row) -> str:
    """The colour of a row's status: failing red, INCONCLUSIVE yellow, lossy blue, pass green;
    what --update-goldens did and asserted verdicts grey (a CONFLICT or REFUSED red)."""
    status = row.status
    if isinstance(status, Update):
        return "v-fail" if status.failing else "v-other"
    if status in (Status.FAIL, Status.ERROR, Status.UNCHECKED):
        return "v-fail"
    return {
        Status.INCONCLUSIVE: "v-inconclusive",
        Status.LOSSY_PASS: "v-lossy",
        Status.PASS: "v-pass",
    }[status]


def ordered(rows: Sequence[Row]) -> list[int]:
    """Indices of ``rows``, worst verdict first (the terminal table's order)."""
    return sorted(range(len(rows)), key=lambda i: (rows[i].order(), rows[i].test, rows[i].check))


def _event_order(event: UpdateEvent) -> tuple[int, str, str]:
    """Golden updates in the terminal's order: what needs a look first (a conflict)."""
    action = event.action
    rank = _UPDATE_ACTIONS.index(action) if action in _UPDATE_ACTIONS else len(_UPDATE_ACTIONS)
    return rank, event.folder, event.name


def _block(block: Block) -> str:
    if isinstance(block, Text):
        return f"<p>{_e(block.text)}</p>"
    if isinstance(block, Pre):
        return f"<pre>{_e_lines(block.text)}</pre>" if block.text else ""
    if isinstance(block, Table):
        head = "".join(f"<th>{_e(h)}</th>" for h in block.head)
        body = "".join(
            "<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in block.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if isinstance(block, Svg):
        caption = f"<figcaption>{_e(block.caption)}</figcaption>"
        return f'<figure class="{_e(block.kind)}">{block.markup}{caption}</figure>'
    if isinstance(block, Figure):
        return (
            f'<figure><img src="{_e(block.src)}" width="{block.width}" height="{block.height}" '
            f'alt="{_e(block.caption)}"><figcaption>{_e(block.caption)}</figcaption></figure>'
        )
    items = []
    for name, src, note in block.entries:
        link = f'<a href="{_e(src)}">{_e(name)}</a>' if src else f"<code>{_e(name)}</code>"
        items.append(f"<li>{link}{' ' + _e(note) if note else ''}</li>")
    return f'<p>diagnostic files:</p><ul class="files">{"".join(items)}</ul>'


def _unrepeated(detail: Detail) -> Detail:
    """``detail`` without the text and preformatted blocks that its row's detail already says
    (``GoldenMissing: <message>`` holds the message)."""
    said = detail.row.detail
    blocks = [
        b
        for b in detail.blocks
        if not (isinstance(b, (Text, Pre)) and b.text.strip() and b.text.strip() in said)
    ]
    return Detail(detail.anchor, detail.row, blocks)


def page(
    rows: Sequence[Row],
    details: Mapping[int, Detail],
    *,
    context: Iterable[tuple[str, str]] = (),
    events: Iterable[UpdateEvent] = (),
    generated: str | None = None,
) -> str:
    """The page: the verdict table (worst first, each row once) and a section per detail
    (``details`` maps an index of ``rows`` to its detail)."""
    order = ordered(rows)
    # A section that would only repeat its row's detail (a GoldenMissing message) is left out:
    # every text is said once, in the table.
    details = {i: d for i, d in ((i, _unrepeated(d)) for i, d in details.items()) if d.blocks}
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No script runs and nothing is submitted, whatever a receipt or a test id holds.
        '<meta http-equiv="Content-Security-Policy" content="script-src \'none\'; '
        "object-src 'none'; base-uri 'none'; form-action 'none'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>pytest-lossless report</title>",
        f'<link rel="stylesheet" href="{STYLE}"></head>',
        '<body><header id="top"><h1>pytest-lossless report</h1>',
        f'<p class="meta">{_e(counts_line(rows) or "no gate compared anything")}</p>',
        f'<p class="meta">generated {_e(generated or utc_iso())} from the receipts of this '
        "session; every verdict here was computed by code</p>",
    ]
    out += [
        f'<p class="meta">{_e(label)}: <code>{_e(value)}</code></p>' for label, value in context
    ]
    out.append("</header>")
    if rows:
        out.append(
            '<table class="verdicts"><thead><tr><th>verdict</th><th>test</th><th>check</th>'
            "<th>gate</th><th>key figure</th></tr></thead><tbody>"
        )
        for i in order:
            row = rows[i]
            detail = details.get(i)
            check = f'<a href="#{detail.anchor}">{_e(row.check)}</a>' if detail else _e(row.check)
            out.append(
                f'<tr><td><span class="verdict {verdict_class(row)}">{_e(row.verdict)}'
                f'</span></td><td class="test">{_e(row.test)}</td><td>{check}</td>'
                f"<td>{_e(row.gate)}</td><td>{_e(row.detail)}</td></tr>"
            )
        out.append("</tbody></table>")
    else:
        out.append(
            "<p>No gate compared anything in this session: no test that ran called "
            "golden.check, lossless.compare or speed_gate.</p>"
        )
    updates = list(events)
    if updates:
        out.append(
            "<h2>Golden updates</h2><table><thead><tr><th>action</th><th>golden</th>"
            "<th>detail</th></tr></thead><tbody>"
        )
        for event in sorted(updates, key=_event_order):
            where = f"{event.folder}/{event.name}" if event.name else event.folder
            out.append(
                f"<tr><td>{_e(event.action)}</td><td><code>{_e(where)}</code></td>"
                f"<td>{_e(event.detail)}</td></tr>"
            )
        out.append("</tbody></table>")
    for i in order:
        detail = details.get(i)
        if detail is None:
            continue
        row = detail.row
        out.append(
            f'<section class="detail" id="{_e(detail.anchor)}"><h2><span class="verdict '
            f'{verdict_class(row)}">{_e(row.verdict)}</span> <code>{_e(row.test)}'
            f"</code> {_e(row.check)} ({_e(row.gate)})</h2><p>{_e(row.detail)}</p>"
        )
        out += [_block(b) for b in detail.blocks]
        out.append('<p><a href="#top">back to the table</a></p></section>')
    out.append("</body></html>")
    return "\n".join(part for part in out if part) + "\n"


def write_report(
    folder: Path,
    rows: Sequence[Row],
    receipts: Mapping[str, ReceiptRecord],
    *,
    events: Iterable[UpdateEvent] = (),
    context: Iterable[tuple[str, str]] = (),
    limits: Any = None,
    root: Path | None = None,
    store: Path | None = None,
) -> Path:
    """Write the report into ``folder`` (replacing the one there) and return its index.

    ``receipts``: the session's receipts by test id, as loaded. The folder is built beside
    its final place and renamed in, so a reader never sees half a report; ``root``: the
    folder must not lead out of it through a link (like the receipts folder); ``store``: the
    content-addressed store (``lossless_store``) that digest-only goldens are drawn from.
    """
    folder = Path(folder)
    parent = folder.parent
    if root is not None:
        inside_root(parent, root, what="receipts folder")
    parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=parent))
    try:
        builder = Details(Assets(build), limits=limits, root=root, store=store)
        blocks = match_rows(rows, receipts)
        chosen: dict[int, Detail] = {}
        for n, i in enumerate(ordered(rows), start=1):
            if len(chosen) < MAX_DETAILS and drawn(rows[i], blocks[i]):
                chosen[i] = builder.build(f"detail-{n}", rows[i], blocks[i])
        wanted = sum(1 for row, found in zip(rows, blocks, strict=True) if drawn(row, found))
        notes = list(context)
        if wanted > len(chosen):
            notes.append(
                ("not drawn", f"{wanted - len(chosen)} checks beyond the first {MAX_DETAILS}")
            )
        (build / STYLE).write_text(_STYLE, encoding="utf-8")
        text = page(rows, chosen, context=notes, events=events)
        faults.write("write-report", folder / INDEX)
        (build / INDEX).write_text(text, encoding="utf-8")
        os.chmod(build, 0o755)  # mkdtemp made it private; the report is for reviewers
        _replace(build, folder)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return folder / INDEX


def _replace(build: Path, folder: Path) -> None:
    """Rename ``build`` to ``folder``; an older report there is moved aside, then removed (a
    link or file there is removed itself, never followed)."""
    try:
        os.rename(build, folder)
        return
    except OSError:
        if not os.path.lexists(folder):
            raise
    if folder.is_symlink() or not folder.is_dir():
        folder.unlink()
        os.rename(build, folder)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}-old-", dir=folder.parent))
    os.rename(folder, old / folder.name)
    os.rename(build, folder)
    shutil.rmtree(old, ignore_errors=True)
