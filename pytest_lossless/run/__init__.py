"""Commands and servers for model runs, with a lifecycle record written by code.

A :class:`Launcher` starts every command in its own session and process group, watches
the whole group (the direct child through ``os.wait4``, every descendant by sampling
``/proc``), ends it on timeout (SIGTERM to the group, a grace period, then SIGKILL, each
recorded as forced), and emits one raw record per run. :func:`lifecycle_verdict` derives
"clean or not, and why" from that raw record only, so a summary can never contradict it.

Linux only: descendants are found and measured through ``/proc``.

Modules, in the order of the flow: :mod:`.arguments` checks what the test passed,
:mod:`.group` watches one process group, :mod:`.launcher` runs commands and :mod:`.server`
servers (with :mod:`.request_body` for uploads), :mod:`.record` holds the typed run record
(one ``to_json``/``from_json``), :mod:`.lifecycle` judges it and :mod:`.failure` writes the
message of a failed run.
"""

from __future__ import annotations

from .failure import tail as tail
from .launcher import DEFAULT_GRACE as DEFAULT_GRACE
from .launcher import Launcher as Launcher
from .launcher import RunResult as RunResult
from .launcher import free_port as free_port
from .launcher import hash_inputs as hash_inputs
from .lifecycle import Lifecycle as Lifecycle
from .lifecycle import lifecycle_verdict as lifecycle_verdict
from .record import ProcessRecord as ProcessRecord
from .record import RunRecord as RunRecord
from .server import Response as Response
from .server import Server as Server

__all__ = [
    "DEFAULT_GRACE",
    "Launcher",
    "Lifecycle",
    "ProcessRecord",
    "Response",
    "RunRecord",
    "RunResult",
    "Server",
    "free_port",
    "hash_inputs",
    "lifecycle_verdict",
    "tail",
]
