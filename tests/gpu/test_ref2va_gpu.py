"""The demo's gate suite on a CUDA GPU: `pytest -m gpu --lossless --lossless-backend=cuda`.

The ref2va model's torch build (``fixtures/ref2va/torch_model.py``, ``--device cuda``) runs on the
allocation's GPU as a command and as an HTTP server; its frames, PCM and latent are gated against
GPU goldens (``scope="device"``: one set per device kind and runtime, kept as digests); the
``fast`` build (conditioning hoisted, one step captured as a CUDA graph and replayed) must be
lossless (with request coverage and its dispatch proof) and at least 30% faster per request
on the 5 s and 15 s workloads (paired ABBA timing of requests to a control and a fast server,
both inside the test's one allocation: one lock for every arm; a worker loads torch, the GPU and
the weights once, as in production, where a command would pay ~9 s of imports on every run);
``tf32`` must FAIL against the fp32 control, and pass only a declared tolerance as LOSSY-PASS;
``atomics`` (float ``index_add_``) must leave its control INCONCLUSIVE.

CI has no GPU and no torch: each test skips there with its reason (no ``--lossless``, a backend
other than cuda, or no torch). Nothing here imports torch: the model runs in its own process.
``tests/gpu/run_on_device.sh`` runs all of it on one GPU machine; ``docs/gpu.md`` has a run.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless import Media, tolerance
from pytest_lossless.run import lifecycle_verdict
from tests.gates.ref2va import (
    MODEL,
    OUTPUTS,
    PROMPT,
    REFERENCE,
    REPO,
    SEED,
    SIZE,
    STEPS,
    generate_argv,
)

pytestmark = [pytest.mark.slow, pytest.mark.gpu(devices=1), pytest.mark.lossless]

#: The environment every GPU run gets: the torch model, and cuBLAS's deterministic workspace
#: (set here, not only inside the model, so that the receipt's determinism knobs record it).
GPU_ENV = {"REF2VA_DEVICE": "cuda", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
#: The line the fast build prints when its graph-replay path runs: its dispatch proof.
GPU_FAST_PATH = r"ref2va: dispatch torch cuda-graph hoisted-conditioning"
WORKLOADS = [pytest.param(5, id="5s"), pytest.param(15, id="15s")]
#: The declared, lossy tolerance for TF32 latents: |tf32 - fp32| <= atol + rtol*|fp32|.
TF32_LATENT = tolerance(atol=0.01, rtol=0.01)
MODEL_FILES = {
    "torch_model": REPO / "fixtures" / "ref2va" / "torch_model.py",
    "model": REPO / "fixtures" / "ref2va" / "model.py",
}
#: Where each run's device figures are appended as JSON lines (set by run_on_device.sh).
FIGURES_ENV = "REF2VA_GPU_FIGURES"


@pytest.fixture(autouse=True)
def cuda_devices(request: pytest.FixtureRequest) -> Any:
    """The allocation, when it is a real CUDA GPU and torch is importable; else skip."""
    if not request.config.getoption("lossless", default=False):
        pytest.skip("a lossless gate: run with --lossless (and --lossless-backend=cuda)")
    devices = request.getfixturevalue("devices")
    if devices.backend != "cuda":
        pytest.skip(
            f"needs a CUDA GPU: this allocation's backend is {devices.backend!r} "
            "(run with --lossless-backend=cuda on a machine with one)"
        )
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch (with CUDA) to run the ref2va torch model")
    return devices


def _note(variant: str, seconds: float, result: Any) -> None:
    """Print (and append to $REF2VA_GPU_FIGURES) what one command run measured on the device."""
    _write_figures(
        "command",
        variant,
        seconds,
        result.out_dir,
        result.measured_seconds,
        result.record.get("device_memory", "not in this plugin's run record"),
    )


def _note_request(variant: str, seconds: float, paths: dict[str, Path], wall: float) -> None:
    folder = paths["latent.npy"].parent
    _write_figures("request", variant, seconds, folder, wall, "server: see its run record")


def _write_figures(
    how: str, variant: str, seconds: float, folder: Path, wall: float, memory: Any
) -> None:
    report: dict[str, Any] = {}
    timings = Path(folder) / "timings.json"
    if timings.is_file():
        report = json.loads(timings.read_text()).get("device_report", {})
    line = {
        "how": how,
        "variant": variant,
        "workload_s": seconds,
        "wall_seconds": round(wall, 3),
        "denoise_seconds": report.get("denoise_seconds"),
        "torch_peak_allocated_mib": report.get("peak_memory_allocated_mib"),
        "torch_peak_reserved_mib": report.get("peak_memory_reserved_mib"),
        "gpu": report.get("gpu"),
        "device_memory": memory,
    }
    print("gpu-run " + json.dumps(line, sort_keys=True))
    path = os.environ.get(FIGURES_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line, sort_keys=True) + "\n")


def generate(model_run: Any, variant: str, seconds: int) -> Any:
    """One command-line run of the torch model on the allocation's GPU."""
    result = model_run(
        generate_argv(variant, seconds, "--device", "cuda"),
        outputs=OUTPUTS,
        env=GPU_ENV,
        cwd=REPO,
        timeout=300,
        inputs={"reference": REFERENCE, **MODEL_FILES},
    )
    _note(variant, seconds, result)
    return result


