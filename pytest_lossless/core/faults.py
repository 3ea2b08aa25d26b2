"""Named fault points: every place where the fault harness (``tests/faults/``) stops a session.

Test only, and the one mechanism for it: ``PYTEST_LOSSLESS_FAULT`` arms points as a
comma-separated list of ``POINT`` or ``POINT:ACTION``; when a process reaches an armed point it
does the action to itself (default ``SIGKILL``): ``SIGINT``, ``SIGTERM``, ``SIGHUP`` and
``SIGKILL`` are sent to this process, ``exit`` is ``os._exit(3)`` (what pytest-timeout's
thread method does). :data:`SWITCHES` are not stop points but behaviours the harness forces.
Unset (always, in normal use), :func:`point` costs one environment lookup.

:data:`WRITES` are the places where a session writes a file (goldens, receipts, the session's
index, summary and report, temporary files, the export): :func:`write` is called just before,
with the file's path. Armed with ``ENOSPC`` it raises the error a full disk gives, naming that
file; armed with ``fill`` it fills the file system the file is on (only a small one, a tmpfs
the harness mounted: larger ones are refused), so that this write and every later one meet a
real full disk.

The harness parametrizes over :data:`POINTS` x :data:`ACTIONS` (the session's,
:data:`SESSION_POINTS`, in ``test_harness.py``; each command's, :data:`COMMANDS`, in
``test_commands.py``), so a point added here is covered by every invariant at once; a point
named in the code but not here is an error.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

FAULT_ENV = "PYTEST_LOSSLESS_FAULT"

#: Every stop point, in the order a session reaches them, and what has happened by then.
POINTS: dict[str, str] = {
    "allocation": "devices locked and their records written, before the test gets them",
    "run-start": "a run's process started and its members reported",
    "server-ready": "a server answered its readiness check",
    "compare": "an obtained artifact is about to be compared with its golden",
    "golden-staged": "a golden update staged its new folder, nothing swapped yet",
    "golden-retired": "the two-rename fallback moved the old golden aside (between renames)",
    "golden-swapped": "the new golden folder swapped into place, not yet cleaned up",
    "receipt-write": "a test's receipt is about to be written",
    "session-finish": "every test ran; the session's index and summary are about to be written",
    # The commands a user runs outside the session (python -m pytest_lossless ...): COMMANDS.
    "accept-checked": "accept checked every exported artifact; no golden written yet",
    "accept-committed": "accept committed one test's golden folder; the next test's not begun",
    "sign-write": "sign checked its sessions; the bundle (or a session's statements) not written",
    "sign-written": "sign wrote the bundle (or one session's statements), before anything else",
    "summary-write": "summary --write generated SUMMARY.md, about to write it",
}
#: The stop points each command outside the session reaches, in its order (``accept`` writes
#: through the golden swap, so it reaches the swap's points too): ``tests/faults/
#: test_commands.py`` stops each command at each of its points with each action.
COMMANDS: dict[str, tuple[str, ...]] = {
    "accept": (
        "accept-checked",
        "golden-staged",
        "golden-retired",
        "golden-swapped",
        "accept-committed",
    ),
    "sign": ("sign-write", "sign-written"),
    "summary": ("summary-write",),
}
#: The stop points a pytest session reaches (``tests/faults/test_harness.py``'s).
SESSION_POINTS = tuple(p for p in POINTS if not p.startswith(tuple(f"{c}-" for c in COMMANDS)))
#: Every place where a session writes a file, and what it writes there.
WRITES: dict[str, str] = {
    "write-golden-stage": "a file of a golden folder being staged (a copy of the artifact)",
    "write-golden-manifest": "the staged golden folder's manifest.json",
    "write-golden-plan": "a golden folder's plan.json (the frozen gates and targets)",
    "write-receipt": "a test's receipt, <test>.json",
    "write-receipt-diff": "a receipt's <test>.diff (the uncommitted changes of a dirty tree)",
    "write-session-index": "the session's INDEX.json",
    "write-session-summary": "SUMMARY.md, in the session folder and the receipts folder",
    "write-report": "the session's HTML report, report/index.html",
    "write-obtained": "an artifact the test handed over in memory, written to its tmp folder",
    "write-canary-temp": "the canary's changed copy of an artifact, in a temporary folder",
    "write-decode-temp": "the copy of a stored golden a comparison decodes, in the test's tmp",
    "write-export": "export.json and the exported artifacts (--lossless-export)",
}
#: What an armed write point does: raise ENOSPC there, or fill the (small) file system.
WRITE_ACTIONS = ("ENOSPC", "fill")
#: The largest file system ``fill`` fills: a tmpfs mounted for the case, never a real disk.
FILL_LIMIT = 256 << 20
#: The name of the file ``fill`` writes at the root of the file system it fills.
FILLER = ".lossless-fault-filler"

#: What an armed point does to its process.
ACTIONS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGKILL", "exit")
#: Behaviours forced by name, not stops: ``no-exchange`` makes golden swaps use two renames;
#: ``no-reaper`` starts no reaper (as when a cgroup kill ends it with pytest), so that the
#: orphan record, the second line, is tested on its own.
SWITCHES = ("no-exchange", "no-reaper")


def armed(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The armed points and switches: name -> action (``SIGKILL`` when none is given)."""
    text = (os.environ if environ is None else environ).get(FAULT_ENV, "")
    found: dict[str, str] = {}
    for part in text.split(","):
        name, _, action = part.strip().partition(":")
        if name:
            found[name] = action or "SIGKILL"
    return found


