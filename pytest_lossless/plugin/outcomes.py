"""What a test's outcome is, and what its reports carry: verdict rows, golden events.

The one ``pytest_runtest_makereport`` wrapper of the plugin lives here: it decides the outcome
(a lossless gate that compared nothing fails; INCONCLUSIVE is its own outcome, never a pass),
attaches the rows for the summary, and only then hands the final report to the receipt, so the
receipt's outcome is the outcome pytest reports, whatever any function is called.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Mapping
from typing import Any, Literal, NoReturn

import pytest

from .. import report
from ..core.text import printable
from ..core.verdict import Status, Verdict, status_of
from ..errors import Inconclusive, LosslessError
from . import evidence as receipts
from .config import each_on_every_worker, settings

#: ``item.stash[ROWS_KEY]``: the test's rows of the verdict table.
ROWS_KEY = pytest.StashKey[list[report.Row]]()
#: ``item.stash[UNACTED_KEY]``: the rows whose verdict the test did not ask to act on.
UNACTED_KEY = pytest.StashKey[list[report.Row]]()
#: ``item.stash[EVENTS_KEY]``: golden updates (created, changed, refused...) of the test.
EVENTS_KEY = pytest.StashKey[list[dict[str, str]]]()
#: ``item.stash[CALL_PASSED_KEY]``: whether the call phase passed (goldens are written then).
CALL_PASSED_KEY = pytest.StashKey[bool]()
#: ``item.stash[PHASES_KEY]``: each phase's outcome as the receipt records it, with its report.
PHASES_KEY = pytest.StashKey[dict[str, tuple[str, pytest.TestReport]]]()

_EXPECTABLE = (Verdict.PASS.value, Verdict.FAIL.value, Verdict.INCONCLUSIVE.value)

#: The plugin's fixtures and markers: a test that uses none of them costs the plugin one cached
#: look per phase (issue #16: an installed plugin must not slow a repository's plain tests).
FIXTURES = frozenset({"devices", "model_run", "golden", "lossless", "speed_gate"})
MARKERS = frozenset({"lossless", "npu", "gpu"})
#: ``item.stash[INVOLVED_KEY]``: whether the test names one of them (computed once).
INVOLVED_KEY = pytest.StashKey[bool]()


def involved(item: pytest.Item) -> bool:
    """Whether the plugin has anything to do for this test: it is marked or uses one of our
    fixtures (also when requested dynamically: then it has rows or a receipt)."""
    known = item.stash.get(INVOLVED_KEY, None)
    if known is None:
        known = not FIXTURES.isdisjoint(getattr(item, "fixturenames", ())) or any(
            marker.name in MARKERS for marker in item.iter_markers()
        )
        item.stash[INVOLVED_KEY] = known
    return known or ROWS_KEY in item.stash or receipts.RECEIPT_KEY in item.stash


class failing_on_errors:
    """Turn our errors into a test failure with their message only (no traceback, no chain).

    ``on_error`` records the error first (a table row, a receipt entry).
    """

    def __init__(
        self, prefix: str = "", on_error: Callable[[LosslessError], None] | None = None
    ) -> None:
        self._prefix = prefix
        self._on_error = on_error

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> Literal[False]:
        __tracebackhide__ = True
        if not isinstance(error, LosslessError):
            return False
        if self._on_error is not None:
            self._on_error(error)
        fail_on(error, self._prefix)


def fail_on(error: LosslessError, prefix: str = "") -> NoReturn:
    """Fail the test with our error's message only: no traceback, no chain."""
    __tracebackhide__ = True
    try:
        pytest.fail(f"{prefix}{type(error).__name__}: {error}", pytrace=False)
    except pytest.fail.Exception as failure:
        raise failure from None  # one message: the error is not shown twice


def add_row(item: pytest.Item, row: report.Row) -> None:
    item.stash.setdefault(ROWS_KEY, []).append(row)


def not_acted(item: pytest.Item, row: report.Row) -> None:
    """``row``'s verdict was only returned to the test (``act=False``) or judged against what
    the test asserted: a failing status there does not fail the test by itself."""
    item.stash.setdefault(UNACTED_KEY, []).append(row)


def is_media_expectation(expect: object) -> bool:
    """``expect=`` names media (``Media``, or ``{name: Media}``), not verdict words."""
    from ..core.expect import Media

    if isinstance(expect, Media):
        return True
    return (
        isinstance(expect, Mapping)
        and bool(expect)
        and all(isinstance(v, Media) for v in expect.values())
    )


