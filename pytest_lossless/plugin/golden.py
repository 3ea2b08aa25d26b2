"""The ``golden`` fixture: artifacts compared with the test's committed goldens.

Under ``--update-goldens`` the fixture stages what the test hands over and writes it when the
test passes; otherwise a golden the test stops checking fails it (the truncated audio track a
validator never looked at). At setup, what a killed update left beside the test's folder is
recovered (reported among the golden updates); at commit, a folder another session changed
since the test started is a CONFLICT: nothing is written and the test fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .. import report
from ..core.text import printable
from ..errors import LosslessError
from .config import kinds, settings
from .devices import holds_devices
from .outcomes import CALL_PASSED_KEY, EVENTS_KEY, ROWS_KEY, add_row, failing_on_errors
from .receipts import receipt_for, source_revision

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..gates import Gate, GateResult
    from ..judge.goldens import Golden, ManifestEntry, UpdateEvent


def _test_name(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name


class GoldenFixture:
    """The ``golden`` fixture: ``golden.check(name, artifact, gate=None)``."""

    def __init__(self, item: pytest.Item, golden: Golden) -> None:
        self._item = item
        self._golden = golden

    @property
    def folder(self) -> Path:
        return self._golden.folder.path

    def check(
        self,
        name: str,
        artifact: Any,
        gate: Gate | str | None = None,
        *,
        allow_empty: bool = False,
    ) -> GateResult | None:
        """Compare ``artifact`` with the golden ``name`` (or stage it under --update-goldens).

        An empty file is never stored as a golden unless ``allow_empty=True`` says that an empty
        output is what the test expects.
        """
        __tracebackhide__ = True
        with failing_on_errors(on_error=lambda exc: self._record_error(name, gate, exc)):
            result = self._golden.check(name, artifact, gate, allow_empty=allow_empty)
        if result is None:
            self._add_staged([self._golden.staged[-1]])
            return None
        add_row(self._item, report.gate_row(self._item.nodeid, result))
        evidence = self._golden.folder.evidence.get(name, {})
        receipt_for(self._item).add_gate({**result.to_dict(), "evidence": evidence})
        if not result.passed:
            pytest.fail(printable(result.message(), newlines=True), pytrace=False)
        return result

    def check_all(
        self, artifacts: Any, gate: Gate | str | None = None, *, allow_empty: bool = False
    ) -> list[GateResult]:
        """Check every artifact of one run: a mapping ``{name: artifact}``, a model_run result,
        or a producer returning one. Under --update-goldens a producer runs at least twice and
        nothing is written when its runs disagree."""
        __tracebackhide__ = True
        with failing_on_errors(on_error=lambda exc: self._record_error("(run)", gate, exc)):
            staged = self._golden.stage_run(artifacts, gate, allow_empty=allow_empty)
        if staged is not None:
            self._add_staged(staged)
            return []
        from ..media.artifacts import named_artifacts, produce

        results = []
        for name, value in named_artifacts(produce(artifacts), "golden.check_all").items():
            result = self.check(name, value, gate, allow_empty=allow_empty)
            if result is not None:
                results.append(result)
        return results

    def _add_staged(self, staged: list[ManifestEntry]) -> None:
        for entry in staged:
            add_row(
                self._item,
                report.Row(
                    self._item.nodeid,
                    entry.name,
                    entry.gate,
                    "STAGED",
                    f"{entry.kind}, {entry.stored}; written when the test passes",
                ),
            )

    def _record_error(self, name: str, gate: object, exc: LosslessError) -> None:
        label, message = type(exc).__name__, str(exc)
        add_row(
            self._item,
            report.Row(
                self._item.nodeid,
                name,
                str(gate or "default"),
                "ERROR",
                f"{label}: {message.splitlines()[0]}",
            ),
        )
        receipt_for(self._item).add_gate(
            {"artifact": name, "error": label, "message": message, "passed": False}
        )


@pytest.fixture
def golden(request: pytest.FixtureRequest, tmp_path: Path) -> Generator[GoldenFixture, None, None]:
    """Compare artifacts with this test's committed goldens; writes them under --update-goldens."""
    from ..judge.goldens import Golden, GoldenFolder

    item = request.node
    resolved = settings(request.config)
    folder = GoldenFolder(
        resolved.goldens,
        item.path.stem,
        _test_name(item),
        item.nodeid,
        kinds(request.config),
        digest_above=resolved.digest_above,
        rootdir=resolved.rootdir,
    )
    with failing_on_errors():  # a lock file or module folder that cannot be used: its message
        recovered = folder.begin_update() if resolved.update_goldens else folder.recover()
    _record_events(item, recovered, resolved.rootdir)
    golden = Golden(
        folder,
        update=resolved.update_goldens,
        workdir=tmp_path / "golden",
        producer_runs=resolved.control_runs,
        provenance=_golden_provenance(request),
    )
    yield GoldenFixture(item, golden)
    passed = item.stash.get(CALL_PASSED_KEY, False)
    if resolved.update_goldens and passed:
        with failing_on_errors():  # a folder refused at commit: its message, no traceback
            _commit(item, golden, resolved.rootdir)
    elif not resolved.update_goldens and passed:
        with failing_on_errors():
            unchecked = golden.unchecked()
        if unchecked:
            _fail_unchecked(item, unchecked, folder.path / "manifest.json")
    elif resolved.update_goldens and golden.staged:
        item.stash.setdefault(EVENTS_KEY, []).extend(
            {
                "test": item.nodeid,
                "folder": str(folder.path),
                "name": e.name,
                "action": "refused",
                "detail": "the test did not pass; nothing written",
            }
            for e in golden.staged
        )


