"""Frozen plans without pytest: the plan file, its integrity, its place beside the goldens, and
the manifest's entry hashes that cover each golden's gate."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_lossless.core import faults
from pytest_lossless.errors import (
    ArtifactError,
    ConfigError,
    GateChanged,
    GoldenIntegrityError,
    ManifestError,
)
from pytest_lossless.goldens import folder as folder_module
from pytest_lossless.goldens import swap
from pytest_lossless.goldens.folder import (
    GoldenConflict,
    GoldenFolder,
    artifact_name,
    read_manifest,
)
from pytest_lossless.goldens.manifest import MANIFEST, PLAN, check_integrity, unhashed
from pytest_lossless.goldens.plans import (
    LosslessPlan,
    MatrixPlan,
    Plan,
    PlanBook,
    PlanReplaced,
    SpeedPlan,
    entry_sha256,
    lossless_plan,
    matrix_changes,
    matrix_plan,
    plan_folder,
    read_plans,
    receipt_contradictions,
    speed_plan,
)
from pytest_lossless.goldens.swap import GoldenUpdateError
from pytest_lossless.kinds.registry import KindRegistry

TEST_ID = "test_mod.py::test_y"


def _speed(target: float = 0.3, pairs: int = 8, **kw: object) -> SpeedPlan:
    return speed_plan(
        target=target,
        pairs=pairs,
        design=str(kw.get("design", "ABBA")),
        confidence=0.95,
        workload=kw.get("workload", "5s"),  # type: ignore[arg-type]
    )


def _book(root: Path, *, update: bool) -> PlanBook:
    return PlanBook(plan_folder(root, "test_mod", "test_y"), TEST_ID, boundary=root, update=update)


def _freeze(root: Path, plans: dict) -> PlanBook:
    book = _book(root, update=True)
    for (section, name), plan in plans.items():
        book.check(section, name, plan)
    book.commit()
    return book


def _golden_folder(root: Path, kinds: KindRegistry) -> GoldenFolder:
    return GoldenFolder(root, "test_mod", "test_y", TEST_ID, kinds, digest_above=1 << 20)


def _stage_golden(folder: GoldenFolder, tmp_path: Path, values: list[float]) -> None:
    path = tmp_path / "a.npy"
    np.save(path, np.array(values, dtype=np.float32), allow_pickle=False)
    folder.begin_update()
    folder.stage("a.npy", path, None, {"when": "now"})


# ------------------------------------------------------------------ plans


def test_a_frozen_plan_passes_and_a_changed_target_is_gate_changed(tmp_path):
    _freeze(tmp_path, {("speed", "5s"): _speed(), ("lossless", "cmp"): lossless_plan("decoded")})
    book = _book(tmp_path, update=False)
    record = book.check("speed", "5s", _speed())
    assert record.frozen is True
    assert isinstance(record.plan, SpeedPlan)
    assert record.plan.target == 0.3
    assert record.sha256 == entry_sha256("speed", "5s", record.plan.to_json())
    with pytest.raises(GateChanged) as caught:
        _book(tmp_path, update=False).check("speed", "5s", _speed(target=0.2))
    message = str(caught.value)
    assert "speed_gate '5s'" in message
    assert "target=0.3" in message
    assert "target=0.2" in message
    assert "--update-goldens" in message
    assert str(tmp_path / "test_mod/test_y" / PLAN) in message
    assert caught.value.frozen == "target=0.3"
    assert caught.value.requested == "target=0.2"


def test_a_changed_compare_gate_and_tolerance_are_gate_changed(tmp_path):
    from pytest_lossless import tolerance

    _freeze(tmp_path, {("lossless", "cmp"): lossless_plan(tolerance(atol=1e-5))})
    book = _book(tmp_path, update=False)
    assert book.check("lossless", "cmp", lossless_plan("tolerance(atol=1e-05)")).frozen
    for other in (tolerance(atol=1e-3), "decoded", None, {"a.npy": "elementwise"}):
        with pytest.raises(GateChanged, match=r"lossless.compare 'cmp'.*gate="):
            _book(tmp_path, update=False).check("lossless", "cmp", lossless_plan(other))


def test_a_plan_file_written_before_the_typed_plans_round_trips_byte_for_byte(tmp_path):
    """plan.json keeps its exact format: a file written by the code before the plans were typed
    (every section, a gate per artifact, an expected medium, asserted verdicts, a matrix grid)
    reads into typed plans that, frozen again by an update, write the very same bytes."""
    data = Path(__file__).parent.parent / "data" / "goldens" / "plan-v1.json"
    written = json.loads(data.read_text())
    old = tmp_path / "old"
    old.mkdir()
    (old / PLAN).write_bytes(data.read_bytes())
    plans = read_plans(old)
    assert {section for section, _ in plans} == {"lossless", "speed", "matrix"}
    assert plans[("speed", "5s")] == _speed()
    asserting = plans[("speed", "1s")]
    assert isinstance(asserting, SpeedPlan)
    assert asserting.expect_verdict == ("FAIL", "INCONCLUSIVE")
    assert isinstance(plans[("lossless", "per artifact")], LosslessPlan)
    assert isinstance(plans[("matrix", "knobs")], MatrixPlan)
    for (section, name), plan in plans.items():
        assert plan.to_json() == written["plans"][section][name]["plan"]
    book = PlanBook(tmp_path / "new", written["test"], boundary=tmp_path, update=True)
    for (section, name), plan in plans.items():
        book.check(section, name, plan)
    book.commit()
    assert book.path.read_bytes() == data.read_bytes()


def test_no_plan_file_is_not_frozen_and_never_fails(tmp_path):
    book = _book(tmp_path, update=False)
    assert book.check("speed", "5s", _speed()).to_json() == {"frozen": False}
    assert book.unfrozen() == [("speed", "5s")]
    assert book.unused() == []
    assert not (tmp_path / "test_mod").exists()


def test_one_label_with_two_plans_in_one_test_is_refused(tmp_path):
    book = _book(tmp_path, update=True)
    book.check("speed", "5s", _speed())
    book.check("speed", "5s", _speed())  # the same plan twice: fine
    with pytest.raises(ConfigError, match="used twice"):
        book.check("speed", "5s", _speed(target=0.5))


def test_a_hand_edited_target_is_an_integrity_error_naming_the_file(tmp_path):
    book = _freeze(tmp_path, {("speed", "5s"): _speed()})
    data = json.loads(book.path.read_text())
    data["plans"]["speed"]["5s"]["plan"]["target"] = 0.05
    book.path.write_text(json.dumps(data))
    with pytest.raises(GoldenIntegrityError) as caught:
        _book(tmp_path, update=False).check("speed", "5s", _speed(target=0.05))
    assert str(book.path) in str(caught.value)
    assert "speed_gate '5s'" in str(caught.value)
    assert "edited by hand" in str(caught.value)


@pytest.mark.parametrize(
    "text",
    ["not json", '{"schema": 1}', '{"schema": 9, "plans": {}}', '{"schema": 1, "plans": []}'],
)
def test_what_is_not_a_plan_file_is_named(tmp_path, text):
    folder = plan_folder(tmp_path, "test_mod", "test_y")
    folder.mkdir(parents=True)
    (folder / PLAN).write_text(text)
    with pytest.raises(ManifestError, match=PLAN):
        read_plans(folder)


def test_unused_plans_are_reported_and_dropped_only_by_an_update(tmp_path):
    _freeze(tmp_path, {("speed", "5s"): _speed(), ("speed", "15s"): _speed(workload="15s")})
    book = _book(tmp_path, update=False)
    book.check("speed", "5s", _speed())
    assert book.unused() == [("speed", "15s")]
    update = _book(tmp_path, update=True)
    update.check("speed", "5s", _speed())
    events = update.commit()
    assert {(e.action, e.detail.split(":")[0]) for e in events} == {
        ("unchanged", "speed_gate '5s'"),
        ("removed", "speed_gate '15s'"),
    }
    assert set(read_plans(update.folder)) == {("speed", "5s")}


def test_an_unchanged_update_writes_nothing_and_no_plan_left_removes_the_file(tmp_path):
    book = _freeze(tmp_path, {("speed", "5s"): _speed()})
    before = book.path.stat().st_mtime_ns
    again = _freeze(tmp_path, {("speed", "5s"): _speed()})
    assert again.path.stat().st_mtime_ns == before
    empty = _book(tmp_path, update=True)
    assert [e.action for e in empty.commit()] == ["removed"]
    assert not empty.path.exists()
    assert not empty.folder.exists()


def test_the_plan_lives_in_the_tests_golden_folder(tmp_path, kinds):
    folder = GoldenFolder(
        tmp_path, "test_mod", "TestX::test_y[a/b]", TEST_ID, kinds, digest_above=1 << 20
    )
    assert plan_folder(tmp_path, "test_mod", "TestX::test_y[a/b]") == folder.path


def test_plan_json_is_a_reserved_artifact_name():
    with pytest.raises(ArtifactError, match="reserved"):
        artifact_name(PLAN)


# ------------------------------------------------------------------ plan and golden together


@pytest.mark.parametrize("order", ["golden-then-plan", "plan-then-golden"])
def test_plan_and_golden_survive_each_others_write(tmp_path, kinds, order):
    goldens = tmp_path / "goldens"
    folder = _golden_folder(goldens, kinds)
    _stage_golden(folder, tmp_path, [1.0, 2.0])
    book = _book(goldens, update=True)
    book.check("speed", "5s", _speed())
    if order == "golden-then-plan":
        folder.commit()
        book.commit()
    else:
        book.commit()
        folder.commit()
    assert set(read_manifest(folder.path)) == {"a.npy"}
    assert set(read_plans(folder.path)) == {("speed", "5s")}
    # A later golden change swaps the folder again: the plan stays; and a later plan change
    # rewrites the plan: the golden stays.
    again = _golden_folder(goldens, kinds)
    _stage_golden(again, tmp_path, [1.0, 3.0])
    assert [e.action for e in again.commit()] == ["changed"]
    assert set(read_plans(folder.path)) == {("speed", "5s")}
    _freeze(goldens, {("speed", "5s"): _speed(target=0.5)})
    assert read_plans(folder.path)[("speed", "5s")] == _speed(target=0.5)
    entries = read_manifest(folder.path)
    check_integrity(folder.path, entries["a.npy"], kinds=kinds)


def test_a_plan_killed_golden_update_left_is_recovered_before_the_plan_is_written(tmp_path, kinds):
    goldens = tmp_path / "goldens"
    folder = _golden_folder(goldens, kinds)
    _stage_golden(folder, tmp_path, [1.0])
    folder.commit()
    # What a kill between the two renames of the fallback leaves: the live folder retired.
    work = folder.path.parent / f".{folder.path.name}.tmp-999999-deadbeef"
    work.mkdir()
    folder.path.rename(work / "old")
    book = _book(goldens, update=True)
    book.check("speed", "5s", _speed())
    events = book.commit()
    assert "restored" in [e.action for e in events]
    assert set(read_manifest(folder.path)) == {"a.npy"}
    assert set(read_plans(folder.path)) == {("speed", "5s")}


def test_a_link_planted_as_plan_json_is_not_carried_by_the_golden_swap(tmp_path, kinds):
    goldens = tmp_path / "goldens"
    folder = _golden_folder(goldens, kinds)
    _stage_golden(folder, tmp_path, [1.0])
    folder.commit()
    secret = tmp_path / "secret.txt"
    secret.write_text("not a plan")
    (folder.path / PLAN).symlink_to(secret)
    again = _golden_folder(goldens, kinds)
    _stage_golden(again, tmp_path, [2.0])
    with pytest.raises(Exception, match="cannot be replaced"):
        again.commit()
    assert (folder.path / PLAN).is_symlink()  # the previous golden is kept as it was


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _old_version(goldens: Path, tmp_path: Path, kinds: KindRegistry) -> dict[str, bytes]:
    """A committed version: a golden of [1.0] and a plan of target 0.3 (#20)."""
    folder = _golden_folder(goldens, kinds)
    _stage_golden(folder, tmp_path, [1.0])
    book = _book(goldens, update=True)
    book.check("speed", "5s", _speed())
    folder.plans = book
    folder.commit()
    assert book.commit() == []  # committed with the goldens, in their swap
    return _snapshot(folder.path)


def test_a_full_disk_at_the_plan_leaves_the_old_version_whole(tmp_path, kinds, monkeypatch):
    """#20: the plan is written into the golden swap's staging folder, so a full disk there
    leaves goldens, manifest and plan as they were (was: new goldens with the old plan)."""
    goldens = tmp_path / "goldens"
    old = _old_version(goldens, tmp_path, kinds)
    folder = _golden_folder(goldens, kinds)
    _stage_golden(folder, tmp_path, [2.0])
    book = _book(goldens, update=True)
    book.check("speed", "5s", _speed(target=0.5))
    folder.plans = book
    monkeypatch.setenv(faults.FAULT_ENV, "write-golden-plan:ENOSPC")
    with pytest.raises(GoldenUpdateError, match=r"disk is full.*plan\.json"):
        folder.commit()
    assert book.commit() == []  # handed to the swap that failed: nothing written after it
    assert _snapshot(folder.path) == old
    assert [p.name for p in goldens.rglob(".*")] == []  # no work folder left


def test_goldens_manifest_and_plan_are_one_swap_with_the_plans_events(tmp_path, kinds):
    goldens = tmp_path / "goldens"
    _old_version(goldens, tmp_path, kinds)
    folder = _golden_folder(goldens, kinds)
    _stage_golden(folder, tmp_path, [2.0])
    book = _book(goldens, update=True)
    book.check("speed", "5s", _speed(target=0.5))
    book.check("speed", "10s", _speed(workload="10s"))
    folder.plans = book
    swapped: list[str] = []
    real = swap.replace_folder

    def counting(path: Path, fill: Any) -> None:
        swapped.append(str(path))
        real(path, fill)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(folder_module, "replace_folder", counting)
        events = folder.commit()
        assert book.commit() == []
    assert swapped == [str(folder.path)]  # one commit: goldens, manifest and plan together
    got = {(e.name, e.action): e.detail for e in events}
    assert ("a.npy", "changed") in got
    assert got[(PLAN, "changed")] == "speed_gate '5s': target=0.3 -> target=0.5"
    assert (PLAN, "created") in got
    assert read_plans(folder.path)[("speed", "5s")] == _speed(target=0.5)
    assert set(read_manifest(folder.path)) == {"a.npy"}


def test_a_plan_change_alone_swaps_the_folder_and_a_plan_no_longer_asked_goes(tmp_path, kinds):
    goldens = tmp_path / "goldens"
    old = _old_version(goldens, tmp_path, kinds)
    folder = _golden_folder(goldens, kinds)
    _stage_golden(folder, tmp_path, [1.0])  # the same golden
    book = _book(goldens, update=True)
    book.check("speed", "5s", _speed(target=0.5))
    folder.plans = book
    events = folder.commit()
    assert [(e.name, e.action) for e in events] == [("a.npy", "unchanged"), (PLAN, "changed")]
    assert read_plans(folder.path)[("speed", "5s")] == _speed(target=0.5)
    assert _snapshot(folder.path)[MANIFEST] == old[MANIFEST]
    # Nothing asked any more: the new version has no plan.
    again = _golden_folder(goldens, kinds)
    _stage_golden(again, tmp_path, [1.0])
    empty = _book(goldens, update=True)
    again.plans = empty
    assert [(e.name, e.action) for e in again.commit()] == [
        ("a.npy", "unchanged"),
        (PLAN, "removed"),
    ]
    assert not (folder.path / PLAN).exists()
    # Nothing changed at all: nothing swapped, nothing written.
    before = folder.path.stat().st_ino
    third = _golden_folder(goldens, kinds)
    _stage_golden(third, tmp_path, [1.0])
    third.plans = _book(goldens, update=True)
    assert [e.action for e in third.commit()] == ["unchanged"]
    assert folder.path.stat().st_ino == before


def test_a_conflicting_golden_update_writes_no_plan_either(tmp_path, kinds):
    """#20: another session changed the folder meanwhile: nothing is written, the plan neither
    (was: the plan was written after the refused swap, over the other session's)."""
    goldens = tmp_path / "goldens"
    _old_version(goldens, tmp_path, kinds)
    mine = _golden_folder(goldens, kinds)
    _stage_golden(mine, tmp_path, [2.0])
    other = _golden_folder(goldens, kinds)
    _stage_golden(other, tmp_path, [3.0])
    theirs = _book(goldens, update=True)
    theirs.check("speed", "5s", _speed(target=0.7))
    other.plans = theirs
    other.commit()
    committed = _snapshot(other.path)
    book = _book(goldens, update=True)
    book.check("speed", "5s", _speed(target=0.5))
    mine.plans = book
    with pytest.raises(GoldenConflict):
        mine.commit()
    assert book.commit() == []
    assert _snapshot(mine.path) == committed


# ------------------------------------------------------------------ one version read (#20)


def _version(goldens: Path, tmp_path: Path, kinds: KindRegistry, value: float, target: float):
    """Another session's update: a golden of [value] and a plan of ``target``, one swap."""
    folder = _golden_folder(goldens, kinds)
    _stage_golden(folder, tmp_path, [value])
    book = _book(goldens, update=True)
    book.check("speed", "5s", _speed(target=target))
    folder.plans = book
    folder.commit()


def _reader(goldens: Path, kinds: KindRegistry, tmp_path: Path) -> tuple[GoldenFolder, PlanBook]:
    """A check's golden folder holding the test's plans, as the golden fixture makes them."""
    folder = GoldenFolder(
        goldens, "test_mod", "test_y", TEST_ID, kinds, digest_above=1 << 20, workdir=tmp_path / "r"
    )
    book = _book(goldens, update=False)
    folder.hold_plans(book)
    return folder, book


def test_a_test_is_judged_by_the_plan_read_with_its_goldens_not_a_newer_one(tmp_path, kinds):
    """#20: another session swaps the folder between a check's goldens and its first
    speed_gate: the plan judged is the one read with the goldens (was: the new one, by path)."""
    goldens = tmp_path / "goldens"
    _version(goldens, tmp_path, kinds, 1.0, target=0.3)
    folder, book = _reader(goldens, kinds, tmp_path)
    compared = folder.manifest()["a.npy"].sha256
    _version(goldens, tmp_path, kinds, 2.0, target=0.5)
    assert read_plans(folder.path)[("speed", "5s")] == _speed(target=0.5)  # the live one
    record = book.check("speed", "5s", _speed(target=0.3))
    assert record.frozen
    assert record.plan == _speed(target=0.3)  # frozen with the goldens compared
    assert book.unused() == []
    assert read_manifest(folder.path)["a.npy"].sha256 != compared


def test_a_plan_read_first_reads_the_goldens_of_its_version(tmp_path, kinds):
    """#20: the first speed_gate comes before the golden check: the plan is read through the
    golden folder's version, and the goldens compared later are that version's."""
    goldens = tmp_path / "goldens"
    _version(goldens, tmp_path, kinds, 1.0, target=0.3)
    folder, book = _reader(goldens, kinds, tmp_path)
    assert book.check("speed", "5s", _speed(target=0.3)).frozen
    _version(goldens, tmp_path, kinds, 2.0, target=0.5)
    old = np.load(folder._copies["a.npy"], allow_pickle=False)
    assert old.tolist() == [1.0]  # the copy read with the plan, before the swap
    assert folder.manifest()["a.npy"].sha256 != read_manifest(folder.path)["a.npy"].sha256


def test_a_plan_of_another_version_than_the_goldens_fails_naming_the_folder(tmp_path, kinds):
    """#20: a plan read by its path before the golden folder was read, and another session's
    swap between the two: the test fails, naming the folder, never judged by a mix."""
    goldens = tmp_path / "goldens"
    _version(goldens, tmp_path, kinds, 1.0, target=0.3)
    book = _book(goldens, update=False)
    assert book.check("speed", "5s", _speed(target=0.3)).frozen
    _version(goldens, tmp_path, kinds, 2.0, target=0.5)
    folder = _golden_folder(goldens, kinds)
    folder.hold_plans(book)
    with pytest.raises(PlanReplaced) as caught:
        folder.manifest()
    message = str(caught.value)
    assert str(folder.path) in message
    assert "replaced by another session during this test" in message
    assert "Run again" in message


def test_a_swap_that_keeps_the_plan_is_no_mix(tmp_path, kinds):
    """Goldens of another version with the very same plan.json: the test is judged by the plan
    frozen with them all the same, so nothing fails."""
    goldens = tmp_path / "goldens"
    _version(goldens, tmp_path, kinds, 1.0, target=0.3)
    book = _book(goldens, update=False)
    assert book.check("speed", "5s", _speed(target=0.3)).frozen
    _version(goldens, tmp_path, kinds, 2.0, target=0.3)
    folder = _golden_folder(goldens, kinds)
    folder.hold_plans(book)
    assert set(folder.manifest()) == {"a.npy"}


def test_a_folder_of_plans_only_is_read_through_the_folder(tmp_path, kinds):
    """A test that checks no golden but freezes plans: its folder has no manifest, and the plan
    read through it is its plan.json (never "no plan" for want of a manifest)."""
    _freeze(tmp_path, {("speed", "5s"): _speed()})
    folder, book = _reader(tmp_path, kinds, tmp_path)
    assert book.check("speed", "5s", _speed()).frozen
    assert folder.manifest() == {}


def test_a_plan_that_cannot_be_read_through_the_folder_is_named_where_used(tmp_path, kinds):
    goldens = tmp_path / "goldens"
    _version(goldens, tmp_path, kinds, 1.0, target=0.3)
    folder, book = _reader(goldens, kinds, tmp_path)
    (folder.path / PLAN).unlink()
    os.mkfifo(folder.path / PLAN)
    assert set(folder.manifest()) == {"a.npy"}  # the goldens still read
    with pytest.raises(ManifestError, match=r"plan\.json"):
        book.check("speed", "5s", _speed(target=0.3))


def test_reading_the_plan_with_the_goldens_costs_no_copy_and_no_fsync(tmp_path, kinds):
    """The plan is read in memory through the folder's descriptor: no copy beside the stored
    goldens' copies, and nothing flushed to disk by a check."""
    goldens = tmp_path / "goldens"
    _version(goldens, tmp_path, kinds, 1.0, target=0.3)
    folder, book = _reader(goldens, kinds, tmp_path)

    def no_fsync(fd: int) -> None:
        raise AssertionError("a check flushed a file to disk")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", no_fsync)
        assert book.check("speed", "5s", _speed(target=0.3)).frozen
        assert set(folder.manifest()) == {"a.npy"}
    assert sorted(p.name for p in (tmp_path / "r").rglob("*") if p.is_file()) == ["a.npy"]


# ------------------------------------------------------------------ manifest entry hashes


def test_a_hand_edited_gate_in_the_manifest_is_an_integrity_error(tmp_path, kinds):
    folder = _golden_folder(tmp_path, kinds)
    _stage_golden(folder, tmp_path, [1.0, 2.0])
    folder.commit()
    path = folder.path / MANIFEST
    data = json.loads(path.read_text())
    assert len(data["artifacts"]["a.npy"]["entry_sha256"]) == 64
    data["artifacts"]["a.npy"]["gate"] = "tolerance(atol=1, rtol=0)"
    path.write_text(json.dumps(data))
    entry = read_manifest(folder.path)["a.npy"]
    with pytest.raises(GoldenIntegrityError) as caught:
        check_integrity(folder.path, entry, kinds=kinds)
    assert str(path) in str(caught.value)
    assert "'a.npy'" in str(caught.value)
    assert "tolerance" in str(caught.value)
    # The compare path meets it before any comparison, with gate=None too.
    fresh = _golden_folder(tmp_path, kinds)
    obtained = tmp_path / "o.npy"
    np.save(obtained, np.array([1.0, 2.0], dtype=np.float32), allow_pickle=False)
    with pytest.raises(GoldenIntegrityError):
        fresh.compare("a.npy", obtained, None)


@pytest.mark.parametrize("field", ["kind", "stored", "size", "scope"])
def test_every_other_field_is_covered_but_provenance(tmp_path, kinds, field):
    folder = _golden_folder(tmp_path, kinds)
    _stage_golden(folder, tmp_path, [1.0])
    folder.commit()
    path = folder.path / MANIFEST
    data = json.loads(path.read_text())
    data["artifacts"]["a.npy"]["provenance"] = {"when": "edited"}
    path.write_text(json.dumps(data))
    check_integrity(folder.path, read_manifest(folder.path)["a.npy"], kinds=kinds)
    edits = {"kind": "bytes", "stored": "digest", "size": 1, "scope": "all"}
    data["artifacts"]["a.npy"][field] = edits[field]
    path.write_text(json.dumps(data))
    entry = read_manifest(folder.path)["a.npy"]
    if field == "scope":  # "all" is the default and not written: the same entry
        check_integrity(folder.path, entry, kinds=kinds)
        return
    # A size or kind edit already disagrees with the stored file, and is named by that check.
    by_hand = "edited by hand" if field == "stored" else None
    with pytest.raises(GoldenIntegrityError, match=by_hand):
        check_integrity(folder.path, entry, kinds=kinds)


def test_a_manifest_without_entry_hashes_is_accepted_and_noted(tmp_path, kinds):
    folder = _golden_folder(tmp_path, kinds)
    _stage_golden(folder, tmp_path, [1.0])
    folder.commit()
    path = folder.path / MANIFEST
    data = json.loads(path.read_text())
    del data["artifacts"]["a.npy"]["entry_sha256"]
    path.write_text(json.dumps(data))
    entries = read_manifest(folder.path)
    assert unhashed(entries) == ["a.npy"]
    check_integrity(folder.path, entries["a.npy"], kinds=kinds)


def test_the_committed_goldens_still_read(kinds):
    root = Path(__file__).resolve().parents[2] / "goldens"
    for manifest in root.rglob(MANIFEST):
        for entry in read_manifest(manifest.parent).values():
            check_integrity(manifest.parent, entry)


# ------------------------------------------------------------------ receipts


def _receipt(section: str, entry: dict, name: str, plan: Plan) -> dict:
    record = {
        "frozen": True,
        "section": section,
        "name": name,
        "plan": plan.to_json(),
        "sha256": entry_sha256(section, name, plan.to_json()),
    }
    return {section: [{**entry, "gate_plan": record}]}


def test_a_receipt_that_ran_another_target_than_its_frozen_plan_is_a_contradiction():
    plan = _speed()
    entry = {"workload": "5s", "target": 0.3, "pairs": 8, "design": "ABBA", "confidence": 0.95}
    assert receipt_contradictions(_receipt("speed", entry, "5s", plan)) == []
    found = receipt_contradictions(_receipt("speed", {**entry, "target": 0.1}, "5s", plan))
    assert found == ["speed[0]: ran target=0.1 but the frozen plan says target=0.3"]
    edited = _receipt("speed", entry, "5s", plan)
    edited["speed"][0]["gate_plan"]["plan"] = {**plan.to_json(), "target": 0.1}
    assert "does not hash" in receipt_contradictions(edited)[0]
    other = receipt_contradictions(_receipt("speed", entry, "15s", _speed(workload="15s")))
    assert "not of '5s'" in other[0]


def test_a_receipt_whose_compare_gate_differs_from_its_frozen_plan_is_a_contradiction():
    plan = lossless_plan("decoded")
    entry = {"label": "cmp", "gates": {"clip.mp4": "decoded"}}
    assert receipt_contradictions(_receipt("lossless", entry, "cmp", plan)) == []
    lossy = {"label": "cmp", "gates": {"clip.mp4": "tolerance(atol=1, rtol=0)"}}
    found = receipt_contradictions(_receipt("lossless", lossy, "cmp", plan))
    assert found
    assert "frozen plan says 'decoded'" in found[0]
    unfrozen = {"lossless": [{**lossy, "gate_plan": {"frozen": False}}]}
    assert receipt_contradictions(unfrozen) == []


def test_a_matrix_run_count_is_frozen_only_when_given_and_a_receipt_is_held_to_it():
    """#20: ``runs=`` of ``lossless.matrix`` is frozen like its axes; a plan frozen with none
    (every plan before counts were) freezes none; a receipt that ran fewer runs per cell than
    its frozen plan says is a contradiction."""
    axes = {"threads": [1, 2]}
    frozen = matrix_plan(axes, "threads=1", None, runs=3)
    assert frozen.to_json()["runs"] == 3
    assert matrix_changes(frozen, matrix_plan(axes, "threads=1", None, runs=3)) is None
    assert matrix_changes(frozen, matrix_plan(axes, "threads=1", None, runs=2)) == (
        "runs=3",
        "runs=2",
    )
    old = matrix_plan(axes, "threads=1", None)
    assert "runs" not in old.to_json()
    assert matrix_changes(old, matrix_plan(axes, "threads=1", None, runs=2)) is None
    entry = {"label": "knobs", "axes": axes, "reference": "threads=1", "runs_per_cell": 3}
    assert receipt_contradictions(_receipt("matrix", entry, "knobs", frozen)) == []
    fewer = {**entry, "runs_per_cell": 2}
    assert receipt_contradictions(_receipt("matrix", fewer, "knobs", frozen)) == [
        "matrix[0]: ran runs=2 but the frozen plan says runs=3"
    ]
    assert receipt_contradictions(_receipt("matrix", fewer, "knobs", old)) == []


def test_the_committed_matrix_plan_without_a_run_count_still_matches_its_test():
    """The repository's racy-knobs plan was frozen before matrix run counts were: its test,
    which gives ``runs=2``, still matches it as it is (no refreezing needed)."""
    folder = Path(__file__).resolve().parents[2] / "goldens/tests/gates/test_ref2va"
    (plan,) = read_plans(folder / "test_matrix_of_the_racy_knobs").values()
    assert isinstance(plan, MatrixPlan)
    assert plan.runs is None
    asked = matrix_plan({"threads": [1, 2, 4], "chunk": [1, 4]}, "threads=1, chunk=1", None, runs=2)
    assert matrix_changes(plan, asked) is None


def test_require_published_refuses_a_plan_not_frozen_naming_label_and_fix(tmp_path):
    from pytest_lossless.goldens.plans import PlanNotFrozen

    book = PlanBook(
        plan_folder(tmp_path, "test_mod", "test_y"),
        TEST_ID,
        boundary=tmp_path,
        update=False,
        require_frozen=True,
    )
    with pytest.raises(PlanNotFrozen) as caught:
        book.check("speed", "5s", _speed())
    assert isinstance(caught.value, GateChanged)
    assert "speed_gate '5s'" in str(caught.value)
    assert "--update-goldens --lossless" in str(caught.value)
    # A frozen plan passes in that mode.
    _freeze(tmp_path, {("speed", "5s"): _speed()})
    book = PlanBook(book.folder, TEST_ID, boundary=tmp_path, update=False, require_frozen=True)
    assert book.check("speed", "5s", _speed()).frozen is True


def test_summary_and_verify_name_the_plans_not_frozen(tmp_path):
    import io

    from pytest_lossless.__main__ import verify_command
    from pytest_lossless.evidence.receipts import Receipt
    from pytest_lossless.evidence.summary_md import summary_lines

    receipt = Receipt("t.py::test_x")
    receipt.add_speed({"workload": "5s", "gate_plan": {"frozen": False}})
    receipt.set_outcome("call", "passed")
    receipt.write(tmp_path, root=tmp_path)
    assert any(line.startswith("1 gate plan was not frozen") for line in summary_lines(tmp_path))
    out = io.StringIO()
    verify_command([tmp_path], entry_points=False, out=out)
    assert "NOT FROZEN: 1 gate plan in 1 receipt checked against no plan.json (t.py::test_x)" in (
        out.getvalue()
    )
