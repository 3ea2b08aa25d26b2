"""Unit tests of launch.py: real processes, real process groups, real HTTP on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_lossless.errors import ArtifactError, ConfigError, RunError
from pytest_lossless.run import Launcher, RunRecord, lifecycle_verdict
from pytest_lossless.settings import DETERMINISM_KNOBS

pytestmark = pytest.mark.slow

SERVERS = Path(__file__).resolve().parent.parent / "data" / "servers"
COMMAND = [sys.executable, str(SERVERS / "command.py")]
SERVER = [sys.executable, str(SERVERS / "worker_server.py"), "{port}"]


class FakeAllocation:
    """Stands in for devices.Allocation: visibility env, the finalizer list, no lock
    descriptors, and the processes each run reported (the runs record)."""

    def __init__(self) -> None:
        self.backend = "fake"  # no device memory reader: the record says so
        self.env = {"CUDA_VISIBLE_DEVICES": "2"}
        self.finalizers: list[Callable[[], None]] = []
        self.lock_fds: tuple[int, ...] = ()
        self.noted: dict[str, list[Mapping[str, Any]]] = {}

    def add_finalizer(self, fn: Callable[[], None]) -> None:
        self.finalizers.append(fn)

    def note_processes(self, run: str, processes: Sequence[Mapping[str, Any]]) -> None:
        self.noted[run] = list(processes)


@pytest.fixture
def records() -> list[RunRecord]:
    return []


@pytest.fixture
def launcher(tmp_path: Path, records: list[RunRecord]) -> Iterator[Launcher]:
    run = Launcher(
        allocation=None,
        out_dir=tmp_path / "runs",
        run_timeout=20,
        knobs=DETERMINISM_KNOBS,
        on_record=records.append,
        grace=0.5,
    )
    yield run
    run.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ------------------------------------------------------------------ commands


def test_a_shell_string_is_refused(launcher: Launcher) -> None:
    with pytest.raises(ConfigError, match="never a shell string"):
        launcher("python -c 'print(1)'")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="non-empty list"):
        launcher([])


def test_outputs_placeholders_and_record(launcher: Launcher, records: list[RunRecord]) -> None:
    result = launcher(
        [*COMMAND, "write", "{out}/video.txt", "frames"],
        outputs={"video": "video.txt", "same": "{out}/video.txt"},
    )
    assert result["video"].read_text() == "frames"
    assert result["same"] == result["video"]
    assert dict(result) == {"video": result["video"], "same": result["video"]}
    assert result.returncode == 0
    assert result.measured_seconds > 0
    assert records[-1] is result.run  # the record handed on is the one the result holds
    record = result.record
    assert record == records[-1].to_json()
    assert record["outputs"]["video"]["bytes"] == 6
    assert record["lifecycle"]["clean"] is True
    main = record["processes"][0]
    assert main["role"] == "main"
    assert main["observed"] == "reaped"
    assert main["exit_code"] == 0
    assert main["peak_rss_kib"]
    assert main["peak_rss_source"]
    assert main["pid"] == main["pgid"]  # its own process group
    with pytest.raises(KeyError, match="not a declared output"):
        result["audio"]


def test_missing_and_empty_outputs_fail(launcher: Launcher) -> None:
    with pytest.raises(RunError, match="'audio' was not written"):
        launcher([*COMMAND, "write", "{out}/a.txt", "x"], outputs={"audio": "b.wav"})
    with pytest.raises(RunError, match="'a' is empty"):
        launcher([*COMMAND, "write", "{out}/a.txt", ""], outputs={"a": "a.txt"})
    result = launcher([*COMMAND, "write", "{out}/a.txt", ""], outputs={"a": "a.txt"}, check=False)
    assert "a" not in result
    assert result.record["outputs"]["a"]["problem"] == "empty"


def test_nonzero_exit_names_code_and_stderr_tail(launcher: Launcher) -> None:
    with pytest.raises(RunError) as info:
        launcher([*COMMAND, "exit", "3"])
    message = str(info.value)
    assert "exited with code 3" in message
    assert "fatal: simulated failure with code 3" in message
    result = launcher([*COMMAND, "exit", "3"], check=False)
    assert result.returncode == 3
    assert result.lifecycle.clean is False
    assert "exited with code 3" in result.lifecycle.summary


def test_environment_allocation_overrides_and_knobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.setenv("GONE", "here")
    allocation = FakeAllocation()
    run = Launcher(
        allocation=allocation, out_dir=tmp_path, run_timeout=20, knobs=DETERMINISM_KNOBS, grace=0.5
    )
    assert allocation.finalizers == [run.close]
    visible = run([*COMMAND, "env", "CUDA_VISIBLE_DEVICES", "{out}/v"], outputs={"v": "v"})
    assert visible["v"].read_text() == "2"
    unread = "the fake backend offers no device memory reading"
    assert visible.record["device_memory"] == {"unavailable": unread}
    mine = run([*COMMAND, "env", "MINE", "{out}/v"], env={"MINE": "{out}"}, outputs={"v": "v"})
    assert mine["v"].read_text() == mine.record["out_dir"]
    gone = run([*COMMAND, "env", "GONE", "{out}/v"], env={"GONE": None}, outputs={"v": "v"})
    assert gone["v"].read_text() == "<unset>"
    env = gone.record["env"]
    assert env["allocation"] == {"CUDA_VISIBLE_DEVICES": "2"}
    assert env["overrides"] == {"GONE": None}
    assert env["knobs"]["PYTHONHASHSEED"] == "0"
    assert "HCCL_DETERMINISTIC" in env["knobs_unset"]
    allocation.finalizers[0]()
    with pytest.raises(RunError, match="closed"):
        run([*COMMAND, "exit", "0"])


def test_timeout_sigterm_then_sigkill_recorded_as_forced(
    launcher: Launcher, records: list[RunRecord]
) -> None:
    start = time.monotonic()
    with pytest.raises(RunError, match=r"timed out after 0\.3 s"):
        launcher([*COMMAND, "hang-ignore-term"], timeout=0.3)
    assert time.monotonic() - start < 5
    record = records[-1].to_json()
    assert record["timed_out"] is True
    assert [(s["signal"], s["forced"]) for s in record["signals"]] == [
        ("SIGTERM", True),
        ("SIGKILL", True),
    ]
    main = record["processes"][0]
    assert main["signal"] == "SIGKILL"
    assert main["forced"] is True
    assert record["lifecycle"]["clean"] is False


def test_timeout_honoured_sigterm_is_still_forced(launcher: Launcher) -> None:
    result = launcher([*COMMAND, "hang"], timeout=0.3, check=False)
    main = result.record["processes"][0]
    assert main["signal"] == "SIGTERM"
    assert main["forced"] is True
    assert [s["signal"] for s in result.record["signals"]] == ["SIGTERM"]
    assert "forced" in result.lifecycle.summary


def test_a_child_left_running_is_killed_and_makes_it_unclean(launcher: Launcher) -> None:
    result = launcher([*COMMAND, "spawn-and-exit"], check=False)
    assert result.returncode == 0
    child = [p for p in result.record["processes"] if p["role"] == "descendant"]
    assert len(child) == 1
    assert child[0]["forced"] is True
    assert not _alive(child[0]["pid"]) or child[0]["observed"] != "alive"
    assert result.lifecycle.clean is False
    assert "left running after the main process exited" in result.lifecycle.summary


def test_unstartable_program_is_a_run_error(launcher: Launcher, records: list[RunRecord]) -> None:
    with pytest.raises(RunError, match="could not start"):
        launcher(["/nonexistent/model-binary"])
    assert records[-1].to_json()["lifecycle"]["clean"] is False


def test_inputs_are_hashed_before_the_run(launcher: Launcher, tmp_path: Path) -> None:
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"w" * 10)
    result = launcher([*COMMAND, "exit", "0"], inputs={"weights": weights})
    assert result.record["inputs"]["weights"]["sha256"] == hashlib.sha256(b"w" * 10).hexdigest()
    assert result.record["inputs"]["weights"]["bytes"] == 10
    with pytest.raises(ArtifactError, match="declared input 'x'"):
        launcher([*COMMAND, "exit", "0"], inputs={"x": tmp_path / "missing"})


# ------------------------------------------------------------------ servers


def test_server_requests_are_timed_apart_and_stop_records_each_worker(
    launcher: Launcher, tmp_path: Path, records: list[RunRecord]
) -> None:
    server = launcher.server([*SERVER, "--workers", "2"], ready="/health", workers_expected=2)
    assert server.record["startup_seconds"] > 0
    warm = server.request("POST", "/infer", json={"prompt": "cat"}, warmup=True)
    assert warm.status == 200
    assert warm.json()["content_type"] == "application/json"
    upload = tmp_path / "image.png"
    upload.write_bytes(os.urandom(5000))
    answer = server.request("POST", "/infer", files={"image": upload}, data={"steps": "4"})
    assert answer.json()["bytes"] > 5000
    assert answer.json()["content_type"].startswith("multipart/form-data")
    big = server.request("GET", "/big?n=3000000")
    assert big.body is None
    assert big.body_path is not None
    assert big.body_path.stat().st_size == 3_000_000
    assert len(big.content()) == 3_000_000
    raw = server.request("POST", "/infer", data=b"abc")
    assert raw.json()["bytes"] == 3
    workers = list(server.record["workers_at_ready"])
    record = server.stop(grace=2)
    assert server.stop() is record  # idempotent
    assert records[-1] is server.run
    assert records[-1].to_json() == record
    assert len(record["warmup_seconds"]) == 1
    assert len(record["measured_seconds"]) == 3
    assert [r["warmup"] for r in record["requests"]] == [True, False, False, False]
    descendants = [p for p in record["processes"] if p["role"] == "descendant"]
    assert sorted(p["pid"] for p in descendants) == sorted(workers)
    for worker in descendants:
        assert worker["ended_seconds"] is not None
        assert worker["observed"] in ("disappeared", "zombie", "adopted")
        assert not _alive(worker["pid"]) or worker["pid"] not in workers
    assert record["lifecycle"]["clean"] is True, record["lifecycle"]


DIES_ON_REQUEST = [
    sys.executable,
    "-c",
    "import http.server, os, sys\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        if self.path == '/health':\n"
    "            self.send_response(200); self.end_headers(); return\n"
    "        os._exit(3)\n"
    "    def log_message(self, *a): pass\n"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n",
    "{port}",
]


def test_a_server_that_dies_after_ready_tells_one_story(launcher: Launcher) -> None:
    """D5: the request error and the lifecycle both say the server exited with code 3."""
    server = launcher.server(DIES_ON_REQUEST, ready="/health")
    with pytest.raises(RunError) as info:
        server.request("GET", "/infer")
    message = str(info.value)
    assert "(the server exited with code 3)" in message
    assert "lifecycle: not clean" in message
    assert "exited with code 3" in message.split("lifecycle:", 1)[1]
    assert "never stopped" not in message
    assert "no process was recorded" not in message
    assert server.record["stop"]["reason"] == "died after ready"


def test_server_ignoring_sigterm_fails_its_stop_like_a_command(launcher: Launcher) -> None:
    server = launcher.server([*SERVER, "--ignore-term"], ready="/health")
    with pytest.raises(RunError, match=r"did not end cleanly \(stop\): not clean.*SIGKILL"):
        server.stop(grace=0.3)
    assert server.record["lifecycle"]["clean"] is False  # recorded all the same


def test_server_ignoring_sigterm_is_killed_and_not_clean(launcher: Launcher) -> None:
    server = launcher.server(
        [*SERVER, "--workers", "2", "--ignore-term"],
        ready="/health",
        workers_expected=2,
        check=False,
    )
    record = server.stop(grace=0.3)
    assert [(s["signal"], s["target"], s["forced"]) for s in record["signals"]][:2] == [
        ("SIGTERM", "process", False),
        ("SIGKILL", "group", True),
    ]
    main = record["processes"][0]
    assert main["signal"] == "SIGKILL"
    assert main["forced"] is True
    workers = [p for p in record["processes"] if p["role"] == "descendant"]
    assert len(workers) == 2
    for worker in workers:
        assert worker["forced"] is True
        if worker["observed"] == "adopted":  # we were their subreaper: real exit status
            assert worker["signal"] == "SIGKILL"
    verdict = lifecycle_verdict(record)
    assert record["lifecycle"] == verdict.to_json()
    assert verdict.clean is False
    assert not verdict.summary.startswith("clean")
    assert "SIGKILL" in verdict.summary


def test_server_ended_by_our_stop_sigterm_is_clean(launcher: Launcher) -> None:
    # http.server keeps SIGTERM's default action: it dies of the signal we sent at stop.
    server = launcher.server(
        [sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1"], ready="/"
    )
    record = server.stop(grace=2)
    main = record["processes"][0]
    assert main["signal"] == "SIGTERM"
    assert main["forced"] is False
    assert record["lifecycle"]["clean"] is True
    assert "1 ended by our stop SIGTERM within the grace" in record["lifecycle"]["summary"]


def test_server_dying_at_startup_fails_fast_with_stderr(
    launcher: Launcher, records: list[RunRecord]
) -> None:
    start = time.monotonic()
    with pytest.raises(RunError) as info:
        launcher.server([*SERVER, "--die-at-startup"], ready="/health", startup_timeout=30)
    assert time.monotonic() - start < 5
    assert "died during startup (exit code 2)" in str(info.value)
    assert "weights file is corrupt" in str(info.value)
    assert records[-1].to_json()["lifecycle"]["clean"] is False


def test_server_never_ready_is_stopped_at_startup_timeout(
    launcher: Launcher, records: list[RunRecord]
) -> None:
    ready = r"was not ready at http://127\.0\.0\.1:\d+/health within 0\.4 s"
    with pytest.raises(RunError, match=ready):
        launcher.server([*COMMAND, "hang"], ready="/health", startup_timeout=0.4)
    assert records[-1].to_json()["processes"][0]["signal"] == "SIGTERM"
    assert records[-1].to_json()["stop"]["reason"] == "startup failed"


def test_close_stops_running_servers(tmp_path: Path) -> None:
    records: list[RunRecord] = []
    run = Launcher(
        allocation=None,
        out_dir=tmp_path,
        run_timeout=20,
        knobs=(),
        on_record=records.append,
        grace=2,
    )
    server = run.server(
        [*SERVER, "--workers", "1"], ready="http://127.0.0.1:{port}/health", workers_expected=1
    )
    pid = server.pid
    run.close()
    run.close()
    assert not _alive(pid)
    assert records[-1].to_json()["stop"]["reason"] == "teardown"
    assert records[-1].to_json()["lifecycle"]["clean"] is True


# ------------------------------------------------------------------ the verdict


def _proc(pid: int, **fields: Any) -> dict[str, Any]:
    base = {
        "pid": pid,
        "role": "descendant",
        "ppid": 1,
        "ppid_last": 1,
        "comm": "w",
        "observed": "reaped",
        "exit_code": 0,
        "signal": None,
        "forced": False,
        "signals_received": [],
        "ended_seconds": 1.0,
    }
    base.update(fields)
    return base


def test_verdict_rules_by_example() -> None:
    main = _proc(10, role="main")
    assert lifecycle_verdict({"kind": "command", "processes": [main]}).clean is True
    assert lifecycle_verdict({"kind": "command", "processes": []}).clean is False
    assert lifecycle_verdict({"processes": [main], "leftovers": [{"pid": 3}]}).clean is False
    # A worker reaped by its clean parent is accounted for; one reaped by init is not.
    worker = _proc(11, observed="disappeared", exit_code=None, ppid=10, ppid_last=10)
    assert lifecycle_verdict({"processes": [main, worker]}).clean is True
    orphan = {**worker, "ppid_last": 1}
    verdict = lifecycle_verdict({"processes": [main, orphan]})
    assert verdict.clean is False
    assert "no parent" in verdict.summary
    # SIGTERM is a graceful stop only within the grace after our non-forced stop SIGTERM.
    stop = {"signal": "SIGTERM", "forced": False, "delivered": True, "at_seconds": 5.0}
    server = _proc(10, role="main", exit_code=None, signal="SIGTERM", ended_seconds=5.5)
    record = {
        "kind": "server",
        "processes": [server],
        "signals": [stop],
        "stop": {"grace_seconds": 1.0, "main_alive": True},
    }
    assert lifecycle_verdict(record).clean is True
    late = {**record, "processes": [{**server, "ended_seconds": 7.0}]}
    assert lifecycle_verdict(late).clean is False
    never_stopped = {**record, "stop": None}
    assert "never stopped" in lifecycle_verdict(never_stopped).summary


def test_a_verdict_passed_in_is_ignored() -> None:
    killed = _proc(10, role="main", exit_code=None, signal="SIGKILL", forced=True)
    record = {
        "processes": [killed],
        "lifecycle": {"clean": True, "summary": "clean"},
        "clean": True,
    }
    assert lifecycle_verdict(record).clean is False


_signals = st.fixed_dictionaries(
    {
        "signal": st.sampled_from(["SIGTERM", "SIGKILL", "SIGINT"]),
        "forced": st.booleans(),
        "reason": st.sampled_from(["stop", "timeout", "teardown"]),
        "at_seconds": st.floats(0, 10, allow_nan=False),
        "delivered": st.booleans(),
    }
)
_processes = st.lists(
    st.fixed_dictionaries(
        {
            "pid": st.integers(1, 6),
            "role": st.sampled_from(["main", "descendant"]),
            "ppid": st.integers(0, 6),
            "ppid_last": st.integers(0, 6),
            "comm": st.just("p"),
            "observed": st.sampled_from(
                ["reaped", "adopted", "zombie", "disappeared", "alive", "unknown"]
            ),
            "exit_code": st.one_of(st.none(), st.integers(0, 3)),
            "signal": st.one_of(st.none(), st.sampled_from(["SIGTERM", "SIGKILL", "SIGSEGV"])),
            "forced": st.booleans(),
            "signals_received": st.lists(_signals, max_size=2),
            "ended_seconds": st.one_of(st.none(), st.floats(0, 20, allow_nan=False)),
        }
    ),
    max_size=5,
)
_records = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["command", "server"]),
        "processes": _processes,
        "signals": st.lists(_signals, max_size=3),
        "leftovers": st.lists(st.fixed_dictionaries({"pid": st.integers(1, 9)}), max_size=2),
        "timed_out": st.booleans(),
        "stop": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {"grace_seconds": st.floats(0, 5, allow_nan=False), "main_alive": st.booleans()}
            ),
        ),
    },
    optional={
        "error": st.text(max_size=5),
        "workers_expected": st.integers(0, 4),
        "lifecycle": st.fixed_dictionaries({"clean": st.just(True)}),
    },
)


def _forced(proc: Mapping[str, Any]) -> bool:
    return bool(proc["forced"]) or any(s["forced"] for s in proc["signals_received"])


@settings(max_examples=400, deadline=None)
@given(_records)
def test_property_verdict_and_summary_agree_with_the_raw_record(record: dict[str, Any]) -> None:
    verdict = lifecycle_verdict(record)
    summary = verdict.summary
    procs = record["processes"]
    forced = [p for p in procs if _forced(p)]
    bad_exit = [
        p
        for p in procs
        if not _forced(p)
        and p["signal"] is None
        and p["observed"] != "alive"
        and p["exit_code"] not in (None, 0)
    ]
    # The summary opens with the verdict, and "clean" opens it only when clean.
    assert summary.startswith("clean (") is verdict.clean
    assert summary.startswith("not clean (") is (not verdict.clean)
    assert verdict.clean is (not verdict.reasons)
    # Its tally is the raw record's.
    counts = verdict.counts
    assert counts.processes == len(procs)
    assert counts.forced == len(forced)
    assert counts.leftovers == len(record["leftovers"])
    assert f"{len(forced)} forced" in summary
    assert f"{len(record['leftovers'])} leftover" in summary
    # Anything forced, non-zero, killed by an unexpected signal, alive, left over, timed out,
    # failed or empty is never clean, and each forced process is named.
    # A descendant's failure may be handled by a recorded parent that ended cleanly; a main
    # process's never is.
    if (
        forced
        or any(p["role"] == "main" for p in bad_exit)
        or record["leftovers"]
        or record["timed_out"]
        or not procs
        or record.get("error")
        or any(p["observed"] == "alive" for p in procs)
        or any(p["signal"] in ("SIGKILL", "SIGSEGV") and p["role"] == "main" for p in procs)
    ):
        assert verdict.clean is False
    for proc in forced:
        assert f"pid {proc['pid']} (p) was forced" in summary
    for proc in bad_exit:
        # A descendant's failure that a clean parent reaped is the parent's business, so only
        # a main process's exit code must be named whatever else is wrong.
        if proc["role"] == "main":
            assert f"exited with code {proc['exit_code']}" in summary
    if verdict.clean:
        for p in procs:
            assert (
                p["exit_code"] == 0
                or p["signal"] == "SIGTERM"
                or p["observed"] == "disappeared"
                or (p["role"] == "descendant" and "handled by its parent" in summary)
            )


def test_record_is_json_serialisable(launcher: Launcher) -> None:
    result = launcher([*COMMAND, "exit", "0"])
    assert json.loads(json.dumps(result.record)) == result.record


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "soon"])
def test_a_bad_timeout_is_refused_before_anything_runs(launcher: Launcher, timeout: Any) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        launcher([sys.executable, "-c", "pass"], timeout=timeout)


def test_a_ready_that_is_no_url_is_refused(launcher: Launcher) -> None:
    with pytest.raises(ConfigError, match=r"ready=\.\.\."):
        launcher.server([sys.executable, "-c", "import time; time.sleep(30)"], ready="health")


DAEMON = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(30)
    os._exit(0)
time.sleep(0.3)
"""


def test_a_double_forked_daemon_is_found_and_the_run_is_not_clean(launcher: Launcher) -> None:
    with pytest.raises(RunError, match="lifecycle was not clean") as info:
        launcher([sys.executable, "-c", DAEMON], timeout=20)
    record = info.value.record
    assert not lifecycle_verdict(record).clean
    assert any(p["role"] == "descendant" and p["forced"] for p in record["processes"])


def test_a_forced_signal_to_an_unrecorded_process_is_never_clean() -> None:
    record = {
        "processes": [{"pid": 10, "role": "main", "observed": "reaped", "exit_code": 0}],
        "signals": [
            {
                "signal": "SIGTERM",
                "forced": True,
                "delivered": True,
                "reason": "timeout",
                "receivers": [10, 11, 12],
            }
        ],
    }
    verdict = lifecycle_verdict(record)
    assert not verdict.clean
    assert "11, 12" in " ".join(verdict.reasons)


def test_port_placeholder_in_env_gets_a_port(launcher: Launcher) -> None:
    run = launcher(
        [sys.executable, "-c", "import os; print(os.environ['MYPORT'])"], env={"MYPORT": "{port}"}
    )
    assert Path(run.stdout_path).read_text().strip().isdigit()
