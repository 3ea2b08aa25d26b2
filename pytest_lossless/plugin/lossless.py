"""The ``lossless`` fixture: a candidate compared with a control that first proves repeatable.

This module also keeps each test's frozen plans (:mod:`..goldens.plans`): the gate of every
``lossless.compare`` and the target of every ``speed_gate`` are checked against the test's
``plan.json`` when called (a change is a ``GateChanged`` error) and, under ``--update-goldens``,
written once the test passed: in the golden folder's own swap when the test's goldens are
replaced (goldens, manifest and plan in one commit, #20), else after every fixture's teardown.
A frozen plan the test no longer uses fails it, as an unchecked golden does; the terminal says
how many plans were not frozen, and how to freeze them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .. import report
from ..core.paths import safe_name
from ..core.records import JsonObject
from ..core.verdict import Status, status_of
from ..errors import LosslessError
from ..settings import Settings
from . import export
from .config import kinds, settings
from .evidence import receipt_for
from .golden import _record_events, golden_boundary, golden_key, migrate_plans
from .outcomes import (
    CALL_PASSED_KEY,
    act_on_verdict,
    add_row,
    expected_verdicts,
    failing_on_errors,
    is_media_expectation,
    not_acted,
    record_verdict,
)

if TYPE_CHECKING:
    from ..compare.matrix import AxisValue, Cell, CellContext, Grid
    from ..compare.proof import Proof
    from ..compare.repeatability import LosslessVerdict
    from ..core.expect import Media
    from ..gates import Gate
    from ..goldens.plans import GatePlan, Plan, PlanBook
    from ..kinds.registry import KindRegistry

#: ``item.stash[PLANS_KEY]``: the test's frozen plans, made by its first compare or speed gate.
PLANS_KEY = pytest.StashKey["PlanBook"]()
#: The user properties (JUnit, and pytest-xdist's reports) that carry them to the controller.
UNFROZEN_PROPERTY = "lossless_plan_not_frozen"
UNHASHED_PROPERTY = "lossless_manifest_unhashed"
_PLAN_FIXTURES = frozenset({"lossless", "speed_gate", "golden"})
_NOTES_PLUGIN = "lossless-plan-notes"


def plan_book(item: pytest.Item) -> PlanBook:
    """The test's frozen plans, made on first use (reading ``plan.json`` waits until asked)."""
    from ..goldens.plans import PlanBook, plan_folder

    book = item.stash.get(PLANS_KEY, None)
    if book is None:
        resolved = settings(item.config)
        root = resolved.goldens
        module, test_name = golden_key(item)
        folder = plan_folder(root, module, test_name)
        boundary = golden_boundary(root, resolved.rootdir)
        book = item.stash[PLANS_KEY] = PlanBook(
            folder,
            item.nodeid,
            boundary=boundary,
            update=resolved.update_goldens,
            require_frozen=resolved.require_published,
        )
        migrate_plans(item, root, module, test_name, boundary)
    return book


def check_plan(item: pytest.Item, section: str, name: str, plan: Plan) -> GatePlan:
    """One call's plan checked against the frozen one; the receipt's ``gate_plan`` record."""
    from ..goldens.plans import describe

    record = plan_book(item).check(section, name, plan)
    if not record.frozen and not record.freezing:
        item.user_properties.append((UNFROZEN_PROPERTY, describe(section, name)))
    return record


def plan_error_row(item: pytest.Item, name: str, check: str) -> Callable[[LosslessError], None]:
    """An error before the gate ran (a changed plan): its row in the table."""

    def record(exc: LosslessError) -> None:
        first = str(exc).splitlines()[0] if str(exc) else ""
        detail = f"{type(exc).__name__}: {first}"
        add_row(item, report.Row(item.nodeid, name, check, Status.ERROR, detail))

    return record


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    """After every fixture's teardown (a golden's commit too): write the test's plans under
    --update-goldens, or fail it for a frozen plan it no longer uses."""
    result = yield
    if item.stash.get(CALL_PASSED_KEY, False):
        with failing_on_errors():
            _settle_plans(item)
    return result


def _settle_plans(item: pytest.Item) -> None:
    __tracebackhide__ = True
    resolved = settings(item.config)
    book = item.stash.get(PLANS_KEY, None)
    if book is None:
        if not _PLAN_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            return
        book = plan_book(item)
        if not book.exists():
            _note_unhashed(item)
            return
    _note_unhashed(item)
    if resolved.update_goldens:
        _record_events(item, book.commit(), resolved.rootdir)
        return
    unused = book.unused()
    if unused:
        _fail_unused(item, unused, book.path)