def expected_verdicts(expect: str | tuple[str, ...] | None) -> tuple[str, ...] | None:
    """``expect=`` of a fixture call, checked: which verdicts the test asserts."""
    if expect is None:
        return None
    wanted = (expect,) if isinstance(expect, str) else tuple(expect)
    if set(wanted) - set(_EXPECTABLE) or not wanted:
        raise pytest.UsageError(f"expect={expect!r}: give PASS, FAIL or INCONCLUSIVE")
    return wanted


def act_on_verdict(verdict: Any) -> None:
    """Inside a test: FAIL fails it; INCONCLUSIVE becomes its own outcome (never a pass)."""
    __tracebackhide__ = True
    if verdict.verdict == Verdict.FAIL:
        pytest.fail(verdict.message(), pytrace=False)
    if verdict.verdict == Verdict.INCONCLUSIVE:
        raise Inconclusive(verdict.message())


def settle_verdict(verdict: Any, *, act: bool, expect: tuple[str, ...] | None) -> None:
    """Act on a verdict inside a test.

    With ``expect``, the test asserts the verdict itself (a suite proving its gates can FAIL
    or be INCONCLUSIVE stays green only while they do); without it, :func:`act_on_verdict`.
    """
    __tracebackhide__ = True
    value = str(verdict.verdict)
    if expect is not None:
        if value not in expect:
            pytest.fail(
                f"expected verdict {' or '.join(expect)}, got {value}:\n{verdict.message()}",
                pytrace=False,
            )
        return
    if act:
        act_on_verdict(verdict)


def record_verdict(
    item: pytest.Item,
    row: report.Row,
    verdict: Any,
    *,
    act: bool,
    expect: tuple[str, ...] | None,
    lossy: bool = False,
) -> None:
    """Act on a lossless or speed verdict, and put its row in the table with its status,
    derived once (:func:`~..core.verdict.status_of`) from the verdict, its lossiness and
    ``expect=``."""
    __tracebackhide__ = True
    status, expected = status_of(verdict.verdict, lossy=lossy, expect=expect)
    row = dataclasses.replace(row, status=status, expected=expected)
    add_row(item, row)
    if not act and expect is None:
        not_acted(item, row)
    settle_verdict(verdict, act=act, expect=expect)


#: ``config.stash[RUN_ONCE_KEY]``: the lossless gate tests --reruns was kept from (run once).
RUN_ONCE_KEY = pytest.StashKey[int]()
#: The fixtures through which a test checks a gate, whether it is marked ``lossless`` or not.
_GATE_FIXTURES = frozenset({"golden", "lossless", "speed_gate"})


