"""Lock scheduling: how close all-or-none device locks come to the ideal makespan.

64 tests of 0.5 s, each marked ``npu(devices=2)``, on 4 emulated cpu slots, run by real
``pytest -n 4`` with real host-wide locks. At most two tests can hold devices at once, so
the ideal makespan is 64 * 0.5 * 2 / 4 = 16 s. Each test records when it held its devices;
makespan runs from the first start to the last end (pytest's own start-up excluded; wall
time is printed too). The same run also measures a reference: the same 64 tests without
markers or locks under ``-n 2`` (two at a time, as the devices allow), which shows what
xdist itself costs on this machine.

Run: ``python benchmarks/bench_locks.py`` (about 40 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TEST = """
import json, os, time
import pytest

@pytest.mark.parametrize("n", range({tests}))
{marker}
def test_work(n, request):
    start = time.time()
    time.sleep({seconds})
    end = time.time()
    record = {{"start": start, "end": end, "worker": os.environ.get("PYTEST_XDIST_WORKER")}}
    if {locked}:
        allocation = request.getfixturevalue("devices")
        record["ids"] = list(allocation.ids)
        record["waited"] = allocation.waited_seconds
        record["escalated"] = allocation.escalated
    with open(os.environ["INTERVALS"], "a") as out:
        out.write(json.dumps(record) + "\\n")
"""


def run(
    folder: Path,
    *,
    locked: bool,
    tests: int,
    seconds: float,
    per_test: int,
    devices: int,
    workers: int,
) -> dict[str, Any]:
    folder.mkdir()
    marker = f"@pytest.mark.npu(devices={per_test})" if locked else ""
    (folder / "test_work.py").write_text(
        TEST.format(tests=tests, seconds=seconds, marker=marker, locked=locked)
    )
    intervals = folder / "intervals.jsonl"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "xdist",
        "-n",
        str(workers),
        "-p",
        "no:cacheprovider",
        "--lossless-backend=cpu",
        f"--lossless-devices=0-{devices - 1}",
        f"--lossless-lock-dir={folder / 'locks'}",
    ]
    started = time.perf_counter()
    done = subprocess.run(
        argv,
        cwd=folder,
        env={**os.environ, "INTERVALS": str(intervals)},
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"pytest failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    records = [json.loads(line) for line in intervals.read_text().splitlines()]
    assert len(records) == tests, f"{len(records)} of {tests} tests recorded"
    makespan = max(r["end"] for r in records) - min(r["start"] for r in records)
    result: dict[str, Any] = {"wall": wall, "makespan": makespan}
    if locked:
        for i, a in enumerate(records):  # the schedule must be valid before it is timed
            for b in records[i + 1 :]:
                shared = set(a["ids"]) & set(b["ids"])
                assert not (shared and a["start"] < b["end"] and b["start"] < a["end"]), (
                    f"devices {shared} held twice at once"
                )
        waits = sorted(r["waited"] for r in records)
        result.update(
            busy=sum((r["end"] - r["start"]) * len(r["ids"]) for r in records)
            / (devices * makespan),
            wait_median=statistics.median(waits),
            wait_max=waits[-1],
            escalated=sum(1 for r in records if r["escalated"]),
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--per-test", type=int, default=2)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    ideal = args.tests * args.seconds * args.per_test / args.devices
    concurrent = args.devices // args.per_test
    with tempfile.TemporaryDirectory(prefix="bench-locks-") as tmp:
        locked = run(
            Path(tmp) / "locked",
            locked=True,
            tests=args.tests,
            seconds=args.seconds,
            per_test=args.per_test,
            devices=args.devices,
            workers=args.workers,
        )
        plain = run(
            Path(tmp) / "plain",
            locked=False,
            tests=args.tests,
            seconds=args.seconds,
            per_test=args.per_test,
            devices=args.devices,
            workers=concurrent,
        )
    print(
        f"{args.tests} tests x {args.seconds} s, {args.per_test} devices each, "
        f"{args.devices} devices, {args.workers} workers; ideal makespan {ideal:.2f} s"
    )
    print(
        f"locked   (-n {args.workers}): makespan {locked['makespan']:.2f} s "
        f"= {locked['makespan'] / ideal:.3f} x ideal; wall {locked['wall']:.2f} s; "
        f"device busy {locked['busy']:.1%}; wait median {locked['wait_median']:.2f} s, "
        f"max {locked['wait_max']:.2f} s; escalated {locked['escalated']}"
    )
    print(
        f"no locks (-n {concurrent}): makespan {plain['makespan']:.2f} s "
        f"= {plain['makespan'] / ideal:.3f} x ideal; wall {plain['wall']:.2f} s"
    )
    print(f"locked / no-locks makespan ratio: {locked['makespan'] / plain['makespan']:.3f}")


if __name__ == "__main__":
    main()