def _note_unhashed(item: pytest.Item) -> None:
    """A golden manifest written before its entries were hashed: noted once in the terminal."""
    from ..goldens.manifest import load_manifest, unhashed

    if "golden" not in getattr(item, "fixturenames", ()) or settings(item.config).update_goldens:
        return
    folder = plan_book(item).folder
    try:
        entries, _ = load_manifest(folder, root=plan_book(item).boundary)
    except LosslessError:
        return  # the golden fixture names what is wrong with it
    if unhashed(entries):
        item.user_properties.append((UNHASHED_PROPERTY, str(folder / "manifest.json")))


def _fail_unused(item: pytest.Item, unused: list[tuple[str, str]], path: Path) -> None:
    """A frozen plan the test stopped using would otherwise go unnoticed (like a golden)."""
    __tracebackhide__ = True
    from ..goldens.plans import describe

    names = [describe(section, name) for section, name in unused]
    for name in names:
        add_row(
            item,
            report.Row(
                item.nodeid, name, "-", Status.UNCHECKED, f"frozen in {path.name}, not used"
            ),
        )
        receipt_for(item).add_gate(
            {
                "artifact": name,
                "error": "Unchecked",
                "passed": False,
                "message": f"a plan frozen in {path}, but not used by the test",
            }
        )
    noun, verb = ("plan", "was") if len(names) == 1 else ("plans", "were")
    pytest.fail(
        f"frozen {noun} {', '.join(names)} in {path} {verb} not used by {item.nodeid}; use it, "
        "or run with --update-goldens to remove it",
        pytrace=False,
    )


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(_NOTES_PLUGIN):
        config.pluginmanager.register(PlanNotes(config), _NOTES_PLUGIN)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_NOTES_PLUGIN)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _NOTES_PLUGIN)


