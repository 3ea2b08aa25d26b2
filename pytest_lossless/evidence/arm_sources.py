"""Which source revision each arm of a comparison ran, as ``verify`` prints it.

A run records the source trees it was built from (``model_run(..., sources=[...])``: revision,
dirty flag, diff hash, publication, see :mod:`.provenance`). Which arm a run belongs to is
said by the entries that used it: a speed sample names its ``arm`` and the runs it timed; a
lossless entry's runs have a ``role`` and artifacts that are a run's declared outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..core.records import JsonObject, json_object, json_objects
from ..core.text import printable
from .provenance import SourceState
from .receipts import ReceiptRecord

#: The arms of a comparison, in the order ``verify`` prints them; runs of neither are "other".
ARMS = ("control", "candidate")
OTHER_ARM = "other"


def arm_sources(receipts: Iterable[ReceiptRecord]) -> dict[str, dict[str, list[SourceState]]]:
    """Arm -> source tree -> each distinct state its runs recorded (``model_run(sources=...)``).

    A run's arm comes from the entries that used it: a speed sample names its ``arm`` and the
    ``run``/``runs`` it timed; a lossless entry's runs have a ``role`` and artifacts whose paths
    are a run's declared outputs. Runs of neither are under :data:`OTHER_ARM`."""
    found: dict[str, dict[str, list[SourceState]]] = {}
    for receipt in receipts:
        runs = {str(r.get("name")): r for r in receipt.block("runs")}
        arm_of = _arms_of(receipt, runs)
        for name, run in runs.items():
            for tree, block in json_object(run.get("sources")).items():
                state = SourceState.read(block)
                if state is not None:
                    seen = found.setdefault(arm_of.get(name, OTHER_ARM), {})
                    states = seen.setdefault(str(tree), [])
                    if state not in states:
                        states.append(state)
    order = {arm: i for i, arm in enumerate((*ARMS, OTHER_ARM))}
    return dict(sorted(found.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))


def _arms_of(receipt: ReceiptRecord, runs: Mapping[str, JsonObject]) -> dict[str, str]:
    """Run name -> the arm that ran it, from the speed and lossless entries (first one wins)."""
    arm_of: dict[str, str] = {}
    for entry in receipt.block("speed"):
        for sample in json_objects(entry.get("samples")):
            listed = sample.get("runs")
            names = [sample["run"]] if isinstance(sample.get("run"), str) else []
            for name in names + (listed if isinstance(listed, list) else []):
                arm_of.setdefault(str(name), str(sample.get("arm")))
    by_output = {
        str(output["path"]): name
        for name, run in runs.items()
        for output in json_object(run.get("outputs")).values()
        if isinstance(output, dict) and output.get("path")
    }
    for entry in receipt.block("lossless"):
        for compared in json_objects(entry.get("runs")):
            for artifact in json_object(compared.get("artifacts")).values():
                found = (
                    by_output.get(str(artifact.get("path"))) if isinstance(artifact, dict) else None
                )
                if found is not None:
                    arm_of.setdefault(found, str(compared.get("role") or OTHER_ARM))
    return arm_of


def arm_source_lines(receipts: Iterable[ReceiptRecord]) -> list[str]:
    """``verify``'s lines on which source revision each arm ran; none when no run named any."""
    arms = arm_sources(receipts)
    if not arms:
        return []
    lines = ["sources per arm:"]
    for arm, trees in arms.items():
        for tree, states in trees.items():
            shown = "; ".join(s.describe() for s in states)
            many = f"{len(states)} states: " if len(states) > 1 else ""
            lines.append(printable(f"  {arm} {tree}: {many}{shown}"))
    return lines


__all__ = [
    "ARMS",
    "OTHER_ARM",
    "arm_source_lines",
    "arm_sources",
]
