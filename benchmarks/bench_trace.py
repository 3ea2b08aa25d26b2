"""What tracing costs the demo model (issue #23): off, on with digests only, on with bytes.

The demo's ``generate`` (model time: conditioning, denoising, decoding, audio; no image load, no
encode) runs in this process, interleaved round by round:

- ``untraced``: the model as it was before it had any tracing call (read from git,
  ``--base``), the reference;
- ``off``: today's model, ``PYTEST_LOSSLESS_TRACE_DIR`` unset (goal: under 1% slower);
- ``digests``: traced, ``PYTEST_LOSSLESS_TRACE_RAW_BYTES=0`` (goal: at most 10% slower);
- ``bytes``: traced with the default raw limit (every demo tensor kept; no goal).

Prints the median model seconds of each and their ratios to ``untraced``, per variant. Because a
busy machine's noise is larger than 1%, it also prints the bound that does not depend on it: the
cost of one call with tracing off, times the calls one run makes, over the run's time.

    python benchmarks/bench_trace.py [--rounds N] [--seconds S] [--variants fast,control]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from fixtures.ref2va import model  # noqa: E402
from pytest_lossless import trace  # noqa: E402

PROMPT = "a lighthouse at dusk, waves breaking, gulls overhead"
#: The commit before the demo had tracing calls.
BASE = "2e20d0f"


def _untraced_model(base: str, file: Path | None) -> ModuleType:
    if file is not None:
        source = file.read_text()
    else:
        source = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{base}:fixtures/ref2va/model.py"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    if "pytest_lossless" in source:
        raise SystemExit(f"--base {base}: its model already traces; give an earlier commit")
    folder = Path(tempfile.mkdtemp(prefix="untraced-model-"))
    path = folder / "ref2va_untraced_model.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("ref2va_untraced_model", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_image(path: Path) -> Any:
    """The demo's reference picture; where ffmpeg or soundfile is missing (a bare accelerator
    host), a seeded picture of its size: the model's work, and so its time, are the same."""
    try:
        from fixtures.ref2va.writer import load_image as decode
    except ImportError:
        return np.random.default_rng(0).integers(0, 256, (176, 320, 3), dtype=np.uint8)
    return decode(path)


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds of ``fn()`` (its dispatch line on stderr swallowed)."""
    started, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stderr(io.StringIO()):
        fn()
    return time.perf_counter() - started, time.process_time() - cpu


def _once(
    mode: str, variant: str, seconds: float, old: ModuleType, work: Path
) -> tuple[float, float]:
    image = load_image(REPO / "fixtures" / "ref2va" / "reference.png")
    os.environ.pop(trace.TRACE_DIR, None)
    os.environ.pop(trace.RAW_LIMIT, None)
    if mode == "untraced":
        req = old.make_request(prompt=PROMPT, seed=7, duration=seconds, variant=variant)
        return _timed(lambda: old.generate(req, image))
    req = model.make_request(prompt=PROMPT, seed=7, duration=seconds, variant=variant)
    if mode != "off":
        os.environ[trace.TRACE_DIR] = tempfile.mkdtemp(prefix=f"{mode}-", dir=work)
        if mode == "digests":
            os.environ[trace.RAW_LIMIT] = "0"
    try:
        return _timed(lambda: model.generate(req, image))
    finally:
        if mode != "off":  # the writer finishes (untimed: a process does so at its exit)
            trace.release(os.environ[trace.TRACE_DIR])
        os.environ.pop(trace.TRACE_DIR, None)
        os.environ.pop(trace.RAW_LIMIT, None)


def _calls_per_run(variant: str, seconds: float, work: Path) -> int:
    """Tensors plus stages one traced run records: the calls an untraced run makes for free."""
    folder = Path(tempfile.mkdtemp(prefix="count-", dir=work))
    os.environ[trace.TRACE_DIR] = str(folder)
    os.environ[trace.RAW_LIMIT] = "0"
    try:
        image = load_image(REPO / "fixtures" / "ref2va" / "reference.png")
        req = model.make_request(prompt=PROMPT, seed=7, duration=seconds, variant=variant)
        _timed(lambda: model.generate(req, image))
    finally:
        trace.release(folder)
        os.environ.pop(trace.TRACE_DIR, None)
        os.environ.pop(trace.RAW_LIMIT, None)
    lines = (folder / trace.MANIFEST).read_text().splitlines()
    return len(lines) - 1 + 1  # every line but the header is one call; enabled() once more


def _off_call_seconds(n: int = 200_000) -> float:
    """One tracing call with tracing off (a tensor and a stage, averaged)."""
    os.environ.pop(trace.TRACE_DIR, None)
    import numpy as np

    x = np.ones(4, np.float32)
    started = time.perf_counter()
    for _ in range(n):
        trace.tensor("x", x)
        with trace.stage("s"):
            pass
    return (time.perf_counter() - started) / (2 * n)


def _inside_tracer(variant: str, seconds: float, raw: str, work: Path) -> tuple[float, float]:
    """Seconds the model's thread spends inside ``trace.tensor`` (a copy and a hand-over: the
    writer thread hashes and writes) in one traced run, and the run's model seconds."""
    spent = [0.0]
    original = trace.Tracer.tensor

    def timed(self: trace.Tracer, name: str, array: Any) -> None:
        started = time.perf_counter()
        original(self, name, array)
        spent[0] += time.perf_counter() - started

    os.environ[trace.TRACE_DIR] = tempfile.mkdtemp(prefix="inside-", dir=work)
    os.environ[trace.RAW_LIMIT] = raw
    trace.Tracer.tensor = timed  # type: ignore[method-assign]
    try:
        image = load_image(REPO / "fixtures" / "ref2va" / "reference.png")
        req = model.make_request(prompt=PROMPT, seed=7, duration=seconds, variant=variant)
        total, _ = _timed(lambda: model.generate(req, image))
    finally:
        trace.Tracer.tensor = original  # type: ignore[method-assign]
        trace.release(os.environ[trace.TRACE_DIR])
        os.environ.pop(trace.TRACE_DIR, None)
        os.environ.pop(trace.RAW_LIMIT, None)
    return spent[0], total


