"""The run record: what one command or server did, as typed, frozen records.

A :class:`RunRecord` holds who ran (:class:`ProcessRecord`, main first), which signals we sent
and why (:class:`SignalSent`), what was left behind (:class:`Leftover`), the run's timings and
streams, and for a server its readiness, requests and stop (:class:`ServerPart`). Each record
has one ``to_json()``, the exact shape of ``runs[]`` in a receipt (docs/receipts.md), and one
``from_json()``, which reads what today's code and older versions wrote and is lenient with a
hand-edited record: an entry of the wrong type is skipped or read as absent, and what could
not be read is kept in ``problems``, which the lifecycle verdict reports.

Standard library only, no I/O: the launcher builds these, the lifecycle judges them, and
receipts and ``verify`` read them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: object) -> int | None:
    return value if _is_int(value) else None


def _num(value: object) -> float | None:
    """A number as it was written (an int stays an int), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _maps(value: object) -> list[Mapping[str, Any]]:
    """The mappings of a JSON list (anything else in it, or a non-list, is skipped)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _texts(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _ints(value: object) -> tuple[int, ...]:
    return tuple(v for v in value if _is_int(v)) if isinstance(value, list) else ()


def _env_values(value: object) -> dict[str, str | None]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): (None if v is None else str(v)) for k, v in value.items()}


# ------------------------------------------------------------------ signals and processes


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """A signal we sent that reached one process while it was alive in the target."""

    signal: str | None
    forced: bool
    reason: str | None
    at_seconds: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "forced": self.forced,
            "reason": self.reason,
            "at_seconds": self.at_seconds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SignalReceived:
        return cls(
            _str(data.get("signal")),
            bool(data.get("forced")),
            _str(data.get("reason")),
            _num(data.get("at_seconds")),
        )


@dataclass(frozen=True, slots=True)
class SignalSent:
    """One signal we sent: to the group or the main process, forced or not, and who got it."""

    signal: str | None
    target: str | None
    pid: int | None
    at_seconds: float | None
    forced: bool
    reason: str | None
    delivered: bool
    receivers: tuple[int, ...] = ()

    def received(self) -> SignalReceived:
        """What each receiver records of it."""
        return SignalReceived(self.signal, self.forced, self.reason, self.at_seconds)

    def to_json(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "target": self.target,
            "pid": self.pid,
            "at_seconds": self.at_seconds,
            "forced": self.forced,
            "reason": self.reason,
            "delivered": self.delivered,
            "receivers": list(self.receivers),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SignalSent:
        return cls(
            signal=_str(data.get("signal")),
            target=_str(data.get("target")),
            pid=_int(data.get("pid")),
            at_seconds=_num(data.get("at_seconds")),
            forced=bool(data.get("forced")),
            reason=_str(data.get("reason")),
            delivered=bool(data.get("delivered")),
            receivers=_ints(data.get("receivers")),
        )


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """One observed process: who it was, how its end was observed, how it ended, its memory."""

    pid: int | None
    role: str | None
    ppid: int | None
    ppid_last: int | None
    pgid: int | None
    comm: str | None
    argv: tuple[str, ...]
    observed: str | None
    exit_code: int | None
    signal: str | None
    core_dumped: bool
    forced: bool
    signals_received: tuple[SignalReceived, ...]
    started_seconds: float | None
    ended_seconds: float | None
    wall_seconds: float | None
    peak_rss_kib: int | None
    peak_rss_source: str | None

    @property
    def label(self) -> str:
        return f"{self.role or 'process'} pid {self.pid} ({self.comm or '?'})"

    @property
    def was_forced(self) -> bool:
        """Marked forced, or it received a forced signal."""
        return self.forced or any(s.forced for s in self.signals_received)

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "role": self.role,
            "ppid": self.ppid,
            "ppid_last": self.ppid_last,
            "pgid": self.pgid,
            "comm": self.comm,
            "argv": list(self.argv),
            "observed": self.observed,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "core_dumped": self.core_dumped,
            "forced": self.forced,
            "signals_received": [s.to_json() for s in self.signals_received],
            "started_seconds": self.started_seconds,
            "ended_seconds": self.ended_seconds,
            "wall_seconds": self.wall_seconds,
            "peak_rss_kib": self.peak_rss_kib,
            "peak_rss_source": self.peak_rss_source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        signal = data.get("signal")
        return cls(
            pid=_int(data.get("pid")),
            role=_str(data.get("role")),
            ppid=_int(data.get("ppid")),
            ppid_last=_int(data.get("ppid_last", data.get("ppid"))),
            pgid=_int(data.get("pgid")),
            comm=_str(data.get("comm")),
            argv=_texts(data.get("argv")),
            observed=_str(data.get("observed")),
            exit_code=_int(data.get("exit_code")),
            signal=str(signal) if signal else None,
            core_dumped=bool(data.get("core_dumped")),
            forced=data.get("forced") is True,
            signals_received=tuple(
                SignalReceived.from_json(s) for s in _maps(data.get("signals_received"))
            ),
            started_seconds=_num(data.get("started_seconds")),
            ended_seconds=_num(data.get("ended_seconds")),
            wall_seconds=_num(data.get("wall_seconds")),
            peak_rss_kib=_int(data.get("peak_rss_kib")),
            peak_rss_source=_str(data.get("peak_rss_source")),
        )


@dataclass(frozen=True, slots=True)
class Member:
    """A live process of a run, as the allocation's runs record lists it (devices/orphans)."""

    pid: int
    start: int
    pgid: int
    sid: int
    ppid: int
    comm: str
    argv: tuple[str, ...]
    role: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "start": self.start,
            "pgid": self.pgid,
            "sid": self.sid,
            "ppid": self.ppid,
            "comm": self.comm,
            "argv": list(self.argv),
            "role": self.role,
        }


