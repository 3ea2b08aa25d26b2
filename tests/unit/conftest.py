"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from pytest_lossless.kinds import KindRegistry


@pytest.fixture(scope="session")
def kinds() -> KindRegistry:
    """The built-in artifact kinds through a private plugin manager (no pytest hooks)."""
    return KindRegistry()
