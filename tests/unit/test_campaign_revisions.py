"""``verify``'s revision rule (#22): sessions of different revisions are each judged on their
own (ordinary use across commits); one session, or the shards of one campaign, of two
revisions are a contradiction; ``--revision`` requires one."""

from __future__ import annotations

from pathlib import Path

from pytest_lossless.core.sharding import Shard, split_record
from pytest_lossless.evidence.index import HostIdentity, build_index, write_index
from pytest_lossless.evidence.sessions import CONTRADICTION, NOTE, check_campaign
from pytest_lossless.evidence.summary_md import write_summary

HOST = HostIdentity("h")
TESTS = ["t.py::test_a", "t.py::test_b"]


def _session(root: Path, name: str, revision: str, shard: int | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    write_summary(folder)
    record = None if shard is None else split_record(Shard(shard, 2), TESTS, kept=1).to_json()
    write_index(
        folder,
        build_index(
            folder,
            session_id=name,
            host=HOST,
            source={"revision": revision, "dirty": False},
            shard=record,
        ),
    )
    return folder


def _kinds(root: Path, **options: object) -> list[str]:
    campaign = check_campaign({root: {}}, **options)  # type: ignore[arg-type]
    return [str(f) for f in campaign.findings] + [str(n) for n in campaign.notes]


def test_sessions_of_two_revisions_are_no_contradiction(tmp_path: Path) -> None:
    _session(tmp_path, "s1", "a" * 40)
    _session(tmp_path, "s2", "b" * 40)
    found = _kinds(tmp_path)
    assert not [f for f in found if f.startswith(CONTRADICTION)], found
    assert f"{NOTE} the sessions are of 2 source revisions" in found[0]
    strict = _kinds(tmp_path, revision="a" * 40)
    assert any("--revision" in f and f.startswith(CONTRADICTION) for f in strict)


def test_shards_of_two_revisions_are_a_contradiction(tmp_path: Path) -> None:
    _session(tmp_path, "s1", "a" * 40, shard=0)
    _session(tmp_path, "s2", "b" * 40, shard=1)
    found = _kinds(tmp_path)
    assert any(
        f.startswith(f"{CONTRADICTION} the sharded sessions are of 2 source revisions")
        for f in found
    ), found
    allowed = _kinds(tmp_path, allow_mixed_revisions=True)
    assert not [f for f in allowed if "source revisions" in f and f.startswith(CONTRADICTION)]
