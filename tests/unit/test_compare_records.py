"""The comparison records (#19) read the JSON today's code writes and write it back exactly:
every ``lossless`` entry of the real receipts in tests/data/gpu/ref2va, and a matrix block."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.compare.matrix import Grid, rederive, run_matrix
from pytest_lossless.compare.repeatability import LosslessVerdict
from pytest_lossless.core.verdict import Verdict
from pytest_lossless.kinds.registry import KindRegistry

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu" / "ref2va"
#: Keys the plugin adds beside a verdict's own in a receipt entry.
PLUGIN_KEYS = ("gate_plan", "expect_verdict", "expected")


def _lossless_entries() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DATA.glob("*/*.json")):
        receipt = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(receipt, dict):
            for index, entry in enumerate(receipt.get("lossless") or []):
                found.append((f"{path.name}[{index}]", entry))
    return found


@pytest.mark.parametrize(("name", "entry"), _lossless_entries())
def test_a_receipt_s_lossless_entry_reads_and_writes_back_exactly(
    name: str, entry: dict[str, Any]
) -> None:
    verdict = LosslessVerdict.from_json(entry)
    assert verdict.verdict == Verdict(entry["verdict"])
    assert verdict.runs[0].name == entry["runs"][0]["name"]
    assert verdict.control_repeatable is entry["control_repeatable"]
    own = {k: v for k, v in entry.items() if k not in PLUGIN_KEYS}
    assert json.dumps(verdict.to_json()) == json.dumps(own)


def test_the_entries_were_found() -> None:
    assert len(_lossless_entries()) >= 5  # the data folder moved: the test above ran on none


def test_a_matrix_block_reads_and_writes_back_exactly(tmp_path: Path) -> None:
    def make_run(threads: int, chunk: int) -> Any:
        return lambda: {"out.bin": b"x" * (1 if threads < 4 else 2)}

    grid = run_matrix(
        make_run,
        {"threads": [1, 4], "chunk": [8]},
        runs=2,
        kinds=KindRegistry(),
        workdir=tmp_path,
    )
    written = json.loads(json.dumps(grid.to_json()))
    again = Grid.from_json(written)
    assert again.verdicts == grid.verdicts
    assert rederive(written) == grid.verdicts
    assert again.cells[1].runs[0].name == "threads=4, chunk=8 #1"
    assert json.dumps(again.to_json()) == json.dumps(written)


def test_a_proof_block_as_written_before_reads_and_writes_back_exactly() -> None:
    from pytest_lossless.compare.proof import ProofRecord, apply

    old = {
        "rule": "regex dispatch batched",
        "runs": [
            {
                "run": "command-07",
                "found": True,
                "evidence": "stderr.txt: ref2va: dispatch batched chunk=4",
                "stream": "/tmp/run/stderr.txt",
            },
            {"run": None, "found": False, "evidence": "/dispatch batched/ not found"},
        ],
    }
    record = ProofRecord.from_json(old)
    assert [f.found for f in record.runs] == [True, False]
    assert apply(Verdict.PASS, record.runs) == Verdict.INCONCLUSIVE
    assert json.dumps(record.to_json()) == json.dumps(old)
    entry = {**_lossless_entries()[0][1], "proof": old}
    own = {k: v for k, v in entry.items() if k not in PLUGIN_KEYS}
    assert json.dumps(LosslessVerdict.from_json(entry).to_json()) == json.dumps(own)
