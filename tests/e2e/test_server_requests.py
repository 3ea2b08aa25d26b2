"""Servers' requests, readiness cadence and device memory in the run record, the receipt, the
report and ``verify``: real servers on 127.0.0.1, a fake ``nvidia-smi`` on PATH that reports
device memory for the processes of the run (those carrying :data:`FAKE_MIB` in their
environment), and the checks that catch an edited record."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.devices.backends import (
    DeviceMemoryMeter,
    MemoryReader,
    memory_reader_for,
)
from pytest_lossless.devices.base import ToolError
from pytest_lossless.errors import RunError
from pytest_lossless.evidence.crosscheck import check_run_requests, check_run_sequence
from pytest_lossless.evidence.receipts import ReceiptRecord
from pytest_lossless.report.details import Details, match_rows, server_line
from pytest_lossless.report.table import Row
from pytest_lossless.run import Launcher
from pytest_lossless.run.record import RunRecord

DATA = Path(__file__).resolve().parent.parent / "data"
SERVERS = DATA / "servers"
COMMAND = [sys.executable, str(SERVERS / "command.py")]


def sleeping(seconds: float) -> list[str]:
    return [sys.executable, "-c", f"import time; time.sleep({seconds})"]


SERVER = [sys.executable, str(SERVERS / "worker_server.py"), "{port}"]
#: A process of the run holds this many MiB on the fake GPU (read from its environment).
FAKE_MIB = "PYTEST_LOSSLESS_FAKE_GPU_MIB"
#: In the fake tool's own environment: seconds it hangs before answering.
FAKE_HANG = "PYTEST_LOSSLESS_FAKE_SMI_HANG"
#: In the fake tool's own environment: a file each call of it is logged to.
FAKE_LOG = "PYTEST_LOSSLESS_FAKE_SMI_LOG"

FAKE_NVIDIA_SMI = f"""#!{sys.executable}
import os, sys, time
if os.environ.get({FAKE_LOG!r}):
    with open(os.environ[{FAKE_LOG!r}], "a") as log:
        log.write(" ".join(sys.argv[1:]) + "\\n")
time.sleep(float(os.environ.get({FAKE_HANG!r}, "0")))
gpus = open({str(DATA / "smi" / "nvidia_smi_query_gpu.csv")!r}).read()
if any(a.startswith("--query-gpu") for a in sys.argv):
    sys.stdout.write(gpus)
