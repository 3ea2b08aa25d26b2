"""The launcher of one test's commands and servers: checks what the test asked for, starts
each in its own process group under the allocation's environment, enforces timeouts, checks
declared outputs, and hands every finished raw record (with its lifecycle verdict) on.

Secrets never enter a record or a message: values of secret-looking argv options and
environment variables are replaced by markers as the record is made (the child gets the real
ones), and every value so found is also scrubbed from the record's free text and from failure
messages (a log tail that echoes a token), by the rules of :mod:`pytest_lossless.core.redact`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from ..core import faults
from ..core.clock import SYSTEM_CLOCK, Clock, utc_iso
from ..core.digests import sha256_file
from ..core.records import JsonObject
from ..core.redact import Redactor, scrub, scrub_all
from ..devices.backends import DeviceMemoryMeter, MemoryReader, memory_reader_for
from ..devices.runs import Member
from ..errors import ArtifactError, ConfigError, RunError
from ..trace import TRACE_DIR
from .arguments import check_argv, check_seconds, fill_placeholders
from .failure import failure_message, format_status
from .group import RUN_TOKEN, SAMPLE_INTERVAL, Adoptions, ProcessGroup
from .kernel import child_subreaper
from .lifecycle import Lifecycle, lifecycle_verdict
from .ports import local_port, port_taken
from .progress import Progress, waiting
from .record import FileDigest, OutputRecord, RunEnv, RunRecord, ServerPart
from .server import REQUEST_RECORDS, Server, request_totals


class RunResult(Mapping[str, Path]):
    """One finished command: its declared outputs by name, exit status and raw record
    (``run``, typed; ``record``, its JSON as the receipt holds it)."""

    def __init__(
        self,
        run: RunRecord,
        outputs: dict[str, Path],
        returncode: int,
        stdout_path: Path,
        stderr_path: Path,
    ) -> None:
        self.run = run
        #: The record as the receipt holds it (JSON, lifecycle included): made once, here.
        self.record = run.to_json()
        self.outputs = outputs
        self.returncode = returncode
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path

    @property
    def measured_seconds(self) -> float:
        """Wall time of the main process, from spawn to reaping."""
        return float(self.run.wall_seconds or 0.0)

    @property
    def out_dir(self) -> Path:
        return Path(str(self.run.out_dir))

    @property
    def lifecycle(self) -> Lifecycle:
        return lifecycle_verdict(self.run)

    @property
    def trace_dir(self) -> Path | None:
        """The run's trace folder (``model_run(..., trace=True)``), or None when untraced."""
        return Path(self.run.trace_dir) if self.run.trace_dir else None

    def __getitem__(self, name: str) -> Path:
        try:
            return self.outputs[name]
        except KeyError:
            raise KeyError(
                f"{name!r} is not a declared output of this run; declared: "
                f"{sorted(self.run.outputs or {})}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def __repr__(self) -> str:
        return (
            f"RunResult(returncode={self.returncode}, seconds={self.measured_seconds:.3f}, "
            f"outputs={sorted(self.outputs)})"
        )


#: Seconds between SIGTERM and SIGKILL when a run times out or a server is stopped.
DEFAULT_GRACE = 5.0
#: The same when the session was interrupted (SIGINT, SIGTERM, SIGHUP): every process is
#: gone within this and a second, inside the 5 s a CI cancel or ``timeout`` waits.
INTERRUPT_GRACE = 2.0


class AllocationLike(Protocol):
    """What the launcher needs from a device allocation (see ``devices.Allocation``): the
    environment, a finalizer, the lock descriptors every run inherits, and where each run's
    live processes are reported (its runs record, which outlives this process), and the
    backend's name (which tells how device memory is read)."""

    @property
    def backend(self) -> str: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def lock_fds(self) -> tuple[int, ...]: ...

    def add_finalizer(self, fn: Callable[[], None]) -> None: ...

    def note_processes(self, run: str, processes: Sequence[Member]) -> None: ...


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def digest_inputs(inputs: Mapping[str, str | os.PathLike[str]]) -> dict[str, FileDigest]:
    """SHA-256 and size of each declared input file; a missing one is an error."""
    hashed: dict[str, FileDigest] = {}
    for name, raw in inputs.items():
        path = Path(raw).resolve()
        if not path.is_file():
            raise ArtifactError(path, f"declared input {name!r} does not exist or is not a file")
        hashed[name] = FileDigest(str(path), path.stat().st_size, sha256_file(path))
    return hashed


def hash_inputs(inputs: Mapping[str, str | os.PathLike[str]]) -> dict[str, dict[str, Any]]:
    """:func:`digest_inputs` as JSON (the RunSpec's ``inputs``)."""
    return {name: digest.to_json() for name, digest in digest_inputs(inputs).items()}


class Launcher:
    """Starts the commands and servers of one test and keeps a raw record of each.

    ``on_record`` receives every finished record (commands when they end, servers when
    stopped); ``close()`` ends whatever is still running, and is registered on the
    allocation so device locks are released only after every process is gone.
    """

    def __init__(
        self,
        *,
        allocation: AllocationLike | None,
        out_dir: Path,
        run_timeout: float,
        knobs: Sequence[str],
        clock: Clock = SYSTEM_CLOCK,
        on_record: Callable[[RunRecord], None] | None = None,
        grace: float = DEFAULT_GRACE,
        sample_interval: float = SAMPLE_INTERVAL,
        adopt_orphans: bool = True,
        redactor: Redactor | None = None,
        describe_source: Callable[[Path], JsonObject] | None = None,
        device_memory: MemoryReader | str | None = None,
        memory_interval: float | None = None,
        memory_timeout: float | None = None,
        request_records: int = REQUEST_RECORDS,
        progress: Progress | None = None,
    ) -> None:
        self.allocation = allocation
        #: How each run's device memory is read, or why it cannot be (default: the backend's).
        self.device_memory = device_memory or memory_reader_for(
            None if allocation is None else allocation.backend
        )
        self.memory_interval, self.memory_timeout = memory_interval, memory_timeout
        #: Request records kept per server run; the rest are counted (``request_totals``).
        self.request_records = int(request_records)
        #: How a source tree named in ``sources=`` is described (revision, dirty flag, diff
        #: hash, publication): the plugin passes the evidence layer's reader.
        self.describe_source = describe_source
        self.out_dir = Path(out_dir)
        self.run_timeout = float(run_timeout)
        self.knobs = tuple(knobs)
        self.clock = clock
        self.on_record = on_record
        self.grace = float(grace)
        self.sample_interval = float(sample_interval)
        self.adopt_orphans = adopt_orphans
        self.redactor = redactor if redactor is not None else Redactor()
        #: Every secret value seen in this launcher's argv and environments, scrubbed from text.
        self._secrets: set[str] = set()
        self.records: list[RunRecord] = []
        #: Where a long run's stage and elapsed time are shown (None: nowhere).
        self.progress = progress
        self._servers: list[Server] = []
        self._groups: list[ProcessGroup] = []
        self._count = 0
        self._subreaper_was: bool | None = None
        #: Which run each orphan re-parented to us came from, decided once for all runs.
        self._adoptions = Adoptions()
        self._closed = False
        #: Set by :meth:`interrupt`: the signal that interrupted the session, or None.
        self.interrupted: str | None = None
        #: What went wrong while closing an interrupted launcher (not raised: recorded).
        self.close_errors: list[str] = []
        if allocation is not None:
            allocation.add_finalizer(self.close)

    # -- interruption
    def interrupt(self, reason: str) -> None:
        """The session was interrupted (``reason``: the signal's name): :meth:`close` then
        stops every run with :data:`INTERRUPT_GRACE` and records, rather than raises, what
        did not end cleanly (an interrupted session is judged by its records, and a raise
        while pytest finishes is a traceback)."""
        self.interrupted = reason

    def kill_now(self, reason: str) -> None:
        """SIGKILL every process group still running, from any thread: the backstop of an
        interrupted session whose main thread does not come back in time."""
        for group in list(self._groups):
            with contextlib.suppress(Exception):
                group.send(signal.SIGKILL, forced=True, reason=reason, group=True)

    # -- secrets
    def clean_text(self, text: str) -> str:
        """``text`` (a message, a URL) with secret assignments and every secret seen hidden."""
        shown, found = self.redactor.text(text)
        self._secrets.update(found)
        return scrub(shown, self._secrets)

    def _shown_env(self, env: Mapping[str, str | None]) -> dict[str, str | None]:
        shown, found = self.redactor.env(env)
        self._secrets.update(found)
        return shown

    def _shown_argv(self, argv: list[str]) -> list[str]:
        shown, found = self.redactor.argv(argv)
        self._secrets.update(found)
        return shown

    # -- shared by commands and servers
    def _describe_sources(
        self, sources: Sequence[str | os.PathLike[str]] | None
    ) -> dict[str, JsonObject] | None:
        """What each named source tree is as the run is about to start (before it can change).

        Read before the run is numbered or prepared: a tree refused here (not a folder; dirty or
        unpublished under ``--lossless-require-published``, raised by ``describe_source``) leaves
        no half-made run behind, and no gap in the run numbers."""
        if sources is None:
            return None
        if isinstance(sources, (str, os.PathLike)):
            sources = [sources]
        described: dict[str, JsonObject] = {}
        for source in sources:
            path = Path(os.fspath(source)).resolve()
            if not path.is_dir():
                raise ConfigError("model_run(sources=...)", str(source), "not a folder")
            described[str(path)] = (
                dict(self.describe_source(path)) if self.describe_source is not None else {}
            )
        return described

    def _check_visibility(
        self,
        overrides: Mapping[str, str | None],
        alloc_env: Mapping[str, str],
        values: Mapping[str, str],
    ) -> None:
        """Refuse an ``env=`` that widens what the allocation lets a run see: a visibility
        variable unset, or naming a device the test does not hold (a subset is fine)."""
        ids = tuple(getattr(self.allocation, "ids", ()) or ())
        for key, value in overrides.items():
            if key not in alloc_env:
                continue
            held = alloc_env[key]
            allowed = {t.strip() for t in held.split(",")} | set(ids)
            given = None if value is None else fill_placeholders(str(value), values)
            tokens = [t.strip() for t in (given or "").split(",") if t.strip()]
            if given is not None and tokens and all(t in allowed for t in tokens):
                continue
            raise ConfigError(
                "model_run(env=...)",
                {key: given},
                f"the test's allocation sets {key}={held} (devices {','.join(ids) or held}): "
                "the run would see devices this test does not hold. Leave it out (every run "
                "gets the allocation's value), or name a subset of it",
            )

    def _prepare(
        self,
        kind: str,
        argv: object,
        env: Mapping[str, str | None] | None,
        cwd: str | os.PathLike[str] | None,
        port: int | None,
        inputs: Mapping[str, str | os.PathLike[str]] | None,
        trace: bool = False,
    ) -> tuple[RunRecord, list[str], dict[str, str], Path | None, Path]:
        if self._closed:
            raise RunError("model_run: this launcher is closed (the test is tearing down)")
        what = "model_run.server argv" if kind == "server" else "model_run argv"
        args = check_argv(argv, what, self.redactor)
        self._count += 1
        name = f"{kind}-{self._count:02d}"
        run_dir = self.out_dir / name
        out = run_dir / "out"
        out.mkdir(parents=True, exist_ok=True)
        values = {"out": str(out)}
        if port is not None:
            values["port"] = str(port)
        elif any("{port}" in a for a in args) or any(
            "{port}" in str(v) for v in (env or {}).values() if v is not None
        ):
            port = free_port()
            values["port"] = str(port)
        args = [fill_placeholders(a, values) for a in args]
        child_env = dict(os.environ)
        alloc_env = dict(self.allocation.env) if self.allocation is not None else {}
        child_env.update(alloc_env)
        child_env[RUN_TOKEN] = f"{name}-{uuid.uuid4().hex}"
        overrides = dict(env or {})
        self._check_visibility(overrides, alloc_env, values)
        for key, value in overrides.items():
            if value is None:
                child_env.pop(key, None)
            else:
                child_env[key] = fill_placeholders(str(value), values)
        if trace:  # a trace folder of its own (pytest_lossless.trace writes there)
            child_env[TRACE_DIR] = str(run_dir / "trace")
        run_cwd = Path(fill_placeholders(os.fspath(cwd), values)) if cwd is not None else None
        # What the record shows: secrets hidden, names kept; the child still gets child_env.
        shown_env = RunEnv(
            allocation=self._shown_env(alloc_env),
            overrides=self._shown_env(
                {k: (None if v is None else child_env.get(k)) for k, v in overrides.items()}
            ),
            knobs=self._shown_env({k: child_env[k] for k in self.knobs if k in child_env}),
            knobs_unset=tuple(k for k in self.knobs if k not in child_env),
        )
        shown_args = [scrub(a, self._secrets) for a in self._shown_argv(args)]
        inputs_hashed = digest_inputs(inputs or {})
        if self.adopt_orphans and self._subreaper_was is None:
            previous = child_subreaper(None)
            if previous is not None and child_subreaper(True):
                self._subreaper_was = previous
        record = RunRecord(
            kind=kind,
            name=name,
            argv=tuple(shown_args),
            cwd=str(run_cwd) if run_cwd is not None else os.getcwd(),
            out_dir=str(out),
            port=port,
            env=shown_env,
            inputs=inputs_hashed,
            orphans_adopted=bool(child_subreaper(None)),
            stdout_path=str(run_dir / "stdout.log"),
            stderr_path=str(run_dir / "stderr.log"),
            # Its own (trace=True), or one a traced compare set in the environment.
            trace_dir=child_env.get(TRACE_DIR) or None,
        )
        return record, args, child_env, run_cwd, run_dir

    def _spawn(
        self,
        record: RunRecord,
        args: list[str],
        env: dict[str, str],
        cwd: Path | None,
        run_dir: Path,
    ) -> tuple[RunRecord, ProcessGroup]:
        """Start the run: the record with its start, and its process group."""
        allocation = self.allocation
        name = str(record.name)
        try:
            group = ProcessGroup(
                args,
                env=env,
                cwd=cwd,
                stdout_path=run_dir / "stdout.log",
                stderr_path=run_dir / "stderr.log",
                clock=self.clock,
                interval=self.sample_interval,
                # The run inherits the device locks and is listed in the runs record: no
                # later allocation gets these devices while any process of it lives.
                pass_fds=allocation.lock_fds if allocation is not None else (),
                adoptions=self._adoptions,
                device_memory=DeviceMemoryMeter(
                    self.device_memory, interval=self.memory_interval, timeout=self.memory_timeout
                ),
                on_members=(
                    (lambda members: self._note_members(allocation, name, members))
                    if allocation is not None
                    else None
                ),
            )
        except OSError as exc:
            failed = replace(
                record,
                started_at=utc_iso(self.clock.wall()),
                error=f"could not start {record.argv[0]!r}: {exc.strerror or exc}",
            )
            self._emit(failed)
            raise RunError(
                self.clean_text(
                    f"model_run: could not start {list(record.argv)!r}: {exc.strerror or exc}. "
                    "Check that the program exists and is executable (argv[0] is "
                    f"looked up on PATH; cwd={cwd})"
                ),
                argv=record.argv,
            ) from None
        self._groups.append(group)
        faults.point("run-start")
        return replace(record, started_at=group.started_at, pid=group.pid), group

    def _note_members(self, allocation: AllocationLike, run: str, members: list[Member]) -> None:
        """A run's live processes, into the allocation's runs record, secrets hidden (the
        record is readable by every account on the host)."""
        secrets = frozenset(self._secrets)  # a copy: the sampler thread calls this
        shown = []
        for member in members:
            argv, _ = self.redactor.argv(list(member.argv))
            shown.append(replace(member, argv=tuple(scrub(a, secrets) for a in argv)[:8]))
        allocation.note_processes(run, shown)

    def _emit(self, record: RunRecord) -> RunRecord:
        """The finished record with every secret hidden, handed on; returned."""
        if record.server is not None:
            server = replace(record.server, ready_url=self.clean_text(record.server.ready_url))
            record = replace(record, server=server)
        if record.error is not None:
            record = replace(record, error=self.clean_text(record.error))
        # Last: every secret value found so far, wherever the record repeats it.
        if self._secrets:
            scrubbed = scrub_all(record.to_json(lifecycle=False), self._secrets)
            record = RunRecord.from_json(scrubbed)
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)
        return record

    def _close_record(self, record: RunRecord, group: ProcessGroup) -> RunRecord:
        """The record of a run whose group is finished: every process, signal and leftover."""
        processes = [  # descendants' argv come from /proc, as they ran
            replace(p, argv=tuple(self._shown_argv(list(p.argv)))) for p in group.processes()
        ]
        main = processes[0]
        return replace(
            record,
            processes=tuple(processes),
            signals=tuple(group.signals),
            leftovers=tuple(group.leftovers),
            ended_at=utc_iso(group.clock.wall()),
            device_memory=group.device_memory,
            wall_seconds=main.wall_seconds,
            exit_code=main.exit_code,
            signal=main.signal,
        )

    # -- commands
    def __call__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        outputs: Mapping[str, str | os.PathLike[str]] | None = None,
        timeout: float | None = None,
        env: Mapping[str, str | None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        check: bool = True,
        inputs: Mapping[str, str | os.PathLike[str]] | None = None,
        grace: float | None = None,
        sources: Sequence[str | os.PathLike[str]] | None = None,
        trace: bool = False,
    ) -> RunResult:
        """Run one command to completion; see :mod:`pytest_lossless.run` for what is recorded.

        ``outputs`` maps names to paths (``{out}`` is this run's own folder; relative paths
        are taken inside it); each must exist, be non-empty and be written by this run (a file at a
        fixed path that the run left as it was is not its output). ``inputs`` names files the
        run reads, hashed into the record before it starts. ``env`` values of None unset.
        ``grace`` (default: the launcher's) is the wait between SIGTERM and SIGKILL on timeout.
        ``sources`` names the source trees this run was built from (the engine's checkout of
        each arm, say): each one's revision, dirty flag, diff hash and publication is recorded.
        ``trace=True`` gives the run a trace folder of its own (``PYTEST_LOSSLESS_TRACE_DIR``,
        recorded as ``trace_dir``), where ``pytest_lossless.trace`` calls in the model write.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        limit = self.run_timeout if timeout is None else check_seconds(timeout, "timeout")
        wait = self.grace if grace is None else float(grace)
        described = self._describe_sources(sources)
        record, args, child_env, cwd_path, run_dir = self._prepare(
            "command", argv, env, cwd, None, inputs, trace=bool(trace)
        )
        record = replace(record, timeout_seconds=limit, grace_seconds=wait, sources=described)
        out = Path(str(record.out_dir))
        earlier = _stat_outputs(outputs or {}, out)  # what already stands at an output's path
        record, group = self._spawn(record, args, child_env, cwd_path, run_dir)
        stage = f"run {str(record.name).split('-')[-1]}"
        finished = waiting(self.progress, stage, group.wait_main, limit, self.clock)
        if not finished:
            group.send(signal.SIGTERM, forced=True, reason=f"timeout after {limit:g} s", group=True)
            group.settle(wait)
            group.finish(reason=f"grace of {wait:g} s expired after the timeout")
        else:
            # Processes still running after the main one exited were left behind.
            group.settle(min(wait, 0.5))
            group.finish(reason="left running after the main process exited")
        self._groups.remove(group)
        record = self._close_record(replace(record, timed_out=not finished), group)
        declared, entries, problems = _collect_outputs(outputs or {}, out, earlier)
        record = self._emit(replace(record, outputs=entries))
        returncode = group.popen.returncode if group.popen.returncode is not None else -1
        result = RunResult(
            record, declared, returncode, run_dir / "stdout.log", run_dir / "stderr.log"
        )
        if check:
            self._check(result, limit, wait, problems)
        return result

    def _check(self, result: RunResult, limit: float, wait: float, problems: list[str]) -> None:
        """Raise :class:`RunError` for a run that timed out, failed, lacks an output, or did
        not end cleanly (``check=True``)."""
        __tracebackhide__ = True
        record = result.run
        main = record.processes[0]
        what: str | None = None
        if record.timed_out:
            killed = any(x.signal == "SIGKILL" for x in record.signals)
            then = f", then SIGKILL after {wait:g} s" if killed else ""
            what = f"timed out after {limit:g} s; sent SIGTERM to its process group{then}"
        elif main.signal or main.exit_code != 0:
            what = format_status(main)
        elif problems:
            what = "; ".join(problems)
        elif not (lifecycle := lifecycle_verdict(record)).clean:
            what = f"exited 0, but its lifecycle was not clean: {lifecycle.summary}"
        if what is not None:
            raise RunError(failure_message(record, what, self.clean_text), record=result.record)

    # -- servers
    def server(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        ready: str,
        startup_timeout: float | None = None,
        env: Mapping[str, str | None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        workers_expected: int | None = None,
        port: int | None = None,
        inputs: Mapping[str, str | os.PathLike[str]] | None = None,
        check: bool = True,
        sources: Sequence[str | os.PathLike[str]] | None = None,
        ready_interval: float | None = None,
        trace: bool = False,
    ) -> Server:
        """Start a server and wait until ``ready`` (a URL or a path, with ``{port}``) answers.

        ``ready`` is probed ``ready_interval`` s (0.05) after each failed probe: ``readiness``.

        Fails fast, with the stderr tail, when the server dies during startup or the
        readiness URL does not answer within ``startup_timeout``. Like a command, a server
        obeys ``check``: one that does not end cleanly (a crash, a forced kill, a leftover) makes
        its ``stop()``, or the teardown that stops it, raise :class:`RunError` with its lifecycle.
        """
        __tracebackhide__ = True  # pytest shows the RunError, not our frames
        port = free_port() if port is None else port
        described = self._describe_sources(sources)
        record, args, child_env, cwd_path, run_dir = self._prepare(
            "server", argv, env, cwd, port, inputs, trace=bool(trace)
        )
        url = fill_placeholders(ready, {"port": str(port), "out": str(record.out_dir)})
        if url.startswith("/"):
            url = f"http://127.0.0.1:{port}{url}"
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                "model_run.server(ready=...)",
                ready,
                "give a URL such as http://127.0.0.1:{port}/health, or a path such as /health",
            )
        ready_port = local_port(url)
        taken = port_taken(ready_port) if ready_port is not None else None
        if taken is not None:  # a stranger would answer the probe and every request
            raise RunError(
                f"model_run.server: port {ready_port} (ready={url}) is already in use by "
                f"{taken} before the server started: the readiness probe and every request "
                "would be answered by that process, not by this server. Stop it, or leave "
                "port= out and put {port} in argv so that a free port is chosen"
            )
        limit = (
            self.run_timeout
            if startup_timeout is None
            else check_seconds(startup_timeout, "startup_timeout")
        )
        part = ServerPart(
            ready_url=url,
            startup_timeout_seconds=limit,
            workers_expected=workers_expected,
            request_totals=request_totals(self.request_records),
        )
        record = replace(record, server=part, sources=described)
        record, group = self._spawn(record, args, child_env, cwd_path, run_dir)
        server = Server(self, group, record, port, run_dir, self._server_stopped, check=check)
        self._servers.append(server)
        server._wait_ready(url, limit, workers_expected, ready_interval)
        faults.point("server-ready")
        return server

    def _server_stopped(self, server: Server, group: ProcessGroup) -> RunRecord:
        """Forget a stopped server and its group, then close its record and emit it."""
        if group in self._groups:
            self._groups.remove(group)
        if server in self._servers:
            self._servers.remove(server)
        return self._emit(self._close_record(server.run, group))

    def close(self) -> None:
        """End every process group still alive (servers get a graceful stop first)."""
        if self._closed:
            return
        self._closed = True
        first: BaseException | None = None
        interrupted = self.interrupted
        grace = min(self.grace, INTERRUPT_GRACE) if interrupted else self.grace
        reason = f"interrupted by {interrupted}" if interrupted else "teardown"
        # Every group is ended even when one stop fails: the device locks are released
        # right after this, and no process may outlive them.
        for server in list(self._servers):
            try:
                server.stop(grace, reason=reason)
            except BaseException as exc:
                first = first or exc
        for group in list(self._groups):
            try:
                group.send(signal.SIGTERM, forced=True, reason=reason, group=True)
                group.wait_main(grace)
                group.settle(grace)
                group.finish(reason=reason)
            except BaseException as exc:
                first = first or exc
            finally:
                if group in self._groups:
                    self._groups.remove(group)
        if self._subreaper_was is False:
            child_subreaper(False)
            self._subreaper_was = None
        if first is not None and interrupted and isinstance(first, Exception):
            self.close_errors.append(f"{type(first).__name__}: {first}")
        elif first is not None:
            raise first


def _output_path(template: str | os.PathLike[str], out: Path) -> Path:
    path = Path(fill_placeholders(os.fspath(template), {"out": str(out)}))
    return path if path.is_absolute() else out / path


def _file_identity(path: Path) -> tuple[int, int, int, int, int] | None:
    """What changes whenever a file is written or replaced (device, inode, size, mtime and
    ctime in ns), or None when no file is there."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _stat_outputs(
    outputs: Mapping[str, str | os.PathLike[str]], out: Path
) -> dict[str, tuple[int, int, int, int, int]]:
    """The identity of each declared output file that exists before the run starts (one at a
    fixed path outside ``{out}``, left by an earlier run)."""
    found: dict[str, tuple[int, int, int, int, int]] = {}
    for name, template in outputs.items():
        identity = _file_identity(_output_path(template, out))
        if identity is not None:
            found[name] = identity
    return found


