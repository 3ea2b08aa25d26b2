"""Plans frozen with the goldens: the gate of each ``lossless.compare`` and the target of each
``speed_gate``, written by ``--update-goldens`` and checked on every run.

A golden's gate is frozen in its manifest; the gate of ``lossless.compare`` and the target, pairs
and design of ``speed_gate`` live in test code, where they could be changed after the results
were seen. ``--update-goldens`` therefore writes them into ``plan.json`` in the test's golden
folder (beside ``manifest.json``), and every later run compares what the test asks for with what
was frozen: a difference is a :class:`~..errors.GateChanged` naming the label, both values and
``--update-goldens``.

The file is written in place under the folder's lock (:class:`.replace.FolderLock`), after
recovering what a killed golden update left; the golden folder's own swap carries it over
(:func:`carry_plan`), so a plan and a golden manifest survive each other's writes in either
order. Like a manifest it may come from a pull request: it is read within a size and nesting
limit, every name is checked, and each entry carries the SHA-256 of its own content, so that a
naive hand edit (a target lowered) is a :class:`~..errors.GoldenIntegrityError` naming the file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import faults
from ..core.digests import canonical_sha256, loads_bounded, write_atomic, write_new
from ..core.paths import folder_problem, inside_root, read_regular
from ..core.text import has_control, printable
from ..errors import GateChanged, GoldenError, GoldenIntegrityError, ManifestError
from .manifest import PLAN
from .swap import FolderLock, GoldenUpdateError, UpdateEvent, lock_path, recover

PLAN_SCHEMA = 1
#: The largest ``plan.json`` read: a plan is a few hundred bytes per label.
MAX_PLAN_BYTES = 4 << 20
#: The longest label or workload name kept in a plan (it is printed and hashed, never a path).
MAX_LABEL_CHARS = 200
#: The key of the verdicts a call asserts (``expect="FAIL"``), in a plan that has one.
EXPECT_VERDICT = "expect_verdict"
#: What each section freezes: the call it comes from, as a message names it.
SECTIONS = {"lossless": "lossless.compare", "speed": "speed_gate", "matrix": "lossless.matrix"}


# ------------------------------------------------------------------ what a plan is


def lossless_plan(
    gate: Any,
    expect: Any = None,
    proof: str | None = None,
    verdicts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The plan of one ``lossless.compare``: the gate it asked for (a spec, ``{artifact: spec}``,
    or None for each kind's default), the media it expects, its dispatch-proof rule, and the
    verdicts the test asserts (``expect="FAIL"``)."""
    if isinstance(gate, Mapping):
        gates: Any = {str(k): _spec(v) for k, v in sorted(gate.items())}
    else:
        gates = _spec(gate)
    return _asserting({"gate": gates, "expect": _media(expect), "proof": proof}, verdicts)


def _asserting(plan: dict[str, Any], verdicts: Sequence[str] | None) -> dict[str, Any]:
    """``plan`` with the verdicts its call asserts (``expect=``), frozen like its gate: a test
    made green by asserting the FAIL it now gets is a changed plan. Only present when given,
    so that plans frozen before this field existed still match calls without ``expect=``."""
    if verdicts is not None:
        plan[EXPECT_VERDICT] = sorted({str(v) for v in verdicts})
    return plan


def _spec(gate: Any) -> str | None:
    """A gate as its canonical spec (``"tolerance(atol=1e-5)"`` and ``tolerance(atol=1e-5)``
    are one plan)."""
    from ..gates import parse_gate

    parsed = parse_gate(gate)
    return None if parsed is None else parsed.spec


def matrix_plan(
    axes: Mapping[str, Any], reference: str, gate: Any, grid: Any = None
) -> dict[str, Any]:
    """The plan of one ``lossless.matrix`` (#24): its axes, its reference cell, its gate, and
    the grid it expects (``{cell: verdict}``, or one verdict for the whole grid; None: none).
    ``--update-goldens`` freezes the grid the run gave, so a change in which knob breaks
    equality fails later runs."""
    return {
        "axes": {str(axis): list(values) for axis, values in axes.items()},
        "reference": reference,
        "gate": lossless_plan(gate)["gate"],
        "grid": grid,
    }


