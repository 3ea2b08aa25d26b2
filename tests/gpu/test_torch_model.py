"""The ref2va torch model outside the gate suite: how the CLI selects it and refuses what it
cannot run (no torch needed), and, where torch is installed, that ``fast`` is bit-identical to
``control`` at a small size (on the GPU if there is one, else on torch's CPU build)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fixtures.ref2va", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
def test_gpu_only_variants_are_refused_by_the_numpy_model(tmp_path: Path) -> None:
    done = run_cli("generate", "--prompt", "x", "--duration", "1", "--variant", "tf32",
                   "--out", str(tmp_path / "out"))  # fmt: skip
    assert done.returncode == 2
    assert "runs on the torch model only: add --device cuda" in done.stderr


def test_a_bad_device_variable_is_an_input_error(tmp_path: Path) -> None:
    done = run_cli(
        "generate", "--prompt", "x", "--out", str(tmp_path), env={"REF2VA_DEVICE": "tpu"}
    )
    assert done.returncode == 2
    assert "REF2VA_DEVICE='tpu' is not one of cpu, cuda" in done.stderr


@pytest.mark.slow
def test_device_cuda_says_what_is_missing(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is None:
        expected = "--device cuda needs PyTorch"
    else:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a CUDA GPU: the gate suite covers it")
        expected = "--device cuda: no CUDA GPU is visible"
    done = run_cli("generate", "--device", "cuda", "--prompt", "x", "--duration", "1",
                   "--out", str(tmp_path / "out"))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


def test_fast_is_bit_identical_to_control_at_a_small_size(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch", reason="needs torch (CI has none)")
    from fixtures.ref2va import REFERENCE_IMAGE
    from fixtures.ref2va import torch_model as tm
    from fixtures.ref2va.model import make_request
    from fixtures.ref2va.writer import load_image

    monkeypatch.setenv("REF2VA_TORCH_WIDTH", "64")
    monkeypatch.setenv("REF2VA_TORCH_LAYERS", "2")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    image = load_image(REFERENCE_IMAGE)
    out = {}
    for variant in ("control", "fast"):
        req = make_request(prompt="a fox", seed=3, duration=1, size="64x64", steps=3,
                           variant=variant)  # fmt: skip
        out[variant] = tm.generate(req, image, device=device)
    control, fast = out["control"], out["fast"]
    assert control.latent.shape == (7, 16, 8, 8)
    assert np.array_equal(control.latent.view(np.uint32), fast.latent.view(np.uint32))
    assert np.array_equal(control.frames, fast.frames)
    assert np.array_equal(control.audio, fast.audio)
    assert fast.device["shape"] == {"cond_width": 64, "cond_layers": 2, "denoise_width": 1024}