def _commit(item: pytest.Item, golden: Golden, rootdir: Path) -> None:
    """Write the staged goldens; the rows say what was created, changed or kept, or that
    another session changed the folder meanwhile (CONFLICT: nothing written, the test fails)."""
    from ..judge.goldens import GoldenConflict

    try:
        events = _record_events(item, golden.commit(), rootdir)
    except GoldenConflict as conflict:
        _mark_rows(item, _record_events(item, conflict.events, rootdir))
        raise
    _mark_rows(item, events)


def _record_events(
    item: pytest.Item, updates: Iterable[UpdateEvent], rootdir: Path
) -> list[dict[str, str]]:
    """The test's golden updates and recoveries, for the terminal's golden-updates lines."""
    events = [e.to_dict() for e in updates]
    for event in events:
        folder = Path(event["folder"])
        if folder.is_relative_to(rootdir):
            event["folder"] = str(folder.relative_to(rootdir))
    item.stash.setdefault(EVENTS_KEY, []).extend(events)
    return events


def _mark_rows(item: pytest.Item, events: list[dict[str, str]]) -> None:
    """Each STAGED row now says what became of its artifact."""
    actions = {e["name"]: e["action"].upper() for e in events if e["name"]}
    item.stash[ROWS_KEY] = [
        dataclasses.replace(r, verdict=actions[r.check], detail=r.detail.split(";")[0])
        if r.verdict == "STAGED" and r.check in actions
        else r
        for r in item.stash.get(ROWS_KEY, [])
    ]


def _fail_unchecked(item: pytest.Item, unchecked: list[str], manifest: Path) -> None:
    """A golden the test stopped checking would otherwise pass silently."""
    __tracebackhide__ = True
    names = ", ".join(repr(n) for n in unchecked)
    noun, verb = ("golden", "was") if len(unchecked) == 1 else ("goldens", "were")
    for name in unchecked:
        add_row(
            item,
            report.Row(
                item.nodeid,
                name,
                "-",
                "UNCHECKED",
                "in the manifest, but the test did not check it",
            ),
        )
        receipt_for(item).add_gate(
            {
                "artifact": name,
                "error": "Unchecked",
                "passed": False,
                "message": "in the golden's manifest, but not checked",
            }
        )
    pytest.fail(
        f"{noun} {names} in {manifest} {verb} not checked by {item.nodeid}; check it, or run "
        "with --update-goldens to remove it",
        pytrace=False,
    )


def _golden_provenance(request: pytest.FixtureRequest) -> dict[str, Any]:
    from .. import __version__
    from ..core.clock import utc_iso

    config = request.config
    identity: Any = None
    if holds_devices(request.node):
        identity = getattr(request.getfixturevalue("devices"), "identity", None)
    return {
        "when": utc_iso(),
        "plugin_version": __version__,
        "source_revision": source_revision(config),
        "command": ["pytest", *config.invocation_params.args],
        "device_identity": identity,
    }