def matrix_changes(frozen: Mapping[str, Any], asked: Mapping[str, Any]) -> tuple[str, str] | None:
    """(frozen, asked) in words when a matrix asks for another plan than the frozen one: its
    axes, reference or gate, or an ``expect=`` grid that disagrees with the frozen grid (a cell
    named with another verdict; a cell left out, which is expected to pass, that froze
    otherwise; one verdict for the grid that is not the frozen grid's worst). None: it agrees."""
    fixed = ("axes", "reference", "gate")
    if not all(_same(frozen.get(k), asked.get(k)) for k in fixed):
        return differences({k: frozen.get(k) for k in fixed}, {k: asked.get(k) for k in fixed})
    wanted, grid = asked.get("grid"), frozen.get("grid")
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
        expected = wanted.get(cell) if isinstance(wanted, Mapping) else None
        if expected is None and verdict not in ("PASS", "LOSSY-PASS"):
            was.append(f"{cell}: {verdict}")
            now.append(f"{cell}: a pass (not named in expect=)")
        elif expected is not None and expected != verdict:
            was.append(f"{cell}: {verdict}")
            now.append(f"{cell}: {expected}")
    if isinstance(wanted, Mapping):
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
) -> dict[str, Any]:
    """The plan of one ``speed_gate``: the claim (target), the most pairs, the design, the
    confidence, the workload, the dispatch-proof rule, and the verdicts the test asserts
    (``expect=``). The seed is not frozen: a fresh one each session is recorded in the
    receipt."""
    plan = {
        "target": float(target),
        "pairs": int(pairs),
        "design": str(design),
        "confidence": float(confidence),
        "workload": workload,
        "proof": proof,
    }
    return _asserting(plan, verdicts)


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