def _collect_outputs(
    outputs: Mapping[str, str | os.PathLike[str]],
    out: Path,
    earlier: Mapping[str, tuple[int, int, int, int, int]] | None = None,
) -> tuple[dict[str, Path], dict[str, OutputRecord], list[str]]:
    """Each declared output's path, its record (size and SHA-256, or its problem), and the
    problems (missing, empty, or left unchanged since before the run: ``earlier``) as
    sentences."""
    declared: dict[str, Path] = {}
    problems: list[str] = []
    entries: dict[str, OutputRecord] = {}
    for name, template in outputs.items():
        path = _output_path(template, out)
        before = (earlier or {}).get(name)
        if before is not None and _file_identity(path) == before:
            entries[name] = OutputRecord(str(path), problem="not written by this run")
            problems.append(
                f"declared output {name!r} was not written by this run: {path} is the file "
                "that was there before it started, unchanged"
            )
        elif not path.is_file():
            entries[name] = OutputRecord(str(path), problem="missing")
            problems.append(f"declared output {name!r} was not written: {path}")
        elif path.stat().st_size == 0:
            entries[name] = OutputRecord(str(path), problem="empty")
            problems.append(f"declared output {name!r} is empty: {path}")
        else:
            entries[name] = OutputRecord(str(path), path.stat().st_size, sha256_file(path))
            declared[name] = path
    return declared, entries, problems
