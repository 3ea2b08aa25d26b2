"""The public API: every exported name resolves; unknown names fail like a module's would."""

from __future__ import annotations

import pytest

import pytest_lossless


@pytest.mark.parametrize("name", pytest_lossless.__all__)
def test_every_export_resolves(name):
    assert getattr(pytest_lossless, name) is not None


def test_unknown_name():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = pytest_lossless.nope