@dataclass(frozen=True, slots=True)
class Leftover:
    """A process still there after the final SIGKILL, and what was done about it."""

    pid: int | None
    comm: str | None
    state: str | None
    action: str | None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "comm": self.comm, "state": self.state, "action": self.action}

    @classmethod
    def from_json(cls, data: object) -> Leftover:
        if not isinstance(data, Mapping):  # a hand-edited record: kept, and shown as it was
            return cls(None, None, f"not a record: {data!r}", None)
        return cls(
            _int(data.get("pid")),
            _str(data.get("comm")),
            _str(data.get("state")),
            _str(data.get("action")),
        )


# ------------------------------------------------------------------ outputs and inputs


@dataclass(frozen=True, slots=True)
class FileDigest:
    """A declared input (or a written output): its absolute path, size and SHA-256."""

    path: str
    bytes: int | None
    sha256: str | None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.bytes, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileDigest:
        return cls(str(data.get("path")), _int(data.get("bytes")), _str(data.get("sha256")))


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """A declared output: its path, and its size and SHA-256, or the ``problem`` with it
    (``"missing"``, ``"empty"``)."""

    path: str
    bytes: int | None = None
    sha256: str | None = None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.problem is not None:
            return {"path": self.path, "problem": self.problem}
        return {"path": self.path, "bytes": self.bytes, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutputRecord:
        return cls(
            str(data.get("path")),
            _int(data.get("bytes")),
            _str(data.get("sha256")),
            _str(data.get("problem")),
        )


@dataclass(frozen=True, slots=True)
class RunEnv:
    """The environment the record shows (secrets hidden): the allocation's variables, the test's
    overrides (None: unset), the determinism knobs present and those absent."""

    allocation: dict[str, str | None]
    overrides: dict[str, str | None]
    knobs: dict[str, str | None]
    knobs_unset: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "allocation": dict(self.allocation),
            "overrides": dict(self.overrides),
            "knobs": dict(self.knobs),
            "knobs_unset": list(self.knobs_unset),
        }

    @classmethod
    def from_json(cls, data: object) -> RunEnv:
        found = data if isinstance(data, Mapping) else {}
        return cls(
            _env_values(found.get("allocation")),
            _env_values(found.get("overrides")),
            _env_values(found.get("knobs")),
            _texts(found.get("knobs_unset")),
        )


