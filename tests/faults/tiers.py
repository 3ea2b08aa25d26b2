"""How much of the deep tier runs: a covering design in CI, the full product on request (#24).

The fault harness (``test_harness.py``) stops a session at every point of
:data:`pytest_lossless.core.faults.POINTS` with every action of
:data:`~pytest_lossless.core.faults.ACTIONS`. The full product (45 cases, about 17 minutes on
2 cores) runs with ``PYTEST_LOSSLESS_FULL_HARNESS=1``. Without it, CI runs a covering design:
each point once and each action at least once, the pairing drawn from a seed
(``PYTEST_LOSSLESS_HARNESS_SEED``, else the UTC date as ``YYYYMMDD``), so that successive days
pair them differently and, over a few weeks, every pair runs. The seed is printed in the
session header; setting it again runs the same cases.

The hypothesis state machines (``test_lock_machine.py``, ``test_golden_store_machine.py``)
take their example counts from the settings profiles ``tests/conftest.py`` registers:
:data:`MACHINES_CI` unless the full harness is asked for, then :data:`MACHINES_FULL`.
"""

from __future__ import annotations

import datetime
import os
import random
from collections.abc import Mapping, Sequence

FULL_ENV = "PYTEST_LOSSLESS_FULL_HARNESS"
SEED_ENV = "PYTEST_LOSSLESS_HARNESS_SEED"
#: The hypothesis profiles of the state machines: bounded for CI, thorough on request.
MACHINES_CI = "lossless-machines-ci"
MACHINES_FULL = "lossless-machines-full"
#: Examples per state machine in each profile (steps per example stay each machine's own).
MACHINE_EXAMPLES = {MACHINES_CI: 20, MACHINES_FULL: 100}


def full(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the full product (and the thorough machine profile) was asked for."""
    value = (os.environ if environ is None else environ).get(FULL_ENV, "").strip()
    return value not in ("", "0")


def date_seed(today: datetime.date | None = None) -> int:
    """The day's seed: the UTC date as the number ``YYYYMMDD``."""
    day = today or datetime.datetime.now(datetime.timezone.utc).date()
    return int(day.strftime("%Y%m%d"))


def seed(environ: Mapping[str, str] | None = None) -> int:
    """The covering design's seed: ``PYTEST_LOSSLESS_HARNESS_SEED`` if set, else the date's.

    ``tests/conftest.py`` sets the variable at configure time when it is unset, so that
    pytest-xdist's workers (which inherit it) collect the same cases as the controller even
    across midnight.
    """
    text = (os.environ if environ is None else environ).get(SEED_ENV, "").strip()
    if not text:
        return date_seed()
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"${SEED_ENV}={text!r} is not an integer seed, e.g. 20261201") from None


def covering(points: Sequence[str], actions: Sequence[str], seed: int) -> list[tuple[str, str]]:
    """Pairs covering every point once and every action at least once, drawn from ``seed``.

    ``max(len(points), len(actions))`` pairs: every action is dealt once, the rest of the
    pairs get actions drawn at random, and the deal is shuffled; where there are more actions
    than points, points repeat in order.
    """
    if not points or not actions:
        raise ValueError("a covering design needs at least one point and one action")
    rng = random.Random(seed)
    n = max(len(points), len(actions))
    dealt = list(actions) + [rng.choice(list(actions)) for _ in range(n - len(actions))]
    rng.shuffle(dealt)
    return [(points[i % len(points)], dealt[i]) for i in range(n)]


def cases(
    points: Sequence[str], actions: Sequence[str], environ: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The harness's cases: the full product when asked for, else the day's covering design."""
    if full(environ):
        return [(point, action) for point in points for action in actions]
    return covering(points, actions, seed(environ))


def machine_profile(environ: Mapping[str, str] | None = None) -> str:
    """The hypothesis profile the state machines run under."""
    return MACHINES_FULL if full(environ) else MACHINES_CI