def media(seconds: int) -> dict[str, Media]:
    """What every run was asked for: frames at 24 fps, stereo PCM at 48 kHz (the latent is a
    tensor: it has no stream to cover)."""
    asked = Media(seconds, fps=24, sample_rate=48_000, channels=2)
    return {"clip.mp4": asked, "audio.wav": asked}


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    return name in inspect.signature(fn).parameters


def check_goldens(golden: Any, produce: Callable[[], Any], seconds: int) -> None:
    """Gate one run against this device's goldens: ``scope="device"`` where the plugin has it.

    With ``check_all(scope=)`` a producer runs twice under --update-goldens and must agree with
    itself; where only ``check(scope=)`` exists the run is made once and each artifact checked.
    Without scopes (an older plugin) the goldens are kept at the default scope.
    """
    extra: dict[str, Any] = {}
    if _accepts(golden.check_all, "expect"):
        extra["expect"] = media(seconds)
    if _accepts(golden.check_all, "scope"):
        golden.check_all(produce, scope="device", **extra)
        print("goldens: scope=device (check_all)")
    elif _accepts(golden.check, "scope"):
        result = produce()
        for name in OUTPUTS:
            golden.check(name, result[name], scope="device")
        print("goldens: scope=device (check)")
    else:
        golden.check_all(produce, **extra)
        print("goldens: default scope (this plugin's golden.check has no scope=)")