def _command(
    variant: str, seconds: float, out: Path, trace_dir: Path | None
) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one ``generate`` command, as the gate suite runs
    it: interpreter start, image load, model, encode."""
    import resource

    env = {k: v for k, v in os.environ.items() if k not in (trace.TRACE_DIR, trace.RAW_LIMIT)}
    if trace_dir is not None:
        env[trace.TRACE_DIR] = str(trace_dir)
        env[trace.RAW_LIMIT] = "0"
    argv = [
        sys.executable, "-m", "fixtures.ref2va", "generate", "--prompt", PROMPT, "--seed", "7",
        "--duration", str(seconds), "--variant", variant, "--out", str(out),
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _commands(variant: str, seconds: float, rounds: int, work: Path) -> None:
    times: dict[str, list[tuple[float, float]]] = {"untraced": [], "digests": []}
    for r in range(rounds):
        order = ["untraced", "digests"] if r % 2 == 0 else ["digests", "untraced"]
        for mode in order:
            folder = Path(tempfile.mkdtemp(prefix=f"cmd-{mode}-", dir=work))
            traced = folder / "trace" if mode == "digests" else None
            times[mode].append(_command(variant, seconds, folder / "out", traced))
    base_wall = statistics.median(t for t, _ in times["untraced"])
    base_cpu = statistics.median(c for _, c in times["untraced"])
    wall = statistics.median(t for t, _ in times["digests"])
    cpu = statistics.median(c for _, c in times["digests"])
    print(
        f"  the generate command (today's model, untraced vs digests, {rounds} rounds): wall "
        f"{base_wall:.3f} -> {wall:.3f} s {wall / base_wall:.4f}x, CPU {base_cpu:.3f} -> "
        f"{cpu:.3f} s {cpu / base_cpu:.4f}x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--variants", default="fast,control")
    parser.add_argument("--base", default=BASE, help="a commit whose model has no tracing call")
    parser.add_argument(
        "--untraced-file", type=Path, default=None,
        help="that model's source as a file (where the repository's history is not at hand)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    old = _untraced_model(args.base, args.untraced_file)
    modes = ["untraced", "off", "digests", "bytes"]
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp:
        work = Path(tmp)
        for variant in args.variants.split(","):
            _once("off", variant, args.seconds, old, work)  # warm caches and imports
            _once("untraced", variant, args.seconds, old, work)
            times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
            for r in range(args.rounds):
                order = modes if r % 2 == 0 else modes[::-1]
                for mode in order:
                    times[mode].append(_once(mode, variant, args.seconds, old, work))
            base = statistics.median(t for t, _ in times["untraced"])
            base_cpu = statistics.median(c for _, c in times["untraced"])
            print(
                f"{variant} {args.seconds:g} s, {args.rounds} rounds (median model seconds, "
                "wall and CPU; ratio to untraced):"
            )
            for mode in modes:
                wall = statistics.median(t for t, _ in times[mode])
                cpu = statistics.median(c for _, c in times[mode])
                print(
                    f"  {mode:9s} wall {wall:.4f} s {wall / base:.4f}x   "
                    f"CPU {cpu:.4f} s {cpu / base_cpu:.4f}x"
                )
            for label, raw in (("digests", "0"), ("bytes", str(trace.DEFAULT_RAW_LIMIT))):
                shares = sorted(_inside_tracer(variant, args.seconds, raw, work) for _ in range(3))
                inside, total = shares[1]
                print(
                    f"  {label}, inside trace.tensor: {inside * 1000:.1f} ms of {total:.3f} s = "
                    f"{100 * inside / (total - inside):.1f}% of the untraced model time"
                )
            _commands(variant, args.seconds, args.rounds, work)
            calls = _calls_per_run(variant, args.seconds, work)
            per_call = _off_call_seconds()
            bound = calls * per_call / base
            print(
                f"  off, bound: {calls} calls x {per_call * 1e9:.0f} ns = "
                f"{calls * per_call * 1e6:.1f} us per run = {bound * 100:.4f}% of {base:.3f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
