"""Fixtures the security tests share."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder in the system tmp that other uids can enter (tmp_path is private to us)."""
    base = Path(tempfile.mkdtemp(prefix="lossless-shared-"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        for path in sorted(base.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
        base.rmdir()
