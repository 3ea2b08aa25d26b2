"""Unit tests of receipts.py and the verify CLI: writing, loading, and catching edits."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pytest_lossless.__main__ import main
from pytest_lossless.compare.repeatability import compare_control_candidate
from pytest_lossless.errors import ReceiptError
from pytest_lossless.evidence.index import build_index, write_index
from pytest_lossless.evidence.receipts import (
    SCHEMA_VERSION,
    Receipt,
    ReceiptRecord,
    derive_verdicts,
    load,
    load_all,
    load_json,
    receipt_name,
)
from pytest_lossless.evidence.summary_md import write_summary
from pytest_lossless.evidence.verify import Context, default_checkers, verify, verify_receipt
from pytest_lossless.kinds.registry import KindRegistry

DIFF = "diff --git a/m.py b/m.py\n-old\n+new \udcff\n"


def _run(**overrides: Any) -> dict[str, Any]:
    main_proc = {
        "pid": 10,
        "role": "main",
        "ppid": 1,
        "ppid_last": 1,
        "comm": "python",
        "observed": "reaped",
        "exit_code": 0,
        "signal": None,
        "forced": False,
        "signals_received": [],
        "ended_seconds": 1.0,
    }
    record: dict[str, Any] = {
        "kind": "command",
        "name": "command-01",
        "processes": [main_proc],
        "signals": [],
        "leftovers": [],
        "timed_out": False,
        "exit_code": 0,
        "signal": None,
    }
    record.update(overrides)
    return record


def _runspec(diff: str = DIFF, **source: Any) -> dict[str, Any]:
    raw = diff.encode("utf-8", errors="surrogateescape")
    base = {
        "revision": "a" * 40,
        "dirty": bool(diff),
        "diff": diff,
        "diff_sha256": hashlib.sha256(raw).hexdigest(),
        "diff_bytes": len(raw),
        "untracked": [],
        "remote_branches": [],
        "published": False,
        "publication": "unpublished",
    }
    base.update(source)
    return {"source": base, "inputs": {}, "versions": {"python": "3"}}


def _seal(folder: Path) -> None:
    """End the folder's session as the plugin does: its SUMMARY.md, then its INDEX.json (a
    session folder keeps the name of its session: verify names a renamed one)."""
    write_summary(folder)
    write_index(folder, build_index(folder, session_id=folder.name))


class Allocationish:
    def __init__(self) -> None:
        self.released_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"ids": ["0"], "released_at": self.released_at}


def _lossless_block(folder: Path) -> dict[str, Any]:
    """A real lossless verdict block: two identical control runs and an identical candidate."""
    verdict = compare_control_candidate(
        lambda: {"out.bin": b"same"},
        lambda: {"out.bin": b"same"},
        runs=2,
        kinds=KindRegistry(),
        workdir=Path(tempfile.mkdtemp(prefix="runs-")),
    )
    return verdict.to_json()


def _write(folder: Path, *, test_id: str = "tests/test_m.py::test_a[x/y]", **kw: Any) -> Path:
    receipt = Receipt(test_id)
    receipt.set_runspec(kw.get("runspec", _runspec()))
    allocation = Allocationish()
    receipt.set_allocation(allocation)
    for run in kw.get("runs", [_run()]):
        receipt.add_run(run)
    same = {"kind": "bytes", "fingerprint": {"size": 4, "sha256": "ab" * 32}}
    receipt.add_gate(
        {
            "artifact": "video",
            "gate": "bytes",
            "passed": True,
            "lossless": True,
            "evidence": {"golden": same, "obtained": same},
        }
    )
    receipt.add_lossless(_lossless_block(folder))
    receipt.set_outcome("call", "passed")
    allocation.released_at = "2026-01-01T00:00:00.000Z"  # read late: shows the release
    return receipt.write(folder)


def _edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_receipt_name_is_safe_and_bounded() -> None:
    # A parameter id loses its brackets and its '/': the name gains a hash of the whole id, so
    # test_a[x/y], test_a[x_y] and test_a_x[y] keep a receipt each (#20).
    assert receipt_name("tests/e2e/test_m.py::test_a[x/y]") == (
        "tests_e2e_test_m.py__test_a_x_y-4b42ba7ba95b"
    )
    assert receipt_name("tests/e2e/test_m.py::test_a") == "tests_e2e_test_m.py__test_a"
    names = {receipt_name(f"t.py::{t}") for t in ("test_a[x/y]", "test_a[x_y]", "test_a_x[y]")}
    assert len(names | {receipt_name("t.py::test_a_x_y")}) == 4
    long = receipt_name("t::" + "a" * 400)
    assert len(long) < 160
    assert long != receipt_name("t::" + "a" * 399)
    assert "/" not in receipt_name("../../etc/passwd")
    assert not receipt_name("../../etc/passwd").startswith(".")


DIFF_SHA256 = hashlib.sha256(DIFF.encode("utf-8", errors="surrogateescape")).hexdigest()
#: A real session of the GPU run (tests/gpu), written with one ``.diff`` beside each receipt.
GPU_SESSION = Path(__file__).parents[1] / "data/gpu/ref2va/20261201T225959.909Z-vm-5067d6"


def test_write_is_atomic_with_diff_stored_by_digest_and_derived_blocks(tmp_path: Path) -> None:
    # The diff is stored once per session, named by its SHA-256 (#20): no longer beside the
    # receipt as <name>.diff, which stored the same 2 MB once per test on the GPU run.
    path = _write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "diffs",
        "tests_test_m.py__test_a_x_y-777206a90083.json",
    ]
    diff = tmp_path / "diffs" / f"{DIFF_SHA256}.diff"
    assert diff.read_bytes() == DIFF.encode("utf-8", errors="surrogateescape")
    data = load_json(path)
    assert data["schema_version"] == SCHEMA_VERSION
    assert "diff" not in data["runspec"]["source"]
    assert data["runspec"]["source"]["diff_file"] == f"diffs/{diff.name}"
    assert data["allocation"]["released_at"] == "2026-01-01T00:00:00.000Z"
    assert data["runs"][0]["lifecycle"]["clean"] is True
    assert data["verdicts"]["lifecycle"]["clean"] is True
    assert data["verdicts"]["overall"] == "PASS"
    assert data["outcome"] == {"call": "passed"}
    assert verify_receipt(path) == []
    assert verify(tmp_path) == []


def test_clean_tree_writes_no_diff(tmp_path: Path) -> None:
    _write(tmp_path, runspec=_runspec(""))
    assert [p.suffix for p in tmp_path.iterdir()] == [".json"]
    assert verify(tmp_path) == []


def test_verify_catches_a_clean_claim_over_a_sigkilled_process(tmp_path: Path) -> None:
    killed = _run(exit_code=None, signal="SIGKILL")
    killed["processes"][0].update(
        exit_code=None,
        signal="SIGKILL",
        forced=True,
        signals_received=[{"signal": "SIGKILL", "forced": True}],
    )
    path = _write(tmp_path, runs=[killed])
    assert verify(tmp_path) == []
    assert load_json(path)["verdicts"]["lifecycle"]["clean"] is False

    def claim_clean(data: dict[str, Any]) -> None:
        data["runs"][0]["lifecycle"] = {"clean": True, "reasons": [], "summary": "all clean"}
        data["verdicts"]["lifecycle"]["clean"] = True

    _edit(path, claim_clean)
    found = verify(tmp_path)
    assert any(
        "recorded lifecycle clean=True but the raw record gives clean=False" in f and "SIGKILL" in f
        for f in found
    )
    assert any(f.startswith(f"{path}: verdicts.lifecycle") for f in found)


def test_verify_catches_edited_raw_blocks_and_summaries(tmp_path: Path) -> None:
    path = _write(tmp_path)
    _edit(path, lambda d: d["runs"][0]["processes"][0].update(exit_code=0, comm="other"))
    assert any("raw blocks were changed" in f for f in verify(tmp_path))
    path = _write(tmp_path)
    _edit(path, lambda d: d["runs"][0]["lifecycle"].update(summary="clean, trust me"))
    assert any("recorded summary 'clean, trust me' differs" in f for f in verify(tmp_path))
    path = _write(tmp_path)
    _edit(path, lambda d: d["verdicts"].update(overall="FAIL"))
    assert any("verdicts.overall: recorded 'FAIL'" in f for f in verify(tmp_path))


def test_a_session_of_two_tests_stores_one_diff(tmp_path: Path) -> None:
    a = _write(tmp_path, test_id="tests/test_m.py::test_a")
    b = _write(tmp_path, test_id="tests/test_m.py::test_b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diffs", a.name, b.name]
    assert [p.name for p in (tmp_path / "diffs").iterdir()] == [f"{DIFF_SHA256}.diff"]
    for path in (a, b):
        assert load_json(path)["runspec"]["source"]["diff_file"] == f"diffs/{DIFF_SHA256}.diff"
    assert verify(tmp_path) == []


def test_the_diff_is_redacted_before_it_is_hashed_and_named(tmp_path: Path) -> None:
    from pytest_lossless.core.redact import Redactor

    secret = "hunter2hunter2hunter2"
    header = "diff --git a/c.py b/c.py\n--- a/c.py\n+++ b/c.py\n@@ -0,0 +1 @@\n"
    text = f"{header}+API_TOKEN = '{secret}'\n"
    receipt = Receipt("tests/test_m.py::test_s", redactor=Redactor())
    receipt.set_runspec(_runspec(text))
    path = receipt.write(tmp_path)
    (stored,) = (tmp_path / "diffs").iterdir()
    body = stored.read_bytes()
    assert secret.encode() not in body
    source = load_json(path)["runspec"]["source"]
    assert source["diff_redacted"] is True
    assert stored.name == f"{hashlib.sha256(body).hexdigest()}.diff"
    assert stored.name == f"{source['diff_stored_sha256']}.diff" != f"{source['diff_sha256']}.diff"
    assert verify(tmp_path) == []


def _reseal(path: Path, change: Any) -> None:
    """Edit a receipt and recompute its integrity hash: an edit the hash alone cannot catch."""
    from pytest_lossless.evidence.receipts import raw_sha256

    data = json.loads(path.read_text())
    change(data)
    data["integrity"]["raw_sha256"] = raw_sha256(data)
    path.write_text(json.dumps(data))


def test_verify_catches_a_tampered_shared_diff(tmp_path: Path) -> None:
    a = _write(tmp_path, test_id="tests/test_m.py::test_a")
    b = _write(tmp_path, test_id="tests/test_m.py::test_b")
    diff = tmp_path / "diffs" / f"{DIFF_SHA256}.diff"
    diff.write_text("diff --git a/m.py b/m.py\n+something else\n")
    found = verify(tmp_path)
    for path in (a, b):
        assert any(f.startswith(f"{path}:") and "does not match diff_sha256" in f for f in found)
    diff.unlink()
    assert any("diff" in f and "missing" in f for f in verify(tmp_path))


def test_verify_requires_a_stored_diff_named_by_its_digest_inside_the_session(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path)
    other = tmp_path / "diffs" / f"{'0' * 64}.diff"
    other.write_bytes((tmp_path / "diffs" / f"{DIFF_SHA256}.diff").read_bytes())
    _reseal(path, lambda d: d["runspec"]["source"].update(diff_file=f"diffs/{other.name}"))
    assert any("is not named by its SHA-256" in f for f in verify(tmp_path))
    _reseal(path, lambda d: d["runspec"]["source"].update(diff_file="../elsewhere.diff"))
    assert any("diff_file '../elsewhere.diff'" in f for f in verify(tmp_path))


def test_an_old_session_with_a_diff_beside_each_receipt_still_verifies(tmp_path: Path) -> None:
    gpu = sorted(GPU_SESSION.glob("*.diff"))
    assert len(gpu) == len(sorted(GPU_SESSION.glob("*.json"))) - 1  # INDEX.json has none
    assert verify(GPU_SESSION) == []
    # The old layout, written by hand from a new receipt: <name>.diff beside it.
    path = _write(tmp_path)
    beside = path.with_suffix(".diff")
    (tmp_path / "diffs" / f"{DIFF_SHA256}.diff").rename(beside)
    (tmp_path / "diffs").rmdir()
    _reseal(path, lambda d: d["runspec"]["source"].update(diff_file=beside.name))
    assert verify(tmp_path) == []
    beside.write_text("diff --git a/m.py b/m.py\n+something else\n")
    assert any("does not match diff_sha256" in f for f in verify(tmp_path))


def test_the_signed_subjects_cover_the_stored_diff(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from pytest_lossless.evidence.attest import BUNDLE_NAME, check_bundle, sign

    session = tmp_path / "receipts" / "20260101T000000.000Z-host-abcdef"
    _write(session, test_id="tests/test_m.py::test_a")
    _write(session, test_id="tests/test_m.py::test_b")
    _seal(session)
    key = Ed25519PrivateKey.generate()
    done = sign(tmp_path / "receipts", out=tmp_path / "att", project=tmp_path, private_key=key)
    assert done.refused == []
    bundle = tmp_path / "att" / BUNDLE_NAME
    statement = json.loads(
        __import__("base64").b64decode(json.loads(bundle.read_text().splitlines()[0])["payload"])
    )
    name = f"diffs/{DIFF_SHA256}.diff"
    assert {"sha256": DIFF_SHA256} in [
        s["digest"] for s in statement["subject"] if s["name"] == name
    ]

    def check() -> list[str]:
        found, _ = check_bundle(
            bundle, key.public_key(), folders=[session], single_receipts=[], project=tmp_path
        )
        return [str(f) for f in found]

    assert check() == []
    (session / name).write_text("diff --git a/m.py b/m.py\n+something else\n")
    assert any(f.startswith("MISMATCH") and f"subject {name!r}: signed" in f for f in check())


def test_an_export_copies_the_shared_diff_once(tmp_path: Path) -> None:
    from pytest_lossless.evidence.export_index import ExportFolder

    a = _write(tmp_path / "s", test_id="tests/test_m.py::test_a")
    b = _write(tmp_path / "s", test_id="tests/test_m.py::test_b")
    export = ExportFolder(tmp_path / "export")
    for path in (a, b):
        export.add_receipt("s", path)
    copied = tmp_path / "export" / "receipts" / "s"
    assert sorted(p.name for p in copied.iterdir()) == ["diffs", a.name, b.name]
    assert verify(copied) == []


def test_verify_catches_a_diff_that_does_not_match_its_hash(tmp_path: Path) -> None:
    _write(tmp_path)
    diff = tmp_path / "diffs" / f"{DIFF_SHA256}.diff"
    diff.write_text("diff --git a/m.py b/m.py\n+something else\n")
    assert any("does not match diff_sha256" in f for f in verify(tmp_path))
    diff.unlink()
    assert any("diff" in f and "missing" in f for f in verify(tmp_path))


def test_verify_catches_contradictory_source_flags(tmp_path: Path) -> None:
    _write(tmp_path, runspec=_runspec("", dirty=True))
    assert any("dirty=True" in f for f in verify(tmp_path))
    for old in tmp_path.iterdir():
        old.unlink()
    _write(tmp_path, runspec=_runspec("", remote_branches=["origin/main"]))
    assert any("publication 'unpublished' contradicts" in f for f in verify(tmp_path))


def test_verify_rehashes_outputs_that_still_exist(tmp_path: Path) -> None:
    output = tmp_path / "out.bin"
    output.write_bytes(b"frames")
    digest = hashlib.sha256(b"frames").hexdigest()
    folder = tmp_path / "receipts"
    _write(folder, runs=[_run(outputs={"video": {"path": str(output), "sha256": digest}})])
    assert verify(folder) == []
    output.write_bytes(b"FRAMES")
    assert any("output 'video'" in f and "no longer matches" in f for f in verify(folder))
    output.unlink()
    assert verify(folder) == []  # gone files cannot be re-hashed; not a contradiction


def test_unreadable_receipts_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ReceiptError, match=r"bad\.json: not valid JSON"):
        load(bad)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(ReceiptError, match=r"other\.json: not a pytest-lossless receipt"):
        load(other)
    future = tmp_path / "future.json"
    future.write_text('{"schema": "pytest-lossless.receipt", "schema_version": 99}')
    with pytest.raises(ReceiptError, match="schema version 99"):
        load(future)
    found = verify(tmp_path)
    assert len(found) == 3
    assert all(any(n in f for n in ("bad.json", "other.json", "future.json")) for f in found)


def test_checkers_table_can_be_extended(tmp_path: Path) -> None:
    _write(tmp_path)

    def gates_must_be_lossless(block: Any, receipt: Any, context: Context) -> list[str]:
        return [f"gate {g['artifact']} is lossy" for g in block if not g.get("lossless", True)]

    def always(block: Any, receipt: Any, context: Context) -> list[str]:
        raise ValueError("broken block")

    checkers = {**default_checkers(), "gates": gates_must_be_lossless, "speed": always}
    found = verify(tmp_path, checkers=checkers)
    assert found == [
        f"{tmp_path / 'tests_test_m.py__test_a_x_y-777206a90083.json'}: speed: cannot be "
        "re-derived (ValueError: broken block)"
    ]


def test_derive_verdicts_orders_fail_over_inconclusive_over_pass() -> None:
    assert (
        derive_verdicts({"speed": [{"verdict": "PASS"}, {"verdict": "INCONCLUSIVE"}]})["overall"]
        == "INCONCLUSIVE"
    )
    assert (
        derive_verdicts({"gates": [{"passed": False}], "speed": [{"verdict": "PASS"}]})["overall"]
        == "FAIL"
    )
    assert derive_verdicts({"lossless": [{"verdict": "garbage"}]})["overall"] == "FAIL"
    assert derive_verdicts({})["overall"] is None


def test_cli_exit_codes_and_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path / "nowhere")]) == 2
    assert main(["verify", str(tmp_path)]) == 2
    assert "nothing was verified" in capsys.readouterr().err
    path = _write(tmp_path)
    _seal(tmp_path)
    assert main(["verify", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"OK {path}: tests/test_m.py::test_a[x/y]: 1 run")
    assert "1 of 1 receipts consistent" in out
    _edit(path, lambda d: d["verdicts"].update(overall="PASS-ish"))
    (tmp_path / "broken.json").write_text("[")
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"CONTRADICTION {path}" in out
    assert "UNREADABLE" in out
    assert "broken.json" in out
    assert main(["verify", str(path)]) == 1  # a single file works too


def test_the_summary_is_generated_and_verify_refuses_an_edited_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path)
    assert main(["summary", str(tmp_path), "--write"]) == 0
    _seal(tmp_path)
    summary = (tmp_path / "SUMMARY.md").read_text()
    assert (
        "| tests/test_m.py::test_a[x/y] | passed | clean | 1 passed, 0 failed | PASS | - |"
        in summary
    )
    assert main(["verify", str(tmp_path)]) == 0
    (tmp_path / "SUMMARY.md").write_text(summary.replace("| PASS |", "| FAIL |"))
    assert main(["verify", str(tmp_path)]) == 1
    assert "SUMMARY.md: does not match the receipts" in capsys.readouterr().out
    assert main(["summary", str(tmp_path / "nowhere")]) == 2


def test_a_run_that_ended_before_the_speed_gate_began_is_not_one_of_its_samples() -> None:
    """A lossless.compare run just before a speed gate (0.49 s before its first sample, ended
    by then) is not a dropped sample; a run started inside the gate with no sample is."""
    from pytest_lossless.evidence.crosscheck import check_speed_runs

    def iso(t: float) -> str:
        import datetime

        moment = datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    t0 = 1_800_000_000.0
    runs = [
        {"name": "command-03", "kind": "command", "started_at": iso(t0 - 0.49),
         "ended_at": iso(t0 - 0.01), "wall_seconds": 0.48},
    ]  # fmt: skip
    samples = []
    for i in range(4):
        name = f"command-{i + 4:02d}"
        start = t0 + i * 0.3
        runs.append({"name": name, "kind": "command", "started_at": iso(start + 0.001),
                     "ended_at": iso(start + 0.25), "wall_seconds": 0.25})  # fmt: skip
        samples.append({"index": i, "block": 0, "position": i,
                        "arm": ("control", "candidate", "candidate", "control")[i],
                        "started_at": start, "arm_seconds": 0.26, "seconds": 0.25,
                        "run": name, "runs": [name]})  # fmt: skip
    receipt = {"runs": runs, "speed": [{"design": "ABBA", "samples": samples}]}
    assert check_speed_runs(None, ReceiptRecord.from_json(receipt), None) == []
    # A run inside the gate's span that no sample names: its sample was removed.
    runs.append({"name": "command-08", "kind": "command", "started_at": iso(t0 + 0.5),
                 "ended_at": iso(t0 + 0.55), "wall_seconds": 0.05})  # fmt: skip
    found = check_speed_runs(None, ReceiptRecord.from_json(receipt), None)
    assert any("command-08" in f and "samples were removed" in f for f in found), found


def test_failed_server_requests_are_named_in_the_summary() -> None:
    """A server run whose requests did not all succeed gets its own SUMMARY.md line (the
    receipt counts them; the summary must not leave them a number nobody reads)."""
    from pytest_lossless.evidence.summary_md import _request_lines

    totals = {"requests": 4, "failed": 2, "statuses": {"200": 2, "500": 2}, "errors": 0,
              "timeouts": 0}  # fmt: skip
    receipts = [
        {"test_id": "t.py::test_ok", "runs": [{"name": "server-01", "request_totals": {
            "requests": 3, "failed": 0, "statuses": {"200": 3}}}]},
        {"test_id": "t.py::test_bad", "runs": [{"name": "server-01", "request_totals": totals}]},
    ]  # fmt: skip
    receipts = [ReceiptRecord.from_json(r) for r in receipts]
    lines = _request_lines(receipts)
    assert lines[0] == "Failed server requests:"
    assert [line for line in lines if line.startswith("- ")] == [
        "- t.py::test_bad: server-01: 2 of 4 requests failed (statuses 200: 2, 500: 2; "
        "0 errors, 0 timeouts)"
    ]
    assert _request_lines(receipts[:1]) == []


# ------------------------------------------------------------------ the test's own outcome (#20)

_PASSED_GATE = {"artifact": "t.npy", "passed": True, "lossless": True}


@pytest.mark.parametrize(
    ("outcome", "overall"),
    [
        ({"setup": "passed", "call": "passed", "teardown": "passed"}, "PASS"),
        ({"setup": "passed", "call": "failed", "teardown": "passed"}, "FAIL"),
        ({"setup": "passed", "call": "passed", "teardown": "failed"}, "FAIL"),
        ({"setup": "passed", "call": "inconclusive", "teardown": "passed"}, "INCONCLUSIVE"),
        ({"setup": "passed", "call": "interrupted"}, "FAIL"),
        ({"setup": "passed", "call": "forged-word"}, "FAIL"),
        ({"setup": "passed", "call": "skipped", "teardown": "passed"}, "PASS"),
    ],
)
def test_the_test_outcome_is_part_of_the_overall_verdict(outcome, overall):
    receipt = {"schema_version": SCHEMA_VERSION, "gates": [_PASSED_GATE], "outcome": outcome}
    derived = derive_verdicts(receipt)
    assert derived["overall"] == overall
    assert derived["test"] == (None if overall == "PASS" else overall)


def test_a_failed_test_with_runs_only_is_a_fail_and_a_passed_one_judges_nothing():
    failed = {"schema_version": SCHEMA_VERSION, "runs": [], "outcome": {"call": "failed"}}
    assert derive_verdicts(failed)["overall"] == "FAIL"
    passed = {"schema_version": SCHEMA_VERSION, "outcome": {"call": "passed"}}
    assert derive_verdicts(passed)["overall"] is None


@pytest.mark.parametrize("version", [1, 2])
def test_older_receipts_re_derive_as_they_were_written(version):
    """A version 1 or 2 receipt's overall verdict left out its outcome: verify keeps agreeing
    with it (and its verdicts block has no ``test`` key to contradict)."""
    receipt = {"schema_version": version, "gates": [_PASSED_GATE], "outcome": {"call": "failed"}}
    derived = derive_verdicts(receipt)
    assert derived["overall"] == "PASS"
    assert "test" not in derived


def test_a_written_receipt_records_its_outcome_in_its_overall_verdict(tmp_path):
    receipt = Receipt("t.py::test_x")
    receipt.add_gate(_PASSED_GATE)
    receipt.set_outcome("setup", "passed")
    receipt.set_outcome("call", "failed")
    receipt.set_outcome("teardown", "passed")
    path = receipt.write(tmp_path, root=tmp_path)
    data = load_json(path)
    assert data["schema_version"] == 3
    assert data["verdicts"]["overall"] == "FAIL"
    assert [c for c in verify_receipt(path) if "verdicts" in c] == []


def test_an_asserted_failing_verdict_is_expected_and_nothing_else_is():
    outcome = {"setup": "passed", "call": "passed", "teardown": "passed"}
    asserted = {"verdict": "FAIL", "lossy": False, "expect_verdict": ["FAIL"]}
    receipt = {"schema_version": SCHEMA_VERSION, "lossless": [asserted], "outcome": outcome}
    assert derive_verdicts(receipt)["overall"] == "FAIL"
    assert derive_verdicts(receipt)["expected"] is True
    unasserted = {**receipt, "speed": [{"verdict": "INCONCLUSIVE"}]}
    assert derive_verdicts(unasserted)["expected"] is False
    failed_gate = {**receipt, "gates": [{"passed": False}]}
    assert derive_verdicts(failed_gate)["expected"] is False
    failed_test = {**receipt, "outcome": {**outcome, "call": "failed"}}
    assert derive_verdicts(failed_test)["expected"] is False
    passed = {**receipt, "lossless": [{**asserted, "verdict": "PASS"}]}
    assert derive_verdicts(passed)["expected"] is False  # a pass is just a pass


def test_a_real_session_index_reads_into_its_record_and_writes_back_identically(
    tmp_path: Path,
) -> None:
    from pytest_lossless.evidence.index import INDEX_NAME, SessionIndex, load_index

    index = load_index(GPU_SESSION / INDEX_NAME)
    assert isinstance(index, SessionIndex)
    assert index.finished
    assert len(index.receipts) == 10
    assert index.summary is not None
    assert {t.receipt for t in index.tests} == {r.file for r in index.receipts}
    folder = tmp_path / GPU_SESSION.name
    folder.mkdir()
    write_index(folder, index)
    assert (folder / INDEX_NAME).read_bytes() == (GPU_SESSION / INDEX_NAME).read_bytes()


def test_real_receipts_read_into_their_records_and_write_back_identically() -> None:
    paths = sorted(p for p in GPU_SESSION.glob("*.json") if p.name != "INDEX.json")
    assert len(paths) == 10
    for path in paths:
        record = ReceiptRecord.from_json(load_json(path))
        assert record.integrity is not None
        assert record.recorded_verdicts is not None
        assert record.recorded_verdicts["overall"] in ("PASS", "LOSSY-PASS", "INCONCLUSIVE", "FAIL")
        text = json.dumps(record.to_json(), indent=2, ensure_ascii=False) + "\n"
        assert text.encode() == path.read_bytes(), path.name


def test_real_source_blocks_read_into_their_record_and_write_back_key_for_key() -> None:
    """#19: the source block (SourceState, Publication flattened into it) is written by the
    records' one serialiser: each real receipt's block reads back to the same keys in order
    (the receipt stores its diff beside it, so ``diff`` is the one key it adds)."""
    from pytest_lossless.evidence.provenance import SourceState

    for path in sorted(GPU_SESSION.glob("*.json")):
        data = json.loads(path.read_text())
        block = data["source"] if path.name == "INDEX.json" else data["runspec"]["source"]
        state = SourceState.read(block)
        assert state is not None
        written = (state.compact() if path.name == "INDEX.json" else state).to_json()
        same = [k for k in block if k in written]
        if path.name != "INDEX.json":  # the index is written with its keys sorted
            assert [k for k in written if k in block] == same, path.name
        assert {k: written[k] for k in same} == {k: block[k] for k in same}, path.name
        assert set(written) - set(block) <= {"diff"}, path.name


def test_a_receipt_block_of_the_wrong_shape_is_named() -> None:
    with pytest.raises(ReceiptError, match="gates is not a list of objects"):
        ReceiptRecord.from_json({"schema_version": 3, "test_id": "t", "gates": ["x"]})
    with pytest.raises(ReceiptError, match="outcome is not an object of words"):
        ReceiptRecord.from_json({"schema_version": 3, "test_id": "t", "outcome": {"call": 1}})


def test_load_reads_a_receipt_into_its_record_and_names_a_block_of_the_wrong_shape(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path)
    record = load(path)
    assert isinstance(record, ReceiptRecord)
    assert record.to_json() == load_json(path)
    assert record.verdicts().to_json() == load_json(path)["verdicts"]
    assert record.source is not None
    assert record.source["diff_file"] == f"diffs/{DIFF_SHA256}.diff"
    data = load_json(path)
    data["gates"] = ["not an object"]
    path.write_text(json.dumps(data))
    with pytest.raises(
        ReceiptError, match=r"t_a_x_y-777206a90083\.json: the receipt cannot be read: gates is"
    ):
        load(path)
    (found,) = load_all(tmp_path).values()
    assert isinstance(found, ReceiptError)
    # verify names it once, with the file, and still checks the rest of the folder
    lines = [line for line in verify(tmp_path) if "cannot be read" in line]
    assert lines == [f"{path}: the receipt cannot be read: gates is not a list of objects"]


def test_the_host_identity_is_typed_and_written_back_key_for_key() -> None:
    from pytest_lossless.evidence.index import INDEX_NAME, HostIdentity, load_index

    index = load_index(GPU_SESSION / INDEX_NAME)
    assert isinstance(index.host, HostIdentity)
    recorded = json.loads((GPU_SESSION / INDEX_NAME).read_text())["host"]
    assert index.host.to_json() == recorded
    for path in sorted(GPU_SESSION.glob("*.json")):
        if path.name != INDEX_NAME:
            assert load(path).host == index.host, path.name  # each receipt names its host
            written = load_json(path)["runspec"]["host"]
            assert list(index.host.to_json()) == list(written)  # as a RunSpec writes it
    assert HostIdentity.read(None) is None
    assert HostIdentity.read({"hostname": "h"}) == HostIdentity("h")
    assert HostIdentity.from_json({"hostname": "h"}) == HostIdentity("h")  # strict
    assert HostIdentity.read({"hostname": 7}) == HostIdentity(None)  # lenient
    assert HostIdentity("h", machine="m" * 32).key == ("h", "m" * 32)


def test_a_subject_is_written_as_in_toto_lists_it() -> None:
    from pytest_lossless.evidence.attest import Subject

    source = Subject("source", {"gitCommit": "a" * 40}, {"dirty": True, "diff_sha256": "d"})
    assert source.to_json() == {
        "name": "source",
        "digest": {"gitCommit": "a" * 40},
        "annotations": {"dirty": True, "diff_sha256": "d"},
    }
    assert Subject("t/x", {"sha256": "b" * 64}).to_json() == {
        "name": "t/x",
        "digest": {"sha256": "b" * 64},
    }  # an obtained artifact: no annotations