# ------------------------------------------------------------------ servers


@dataclass(frozen=True, slots=True)
class StopRecord:
    """How a server was stopped: why, the grace it had, when, and whether it was still up."""

    reason: str | None
    grace_seconds: float | None
    requested_seconds: float | None
    main_alive: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "grace_seconds": self.grace_seconds,
            "requested_seconds": self.requested_seconds,
            "main_alive": self.main_alive,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StopRecord:
        return cls(
            _str(data.get("reason")),
            _num(data.get("grace_seconds")),
            _num(data.get("requested_seconds")),
            data.get("main_alive") is True,
        )


@dataclass(frozen=True, slots=True)
class Readiness:
    """The readiness probes' cadence: how many ran, how long they took, and the window in which
    the server became ready unseen (``probe_share`` of the startup time)."""

    interval_seconds: float
    probe_timeout_seconds: float
    probes: int
    failed_probes: int
    first_probe_seconds: float | None
    last_failed_probe_seconds: float | None
    ready_seconds: float | None
    probing_seconds: float
    detection_window_seconds: float | None
    probe_share: float | None
    last_error: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "interval_seconds": self.interval_seconds,
            "probe_timeout_seconds": self.probe_timeout_seconds,
            "probes": self.probes,
            "failed_probes": self.failed_probes,
            "first_probe_seconds": self.first_probe_seconds,
            "last_failed_probe_seconds": self.last_failed_probe_seconds,
            "ready_seconds": self.ready_seconds,
            "probing_seconds": self.probing_seconds,
            "detection_window_seconds": self.detection_window_seconds,
            "probe_share": self.probe_share,
            "last_error": self.last_error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Readiness:
        return cls(
            _num(data.get("interval_seconds")) or 0.0,
            _num(data.get("probe_timeout_seconds")) or 0.0,
            _int(data.get("probes")) or 0,
            _int(data.get("failed_probes")) or 0,
            _num(data.get("first_probe_seconds")),
            _num(data.get("last_failed_probe_seconds")),
            _num(data.get("ready_seconds")),
            _num(data.get("probing_seconds")) or 0.0,
            _num(data.get("detection_window_seconds")),
            _num(data.get("probe_share")),
            _str(data.get("last_error")),
        )


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request to a server: what was sent, the answer's status and size, how long it took,
    or the ``error`` that ended it (``timed_out`` for a connection error or timeout)."""

    index: int
    method: str
    path: str
    warmup: bool
    bytes_sent: int
    started_seconds: float
    status: int | None = None
    bytes_received: int = 0
    seconds: float = 0.0
    failed: bool = False
    error: str | None = None
    timed_out: bool | None = None
    body_path: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "index": self.index,
            "method": self.method,
            "path": self.path,
            "warmup": self.warmup,
            "bytes_sent": self.bytes_sent,
            "started_seconds": self.started_seconds,
            "status": self.status,
            "bytes_received": self.bytes_received,
        }
        if self.error is not None:
            data["error"] = self.error
            if self.timed_out is not None:
                data["timed_out"] = self.timed_out
        else:
            data["body_path"] = self.body_path
        data["seconds"] = self.seconds
        data["failed"] = self.failed
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestRecord:
        timed_out = data.get("timed_out")
        return cls(
            index=_int(data.get("index")) or 0,
            method=str(data.get("method")),
            path=str(data.get("path")),
            warmup=bool(data.get("warmup")),
            bytes_sent=_int(data.get("bytes_sent")) or 0,
            started_seconds=_num(data.get("started_seconds")) or 0.0,
            status=_int(data.get("status")),
            bytes_received=_int(data.get("bytes_received")) or 0,
            seconds=_num(data.get("seconds")) or 0.0,
            failed=bool(data.get("failed")),
            error=_str(data.get("error")),
            timed_out=timed_out if isinstance(timed_out, bool) else None,
            body_path=_str(data.get("body_path")),
        )


@dataclass(frozen=True, slots=True)
class RequestCount:
    """Requests, failed ones, and bytes each way, of one part of a server's requests."""

    requests: int = 0
    failed: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    def plus(self, request: RequestRecord) -> RequestCount:
        return RequestCount(
            self.requests + 1,
            self.failed + request.failed,
            self.bytes_sent + request.bytes_sent,
            self.bytes_received + request.bytes_received,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "failed": self.failed,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }

    @classmethod
    def from_json(cls, data: object) -> RequestCount:
        found = data if isinstance(data, Mapping) else {}
        return cls(
            _int(found.get("requests")) or 0,
            _int(found.get("failed")) or 0,
            _int(found.get("bytes_sent")) or 0,
            _int(found.get("bytes_received")) or 0,
        )


