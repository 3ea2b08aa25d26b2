"""``--lossless-shard I/N``: this session runs one shard of the selected tests.

After every other selection (``-m``, ``-k``, a plugin's deselection: this hook runs last), the
tests are split by :func:`~pytest_lossless.core.sharding.assign` and the others are deselected
through pytest's ``pytest_deselected`` hook, so the terminal says how many. In a Slurm array
task the shard defaults to the task's position in the array (:mod:`..devices.scheduler`).
The session's ``INDEX.json`` records the shard and the selection it split (:func:`record`), so
the merged ``verify`` can name a shard that is missing, duplicated or was cancelled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest

from ..core.sharding import Shard, ShardSplit, assign, split_record
from ..errors import ConfigError
from .config import settings

#: The session's shard, or None when it runs the whole selection.
SHARD_KEY = pytest.StashKey["Sharding | None"]()
#: The ``workeroutput`` key by which an xdist worker hands its split to the controller.
WORKEROUTPUT_SHARD = "lossless_shard"


@dataclass
class Sharding:
    """The shard and, once collected, what it split: the index's ``shard`` block."""

    shard: Shard
    split: ShardSplit | None = None
    deselected: list[str] = field(default_factory=list)


def _resolve(config: pytest.Config) -> Sharding | None:
    from ..devices.scheduler import slurm_job

    resolved = settings(config)
    if resolved.shard is not None:
        source = resolved.sources.get("shard", "--lossless-shard")
        return Sharding(Shard(resolved.shard.index, resolved.shard.count, source=source))
    job = slurm_job(os.environ)
    shard = job.array_shard() if job is not None else None
    return Sharding(shard) if shard is not None else None


def pytest_configure(config: pytest.Config) -> None:
    try:
        config.stash[SHARD_KEY] = _resolve(config)
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-lossless: {exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    if SHARD_KEY in config.stash:
        del config.stash[SHARD_KEY]


def sharding(config: pytest.Config) -> Sharding | None:
    """The session's shard (None: the whole selection runs)."""
    return config.stash.get(SHARD_KEY, None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep this shard's tests, after every other selection; deselect the rest."""
    found = sharding(config)
    if found is None:
        return
    test_ids = [item.nodeid for item in items]
    mine = assign(test_ids, found.shard.count)
    kept = [item for item in items if mine[item.nodeid] == found.shard.index]
    dropped = [item for item in items if mine[item.nodeid] != found.shard.index]
    found.split = split_record(found.shard, test_ids, kept=len({i.nodeid for i in kept}))
    found.deselected = [item.nodeid for item in dropped]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_report_header(config: pytest.Config) -> list[str]:
    found = sharding(config)
    if found is None:
        return []
    return [f"lossless: shard {found.shard.label} ({found.shard.source})"]


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    found = sharding(config)
    if found is None or found.split is None:
        return []
    split = found.split
    return [
        f"lossless: shard {found.shard.label} runs {split.kept} of the {split.selected} "
        "selected tests"
    ]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A shard that got no test (fewer tests than shards) did its part: not "no tests ran";
    an xdist worker hands its split to the controller, which writes the index."""
    found = sharding(session.config)
    if found is None:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and found.split is not None:
        workeroutput[WORKEROUTPUT_SHARD] = found.split.to_json()
    if (
        session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
        and found.split is not None
        and (found.split.selected or 0) > 0
    ):
        session.exitstatus = pytest.ExitCode.OK


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist, on the controller: the split a worker made (every worker makes the same)."""
    found = sharding(node.config)
    split = (getattr(node, "workeroutput", None) or {}).get(WORKEROUTPUT_SHARD)
    if found is not None and isinstance(split, dict) and found.split is None:
        found.split = ShardSplit.from_json(split)


def record(config: pytest.Config) -> dict[str, Any] | None:
    """The index's ``shard`` block: which shard of how many, decided where, and of what
    selection (how many tests, their hash, how many this shard kept)."""
    found = sharding(config)
    if found is None:
        return None
    return (found.split or found.shard.record()).to_json()
