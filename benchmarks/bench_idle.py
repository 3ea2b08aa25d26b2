"""What an installed pytest-lossless costs a repository's plain tests (issue #16 item 4).

2,000 trivial tests (20 modules of 100) run with the plugin loaded and with ``-p no:lossless``,
interleaved, in fresh interpreters; the same for ``--collect-only``. Prints the median wall
time of each and their ratio (goals: at most 1.05x for the run, 1.02x for collection), and the
same with CPU time (user + system of the child), which is steadier on a busy machine.

    python benchmarks/bench_idle.py [--repeats N] [--tests N] [--no-bytecode]

``--no-bytecode`` runs both arms under ``PYTHONDONTWRITEBYTECODE=1`` (common in CI images),
with the plugin's own bytecode compiled beforehand, as pip leaves an installed wheel: what is
left is what pytest's assertion-rewriting importer compiles on every start.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _write_suite(folder: Path, tests: int) -> None:
    per_module = 100
    for m in range((tests + per_module - 1) // per_module):
        body = "".join(
            f"def test_{j}():\n    assert {j} == {j}\n\n"
            for j in range(min(per_module, tests - m * per_module))
        )
        (folder / f"test_plain_{m}.py").write_text(body)


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _once(folder: Path, *extra: str, no_bytecode: bool = False) -> tuple[float, float]:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(folder)]
    # Bytecode caches as a user has them (pip compiles the plugin; pytest caches its rewrites),
    # written by the warm-up run: what is measured is the work, not compiling it once.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTEST_ADDOPTS", "PYTHONDONTWRITEBYTECODE")
    }
    if no_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    cpu, start = _child_cpu(), time.perf_counter()
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, check=False)
    wall, used = time.perf_counter() - start, _child_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"pytest {' '.join(extra)} exited {done.returncode}:\n{done.stdout}")
    return wall, used


def measure(
    folder: Path, repeats: int, *extra: str, no_bytecode: bool = False
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in ("on", "off", "on_cpu", "off_cpu")}
    _once(folder, *extra, no_bytecode=no_bytecode)  # warm the file cache
    for i in range(repeats):
        order = ("on", "off") if i % 2 == 0 else ("off", "on")  # interleaved, alternating
        for which in order:
            flags = (*extra, "-p", "no:lossless") if which == "off" else extra
            wall, cpu = _once(folder, *flags, no_bytecode=no_bytecode)
            times[which].append(wall)
            times[f"{which}_cpu"].append(cpu)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--no-bytecode", action="store_true")
    args = parser.parse_args()
    if args.no_bytecode:  # the bytecode pip compiles when it installs the wheel
        import compileall

        import pytest_lossless

        package = Path(pytest_lossless.__file__).parent
        compileall.compile_dir(package, quiet=1)
        for stale in package.rglob("*-pytest-*.pyc"):  # pytest's own rewrite cache: a CI image
            stale.unlink()  # that never writes bytecode has none
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _write_suite(folder, args.tests)
        note = ", PYTHONDONTWRITEBYTECODE=1" if args.no_bytecode else ""
        print(f"{args.tests} trivial tests, {args.repeats} interleaved runs each, medians{note}")
        print("| what | plugin | -p no:lossless | ratio (wall) | ratio (CPU) | goal |")
        print("|---|---|---|---|---|---|")
        for label, extra, goal in (
            ("run", (), 1.05),
            ("collect only", ("--collect-only",), 1.02),
        ):
            t = measure(folder, args.repeats, *extra, no_bytecode=args.no_bytecode)
            on, off = statistics.median(t["on"]), statistics.median(t["off"])
            on_cpu, off_cpu = statistics.median(t["on_cpu"]), statistics.median(t["off_cpu"])
            print(
                f"| {label} | {on:.3f} s | {off:.3f} s | {on / off:.3f}x | "
                f"{on_cpu / off_cpu:.3f}x | <= {goal}x |"
            )


if __name__ == "__main__":
    main()
