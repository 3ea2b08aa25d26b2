"""A tiny HTTP model server with forked worker children, for model_run tests.

``python worker_server.py PORT [--workers N] [--ignore-term] [--die-at-startup]
[--startup-delay S] [--worker-exit CODE] [--worker-ignore-term]``. GET /health answers 200
once ready; POST /infer echoes the size and SHA-256 of the upload; GET /big?n=BYTES returns
BYTES bytes.
On SIGTERM it forwards SIGTERM to its workers, reaps them and exits 0 (unless
``--ignore-term``). Workers exit with ``--worker-exit`` (default 0) on SIGTERM, or ignore it
(``--worker-ignore-term``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse


def worker(code: int, ignore_term: bool = False) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_term else lambda *_: os._exit(code))
    while True:
        time.sleep(0.1)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # quiet
        return

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/health":
            self._send(200, b'{"ok": true}')
        elif url.path == "/big":
            n = int(parse_qs(url.query)["n"][0])
            self._send(200, b"x" * n, "application/octet-stream")
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        time.sleep(float(parse_qs(urlparse(self.path).query).get("sleep", ["0"])[0]))
        answer = {
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
            "content_type": self.headers.get("Content-Type"),
        }
        self._send(200, json.dumps(answer).encode())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--die-at-startup", action="store_true")
    parser.add_argument("--startup-delay", type=float, default=0.0)
    parser.add_argument("--worker-exit", type=int, default=0)
    parser.add_argument("--worker-ignore-term", action="store_true")
    args = parser.parse_args()
    print("server: loading weights", file=sys.stderr, flush=True)
    if args.die_at_startup:
        time.sleep(0.2)
        print("server: fatal: weights file is corrupt", file=sys.stderr, flush=True)
        return 2
    workers = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            worker(args.worker_exit, args.worker_ignore_term)
        workers.append(pid)
    time.sleep(args.startup_delay)
    server = HTTPServer(("127.0.0.1", args.port), Handler)

    def on_term(*_: object) -> None:
        for pid in workers:
            os.kill(pid, signal.SIGTERM)
        for pid in workers:
            os.waitpid(pid, 0)
        os._exit(0)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_term else on_term)
    print("server: ready", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
