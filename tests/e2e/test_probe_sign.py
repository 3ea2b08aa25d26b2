"""End to end, from outside (#20): ``sign`` runs in a trusted job on a checkout of the pull
request, and wrote its statements through a ``lossless-attestation`` link committed there, to
wherever it pointed. Nothing is written through a link that leaves the project."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.test_attest import _lossless, built  # noqa: F401 - the fixture is used below

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("keyed", [True, False], ids=["key", "no-key"])
def test_sign_writes_nothing_through_a_link_out_of_the_project(
    built: Path,  # noqa: F811
    tmp_path: Path,
    keyed: bool,
) -> None:
    root = tmp_path / "root"
    shutil.copytree(built, root, symlinks=True)
    project = root / "project"
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "lossless-attestation").symlink_to(outside)
    key = ["--key", str(root / "key.pem")] if keyed else []
    done = _lossless(project, "sign", "lossless-receipts", *key)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "lossless-attestation" in done.stderr
    assert "leaves" in done.stderr
    assert list(outside.iterdir()) == []
    (project / "lossless-attestation").unlink()
    done = _lossless(project, "sign", "lossless-receipts", *key)
    assert done.returncode == 0, done.stdout + done.stderr
