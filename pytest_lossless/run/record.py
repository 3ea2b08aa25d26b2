"""The run record: what one command or server did, as typed, frozen records.

A :class:`RunRecord` holds who ran (:class:`ProcessRecord`, main first), which signals we sent
and why (:class:`SignalSent`), what was left behind (:class:`Leftover`), the run's timings and
streams, and for a server its readiness, requests and stop (:class:`ServerPart`). The fields'
order and specs are the exact shape of ``runs[]`` in a receipt (docs/receipts.md), written and
read by :mod:`..core.records`. :meth:`RunRecord.from_json` reads what today's code and older
versions wrote and is lenient with a hand-edited record: an entry of the wrong type is skipped
or read as absent, and what could not be read is kept in ``problems``, which the lifecycle
verdict reports.

Standard library only, no I/O: the launcher builds these, the lifecycle judges them, and
receipts and ``verify`` read them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.records import JsonObject, Record, from_json, meta, spec, to_json
from ..devices.backends import DeviceMemory


def _unless_ended(run: RunRecord) -> bool:
    return run.ended_at is None


# ------------------------------------------------------------------ signals and processes


@dataclass(frozen=True, slots=True)
class SignalReceived(Record):
    """A signal we sent that reached one process while it was alive in the target."""

    signal: str | None
    forced: bool
    reason: str | None
    at_seconds: float | None


@dataclass(frozen=True, slots=True)
class SignalSent(Record):
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


@dataclass(frozen=True, slots=True)
class ProcessRecord(Record):
    """One observed process: who it was, how its end was observed, how it ended, its memory."""

    pid: int | None
    role: str | None
    ppid: int | None
    ppid_last: int | None = field(metadata=meta(absent_from="ppid"))  # older: the first parent
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


@dataclass(frozen=True, slots=True)
class Leftover(Record):
    """A process still there after the final SIGKILL, and what was done about it."""

    pid: int | None
    comm: str | None
    state: str | None
    action: str | None


# ------------------------------------------------------------------ outputs and inputs


@dataclass(frozen=True, slots=True)
class FileDigest(Record):
    """A declared input (or a written output): its absolute path, size and SHA-256."""

    path: str
    bytes: int | None
    sha256: str | None


def _no_digest(output: OutputRecord) -> bool:
    return output.problem is not None


@dataclass(frozen=True, slots=True)
class OutputRecord(Record):
    """A declared output: its path, and its size and SHA-256, or the ``problem`` with it
    (``"missing"``, ``"empty"``, ``"not written by this run"``)."""

    path: str
    bytes: int | None = spec(None, omit=_no_digest)
    sha256: str | None = spec(None, omit=_no_digest)
    problem: str | None = spec(None, omit="none")


@dataclass(frozen=True, slots=True)
class RunEnv(Record):
    """The environment the record shows (secrets hidden): the allocation's variables, the test's
    overrides (None: unset), the determinism knobs present and those absent."""

    allocation: dict[str, str | None]
    overrides: dict[str, str | None]
    knobs: dict[str, str | None]
    knobs_unset: tuple[str, ...]


# ------------------------------------------------------------------ servers


@dataclass(frozen=True, slots=True)
class StopRecord(Record):
    """How a server was stopped: why, the grace it had, when, and whether it was still up."""

    reason: str | None
    grace_seconds: float | None
    requested_seconds: float | None
    main_alive: bool


@dataclass(frozen=True, slots=True)
class Readiness(Record):
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


@dataclass(frozen=True, slots=True)
class RequestRecord(Record):
    """One request to a server: what was sent, the answer's status and size, how long it took,
    or the ``error`` that ended it (``timed_out`` for a connection error or timeout); the file
    its answer was kept in (``body_path``) only when it has none."""

    index: int
    method: str
    path: str
    warmup: bool
    bytes_sent: int
    started_seconds: float
    status: int | None = None
    bytes_received: int = 0
    error: str | None = spec(None, omit="none")
    timed_out: bool | None = spec(None, omit=lambda r: r.error is None or r.timed_out is None)
    body_path: str | None = spec(None, omit=lambda r: r.error is not None)
    seconds: float = 0.0
    failed: bool = False


@dataclass(frozen=True, slots=True)
class RequestCount(Record):
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


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestTotals(Record):
    """All of a server's requests counted (``kept``: those recorded, the first ``limit``;
    ``omitted``: the rest), so that ``verify`` can add them up."""

    all: RequestCount = spec(RequestCount(), flatten=True)
    warmup: int = 0
    errors: int = 0
    timeouts: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    limit: int
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerPart(Record):
    """What only a server's record holds: readiness, the three timings, its requests."""

    ready_url: str
    startup_timeout_seconds: float
    workers_expected: int | None
    startup_seconds: float | None = None
    warmup_seconds: tuple[float, ...] = ()
    measured_seconds: tuple[float, ...] = ()
    requests: tuple[RequestRecord, ...] = ()
    request_totals: RequestTotals
    ready_polls: int | None = spec(None, omit="none")
    readiness: Readiness | None = spec(None, omit="none")
    workers_at_ready: tuple[int, ...] | None = spec(None, omit="none")


