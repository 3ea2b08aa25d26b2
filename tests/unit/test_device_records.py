"""The devices' records (#19) read the JSON that today's code writes and write it back
byte for byte: the allocation block of real receipts (tests/data/gpu/ref2va), an orphan
entry with its signals, a process left running, a holder record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.devices.allocation import AllocationRecord, IdleProof
from pytest_lossless.devices.base import Device, DeviceIdentity
from pytest_lossless.devices.locks import HolderRecord, holder_record
from pytest_lossless.devices.orphans import OrphanEntry
from pytest_lossless.devices.runs import ListedRun

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu" / "ref2va"


def _receipts_with(block: str) -> list[tuple[str, Any]]:
    found = []
    for path in sorted(DATA.glob("*/*.json")):
        receipt = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(receipt, dict) and receipt.get(block):
            found.append((path.name, receipt[block]))
    return found


def _same(written: Any, read_back: Any) -> None:
    """Equal, and in the same key order (the receipt is written unsorted)."""
    assert json.dumps(read_back) == json.dumps(written)


@pytest.mark.parametrize(("name", "block"), _receipts_with("allocation"))
def test_a_receipt_s_allocation_block_reads_and_writes_back_exactly(name: str, block: Any) -> None:
    record = AllocationRecord.from_json(block)
    assert record.identity[0].backend == "cuda"
    assert record.idle_before.observed is True
    _same(block, record.to_json())


#: An ``allocation.orphans`` entry as the code before #19 wrote it (orphans="kill").
OLD_ORPHAN_ENTRY = {
    "pid": 4242,
    "start_ticks": 987654,
    "uid": 1000,
    "pgid": 4242,
    "sid": 4200,
    "comm": "python3",
    "command": "python3 serve.py",
    "started_at": "2026-12-01T23:01:40.682Z",
    "test": "tests/test_x.py::test_server",
    "run": "server-01",
    "holder_pid": 4200,
    "holder": "gone",
    "record": "/var/tmp/pytest-lossless-locks/cpu-slot-0.runs.1000.json",
    "found_by": "runs record",
    "devices": ["0", "1"],
    "found_at": "2026-12-01T23:05:00.000Z",
    "action": "ended",
    "signals": [
        {"signal": "SIGTERM", "target": "group", "pid": 42, "at_seconds": 0.0, "delivered": True},
        {"signal": "SIGKILL", "target": "group", "pid": 42, "at_seconds": 5.01, "delivered": True},
    ],
    "outcome": "ended after SIGKILL, 5 s after SIGTERM (5.03 s)",
    "gone_at": "2026-12-01T23:05:05.030Z",
    "waited_seconds": 5.03,
}

#: A ``left_running`` entry (the runs record's process) as written before #19.
OLD_LEFT_RUNNING = {
    "pid": 4243,
    "start": 987700,
    "pgid": 4242,
    "sid": 4200,
    "ppid": 4242,
    "comm": "worker",
    "command": "python3 -c work",
    "run": "command-01",
    "role": "descendant",
}


def test_an_old_orphan_entry_and_a_left_running_process_read_and_write_back_exactly() -> None:
    entry = OrphanEntry.from_json(OLD_ORPHAN_ENTRY)
    assert entry.orphan.pid == 4242
    assert entry.orphan.start == 987654
    assert [s.signal for s in entry.signals] == ["SIGTERM", "SIGKILL"]
    _same(OLD_ORPHAN_ENTRY, entry.to_json())
    left = ListedRun.from_json(OLD_LEFT_RUNNING)
    _same(OLD_LEFT_RUNNING, left.to_json())
    block = {
        **_receipts_with("allocation")[0][1],
        "orphans": [OLD_ORPHAN_ENTRY],
        "left_running": [OLD_LEFT_RUNNING],
    }
    _same(block, AllocationRecord.from_json(block).to_json())


def test_a_holder_record_keeps_its_fields() -> None:
    old = {
        "pid": 805,
        "pid_start": 1234,
        "host": "hostA",
        "test": "t::x",
        "since": "2026-12-01T23:01:40.682Z",
        "since_epoch": 1796166100.682,
        "locks": ["GPU-1"],
        "lock_inode": 77,
        "lock_dev": 64768,
    }
    _same(old, HolderRecord.from_json(old).to_json())
    fresh = holder_record("t::y", ["a", "b"], host="h", now=0.0).to_json()
    assert sorted(fresh) == ["host", "locks", "pid", "pid_start", "since", "since_epoch", "test"]


def test_identity_and_idle_proof_leave_out_what_was_not_told() -> None:
    identity = Device("3", name="cpu slot").identity("hostA")
    assert identity.to_json() == {
        "id": "3",
        "backend": "cpu",
        "host": "hostA",
        "lock_key": "cpu-slot-3",
        "name": "cpu slot",
    }
    assert DeviceIdentity.from_json(identity.to_json()) == identity
    for proof in (
        {"observed": False, "at": "t", "note": "cpu devices report no memory or processes"},
        {"observed": False, "error": "nvidia-smi did not answer"},
    ):
        _same(proof, IdleProof.from_json(proof).to_json())
