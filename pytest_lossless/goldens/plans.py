"""Plans frozen with the goldens: the gate of each ``lossless.compare`` and the target of each
``speed_gate``, written by ``--update-goldens`` and checked on every run.

A golden's gate is frozen in its manifest; the gate of ``lossless.compare`` and the target, pairs
and design of ``speed_gate`` live in test code, where they could be changed after the results
were seen. ``--update-goldens`` therefore writes them into ``plan.json`` in the test's golden
folder (beside ``manifest.json``), and every later run compares what the test asks for with what
was frozen: a difference is a :class:`~..errors.GateChanged` naming the label, both values and
``--update-goldens``.

A test that updates its goldens commits its plan with them (#20): the new ``plan.json`` is
written into the golden swap's staging folder (:meth:`PlanBook.staged`, called by
:meth:`.folder.GoldenFolder.commit` under the folder's lock, which also computes the plan's
update events before the swap), so the one atomic swap commits goldens, manifest and plan
together, and a full disk or a kill leaves the old version or the new one, never new goldens
with the old plan. A test whose goldens are not swapped (none staged, or only plans) has its
plan written in place under the same lock (:meth:`PlanBook.commit`), after recovering what a
killed golden update left; a swap that carries no new plan carries the live one over
(:func:`carry_plan`). Like a manifest it may come from a pull request: it is read within a
size and nesting limit, every name is checked, and each entry carries the SHA-256 of its own
content, so that a naive hand edit (a target lowered) is a
:class:`~..errors.GoldenIntegrityError` naming the file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import faults
from ..core.digests import canonical_sha256
from ..core.paths import folder_problem, inside_root, read_regular, write_atomic, write_new
from ..core.records import Record, RecordError, from_json, loads_bounded, spec
from ..core.text import has_control, printable
from ..errors import GateChanged, GoldenError, GoldenIntegrityError, LosslessError, ManifestError
from .manifest import MAX_PLAN_BYTES as MAX_PLAN_BYTES  # the largest plan.json read
from .manifest import PLAN
from .swap import FolderLock, GoldenUpdateError, UpdateEvent, lock_path, recover

PLAN_SCHEMA = 1
#: The longest label or workload name kept in a plan (it is printed and hashed, never a path).
MAX_LABEL_CHARS = 200
#: The key of the verdicts a call asserts (``expect="FAIL"``), in a plan that has one.
EXPECT_VERDICT = "expect_verdict"
#: What each section freezes: the call it comes from, as a message names it.
SECTIONS = {"lossless": "lossless.compare", "speed": "speed_gate", "matrix": "lossless.matrix"}


# ------------------------------------------------------------------ what a plan is


@dataclass(frozen=True)
class LosslessPlan(Record):
    """The plan of one ``lossless.compare``: the gate it asked for (a canonical spec,
    ``{artifact: spec}``, or None for each kind's default), the media it expects (as the
    expectation writes itself), its dispatch-proof rule, and the verdicts the test asserts."""

    gate: str | dict[str, str | None] | None
    expect: Any
    proof: str | None
    #: Frozen like the gate (a test made green by asserting the FAIL it now gets is a changed
    #: plan); written only when given, so plans frozen before it existed still match.
    expect_verdict: tuple[str, ...] | None = spec(None, omit="none")
    #: The control runs the test asks for (``runs=``): fewer runs can hide a control that does
    #: not repeat. None (left to ``--lossless-control-runs``) is not written, as above.
    runs: int | None = spec(None, omit="none")


@dataclass(frozen=True)
class SpeedPlan(Record):
    """The plan of one ``speed_gate``: the claim (target), the most pairs, the design, the
    confidence, the workload, the dispatch-proof rule, and the verdicts the test asserts. The
    seed is not frozen: a fresh one each session is recorded in the receipt."""

    target: float
    pairs: int
    design: str
    confidence: float
    workload: str | None
    proof: str | None = None
    expect_verdict: tuple[str, ...] | None = spec(None, omit="none")


@dataclass(frozen=True)
class MatrixPlan(Record):
    """The plan of one ``lossless.matrix`` (#24): its axes, its reference cell, its gate, and
    the grid it expects (``{cell: verdict}``, or one verdict for the whole grid; None: none).
    ``--update-goldens`` freezes the grid the run gave, so a change in which knob breaks
    equality fails later runs."""

    axes: dict[str, tuple[Any, ...]]
    reference: str
    gate: str | dict[str, str | None] | None
    grid: str | dict[str, str] | None = None
    #: The runs of each cell the test asks for (``runs=``, #20): fewer runs can hide a cell
    #: that does not repeat. None (left to ``--lossless-control-runs``) is not written, so a
    #: plan frozen before counts were, which has none, freezes none (:func:`matrix_changes`).
    runs: int | None = spec(None, omit="none")


Plan = LosslessPlan | SpeedPlan | MatrixPlan
#: The record of each section's plans.
PLAN_TYPES: dict[str, type[Plan]] = {
    "lossless": LosslessPlan,
    "speed": SpeedPlan,
    "matrix": MatrixPlan,
}


@dataclass(frozen=True)
class GatePlan(Record):
    """What a receipt's lossless, speed or matrix entry records of its plan (``gate_plan``):
    not frozen, being frozen (``--update-goldens``), or the frozen plan it was checked against
    and its hash (written only: ``verify`` reads it back as untrusted JSON)."""

    frozen: bool
    freezing: bool | None = spec(None, omit="none")
    file: str | None = spec(None, omit="none")
    section: str | None = spec(None, omit="none")
    name: str | None = spec(None, omit="none")
    plan: Plan | None = spec(None, omit="none")
    sha256: str | None = spec(None, omit="none")


def lossless_plan(
    gate: Any,
    expect: Any = None,
    proof: str | None = None,
    verdicts: Sequence[str] | None = None,
    runs: int | None = None,
) -> LosslessPlan:
    """The plan of one ``lossless.compare`` as the test asks for it (:class:`LosslessPlan`)."""
    if isinstance(gate, Mapping):
        gates: str | dict[str, str | None] | None = {
            str(k): _spec(v) for k, v in sorted(gate.items())
        }
    else:
        gates = _spec(gate)
    return LosslessPlan(gates, _media(expect), proof, _asserting(verdicts), runs)


def _asserting(verdicts: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if verdicts is None else tuple(sorted({str(v) for v in verdicts}))


def _spec(gate: Any) -> str | None:
    """A gate as its canonical spec (``"tolerance(atol=1e-5)"`` and ``tolerance(atol=1e-5)``
    are one plan)."""
    from ..gates import parse_gate

    parsed = parse_gate(gate)
    return None if parsed is None else parsed.spec


def matrix_plan(
    axes: Mapping[str, Sequence[Any]],
    reference: str,
    gate: Any,
    grid: str | dict[str, str] | None = None,
    runs: int | None = None,
) -> MatrixPlan:
    """The plan of one ``lossless.matrix`` as the test asks for it (:class:`MatrixPlan`)."""
    shown = {str(axis): tuple(values) for axis, values in axes.items()}
    return MatrixPlan(shown, reference, lossless_plan(gate).gate, grid, runs)


def matrix_changes(frozen: MatrixPlan, asked: MatrixPlan) -> tuple[str, str] | None:
    """(frozen, asked) in words when a matrix asks for another plan than the frozen one: its
    axes, reference, gate or run count (when one was frozen), or an ``expect=`` grid that
    disagrees with the frozen grid (a cell named with another verdict; a cell left out, which is
    expected to pass, that froze otherwise; one verdict for the grid that is not the frozen
    grid's worst). None: it agrees."""
    fixed: tuple[str, ...] = ("axes", "reference", "gate")
    if frozen.runs is not None:
        fixed += ("runs",)
    if not all(_same(frozen.to_json()[k], asked.to_json()[k]) for k in fixed):
        return differences(frozen, asked, only=fixed)
    wanted, grid = asked.grid, frozen.grid
    if wanted is None or not isinstance(grid, Mapping):
        return None
    if isinstance(wanted, str):
        from ..core.verdict import Verdict

        worst = Verdict.worst(grid.values())
        if worst is not None and worst.value != wanted:
            return f"a grid whose worst cell is {worst.value}", f"expect={wanted!r}"
        return None
    was, now = [], []
    for cell, verdict in grid.items():
        expected = wanted.get(cell)
        if expected is None and verdict not in ("PASS", "LOSSY-PASS"):
            was.append(f"{cell}: {verdict}")
            now.append(f"{cell}: a pass (not named in expect=)")
        elif expected is not None and expected != verdict:
            was.append(f"{cell}: {verdict}")
            now.append(f"{cell}: {expected}")
    for cell in sorted(set(wanted) - set(grid)):
        was.append(f"{cell}: no such cell")
        now.append(f"{cell}: {wanted[cell]}")
    return ("grid " + "; ".join(was), "grid " + "; ".join(now)) if was else None


def speed_plan(
    *,
    target: float,
    pairs: int,
    design: str,
    confidence: float,
    workload: str | None,
    proof: str | None = None,
    verdicts: Sequence[str] | None = None,
) -> SpeedPlan:
    """The plan of one ``speed_gate`` as the test asks for it (:class:`SpeedPlan`)."""
    return SpeedPlan(
        float(target),
        int(pairs),
        str(design),
        float(confidence),
        workload,
        proof,
        _asserting(verdicts),
    )


def _media(expect: Any) -> Any:
    if expect is None:
        return None
    if isinstance(expect, Mapping):
        return {str(k): _media(v) for k, v in sorted(expect.items())}
    to_dict = getattr(expect, "to_dict", None)
    return to_dict() if callable(to_dict) else str(expect)


def entry_sha256(section: str, name: str, plan: Mapping[str, Any]) -> str:
    """The hash an entry of ``plan.json`` carries: of its section, its label and its plan."""
    return canonical_sha256({"section": section, "name": name, "plan": dict(plan)})


def describe(section: str, name: str) -> str:
    """``speed_gate '5s'``: a plan's entry as a message names it."""
    return f"{SECTIONS.get(section, section)} {printable(name)!r}"


def differences(frozen: Plan, asked: Plan, *, only: Sequence[str] | None = None) -> tuple[str, str]:
    """(frozen, asked) in words, naming only the fields that differ (of ``only``, when given):
    ``target=0.3``."""
    was, now = frozen.to_json(), asked.to_json()
    keys = sorted(only if only is not None else set(was) | set(now))
    changed = [k for k in keys if not _same(was.get(k), now.get(k))] or keys
    return (
        ", ".join(f"{k}={_text(was.get(k))}" for k in changed),
        ", ".join(f"{k}={_text(now.get(k))}" for k in changed),
    )


def _text(value: Any) -> str:
    return printable(json.dumps(value, sort_keys=True, default=str))


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (a float and the same float read back from the file are one value)."""
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and not isinstance(a, bool)
            and not isinstance(b, bool)
            and math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def same_plan(a: Plan, b: Plan) -> bool:
    return type(a) is type(b) and _same(a.to_json(), b.to_json())


def plan_folder(goldens: Path, module: str, test_name: str) -> Path:
    """The test's golden folder, named as :class:`.folder.GoldenFolder` names it
    (:func:`.layout.folder_of`)."""
    from .layout import folder_of

    return folder_of(goldens, module, test_name)


# ------------------------------------------------------------------ the file


def read_plans(folder: Path, *, root: Path | None = None) -> dict[tuple[str, str], Plan]:
    """The frozen plans of ``folder/plan.json``, by (section, label); empty when it has none.

    The file must be a regular file within :data:`MAX_PLAN_BYTES` whose every entry still
    hashes to the SHA-256 it carries: a :class:`ManifestError` for what is not a plan file, a
    :class:`GoldenIntegrityError` for an entry edited by hand.
    """
    return parse_plans(folder / PLAN, _read_plan(folder, root=root))


def _read_plan(folder: Path, *, root: Path | None) -> bytes | None:
    """The bytes of ``folder/plan.json`` read by its path (None: there is none)."""
    path = folder / PLAN
    if root is not None:
        inside_root(path, root, what="frozen plan")
    if not os.path.lexists(path):
        return None
    try:
        return read_regular(
            os.path.realpath(path) if root is not None else path, limit=MAX_PLAN_BYTES
        )
    except OSError as exc:
        raise ManifestError(path, f"cannot be read: {exc.strerror or exc}") from None


def parse_plans(path: Path, raw: bytes | None) -> dict[tuple[str, str], Plan]:
    """The frozen plans of the bytes of ``path`` (a ``plan.json``; None: there is none), checked
    as :func:`read_plans` says."""
    if raw is None:
        return {}
    try:
        data = loads_bounded(raw, max_depth=16)
    except ValueError as exc:
        raise ManifestError(path, f"cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("plans"), dict):
        raise ManifestError(path, "has no 'plans' table; it is not a pytest-lossless plan file")
    if data.get("schema") != PLAN_SCHEMA:
        raise ManifestError(
            path,
            f"has schema {printable(repr(data.get('schema')))[:40]}; this plugin reads schema "
            f"{PLAN_SCHEMA}. Regenerate with --update-goldens",
        )
    found: dict[tuple[str, str], Plan] = {}
    for section, entries in data["plans"].items():
        if section not in SECTIONS or not isinstance(entries, dict):
            raise ManifestError(path, f"section {printable(str(section))[:40]!r} is not a plan")
        for name, entry in entries.items():
            if not _label_ok(name):
                raise ManifestError(path, f"the label {printable(str(name))[:60]!r} is refused")
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("plan"), dict)
                or not isinstance(entry.get("sha256"), str)
            ):
                raise ManifestError(path, f"the plan of {describe(section, name)} is malformed")
            if entry_sha256(section, name, entry["plan"]) != entry["sha256"]:
                raise GoldenIntegrityError(
                    path,
                    f"the frozen plan of {describe(section, name)} was edited by hand (it no "
                    "longer hashes to its sha256)",
                )
            try:
                found[(section, name)] = from_json(PLAN_TYPES[section], entry["plan"])
            except RecordError as exc:
                what = describe(section, name)
                raise ManifestError(path, f"the plan of {what} is malformed ({exc})") from None
    return found


def _label_ok(name: object) -> bool:
    return isinstance(name, str) and 0 < len(name) <= MAX_LABEL_CHARS and not has_control(name)


def plan_text(test_id: str, plans: Mapping[tuple[str, str], Plan]) -> bytes:
    """``plan.json`` as written: each plan with the hash of its section, label and plan."""
    written = {key: plan.to_json() for key, plan in sorted(plans.items())}
    sections = {
        section: {
            name: {"plan": data, "sha256": entry_sha256(section, name, data)}
            for (inside, name), data in written.items()
            if inside == section
        }
        for section in sorted({section for section, _ in written})
    }
    document = {"schema": PLAN_SCHEMA, "test": test_id, "plans": sections}
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def carry_plan(live: Path, staging: Path) -> None:
    """Copy ``live/plan.json`` into a golden folder being staged, so the folder's swap keeps it.

    Called under the folder's lock by the golden update. The file is read as a regular file
    (a link planted there is refused with an ``OSError``, never followed); a staged artifact
    already stored as ``plan.json`` is not overwritten.
    """
    source = live / PLAN
    if not os.path.lexists(source) or os.path.lexists(staging / PLAN):
        return
    write_new(staging / PLAN, read_regular(source, limit=MAX_PLAN_BYTES))


# ------------------------------------------------------------------ one test's plans


class PlanNotFrozen(GateChanged):
    """``--lossless-require-published`` (for CI): a ``lossless.compare`` gate or ``speed_gate``
    target that no ``plan.json`` froze is checked against nothing, so it is refused."""

    def __init__(self, folder: Path, name: str, asked: str, *, subject: str, file: Path) -> None:
        self.folder, self.name, self.file, self.subject = folder, name, file, subject
        self.frozen, self.requested = "nothing", asked
        GoldenError.__init__(
            self,
            f"plan not frozen for {subject}: {file} does not freeze it, and "
            "--lossless-require-published refuses a gate or target checked against nothing. "
            "Freeze it with --update-goldens --lossless and commit the plan.json",
        )


class PlanReplaced(GoldenError):
    """The test's golden folder was replaced by another session's update between the reads of
    its frozen plan and of its goldens: judging the test by one version's plan and the other's
    goldens would be a silent mix, so the test fails and asks to be run again (#20)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        super().__init__(
            printable(
                f"{folder} was replaced by another session during this test: its {PLAN} and "
                "its goldens were read from two versions, and a test is never judged by a mix "
                "of them. Run again once that session's update is done"
            )
        )


@dataclass(frozen=True)
class StagedPlan:
    """What a golden swap commits of the test's plans (:meth:`PlanBook.staged`): the new
    ``plan.json`` (None: the new folder has none), the update events against the live plan,
    and whether it differs from the live file (else a swap of unchanged goldens is skipped)."""

    text: bytes | None
    events: tuple[UpdateEvent, ...]
    changed: bool

    def write(self, staging: Path) -> None:
        """Into the staging folder of the swap: the plan, or nothing when there is none."""
        if self.text is None:
            return
        faults.write("write-golden-plan", staging / PLAN)
        write_new(staging / PLAN, self.text)


@dataclass
class PlanBook:
    """The frozen plans of one test: each call is checked against them, or (``update``)
    recorded, and :meth:`commit` writes what the test asked for once it passed."""

    folder: Path
    test_id: str
    boundary: Path
    update: bool
    lock_timeout: float = 120.0
    #: ``--lossless-require-published``: a plan not frozen is a :class:`PlanNotFrozen`.
    require_frozen: bool = False
    #: What the test asked for this run, by (section, label).
    asked: dict[tuple[str, str], Plan] = field(default_factory=dict)
    #: Handed to the golden folder's swap (:meth:`staged`): the plans are committed with the
    #: goldens or not at all, and :meth:`commit` writes nothing more.
    handed: bool = False
    #: Reads the test's golden folder as one version when this is its folder (#20), set by
    #: :meth:`.folder.GoldenFolder.hold_plans`: the folder hands the ``plan.json`` of the
    #: version it read (through one descriptor with its goldens and manifest) to :meth:`adopt`.
    #: None: the plan is read by its path (a test that checks no golden).
    read_with: Callable[[], object] | None = None
    _frozen: dict[tuple[str, str], Plan] | None = None
    #: The bytes of the ``plan.json`` the test is judged by (None: none), once taken.
    _raw: bytes | None = None
    _taken: bool = False

    @property
    def path(self) -> Path:
        return self.folder / PLAN

    def exists(self) -> bool:
        return os.path.lexists(self.path)

    def frozen_plan(self, section: str, name: str) -> Plan | None:
        """The plan frozen for one call, or None (none frozen, or under ``--update-goldens``)."""
        return None if self.update else self.frozen().get((section, name))

    def frozen(self) -> dict[tuple[str, str], Plan]:
        """The frozen plans the test is judged by: those of the version of its golden folder
        whose goldens it compares (:attr:`read_with`), else of ``plan.json`` read by path."""
        if self._frozen is None:
            if not self._taken and self.read_with is not None:
                with contextlib.suppress(LosslessError):  # named where the goldens are checked
                    self.read_with()
            if not self._taken:
                self._raw, self._taken = _read_plan(self.folder, root=self.boundary), True
            self._frozen = parse_plans(self.path, self._raw)
        return self._frozen

    def adopt(self, raw: bytes | None, readable: bool = True) -> None:
        """The ``plan.json`` (None: none) of the version of the golden folder just read, through
        one descriptor with its goldens and manifest (:func:`.manifest.read_version`): the plan
        the test is judged by. A test already judged by another ``plan.json`` (read before
        another session replaced the folder) raises :class:`PlanReplaced` (#20).

        ``readable`` False: the file could not be read through the folder; it is read by its
        path when used, which names what is wrong with it. Under update nothing is judged.
        """
        if self.update or not readable:
            return
        if not self._taken:
            self._raw, self._taken, self._frozen = raw, True, None
        elif raw != self._raw:
            raise PlanReplaced(self.folder)

    def check(self, section: str, name: str, plan: Plan) -> GatePlan:
        """Check one call's plan; returns the record its receipt entry keeps (``gate_plan``).

        Raises :class:`GateChanged` when it differs from the frozen one (not under update), and
        :class:`~..errors.ConfigError` when one test gives one label two plans.
        """
        from ..errors import ConfigError

        key = (section, name)
        if not _label_ok(name):
            raise ConfigError(f"{SECTIONS[section]}(label)", name, "not a usable plan label")
        before = self.asked.get(key)
        if before is not None and not same_plan(before, plan):
            raise ConfigError(
                f"{SECTIONS[section]}({'workload' if section == 'speed' else 'label'})",
                name,
                "used twice in one test with different plans: give each call its own name",
            )
        self.asked[key] = plan
        if self.update:
            return GatePlan(False, freezing=True, file=str(self.path))
        frozen = self.frozen().get(key)
        if frozen is None:
            if self.require_frozen:
                raise PlanNotFrozen(
                    self.folder, name, _brief(plan), subject=describe(section, name), file=self.path
                )
            return GatePlan(False)
        if not same_plan(frozen, plan):
            was, now = differences(frozen, plan)
            raise GateChanged(
                self.folder, name, was, now, subject=describe(section, name), file=self.path
            )
        sha256 = entry_sha256(section, name, frozen.to_json())
        return GatePlan(True, None, str(self.path), section, name, frozen, sha256)

    def unused(self) -> list[tuple[str, str]]:
        """Frozen plans the test did not ask for this run (not under update: those are dropped)."""
        if self.update:
            return []
        return sorted(set(self.frozen()) - set(self.asked))  # of the version judged by

    def unfrozen(self) -> list[tuple[str, str]]:
        if self.update:
            return []
        try:
            frozen = self.frozen()
        except (ManifestError, GoldenIntegrityError):
            return []  # reported where it was read
        return sorted(set(self.asked) - set(frozen))

    def commit(self) -> list[UpdateEvent]:
        """Under ``--update-goldens``, once the test passed: write exactly the plans it asked
        for (a plan no longer asked for is dropped; no plan left, no file), under the folder's
        lock. Nothing changed, nothing written. Plans handed to the golden swap
        (:meth:`staged`) were committed there, or not at all: nothing is written here."""
        if not self.update or self.handed:
            return []
        inside_root(self.folder, self.boundary, what="golden folder")
        if not self.asked and not self.exists():
            return []
        parent = self.folder.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = folder_problem(parent, write=True) or f"cannot be made ({exc.strerror})"
            raise GoldenUpdateError(parent, f"{problem}: {PLAN} cannot be written there") from None
        with FolderLock(lock_path(self.folder), timeout=self.lock_timeout):
            # A golden update killed between its renames leaves the folder missing: put it
            # back before a plan makes a new one there.
            events = recover(self.folder, test=self.test_id)
            try:
                old = read_plans(self.folder, root=self.boundary)
            except (ManifestError, GoldenIntegrityError):
                old = {}  # replaced whole by what the test asks for now
            events += self._events(old)
            if self._well_formed():
                return events  # the file already holds exactly these plans
            self._write()
        self._frozen, self._taken = None, False
        return events

    def staged(self) -> StagedPlan:
        """The ``plan.json`` of the golden folder an update swaps into place, and the events
        against the live plan it replaces, computed before the swap (#20).

        Called by :meth:`.folder.GoldenFolder.commit` under the folder's lock, once the update
        is sure to swap; from then on the plans are the swap's to commit (:attr:`handed`).
        """
        self.handed = True
        try:
            old = read_plans(self.folder, root=self.boundary)
        except (ManifestError, GoldenIntegrityError):
            old = {}  # replaced whole by what the test asks for now
        text = plan_text(self.test_id, self.asked) if self.asked else None
        self._frozen, self._taken = None, False
        live: bytes | None = None
        if os.path.lexists(self.path):
            try:
                live = read_regular(self.path, limit=MAX_PLAN_BYTES)
            except OSError:
                live = b""  # not a plan file (a link, a FIFO): replaced by the swap
        return StagedPlan(text, tuple(self._events(old)), changed=live != text)

    def _well_formed(self) -> bool:
        """Whether the file on disk is the one this update would write (byte for byte)."""
        try:
            return read_regular(self.path, limit=MAX_PLAN_BYTES) == plan_text(
                self.test_id, self.asked
            )
        except OSError:
            return False

    def _events(self, old: Mapping[tuple[str, str], Plan]) -> list[UpdateEvent]:
        events = []
        for key in sorted(set(old) | set(self.asked)):
            section, name = key
            what = describe(section, name)
            if key not in old:
                action, detail = "created", f"{what}: {_brief(self.asked[key])}"
            elif key not in self.asked:
                action, detail = "removed", f"{what}: no longer used by the test"
            elif same_plan(old[key], self.asked[key]):
                action, detail = "unchanged", what
            else:
                was, now = differences(old[key], self.asked[key])
                action, detail = "changed", f"{what}: {was} -> {now}"
            events.append(UpdateEvent(self.test_id, str(self.folder), PLAN, action, detail))
        return events

    def _write(self) -> None:
        inside_root(self.folder, self.boundary, what="golden folder")
        if not self.asked:
            if os.path.lexists(self.path):
                os.unlink(self.path)
            with contextlib.suppress(OSError):
                os.rmdir(self.folder)  # only when the plan was all it held
            return
        try:
            os.makedirs(self.folder, exist_ok=True)
            faults.write("write-golden-plan", self.path)
            text = plan_text(self.test_id, self.asked)
            write_atomic(self.path, text, mode=0o644)  # committed, like manifest.json
        except OSError as exc:
            raise GoldenUpdateError(
                self.path,
                f"cannot be written ({faults.write_failed(exc)}): the previous plan is kept",
            ) from None


def _brief(plan: Plan) -> str:
    shown = {k: v for k, v in plan.to_json().items() if v is not None}
    return ", ".join(f"{k}={_text(v)}" for k, v in shown.items()) or "defaults"


# ------------------------------------------------------------------ receipts


def receipt_contradictions(receipt: Mapping[str, Any]) -> list[str]:
    """What a receipt's lossless, speed and matrix entries say against the frozen plan they
    recorded (``gate_plan``): the record must hash to itself and name the entry's own label, and
    the entry must have run what the plan froze (gate, target, pairs, design, confidence; a
    matrix's axes, reference and runs per cell)."""
    found: list[str] = []
    for section, block in (("lossless", "lossless"), ("speed", "speed"), ("matrix", "matrix")):
        entries = receipt.get(block)
        if not isinstance(entries, list):
            continue
        for index, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                continue
            record = entry.get("gate_plan")
            if not isinstance(record, Mapping) or record.get("frozen") is not True:
                continue
            label = f"{block}[{index}]"
            found += [f"{label}: {p}" for p in _record_contradictions(section, entry, record)]
    return found


def _record_contradictions(
    section: str, entry: Mapping[str, Any], record: Mapping[str, Any]
) -> list[str]:
    plan, name = record.get("plan"), record.get("name")
    if not isinstance(plan, Mapping) or not isinstance(name, str):
        return ["gate_plan says frozen but records no plan"]
    if record.get("section") != section:
        return [f"gate_plan is a {record.get('section')!r} plan in a {section} entry"]
    if entry_sha256(section, name, plan) != record.get("sha256"):
        return ["gate_plan's plan does not hash to its recorded sha256: it was edited"]
    own = entry.get("workload") if section == "speed" else entry.get("label")
    if own is not None and own != name:
        return [f"gate_plan is the frozen plan of {name!r}, not of {own!r}"]
    if section == "speed":
        return [
            f"ran {key}={_text(entry.get(key))} but the frozen plan says {key}={_text(plan[key])}"
            for key in ("target", "pairs", "design", "confidence", "workload")
            if key in plan and not _same(plan[key], entry.get(key))
        ]
    found = _gate_contradictions(plan.get("gate"), entry.get("gates"))
    if section == "matrix":
        for key, ran in (("axes", entry.get("axes")), ("reference", entry.get("reference"))):
            if not _same(plan.get(key), ran):
                found.append(f"ran {key}={_text(ran)} but the frozen plan says {_text(plan[key])}")
        ran = entry.get("runs_per_cell")
        if plan.get("runs") is not None and not _same(plan["runs"], ran):
            found.append(
                f"ran runs={_text(ran)} but the frozen plan says runs={_text(plan['runs'])}"
            )
    return found


def _gate_contradictions(frozen: Any, ran: Any) -> list[str]:
    if frozen is None or not isinstance(ran, Mapping):
        return []  # each kind's default gate: frozen as "the default"
    found = []
    for artifact, used in sorted(ran.items()):
        wanted = frozen.get(artifact) if isinstance(frozen, Mapping) else frozen
        if wanted is not None and used != wanted:
            found.append(
                f"artifact {printable(str(artifact))!r} was compared under gate {used!r} but the "
                f"frozen plan says {wanted!r}"
            )
    return found
