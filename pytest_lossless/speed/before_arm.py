"""What runs before each speed arm (``speed_gate(..., before_arm=...)``), and its built-ins.

A speed arm measures one run; what the machine holds when it starts (a warm page cache, another
job's kernel still on the GPU) changes what it measures. ``before_arm`` is a callable, or a list
of them, called with the arm's name (``"control"`` or ``"candidate"``) and its sample index right
before each arm starts (outside the arm's own time). What each returns is recorded in the arm's
sample (``before_arm``: ``[{"name", "result"}]``); one that raises keeps the arm from running
and is recorded as the arm's error, so the verdict is INCONCLUSIVE with the reason.

Built-ins: :data:`drop_page_cache` (``sync``, then ``3`` into ``/proc/sys/vm/drop_caches``
where this process may write it; recorded as ``"done"`` or ``"not permitted: <reason>"``, never
an error) and :func:`devices_idle` (the allocation's devices hold no process but this test's,
by the backend's own process listing; a busy device is the arm's error, naming the process).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.procfs import process_stat
from ..core.records import JsonValue, Record, spec
from ..errors import AllocationError, ConfigError

#: ``before_arm=``: one callable given (arm name, sample index), or a sequence of them.
BeforeArm = Callable[[str, int], object]
DROP_CACHES = "/proc/sys/vm/drop_caches"
_RESULT_CHARS = 2000


def hooks_of(before_arm: object, source: str = "speed_gate(before_arm)") -> tuple[BeforeArm, ...]:
    """``before_arm`` as a tuple of callables, checked when the test states it."""
    if before_arm is None:
        return ()
    found: list[Any] = (
        list(before_arm)
        if isinstance(before_arm, Sequence) and not isinstance(before_arm, (str, bytes))
        else [before_arm]
    )
    for hook in found:
        if not callable(hook):
            raise ConfigError(
                source,
                hook,
                "give a callable (arm name, sample index) or a list of them, e.g. "
                "before_arm=[drop_page_cache, devices_idle(devices)]",
            )
    return tuple(found)


def hook_name(hook: object) -> str:
    """How a hook is named in the receipt: its ``name``, else its qualified name."""
    name = getattr(hook, "name", None)
    if isinstance(name, str) and name:
        return name
    return str(getattr(hook, "__qualname__", None) or type(hook).__name__)


class HookFailed(Exception):
    """A ``before_arm`` hook raised: the arm does not run, and this is its error."""


@dataclass(frozen=True, slots=True)
class HookResult(Record):
    """What one ``before_arm`` hook returned before one arm (a JSON value, ``"done"`` for None)."""

    name: str
    result: JsonValue = None


def run_before(hooks: Sequence[BeforeArm], arm: str, index: int) -> tuple[HookResult, ...] | None:
    """Call each hook before the arm ``arm`` (sample ``index``): what each returned, or None
    without hooks; :class:`HookFailed` naming the hook."""
    records = []
    for hook in hooks:
        try:
            result = hook(arm, index)
        except Exception as exc:
            name = hook_name(hook)
            raise HookFailed(f"before_arm {name} raised {type(exc).__name__}: {exc}") from exc
        records.append(HookResult(hook_name(hook), _plain(result)))
    return tuple(records) if records else None


def _plain(result: object) -> JsonValue:
    """A hook's result as a receipt keeps it: None is ``"done"``; JSON values as they are."""
    if result is None:
        return "done"
    if isinstance(result, Record):
        result = result.to_json()
    if isinstance(result, str):
        return result[:_RESULT_CHARS]
    try:
        text = json.dumps(result, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(result)[:_RESULT_CHARS]
    if len(text) > 64 * _RESULT_CHARS:
        return text[:_RESULT_CHARS] + "..."
    plain: JsonValue = json.loads(text)  # what json.dumps just wrote: JSON by construction
    return plain


# ------------------------------------------------------------------ drop_page_cache


@dataclass(frozen=True)
class DropPageCache:
    """Flush dirty pages (``sync``) and drop the clean page cache, dentries and inodes.

    Writing ``/proc/sys/vm/drop_caches`` needs root (``CAP_SYS_ADMIN``) and a writable
    ``/proc/sys``; where it is refused, the result says ``"not permitted: <reason>"`` and the
    arm runs anyway: the receipt then shows that its cache was not cold.
    """

    path: str = DROP_CACHES
    value: str = "3"
    name: str = "drop_page_cache"

    def __call__(self, arm: str | None = None, index: int | None = None) -> str:
        with contextlib.suppress(OSError):  # sync(2) does not fail on Linux
            os.sync()
        try:
            # Never created, never followed through a link: only the kernel's file is written.
            fd = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.write(fd, self.value.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            return f"not permitted: {exc.strerror or exc} ({self.path})"
        return "done"


#: ``before_arm=drop_page_cache``: a cold page cache before every arm, where permitted.
drop_page_cache = DropPageCache()


# ------------------------------------------------------------------ devices_idle


@dataclass(frozen=True)
class DevicesIdle:
    """Before each arm, the allocation's devices hold no process but this test's own.

    Asked of the backend's process listing (``nvidia-smi``, ``npu-smi``): a foreign process
    still there after ``wait`` seconds makes the arm an error (:class:`AllocationError` naming
    it), so the speed verdict is INCONCLUSIVE. A backend that cannot list processes (the cpu
    slots) is recorded as not observed. Processes of this pytest process and its children (a
    server the arms share) are this test's own.
    """

    allocation: Any
    backend: Any = None
    wait: float = 0.0
    poll: float = 0.25
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False)
    name: str = "devices_idle"

    def bound(self, backend: Any) -> DevicesIdle:
        """This check asking ``backend`` when none was given (the session's, in a test)."""
        if self.backend is not None or backend is None:
            return self
        return replace(self, backend=backend)

    def __call__(self, arm: str | None = None, index: int | None = None) -> IdleCheck:
        from ..devices.base import ToolError, foreign_processes

        backend = self.backend
        devices = tuple(getattr(self.allocation, "devices", ()) or ())
        ids = tuple(str(d.id) for d in devices)
        if backend is None:
            return IdleCheck(False, ids, note="no backend given to ask")
        if not backend.observes_usage:
            return IdleCheck(False, ids, note=f"{backend.name} devices report no processes")
        deadline = self.clock.monotonic() + max(0.0, self.wait)
        while True:
            try:
                listed = foreign_processes(backend, devices)
            except ToolError as exc:
                return IdleCheck(False, ids, error=str(exc))
            foreign = [p for p in listed if not _own(p.pid)]
            if not foreign:
                return IdleCheck(True, ids, idle=True, own_processes=len(listed))
            if self.clock.monotonic() >= deadline:
                raise AllocationError(
                    f"devices_idle: device(s) {', '.join(ids)} are not idle before the {arm} arm: "
                    + "; ".join(
                        f"pid {p.pid} ({p.process or '?'}) on device {p.device}"
                        for p in foreign[:4]
                    ),
                    processes=[p.to_json() for p in foreign],
                )
            self.clock.sleep(self.poll)


@dataclass(frozen=True)
class IdleCheck(Record):
    """What :class:`DevicesIdle` recorded before one arm: whether the devices were observed,
    and idle (with how many processes were this test's own), or why they were not observed."""

    observed: bool
    devices: tuple[str, ...]
    idle: bool | None = spec(None, omit="none")
    own_processes: int | None = spec(None, omit="none")
    note: str | None = spec(None, omit="none")
    error: str | None = spec(None, omit="none")


def devices_idle(
    allocation: Any, *, backend: Any = None, wait: float = 0.0, poll: float = 0.25
) -> DevicesIdle:
    """``before_arm=devices_idle(devices)``: prove the allocation's devices idle before each
    arm (waiting up to ``wait`` seconds for a foreign process to go); inside a test the
    session's backend is asked, elsewhere pass ``backend=``."""
    return DevicesIdle(allocation, backend=backend, wait=wait, poll=poll)


def bind_backend(hooks: Sequence[BeforeArm], backend: Any) -> tuple[BeforeArm, ...]:
    """``hooks`` with each :class:`DevicesIdle` that names no backend asking ``backend``."""
    return tuple(h.bound(backend) if isinstance(h, DevicesIdle) else h for h in hooks)


def _own(pid: object) -> bool:
    """Whether ``pid`` is this process or one of its descendants (by ``/proc`` parents)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    me, seen = os.getpid(), 0
    while pid > 1 and seen < 64:
        if pid == me:
            return True
        found = process_stat(pid)
        if found is None:
            return False
        pid, seen = found.ppid, seen + 1
    return False