def differences(frozen: Mapping[str, Any], asked: Mapping[str, Any]) -> tuple[str, str]:
    """(frozen, asked) in words, naming only the fields that differ: ``target=0.3``."""
    keys = sorted(set(frozen) | set(asked))
    changed = [k for k in keys if not _same(frozen.get(k), asked.get(k))] or keys
    return (
        ", ".join(f"{k}={_text(frozen.get(k))}" for k in changed),
        ", ".join(f"{k}={_text(asked.get(k))}" for k in changed),
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


def same_plan(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return _same(dict(a), dict(b))


def plan_folder(goldens: Path, module: str, test_name: str) -> Path:
    """The test's golden folder, named as :class:`.folder.GoldenFolder` names it
    (:func:`.layout.folder_of`)."""
    from .layout import folder_of

    return folder_of(goldens, module, test_name)


# ------------------------------------------------------------------ the file


def read_plans(folder: Path, *, root: Path | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """The frozen plans of ``folder/plan.json``, by (section, label); empty when it has none.

    The file must be a regular file within :data:`MAX_PLAN_BYTES` whose every entry still
    hashes to the SHA-256 it carries: a :class:`ManifestError` for what is not a plan file, a
    :class:`GoldenIntegrityError` for an entry edited by hand.
    """
    path = folder / PLAN
    if root is not None:
        inside_root(path, root, what="frozen plan")
    if not os.path.lexists(path):
        return {}
    try:
        raw = read_regular(
            os.path.realpath(path) if root is not None else path, limit=MAX_PLAN_BYTES
        )
        data = loads_bounded(raw, max_depth=16)
    except OSError as exc:
        raise ManifestError(path, f"cannot be read: {exc.strerror or exc}") from None
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
    found: dict[tuple[str, str], dict[str, Any]] = {}
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
            found[(section, name)] = dict(entry["plan"])
    return found


def _label_ok(name: object) -> bool:
    return isinstance(name, str) and 0 < len(name) <= MAX_LABEL_CHARS and not has_control(name)


def plan_document(test_id: str, plans: Mapping[tuple[str, str], Mapping[str, Any]]) -> Any:
    sections: dict[str, dict[str, Any]] = {}
    for (section, name), plan in sorted(plans.items()):
        sections.setdefault(section, {})[name] = {
            "plan": dict(plan),
            "sha256": entry_sha256(section, name, plan),
        }
    return {"schema": PLAN_SCHEMA, "test": test_id, "plans": sections}


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
    asked: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    _frozen: dict[tuple[str, str], dict[str, Any]] | None = None

    @property
    def path(self) -> Path:
        return self.folder / PLAN

    def exists(self) -> bool:
        return os.path.lexists(self.path)

    def frozen_plan(self, section: str, name: str) -> dict[str, Any] | None:
        """The plan frozen for one call, or None (none frozen, or under ``--update-goldens``)."""
        return None if self.update else self.frozen().get((section, name))

    def frozen(self) -> dict[tuple[str, str], dict[str, Any]]:
        if self._frozen is None:
            self._frozen = read_plans(self.folder, root=self.boundary)
        return self._frozen

    def check(self, section: str, name: str, plan: Mapping[str, Any]) -> dict[str, Any]:
        """Check one call's plan; returns the record its receipt entry keeps (``gate_plan``).

        Raises :class:`GateChanged` when it differs from the frozen one (not under update), and
        :class:`~..errors.ConfigError` when one test gives one label two plans.
        """
        from ..errors import ConfigError

        key, plan = (section, name), dict(plan)
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
            return {"frozen": False, "freezing": True, "file": str(self.path)}
        frozen = self.frozen().get(key)
        if frozen is None:
            if self.require_frozen:
                raise PlanNotFrozen(
                    self.folder, name, _brief(plan), subject=describe(section, name), file=self.path
                )
            return {"frozen": False}
        if not same_plan(frozen, plan):
            was, now = differences(frozen, plan)
            raise GateChanged(
                self.folder, name, was, now, subject=describe(section, name), file=self.path
            )
        return {
            "frozen": True,
            "file": str(self.path),
            "section": section,
            "name": name,
            "plan": frozen,
            "sha256": entry_sha256(section, name, frozen),
        }

    def unused(self) -> list[tuple[str, str]]:
        """Frozen plans the test did not ask for this run (not under update: those are dropped)."""
        if self.update or not self.exists():
            return []
        return sorted(set(self.frozen()) - set(self.asked))

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
        lock. Nothing changed, nothing written."""
        if not self.update:
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
        self._frozen = None
        return events

    def _well_formed(self) -> bool:
        """Whether the file on disk is the one this update would write (byte for byte)."""
        try:
            return read_regular(self.path, limit=MAX_PLAN_BYTES) == self._text()
        except OSError:
            return False

    def _text(self) -> bytes:
        text = json.dumps(plan_document(self.test_id, self.asked), indent=2, sort_keys=True)
        return (text + "\n").encode("utf-8")

    def _events(self, old: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[UpdateEvent]:
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
            write_atomic(self.path, self._text(), mode=0o644)  # committed, like manifest.json
        except OSError as exc:
            raise GoldenUpdateError(
                self.path,
                f"cannot be written ({faults.write_failed(exc)}): the previous plan is kept",
            ) from None


def _brief(plan: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in plan.items() if v is not None}
    return ", ".join(f"{k}={_text(v)}" for k, v in shown.items()) or "defaults"


# ------------------------------------------------------------------ receipts


def receipt_contradictions(receipt: Mapping[str, Any]) -> list[str]:
    """What a receipt's lossless and speed entries say against the frozen plan they recorded
    (``gate_plan``): the record must hash to itself and name the entry's own label, and the
    entry must have run what the plan froze (gate, target, pairs, design, confidence)."""
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
    return found


def _gate_contradictions(frozen: Any, ran: Any) -> list[str]:
    if frozen is None or not isinstance(ran, Mapping):
        return []  # each kind's default gate: frozen as "the default"
    found = []
    for artifact, spec in sorted(ran.items()):
        wanted = frozen.get(artifact) if isinstance(frozen, Mapping) else frozen
        if wanted is not None and spec != wanted:
            found.append(
                f"artifact {printable(str(artifact))!r} was compared under gate {spec!r} but the "
                f"frozen plan says {wanted!r}"
            )
    return found
