"""A started server under watch: readiness polling, timed requests whose large answers are
streamed to files, and a graceful stop (SIGTERM, grace, SIGKILL) recorded process by process.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import signal
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from ..core.clock import Clock
from ..errors import RunError
from .arguments import check_seconds
from .failure import failure_message
from .group import ProcessGroup
from .lifecycle import lifecycle_verdict
from .request_body import CHUNK, encode_body

#: Response bodies larger than this are streamed to a file in the run's folder.
STREAM_TO_FILE_ABOVE = 1 << 20


class ServerHost(Protocol):
    """What a server reads, when it needs it, from the launcher that started it."""

    @property
    def clock(self) -> Clock: ...

    @property
    def grace(self) -> float: ...

    @property
    def run_timeout(self) -> float: ...

    def clean_text(self, text: str) -> str: ...


@dataclass
class Response:
    """One timed HTTP response; large bodies live in ``body_path`` instead of ``body``."""

    status: int
    headers: dict[str, str]
    body: bytes | None
    body_path: Path | None
    seconds: float
    warmup: bool = False

    def content(self) -> bytes:
        if self.body is not None:
            return self.body
        assert self.body_path is not None
        return self.body_path.read_bytes()

    def text(self) -> str:
        return self.content().decode(errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content())


class Server:
    """A started server: timed requests, then ``stop()`` with a full lifecycle record."""

    def __init__(
        self,
        host: ServerHost,
        group: ProcessGroup,
        record: dict[str, Any],
        port: int,
        run_dir: Path,
        on_stopped: Callable[[Server, ProcessGroup], None],
        *,
        check: bool = True,
    ) -> None:
        self._host = host
        #: Whether an unclean stop raises (as ``model_run(check=True)`` does for a command).
        self.check = check
        self._on_stopped = on_stopped
        self._group = group
        self.record = record
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._run_dir = run_dir
        self._stopped = False

    @property
    def pid(self) -> int:
        return self._group.pid

    def _wait_ready(self, url: str, limit: float, workers_expected: int | None) -> None:
        clock = self._host.clock
        group = self._group
        polls = 0
        last_error = "no answer yet"
        while True:
            if group.main_done:
                self._fail_startup(
                    f"died during startup ({self._main_status()}) after {group.now():.2f} s"
                )
            polls += 1
            try:
                with urllib.request.urlopen(url, timeout=1.0) as answer:
                    if 200 <= answer.status < 400:
                        break
                    last_error = f"HTTP {answer.status}"
            except urllib.error.HTTPError as exc:
                last_error = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                last_error = str(getattr(exc, "reason", exc))
            if group.now() >= limit:
                self._fail_startup(
                    f"was not ready at {url} within {limit:g} s (last probe: {last_error})"
                )
            clock.sleep(0.05)
        self.record["startup_seconds"] = round(group.now(), 6)
        self.record["ready_polls"] = polls
        if workers_expected:
            while (
                len([p for p in group.alive() if p.role == "descendant"]) < workers_expected
                and group.now() < limit
                and not group.main_done
            ):
                group.sample()
                clock.sleep(0.02)
        group.sample()
        self.record["workers_at_ready"] = [p.pid for p in group.alive() if p.role == "descendant"]

    def _main_status(self) -> str:
        main = self._group.main
        return f"signal {main.signal}" if main.signal else f"exit code {main.exit_code}"

    def _fail_startup(self, what: str) -> None:
        self.record["error"] = f"startup failed: the server {what}"
        self._finish(grace=self._host.grace, reason="startup failed")
        raise RunError(
            failure_message(self.record, what, self._host.clean_text), record=self.record
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        files: Mapping[str, Any] | None = None,
        data: bytes | str | Mapping[str, str] | None = None,
        timeout: float | None = None,
        warmup: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """One request, timed from the start of the upload to the last byte of the response.

        ``json`` sends a JSON body; ``files`` (name -> path, or (filename, path or bytes,
        content type)) a multipart form, with ``data`` as extra fields; otherwise ``data``
        is sent as is (a mapping as a url-encoded form). Warmup requests are recorded apart.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        if self._stopped:
            raise RunError(f"model_run: {self.record['name']} is stopped; no more requests")
        limit = self._host.run_timeout if timeout is None else check_seconds(timeout, "timeout")
        body, body_len, head = encode_body(json=json, files=files, data=data)
        head.update(headers or {})
        index = len(self.record["requests"]) + 1
        entry: dict[str, Any] = {
            "index": index,
            "method": method,
            "path": self._host.clean_text(path),  # a token in a query string stays out
            "warmup": warmup,
            "bytes_sent": body_len,
            "started_seconds": round(self._group.now(), 6),
        }
        clock = self._host.clock
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=limit)
        body_path: Path | None = None
        try:
            conn.connect()
            start = clock.monotonic()
            conn.request(method, path, body=body, headers=head)
            answer = conn.getresponse()
            chunks: list[bytes] = []
            size = 0
            sink: IO[bytes] | None = None
            try:
                while True:
                    chunk = answer.read(CHUNK)
                    if not chunk:
                        break
                    size += len(chunk)
                    if sink is None and size > STREAM_TO_FILE_ABOVE:
                        body_path = self._run_dir / f"response-{index:03d}.body"
                        sink = open(body_path, "wb")  # noqa: SIM115 - closed below
                        sink.writelines(chunks)
                        chunks = []
                    if sink is not None:
                        sink.write(chunk)
                    else:
                        chunks.append(chunk)
                seconds = clock.monotonic() - start
            finally:
                if sink is not None:
                    sink.close()
        except (OSError, http.client.HTTPException) as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            self.record["requests"].append(entry)
            # A server that closed the connection as it died is reaped first, so that the
            # message says what happened to it, not "still running".
            self._group.wait_main(min(1.0, self._host.grace))
            self._group.sample()
            died = self._group.main_done
            main = self._group.main
            ended = (
                f"was killed by {main.signal}"
                if main.signal
                else f"exited with code {main.exit_code}"
            )
            state = f"the server {ended}" if died else "the server is still running"
            if died and not self._stopped:
                # One story: the record is closed (its processes, their exits) before the
                # message reads its lifecycle, so both say the server died.
                self._finish(grace=self._host.grace, reason="died after ready")
            raise RunError(
                failure_message(
                    self.record,
                    f"request {method} {entry['path']} failed: {entry['error']} ({state})",
                    self._host.clean_text,
                ),
                record=self.record,
            ) from None
        finally:
            conn.close()
        entry.update(
            {
                "status": answer.status,
                "seconds": round(seconds, 6),
                "bytes_received": size,
                "body_path": str(body_path) if body_path is not None else None,
            }
        )
        self.record["requests"].append(entry)
        self.record["warmup_seconds" if warmup else "measured_seconds"].append(entry["seconds"])
        return Response(
            answer.status,
            {k.lower(): v for k, v in answer.getheaders()},
            None if body_path is not None else b"".join(chunks),
            body_path,
            seconds,
            warmup,
        )

    def stop(self, grace: float | None = None, *, reason: str = "stop") -> dict[str, Any]:
        """SIGTERM the server, wait ``grace`` s, SIGKILL the group if needed; return the record.

        The record lists the exit of the server and every descendant it had, each signal
        (forced or not) and any leftover; idempotent.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        if self._stopped:
            return self.record
        record = self._finish(
            grace=self._host.grace if grace is None else float(grace), reason=reason
        )
        lifecycle = lifecycle_verdict(record)
        if self.check and not lifecycle["clean"]:
            raise RunError(
                failure_message(
                    record,
                    f"did not end cleanly ({reason}): {lifecycle['summary']}",
                    self._host.clean_text,
                ),
                record=record,
            )
        return record

    def _finish(self, *, grace: float, reason: str) -> dict[str, Any]:
        self._stopped = True
        group = self._group
        group.sample()
        main_alive = not group.main_done
        started = group.now()
        self.record["stop"] = {
            "reason": reason,
            "grace_seconds": grace,
            "requested_seconds": round(started, 6),
            "main_alive": main_alive,
        }
        if main_alive:
            group.send(signal.SIGTERM, forced=False, reason=reason, group=False)
            if not group.wait_main(grace):
                group.send(
                    signal.SIGKILL,
                    forced=True,
                    reason=f"grace of {grace:g} s expired after SIGTERM",
                    group=True,
                )
                group.wait_main(5.0)
                group.settle(1.0)
        # Workers get what is left of the grace to wind down after the server exited.
        group.settle(max(0.0, grace - (group.now() - started)))
        group.finish(reason="left running after the server exited")
        self._on_stopped(self, group)  # the launcher closes the record and emits it
        return self.record
