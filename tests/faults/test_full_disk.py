"""The full-disk harness (issue #23, the method): the disk fills at every place the plugin
writes (:data:`pytest_lossless.core.faults.WRITES`), and the invariants that must hold then.

A real session (a golden update or a comparison, with a tensor and a bytes golden, a
``lossless.compare`` whose gate is frozen in a plan, a dirty git tree so that each receipt has
its ``.diff``, the HTML report, and ``--lossless-export``) meets a full disk at the armed write
point. ``fill``: the project, the receipts and pytest's temporary folders live on a small tmpfs
mounted for the case, and the point fills it, so this write and every later one meet a real full
disk (root only: skipped, with the reason, where ``mount`` is not permitted). ``ENOSPC``: the
point raises the error a full disk gives, through ``core/faults.py``, without root; the writes
after it succeed. After each case:

1. a clear end: the exit status is not 0, the output says the disk is full and names the file,
   and there is no traceback and no INTERNALERROR;
2. every golden whole: the committed golden folder, manifest and plan included, is
   byte-identical to the old version or wholly the new one;
3. no receipt lost or half-written: every receipt on disk reads as JSON and no temporary file is
   left; a test whose receipt is missing is named in the output as such;
4. no PASS for what was not recorded: neither the index, SUMMARY.md, the HTML report nor the
   terminal's evidence line counts a test whose receipt was not written as passed.

A write point added to the registry is covered here at once. Deep tier: CI runs a covering
design (each point once, each action at least once, seeded as the stop-point harness is);
``PYTEST_LOSSLESS_FULL_HARNESS=1`` runs every point with both actions.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_lossless.core import faults
from tests.faults import tiers

pytestmark = [pytest.mark.deep, pytest.mark.slow]

PROJECT = """
import os
import numpy as np
import pytest

VALUE = os.environ["GOLDEN_VALUE"]


def same():
    return {"t.npy": np.arange(8, dtype=np.float32)}


@pytest.mark.lossless
def test_media(golden, lossless):
    golden.check("v.npy", np.full(64, 1.0 if VALUE == "one" else 2.0, dtype=np.float32))
    golden.check("w.bin", b"artifact " + VALUE.encode())
    gate = "tolerance(atol=0)" if VALUE == "one" else "tolerance(atol=1)"  # a changed plan
    lossless.compare(same, same, runs=2, gate=gate, label="same")


if os.environ.get("WITH_NEW"):

    @pytest.mark.lossless
    def test_new(golden):
        golden.check("n.bin", b"a check with no golden yet: exported")
