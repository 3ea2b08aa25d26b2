"""The ref2va demo model: repeatable control, bit-identical fast, lossy fused, nondeterministic
racy, a server that starts, generates and stops cleanly, and clear errors on bad input.

Runs use 1 s clips at 128x96 so the whole file stays within a few seconds of CPU per test.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fixtures.ref2va import REFERENCE_IMAGE, client, model, writer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--duration", "1", "--size", "128x96", "--steps", "4", "--seed", "5"]
ARTIFACTS = ("clip.mp4", "audio.wav", "latent.npy")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fixtures.ref2va", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def generate_cli(out: Path, variant: str = "control", *extra: str) -> dict[str, str]:
    proc = run_cli("generate", "--prompt", "a red fox", *SMALL, *extra, "--variant", variant,
                   "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in ARTIFACTS}


@pytest.fixture(scope="module")
def control_digests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return generate_cli(tmp_path_factory.mktemp("control"))


@pytest.fixture(scope="module")
def reference_pixels() -> np.ndarray:
    return writer.load_image(REFERENCE_IMAGE)


def small_request(variant: str) -> model.Request:
    return model.make_request(
        prompt="a red fox", seed=5, duration=1, size="128x96", steps=4, variant=variant
    )


def test_cli_writes_the_artifacts_and_reports_paths_and_timings(tmp_path: Path) -> None:
    proc = run_cli("generate", "--prompt", "a red fox", *SMALL, "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    out = (tmp_path / "o").resolve()
    assert result["video"] == str(out / "clip.mp4")
    assert result["audio"] == str(out / "audio.wav")
    assert result["latent"] == str(out / "latent.npy")
    assert set(result["timings"]) >= {"model_seconds", "encode_seconds", "total_seconds"}
    latent = np.load(out / "latent.npy", allow_pickle=False)
    assert latent.dtype == np.float32
    assert latent.shape == (7, model.LATENT_CHANNELS, 12, 16)  # 24 frames: (24 - 1) // 4 + 2
    import soundfile

    info = soundfile.info(str(out / "audio.wav"))
    assert (info.samplerate, info.channels, info.frames, info.subtype) == (
        48000,
        2,
        48000,
        "PCM_16",
    )
    saved = json.loads((out / "timings.json").read_text())
    assert saved["timings"] == result["timings"]
    assert saved["request"]["frames"] == 24


def test_control_is_repeatable_byte_for_byte(
    tmp_path: Path, control_digests: dict[str, str]
) -> None:
    assert generate_cli(tmp_path) == control_digests


def test_fast_is_byte_identical_to_control(tmp_path: Path, control_digests: dict[str, str]) -> None:
    assert generate_cli(tmp_path, "fast") == control_digests


def test_fused_differs_from_control_in_every_artifact(
    tmp_path: Path, control_digests: dict[str, str]
) -> None:
    fused = generate_cli(tmp_path, "fused")
    assert all(fused[name] != control_digests[name] for name in ARTIFACTS)


def test_fused_differs_only_by_rounding(reference_pixels: np.ndarray) -> None:
    control = model.generate(small_request("control"), reference_pixels)
    fused = model.generate(small_request("fused"), reference_pixels)
    diff = np.abs(control.latent - fused.latent)
    assert 0 < diff.max() < 1e-4
    assert 0 < np.count_nonzero(control.frames != fused.frames) < control.frames.size // 100


def test_racy_differs_between_runs(reference_pixels: np.ndarray) -> None:
    latents = [model.generate(small_request("racy"), reference_pixels).latent for _ in range(3)]
    digests = {hashlib.sha256(latent.tobytes()).hexdigest() for latent in latents}
    assert len(digests) == 3


def test_batched_ordered_matmul_equals_per_frame() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((7, 5)).astype(np.float32)
    x = rng.standard_normal((3, 5, 11)).astype(np.float32)
    batched = model.matmul_ordered(w, x)
    acc = np.empty_like(batched)
    model.matmul_ordered_into(w, x, acc, np.empty_like(batched), fresh=True)
    for t in range(3):
        assert np.array_equal(model.matmul_ordered(w, x[t]), batched[t])
        assert np.array_equal(acc[t], batched[t])
    assert np.allclose(batched, np.einsum("mk,tkn->tmn", w, x), atol=1e-5)
    assert np.allclose(model.tree_sum(x.reshape(3, -1)), x.reshape(3, -1).sum(axis=1), atol=1e-4)


def test_yuv_conversion_matches_the_integer_formula() -> None:
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (2, 3, 16, 32), dtype=np.uint8)
    frames[0, :, :2, :2] = 255
    rgb = frames.astype(np.int64)
    r, g, b = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    y = ((66 * r + 129 * g + 25 * b + 128) >> 8) + 16

    def avg(p: np.ndarray) -> np.ndarray:
        total: np.ndarray = (
            p[:, 0::2, 0::2] + p[:, 0::2, 1::2] + p[:, 1::2, 0::2] + p[:, 1::2, 1::2]
        )
        return (total + 2) >> 2

    u = ((-38 * avg(r) - 74 * avg(g) + 112 * avg(b) + 128) >> 8) + 128
    v = ((112 * avg(r) - 94 * avg(g) - 18 * avg(b) + 128) >> 8) + 128
    expected = b"".join(
        y[i].astype(np.uint8).tobytes() + u[i].astype(np.uint8).tobytes()
        + v[i].astype(np.uint8).tobytes()
        for i in range(2)
    )  # fmt: skip
    assert writer.rgb_to_yuv420(frames) == expected


def test_changing_the_prompt_or_seed_changes_the_output(reference_pixels: np.ndarray) -> None:
    base = model.generate(small_request("fast"), reference_pixels)
    other = model.make_request(prompt="a blue whale", seed=5, duration=1, size="128x96", steps=4)
    reseeded = model.make_request(prompt="a red fox", seed=6, duration=1, size="128x96", steps=4)
    assert not np.array_equal(base.latent, model.generate(other, reference_pixels).latent)
    assert not np.array_equal(base.latent, model.generate(reseeded, reference_pixels).latent)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--size", "100x50"], "size 100x50"),
        (["--size", "big"], "not WIDTHxHEIGHT"),
        (["--duration", "-1"], "duration"),
        (["--duration", "0.01"], "whole number of frames"),
        (["--steps", "0"], "steps 0"),
        (["--seed", "abc"], "seed 'abc'"),
        (["--image", "/nonexistent/ref.png"], "/nonexistent/ref.png does not exist"),
        (["--image", str(ROOT / "pyproject.toml")], "could not be decoded"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    proc = run_cli("generate", "--prompt", "x", "--duration", "1", *args, "--out", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.startswith("ref2va: error: ")
    assert needle in proc.stderr
    assert not (tmp_path / "clip.mp4").exists()


def test_bad_variant_is_refused_by_the_parser(tmp_path: Path) -> None:
    proc = run_cli("generate", "--prompt", "x", "--variant", "turbo", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "turbo" in proc.stderr


def test_the_demo_imports_only_the_trace_writer_of_pytest_lossless() -> None:
    """The demo is a model like a user's: it may call the trace writer (numpy only), and loads
    nothing else of the plugin, nor pytest."""
    code = (
        "import sys; import fixtures.ref2va.cli, fixtures.ref2va.server, fixtures.ref2va.worker;"
        "import fixtures.ref2va.runner, fixtures.ref2va.client;"
        "allowed = {'pytest_lossless', 'pytest_lossless.trace'};"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pytest_lossless', 'pytest')"
        " and m not in allowed];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def start_server(out: Path) -> tuple[subprocess.Popen[str], str]:
    """Start ``serve`` in its own process group (as a launcher would); return it and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fixtures.ref2va", "serve", "--port", "0", "--workers", "2",
         "--variant", "fast", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ref2va serving on http://127.0.0.1:"), line
    return proc, line.split()[3]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    out = tmp_path / "served"
    proc, url = start_server(out)
    try:
        yield proc, url, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def wait_healthy(url: str, timeout: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        status, body = client.health(url)
        if status == 200:
            return body
        assert status == 503
        assert body["status"] == "starting"
        assert time.monotonic() < deadline, f"not healthy after {timeout} s: {body}"
        time.sleep(0.05)


def test_server_generates_then_stops_cleanly_on_sigterm(
    server: tuple[subprocess.Popen[str], str, Path], control_digests: dict[str, str]
) -> None:
    proc, url, out = server
    assert wait_healthy(url) == {"status": "ok", "workers": 2}
    workers = children(proc.pid)
    assert len(workers) == 2

    fields = {"prompt": "a red fox", "seed": "5", "duration": "1", "size": "128x96", "steps": "4"}
    status, body = client.generate(url, REFERENCE_IMAGE, fields)
    assert status == 200, body
    assert body["worker_pid"] in workers
    for key, name in (("video", "clip.mp4"), ("audio", "audio.wav"), ("latent", "latent.npy")):
        path = Path(body[key])
        assert path.is_absolute()
        assert path.parent.parent == out.resolve()
        assert hashlib.sha256(path.read_bytes()).hexdigest() == control_digests[name]
    assert body["timings"]["request_seconds"] >= body["timings"]["model_seconds"] > 0

    status, body = client.generate(url, REFERENCE_IMAGE, {**fields, "size": "7x7"})
    assert status == 400
    assert "size 7x7" in body["error"]
    ctype, payload = client.multipart_body({"prompt": "x"}, {})
    status, body = client.request_json(url + "/generate", data=payload, content_type=ctype)
    assert status == 400
    assert "no file field 'image'" in body["error"]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert proc.stderr is not None
    assert "worker exit codes [0, 0]" in proc.stderr.read()
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_sigterm_to_the_whole_group_lets_the_request_in_flight_finish(
    server: tuple[subprocess.Popen[str], str, Path],
) -> None:
    proc, url, out = server
    wait_healthy(url)
    answers: list[tuple[int, dict[str, object]]] = []
    fields = {"prompt": "a fox", "duration": "2", "size": "128x96", "steps": "12"}
    poster = threading.Thread(
        target=lambda: answers.append(client.generate(url, REFERENCE_IMAGE, fields))
    )
    poster.start()
    deadline = time.monotonic() + 30
    while not list(out.glob("req-*/reference.png")):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGTERM)  # server and workers at once, as a launcher's stop does
    poster.join(timeout=60)
    assert answers
    assert answers[0][0] == 200, answers
    assert Path(str(answers[0][1]["video"])).stat().st_size > 0
    assert proc.wait(timeout=60) == 0
    assert proc.stderr is not None
    assert "worker exit codes [0, 0]" in proc.stderr.read()
