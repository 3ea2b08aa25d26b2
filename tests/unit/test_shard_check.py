"""The merged verify's shard check (evidence/shards.py): every shard of N there once and
finished; a missing, duplicated, unfinished or mismatched shard is named."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_lossless.core.sharding import Shard, split_record
from pytest_lossless.evidence.index import SessionIndex
from pytest_lossless.evidence.shards import ShardedSession, shard_findings, shard_lines

TESTS = [f"t.py::test_{i}" for i in range(10)]


def _session(index: int, count: int = 4, *, finished: bool = True, tests=TESTS) -> ShardedSession:
    from pytest_lossless.core.sharding import assign

    kept = sum(1 for s in assign(tests, count).values() if s == index)
    index_: dict[str, Any] = {
        "finished": finished,
        "state": "finished" if finished else "interrupted",
        "shard": split_record(Shard(index, count), tests, kept=kept).to_json(),
    }
    return ShardedSession(f"s{index}", SessionIndex.read(index_))


def _texts(sessions):
    return [(f.incomplete, f.text) for f in shard_findings(sessions)]


def test_every_shard_once_is_clean():
    sessions = [_session(i) for i in range(4)]
    assert _texts(sessions) == []
    assert shard_lines(sessions) == [
        "shards: 4 of 4 present (0/4, 1/4, 2/4, 3/4); tests per session 3+2+3+2"
    ]


def test_unsharded_sessions_are_not_counted():
    assert _texts([ShardedSession("plain", SessionIndex.read({"finished": True}))]) == []
    assert shard_lines([ShardedSession("plain", None)]) == []


def test_a_missing_shard_is_named():
    found = _texts([_session(0), _session(1), _session(3), ShardedSession("dead", None)])
    assert len(found) == 1
    incomplete, text = found[0]
    assert incomplete
    assert text.startswith("shard 2/4 is missing: none of the 3 sharded sessions ran it")
    assert "without an index may hold what it began: dead" in text


def test_a_duplicated_shard_is_named():
    found = _texts([_session(0), _session(1), _session(1), _session(2), _session(3)])
    assert found == [
        (
            False,
            "shard 1/4 ran 2 times (s1, s1): each shard runs once; keep the session folder of "
            "the run that counts (remove the others), write the merged SUMMARY.md of the "
            "folder that held them again (python -m pytest_lossless summary --write DIR) and "
            "verify again",
        )
    ]


def test_an_unfinished_shard_is_named():
    found = _texts([_session(0), _session(1, finished=False), _session(2), _session(3)])
    assert found == [
        (
            True,
            "shard 1/4: its session s1 did not finish (interrupted): the shard was cancelled "
            "or interrupted; run it again",
        )
    ]


def test_shards_of_different_counts_or_selections_are_refused():
    found = _texts([_session(0, 2), _session(1, 3)])
    assert len(found) == 1
    assert "disagree on the number of shards (N=2 in s0; N=3 in s1)" in found[0][1]
    other = _session(1, tests=[*TESTS, "t.py::test_new"])
    found = _texts([_session(0), other, _session(2), _session(3)])
    assert any("split different selections" in text for _, text in found)


def test_shards_that_do_not_add_up_are_named():
    sessions = [_session(i) for i in range(4)]
    index = sessions[0].index
    assert index is not None
    assert index.shard is not None
    record = replace(index, shard={**index.shard, "kept": 0})
    found = _texts([ShardedSession("s0", record), *sessions[1:]])
    assert found == [
        (
            False,
            "the 4 shards kept 7 tests of a selection of 10: each test runs in exactly one "
            "shard, so they must add up",
        )
    ]
