"""A shard of a campaign: which part ``I`` of ``N`` of the selected tests one session runs.

The split is stable: each test's place is the SHA-256 of its node id, the tests are ordered by
it, and shard ``I`` takes the ``I``-th of ``N`` nearly equal runs of that order. Every shard of
one selection computes the same order, so every test lands in exactly one shard; shard sizes
differ by at most one; adding or removing a test moves at most ``N - 1`` others (one across each
boundary), never the whole suite. A test is never split: its control and candidate arms, its
ABBA pairs and its matrix cells run inside it, on one host and one allocation.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .records import JsonObject, JsonValue, Record, spec

_FORM = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (from 0) of ``count``; ``source`` names where it was decided."""

    index: int
    count: int
    source: str = "--lossless-shard"

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a campaign has at least 1 shard, not {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(
                f"shard {self.index} of {self.count} does not exist: shards are numbered from "
                f"0, so {self.count} shards are 0/{self.count} to {self.count - 1}/{self.count}"
            )

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    def record(self) -> ShardSplit:
        return ShardSplit(self.index, self.count, self.source)


@dataclass(frozen=True)
class ShardSplit(Record):
    """What a session's index records of its shard (``shard``): which one, decided where, and,
    once collected, of what selection (its size, the SHA-256 of its test ids, how many this
    shard kept)."""

    index: int
    count: int
    source: str
    selected: int | None = spec(None, omit="none")
    kept: int | None = spec(None, omit="none")
    selection_sha256: str | None = spec(None, omit="none")

    @property
    def shard(self) -> Shard:
        return Shard(self.index, self.count, self.source)


def parse_shard(text: str) -> Shard:
    """``"2/4"`` into shard 2 of 4 (numbered from 0, like a Slurm array's first task)."""
    match = _FORM.fullmatch(text)
    if not match:
        raise ValueError("expected I/N, the shard (numbered from 0) and the count, e.g. 0/4")
    return Shard(int(match.group(1)), int(match.group(2)))


def _place(test_id: str) -> str:
    return hashlib.sha256(test_id.encode("utf-8", errors="surrogateescape")).hexdigest()


def assign(test_ids: Iterable[str], count: int) -> dict[str, int]:
    """Each test id's shard (0 to ``count - 1``); a test id given twice is one test."""
    if count < 1:
        raise ValueError(f"a campaign has at least 1 shard, not {count}")
    order = sorted(set(test_ids), key=lambda t: (_place(t), t))
    total = len(order)
    return {test_id: position * count // total for position, test_id in enumerate(order)}


def selection_sha256(test_ids: Iterable[str]) -> str:
    """One hash of the whole selection the shards split: equal in every shard of a campaign
    that selected the same tests, so ``verify`` can tell shards of two selections apart."""
    joined = "\n".join(sorted(set(test_ids)))
    return hashlib.sha256(joined.encode("utf-8", errors="surrogateescape")).hexdigest()


def split_record(shard: Shard, test_ids: Sequence[str], kept: int) -> ShardSplit:
    """What a session's index records of its shard: which one, and of what selection."""
    return ShardSplit(
        shard.index, shard.count, shard.source, len(set(test_ids)), kept, selection_sha256(test_ids)
    )


def read_split(record: JsonObject) -> ShardSplit | None:
    """The split an index records (its JSON, maybe hand-edited: a number may be written as
    text), or None when it names no shard that exists; an unreadable count reads as None, a
    missing ``selected`` as 0."""
    index, count, source = record.get("index"), record.get("count"), record.get("source", "")
    try:
        if not isinstance(index, (int, float, str)) or not isinstance(count, (int, float, str)):
            return None
        shard = Shard(int(index), int(count), str(source))
    except ValueError:
        return None
    digest = record.get("selection_sha256")
    return ShardSplit(
        shard.index,
        shard.count,
        shard.source,
        _count(record.get("selected")) or 0,
        _count(record.get("kept")),
        None if digest is None else str(digest),
    )


def _count(value: JsonValue) -> int | None:
    try:
        return int(value) if isinstance(value, (int, str)) else None
    except ValueError:
        return None


__all__ = [
    "Shard",
    "ShardSplit",
    "assign",
    "parse_shard",
    "read_split",
    "selection_sha256",
    "split_record",
]
