"""A started server under watch: readiness polling, timed requests whose large answers are
streamed to files, and a graceful stop (SIGTERM, grace, SIGKILL) recorded process by process.
"""

from __future__ import annotations

import bisect
import http.client
import json as jsonlib
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Protocol

from ..core.clock import Clock
from ..errors import RunError
from .arguments import check_seconds
from .failure import failure_message
from .group import ProcessGroup
from .lifecycle import lifecycle_verdict
from .progress import Progress
from .record import Readiness, RequestRecord, RequestTotals, RunRecord, ServerPart, StopRecord
from .request_body import CHUNK, FilePart, encode_body

#: Response bodies larger than this are streamed to a file in the run's folder.
STREAM_TO_FILE_ABOVE = 1 << 20
#: Request records kept per server run; later ones are only counted (``request_totals``).
REQUEST_RECORDS = 10_000
#: Seconds between two readiness probes (after a failed one), unless ``ready_interval=``.
READY_INTERVAL = 0.05
#: Seconds one readiness probe waits for its answer.
READY_PROBE_TIMEOUT = 1.0


def request_totals(limit: int) -> RequestTotals:
    """The empty ``request_totals`` of a server record: all requests, and apart the ``kept``
    records and the ``omitted`` ones beyond ``limit`` (so that verify can add them up)."""
    return RequestTotals(limit=limit)


