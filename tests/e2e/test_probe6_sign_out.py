"""End to end, from outside (#20): ``sign --out`` naming a file, a folder below a file, or a
read-only folder printed Python's raw error (``[Errno 20] Not a directory: '...'``), naming
neither the option nor what to do. Like ``bisect --out`` (test_probe3_cli.py), it is one line
naming ``--out`` and the problem, exit status 2, and nothing is written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.e2e.test_attest import _lossless, built  # noqa: F401 - the fixture is used below

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("where", "keyed"),
    [("a-file", False), ("under-a-file", False), ("under-a-file", True), ("read-only", False)],
)
def test_sign_out_that_cannot_be_written_is_one_line(
    built: Path,  # noqa: F811
    tmp_path: Path,
    where: str,
    keyed: bool,
) -> None:
    root = tmp_path / "root"
    shutil.copytree(built, root, symlinks=True)
    project = root / "project"
    if where == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        locked = project / "lossless-attestation" / "locked"
        locked.mkdir(parents=True)
        locked.chmod(0o555)
        out = locked / "att"
    else:
        taken = project / "lossless-attestation" / "taken.txt"
        taken.parent.mkdir()
        taken.write_text("not a folder\n")
        out = taken if where == "a-file" else taken / "att"
    key = ["--key", str(root / "key.pem")] if keyed else []
    done = _lossless(project, "sign", "lossless-receipts", "--out", str(out), *key)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"pytest-lossless sign: --out {out}: "), line
    assert "[Errno" not in line, line
    assert "give a folder where you can write" in line, line
    if where != "read-only":
        assert taken.read_text() == "not a folder\n"
        assert sorted(p.name for p in taken.parent.iterdir()) == ["taken.txt"]
