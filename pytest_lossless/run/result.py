"""What a finished command hands back to the test: its declared outputs by name (a mapping),
its exit status, its measured time and its raw record (with the lifecycle verdict)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .lifecycle import lifecycle_verdict


class RunResult(Mapping[str, Path]):
    """One finished command: its declared outputs by name, exit status and raw record."""

    def __init__(
        self,
        record: dict[str, Any],
        outputs: dict[str, Path],
        returncode: int,
        stdout_path: Path,
        stderr_path: Path,
    ) -> None:
        self.record = record
        self.outputs = outputs
        self.returncode = returncode
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path

    @property
    def measured_seconds(self) -> float:
        """Wall time of the main process, from spawn to reaping."""
        return float(self.record["wall_seconds"])

    @property
    def out_dir(self) -> Path:
        return Path(self.record["out_dir"])

    @property
    def lifecycle(self) -> dict[str, Any]:
        return lifecycle_verdict(self.record)

    def __getitem__(self, name: str) -> Path:
        try:
            return self.outputs[name]
        except KeyError:
            raise KeyError(
                f"{name!r} is not a declared output of this run; declared: "
                f"{sorted(self.record.get('outputs', {}))}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def __repr__(self) -> str:
        return (
            f"RunResult(returncode={self.returncode}, seconds={self.measured_seconds:.3f}, "
            f"outputs={sorted(self.outputs)})"
        )
