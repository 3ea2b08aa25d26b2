"""End-to-end: the ``model_run`` fixture in a real pytest subprocess, with real commands and
servers, the receipts it writes, and ``python -m pytest_lossless verify`` on them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SERVERS = Path(__file__).resolve().parent.parent / "data" / "servers"

HEADER = f"""
import sys
import pytest
COMMAND = [sys.executable, {str(SERVERS / "command.py")!r}]
SERVER = [sys.executable, {str(SERVERS / "worker_server.py")!r}, "{{port}}"]
"""

COMMANDS = (
    HEADER
    + """
def test_writes_output(model_run):
    result = model_run([*COMMAND, "write", "{out}/video.txt", "frames"],
                       outputs={"video": "video.txt"})
    assert result["video"].read_text() == "frames"

def test_exits_3(model_run):
    model_run([*COMMAND, "exit", "3"])

def test_hangs(model_run):
    model_run([*COMMAND, "hang-ignore-term"], timeout=0.3, grace=0.3)
"""
)

SERVERS_TESTS = (
    HEADER
    + """
def test_workers_and_timings(model_run):
    server = model_run.server([*SERVER, "--workers", "2"], ready="/health", workers_expected=2)
    server.request("POST", "/infer", data=b"warm", warmup=True)
    server.request("POST", "/infer?sleep=0.05", json={"prompt": "a cat"})
    server.request("POST", "/infer?sleep=0.05", json={"prompt": "a dog"})
    record = server.stop(grace=2)
    assert record["lifecycle"]["clean"], record["lifecycle"]["summary"]

def test_ignores_sigterm(model_run):
    server = model_run.server([*SERVER, "--workers", "2", "--ignore-term"], ready="/health",
                              workers_expected=2, check=False)
    record = server.stop(grace=0.3)
    assert not record["lifecycle"]["clean"]

def test_needs_sigkill_at_teardown(model_run):
    model_run.grace = 0.3
    model_run.server([*SERVER, "--ignore-term"], ready="/health")

def test_dies_at_startup(model_run):
    model_run.server([*SERVER, "--die-at-startup"], ready="/health", startup_timeout=60)

@pytest.mark.npu(devices=1)
def test_left_running_on_a_device(model_run, devices):
    model_run.server([*SERVER, "--workers", "1"], ready="/health", workers_expected=1)