@dataclass(frozen=True, slots=True)
class RequestTotals:
    """All of a server's requests counted (``kept``: those recorded, the first ``limit``;
    ``omitted``: the rest), so that ``verify`` can add them up."""

    limit: int
    all: RequestCount = RequestCount()
    warmup: int = 0
    errors: int = 0
    timeouts: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    kept: RequestCount = RequestCount()
    omitted: RequestCount = RequestCount()

    def plus(self, request: RequestRecord) -> RequestTotals:
        """These totals with ``request`` counted."""
        label = str(request.status) if request.status is not None else "none"
        kept = request.index <= self.limit  # the first ``limit``, by index
        return RequestTotals(
            limit=self.limit,
            all=self.all.plus(request),
            warmup=self.warmup + request.warmup,
            errors=self.errors + (request.error is not None),
            timeouts=self.timeouts + bool(request.timed_out),
            statuses={**self.statuses, label: self.statuses.get(label, 0) + 1},
            kept=self.kept.plus(request) if kept else self.kept,
            omitted=self.omitted if kept else self.omitted.plus(request),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **self.all.to_json(),
            "warmup": self.warmup,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "statuses": dict(self.statuses),
            "limit": self.limit,
            "kept": self.kept.to_json(),
            "omitted": self.omitted.to_json(),
        }

    @classmethod
    def from_json(cls, data: object) -> RequestTotals:
        found = data if isinstance(data, Mapping) else {}
        statuses = found.get("statuses")
        return cls(
            limit=_int(found.get("limit")) or 0,
            all=RequestCount.from_json(found),
            warmup=_int(found.get("warmup")) or 0,
            errors=_int(found.get("errors")) or 0,
            timeouts=_int(found.get("timeouts")) or 0,
            statuses=(
                {str(k): int(v) for k, v in statuses.items() if _is_int(v)}
                if isinstance(statuses, Mapping)
                else {}
            ),
            kept=RequestCount.from_json(found.get("kept")),
            omitted=RequestCount.from_json(found.get("omitted")),
        )


