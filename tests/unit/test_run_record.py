"""The typed run record keeps the receipt's exact shape (#19): records written by the code before
the records were typed (committed receipts of a GPU session) read back and write out unchanged,
and the lifecycle verdict judged from the typed record is the one they hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.run import Lifecycle, RunRecord, lifecycle_verdict

DATA = Path(__file__).resolve().parent.parent / "data" / "gpu" / "ref2va"


def _runs() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DATA.glob("*/*.json")):
        receipt = json.loads(path.read_text())
        if isinstance(receipt, dict):
            found += [(f"{path.name}:{r['name']}", r) for r in receipt.get("runs") or []]
    return found


RUNS = _runs()


def test_the_committed_receipts_hold_commands_and_servers() -> None:
    kinds = {run["kind"] for _, run in RUNS}
    assert kinds == {"command", "server"}, "the round trip must see both kinds of record"


@pytest.mark.parametrize(("name", "run"), RUNS, ids=[name for name, _ in RUNS])
def test_a_record_written_before_the_types_round_trips_exactly(
    name: str, run: dict[str, Any]
) -> None:
    typed = RunRecord.from_json(run)
    assert typed.problems == ()
    assert typed.to_json() == run
    # The verdict recorded then is the one derived from the typed record now.
    assert lifecycle_verdict(typed).to_json() == run["lifecycle"]


def test_a_record_that_is_no_mapping_is_judged_not_clean() -> None:
    verdict = lifecycle_verdict(RunRecord.from_json(["not", "a", "record"]))
    assert isinstance(verdict, Lifecycle)
    assert not verdict.clean
    assert verdict.reasons[0] == "the run record is not a mapping"


def test_a_process_entry_that_is_no_mapping_is_named() -> None:
    main = {"pid": 1, "role": "main", "observed": "reaped", "exit_code": 0}
    verdict = lifecycle_verdict({"kind": "command", "processes": [main, 7]})
    assert not verdict.clean
    assert "a process entry is not a mapping" in verdict.reasons
    assert verdict.counts.processes == 1


def test_a_leftover_that_is_no_mapping_still_counts() -> None:
    main = {"pid": 1, "role": "main", "observed": "reaped", "exit_code": 0}
    verdict = lifecycle_verdict({"kind": "command", "processes": [main], "leftovers": "x"})
    assert not verdict.clean
    assert verdict.counts.leftovers == 1
    assert "'x'" in verdict.summary


#: The order of a record's keys as receipts write them since the records were typed (the
#: generic serialiser writes the fields in this order; a reordered field shows here).
_ORDER = {
    "command": "kind name argv cwd out_dir port env inputs orphans_adopted stdout_path "
    "stderr_path timeout_seconds grace_seconds started_at pid timed_out processes signals "
    "leftovers ended_at device_memory wall_seconds exit_code signal outputs lifecycle",
    "server": "kind name argv cwd out_dir port env inputs orphans_adopted stdout_path "
    "stderr_path ready_url startup_timeout_seconds workers_expected startup_seconds "
    "warmup_seconds measured_seconds requests request_totals ready_polls readiness "
    "workers_at_ready started_at pid stop processes signals leftovers ended_at device_memory "
    "wall_seconds exit_code signal lifecycle",
}


@pytest.mark.parametrize(("name", "run"), RUNS, ids=[name for name, _ in RUNS])
def test_a_record_is_written_in_the_receipts_key_order(name: str, run: dict[str, Any]) -> None:
    written = RunRecord.from_json(run).to_json()
    assert list(written) == _ORDER[run["kind"]].split()
    assert json.dumps(RunRecord.from_json(json.loads(json.dumps(written))).to_json()) == (
        json.dumps(written)
    )


def test_a_value_of_the_wrong_type_is_a_problem_the_verdict_names() -> None:
    main = {"pid": 1, "role": "main", "observed": "reaped", "exit_code": "0"}
    verdict = lifecycle_verdict({"kind": "command", "processes": [main]})
    assert not verdict.clean
    assert "RunRecord.processes[0].exit_code: expected int or null, got str '0'" in verdict.reasons


def test_an_older_record_without_ppid_last_reads_its_first_parent() -> None:
    run = RunRecord.from_json({"kind": "command", "processes": [{"pid": 2, "ppid": 1}]})
    assert run.problems == ()
    assert run.processes[0].ppid_last == 1
