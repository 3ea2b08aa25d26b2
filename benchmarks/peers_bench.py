"""The peers' checks of the same artifacts, timed inside their own pytest runs: pytest-regressions
``file_regression`` (binary) and ``ndarrays_regression``, and syrupy's single-file extension.

Run by ``run_all.py --peers PYTHON`` with a Python that has them (a throwaway venv; they are no
dependency of this project)::

    python -m venv /tmp/peers && /tmp/peers/bin/pip install pytest-regressions syrupy numpy
    /tmp/peers/bin/python benchmarks/peers_bench.py CLIP TENSOR.npy OUT.json REPEATS

Each check is timed from the artifact's bytes (or array) in memory to the check's return, as a
test would call it; the references are written by a first run (``--force-regen``,
``--snapshot-update``) and compared by a second. OUT gets the median seconds of each peer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = """
import json, os, statistics, time
from pathlib import Path

import numpy as np
import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension

CLIP = Path(os.environ["PEER_CLIP"])
TENSOR = Path(os.environ["PEER_TENSOR"])
OUT = Path(os.environ["PEER_OUT"])
N = int(os.environ["PEER_REPEATS"])


def record(name, times):
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data[name] = statistics.median(times)
    OUT.write_text(json.dumps(data))


def test_file_regression(file_regression):
    times = []
    for _ in range(N):
        start = time.perf_counter()
        file_regression.check(CLIP.read_bytes(), binary=True, extension=".mp4", basename="clip")
        times.append(time.perf_counter() - start)
    record("file_regression", times)


def test_ndarrays_regression(ndarrays_regression):
    array = np.load(TENSOR)
    times = []
    for _ in range(N):
        start = time.perf_counter()
        ndarrays_regression.check({"t": array}, basename="tensor")
        times.append(time.perf_counter() - start)
    record("ndarrays_regression", times)


@pytest.fixture
def single_file(snapshot):
    return snapshot.use_extension(SingleFileSnapshotExtension)


def test_syrupy(single_file):
    times = []
    for _ in range(N):
        start = time.perf_counter()
        assert CLIP.read_bytes() == single_file(name="clip")
        times.append(time.perf_counter() - start)
    record("syrupy", times)
"""


def main(argv: list[str]) -> int:
    clip, tensor, out, repeats = argv
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_peers.py").write_text(TESTS)
        env = {
            **os.environ,
            "PEER_CLIP": str(Path(clip).resolve()),
            "PEER_TENSOR": str(Path(tensor).resolve()),
            "PEER_OUT": str(folder / "first.json"),
            "PEER_REPEATS": "1",
        }
        env.pop("PYTHONPATH", None)
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_peers.py"]
        # The first run writes the references (pytest-regressions then fails on purpose).
        subprocess.run(
            [*pytest, "--force-regen", "--snapshot-update"], cwd=folder, env=env, check=False
        )
        env.update(PEER_OUT=str(Path(out).resolve()), PEER_REPEATS=str(repeats))
        Path(out).unlink(missing_ok=True)
        subprocess.run(pytest, cwd=folder, env=env, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
