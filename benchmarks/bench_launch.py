"""Overhead of model_run's launcher against plain subprocess and http.client, same run.

Prints, for each measure, the launcher's figure, the reference measured in the same run, and
their ratio: spawn-to-reap of a trivial command, one timed request to a local server, and the
CPU the /proc sampler costs while a command sleeps.

    python benchmarks/bench_launch.py [--repeats N]
"""

from __future__ import annotations

import argparse
import http.client
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_lossless.run import Launcher

SERVER = Path(__file__).resolve().parent.parent / "tests" / "data" / "servers" / "worker_server.py"
TRIVIAL = [sys.executable, "-c", "pass"]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    n = parser.parse_args().repeats
    with tempfile.TemporaryDirectory() as tmp:
        launcher = Launcher(allocation=None, out_dir=Path(tmp), run_timeout=60, knobs=(), grace=2)
        plain, launched = [], []
        for _ in range(n):  # interleaved, so drift hits both alike
            start = time.perf_counter()
            subprocess.run(TRIVIAL, check=True)
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            launcher(TRIVIAL)
            launched.append(time.perf_counter() - start)
        p, q = statistics.median(plain), statistics.median(launched)
        print(
            f"command  subprocess.run median {p * 1e3:7.2f} ms  launcher median "
            f"{q * 1e3:7.2f} ms  ratio {q / p:5.2f}"
        )

        server = launcher.server(
            [sys.executable, str(SERVER), "{port}", "--workers", "2"],
            ready="/health",
            workers_expected=2,
        )
        raw, timed = [], []
        body = b"x" * 100_000
        for _ in range(n):
            conn = http.client.HTTPConnection("127.0.0.1", server.port)
            start = time.perf_counter()
            conn.request("POST", "/infer", body=body, headers={"Content-Length": str(len(body))})
            conn.getresponse().read()
            raw.append(time.perf_counter() - start)
            conn.close()
            timed.append(server.request("POST", "/infer", data=body).seconds)
        p, q = statistics.median(raw), statistics.median(timed)
        print(
            f"request  http.client median    {p * 1e3:7.2f} ms  server.request   "
            f"{q * 1e3:7.2f} ms  ratio {q / p:5.2f}"
        )
        server.stop(grace=2)

        before = _cpu()
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import time; time.sleep(2)"], check=True)
        idle = (_cpu() - before) / (time.perf_counter() - start)
        before = _cpu()
        start = time.perf_counter()
        launcher([sys.executable, "-c", "import time; time.sleep(2)"])
        sampled = (_cpu() - before) / (time.perf_counter() - start)
        print(
            f"sampler  CPU share while a 2 s command runs: subprocess.run {idle:6.2%}  "
            f"launcher {sampled:6.2%}  (difference {sampled - idle:+.2%} of one core)"
        )
        launcher.close()


if __name__ == "__main__":
    main()
