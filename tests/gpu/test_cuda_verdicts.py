"""The plugin judging real accelerator nondeterminism on the CUDA backend.

``fixtures/gpu_reduce.py`` sums 4M float32 values of mixed magnitudes into 1024 bins on the
GPU the allocation gives it. Its ``atomic`` variant (float32 ``index_add_``: one atomicAdd per
value, in whatever order the GPU schedules them) is not repeatable, so a control built on it
must be INCONCLUSIVE; ``deterministic`` (sort + exact int64 scan) and ``deterministic-fast``
(exact int64 atomics) are bit-identical by construction, so that comparison must PASS.

Run on a CUDA machine::

    pytest tests/gpu --lossless --lossless-backend=cuda --lossless-devices=0

Everywhere else (CI has neither torch nor a GPU) each test skips with its reason: without
``--lossless`` (the marker), on a non-cuda backend, or without torch. Nothing here imports
torch at module level; the model runs in its own process.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "fixtures" / "gpu_reduce.py"
OUTPUTS = {"out.npy": "{out}/out.npy"}
SEED = "20250611"

pytestmark = [pytest.mark.gpu(devices=1), pytest.mark.lossless]


@pytest.fixture
def cuda_devices(devices: Any) -> Any:
    """The allocation, when it is a real CUDA GPU and torch is importable; else skip."""
    if devices.backend != "cuda":
        pytest.skip(
            f"needs a CUDA GPU: this allocation's backend is {devices.backend!r} "
            "(run with --lossless-backend=cuda on a machine with one)"
        )
    pytest.importorskip("torch", reason="needs torch (with CUDA) to run fixtures/gpu_reduce.py")
    return devices


def arm(model_run: Any, variant: str) -> Callable[[], Any]:
    """One run of the reduction as a zero-argument callable (what ``lossless`` calls)."""

    def one_run() -> Any:
        result = model_run(
            [sys.executable, str(PROGRAM), "--variant", variant, "--out", "{out}", "--seed", SEED],
            outputs=OUTPUTS,
            cwd=REPO,
            timeout=300,
            inputs={"program": PROGRAM},
        )
        # The run's stats line (timings, in-process repeats): shown by pytest -rA.
        print(f"{variant}: {Path(result.stdout_path).read_text().strip()}")
        return result

    return one_run


def test_atomic_control_is_inconclusive(cuda_devices, model_run, lossless):
    verdict = lossless.compare(
        arm(model_run, "atomic"),
        arm(model_run, "deterministic"),
        runs=3,
        label="atomic control vs deterministic",
        expect="INCONCLUSIVE",
    )
    print(verdict.message())


def test_deterministic_fast_is_lossless(cuda_devices, model_run, lossless):
    verdict = lossless.compare(
        arm(model_run, "deterministic"),
        arm(model_run, "deterministic-fast"),
        label="deterministic-fast vs deterministic",
    )
    print(verdict.message())