@dataclass(frozen=True, slots=True)
class ServerPart:
    """What only a server's record holds: readiness, the three timings, its requests."""

    ready_url: str
    startup_timeout_seconds: float
    workers_expected: int | None
    request_totals: RequestTotals
    startup_seconds: float | None = None
    warmup_seconds: tuple[float, ...] = ()
    measured_seconds: tuple[float, ...] = ()
    requests: tuple[RequestRecord, ...] = ()
    ready_polls: int | None = None
    readiness: Readiness | None = None
    workers_at_ready: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "ready_url": self.ready_url,
            "startup_timeout_seconds": self.startup_timeout_seconds,
            "workers_expected": self.workers_expected,
            "startup_seconds": self.startup_seconds,
            "warmup_seconds": list(self.warmup_seconds),
            "measured_seconds": list(self.measured_seconds),
            "requests": [r.to_json() for r in self.requests],
            "request_totals": self.request_totals.to_json(),
        }
        if self.ready_polls is not None:
            data["ready_polls"] = self.ready_polls
        if self.readiness is not None:
            data["readiness"] = self.readiness.to_json()
        if self.workers_at_ready is not None:
            data["workers_at_ready"] = list(self.workers_at_ready)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerPart:
        readiness = data.get("readiness")
        workers = data.get("workers_at_ready")

        def seconds(key: str) -> tuple[float, ...]:
            raw = data.get(key)
            return tuple(v for v in raw if _num(v) is not None) if isinstance(raw, list) else ()

        return cls(
            ready_url=str(data.get("ready_url")),
            startup_timeout_seconds=_num(data.get("startup_timeout_seconds")) or 0.0,
            workers_expected=_int(data.get("workers_expected")),
            request_totals=RequestTotals.from_json(data.get("request_totals")),
            startup_seconds=_num(data.get("startup_seconds")),
            warmup_seconds=seconds("warmup_seconds"),
            measured_seconds=seconds("measured_seconds"),
            requests=tuple(RequestRecord.from_json(r) for r in _maps(data.get("requests"))),
            ready_polls=_int(data.get("ready_polls")),
            readiness=Readiness.from_json(readiness) if isinstance(readiness, Mapping) else None,
            workers_at_ready=_ints(workers) if isinstance(workers, list) else None,
        )


# ------------------------------------------------------------------ the run


