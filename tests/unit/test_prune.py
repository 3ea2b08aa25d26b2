"""Which old session folders ``lossless_receipts_keep`` removes (a pure choice), and which
sessions ``sign`` output names (those are never removed)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from pytest_lossless.evidence.attest import LOSSLESS_TYPE, STATEMENT_TYPE
from pytest_lossless.evidence.index import HostIdentity
from pytest_lossless.evidence.sessions import (
    StoredSession,
    sessions_to_prune,
    signed_session_ids,
)

HERE = HostIdentity("a", machine="m1")
THERE = HostIdentity("b", machine="m2")


def _stored(n: int, **changes: object) -> StoredSession:
    values: dict[str, object] = {
        "folder": Path(f"/r/s{n}"),
        "session_id": f"s{n}",
        "started": f"2025-01-0{n}",
        "finished": True,
        "host": HERE,
        "signed": False,
    }
    values.update(changes)
    return StoredSession(**values)  # type: ignore[arg-type]


def _ids(found: list[StoredSession]) -> list[str]:
    return [s.session_id for s in found]


def test_only_the_old_finished_unsigned_sessions_of_this_host_go() -> None:
    stored = [
        _stored(1),
        _stored(2, host=THERE),
        _stored(3, finished=False),
        _stored(4, signed=True),
        _stored(5),
        _stored(6),
        _stored(7),
    ]
    assert _ids(sessions_to_prune(stored, keep=2, host=HERE, current="s7")) == ["s5", "s1"]
    assert sessions_to_prune(stored, keep=0, host=HERE, current="s7") == []
    assert sessions_to_prune(stored, keep=7, host=HERE, current="s7") == []
    # Never the current session, wherever it sorts.
    assert "s1" not in _ids(sessions_to_prune(stored, keep=1, host=HERE, current="s1"))


def test_a_bundle_and_unsigned_statements_name_their_sessions(tmp_path: Path) -> None:
    statement = {
        "_type": STATEMENT_TYPE,
        "predicateType": LOSSLESS_TYPE,
        "predicate": {"session": {"id": "s-bundle"}},
    }
    payload = base64.b64encode(json.dumps(statement).encode()).decode()
    out = tmp_path / "attest"
    out.mkdir()
    (out / "lossless.intoto.jsonl").write_text(json.dumps({"payload": payload}) + "\n")
    (out / "s-unsigned").mkdir()
    (out / "s-unsigned" / "test-result.statement.json").write_text("{}")
    assert signed_session_ids([out, tmp_path / "absent"]) == ({"s-bundle", "s-unsigned"}, None)
    # A bundle that cannot be read: nothing can be pruned safely, and the answer says why.
    (out / "broken.intoto.jsonl").write_text("not json\n")
    _, problem = signed_session_ids([out])
    assert problem is not None
    assert "broken.intoto.jsonl cannot be read" in problem
