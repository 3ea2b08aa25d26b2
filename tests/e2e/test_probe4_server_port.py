"""End to end, from outside (#20): a server whose readiness port another process already holds
(a stale server of the last job on a fixed port). The probe was answered by that stranger, every
request went to it, and the run was recorded clean. Now the port is checked before the server
starts, and the failure names who holds it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


SERVER = Path(__file__).resolve().parent.parent / "data" / "servers" / "worker_server.py"


@pytest.fixture
def stranger(tmp_path: Path) -> Iterator[int]:
    """Another process serving HTTP on a port (answers ``GET /`` with 200)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    served = tmp_path / "stranger"
    served.mkdir()
    log = (tmp_path / "stranger.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
        cwd=served,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_a_server_on_a_port_another_process_holds_is_refused(
    pytester: pytest.Pytester, stranger: int, tmp_path: Path
) -> None:
    pytester.makepyfile(
        test_srv=f"""
import sys

def test_fixed_port(model_run):
    server = model_run.server([sys.executable, {str(SERVER)!r}, "{{port}}"], ready="/",
                              port={stranger})
    server.request("GET", "/")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*port {stranger}*already in use*"])
    # The stranger was never asked anything: not the readiness probe, not the request.
    assert "GET /" not in (tmp_path / "stranger.log").read_text()