def _checks_a_gate(item: pytest.Item) -> bool:
    """Marked ``lossless``, or asking for a fixture that checks a gate (a golden in a test not
    marked, as in the README's first example, is a gate too)."""
    if item.get_closest_marker("lossless") is not None:
        return True
    return bool(_GATE_FIXTURES.intersection(getattr(item, "fixturenames", ())))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-rerunfailures runs a failed test again and reports its last attempt: a gate that
    failed once would pass on a lucky rerun, with rows and a receipt of every attempt. A gate
    that failed has failed, so lossless gates are never rerun: ``--reruns`` is kept from them
    (a ``flaky(reruns=0)`` marker, which rerunfailures reads first), and a gate marked
    ``flaky(reruns=N)`` itself is a usage error. Every test that checks a gate, marked
    ``lossless`` or not (#20: an unmarked golden test's later attempts said PASS)."""
    if not config.pluginmanager.hasplugin("rerunfailures"):
        return
    refused, kept = [], 0
    for item in items:
        if not _checks_a_gate(item):
            continue
        marker = item.get_closest_marker("flaky")
        if marker is None:
            if (getattr(config.option, "reruns", 0) or 0) > 0:
                item.add_marker(pytest.mark.flaky(reruns=0))
                kept += 1
            continue
        reruns = marker.kwargs.get("reruns", marker.args[0] if marker.args else 1)
        if reruns:
            refused.append(f"{item.nodeid}: flaky(reruns={reruns})")
    if refused:
        raise pytest.UsageError(
            "pytest-lossless: a lossless gate is never rerun until it passes (a gate that "
            "failed once has failed): remove the flaky marker of "
            + "; ".join(refused)
            + " (pytest-rerunfailures)"
        )
    if kept:
        config.stash[RUN_ONCE_KEY] = config.stash.get(RUN_ONCE_KEY, 0) + kept


def _fail_caught_failure(item: pytest.Item, rep: pytest.TestReport) -> None:
    """A test that passed although one of its checks failed it (a FAIL, an INCONCLUSIVE, an
    ERROR) caught that failure: a retry loop's ``except Exception`` (INCONCLUSIVE is one), an
    ``except BaseException``. It fails, naming the check (#20); a verdict the test only asked
    for (``act=False``) or asserted itself (``expect=``) is its to judge."""
    if not rep.passed:
        return
    unacted = {id(row) for row in item.stash.get(UNACTED_KEY, [])}
    caught = [r for r in item.stash.get(ROWS_KEY, []) if r.failing and id(r) not in unacted]
    if not caught:
        return
    row = caught[0]
    rep.outcome = "failed"
    rep.longrepr = printable(
        f"{item.nodeid}: {row.check} ({row.gate}) said {row.verdict}, and the test went on and "
        "passed: it caught the failure (an except around the check, such as a retry loop's "
        "except Exception). A check that fails fails its test; to only get the verdict, pass "
        "act=False"
    )


def _fail_expected_failure(item: pytest.Item, rep: pytest.TestReport) -> None:
    """A gate that failed under an ``xfail`` mark (or ``pytest.xfail``) fails its test: pytest
    would report it "xfailed", a success, while its row, receipt and JUnit say FAIL. A test
    proves a gate says no with ``expect="FAIL"``, frozen with its plan (#20). An xfail
    whose gates all passed (an assertion after them failed), or whose check could not be made
    (an ERROR: no golden yet), stays an expected failure."""
    if not (rep.skipped and hasattr(rep, "wasxfail")):
        return
    said_no = (Status.FAIL, Status.INCONCLUSIVE)  # compared; a golden not found is an ERROR
    failing = [r for r in item.stash.get(ROWS_KEY, []) if r.failing and r.status in said_no]
    if not failing:
        return
    row = failing[0]
    reason = str(rep.wasxfail)
    del rep.wasxfail
    rep.outcome = "failed"
    rep.longrepr = printable(
        f"{item.nodeid}: {row.check} ({row.gate}) is {row.verdict} under xfail"
        f"{f' ({reason})' if reason else ''}: a gate that failed is never an expected failure. "
        'To prove that a gate says no, assert it with expect="FAIL" (lossless.compare, '
        "speed_gate: frozen with the test's plan); to accept a changed output, update its "
        "golden with --update-goldens; not with xfail"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    marked = item.get_closest_marker("lossless") is not None
    resolved = settings(item.config)
    if marked and not (resolved.lossless or resolved.update_goldens):
        pytest.skip("lossless gate: run with --lossless to compare (it never passes unchecked)")
    if _checks_a_gate(item) and each_on_every_worker(item.config):
        # One test id, one receipt and one golden folder: N runs of it would overwrite each
        # other's receipt (the last writer's verdict standing for all) and race on the update.
        pytest.fail(
            printable(
                f"{item.nodeid} checks a gate, and --dist each (pytest-xdist) runs it on every "
                "worker, where its runs would overwrite one receipt and race on one golden "
                "update: run gates with another --dist mode; to check that a run repeats, use "
                "lossless.compare(runs=N) or a producer given to golden.check"
            ),
            pytrace=False,
        )
    if not marked:
        return
    if (
        resolved.update_goldens
        and not resolved.lossless
        and "golden" not in getattr(item, "fixturenames", ())
    ):
        # Regenerating goldens should not spend minutes on timings that write nothing.
        pytest.skip(
            "--update-goldens: this gate has no golden to write (add --lossless to run it too)"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    if not involved(item) and not (
        call.excinfo is not None and isinstance(call.excinfo.value, Inconclusive)
    ):
        return rep  # a plain test: nothing to decide, carry or record
    # Carried to the controller under xdist; keywords would also match a folder named lossless.
    rep.lossless_gate = item.get_closest_marker("lossless") is not None  # type: ignore[attr-defined]
    if call.when == "call":
        if rep.passed and item.get_closest_marker("lossless") and not item.stash.get(ROWS_KEY, []):
            rep.outcome = "failed"
            rep.longrepr = (
                f"{item.nodeid} is marked lossless but compared nothing: a lossless gate must "
                "call golden.check, lossless.compare or speed_gate (it never passes unchecked)"
            )
        _fail_unclean_runs(item, rep)
        _fail_caught_failure(item, rep)
        _fail_expected_failure(item, rep)
        item.stash[CALL_PASSED_KEY] = rep.passed
        if call.excinfo is not None and isinstance(call.excinfo.value, Inconclusive):
            rep.outcome = "failed"
            rep.longrepr = f"INCONCLUSIVE: {call.excinfo.value}"
            rep.lossless_verdict = Verdict.INCONCLUSIVE.value  # type: ignore[attr-defined]
            # junitxml writes the properties of the teardown report, copied from the item.
            item.user_properties.append(("lossless_verdict", Verdict.INCONCLUSIVE.value))
    if call.when == "teardown" and item.stash.get(CALL_PASSED_KEY, False):
        _fail_unclean_runs(item, rep)  # runs that ended at teardown: servers
    if call.when == "teardown" and settings(item.config).update_goldens:
        _record_updates(item)
    # Last, on the outcome as decided above: the receipt records what pytest reports (a receipt
    # that cannot be written fails the teardown report here).
    receipts.record_report(item, rep)
    item.stash.setdefault(PHASES_KEY, {})[rep.when] = (receipts.phase_outcome(rep), rep)
    if call.when == "teardown":
        _add_outcome_row(item)
        # Attached to the last report so pytest-xdist carries them to the controller.
        rep.lossless_rows = [r.to_dict() for r in item.stash.get(ROWS_KEY, [])]  # type: ignore[attr-defined]
        rep.lossless_golden_events = item.stash.get(EVENTS_KEY, [])  # type: ignore[attr-defined]
    return rep


def _record_updates(item: pytest.Item) -> None:
    """Under --update-goldens, a test that checked goldens gets a receipt too (a golden-only
    test records no comparison): what was written, kept or refused, and its outcome."""
    events = item.stash.get(EVENTS_KEY, [])
    if events or ROWS_KEY in item.stash:
        receipts.receipt_for(item).set_updates(events)


def _add_outcome_row(item: pytest.Item) -> None:
    """The test's own outcome is one of its parts: a test that checked something, then failed
    in a way no row shows (an assertion after its gates, a timeout, a receipt that could not
    be written) gets a row that says so, so the table never reads as passed."""
    rows = item.stash.get(ROWS_KEY, [])
    if not rows or any(row.failing for row in rows):
        return  # nothing was checked, or a row already says what failed
    for phase, (word, rep) in item.stash.get(PHASES_KEY, {}).items():
        if word in ("failed", "inconclusive"):
            add_row(item, report.outcome_row(item.nodeid, word, f"{phase} {word}: {_why(rep)}"))
            return


def _why(rep: pytest.TestReport) -> str:
    """The first line of why a phase failed: pytest's own crash message when it has one."""
    crash = getattr(rep.longrepr, "reprcrash", None)
    text = str(getattr(crash, "message", None) or rep.longrepr or "")
    first = text.strip().splitlines()[0] if text.strip() else "no message"
    return first if len(first) <= 200 else first[:199] + "…"


def _fail_unclean_runs(item: pytest.Item, rep: pytest.TestReport) -> None:
    """A gate whose runs did not all end cleanly is never a pass (under --lossless) and writes
    no golden (under --update-goldens), whatever ``check=`` said: the run's lifecycle is part of
    the evidence (a SIGTERM is not "clean"). Checked after the call (commands) and again after
    teardown (servers stop there). A test not marked ``lossless`` that checked a gate (a
    golden compares without the marker) is held to the same rule (#20); one that checked
    nothing may still assert on an unclean run's record."""
    resolved = settings(item.config)
    marked = item.get_closest_marker("lossless") is not None
    if not rep.passed:
        return
    if not (
        (marked and (resolved.lossless or resolved.update_goldens)) or item.stash.get(ROWS_KEY, [])
    ):
        return
    receipt = item.stash.get(receipts.RECEIPT_KEY, None)
    if receipt is None:
        return
    from ..run import lifecycle_verdict

    unclean = [
        f"{run.get('name')}: {verdict.summary}"
        for run in receipt.runs
        if not (verdict := lifecycle_verdict(run)).clean
    ]
    if unclean:
        rep.outcome = "failed"
        rep.longrepr = (
            f"{item.nodeid}: a {'lossless ' if marked else ''}gate whose runs did not all end "
            "cleanly is not a pass "
            "(check=False only keeps a failed run from stopping the test): " + "; ".join(unclean)
        )


def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, tuple[str, Mapping[str, bool]]] | None:
    if report.when == "call" and getattr(report, "lossless_verdict", None) == Verdict.INCONCLUSIVE:
        return "inconclusive", "I", ("INCONCLUSIVE", {"yellow": True})
    return None