class ServerHost(Protocol):
    """What a server reads, when it needs it, from the launcher that started it."""

    @property
    def clock(self) -> Clock: ...

    @property
    def grace(self) -> float: ...

    @property
    def run_timeout(self) -> float: ...

    @property
    def request_records(self) -> int: ...

    @property
    def progress(self) -> Progress | None: ...

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
    """A started server: timed requests, then ``stop()`` with a full lifecycle record.

    ``run`` is its record (typed) as it stands; ``record`` the same as JSON, as the receipt
    holds it once the server is stopped (with its ``lifecycle``).
    """

    def __init__(
        self,
        host: ServerHost,
        group: ProcessGroup,
        run: RunRecord,
        port: int,
        run_dir: Path,
        on_stopped: Callable[[Server, ProcessGroup], RunRecord],
        *,
        check: bool = True,
    ) -> None:
        self._host = host
        self._run = run
        #: Requests may come from several threads at once (a load test): one index each, and
        #: their records kept in index order, counted in the totals, their times in order.
        self._requests_lock = threading.Lock()
        self._issued = 0
        self._requests: list[RequestRecord] = []
        self._totals = self._part.request_totals
        self._times: dict[bool, list[float]] = {True: [], False: []}
        #: The record as emitted when stopped, and its JSON.
        self._final: tuple[RunRecord, dict[str, Any]] | None = None
        #: Whether an unclean stop raises (as ``model_run(check=True)`` does for a command).
        self.check = check
        self._on_stopped = on_stopped
        self._group = group
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._run_dir = run_dir
        self._stopped = False
        #: The progress line (``server 01 starting``, then ``ready, N requests``), if any.
        progress = self._progress = host.progress
        self._stage = f"server {str(run.name or '').split('-')[-1]}"
        self._progress_token = progress.begin(f"{self._stage} starting") if progress else 0

    @property
    def _part(self) -> ServerPart:
        assert self._run.server is not None  # set in __init__
        return self._run.server

    def _set(self, **changes: Any) -> None:
        """Replace fields of the server part of the record."""
        self._run = replace(self._run, server=replace(self._part, **changes))

    @property
    def run(self) -> RunRecord:
        """The record as it stands: its requests so far; once stopped, as emitted."""
        if self._final is not None:
            return self._final[0]
        with self._requests_lock:
            return replace(
                self._run,
                server=replace(
                    self._part,
                    requests=tuple(self._requests),
                    request_totals=self._totals,
                    warmup_seconds=tuple(self._times[True]),
                    measured_seconds=tuple(self._times[False]),
                ),
            )

    @property
    def record(self) -> dict[str, Any]:
        """:attr:`run` as JSON (with its ``lifecycle`` once stopped: the receipt's record)."""
        if self._final is not None:
            return self._final[1]
        return self.run.to_json(lifecycle=False)

    def _tick(self, stage: str | None = None, **counts: int) -> None:
        if self._progress is not None:
            self._progress.update(stage, token=self._progress_token, **counts)
            self._progress.tick()

    @property
    def pid(self) -> int:
        return self._group.pid

    def _wait_ready(
        self, url: str, limit: float, workers_expected: int | None, every: float | None
    ) -> None:
        """Probe ``url`` every ``every`` s (default 0.05) until it answers; record the cadence.

        The ``readiness`` record says how many probes ran, how long they took, and the window
        in which the server became ready unseen (from the end of the last failed probe to the
        answer of the first good one): that window, ``probe_share`` of the startup time, is
        the probe's own part of ``startup_seconds`` (a 5 s interval on a 40 s startup: 12%).
        """
        clock = self._host.clock
        group = self._group
        interval = READY_INTERVAL if every is None else check_seconds(every, "ready_interval")
        polls = 0
        probing = 0.0
        first: float | None = None
        last_failed: float | None = None
        last_error = "no answer yet"

        def note(ready: float | None) -> None:
            since = last_failed if last_failed is not None else first
            window = None if ready is None or since is None else max(0.0, ready - since)
            readiness = Readiness(
                interval_seconds=interval,
                probe_timeout_seconds=READY_PROBE_TIMEOUT,
                probes=polls,
                failed_probes=polls - (ready is not None),
                first_probe_seconds=None if first is None else round(first, 6),
                last_failed_probe_seconds=None if last_failed is None else round(last_failed, 6),
                ready_seconds=None if ready is None else round(ready, 6),
                probing_seconds=round(probing, 6),
                detection_window_seconds=None if window is None else round(window, 6),
                probe_share=(round(window / ready, 6) if window is not None and ready else None),
                last_error=last_error if ready is None or last_failed is not None else None,
            )
            self._set(ready_polls=polls, readiness=readiness)

        while True:
            if group.main_done:
                note(None)
                self._fail_startup(
                    f"died during startup ({self._main_status()}) after {group.now():.2f} s"
                )
            polls += 1
            began = group.now()
            first = began if first is None else first
            ready = False
            try:
                with urllib.request.urlopen(url, timeout=READY_PROBE_TIMEOUT) as answer:
                    ready = 200 <= answer.status < 400
                    if not ready:
                        last_error = f"HTTP {answer.status}"
            except urllib.error.HTTPError as exc:
                last_error = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                last_error = str(getattr(exc, "reason", exc))
            ended = group.now()
            probing += ended - began
            if ready:
                break
            last_failed = ended
            self._tick()
            if ended >= limit:
                note(None)
                self._fail_startup(
                    f"was not ready at {url} within {limit:g} s (last probe: {last_error}; "
                    f"{polls} probes, {interval:g} s apart)"
                )
            clock.sleep(max(0.0, min(interval, limit - ended)))
        self._set(startup_seconds=round(ended, 6))
        note(ended)
        self._tick(f"{self._stage} ready", requests=0)
        if workers_expected:
            while (
                len([p for p in group.alive() if p.role == "descendant"]) < workers_expected
                and group.now() < limit
                and not group.main_done
            ):
                group.sample()
                clock.sleep(0.02)
        group.sample()
        self._set(workers_at_ready=tuple(p.pid for p in group.alive() if p.role == "descendant"))

    def _main_status(self) -> str:
        main = self._group.main
        return f"signal {main.signal}" if main.signal else f"exit code {main.exit_code}"

    def _fail_startup(self, what: str) -> None:
        self._run = replace(self._run, error=f"startup failed: the server {what}")
        self._finish(grace=self._host.grace, reason="startup failed")
        raise RunError(failure_message(self.run, what, self._host.clean_text), record=self.record)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        files: Mapping[str, FilePart] | None = None,
        data: bytes | str | Mapping[str, str] | None = None,
        timeout: float | None = None,
        warmup: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """One request, timed from the start of the upload to the last byte of the response.

        ``json`` sends a JSON body; ``files`` (name -> path, or (filename, path or bytes,
        content type)) a multipart form, with ``data`` as extra fields; otherwise ``data``
        is sent as is (a mapping as a url-encoded form). Warmup requests are recorded apart.

        Every request is recorded (method, path with secrets hidden, status, bytes each way,
        start and duration), failed ones too: a connection error or timeout (which raises
        :class:`RunError`) and an answer that is not 2xx (which is returned) both count as
        failed in ``request_totals``.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        if self._stopped:
            raise RunError(f"model_run: {self._run.name} is stopped; no more requests")
        limit = self._host.run_timeout if timeout is None else check_seconds(timeout, "timeout")
        body, body_len, head = encode_body(json=json, files=files, data=data)
        head.update(headers or {})
        with self._requests_lock:
            self._issued += 1
            index = self._issued
        entry = RequestRecord(
            index=index,
            method=method,
            path=self._host.clean_text(path),  # a token in a query string stays out
            warmup=warmup,
            bytes_sent=body_len,
            started_seconds=round(self._group.now(), 6),
        )
        clock = self._host.clock
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=limit)
        body_path: Path | None = None
        start = clock.monotonic()
        size = 0
        try:
            conn.connect()
            start = clock.monotonic()
            conn.request(method, path, body=body, headers=head)
            answer = conn.getresponse()
            entry = replace(entry, status=answer.status)
            chunks: list[bytes] = []
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
            error = f"{type(exc).__name__}: {exc}"
            failed = replace(entry, error=error, timed_out=isinstance(exc, TimeoutError))
            self._note_request(failed, clock.monotonic() - start, size)
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
                    self.run,
                    f"request {method} {entry.path} failed: {error} ({state})",
                    self._host.clean_text,
                ),
                record=self.record,
            ) from None
        except BaseException as exc:  # a bad argument, Ctrl-C: recorded before it goes on
            failed = replace(entry, error=f"{type(exc).__name__}: {exc}")
            self._note_request(failed, clock.monotonic() - start, size)
            raise
        finally:
            conn.close()
        entry = replace(entry, body_path=str(body_path) if body_path is not None else None)
        self._note_request(entry, seconds, size)
        return Response(
            answer.status,
            {k.lower(): v for k, v in answer.getheaders()},
            None if body_path is not None else b"".join(chunks),
            body_path,
            seconds,
            warmup,
        )

    def _note_request(self, entry: RequestRecord, seconds: float, received: int) -> None:
        """Count one request in ``request_totals``; keep its record while under the bound."""
        status = entry.status
        entry = replace(
            entry,
            seconds=round(seconds, 6),
            bytes_received=received,
            failed=entry.error is not None or not (status is not None and 200 <= status < 300),
        )
        with self._requests_lock:
            self._totals = self._totals.plus(entry)
            if entry.index <= self._totals.limit:  # the first N, by index
                bisect.insort(self._requests, entry, key=lambda r: r.index)
            if entry.error is None:
                self._times[entry.warmup].append(entry.seconds)
            done, failed = self._totals.all.requests, self._totals.all.failed
        self._tick(requests=done, failed=failed)

    def stop(self, grace: float | None = None, *, reason: str = "stop") -> dict[str, Any]:
        """SIGTERM the server, wait ``grace`` s, SIGKILL the group if needed; return the record
        (JSON, as the receipt holds it; :attr:`run` is the same, typed).

        The record lists the exit of the server and every descendant it had, each signal
        (forced or not) and any leftover; idempotent.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        if self._stopped:
            return self.record
        run = self._finish(grace=self._host.grace if grace is None else float(grace), reason=reason)
        lifecycle = lifecycle_verdict(run)
        if self.check and not lifecycle.clean:
            raise RunError(
                failure_message(
                    run,
                    f"did not end cleanly ({reason}): {lifecycle.summary}",
                    self._host.clean_text,
                ),
                record=self.record,
            )
        return self.record

    def _finish(self, *, grace: float, reason: str) -> RunRecord:
        self._stopped = True
        if self._progress is not None:
            self._progress.end(self._progress_token)
        group = self._group
        group.sample()
        main_alive = not group.main_done
        started = group.now()
        stop = StopRecord(reason, grace, round(started, 6), main_alive)
        self._run = replace(self._run, stop=stop)
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
        run = self._on_stopped(self, group)  # the launcher closes the record and emits it
        self._final = (run, run.to_json())
        return run
