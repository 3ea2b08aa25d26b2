"""Each test's receipt: created by the first fixture that records evidence, written at its end.

The receipt is written after teardown (so the allocation block shows its release), from the
final teardown report that :mod:`.outcomes` hands over; a receipt that cannot be written fails
the test rather than leaving a silent gap in the evidence. Receipts go into the session's own
folder, ``<receipts dir>/<session id>/``, whose ``INDEX.json`` :mod:`.summary` writes at the
session's end.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..core import faults
from ..core.records import json_object, json_objects
from ..errors import LosslessError
from .config import session, settings

if TYPE_CHECKING:
    from ..devices import Allocation  # noqa: F401 - named in a StashKey below
    from ..evidence.provenance import (
        SessionFacts,  # noqa: F401 - named in a StashKey below
        SourceIdentity,
        SourceState,
        SourceStates,
    )
    from ..evidence.receipts import Receipt

#: ``item.stash[RECEIPT_KEY]``: the test's receipt, created by the first fixture that asks.
RECEIPT_KEY = pytest.StashKey["Receipt"]()
#: ``item.stash[ALLOCATION_KEY]``: the test's allocation, for its receipt (set by ``devices``).
ALLOCATION_KEY = pytest.StashKey["Allocation"]()
#: Session-constant parts of every RunSpec (versions, ffmpeg, platform), computed once.
FACTS_KEY = pytest.StashKey["SessionFacts"]()
#: The session's source trees, each read from git once (#22).
SOURCES_KEY = pytest.StashKey["SourceStates"]()
#: ``item.stash[WRITTEN_KEY]``: the test's receipt was written (after its teardown).
WRITTEN_KEY = pytest.StashKey[Path]()
#: ``item.stash[OUTCOMES_KEY]``: each phase's outcome so far, also before a receipt existed.
OUTCOMES_KEY = pytest.StashKey[dict[str, str]]()
#: The phases of a test, in order: an interrupted test's receipt names the first it did not end.
PHASES = ("setup", "call", "teardown")


def session_folder(config: pytest.Config) -> Path:
    """``<receipts dir>/<session id>``: this session's receipts, index and summary."""
    return settings(config).receipts / session(config)[0]


def receipt_for(item: pytest.Item) -> Receipt:
    """The test's receipt, created on first use."""
    from ..core.redact import Redactor
    from ..evidence.receipts import Receipt

    receipt = item.stash.get(RECEIPT_KEY, None)
    if receipt is None:
        # The session's redaction rules from the start: a receipt without model_run has a diff.
        redactor = Redactor.with_patterns(settings(item.config).redact)
        receipt = item.stash[RECEIPT_KEY] = Receipt(item.nodeid, redactor=redactor)
        # The tree as the test starts (read once per session; the end checks it is unchanged).
        source_state(item.config)
        for phase, word in item.stash.get(OUTCOMES_KEY, {}).items():  # a setup that passed
            receipt.set_outcome(phase, word)
    return receipt


def redacted_command(config: pytest.Config) -> list[str]:
    """pytest's command line as written into a golden's provenance or ``export.json``, with
    the session's secrets hidden as receipts hide them (``--api-key=...`` of a conftest's
    option, a password in a URL): manifests are committed, exports uploaded (#20)."""
    from ..core.redact import Redactor

    redactor = Redactor.with_patterns(settings(config).redact)
    return redactor.argv(["pytest", *map(str, config.invocation_params.args)])[0]


def source_states(config: pytest.Config) -> SourceStates:
    """The session's source trees, each read from git once: the rootdir for every receipt,
    manifest and the index, and each tree a ``model_run(sources=...)`` names."""
    from ..evidence.provenance import SourceStates

    states = config.stash.get(SOURCES_KEY, None)
    if states is None:
        states = config.stash[SOURCES_KEY] = SourceStates(exclude=session_writes(config))
    return states


def session_writes(config: pytest.Config) -> tuple[Path, ...]:
    """What the session itself writes besides its receipts, export and store (which no tree's
    state ever includes): the goldens folder, the lock folder, pytest's cache and temporary
    folders, and the report files pytest and its usual plugins write where the command line
    says (``--junitxml``, pytest-html's ``--html``, pytest-reportlog's ``--report-log``).
    Other tools' outputs in a checkout are gitignored there, or the session's end counts
    them as new untracked files (docs/receipts.md). Where one lies inside a source tree, the
    session's end leaves it out when it asks whether the tree changed
    (:meth:`~..evidence.provenance.SourceStates.changes`)."""
    import getpass
    import os
    import re
    import tempfile

    resolved = settings(config)
    # An updating session writes its goldens; a comparing one only recovers what a killed
    # update left (hidden work folders beside test folders), and its goldens are source like
    # any file: a golden a test wrote while its session compared vouches for no commit (#20).
    found = [resolved.goldens] if resolved.update_goldens else _work_folders(resolved.goldens)
    found.append(resolved.lock_dir)
    if config.pluginmanager.hasplugin("cacheprovider"):  # its ini key exists only then
        found.append(config.rootpath / os.path.expandvars(str(config.getini("cache_dir"))))
    for dest in ("xmlpath", "htmlpath", "report_log"):  # report files: junit, html, reportlog
        written = getattr(config.option, dest, None)
        if isinstance(written, str) and written:
            found.append(config.invocation_params.dir / os.path.expanduser(written))
    basetemp = getattr(config.option, "basetemp", None)
    if basetemp:
        found.append(config.invocation_params.dir / os.path.expandvars(str(basetemp)))
    else:  # pytest's default: <temproot>/pytest-of-<user>/, as its tmp_path_factory names it
        temproot = os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()
        try:
            user = getpass.getuser()
        except (ImportError, OSError, KeyError):
            user = "unknown"
        found.append(Path(temproot) / ("pytest-of-" + re.sub(r"[\W]", "_", user)))
    return tuple(found)