# ------------------------------------------------------------------ the run


@dataclass(frozen=True, slots=True)
class RunRecord(Record):
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
    trace_dir: str | None = spec(None, omit="none")
    timeout_seconds: float | None = spec(None, omit="none")
    grace_seconds: float | None = spec(None, omit="none")
    #: Each source tree of ``sources=`` as the evidence layer describes it (its JSON).
    sources: dict[str, JsonObject] | None = spec(None, omit="none")
    #: A server's part, its keys beside the others.
    server: ServerPart | None = spec(None, flatten=True, read_when=("kind", "server"))
    started_at: str | None = None
    pid: int | None = spec(None, omit="none")
    timed_out: bool | None = spec(None, omit="none")
    stop: StopRecord | None = spec(None, omit="none")
    processes: tuple[ProcessRecord, ...] = ()
    signals: tuple[SignalSent, ...] = ()
    leftovers: tuple[Leftover, ...] = ()
    ended_at: str | None = spec(None, omit="none")
    device_memory: DeviceMemory | None = spec(None, omit=_unless_ended)
    wall_seconds: float | None = spec(None, omit=_unless_ended)
    exit_code: int | None = spec(None, omit=_unless_ended)
    signal: str | None = spec(None, omit=_unless_ended)
    outputs: dict[str, OutputRecord] | None = spec(None, omit="none")
    error: str | None = spec(None, omit="none")
    problems: tuple[str, ...] = spec((), json=False)

    @property
    def main(self) -> ProcessRecord | None:
        return self.processes[0] if self.processes else None

    def to_json(self, *, lifecycle: bool = True) -> dict[str, Any]:
        """The record as a receipt holds it; ``lifecycle``: with its derived verdict (custom:
        the verdict is derived, not a field)."""
        data = to_json(self)
        if lifecycle:
            from .lifecycle import lifecycle_verdict

            data["lifecycle"] = lifecycle_verdict(self).to_json()
        return data

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        """Read a record (a receipt's ``runs[i]``) leniently; any ``lifecycle`` in it is
        ignored. Custom: a process entry that is no mapping is named as such, and leftovers that
        are not records are kept (and counted) as they were."""
        problems: list[str] = []
        if not isinstance(data, Mapping):
            problems.append("the run record is not a mapping")
            data = {}
        procs, left = data.get("processes"), data.get("leftovers") or []
        if isinstance(procs, list) and not all(isinstance(p, Mapping) for p in procs):
            problems.append("a process entry is not a mapping")
            data = {**data, "processes": [p for p in procs if isinstance(p, Mapping)]}
        left = left if isinstance(left, list) else [left]
        if not all(isinstance(x, Mapping) for x in left):
            data = {**data, "leftovers": [_leftover(x) for x in left]}
        run = from_json(cls, data, problems=problems)
        return replace(run, problems=tuple(problems)) if problems else run


def _leftover(entry: object) -> object:
    """A hand-edited leftover that is no record: kept, and shown as it was."""
    return entry if isinstance(entry, Mapping) else {"state": f"not a record: {entry!r}"}
