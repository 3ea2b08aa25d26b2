"""Whether the shards of a campaign are all there: each of ``0/N`` .. ``N-1/N`` once, finished.

A session run with ``--lossless-shard I/N`` (or as task of a Slurm array) records its shard in
its ``INDEX.json``: which one, of how many, and the selection it split (how many tests, the
hash of their ids, how many it kept). Verified together, the sharded sessions must agree on
``N`` and on the selection, and name every shard exactly once; a shard no session ran (cancelled
before it started, never submitted, its folder not collected), a shard run twice, and a shard
whose session did not finish are each named. Sessions that record no shard are not counted.

Pure: it reads the indexes as :mod:`.sessions` loaded them and returns what it found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.sharding import ShardSplit, read_split
from ..core.text import printable
from .index import SessionIndex


@dataclass(frozen=True)
class ShardedSession:
    """A session as the shard check sees it: its name (folder, session id) and its index."""

    label: str
    index: SessionIndex | None


@dataclass(frozen=True)
class ShardFinding:
    """A shard missing or unfinished (``incomplete``), or shards that disagree (not)."""

    incomplete: bool
    text: str


def _split(index: SessionIndex | None) -> ShardSplit | None:
    """The shard ``index`` records, or None when it records none (or not one)."""
    return read_split(index.shard) if index is not None and index.shard is not None else None


def _shards(sessions: Sequence[ShardedSession]) -> list[tuple[ShardedSession, ShardSplit]]:
    return [(s, record) for s in sessions if (record := _split(s.index)) is not None]


def _names(sessions: Sequence[ShardedSession]) -> str:
    return ", ".join(printable(s.label) for s in sessions)


def shard_findings(sessions: Sequence[ShardedSession]) -> list[ShardFinding]:
    """Everything wrong with the campaign's shards (nothing when no session is sharded)."""
    sharded = _shards(sessions)
    if not sharded:
        return []
    by_count: dict[int, list[ShardedSession]] = {}
    for session, record in sharded:
        by_count.setdefault(record.shard.count, []).append(session)
    if len(by_count) > 1:
        seen = "; ".join(f"N={n} in {_names(found)}" for n, found in sorted(by_count.items()))
        return [
            ShardFinding(
                False,
                f"the sharded sessions disagree on the number of shards ({seen}): one campaign "
                "is split one way; verify each campaign's sessions apart",
            )
        ]
    count = next(iter(by_count))
    found: list[ShardFinding] = []
    selections: dict[str, list[ShardedSession]] = {}
    for session, record in sharded:
        selections.setdefault(str(record.selection_sha256), []).append(session)
    if len(selections) > 1:
        seen = "; ".join(f"{h[:12]} in {_names(s)}" for h, s in sorted(selections.items()))
        found.append(
            ShardFinding(
                False,
                f"the shards split different selections of tests ({seen}): every shard of a "
                "campaign runs the same pytest arguments on the same revision, or some tests "
                "run in no shard and others in two",
            )
        )
    by_index: dict[int, list[tuple[ShardedSession, ShardSplit]]] = {}
    for session, record in sharded:
        by_index.setdefault(record.shard.index, []).append((session, record))
    for index, runs in sorted(by_index.items()):
        if len(runs) > 1:
            found.append(
                ShardFinding(
                    False,
                    f"shard {index}/{count} ran {len(runs)} times "
                    f"({_names([s for s, _ in runs])}): each shard runs once; keep the session "
                    "folder of the run that counts (remove the others), write the merged "
                    "SUMMARY.md of the folder that held them again (python -m pytest_lossless "
                    "summary --write DIR) and verify again",
                )
            )
        for session, _ in runs:
            if session.index is None or not session.index.finished:
                state = printable(session.index.state if session.index else None)
                found.append(
                    ShardFinding(
                        True,
                        f"shard {index}/{count}: its session {printable(session.label)} did not "
                        f"finish ({state}): the shard was cancelled or interrupted; run it again",
                    )
                )
    missing = [i for i in range(count) if i not in by_index]
    if missing:
        unindexed = [s for s in sessions if s.index is None]
        maybe = (
            f"; {len(unindexed)} session folder(s) without an index may hold what it began: "
            f"{_names(unindexed)}"
            if unindexed
            else ""
        )
        for index in missing:
            found.append(
                ShardFinding(
                    True,
                    f"shard {index}/{count} is missing: none of the {len(sharded)} sharded "
                    f"sessions ran it (it was cancelled, never started, or its receipts folder "
                    f"was not collected){maybe}",
                )
            )
    elif len(selections) == 1 and all(len(runs) == 1 for runs in by_index.values()):
        kept = sum(record.kept or 0 for _, record in sharded)
        selected = sharded[0][1].selected
        if kept != selected:
            found.append(
                ShardFinding(
                    False,
                    f"the {count} shards kept {kept} tests of a selection of {selected}: "
                    "each test runs in exactly one shard, so they must add up",
                )
            )
    return found


def shard_lines(sessions: Sequence[ShardedSession]) -> list[str]:
    """What ``verify`` prints of the shards: how many of how many, and the split."""
    sharded = _shards(sessions)
    if not sharded:
        return []
    ordered = sorted((r for _, r in sharded), key=lambda r: (r.shard.index, r.shard.count))
    counts = sorted({r.shard.count for r in ordered})
    present = list(dict.fromkeys(r.shard.label for r in ordered))
    kept = "+".join("?" if r.kept is None else str(r.kept) for r in ordered)
    of = "/".join(str(n) for n in counts)
    return [
        f"shards: {len(present)} of {of} present ({', '.join(present)}); tests per session {kept}"
    ]


__all__ = ["ShardFinding", "ShardedSession", "shard_findings", "shard_lines"]
