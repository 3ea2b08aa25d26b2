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