class PlanNotes:
    """The session's plans that are not frozen and its manifests written before entry hashes,
    gathered from every report (the workers' too, under xdist) for two terminal lines."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.unfrozen: dict[str, list[str]] = {}
        self.unhashed: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == UNFROZEN_PROPERTY:
                found = self.unfrozen.setdefault(report.nodeid, [])
                if str(value) not in found:
                    found.append(str(value))
            elif key == UNHASHED_PROPERTY:
                self.unhashed.add(str(value))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        count = sum(len(v) for v in self.unfrozen.values())
        if count:
            plans = "plan is" if count == 1 else "plans are"
            terminalreporter.write_line(
                f"pytest-lossless: {count} gate {plans} not frozen (a lossless.compare gate or "
                "speed_gate target in test code, checked against nothing): freeze them with "
                "--update-goldens --lossless",
                yellow=True,
            )
        if self.unhashed:
            manifests = "manifest predates" if len(self.unhashed) == 1 else "manifests predate"
            terminalreporter.write_line(
                f"pytest-lossless: {len(self.unhashed)} golden {manifests} entry hashes, so a "
                f"hand edit of a gate there is not caught ({sorted(self.unhashed)[0]}"
                f"{', ...' if len(self.unhashed) > 1 else ''}): rewrite with --update-goldens",
                yellow=True,
            )


class LosslessFixture:
    """The ``lossless`` fixture: ``lossless.compare(control, candidate, *, runs, gate)``."""

    def __init__(
        self, item: pytest.Item, settings: Settings, kinds: KindRegistry, workdir: Path
    ) -> None:
        self._item = item
        self._settings = settings
        self._kinds = kinds
        self._workdir = workdir
        self._count = 0

    def compare(
        self,
        control: Callable[[], Any],
        candidate: Callable[[], Any],
        *,
        runs: int | None = None,
        gate: Gate | str | Mapping[str, Gate | str] | None = None,
        label: str | None = None,
        act: bool = True,
        expect: str | tuple[str, ...] | Media | Mapping[str, Media] | None = None,
        proof: Proof | None = None,
        trace: bool = False,
    ) -> LosslessVerdict:
        """Run the control ``runs`` times, then the candidate; PASS, FAIL or INCONCLUSIVE.

        ``act=False`` only returns the verdict; ``expect="FAIL"`` makes the test assert it;
        ``expect=Media(...)`` (or ``{name: Media}``) states what every run was asked for, and
        an output that misses it makes the verdict FAIL.
        ``proof`` (a pattern searched in the candidate run's stdout and stderr, or a callable
        given its result) must show that the candidate's path ran, or a PASS is INCONCLUSIVE.
        ``trace=True`` traces every run (``docs/trace.md``): a FAIL or an INCONCLUSIVE then
        names the first divergence between the two runs that disagree.
        """
        __tracebackhide__ = True
        media = expect if is_media_expectation(expect) else None
        wanted = None if media is not None else expected_verdicts(expect)  # type: ignore[arg-type]
        from ..compare.repeatability import compare_control_candidate
        from ..gates import parse_gate

        self._count += 1
        name = label or f"compare#{self._count}"
        if isinstance(gate, Mapping):
            gates: Gate | Mapping[str, Gate] | None = {
                k: g for k, v in gate.items() if (g := parse_gate(v)) is not None
            }
        else:
            gates = parse_gate(gate)
        from ..compare.proof import check_rule, describe
        from ..goldens.plans import lossless_plan

        with failing_on_errors(
            f"lossless.compare {name}: ", on_error=plan_error_row(self._item, name, "plan")
        ):
            rule = describe(check_rule(proof, "lossless.compare(proof)"))
            plan = check_plan(
                self._item, "lossless", name, lossless_plan(gates, media, rule, wanted, runs)
            )
        with failing_on_errors(f"lossless.compare {name}: "):
            verdict = compare_control_candidate(
                control,
                candidate,
                runs=self._settings.control_runs if runs is None else runs,
                kinds=self._kinds,
                workdir=self._workdir / safe_name(name, default="compare"),
                gate=gates,
                label=name,
                proof=proof,
                expect=media,  # type: ignore[arg-type]
                trace=bool(trace),
            )
        gate_text = ", ".join(sorted(set(verdict.gates.values())))
        asserted: JsonObject = {} if wanted is None else {"expect_verdict": [*sorted(wanted)]}
        receipt_for(self._item).add_lossless(
            {**verdict.to_json(), "gate_plan": plan.to_json(), **asserted}
        )
        export.comparison(self._item, verdict)
        row = report.Row(  # its status is derived in record_verdict
            self._item.nodeid, name, gate_text, Status.FAIL, verdict.summary()
        )
        record_verdict(self._item, row, verdict, act=act, expect=wanted, lossy=verdict.lossy)
        return verdict

    def matrix(
        self,
        make_run: Callable[..., Callable[[], Any]],
        axes: Mapping[str, Sequence[AxisValue]],
        *,
        reference: object = None,
        runs: int | None = None,
        gate: Gate | str | Mapping[str, Gate | str] | None = None,
        label: str | None = None,
        act: bool = True,
        expect: object = None,
        trace: bool = False,
    ) -> Grid:
        """Which knob breaks equality: every cell of the product of ``axes`` runs ``runs``
        times (``make_run(**cell)`` gives its producer) and is judged against the reference
        cell (the first unless named): PASS, FAIL, or INCONCLUSIVE when its own runs disagree.

        ``expect`` is one verdict for the grid or ``{cell: verdict}`` (a cell not named must
        pass); without it the grid frozen in ``plan.json`` (``--update-goldens --lossless``) is
        expected, and an ``expect`` that disagrees with that is a ``GateChanged`` error. A
        ``devices`` axis gives each cell that many of the test's own devices.
        """
        __tracebackhide__ = True
        from ..compare.matrix import cells, check_runs, expected_grid, run_matrix
        from ..errors import GateChanged
        from ..gates import parse_gate
        from ..goldens.plans import MatrixPlan, describe, matrix_changes, matrix_plan

        self._count += 1
        name = label or f"matrix#{self._count}"
        prefix = f"lossless.matrix {name}: "
        book = plan_book(self._item)
        with failing_on_errors(prefix, on_error=plan_error_row(self._item, name, "plan")):
            found = cells(axes)
            if runs is not None:
                check_runs(runs)
            wanted = expected_grid(expect, found)
            if isinstance(gate, Mapping):
                gates: Gate | Mapping[str, Gate] | None = {
                    k: g for k, v in gate.items() if (g := parse_gate(v)) is not None
                }
            else:
                gates = parse_gate(gate)
            if reference is None:
                ref_name = found[0].name
            else:
                from ..compare.matrix import find_cell

                ref_name = find_cell(found, reference, "lossless.matrix(reference)").name
            asked = matrix_plan(axes, ref_name, gates, wanted, runs)
            frozen = book.frozen_plan("matrix", name)
            goal: Any = wanted
            record: GatePlan | None = None
            if frozen is not None:
                assert isinstance(frozen, MatrixPlan)  # read from its section
                change = matrix_changes(frozen, asked)
                if change is not None:
                    raise GateChanged(
                        book.folder,
                        name,
                        change[0],
                        change[1],
                        subject=describe("matrix", name),
                        file=book.path,
                    )
                goal = frozen.grid
                # A plan frozen with no run count (before counts were) freezes none.
                kept = replace(asked, grid=goal, runs=frozen.runs)
                record = check_plan(self._item, "matrix", name, kept)
            elif not self._settings.update_goldens:
                record = check_plan(self._item, "matrix", name, asked)
            context = self._device_cells(axes)
        with failing_on_errors(prefix):
            grid = run_matrix(
                make_run,
                axes,
                runs=self._settings.control_runs if runs is None else runs,
                kinds=self._kinds,
                workdir=self._workdir / safe_name(name, default="matrix"),
                reference=reference,
                gate=gates,
                label=name,
                trace=trace,
                cell_context=context,
            )
        if self._settings.update_goldens:
            # The grid this run gave is what --update-goldens freezes (once the test passed).
            with failing_on_errors(prefix):
                frozen_grid = {c.name: c.verdict.value for c in grid}
                record = check_plan(self._item, "matrix", name, replace(asked, grid=frozen_grid))
        gate_plan = {} if record is None else record.to_json()
        receipt_for(self._item).add_matrix({**grid.to_json(), "gate_plan": gate_plan})
        self._settle_grid(grid, goal, act=act, frozen=frozen is not None)
        return grid

    def _settle_grid(self, grid: Grid, goal: Any, *, act: bool, frozen: bool) -> None:
        """One row per cell and one for the grid; then the test asserts ``goal`` (the expected
        grid), or, with none, acts on the grid's verdict as ``lossless.compare`` does."""
        __tracebackhide__ = True
        from ..compare.matrix import unmet

        gate_text = ", ".join(sorted(set(grid.gates.values())))
        misses = unmet(goal, grid) if goal is not None else []
        named = goal if isinstance(goal, Mapping) else {}
        for cell in grid:
            status, _ = status_of(cell.verdict)
            asserted = cell.name in named and named[cell.name] == status.value
            # The check column may be clipped in a narrow terminal; the detail never is, so it
            # names the cell in full too.
            row = report.Row(
                self._item.nodeid,
                f"{grid.label}: {cell.name}",
                gate_text,
                status,
                f"{cell.name}: {cell.summary()}",
                expected=asserted,
            )
            add_row(self._item, row)
            if goal is not None or not act:
                not_acted(self._item, row)  # judged against the goal below, or only returned
        overall, _ = status_of(grid.verdict)
        row = report.Row(
            self._item.nodeid,
            grid.label,
            gate_text,
            overall,
            grid.explanation,
            expected=goal is not None and not misses,
        )
        add_row(self._item, row)
        if goal is not None or not act:
            not_acted(self._item, row)
        if misses:
            source = "the grid frozen in plan.json" if frozen else "expect="
            pytest.fail(
                f"lossless.matrix {grid.label}: not the expected grid ({source}):\n  "
                + "\n  ".join(misses)
                + "\n"
                + grid.message(),
                pytrace=False,
            )
        if goal is None and act:
            act_on_verdict(grid)

    def _device_cells(self, axes: Mapping[str, Sequence[AxisValue]]) -> CellContext | None:
        """For a ``devices`` axis: each cell's runs see only the first N of the test's own
        devices (the allocation's visibility environment, narrowed while the cell runs), so a
        matrix never waits on the pool mid-test."""
        if "devices" not in axes:
            return None
        from ..errors import ConfigError
        from .devices import allocator
        from .evidence import ALLOCATION_KEY

        where = "lossless.matrix(axes['devices'])"
        counts = [n for n in axes["devices"] if isinstance(n, int) and not isinstance(n, bool)]
        if len(counts) != len(axes["devices"]) or not counts or min(counts) < 1:
            raise ConfigError(where, axes["devices"], "give device counts, e.g. [1, 2, 4]")
        most = max(counts)
        allocation = self._item.stash.get(ALLOCATION_KEY, None)
        if allocation is None:
            raise ConfigError(
                where,
                counts,
                f"a devices axis gives each cell some of the test's own devices: mark the test "
                f"npu(devices={most}) or gpu(devices={most})",
            )
        held = list(allocation.devices)
        if most > len(held):
            raise ConfigError(
                where,
                counts,
                f"the test holds {len(held)} device(s) but a cell asks for {most}: mark it "
                f"with devices={most} (a matrix never waits on the pool mid-test)",
            )
        backend = allocator(self._item.config).chosen

        @contextlib.contextmanager
        def narrowed(cell: Cell) -> Iterator[Mapping[str, Any]]:
            chosen = held[: int(cell["devices"] or 0)]
            env = backend.visibility_env(chosen)
            saved = allocation.env
            allocation.env = {**saved, **env}
            try:
                yield {"devices": [d.id for d in chosen], "env": dict(env)}
            finally:
                allocation.env = saved

        return narrowed


@pytest.fixture
def lossless(request: pytest.FixtureRequest, tmp_path: Path) -> LosslessFixture:
    """Compare a candidate with a control that must first prove itself repeatable."""
    return LosslessFixture(
        request.node, settings(request.config), kinds(request.config), tmp_path / "lossless"
    )
