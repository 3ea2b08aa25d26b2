"""The ``model_run`` fixture: commands and servers launched under the test's allocation.

Every process is recorded (exit or signal, forced kills, peak memory) into the test's receipt,
secrets redacted (``lossless_redact`` adds names); whatever is still running is ended at
teardown, before the device locks go.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..core.records import JsonObject
from ..core.text import printable
from .config import settings
from .devices import holds_devices, interruption
from .evidence import receipt_for, source_states
from .outcomes import failing_on_errors
from .terminal_progress import progress_for

if TYPE_CHECKING:
    from ..evidence.provenance import SourceStates
    from ..run import Launcher


@pytest.fixture
def model_run(request: pytest.FixtureRequest, tmp_path: Path) -> Generator[Launcher, None, None]:
    """Launch commands (``model_run(argv, outputs=..., timeout=...)``) and servers
    (``model_run.server(argv, ready=...)``) under the test's allocation."""
    from ..core.redact import Redactor
    from ..run import Launcher

    item = request.node
    resolved = settings(request.config)
    allocation = None
    # Marked, or asking for ``devices`` itself: either way the runs belong to the allocation
    # (they see its devices, and end before its locks go, whatever the argument order).
    if "devices" in request.fixturenames or holds_devices(item):
        allocation = request.getfixturevalue("devices")
    receipt = receipt_for(item)
    # One set of rules (built in, plus lossless_redact) for the runs and the receipt's RunSpec.
    redactor = Redactor.with_patterns(resolved.redact)
    receipt.redactor = redactor
    if allocation is not None:
        receipt.set_allocation(allocation)
    from .session import start_reaper

    start_reaper(request.config, item.nodeid)  # ends the runs if pytest dies without finishing
    launcher = Launcher(
        allocation=allocation,
        out_dir=tmp_path / "model_run",
        run_timeout=resolved.run_timeout,
        knobs=resolved.determinism_knobs,
        on_record=lambda run: receipt.add_run(run.to_json()),
        redactor=redactor,
        describe_source=partial(
            _describe_source,
            required=resolved.require_published,
            states=source_states(request.config),
        ),
        progress=progress_for(item),
    )
    state = interruption(request.config)
    if state is not None:
        state.add(launcher)  # an interruption ends its runs fast (and, late, kills them)
    try:
        yield launcher
    finally:
        try:
            # A server that crashed or needed SIGKILL at teardown fails the test, as a command
            # does; after an interruption it is recorded, not raised (the receipt says it).
            with failing_on_errors():
                launcher.close()
        finally:
            if state is not None:
                state.remove(launcher)


def _describe_source(
    path: Path, *, required: bool = False, states: SourceStates | None = None
) -> JsonObject:
    """A source tree of a run, as the RunSpec describes the rootdir's (revision, dirty, diff,
    remote URL and branch, publication). With ``required`` (``--lossless-require-published``)
    a dirty or unpublished tree is a :class:`RunError` before the run starts. ``states``: the
    session's source trees, each read from git once."""
    from ..errors import RunError
    from ..evidence.provenance import PUBLISH_FIX, SourceStates

    found = (states or SourceStates()).state(path)
    problem = found.problem() if required else None
    if problem is not None:
        detail = found.publication.publication_detail if problem.startswith("revision ") else None
        raise RunError(
            printable(
                f"model_run: --lossless-require-published: source tree {path} is not a published "
                f"revision: {problem}{f' ({detail})' if detail else ''}; the run was not started. "
                f"Fix: {PUBLISH_FIX}"
            )
        )
    return found.compact().to_json()
