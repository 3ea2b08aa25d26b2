"""End to end, from outside (#20): verdicts derived by code, as an attacker who can recompute
every unkeyed hash sees them. One real session (golden gates lossless and lossy, a comparison
with a dispatch proof, a lossy comparison, one whose outputs miss the media asked for, a speed
gate, a run killed at its timeout, the canaries) is tampered with one field at a time; each
tampered receipt is resealed as the plugin would write it (``verdicts`` re-derived,
``integrity.raw_sha256``, the index's SHA-256 of it, ``SUMMARY.md`` and its SHA-256), so only a
re-derivation from the raw measurements can tell. ``verify`` must name each one.

Before, these went unnoticed: a lossy golden gate recorded ``lossless: true`` (LOSSY-PASS read
as PASS), a pass recorded under another gate than the manifest froze, the obtained artifact's
SHA-256 (the attested subject) disagreeing with its fingerprint, a comparison's ``lossy: false``
beside tolerance gates, ``control_repeatable``, request-coverage misses removed (a FAIL read as
PASS), a dispatch proof dropped while the frozen plan names its rule (INCONCLUSIVE read as
PASS), a proof found with no evidence, ``target_ratio``, a process's ``forced`` flag."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy  # noqa: F401  (loaded once before the plugin's modules read receipts)
import pytest

from pytest_lossless.__main__ import verify_command
from pytest_lossless.evidence.receipts import derive_verdicts, raw_sha256
from pytest_lossless.evidence.summary_md import write_summary
from tests.e2e.alone import run_pytest

pytestmark = pytest.mark.slow

PROJECT = """
import sys
import numpy as np
import pytest
import soundfile
from pytest_lossless import Media, tolerance

SLEEP = "import sys, time; time.sleep(float(sys.argv[1]))"
WRITE = (
    "import sys, pathlib; print('fast path: fused'); "
    "pathlib.Path(sys.argv[1], 'out.bin').write_bytes(sys.argv[2].encode())"
)

def _run(model_run, text):
    return lambda: model_run([sys.executable, "-c", WRITE, "{out}", text],
                             outputs={"out.bin": "{out}/out.bin"})

@pytest.mark.lossless
def test_golden(golden):
    golden.check("t.npy", lambda: np.arange(6, dtype=np.float32))
    golden.check("lossy.npy", lambda: np.arange(6, dtype=np.float32), gate=tolerance(atol=0.5))

@pytest.mark.lossless
def test_compare(model_run, lossless):
    lossless.compare(_run(model_run, "same"), _run(model_run, "same"), runs=2, label="c",
                     proof="fast path")

@pytest.mark.lossless
def test_lossy_compare(lossless):
    arrays = lambda: {"t": np.arange(6, dtype=np.float32)}
    lossless.compare(arrays, arrays, runs=2, label="l", gate=tolerance(atol=0.5))

@pytest.mark.lossless
def test_coverage(lossless, tmp_path):
    def wav():
        count = iter(range(100))
        def make():
            path = tmp_path / f"a{next(count)}.wav"
            soundfile.write(path, np.zeros(4000, dtype=np.int16), 8000, subtype="PCM_16")
            return {"a.wav": path}
        return make
    verdict = lossless.compare(wav(), wav(), runs=2, label="cov", act=False,
                               expect=Media(seconds=1, sample_rate=8000, channels=1))
    assert verdict.verdict == "FAIL"

@pytest.mark.lossless
def test_speed(model_run, speed_gate):
    control = lambda: model_run([sys.executable, "-c", SLEEP, "0.12"])
    candidate = lambda: model_run([sys.executable, "-c", SLEEP, "0.01"])
    speed_gate(control, candidate, target=0.30, pairs=8, seed=5, workload="w")

def test_signal(model_run):
    model_run([sys.executable, "-c", SLEEP, "5"], timeout=0.5, check=False)