"""

#: The points written by a golden update; the others are met by a comparison.
UPDATE_POINTS = ("write-golden-stage", "write-golden-manifest", "write-golden-plan")
#: What the message must name at each point: the file (or, for copies, the artifact's name).
NAMES = {
    "write-golden-stage": "v.npy",
    "write-golden-manifest": "manifest.json",
    "write-golden-plan": "plan.json",
    "write-receipt": "test_media.json",
    "write-receipt-diff": "/diffs/",  # the session's shared diffs/<sha256>.diff
    "write-session-index": "INDEX.json",
    "write-session-summary": "SUMMARY.md",
    "write-report": "index.html",
    "write-obtained": "v.npy",
    "write-canary-temp": "changed.npy",
    "write-decode-temp": "v.npy",
    "write-export": "export.json",
}
FULL = re.compile(r"(disk is full|no space left on device)", re.IGNORECASE)
GOLDEN = Path("goldens") / "test_w" / "test_media"
RECEIPT = "test_w.py__test_media.json"


def run_session(
    root: Path, *args: str, env: dict[str, str], log: Path, disk: Path
) -> tuple[int, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environment.update(env, TMPDIR=str(disk / "tmp"))
    (disk / "tmp").mkdir(exist_ok=True)
    with log.open("w") as out:
        code = subprocess.call(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                f"--basetemp={disk / 'basetemp'}",
                f"--lossless-lock-dir={log.parent / 'locks'}",
                "--lossless-receipts=receipts",
                *args,
            ],
            cwd=root,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=180,
        )
    return code, log.read_text(errors="replace")


def snapshot(folder: Path) -> dict[str, bytes]:
    """The committed golden folder: every file (not the hidden work folders beside it)."""
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.relative_to(folder).as_posix().startswith(".")
    }


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes], dict]:
    """A git project whose goldens hold "one" (committed, then the tree made dirty), and the
    golden folder an update to "two" writes."""
    base = tmp_path_factory.mktemp("full-disk-baseline")
    root = base / "project"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_w.py").write_text(PROJECT)
    disk = base / "disk"
    disk.mkdir()
    code, output = run_session(
        root,
        "--update-goldens",
        env={"GOLDEN_VALUE": "one"},
        log=base / "one.log",
        disk=disk,
    )
    assert code == 0, output
    shutil.rmtree(root / "receipts")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "goldens one")
    with (root / "test_w.py").open("a") as handle:
        handle.write("# an uncommitted change: every receipt has its .diff\n")
    two = base / "two"
    shutil.copytree(root, two)
    code, output = run_session(
        two, "--update-goldens", env={"GOLDEN_VALUE": "two"}, log=base / "two.log", disk=disk
    )
    assert code == 0, output
    old, new = snapshot(root / GOLDEN), snapshot(two / GOLDEN)
    assert old != new
    assert {"manifest.json", "plan.json"} <= set(old), sorted(old)
    return root, old, new


@pytest.fixture
def disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """Where the case's project, receipts and temporary folders live: a 32 MiB tmpfs for
    ``fill`` (unmounted afterwards, whatever happened), a plain folder for ``ENOSPC``."""
    where = tmp_path / "disk"
    where.mkdir()
    if request.node.callspec.params["action"] != "fill":
        yield where
        return
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs a tmpfs, and mounting one needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m,mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


#: Known breaks, each named (strict: the case fails once the break is mended, to be removed).
#: None now: the plan was one (#20), a commit of its own after the golden folder's; it is staged
#: into the golden swap, so a full disk at the plan leaves the old version whole.
KNOWN: dict[tuple[str, str], str] = {}


def case(point: str, action: str) -> object:
    known = KNOWN.get((point, action))
    marks = [pytest.mark.xfail(strict=True, reason=known)] if known else []
    return pytest.param(point, action, id=f"{point}-{action}", marks=marks)


@pytest.mark.parametrize(
    ("point", "action"),
    [
        case(point, action)
        for point, action in tiers.cases(list(faults.WRITES), faults.WRITE_ACTIONS)
    ],
)
def test_a_full_disk_at_any_write_breaks_no_invariant(
    tmp_path: Path,
    disk: Path,
    versions: tuple[Path, dict[str, bytes], dict[str, bytes]],
    point: str,
    action: str,
) -> None:
    baseline, old, new = versions
    root = disk / "project"
    shutil.copytree(baseline, root, symlinks=True)
    update = point in UPDATE_POINTS
    env = {
        "GOLDEN_VALUE": "two" if update else "one",
        faults.FAULT_ENV: f"{point}:{action}",
        "HARNESS_TAG": uuid.uuid4().hex,
    }
    if point == "write-export":
        env["WITH_NEW"] = "1"
    code, output = run_session(
        root,
        *(["--update-goldens"] if update else ["--lossless"]),
        f"--lossless-export={disk / 'export'}",
        env=env,
        log=tmp_path / "a.log",
        disk=disk,
    )
    where = f"{point}:{action}"
    tail = output[-4000:]

    # 1. A clear end: not 0, the disk named as full with the file, no traceback.
    assert code not in (0, 3, 4), f"{where}: exit {code}\n{tail}"
    assert "INTERNALERROR" not in output, f"{where}:\n{tail}"
    assert "Traceback" not in output, f"{where}:\n{tail}"
    said = [line for line in output.splitlines() if FULL.search(line)]
    assert said, f"{where}: the output never says the disk is full\n{tail}"
    assert any(NAMES[point] in line for line in said), f"{where}: {NAMES[point]} not named\n{said}"

    # 2. Every golden whole: the old version or the new one, byte for byte.
    golden = snapshot(root / GOLDEN)
    if update:
        assert golden in (old, new), f"{where}: a mixed golden folder: {sorted(golden)}"
    else:
        assert golden == old, f"{where}: a comparison changed the goldens"

    # 3. No receipt lost or half-written.
    receipts = root / "receipts"
    left = [p for p in receipts.rglob("*") if p.name.endswith(".tmp")] if receipts.exists() else []
    assert left == [], f"{where}: temporary files left among the receipts: {left}"
    written = {}
    for path in receipts.rglob("*.json") if receipts.exists() else []:
        written[path.name] = json.loads(path.read_text())  # whole JSON, or this fails
    recorded = RECEIPT in written
    if not recorded:
        assert re.search(r"receipt of test_w\.py::test_media was not written", output), (
            f"{where}: the missing receipt is not named\n{tail}"
        )

    # 4. No PASS for what was not recorded.
    if not recorded:
        for index in receipts.rglob("INDEX.json"):
            entries = json.loads(index.read_text())["tests"]
            for entry in entries:
                if entry["test_id"] == "test_w.py::test_media":
                    assert entry["outcome"] != "passed", f"{where}: index says {entry}"
                    assert entry["receipt"] is None, f"{where}: index names a receipt: {entry}"
        for summary in receipts.rglob("SUMMARY.md"):
            text = summary.read_text()
            assert not re.search(r"test_media.*\bPASS\b", text), f"{where}: {summary}\n{text}"
        assert not re.search(r"\bPASS\b.*from the receipts", output), f"{where}:\n{tail}"
        # A row of the test fails (its outcome, or the check that met the full disk); the
        # rows of its checks are named as backed by no receipt.
        assert re.search(r"^(FAIL|ERROR) +test_w\.py::test_media ", output, re.M), tail
        for page in receipts.rglob("index.html"):
            text = page.read_text()
            assert re.search(r"tests? wrote no receipt.*test_w\.py::test_media", text, re.S), page
