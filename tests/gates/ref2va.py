"""How the gate suite drives the ref2va demo model: as a command and as an HTTP server.

This is the part a user rewrites for their own model; the tests beside it stay the same.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = [sys.executable, "-m", "fixtures.ref2va"]
REFERENCE = REPO / "fixtures" / "ref2va" / "reference.png"
PROMPT = "a lighthouse at dusk, waves breaking, gulls overhead"
SEED = "7"
#: The GPU suite's workload (tests/gpu: its goldens and receipts): the demo's default size.
STEPS = "12"
SIZE = "320x176"
#: The CPU gate suite's workload (#24): a smaller latent (16x8 cells for 128x64 pixels) with
#: more steps. The fast build's saving lives in the denoising loop (the conditioning hoisted out
#: of it); start-up, decoding, the audio and the encode cost both builds alike. Fewer steps would
#: push the speed ratio towards 1; a smaller frame with more steps keeps the loop's share of
#: each run while a 15 s clip costs a third of what 320x176 with 12 steps did: the ratio is
#: about 0.5 at 5 s and 0.4 at 15 s (it was 0.55-0.6), so the speed gate keeps its power.
GATE_STEPS = "24"
GATE_SIZE = "128x64"
OUTPUTS = {
    "clip.mp4": "{out}/clip.mp4",
    "audio.wav": "{out}/audio.wav",
    "latent.npy": "{out}/latent.npy",
}
#: The campaign's two workloads: each gets its own verdicts; nothing is added across them.
WORKLOADS = [pytest.param(5, id="5s"), pytest.param(15, id="15s")]


def generate_argv(
    variant: str, seconds: float, *more: str, size: str = SIZE, steps: str = STEPS
) -> list[str]:
    """The demo's ``generate`` command line for one build and workload (``more``: e.g. the
    GPU suite's ``--device cuda``; ``size`` and ``steps``: the GPU suite's unless given, the
    gate suite passes :data:`GATE_SIZE` and :data:`GATE_STEPS`)."""
    return [
        *MODEL,
        "generate",
        *more,
        "--image",
        str(REFERENCE),
        "--prompt",
        PROMPT,
        "--seed",
        SEED,
        "--duration",
        str(seconds),
        "--size",
        size,
        "--steps",
        steps,
        "--variant",
        variant,
        "--out",
        "{out}",
    ]


def gate_argv(variant: str, seconds: float, *more: str) -> list[str]:
    """The ``generate`` command line of the CPU gate suite's workload."""
    return generate_argv(variant, seconds, *more, size=GATE_SIZE, steps=GATE_STEPS)


def generate(model_run: Any, variant: str, seconds: int) -> Any:
    """One command-line run of the model; returns the model_run result (artifacts + record)."""
    return model_run(
        gate_argv(variant, seconds),
        outputs=OUTPUTS,
        cwd=REPO,
        timeout=300,
        inputs={"reference": REFERENCE},
    )


def arm(model_run: Any, variant: str, seconds: int) -> Callable[[], Any]:
    """A zero-argument callable performing one run: what lossless and speed_gate call."""
    return lambda: generate(model_run, variant, seconds)


def start_server(model_run: Any, variant: str = "control", workers: int = 2) -> Any:
    return model_run.server(
        [
            *MODEL,
            "serve",
            "--port",
            "{port}",
            "--workers",
            str(workers),
            "--variant",
            variant,
            "--out",
            "{out}",
        ],
        ready="http://127.0.0.1:{port}/health",
        startup_timeout=120,
        cwd=REPO,
        workers_expected=workers,
    )


def request_clip(server: Any, seconds: int, *, warmup: bool = False) -> dict[str, Path]:
    """POST the reference image; the server answers with the paths of its artifacts."""
    response = server.request(
        "POST",
        "/generate",
        files={"image": REFERENCE},
        data={
            "prompt": PROMPT,
            "seed": SEED,
            "duration": str(seconds),
            "size": GATE_SIZE,
            "steps": GATE_STEPS,
        },
        timeout=300,
        warmup=warmup,
    )
    assert response.status == 200, response.text()
    paths = json.loads(response.text())
    return {
        "clip.mp4": Path(paths["video"]),
        "audio.wav": Path(paths["audio"]),
        "latent.npy": Path(paths["latent"]),
    }