@dataclass(frozen=True, slots=True)
class RunRecord:
    """The raw record of one command or server (``runs[]`` of a receipt).

    Keys that a run gains as it goes are None until then and absent from the JSON: ``pid``
    once started, ``ended_at`` (and with it ``exit_code``, ``signal``, ``wall_seconds`` and
    ``device_memory``, the main process's) once closed, ``error`` when it failed before it
    could be measured. ``problems``: what :meth:`from_json` could not read (never written).
    """

    kind: str | None
    name: str | None
    argv: tuple[str, ...]
    cwd: str | None
    out_dir: str | None
    port: int | None
    env: RunEnv
    inputs: dict[str, FileDigest]
    orphans_adopted: bool
    stdout_path: str | None
    stderr_path: str | None
    trace_dir: str | None = None
    timeout_seconds: float | None = None
    grace_seconds: float | None = None
    sources: dict[str, dict[str, Any]] | None = None
    server: ServerPart | None = None
    started_at: str | None = None
    pid: int | None = None
    timed_out: bool | None = None
    processes: tuple[ProcessRecord, ...] = ()
    signals: tuple[SignalSent, ...] = ()
    leftovers: tuple[Leftover, ...] = ()
    stop: StopRecord | None = None
    ended_at: str | None = None
    device_memory: dict[str, Any] | None = None
    wall_seconds: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    outputs: dict[str, OutputRecord] | None = None
    error: str | None = None
    problems: tuple[str, ...] = ()

    @property
    def main(self) -> ProcessRecord | None:
        return self.processes[0] if self.processes else None

    def to_json(self, *, lifecycle: bool = True) -> dict[str, Any]:
        """The record as a receipt holds it; ``lifecycle``: with its derived verdict."""
        data: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "argv": list(self.argv),
            "cwd": self.cwd,
            "out_dir": self.out_dir,
            "port": self.port,
            "env": self.env.to_json(),
            "inputs": {k: v.to_json() for k, v in self.inputs.items()},
            "orphans_adopted": self.orphans_adopted,
            "stdout_path": self.stdout_path,
            "stderr_path": self.stderr_path,
        }
        optional: dict[str, Any] = {
            "trace_dir": self.trace_dir,
            "timeout_seconds": self.timeout_seconds,
            "grace_seconds": self.grace_seconds,
            "sources": self.sources,
        }
        data.update({k: v for k, v in optional.items() if v is not None})
        if self.server is not None:
            data.update(self.server.to_json())
        data["started_at"] = self.started_at
        if self.pid is not None:
            data["pid"] = self.pid
        if self.timed_out is not None:
            data["timed_out"] = self.timed_out
        if self.stop is not None:
            data["stop"] = self.stop.to_json()
        data["processes"] = [p.to_json() for p in self.processes]
        data["signals"] = [s.to_json() for s in self.signals]
        data["leftovers"] = [x.to_json() for x in self.leftovers]
        if self.ended_at is not None:
            data["ended_at"] = self.ended_at
            data["device_memory"] = self.device_memory
            data["wall_seconds"] = self.wall_seconds
            data["exit_code"] = self.exit_code
            data["signal"] = self.signal
        if self.outputs is not None:
            data["outputs"] = {k: v.to_json() for k, v in self.outputs.items()}
        if self.error is not None:
            data["error"] = self.error
        if lifecycle:
            from .lifecycle import lifecycle_verdict

            data["lifecycle"] = lifecycle_verdict(self).to_json()
        return data

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        """Read a record (a receipt's ``runs[i]``); any ``lifecycle`` in it is ignored."""
        if not isinstance(data, Mapping):
            return _empty(("the run record is not a mapping",))
        problems: list[str] = []
        raw_procs = data.get("processes")
        procs = _maps(raw_procs)
        if isinstance(raw_procs, list) and len(procs) != len(raw_procs):
            problems.append("a process entry is not a mapping")
        raw_left = data.get("leftovers") or []
        stop, inputs, outputs = data.get("stop"), data.get("inputs"), data.get("outputs")
        sources, memory = data.get("sources"), data.get("device_memory")
        timed_out, signal = data.get("timed_out"), data.get("signal")
        return cls(
            kind=_str(data.get("kind")),
            name=_str(data.get("name")),
            argv=_texts(data.get("argv")),
            cwd=_str(data.get("cwd")),
            out_dir=_str(data.get("out_dir")),
            port=_int(data.get("port")),
            env=RunEnv.from_json(data.get("env")),
            inputs=(
                {
                    str(k): FileDigest.from_json(v)
                    for k, v in inputs.items()
                    if isinstance(v, Mapping)
                }
                if isinstance(inputs, Mapping)
                else {}
            ),
            orphans_adopted=bool(data.get("orphans_adopted")),
            stdout_path=_str(data.get("stdout_path")),
            stderr_path=_str(data.get("stderr_path")),
            trace_dir=_str(data.get("trace_dir")),
            timeout_seconds=_num(data.get("timeout_seconds")),
            grace_seconds=_num(data.get("grace_seconds")),
            sources=(
                {str(k): dict(v) for k, v in sources.items() if isinstance(v, Mapping)}
                if isinstance(sources, Mapping)
                else None
            ),
            server=ServerPart.from_json(data) if data.get("kind") == "server" else None,
            started_at=_str(data.get("started_at")),
            pid=_int(data.get("pid")),
            timed_out=bool(timed_out) if timed_out is not None else None,
            processes=tuple(ProcessRecord.from_json(p) for p in procs),
            signals=tuple(SignalSent.from_json(s) for s in _maps(data.get("signals"))),
            leftovers=tuple(
                Leftover.from_json(x)
                for x in (raw_left if isinstance(raw_left, list) else [raw_left])
            ),
            stop=StopRecord.from_json(stop) if isinstance(stop, Mapping) else None,
            ended_at=_str(data.get("ended_at")),
            device_memory=dict(memory) if isinstance(memory, Mapping) else None,
            wall_seconds=_num(data.get("wall_seconds")),
            exit_code=_int(data.get("exit_code")),
            signal=str(signal) if signal else None,
            outputs=(
                {
                    str(k): OutputRecord.from_json(v)
                    for k, v in outputs.items()
                    if isinstance(v, Mapping)
                }
                if isinstance(outputs, Mapping)
                else None
            ),
            error=(None if "error" not in data else str(data.get("error") or "")),
            problems=tuple(problems),
        )


def _empty(problems: tuple[str, ...]) -> RunRecord:
    return RunRecord(
        kind=None,
        name=None,
        argv=(),
        cwd=None,
        out_dir=None,
        port=None,
        env=RunEnv({}, {}, {}, ()),
        inputs={},
        orphans_adopted=False,
        stdout_path=None,
        stderr_path=None,
        problems=problems,
    )