"""

Receipt = dict[str, Any]


def _gate(receipt: Receipt, artifact: str) -> dict[str, Any]:
    gate: dict[str, Any] = next(g for g in receipt["gates"] if g["artifact"] == artifact)
    return gate


def _set(*path: str | int, value: Any) -> Callable[[Receipt], None]:
    def mutate(receipt: Receipt) -> None:
        target: Any = receipt
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _each(mutations: list[Callable[[Receipt], None]]) -> Callable[[Receipt], None]:
    def mutate(receipt: Receipt) -> None:
        for one in mutations:
            one(receipt)

    return mutate


def _all_runs(key: str, value: Any) -> Callable[[Receipt], None]:
    def mutate(receipt: Receipt) -> None:
        for run in receipt["lossless"][0]["runs"]:
            run["artifacts"]["a.wav"]["fingerprint"][key] = value

    return mutate


def _all_coverage(key: str, value: Any) -> Callable[[Receipt], None]:
    def mutate(receipt: Receipt) -> None:
        for miss in receipt["lossless"][0]["coverage"]:
            miss[key] = value

    return mutate


def _golden(artifact: str, *path: str, value: Any) -> Callable[[Receipt], None]:
    def mutate(receipt: Receipt) -> None:
        target: Any = _gate(receipt, artifact)
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


TOL = "tolerance(atol=1, rtol=0)"
LOSSY = "tolerance(atol=0.5, rtol=0)"
PROOF = ("lossless", 0, "proof", "runs", 0)

#: (case, test whose receipt is changed, the change, what verify must say). Every field that
#: a verdict is read from, each changed alone; the receipt is resealed after the change.
CASES: list[tuple[str, str, Callable[[Receipt], None], str]] = [
    # golden gates: the comparison, the gate, its lossless flag, both sides' digests
    (
        "gate passed",
        "test_golden",
        _golden("t.npy", "passed", value=False),
        "recorded passed=False but its fingerprints give passed=True",
    ),
    (
        "gate lossless flag",
        "test_golden",
        _golden("lossy.npy", "lossless", value=True),
        f"recorded lossless=True but its gate {LOSSY} is lossy",
    ),
    (
        "gate spec",
        "test_golden",
        _each(
            [
                _golden("lossy.npy", "gate", value="elementwise"),
                _golden("lossy.npy", "lossless", value=True),
            ]
        ),
        f"recorded a pass under elementwise, but the golden's manifest froze {LOSSY}",
    ),
    (
        "gate frozen in the golden",
        "test_golden",
        _golden("t.npy", "evidence", "golden", "gate", value=TOL),
        f"recorded a pass under elementwise, but the golden's manifest froze {TOL}",
    ),
    (
        "obtained fingerprint",
        "test_golden",
        _golden("t.npy", "evidence", "obtained", "fingerprint", "sha256", value="0" * 64),
        "the obtained artifact's sha256 1fda460b60e45aef differs from its fingerprint's",
    ),
    (
        "obtained subject digest",
        "test_golden",
        _golden("t.npy", "evidence", "obtained", "sha256", value="0" * 64),
        "the obtained artifact's sha256 0000000000000000 differs from its fingerprint's",
    ),
    (
        "gate mismatch count",
        "test_golden",
        _golden("t.npy", "mismatch_count", value=3),
        "recorded passed=True with mismatch_count=3",
    ),
    (
        "lossy count beyond",
        "test_golden",
        _golden("lossy.npy", "diagnostics", "count_beyond", value=2),
        "recorded passed=True with count_beyond=2",
    ),
    (
        "lossy largest difference",
        "test_golden",
        _golden("lossy.npy", "diagnostics", "max_abs_diff", value=3.0),
        "max_abs_diff=3.0 and count_beyond=0 disagree",
    ),
    # the canaries
    (
        "canary status",
        "test_golden",
        _set("canary", 0, "status", value="cannot-fail"),
        "recorded cannot-fail, but the comparator said FAIL there",
    ),
    (
        "canary verdict",
        "test_golden",
        _set("canary", 0, "verdict", value="PASS"),
        "recorded proved, but the comparator said PASS",
    ),
    (
        "canary located",
        "test_golden",
        _set("canary", 0, "located", value=False),
        "(named the changed unit: False)",
    ),
    # a canary record removed: the gate it proved is compared with no record in the session
    (
        "canary entries removed",
        "test_golden",
        _set("canary", value=[]),
        "no receipt of its session holds the canary record of tensor/elementwise",
    ),
    # the test's own outcome, against the session's index
    (
        "test outcome",
        "test_golden",
        _set("outcome", "call", value="failed"),
        "records its test failed (setup passed, call failed, teardown passed), but the "
        "session's INDEX.json records test_fields.py::test_golden as passed",
    ),
    # lossless.compare: verdict, comparisons, lossy flag, repeatability, proof, coverage
    (
        "lossless verdict",
        "test_compare",
        _set("lossless", 0, "verdict", value="FAIL"),
        "recorded FAIL but its comparisons give PASS",
    ),
    (
        "candidate comparison",
        "test_compare",
        _set("lossless", 0, "candidate_comparison", "results", 0, "passed", value=False),
        "recorded passed=False but the fingerprints give True",
    ),
    (
        "control repeatable",
        "test_compare",
        _set("lossless", 0, "control_repeatable", value=False),
        "recorded control_repeatable=False but its control comparisons give True",
    ),
    (
        "comparison gates",
        "test_compare",
        _set("lossless", 0, "gates", value={"out.bin": TOL}),
        f"recorded lossy=False but its gates (out.bin: {TOL}) give lossy=True",
    ),
    (
        "comparison lossy flag",
        "test_lossy_compare",
        _set("lossless", 0, "lossy", value=False),
        f"recorded lossy=False but its gates (t: {LOSSY}) give lossy=True",
    ),
    (
        "proof found",
        "test_compare",
        _set(*PROOF, "found", value=False),
        "recorded PASS but its comparisons give INCONCLUSIVE",
    ),
    (
        "proof evidence",
        "test_compare",
        _set(*PROOF, "evidence", value=""),
        "found with no evidence to show it",
    ),
    (
        "proof dropped",
        "test_compare",
        _set("lossless", 0, "proof", value=None),
        "ran with proof rule None but the frozen plan says 'regex fast path'",
    ),
    (
        "expected verdict added",
        "test_compare",
        _set("lossless", 0, "expect_verdict", value=["FAIL"]),
        "records expect_verdict=['FAIL'] but the frozen plan asserts None",
    ),
    (
        "coverage misses removed",
        "test_coverage",
        _each(
            [
                _set("lossless", 0, "coverage", value=[]),
                _set("lossless", 0, "verdict", value="PASS"),
            ]
        ),
        "candidate a.wav misses the media asked for",
    ),
    (
        "coverage miss passed",
        "test_coverage",
        _all_coverage("passed", True),
        "recorded passed=True, but a coverage entry is a miss",
    ),
    (
        "coverage fingerprint",
        "test_coverage",
        _all_runs("sample_count", 8000),
        "coverage names candidate a.wav as a miss, but its recorded fingerprint holds",
    ),
    # speed_gate: verdict, every derived number, the raw samples and the settings
    (
        "speed verdict",
        "test_speed",
        _set("speed", 0, "verdict", value="FAIL"),
        "recorded verdict FAIL but the raw samples give PASS",
    ),
    ("speed ratio", "test_speed", _set("speed", 0, "ratio", value=0.1), "recorded ratio 0.1"),
    ("speed interval", "test_speed", _set("speed", 0, "ci", value=[0.1, 0.2]), "recorded ci"),
    (
        "speed target",
        "test_speed",
        _set("speed", 0, "target", value=0.1),
        "ran target=0.1 but the frozen plan says target=0.3",
    ),
    (
        "speed target ratio",
        "test_speed",
        _set("speed", 0, "target_ratio", value=0.95),
        "recorded target_ratio=0.95 but target=0.3 gives 0.7",
    ),
    (
        "speed sample",
        "test_speed",
        _set("speed", 0, "samples", 0, "seconds", value=9.0),
        "sample #0: 9.0 s, but its run command-01 records",
    ),
    (
        "speed confidence",
        "test_speed",
        _set("speed", 0, "confidence", value=0.5),
        "ran confidence=0.5 but the frozen plan says confidence=0.95",
    ),
    ("speed seed", "test_speed", _set("speed", 0, "seed", value=6), "the seeded schedule (seed 6)"),
    (
        "speed pairs",
        "test_speed",
        _set("speed", 0, "pairs", value=2),
        "ran pairs=2 but the frozen plan says pairs=8",
    ),
    (
        "speed errors",
        "test_speed",
        _set("speed", 0, "errors", value=["x"]),
        "recorded errors ['x'] but the raw samples give []",
    ),
    # a run's lifecycle: killed by SIGTERM at its timeout
    (
        "lifecycle clean",
        "test_signal",
        _set("runs", 0, "lifecycle", "clean", value=True),
        "recorded lifecycle clean=True but the raw record gives clean=False",
    ),
    (
        "run timed out",
        "test_signal",
        _set("runs", 0, "timed_out", value=False),
        "differs from the one generated from the raw record",
    ),
    (
        "process forced",
        "test_signal",
        _set("runs", 0, "processes", 0, "forced", value=False),
        "recorded forced=False but its signals received give True",
    ),
    (
        "signals received",
        "test_signal",
        _set("runs", 0, "processes", 0, "signals_received", value=[]),
        "recorded forced=True but its signals received give False",
    ),
    (
        "run exit status",
        "test_signal",
        _each([_set("runs", 0, "signal", value=None), _set("runs", 0, "exit_code", value=0)]),
        "exit_code/signal 0/None differ from the main process's None/SIGTERM",
    ),
    (
        "main process exit status",
        "test_signal",
        _each(
            [
                _set("runs", 0, "processes", 0, "signal", value=None),
                _set("runs", 0, "processes", 0, "exit_code", value=0),
            ]
        ),
        "exit_code/signal None/SIGTERM differ from the main process's 0/None",
    ),
]


@pytest.fixture(scope="module")
def session_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's goldens and plans (one ``--update-goldens`` session), then one comparing
    session: its folder, which verifies clean."""
    project = tmp_path_factory.mktemp("fields")
    (project / "test_fields.py").write_text(PROJECT)
    updated = run_pytest(
        project, project.parent / f"{project.name}-up", "--update-goldens", "--lossless"
    )
    assert updated.ret == 0, updated.outlines
    shutil.rmtree(project / "lossless-receipts")
    ran = run_pytest(project, project.parent / f"{project.name}-run", "--lossless")
    ran.assert_outcomes(passed=6)
    (session,) = (p for p in (project / "lossless-receipts").iterdir() if p.is_dir())
    return session


