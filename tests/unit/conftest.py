"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from pytest_lossless.kinds.registry import KindRegistry


@pytest.fixture(scope="session")
def kinds() -> KindRegistry:
    """The built-in artifact kinds through a private plugin manager (no pytest hooks)."""
    return KindRegistry()


#: Fixtures that spawn ffmpeg to make their media: a test that uses one is ``slow``.
FFMPEG_FIXTURES = frozenset({"clips", "files"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if FFMPEG_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