"""
)


def _receipt(folder: Path, test: str) -> dict[str, Any]:
    (path,) = folder.rglob(f"*{test}.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _run(pytester: pytest.Pytester, source: str, *extra: str) -> pytest.RunResult:
    pytester.makepyfile(test_models=source)
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--lossless-receipts", "receipts", *extra
    )


def test_commands_exit_codes_timeouts_and_receipts(pytester: pytest.Pytester) -> None:
    result = _run(pytester, COMMANDS)
    result.assert_outcomes(passed=1, failed=2)
    # A command exiting 3 fails the test with the code and the stderr tail.
    result.stdout.fnmatch_lines(
        [
            "*RunError: model_run: command-01 exited with code 3*",
            "*| fatal: simulated failure with code 3*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*command-01 timed out after 0.3 s; sent SIGTERM to its "
            "process group, then SIGKILL after *"
        ]
    )
    receipts = pytester.path / "receipts"
    hang = _receipt(receipts, "test_hangs")
    run = hang["runs"][0]
    assert run["timed_out"] is True
    assert [(s["signal"], s["forced"]) for s in run["signals"]] == [
        ("SIGTERM", True),
        ("SIGKILL", True),
    ]
    assert run["processes"][0]["signal"] == "SIGKILL"
    assert run["processes"][0]["forced"] is True
    assert hang["verdicts"]["lifecycle"]["clean"] is False
    assert hang["outcome"]["call"] == "failed"
    exit3 = _receipt(receipts, "test_exits_3")
    assert exit3["runs"][0]["exit_code"] == 3
    good = _receipt(receipts, "test_writes_output")
    assert good["verdicts"]["lifecycle"]["clean"] is True
    assert good["runs"][0]["outputs"]["video"]["bytes"] == 6
    assert good["runspec"]["versions"]["pytest-lossless"]
    assert "PYTHONHASHSEED" in good["runspec"]["environment"]["knobs_unset"] + list(
        good["runspec"]["environment"]["knobs"]
    )


def test_servers_workers_sigterm_startup_and_verify(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        SERVERS_TESTS,
        "--lossless-backend",
        "cpu",
        "--lossless-devices",
        "0",
        "--lossless-lock-dir",
        str(pytester.path / "locks"),
    )
    result.assert_outcomes(passed=4, failed=1, errors=1)
    # A server that needs SIGKILL at teardown fails the test like a command, with its lifecycle.
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_needs_sigkill_at_teardown*",
            "*server-01 did not end cleanly (teardown): not clean*SIGKILL*",
        ]
    )
    # A server dying during startup fails fast with its stderr.
    result.stdout.fnmatch_lines(
        [
            "*server-01 died during startup (exit code 2) after *",
            "*| server: fatal: weights file is corrupt*",
        ]
    )
    assert result.duration < 60
    receipts = pytester.path / "receipts"

    timed = _receipt(receipts, "test_workers_and_timings")["runs"][0]
    # Startup, warmup and measured times are separate fields.
    assert timed["startup_seconds"] > 0
    assert len(timed["warmup_seconds"]) == 1
    assert len(timed["measured_seconds"]) == 2
    assert all(s >= 0.05 for s in timed["measured_seconds"])
    assert [r["warmup"] for r in timed["requests"]] == [True, False, False]
    assert (timed["request_totals"]["requests"], timed["request_totals"]["failed"]) == (3, 0)
    assert timed["device_memory"] == {"unavailable": "the run holds no device allocation"}
    # Each worker's exit is recorded, with how it was observed.
    workers = [p for p in timed["processes"] if p["role"] == "descendant"]
    assert len(workers) == 2
    assert all(w["ended_seconds"] is not None for w in workers)
    assert all(w["observed"] in ("disappeared", "zombie", "adopted") for w in workers)

    stubborn = _receipt(receipts, "test_ignores_sigterm")
    run = stubborn["runs"][0]
    assert [(s["signal"], s["forced"]) for s in run["signals"]][:2] == [
        ("SIGTERM", False),
        ("SIGKILL", True),
    ]
    assert stubborn["verdicts"]["lifecycle"]["clean"] is False
    assert not run["lifecycle"]["summary"].startswith("clean")

    device = _receipt(receipts, "test_left_running_on_a_device")
    assert device["allocation"]["ids"] == ["0"]
    assert device["allocation"]["released_at"]  # written after the locks went
    left = device["runs"][0]
    assert left["stop"]["reason"] == "teardown"
    assert left["env"]["allocation"]
    assert left["device_memory"] == {"unavailable": "cpu slots have no device memory to read"}
    assert device["allocation"]["finalizer_errors"] == []

    # verify: consistent receipts pass; an edited one is caught and named.
    verify = [sys.executable, "-m", "pytest_lossless", "verify", str(receipts)]
    done = subprocess.run(verify, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        done.stdout.count("\nOK ") + done.stdout.startswith("OK ") == 5
    )  # one receipt per test that used model_run
    (edited,) = receipts.rglob("*test_ignores_sigterm.json")
    data = json.loads(edited.read_text())
    data["runs"][0]["lifecycle"] = {
        "clean": True,
        "reasons": [],
        "summary": "every process exited cleanly",
    }
    data["verdicts"]["lifecycle"]["clean"] = True
    edited.write_text(json.dumps(data))
    done = subprocess.run(verify, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert f"CONTRADICTION {edited}" in done.stdout
    assert "recorded lifecycle clean=True but the raw record gives clean=False" in done.stdout
    assert "4 of 5 receipts consistent" in done.stdout


def test_unmarked_devices_fixture_still_owns_the_runs(pytester: pytest.Pytester) -> None:
    """Asking for ``devices`` without a marker: children see it, and end before its locks go."""
    pytester.makepyfile(
        test_order="""
import sys

def test_order(model_run, devices):
    run = model_run([sys.executable, "-c",
                     "import os; print(os.environ.get('PYTEST_LOSSLESS_CPU_SLOTS'))"])
    assert open(run.stdout_path).read().strip() == ",".join(devices.ids)
    model_run.server([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "{port}"],
                     ready="/")
"""
    )
    result = pytester.runpytest_subprocess(
        "--lossless-backend=cpu",
        "--lossless-devices=0,1",
        f"--lossless-lock-dir={pytester.path / 'locks'}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    receipt = json.loads(max((pytester.path / "lossless-receipts").rglob("*__*.json")).read_text())
    server = receipt["runs"][-1]
    assert server["kind"] == "server"
    assert receipt["allocation"]["released_at"] >= server["ended_at"]