def _reseal(session: Path, name: str, receipt: Receipt) -> None:
    """Write ``receipt`` as the plugin would have, every unkeyed hash recomputed: its derived
    verdicts and raw hash, the index's digest of it, the session's summary and its digest."""
    receipt["verdicts"] = derive_verdicts(receipt)
    receipt["integrity"]["raw_sha256"] = raw_sha256(receipt)
    path = session / name
    path.write_text(json.dumps(receipt, indent=2))
    index = json.loads((session / "INDEX.json").read_text())
    for entry in index["receipts"]:
        if entry["file"] == name:
            entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    write_summary(session)
    summary = (session / "SUMMARY.md").read_bytes()
    index["summary"]["sha256"] = hashlib.sha256(summary).hexdigest()
    (session / "INDEX.json").write_text(json.dumps(index, indent=2))


def _tamper_and_verify(
    session_once: Path, tmp_path: Path, test: str, change: Callable[[Receipt], None] | None
) -> tuple[int, str]:
    folder = tmp_path / "lossless-receipts"
    session = folder / session_once.name
    shutil.copytree(session_once, session, symlinks=True)
    if change is not None:
        name = f"test_fields.py__{test}.json"
        receipt = json.loads((session / name).read_text())
        change(receipt)
        _reseal(session, name, receipt)
    out = io.StringIO()
    status = verify_command([folder], out=out, entry_points=False)
    return status, out.getvalue()