def switch(name: str) -> bool:
    """Whether the behaviour ``name`` (one of :data:`SWITCHES`) is forced."""
    if name not in SWITCHES:
        raise ValueError(f"unknown fault switch {name!r}; known: {', '.join(SWITCHES)}")
    return name in armed()


def point(name: str) -> None:
    """A stop point: does nothing unless ``PYTEST_LOSSLESS_FAULT`` arms ``name``."""
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}: register it in core/faults.POINTS")
    if FAULT_ENV not in os.environ:
        return
    action = armed().get(name)
    if action is None:
        return
    if action == "exit":
        os._exit(3)
    if action not in ACTIONS:
        raise ValueError(f"{FAULT_ENV}: unknown action {action!r}; known: {', '.join(ACTIONS)}")
    os.kill(os.getpid(), getattr(signal, action))


def write(name: str, path: Path | str) -> None:
    """A write point, just before ``path`` is written: nothing unless ``name`` is armed.

    ``ENOSPC`` raises ``OSError(ENOSPC)`` naming ``path``, as a full disk would; ``fill``
    fills the file system ``path`` is on, so the write that follows meets a real full disk.
    """
    if name not in WRITES:
        raise ValueError(f"unknown write point {name!r}: register it in core/faults.WRITES")
    if FAULT_ENV not in os.environ:
        return
    action = armed().get(name)
    if action is None:
        return
    if action == "ENOSPC":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    if action == "fill":
        fill(Path(path))
        return
    raise ValueError(f"{FAULT_ENV}: unknown action {action!r}; known: {', '.join(WRITE_ACTIONS)}")


def mount_point(path: Path) -> Path:
    """The root of the file system ``path`` (or its nearest existing parent) is on."""
    here = Path(os.path.abspath(path))
    while not here.exists():
        here = here.parent
    while not os.path.ismount(here):
        here = here.parent
    return here


def fill(path: Path) -> None:
    """Fill the file system of ``path`` to the last byte (a file at its root): a small one
    only (:data:`FILL_LIMIT`), so that an armed point never fills a real disk."""
    root = mount_point(path)
    stat = os.statvfs(root)
    if stat.f_blocks * stat.f_frsize > FILL_LIMIT:
        raise RuntimeError(
            f"{FAULT_ENV}: fill refuses to fill {root}: "
            f"{stat.f_blocks * stat.f_frsize} bytes is not a small test file system"
        )
    fd = os.open(root / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        block = 1 << 20
        while block:
            try:
                os.write(fd, b"\0" * block)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                block //= 2
    finally:
        os.close(fd)


def write_failed(exc: OSError, path: Path | str | None = None) -> str:
    """What a failed write says, in normal use too: the file, and for a full disk (or a full
    quota) that the disk is full, so the message needs no traceback to be understood."""
    where = path or exc.filename2 or exc.filename
    target = f" {where}" if where else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        full = "the disk is full" if exc.errno == errno.ENOSPC else "the disk quota is exceeded"
        return f"{full} ({exc.strerror}): cannot write{target}; free space there and run again"
    return f"cannot write{target} ({exc.strerror or exc})"