def _work_folders(goldens: Path) -> list[Path]:
    """The hidden entries under the goldens folder (``.<test>.tmp-*``, ``.<test>.old-*``,
    ``.<test>.lock``: what golden updates leave while they run or when killed), which a
    comparing session's recovery may remove."""
    import os

    found = []
    for folder, names, files in os.walk(goldens):
        hidden = [n for n in names if n.startswith(".")]
        found += [Path(folder, n) for n in (*hidden, *(f for f in files if f.startswith(".")))]
        names[:] = [n for n in names if not n.startswith(".")]
    return found


def source_state(config: pytest.Config) -> SourceState:
    """The rootdir's source tree as the session read it; its own receipts do not make it
    dirty."""
    resolved = settings(config)
    return source_states(config).state(resolved.rootdir, ignore=resolved.written_folders)


def source_revision(config: pytest.Config) -> SourceIdentity:
    """The session's source identity as manifests, the index and an export record it."""
    return source_state(config).compact()


def write_receipt(item: pytest.Item, receipt: Receipt) -> Path:
    """Complete the receipt's RunSpec and allocation, and write it into the session folder."""
    from ..evidence import provenance

    config = item.config
    resolved = settings(config)
    facts = config.stash.get(FACTS_KEY, None)
    if facts is None:
        facts = config.stash[FACTS_KEY] = provenance.session_facts()
    allocation = item.stash.get(ALLOCATION_KEY, None)
    if allocation is not None:
        receipt.set_allocation(allocation)
    inputs = {
        f"{run.get('name')}:{name}": str(entry["path"])
        for run in receipt.runs
        for name, entry in json_object(run.get("inputs")).items()
        if isinstance(entry, dict)
    }
    session_id, host = session(config)
    receipt.set_runspec(
        provenance.runspec(
            resolved.rootdir,
            knobs=resolved.determinism_knobs,
            ignore=resolved.written_folders,
            inputs=inputs,
            facts=facts,
            host=host,
            session_id=session_id,
            sources=source_states(config),
        )
    )
    faults.point("receipt-write")
    return receipt.write(session_folder(config))


def phase_outcome(report: pytest.TestReport) -> str:
    """A phase's outcome as the receipt records it: pytest's word, or ``inconclusive`` for a
    call stopped by an INCONCLUSIVE verdict (pytest reports it as failed)."""
    from ..core.verdict import Verdict

    if report.failed and getattr(report, "lossless_verdict", None) == Verdict.INCONCLUSIVE:
        return "inconclusive"
    return report.outcome


def record_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """Record a phase's final outcome in the receipt; write the receipt after teardown.

    Called by the one ``pytest_runtest_makereport`` wrapper, after it has decided the outcome.
    """
    word = phase_outcome(report)
    item.stash.setdefault(OUTCOMES_KEY, {})[report.when] = word
    receipt = item.stash.get(RECEIPT_KEY, None)
    if receipt is None:
        return
    receipt.set_outcome(report.when, word)
    if report.when != "teardown":
        return
    try:
        path = write_receipt(item, receipt)
    except (OSError, LosslessError) as exc:
        # Evidence that cannot be written is a failure of the test, not a silent gap.
        why = faults.write_failed(exc) if isinstance(exc, OSError) else exc
        line = f"pytest-lossless: the receipt of {item.nodeid} was not written: {why}"
        # Added to a teardown's own failure (a golden that could not be written), never over it.
        report.longrepr = f"{report.longrepr}\n\n{line}" if report.failed else line
        report.outcome = "failed"
        return
    item.stash[WRITTEN_KEY] = path
    report.user_properties.append(("lossless_receipt", str(path)))
    from ..evidence.index import sha256_regular

    # The session's index lists this digest, held in memory, not what the file holds later.
    report.lossless_receipt_sha256 = sha256_regular(path)  # type: ignore[attr-defined]
    report.lossless_unended = [  # type: ignore[attr-defined]
        [p.get("pid"), p.get("comm")]
        for run in receipt.runs
        for p in json_objects(run.get("processes"))
        if p.get("exit_code") is None and p.get("signal") is None
    ]
    # The overall verdict as the receipt derives it (its outcome included), not a second rule.
    verdicts = receipt.verdicts
    overall = verdicts.overall
    prop = ("lossless_verdict", str(overall))
    if overall is not None and prop not in report.user_properties:
        # LOSSY-PASS is its own value in JUnit too (a CI dashboard reads the property).
        report.user_properties.append(prop)
    if verdicts.expected:  # the verdict the test asserted (expect=)
        report.user_properties.append(("lossless_verdict_expected", "true"))
    report.sections.append(("pytest-lossless receipt", str(path)))


def write_interrupted(session: pytest.Session) -> dict[str, str | None]:
    """At the session's end: the receipt of every test that started recording evidence but
    never reached the end of its teardown (Ctrl-C, an ``Exit``), written with the first phase
    it did not end marked ``interrupted`` (so its overall verdict is never PASS). Returns each
    such test's receipt file name (None: it could not be written)."""
    found: dict[str, str | None] = {}
    for item in getattr(session, "items", ()):  # an xdist controller collects none
        receipt = item.stash.get(RECEIPT_KEY, None)
        if receipt is None or WRITTEN_KEY in item.stash:
            continue
        phase = next((p for p in PHASES if p not in receipt.outcome), PHASES[-1])
        receipt.set_outcome(phase, "interrupted")
        try:
            path = write_receipt(item, receipt)
        except (OSError, LosslessError):
            found[item.nodeid] = None
            continue
        item.stash[WRITTEN_KEY] = path
        found[item.nodeid] = path.name
    return found