def start_server(model_run: Any, variant: str = "control", workers: int = 2) -> Any:
    return model_run.server(
        [
            *MODEL,
            "serve",
            "--device",
            "cuda",
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
        startup_timeout=180,
        env=GPU_ENV,
        cwd=REPO,
        workers_expected=workers,
    )


def request_clip(server: Any, seconds: int, *, with_response: bool = False) -> Any:
    response = server.request(
        "POST",
        "/generate",
        files={"image": REFERENCE},
        data={
            "prompt": PROMPT,
            "seed": SEED,
            "duration": str(seconds),
            "size": SIZE,
            "steps": STEPS,
        },
        timeout=300,
    )
    assert response.status == 200, response.text()
    paths = json.loads(response.text())
    found = {
        "clip.mp4": Path(paths["video"]),
        "audio.wav": Path(paths["audio"]),
        "latent.npy": Path(paths["latent"]),
    }
    return (found, response) if with_response else found


# ---- goldens: the control on this GPU --------------------------------------------------------


@pytest.mark.parametrize("seconds", WORKLOADS)
def test_gpu_cli_matches_goldens(model_run, golden, seconds):
    check_goldens(golden, lambda: generate(model_run, "control", seconds), seconds)


@pytest.mark.parametrize("seconds", WORKLOADS)
def test_gpu_server_matches_goldens(model_run, golden, seconds):
    server = start_server(model_run)
    check_goldens(golden, lambda: request_clip(server, seconds), seconds)
    lifecycle = lifecycle_verdict(server.stop())
    assert lifecycle.clean, lifecycle.summary


# ---- the fast build, served: lossless, faster --------------------------------------------


class Served(Mapping[str, Path]):
    """One request to a served build: its artifacts (what ``lossless`` compares), its request
    time (what ``speed_gate`` times: torch, the device and the weights are loaded once per
    worker, as in production) and the server's logs (where the dispatch proof is searched)."""

    def __init__(self, paths: dict[str, Path], seconds: float, server: Any) -> None:
        self._paths = paths
        self.measured_seconds = seconds
        self.stdout_path = Path(server.record["stdout_path"])
        self.stderr_path = Path(server.record["stderr_path"])

    def __getitem__(self, name: str) -> Path:
        return self._paths[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def served(
    server: Any, variant: str, seconds: int, *, only: str | None = None
) -> Callable[[], Any]:
    """A zero-argument arm: one request to ``server`` (a ``variant`` build)."""

    def one_request() -> Served:
        paths, response = request_clip(server, seconds, with_response=True)
        _note_request(variant, seconds, paths, response.seconds)
        if only is not None:
            paths = {only: paths[only]}
        return Served(paths, response.seconds, server)

    return one_request


@pytest.mark.parametrize("seconds", WORKLOADS)
def test_gpu_fast_is_lossless_and_faster(model_run, lossless, speed_gate, seconds):
    # Two servers of one worker each, on the one GPU of this test's allocation: every arm below
    # runs under the same lock. Lossless first (control twice, then the candidate), then paired
    # ABBA timing of requests.
    control = start_server(model_run, "control", workers=1)
    fast = start_server(model_run, "fast", workers=1)
    lossless.compare(
        served(control, "control", seconds),
        served(fast, "fast", seconds),
        label=f"gpu fast vs control {seconds}s",
        expect=media(seconds),
        proof=GPU_FAST_PATH,
    )
    speed_gate(
        served(control, "control", seconds),
        served(fast, "fast", seconds),
        target=0.30,
        workload=f"gpu {seconds}s",
        proof=GPU_FAST_PATH,
        pairs=5,  # the fewest blocks a 95% sign test can decide on: GPU timings are steady
    )
    for server in (control, fast):
        lifecycle = lifecycle_verdict(server.stop())
        assert lifecycle.clean, lifecycle.summary


# ---- expected verdicts: TF32 is caught, atomics leave the control unrepeatable ----------------


def test_gpu_tf32_is_caught(model_run, lossless):
    control = start_server(model_run, "control", workers=1)
    tf32 = start_server(model_run, "tf32", workers=1)
    # Exact gates: TF32 products change the latent, so the frames and the PCM too: FAIL.
    lossless.compare(
        served(control, "control", 1),
        served(tf32, "tf32", 1),
        label="gpu tf32 vs fp32 control 1s",
        expect="FAIL",
    )
    # A declared tolerance on the latent alone: LOSSY-PASS, never PASS.
    verdict = lossless.compare(
        served(control, "control", 1, only="latent.npy"),
        served(tf32, "tf32", 1, only="latent.npy"),
        label="gpu tf32 latent within tolerance 1s",
        gate={"latent.npy": TF32_LATENT},
    )
    assert verdict.lossy
    for server in (control, tf32):
        assert lifecycle_verdict(server.stop()).clean


def test_gpu_atomics_control_is_inconclusive(model_run, lossless):
    atomics = start_server(model_run, "atomics", workers=1)
    fast = start_server(model_run, "fast", workers=1)
    lossless.compare(
        served(atomics, "atomics", 1),
        served(fast, "fast", 1),
        runs=3,
        label="gpu atomics control 1s",
        expect="INCONCLUSIVE",
    )
    for server in (atomics, fast):
        assert lifecycle_verdict(server.stop()).clean
