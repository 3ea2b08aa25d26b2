"""The pure part of ``bisect``: what a step's INDEX.json and receipts make of it (good, bad or
skipped), and the command line's own parsing. The git and pytest part is tests/e2e."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_lossless.__main__ import _split_pytest_args
from pytest_lossless.bisect import (
    GIT_EXIT,
    MARKS,
    BisectError,
    GateTest,
    Step,
    gate_test,
    judge_session,
    judge_tests,
    parse_build,
)

MISMATCH = {
    "artifact": "audio.wav",
    "kind": "audio",
    "gate": "decoded",
    "lossless": True,
    "passed": False,
    "first_mismatch": "1234 (channel 0)",
    "mismatch_count": 1,
    "total": 4800,
    "unit": "sample",
}
MATCH = {**MISMATCH, "passed": True, "first_mismatch": None, "mismatch_count": 0}
UNREPEATABLE = {
    "verdict": "INCONCLUSIVE",
    "label": "golden 'audio.wav' producer",
    "control_repeatable": False,
    "control_comparisons": [
        {"left": "run#1", "right": "run#2", "missing": [], "results": [MISMATCH]}
    ],
    "candidate_comparison": None,
}


def _receipt(overall, gates=(), lossless=(), speed=(), runs=()):
    return {
        "gates": list(gates),
        "lossless": list(lossless),
        "speed": list(speed),
        "verdicts": {"overall": overall, "lifecycle": {"runs": list(runs)}},
    }


def _entry(outcome="passed", gate=True, test_id="t.py::test_a", reason=None):
    return {"test_id": test_id, "outcome": outcome, "gate": gate, "reason": reason}


def _test(outcome="passed", overall="PASS", **kwargs):
    return GateTest(test_id=kwargs.pop("test_id", "t.py::test_a"), outcome=outcome, gate=True,
                    overall=overall, **kwargs)  # fmt: skip


def test_a_mismatch_is_a_failure_and_an_error_entry_is_a_problem_never_a_failure():
    test = gate_test(
        _entry("failed"),
        _receipt(
            "FAIL",
            gates=[
                MISMATCH,
                {"artifact": "v.mp4", "error": "GoldenMissing", "message": "no golden"},
            ],
        ),
    )
    (failure,) = test.failures
    assert "artifact 'audio.wav' (audio), gate decoded (lossless): FAIL" in failure
    assert "first differing sample: 1234" in failure
    assert test.problems == ("GoldenMissing: no golden",)
    errored = gate_test(
        _entry("failed"), _receipt("FAIL", gates=[{"artifact": "a", "error": "GateChanged"}])
    )
    assert errored.failures == ()
    assert judge_tests([errored]).verdict == "ERROR"  # a frozen-gate error blames nothing


def test_lossless_speed_and_lifecycle_entries():
    candidate = {"results": [MISMATCH], "missing": ["b.npy"]}
    test = gate_test(
        _entry("failed"),
        _receipt(
            "FAIL",
            lossless=[
                {"verdict": "FAIL", "label": "fast", "candidate_comparison": candidate},
                UNREPEATABLE,
            ],
            speed=[{"verdict": "FAIL", "workload": "5s"}, {"verdict": "INCONCLUSIVE"}],
            runs=[{"name": "command-01", "clean": False, "summary": "not clean (SIGKILL)"}],
        ),
    )
    assert test.failures[0].startswith("fast: FAIL\nartifact 'audio.wav'")
    assert "b.npy: missing in one run" in test.failures[0]
    assert test.failures[1] == "speed gate 5s: FAIL"
    assert test.problems == (
        "golden 'audio.wav' producer: the control is not repeatable (audio.wav varied)",
        "speed gate: INCONCLUSIVE",
        "run command-01: not clean (SIGKILL)",
    )


def test_pass_is_good_and_lossy_pass_too():
    verdict = judge_tests([_test(), _test(overall="LOSSY-PASS", test_id="t.py::test_b")])
    assert (verdict.verdict, verdict.mark, verdict.gates_run) == ("PASS", "good", 2)
    assert verdict.reason == "2 gate tests passed"


def test_a_changed_output_is_bad_whatever_else_happened():
    failed = _test("failed", "FAIL", failures=("artifact 'a.npy': FAIL",))
    flaky = _test("failed", "INCONCLUSIVE", test_id="t.py::test_b", problems=("varied",))
    skipped = _test("skipped", None, test_id="t.py::test_c", reason="no GPU")
    verdict = judge_tests([flaky, skipped, failed])
    assert (verdict.verdict, verdict.mark) == ("FAIL", "bad")
    assert verdict.reason == "t.py::test_a: artifact 'a.npy': FAIL"
    assert verdict.message == "t.py::test_a:\n    artifact 'a.npy': FAIL"
    assert verdict.gates_run == 2
    two = judge_tests([failed, _test("failed", "FAIL", test_id="t.py::z", failures=("x: FAIL",))])
    assert two.reason.endswith("(and 1 more test)")


@pytest.mark.parametrize(
    ("tests", "verdict", "reason"),
    [
        (
            [_test(), _test("failed", "INCONCLUSIVE", problems=("the control is not repeatable",))],
            "INCONCLUSIVE",
            "t.py::test_a: the control is not repeatable",
        ),
        ([_test("skipped", None, reason="no GPU")], "SKIPPED", "t.py::test_a: no GPU"),
        ([_test("xfailed", None)], "SKIPPED", "t.py::test_a: xfailed"),
        (
            [_test("failed", None, reason="call failed")],
            "ERROR",
            "t.py::test_a: call failed",
        ),  # a crash before any comparison: the model, not its output
        ([_test("passed", "FAIL", problems=("run x: not clean",))], "ERROR", "t.py::test_a: run x"),
        ([_test("not run", None, reason="interrupted")], "ERROR", "t.py::test_a: interrupted"),
        ([_test("passed", None)], "ERROR", "t.py::test_a: passed, verdict none"),
        ([_test("deselected", None)], "NO GATE", "the selection ran no lossless gate"),
        ([], "NO GATE", "the selection ran no lossless gate"),
    ],
)
def test_what_cannot_judge_is_skipped_with_its_reason(tests, verdict, reason):
    found = judge_tests(tests)
    assert found.verdict == verdict
    assert found.reason.startswith(reason)
    assert found.mark == "skip"
    assert GIT_EXIT[found.mark] == 125


def test_a_plain_test_without_a_verdict_does_not_count():
    plain = GateTest(test_id="t.py::plain", outcome="failed", gate=False, overall=None)
    assert judge_tests([_test(), plain]).verdict == "PASS"


def test_every_verdict_has_a_mark_and_git_exit():
    assert {MARKS[v] for v in MARKS} == {"good", "bad", "skip"}
    assert GIT_EXIT == {"good": 0, "bad": 1, "skip": 125}


def _session(tmp_path: Path, tests, receipts, finished=True) -> Path:
    session = tmp_path / "receipts" / "20260101T000000Z-host-abc"
    session.mkdir(parents=True)
    for name, receipt in receipts.items():
        (session / name).write_text(json.dumps(receipt))
    index = {"finished": finished, "state": "finished" if finished else "interrupted"}
    (session / "INDEX.json").write_text(json.dumps({**index, "tests": tests}))
    return tmp_path / "receipts"


def test_judge_session_reads_the_index_and_each_receipt(tmp_path):
    folder = _session(
        tmp_path,
        [{**_entry("failed"), "receipt": "a.json"}, {**_entry(test_id="t.py::b"), "receipt": None}],
        {"a.json": _receipt("FAIL", gates=[MISMATCH])},
    )
    verdict = judge_session(folder, 1)
    assert verdict.verdict == "FAIL"
    assert "first differing sample: 1234" in verdict.message


def test_judge_session_without_an_index_or_unfinished_is_an_error(tmp_path):
    assert judge_session(tmp_path / "none", 4).reason == (
        "pytest exited 4 and wrote no session INDEX.json"
    )
    folder = _session(
        tmp_path, [{**_entry(), "receipt": "a.json"}], {"a.json": _receipt("PASS", [MATCH])}, False
    )
    verdict = judge_session(folder, 2)
    assert (verdict.verdict, verdict.reason) == ("ERROR", "the session did not finish: interrupted")
    (folder / "20260101T000000Z-host-abc" / "a.json").write_text("{")
    assert judge_session(folder, 2).reason.startswith("a.json: unreadable receipt")


def test_build_is_split_like_a_shell_never_run_by_one():
    assert parse_build(None) is None
    assert parse_build("make -j4 'CFLAGS=-O2 -g'") == ("make", "-j4", "CFLAGS=-O2 -g")
    assert parse_build("echo a; rm -rf b") == ("echo", "a;", "rm", "-rf", "b")  # no shell
    with pytest.raises(BisectError, match="cannot be split"):
        parse_build("'unclosed")
    with pytest.raises(BisectError, match="give the command"):
        parse_build("  ")


def test_pytest_args_are_everything_after_the_first_double_dash():
    argv = ["bisect", "v1", "v2", "--build", "make", "--", "-k", "audio", "--", "x"]
    assert _split_pytest_args(argv) == (argv[:5], ["-k", "audio", "--", "x"])
    assert _split_pytest_args(["bisect", "v1", "v2"]) == (["bisect", "v1", "v2"], [])
    assert _split_pytest_args(["verify", "--", "d"]) == (["verify", "--", "d"], [])


def test_a_step_of_bisect_json_reads_and_writes_back_exactly() -> None:
    """A ``bisect.json`` step as the code before #19 wrote it (a skipped INCONCLUSIVE one)."""
    old = {
        "step": 3,
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "subject": "c3: racy reduction",
        "verdict": "INCONCLUSIVE",
        "mark": "skip",
        "git_bisect_run_exit": 125,
        "reason": "tests/test_audio.py::test_audio: lossless.compare: the control is not "
        "repeatable (audio.wav varied)",
        "message": "",
        "gates_run": 1,
        "seconds": 4.187,
        "receipts": "/tmp/bisect/steps/03-0123456789ab/receipts",
        "pytest_log": "/tmp/bisect/steps/03-0123456789ab/pytest.log",
    }
    step = Step.from_json(old)
    assert step.verdict.mark == "skip"
    assert step.folder == Path("/tmp/bisect/steps/03-0123456789ab")
    assert json.dumps(step.to_json()) == json.dumps(old)


def test_judged_entries_reads_each_part_of_a_receipt_as_recorded() -> None:
    """The reading bisect shares with the attestation (core.verdict.judged_entries)."""
    from pytest_lossless.core.verdict import Verdict, judged_entries

    receipt = {
        "gates": [
            {"passed": True, "lossless": True},
            {"passed": True, "lossless": False},
            {"passed": False, "error": "GoldenMissing"},
            "not an entry",
        ],
        "lossless": [{"verdict": "PASS", "lossy": True}, {"verdict": "FORGED"}],
        "speed": [{"verdict": "INCONCLUSIVE"}],
    }
    assert [(b, v) for b, _, v in judged_entries(receipt)] == [
        ("gates", Verdict.PASS),
        ("gates", Verdict.LOSSY_PASS),
        ("gates", Verdict.FAIL),
        ("lossless", Verdict.LOSSY_PASS),
        ("lossless", None),
        ("speed", Verdict.INCONCLUSIVE),
    ]
