"""The stable split of a selection into shards (core/sharding.py): every test in exactly one
shard, nearly equal sizes, few moves when a test is added, and I/N parsed with clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_lossless.core.sharding import Shard, assign, parse_shard, selection_sha256

ids = st.lists(st.text(min_size=1, max_size=30), max_size=60, unique=True)
counts = st.integers(min_value=1, max_value=9)


@given(ids, counts)
def test_every_test_is_in_exactly_one_shard(test_ids, count):
    shards = assign(test_ids, count)
    assert set(shards) == set(test_ids)
    # Each shard, computed on its own from the same selection, takes exactly its tests.
    taken = []
    for index in range(count):
        mine = assign(list(reversed(test_ids)), count)
        taken += [t for t in test_ids if mine[t] == index]
    assert sorted(taken) == sorted(test_ids)
    sizes = [sum(1 for s in shards.values() if s == index) for index in range(count)]
    assert max(sizes) - min(sizes) <= 1


@given(ids, st.text(min_size=1, max_size=30), counts)
def test_adding_a_test_moves_few_others(test_ids, new, count):
    if new in test_ids:
        return
    before = assign(test_ids, count)
    after = assign([*test_ids, new], count)
    moved = [t for t in test_ids if before[t] != after[t]]
    assert len(moved) <= count - 1


@given(ids, counts)
def test_the_order_of_collection_does_not_matter(test_ids, count):
    assert assign(test_ids, count) == assign(list(reversed(test_ids)), count)
    assert selection_sha256(test_ids) == selection_sha256(list(reversed(test_ids)))


def test_parametrized_tests_are_whole_tests_of_their_own():
    shards = assign([f"test_a.py::test_x[{i}]" for i in range(8)], 4)
    assert sorted(shards.values()) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_parse():
    assert parse_shard("2/4") == Shard(2, 4)
    assert parse_shard(" 0 / 1 ").label == "0/1"
    with pytest.raises(ValueError, match="numbered from 0, so 4 shards are 0/4 to 3/4"):
        parse_shard("4/4")
    with pytest.raises(ValueError, match="at least 1 shard"):
        parse_shard("0/0")
    with pytest.raises(ValueError, match="expected I/N"):
        parse_shard("1 of 4")


def test_an_index_shard_block_is_read_as_its_split_leniently() -> None:
    """INDEX.json's ``shard`` block (maybe hand-edited) reads back as the ShardSplit the plugin
    wrote; numbers written as text count, a shard that cannot exist is no shard."""
    from pytest_lossless.core.sharding import ShardSplit, read_split

    written = ShardSplit(1, 4, "SLURM_ARRAY_TASK_ID", 10, 3, "ab" * 32)
    assert read_split(written.to_json()) == written
    assert read_split({"index": "1", "count": "4", "kept": "x"}) == ShardSplit(1, 4, "", 0)
    assert read_split({"index": 4, "count": 4}) is None
    assert read_split({"index": None, "count": 4}) is None
    read = read_split(written.to_json())
    assert read is not None
    assert read.shard.label == "1/4"
