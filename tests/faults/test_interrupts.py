"""Faults: a session interrupted by SIGINT, SIGTERM or SIGHUP (issue #23, Lifecycle).

What CI cancel, ``timeout``, Kubernetes and an ssh hangup send. Every process the session
started ends within 5 s, the next session gets the devices within 10 s, the session exits 2
with one line (no traceback), and its receipts say it was interrupted, even when the server's
workers ignore SIGTERM. Real sessions, real servers, real signals.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from .test_orphans import Session, alive, only_receipt, sessions, start_asking, start_serving

__all__ = ["sessions"]  # the fixture, shared with test_orphans


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interrupted_session_ends_everything_it_started_and_says_so(
    tmp_path: Path, sessions: list[Session], sig: str
) -> None:
    locks = tmp_path / "locks"
    a, info = start_serving(tmp_path, sessions, locks, stubborn=True)
    started = [info["server"], *info["workers"]]
    assert len(started) == 3
    assert all(alive(p) for p in started)
    os.kill(a.pid, getattr(signal, sig))
    sent = time.monotonic()
    while any(alive(p) for p in started) and time.monotonic() - sent < 10:
        time.sleep(0.02)
    gone = time.monotonic() - sent
    print(f"{sig}: every process gone {gone:.2f} s after the signal")
    assert gone < 5.0, f"{sig}: A's processes still ran {gone:.1f} s later"
    b, entered = start_asking(tmp_path, sessions, locks, started)
    assert b.wait(60) == 0, b.output()
    got = json.loads(entered.read_text())
    assert got["alive"] == []
    assert a.wait(30) == 2, a.output()
    output = a.output()
    assert "Traceback" not in output, output
    assert f"Interrupted: pytest-lossless: interrupted by {sig}" in output, output
    assert output.count(f"interrupted by {sig}") <= 4, output
    receipt = only_receipt(tmp_path / "a-receipts", "test_serve")
    assert receipt["outcome"]["interrupted"] == sig
    assert receipt["outcome"]["call"] == "failed"
    run = receipt["runs"][0]
    assert run["stop"]["reason"] == f"interrupted by {sig}"
    assert receipt["allocation"]["released_at"] is not None
    index = next((tmp_path / "a-receipts").rglob("INDEX.json"))
    assert json.loads(index.read_text())["state"] == "interrupted"


@pytest.mark.slow
def test_the_next_session_gets_the_devices_within_10_s_of_sigterm(
    tmp_path: Path, sessions: list[Session]
) -> None:
    locks = tmp_path / "locks"
    a, info = start_serving(tmp_path, sessions, locks, stubborn=True)
    started = [info["server"], *info["workers"]]
    b, entered = start_asking(tmp_path, sessions, locks, started)
    time.sleep(1.0)  # B waits for A's devices
    assert not entered.exists()
    os.kill(a.pid, signal.SIGTERM)
    sent = time.time()
    assert b.wait(60) == 0, b.output()
    got = json.loads(entered.read_text())
    assert got["alive"] == [], "B ran while A's processes lived"
    print(f"B granted {got['at'] - sent:.2f} s after SIGTERM to A")
    assert got["at"] - sent < 10.0, got["at"] - sent
    assert a.wait(30) == 2