def test_the_untouched_session_verifies(session_once: Path, tmp_path: Path) -> None:
    status, text = _tamper_and_verify(session_once, tmp_path, "", None)
    assert status == 0, text


@pytest.mark.parametrize(
    ("test", "change", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_verdict_field_tampered_is_named(
    session_once: Path, tmp_path: Path, test: str, change: Callable[[Receipt], None], named: str
) -> None:
    status, text = _tamper_and_verify(session_once, tmp_path, test, change)
    assert status == 1, text
    assert f"CONTRADICTION {tmp_path}" in text, text
    assert named in text, text


def test_an_index_outcome_changed_is_named(session_once: Path, tmp_path: Path) -> None:
    """The reverse of "test outcome": the index says a test failed whose receipt says it
    passed (an index rewritten so that a test's failure reads as another's, or a receipt put
    in place of a failed one)."""
    folder = tmp_path / "lossless-receipts"
    session = folder / session_once.name
    shutil.copytree(session_once, session, symlinks=True)
    index = json.loads((session / "INDEX.json").read_text())
    for test in index["tests"]:
        if test["test_id"] == "test_fields.py::test_speed":
            test["outcome"], test["reason"] = "failed", "call failed"
    (session / "INDEX.json").write_text(json.dumps(index, indent=2))
    out = io.StringIO()
    status = verify_command([folder], out=out, entry_points=False)
    text = out.getvalue()
    assert status == 1, text
    assert (
        f"CONTRADICTION {session / 'test_fields.py__test_speed.json'}: the receipt of "
        "test_fields.py::test_speed records its test passed (setup passed, call passed, "
        "teardown passed), but the session's INDEX.json records test_fields.py::test_speed "
        "as failed"
    ) in text, text


OUTCOMES = """
import pathlib
import numpy as np
import pytest

def _check(golden, name):
    golden.check(name, lambda: np.arange(6, dtype=np.float32))

@pytest.mark.lossless
def test_fails(golden):
    _check(golden, "a.npy")
    assert False, "after its gate"

@pytest.mark.lossless
@pytest.mark.xfail(reason="known")
def test_xfails(golden):
    _check(golden, "a.npy")
    assert False

@pytest.mark.lossless
@pytest.mark.xfail(reason="not any more", strict=False)
def test_xpasses(golden):
    _check(golden, "a.npy")

@pytest.mark.lossless
def test_skips_after_its_gate(golden):
    _check(golden, "a.npy")
    pytest.skip("after its gate")

@pytest.mark.lossless
def test_passes(golden):
    _check(golden, "a.npy")
"""


@pytest.mark.parametrize(
    "extra", [(), ("-p", "xdist", "-n", "2"), ("--lossless-no-canary",)], ids=str
)
def test_every_outcome_agrees_with_its_index(tmp_path: Path, extra: tuple[str, ...]) -> None:
    """No false alarm from the two session checks (#20): a test failed after its gate, an
    xfail, an xpass, a skip after the gate (a gate is never rerun: the plugin refuses it),
    under xdist (each worker its own canaries) and with the canary skipped; each receipt's
    outcome agrees with the index, and each (kind, gate) has its canary record somewhere in
    the session."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_outcomes.py").write_text(OUTCOMES)
    updated = run_pytest(project, tmp_path / "up", "--update-goldens")
    assert (project / "goldens").is_dir(), updated.outlines
    shutil.rmtree(project / "lossless-receipts")
    ran = run_pytest(project, tmp_path / "run", "--lossless", *extra)
    (session,) = (p for p in (project / "lossless-receipts").iterdir() if p.is_dir())
    index = json.loads((session / "INDEX.json").read_text())
    outcomes = {t["test_id"].split("::")[1]: t["outcome"] for t in index["tests"]}
    assert outcomes == {
        "test_fails": "failed",
        "test_xfails": "xfailed",
        "test_xpasses": "passed",
        "test_skips_after_its_gate": "failed",  # a gate skipped after comparing fails
        "test_passes": "passed",
    }, ran.outlines
    out = io.StringIO()
    verify_command([project / "lossless-receipts"], out=out, entry_points=False)
    text = out.getvalue()
    assert "CONTRADICTION" not in text, text
    assert "INCOMPLETE" not in text, text
    canaries = [
        c for p in session.glob("*.json") for c in json.loads(p.read_text()).get("canary", [])
    ]
    assert canaries, text