elif any(a.startswith("--query-compute-apps") for a in sys.argv):
    uuid = gpus.split(",")[1].strip()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = open(f"/proc/{{pid}}/environ", "rb").read().split(b"\\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(b"{FAKE_MIB}="):
                print(f"{{uuid}}, {{pid}}, python3, {{item.split(b'=', 1)[1].decode()}}")
else:
    sys.exit("fake nvidia-smi: unknown arguments")
"""


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake ``nvidia-smi`` first on PATH; returns the log of its calls."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    tool = folder / "nvidia-smi"
    tool.write_text(FAKE_NVIDIA_SMI)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "smi-calls.log"
    monkeypatch.setenv(FAKE_LOG, str(log))
    return log


def _launcher(tmp_path: Path, **kwargs: Any) -> Launcher:
    return Launcher(
        allocation=None, out_dir=tmp_path / "runs", run_timeout=20, knobs=(), grace=0.5, **kwargs
    )


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    run = _launcher(tmp_path)
    yield run
    run.close()


def _findings(record: dict[str, Any]) -> list[str]:
    return check_run_requests(None, ReceiptRecord.from_json({"runs": [record]}), None)


# ------------------------------------------------------------------ requests


@pytest.mark.slow
def test_every_request_is_recorded_and_failed_ones_are_counted(launcher: Launcher) -> None:
    server = launcher.server(SERVER, ready="/health")
    assert server.request("GET", "/health").status == 200
    assert server.request("GET", "/missing?api_key=SECRETVALUE123&n=1").status == 404
    server.request("POST", "/infer", data=b"abcd", warmup=True)
    big = server.request("GET", "/big?n=1500000")
    assert big.body_path is not None
    with pytest.raises(RunError, match=r"request POST /infer\?sleep=3 failed: TimeoutError"):
        server.request("POST", "/infer?sleep=3", data=b"xy", timeout=0.3)
    record = server.stop(grace=5)
    requests = record["requests"]
    assert [(r["method"], r["status"], r["failed"]) for r in requests] == [
        ("GET", 200, False),
        ("GET", 404, True),
        ("POST", 200, False),
        ("GET", 200, False),
        ("POST", None, True),
    ]
    # The secret in the query string is redacted, everywhere the record repeats it.
    assert requests[1]["path"].startswith("/missing?api_key=<redacted sha256:")
    assert "SECRETVALUE123" not in json.dumps(record)
    timed_out = requests[4]
    assert timed_out["timed_out"] is True
    assert 0.25 <= timed_out["seconds"] < 2
    assert timed_out["bytes_sent"] == 2
    assert requests[3]["bytes_received"] == 1_500_000
    assert all(r["started_seconds"] >= record["startup_seconds"] for r in requests)
    totals = record["request_totals"]
    assert {k: totals[k] for k in ("requests", "failed", "warmup", "errors", "timeouts")} == {
        "requests": 5,
        "failed": 2,
        "warmup": 1,
        "errors": 1,
        "timeouts": 1,
    }
    assert totals["statuses"] == {"200": 3, "404": 1, "none": 1}
    assert totals["bytes_sent"] == 6
    assert totals["bytes_received"] == sum(r["bytes_received"] for r in requests)
    assert totals["omitted"]["requests"] == 0
    assert _findings(record) == []
    # The default readiness cadence is recorded with the run.
    assert record["readiness"]["interval_seconds"] == 0.05
    assert record["readiness"]["probes"] == record["ready_polls"] >= 1


@pytest.mark.slow
def test_request_records_are_bounded_and_the_rest_counted(tmp_path: Path) -> None:
    run = _launcher(tmp_path, request_records=3)
    try:
        server = run.server(SERVER, ready="/health")
        for path in ("/health", "/health", "/nope", "/nope", "/health"):
            server.request("GET", path)
        record = server.stop(grace=5)
    finally:
        run.close()
    assert [r["index"] for r in record["requests"]] == [1, 2, 3]
    totals = record["request_totals"]
    assert (totals["requests"], totals["failed"], totals["limit"]) == (5, 2, 3)
    assert totals["omitted"]["requests"] == 2
    assert totals["omitted"]["failed"] == 1
    assert totals["kept"]["failed"] == 1
    assert _findings(record) == []
    assert "5 requests, 2 failed (404 x2)" in server_line(RunRecord.from_json(record))
    assert "2 beyond the 3 kept records" in server_line(RunRecord.from_json(record))


@pytest.mark.slow
def test_concurrent_requests_get_one_index_each_and_add_up(tmp_path: Path) -> None:
    run = _launcher(tmp_path, request_records=20)
    try:
        server = run.server(SERVER, ready="/health")

        def client(n: int) -> None:
            for i in range(5):
                server.request("POST", "/infer?sleep=0.01", data=b"x" * (n + i))

        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        record = server.stop(grace=5)
    finally:
        run.close()
    assert [r["index"] for r in record["requests"]] == list(range(1, 21))
    totals = record["request_totals"]
    assert (totals["requests"], totals["omitted"]["requests"], totals["failed"]) == (40, 20, 0)
    assert totals["bytes_sent"] == sum(n + i for n in range(8) for i in range(5))
    assert len(record["measured_seconds"]) == 40
    assert _findings(record) == []


def _clean_server_record() -> dict[str, Any]:
    entries = [
        {
            "index": i,
            "method": "GET",
            "path": "/x",
            "warmup": False,
            "bytes_sent": 0,
            "started_seconds": float(i),
            "status": status,
            "bytes_received": 10,
            "seconds": 0.5,
            "failed": status != 200,
        }
        for i, status in ((1, 200), (2, 500), (3, 200))
    ]
    part = {"requests": 3, "failed": 1, "bytes_sent": 0, "bytes_received": 30}
    zero = dict.fromkeys(part, 0)
    return {
        "name": "server-01",
        "kind": "server",
        "requests": entries,
        "measured_seconds": [0.5, 0.5, 0.5],
        "warmup_seconds": [],
        "startup_seconds": 1.0,
        "ready_polls": 3,
        "readiness": {"probes": 3, "ready_seconds": 1.0},
        "request_totals": {
            **part,
            "warmup": 0,
            "errors": 0,
            "timeouts": 0,
            "statuses": {"200": 2, "500": 1},
            "limit": 10_000,
            "kept": dict(part),
            "omitted": zero,
        },
        "device_memory": {
            "peak_mib": 300.0,
            "samples": 4,
            "source": "nvidia-smi",
            "processes": [{"pid": 1, "peak_mib": 200.0}, {"pid": 2, "peak_mib": 150.0}],
        },
    }


def test_verify_names_request_totals_that_contradict_the_records() -> None:
    clean = _clean_server_record()
    assert _findings(clean) == []
    receipt = ReceiptRecord.from_json({"runs": [clean]})
    assert check_run_sequence(None, receipt, None) == []  # verify's "runs/sequence"

    dropped = copy.deepcopy(clean)
    del dropped["requests"][1]  # the failed request removed, totals left
    found = _findings(dropped)
    assert any("kept.failed is 1, but its 2 request records give 0" in f for f in found), found
    assert any("not 1..2 in order" in f for f in found), found

    hidden = copy.deepcopy(clean)
    hidden["request_totals"]["failed"] = 0  # the failure hidden from the totals
    assert any("request_totals.failed is 0" in f for f in _findings(hidden))

    relabelled = copy.deepcopy(clean)
    relabelled["requests"][1]["failed"] = False  # a 500 marked as a success
    assert any("marked failed against their status" in f for f in _findings(relabelled))

    retimed = copy.deepcopy(clean)
    retimed["measured_seconds"] = [0.1, 0.1, 0.1]
    assert any("measured_seconds is" in f for f in _findings(retimed))

    ready = copy.deepcopy(clean)
    ready["readiness"]["ready_seconds"] = 0.2  # a faster startup than the run recorded
    assert any("readiness.ready_seconds is 0.2" in f for f in _findings(ready))

    memory = copy.deepcopy(clean)
    memory["device_memory"]["peak_mib"] = 100.0  # below a process's own peak
    assert any("device_memory.peak_mib is 100.0" in f for f in _findings(memory))


# ------------------------------------------------------------------ readiness cadence


@pytest.mark.slow
def test_the_readiness_cadence_and_its_share_of_the_startup_are_recorded(
    launcher: Launcher,
) -> None:
    server = launcher.server(
        [*SERVER, "--startup-delay", "1.0"], ready="/health", ready_interval=0.4
    )
    record = server.stop(grace=5)
    readiness = record["readiness"]
    assert readiness["interval_seconds"] == 0.4
    assert readiness["probes"] >= 3
    assert readiness["failed_probes"] == readiness["probes"] - 1
    assert readiness["ready_seconds"] == record["startup_seconds"] >= 1.0
    # The server became ready, unseen, between the last failed probe and the good one: at
    # most one interval (and the probe's own time), and that much of the startup.
    window = readiness["detection_window_seconds"]
    assert 0 < window <= 0.4 + readiness["probing_seconds"] + 0.2
    assert readiness["probe_share"] == pytest.approx(window / readiness["ready_seconds"], 1e-3)
    assert readiness["last_error"]
    assert "probes 0.4 s apart (up to" in server_line(RunRecord.from_json(record))


@pytest.mark.slow
def test_a_server_never_ready_records_its_probes(tmp_path: Path) -> None:
    records: list[dict[str, Any]] = []
    run = _launcher(tmp_path, on_record=lambda record: records.append(record.to_json()))
    try:
        with pytest.raises(RunError, match=r"probes, 0\.1 s apart\)"):
            run.server([*COMMAND, "hang"], ready="/health", startup_timeout=0.5, ready_interval=0.1)
    finally:
        run.close()
    readiness = records[-1]["readiness"]
    assert readiness["ready_seconds"] is None
    assert readiness["probes"] == readiness["failed_probes"] >= 3


# ------------------------------------------------------------------ device memory


class _Reader:
    """A reader whose answers the test controls: each read waits for ``release``."""

    def __init__(self, table: dict[int, float]) -> None:
        self.table = table
        self.calls = 0
        self.release = threading.Event()

    def read(self, timeout: float) -> dict[int, float]:
        self.calls += 1
        if not self.release.wait(timeout):
            raise ToolError(f"fake did not answer within {timeout:g} s")
        return dict(self.table)


def test_the_meter_reads_at_most_once_per_interval_and_never_waits_on_a_read() -> None:
    now = [0.0]
    reader = _Reader({10: 100.0, 11: 50.0, 99: 4000.0})  # pid 99 is not the run's
    meter = DeviceMemoryMeter(
        MemoryReader("fake-smi", reader.read), interval=1.0, timeout=5.0, clock=lambda: now[0]
    )
    began = time.monotonic()
    assert meter.tick([10, 11], 0.0) is True
    assert meter.tick([10, 11], 0.0) is False  # a read is in flight
    assert time.monotonic() - began < 0.5  # the tick did not wait for the read
    reader.release.set()
    meter._idle.wait(2)
    assert meter.tick([10, 11], 0.5) is False  # within the interval
    now[0] = 1.5
    assert meter.tick([10], 1.5) is True
    meter._idle.wait(2)
    assert reader.calls == 2
    record = meter.close().to_json()
    assert record["peak_mib"] == 150.0  # both processes at one read; pid 99 left out
    assert record["samples"] == 2
    assert record["source"] == "fake-smi"
    assert record["processes"] == [{"pid": 10, "peak_mib": 100.0}, {"pid": 11, "peak_mib": 50.0}]


def test_the_meter_gives_up_on_a_hung_tool_within_its_wait() -> None:
    reader = _Reader({})
    meter = DeviceMemoryMeter(MemoryReader("fake-smi", reader.read), timeout=30)
    assert meter.tick([1], 0.0)
    began = time.monotonic()
    record = meter.close(wait=0.2).to_json()
    assert time.monotonic() - began < 1
    assert record["unavailable"] == "the run ended before a read of fake-smi finished"
    reader.release.set()


@pytest.mark.slow
def test_peak_device_memory_of_the_run_from_nvidia_smi_on_path(
    tmp_path: Path, fake_smi: Path
) -> None:
    reader = memory_reader_for("cuda")
    assert isinstance(reader, MemoryReader)
    run = _launcher(tmp_path, device_memory=reader, memory_interval=0.1)
    try:
        result = run(sleeping(0.8), env={FAKE_MIB: "1234"})
        server = run.server(
            [*SERVER, "--workers", "1"], ready="/health", workers_expected=1, env={FAKE_MIB: "700"}
        )
        time.sleep(0.5)
        record = server.stop(grace=5)
    finally:
        run.close()
    memory = result.record["device_memory"]
    assert memory["source"] == "nvidia-smi"
    assert memory["peak_mib"] == 1234.0
    assert memory["samples"] >= 2
    assert memory["processes"] == [{"pid": result.record["pid"], "peak_mib": 1234.0}]
    # The server and its worker each hold 700 MiB: the run's peak is their sum at one read.
    served = record["device_memory"]
    assert served["peak_mib"] == 1400.0
    assert len(served["processes"]) == 2
    assert "peak device memory 1400 MiB (nvidia-smi" in server_line(RunRecord.from_json(record))
    assert _findings(record) == []


@pytest.mark.slow
def test_a_hung_nvidia_smi_never_stalls_the_run(
    tmp_path: Path, fake_smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAKE_HANG, "3")
    reader = memory_reader_for("cuda")
    assert isinstance(reader, MemoryReader)
    run = _launcher(tmp_path, device_memory=reader, memory_timeout=0.3)
    try:
        began = time.monotonic()
        result = run(sleeping(0.2), env={FAKE_MIB: "1"})
        took = time.monotonic() - began
    finally:
        run.close()
    assert took < 2.5, took
    memory = result.record["device_memory"]
    assert memory["samples"] == 0
    assert "did not answer within 0.3 s" in memory["unavailable"], memory


@pytest.mark.slow
def test_cpu_slots_say_so_and_never_call_a_tool(tmp_path: Path, fake_smi: Path) -> None:
    reason = memory_reader_for("cpu")
    assert reason == "cpu slots have no device memory to read"
    assert memory_reader_for("tpu") == "the tpu backend offers no device memory reading"
    off = DeviceMemoryMeter(reason)
    assert (off.reading, off.tick([1], 0.0), off.close().to_json()) == (
        False,
        False,
        {"unavailable": reason},
    )
    run = _launcher(tmp_path, device_memory=reason)
    try:
        result = run(sleeping(0.3), env={FAKE_MIB: "1"})
    finally:
        run.close()
    assert result.record["device_memory"] == {"unavailable": reason}
    assert not fake_smi.exists()  # sampling is off entirely: no call of any tool


# ------------------------------------------------------------------ the report


def test_the_receipt_details_get_a_line_per_server_run() -> None:
    server = _clean_server_record()
    server["readiness"].update({"interval_seconds": 0.05, "probe_share": 0.01})
    cpu = {**_clean_server_record(), "name": "server-02", "device_memory": {"unavailable": "x"}}
    command = {"name": "command-03", "kind": "command"}
    receipt = {
        "runs": [server, cpu, command],
        "speed": [{"samples": [], "design": "ABBA", "verdict": "INCONCLUSIVE"}],
    }
    row = Row("t.py::test_serve", "speed 5s", "ratio <= 0.700", "INCONCLUSIVE")
    (found,) = match_rows([row], {"t.py::test_serve": ReceiptRecord.from_json(receipt)})
    assert found is not None
    assert [r.name for r in found.servers] == ["server-01", "server-02"]

    class _NoAssets:
        def picture(self, *args: Any) -> Any:
            raise RuntimeError("no pictures in this test")

    detail = Details(_NoAssets(), limits=None).build("d1", row, found)  # type: ignore[arg-type]
    lines = [getattr(b, "text", "") for b in detail.blocks]
    assert lines[-2] == (
        "server-01; 3 requests, 1 failed (500 x1), 0 B sent, 30 B received; ready after "
        "1.00 s, 3 probes 0.05 s apart (up to 1% of the startup is the probe's); peak device "
        "memory 300 MiB (nvidia-smi, 4 samples)"
    )
    assert lines[-1].endswith("peak device memory: unavailable (x)")


# ------------------------------------------------------------------ through the plugin

PLUGIN_TESTS = f"""
import sys
import pytest
SERVER = [sys.executable, {str(SERVERS / "worker_server.py")!r}, "{{port}}"]

@pytest.mark.gpu(devices=1)
def test_serves_on_a_gpu(model_run, devices):
    server = model_run.server(SERVER, ready="/health", env={{{FAKE_MIB!r}: "2048"}})
    assert server.request("GET", "/health").status == 200
    assert server.request("GET", "/nope").status == 404
    server.request("POST", "/infer?sleep=1.2", data=b"hello")
    server.stop(grace=5)
"""


@pytest.mark.slow
def test_the_receipt_holds_requests_and_device_memory_and_verify_checks_them(
    pytester: pytest.Pytester, fake_smi: Path
) -> None:
    pytester.makepyfile(test_serving=PLUGIN_TESTS)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--lossless-receipts",
        "receipts",
        "--lossless-backend",
        "cuda",
        "--lossless-lock-dir",
        str(pytester.path / "locks"),
    )
    result.assert_outcomes(passed=1)
    (path,) = (pytester.path / "receipts").rglob("*test_serves_on_a_gpu.json")
    receipt = json.loads(path.read_text())
    (run,) = receipt["runs"]
    totals = run["request_totals"]
    assert (totals["requests"], totals["failed"], totals["bytes_sent"]) == (3, 1, 5)
    memory = run["device_memory"]
    assert (memory["source"], memory["peak_mib"]) == ("nvidia-smi", 2048.0)
    assert memory["samples"] >= 1
    verify = [sys.executable, "-m", "pytest_lossless", "verify", str(pytester.path / "receipts")]
    done = subprocess.run(verify, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # A failed request removed from the receipt: verify names the contradiction.
    run["requests"] = [r for r in run["requests"] if not r["failed"]]
    path.write_text(json.dumps(receipt))
    done = subprocess.run(verify, capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "request_totals.kept.failed is 1, but its 2 request records give 0" in done.stdout
