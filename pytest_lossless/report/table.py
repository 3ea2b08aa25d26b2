"""Summary lines built from results: a pure generator, never hand-written text.

Rows come from every gate, lossless comparison and speed gate of the session (under
pytest-xdist, workers attach them to their reports and the controller gathers them).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.records import Record, from_json, spec
from ..core.text import printable
from ..core.verdict import VERDICT_WORDS, Status, Update, Verdict, status_of

if TYPE_CHECKING:
    from ..evidence.provenance import SourceState
    from ..gates.gate import GateResult
    from ..goldens.swap import UpdateEvent
    from ..speed.runner import SpeedVerdict

#: The narrowest the test and detail columns get before a line may exceed the width.
_MIN_TEST, _MIN_DETAIL = 16, 24


def _coerce(status: Status | Update | str) -> Status | Update:
    """A status given as its enum or its exact word (``"FAIL"``, ``"CREATED"``)."""
    if isinstance(status, (Status, Update)):
        return status
    for enum in (Status, Update):
        try:
            return enum(status)
        except ValueError:
            continue
    raise ValueError(f"not a row status: {status!r}")


@dataclass(frozen=True)
class Row(Record):
    """One line of the verdict table: which test, what was checked, under which gate, and its
    status (a :class:`Status`, or an :class:`Update` under ``--update-goldens``), derived once
    where the check was made; ``expected``: the test asserted that verdict (``expect=``).
    Its JSON (:meth:`to_dict`, how an xdist worker hands it on) also says :attr:`verdict`."""

    test: str
    check: str
    gate: str
    status: Status | Update
    detail: str = ""
    expected: bool = False
    shown: str = spec(key="verdict", derive=lambda row: row.verdict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", _coerce(self.status))
        super().__post_init__()

    @property
    def verdict(self) -> str:
        """The status as the table shows it: ``FAIL``, ``PASS (expected)``, ``CREATED``."""
        return f"{self.status.value} (expected)" if self.expected else self.status.value

    @property
    def failing(self) -> bool:
        """Whether this row fails the session: a failing status the test did not assert."""
        if self.expected:
            return False
        if isinstance(self.status, Update):
            return self.status.failing
        return self.status.severity >= Status.INCONCLUSIVE.severity

    @property
    def quiet(self) -> bool:
        """A pass (expected or not), or what --update-goldens did: no section in the report."""
        if isinstance(self.status, Update):
            return True
        return self.status in (Status.PASS, Status.LOSSY_PASS)

    def order(self) -> tuple[int, int]:
        """Worst first: FAIL (then ERROR, UNCHECKED, CONFLICT), INCONCLUSIVE, LOSSY-PASS,
        PASS, then the rows that are not verdicts (STAGED, CREATED, an expected verdict)."""
        if self.expected:
            return 1, 0
        if isinstance(self.status, Update):
            return (-Status.FAIL.severity, 1) if self.status is Update.CONFLICT else (1, 0)
        return -self.status.severity, 0 if self.status.value in VERDICT_WORDS else 1

    to_dict = Record.to_json

    @classmethod
    def from_dict(cls, data: object) -> Row:
        return from_json(cls, data)


def counts_line(rows: Iterable[Row]) -> str:
    """``1 FAIL, 2 PASS, 1 FAIL (expected)``: how many rows have each status, worst first."""
    counts: dict[str, int] = {}
    order: dict[str, tuple[int, int]] = {}
    for row in rows:
        counts[row.verdict] = counts.get(row.verdict, 0) + 1
        order[row.verdict] = row.order()
    return ", ".join(f"{counts[v]} {v}" for v in sorted(counts, key=lambda v: (order[v], v)))


def outcome_row(test: str, outcome: str, why: str) -> Row:
    """The row of a test whose own pytest outcome is a failure its checks do not show (an
    assertion after the gates, a timeout, a receipt that could not be written): the test's
    outcome is one of its parts, so the table never shows such a test as passed."""
    status = Status.INCONCLUSIVE if outcome == "inconclusive" else Status.FAIL
    return Row(test, "test outcome", "-", status, why)


def _how_many(count: int | None) -> str:
    """A count of differing positions; None (a digest-only side: not counted) as words."""
    return "an unknown number" if count is None else str(count)


def gate_row(test: str, result: GateResult) -> Row:
    """The row of one golden comparison (a ``GateResult``)."""
    figure = None if result.lossless else _lossy_figure(result)
    word = Verdict.PASS if result.passed else Verdict.FAIL
    status, _ = status_of(word, lossy=not result.lossless)
    if result.passed:
        same = "identical" if result.lossless else "within tolerance"
        detail = (
            f"{result.total} {result.unit}s {same}"
            if result.total is not None
            else (result.notes[0] if result.notes else "")
        )
        if figure:  # a lossy pass says how far it is from identical: the reviewer's question
            detail = f"{result.total} {result.unit}s: {figure}" if result.total else figure
    else:
        detail = "; ".join(result.metadata_diffs) or (
            f"first differing {result.unit} {result.first_mismatch}, "
            f"{_how_many(result.mismatch_count)} of {result.total} differ"
            if result.first_mismatch
            else "differs"
        )
        if figure and not result.metadata_diffs:
            detail += f"; {figure}"
    return Row(test, result.artifact, result.gate, status, detail)


def _lossy_figure(result: GateResult) -> str | None:
    """The key figure of a lossy result (``max 1 ulp at [3, 7], p99 0 ulp, 0 beyond 1``)."""
    from ..errors import LosslessError
    from ..gates.gate import lossy_figure, parse_gate

    try:
        gate = parse_gate(str(result.gate))
    except LosslessError:
        return None
    return lossy_figure(gate, result.diagnostics) if gate is not None else None


def speed_row(test: str, name: str, verdict: SpeedVerdict) -> Row:
    """The row of one speed gate (a ``SpeedVerdict``): ratio, interval, pairs used, seed."""
    if verdict.ci is not None and verdict.ratio is not None:
        detail = f"{verdict.ratio:.2f} [{verdict.ci[0]:.2f}, {verdict.ci[1]:.2f}]"
    else:
        detail = verdict.reason or "no interval"
    detail += f", {verdict.blocks}/{verdict.pairs} pairs {verdict.design}, seed {verdict.seed}"
    status, _ = status_of(verdict.verdict)
    return Row(test, f"speed {name}", f"ratio <= {verdict.target_ratio:.2f}", status, detail)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _clip_left(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[len(text) - max(0, width - 1) :]


def _clip_middle(text: str, width: int) -> str:
    """``text`` with its middle replaced by an ellipsis: its start and end both stay."""
    if len(text) <= width:
        return text
    if width < 3:
        return _clip(text, width)
    tail = (width - 1) // 2
    return text[: width - 1 - tail] + "…" + text[len(text) - tail :]


def _split_id(test_id: str) -> tuple[str, str, str]:
    """(module part, function name, parametrization) of a test id."""
    module, sep, name = test_id.rpartition("::")
    func, bracket, rest = name.partition("[")
    return module + sep, func, bracket + rest


def _common_prefix(names: set[str]) -> str:
    """The start that every name shares, up to its last ``_`` (empty for one name)."""
    # Test names, not paths: the character-by-character prefix is the one meant.
    common = os.path.commonprefix(list(names)) if len(names) > 1 else ""  # noqa: RUF071
    return common[: common.rfind("_") + 1]


def clip_test_id(test_id: str, width: int, others: Iterable[str] = ()) -> str:
    """``test_id`` in ``width`` characters, keeping what tells it apart from ``others`` (the
    ids beside it in the table): the module goes first, unless another row has the same name
    in another module; then the name keeps its start past what every name shares (``test_``)
    and its parametrization, whole when it fits, so ``test_cli_matches_goldens[15s]`` and
    ``test_server_matches_goldens[15s]`` never both read ``…es_goldens[15s]``."""
    if len(test_id) <= width:
        return test_id
    module, func, params = _split_id(test_id)
    name = func + params
    twins = {m for m, f, p in map(_split_id, others) if f + p == name and m != module}
    if twins:  # the module is what tells it apart: its end, then the name as far as it goes
        room = width - len(name)
        if room >= 6:
            return _clip_left(module, room) + name
        return _clip_middle(test_id, width)
    if len(name) < width:
        return "…" + name
    # The parametrization whole when it leaves the name 8 characters, else its start and end.
    params = _clip_middle(params, max(0, min(len(params), width - 8)))
    room = width - len(params)
    common = _common_prefix({f for _, f, _ in map(_split_id, (*others, test_id))})
    wanted = len(common) + min(6, len(func) - len(common))
    # Too narrow for the shared start as well: it is left out.
    shown = "…" + func[len(common) :] if common and room - 1 < wanted else func
    return _clip(shown, room) + params


def verdict_table(rows: Sequence[Row], *, width: int = 120) -> list[str]:
    """A fixed-width table of every check, worst verdicts first, then a count line.

    No line is longer than ``width``. The test, check and gate columns are clipped (with an
    ellipsis) to fit; the detail is never clipped: where it does not fit beside them, it
    follows on indented lines of its own, so a CI log keeps the first differing frame.
    """
    if not rows:
        return []
    ordered = sorted(rows, key=lambda r: (r.order(), r.test, r.check))
    headers = ("verdict", "test", "check", "gate", "detail")
    # Folders are left out of test ids: the module and test name tell a row apart. Every cell
    # is escaped: a manifest key or a media tag must not drive the terminal.
    cells = [
        tuple(printable(c) for c in (r.verdict, _short_id(r.test), r.check, r.gate, r.detail))
        for r in ordered
    ]
    widths = [max(len(headers[i]), *(len(c[i]) for c in cells)) for i in range(4)]
    widths[1], widths[2], widths[3] = min(widths[1], 48), min(widths[2], 22), min(widths[3], 22)
    # The four columns must fit: shrink the test id (it keeps what tells the ids apart), then
    # check, gate, verdict.
    for column, floor in ((1, _MIN_TEST), (2, 12), (3, 12), (0, 7)):
        excess = sum(widths) + 2 * 3 - width
        if excess > 0:
            widths[column] = max(min(floor, widths[column]), widths[column] - excess)
    # A detail beside its row when there is room for one, else on lines of its own below.
    detail_width = width - (sum(widths) + 2 * 4)
    if detail_width < _MIN_DETAIL:
        detail_width = 0
    head = "  ".join(h.ljust(w) for h, w in zip(headers[:4], widths, strict=True))
    lines = [_clip(head + "  " + headers[4], width)]
    lines.append(
        _clip("  ".join("-" * w for w in widths) + "  " + "-" * min(detail_width, 40), width)
    )
    ids = [c[1] for c in cells]
    for cell in cells:
        # A test id keeps what tells it apart (name start, parameters), the others their start.
        clipped = [
            _clip(c, w) if i != 1 else clip_test_id(c, w, ids)
            for i, (c, w) in enumerate(zip(cell[:4], widths, strict=True))
        ]
        parts = "  ".join(c.ljust(w) for c, w in zip(clipped, widths, strict=True))
        detail = cell[4]
        if detail_width and len(detail) <= detail_width:
            lines.append(_clip(parts + "  " + detail, width).rstrip())
        else:
            lines.append(_clip(parts, width).rstrip())
            lines += _wrapped(detail, width)
    lines.append(printable(counts_line(rows)))
    return lines


def _wrapped(text: str, width: int, indent: str = "    ") -> list[str]:
    """``text`` on lines of at most ``width``, each indented (long words are broken)."""
    room = max(1, width - len(indent))
    return [indent + line for line in textwrap.wrap(text, room, break_on_hyphens=False)] or [indent]


def evidence_line(count: int, folder: str, source: SourceState) -> str:
    """Where the receipts went and what they can be traced to: a baseline on a dirty or
    unpublished revision is the first thing an auditor asks about."""
    revision = (source.revision or "")[:12] or "no git revision"
    state = []
    if source.diff_bytes:
        state.append(f"dirty, diff sha256 {(source.diff_sha256 or '')[:12]}")
    elif source.dirty:
        state.append(f"dirty: {source.untracked_files or 'some'} untracked files")
    if source.publication.publication == "unpublished":
        state.append("unpublished: in no remote-tracking branch of a non-local remote")
    where = f" ({'; '.join(state)})" if state else ""
    noun = "receipt" if count == 1 else "receipts"
    return printable(
        f"{count} {noun} in {folder}, source {revision}{where}; "
        f"audit with: python -m pytest_lossless verify {folder}"
    )


#: The order of the golden-updates groups: what needs a look first. ``restored``, ``cleaned``
#: and ``kept`` are recoveries of what a killed update left (one line per golden folder).
_UPDATE_ACTIONS = (
    "conflict",
    "restored",
    "cleaned",
    "kept",
    "created",
    "changed",
    "removed",
    "unchanged",
    "refused",
)


def events_from(transported: Iterable[Mapping[str, str]] | None) -> list[UpdateEvent]:
    """The golden updates a test report carries (``UpdateEvent.to_dict()`` each, the form an
    xdist worker hands on) as records again."""
    from ..goldens.swap import UpdateEvent

    return [UpdateEvent(**event) for event in transported or []]


def update_lines(events: Iterable[UpdateEvent]) -> list[str]:
    """What ``--update-goldens`` did, grouped by action, one artifact (or, for a recovery, one
    golden folder) per line."""
    groups: dict[str, list[UpdateEvent]] = {}
    for event in events:
        groups.setdefault(event.action, []).append(event)
    lines: list[str] = []
    for action in (*_UPDATE_ACTIONS, *sorted(set(groups) - set(_UPDATE_ACTIONS))):
        items = groups.get(action, [])
        if not items:
            continue
        lines.append(printable(f"{action}: {len(items)}"))
        for item in sorted(items, key=lambda e: (e.folder, e.name)):
            where = f"{item.folder}/{item.name}" if item.name else item.folder
            detail = f" ({item.detail})" if item.detail else ""
            lines.append(printable(f"  {where}{detail}"))
    return lines


def _short_id(test_id: str) -> str:
    """A test id without the folders of its module: ``tests/e2e/test_m.py::test_a[x/y]`` ->
    ``test_m.py::test_a[x/y]``; a ``/`` in a parameter id is part of the test's name (cut there,
    ``test_y[dir/test_x]`` read as ``test_x]``, another test's name)."""
    module, separator, rest = test_id.partition("::")
    return module.rsplit("/", 1)[-1] + separator + rest
