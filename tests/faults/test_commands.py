"""The commands harness (#20): the commands a user runs outside the session, stopped at every
stop point they reach (:data:`pytest_lossless.core.faults.COMMANDS`) with every action
(:data:`~pytest_lossless.core.faults.ACTIONS`), and the invariants that must hold afterwards.

``accept EXPORT`` writes goldens from a reviewed export, ``sign`` writes an attestation (a signed
bundle with ``--key``, a folder of statements per session without), ``summary --write`` writes
SUMMARY.md. A project is made once (two tests whose goldens hold version 1, a frozen plan, an
export of version 2, two sessions of receipts, an attestation of the first session, a stale
SUMMARY.md: the "old" version of everything); the commands run uninterrupted once on a copy
(the "new" version). Each case runs the command, a real ``python -m pytest_lossless``
subprocess, on a fresh copy, armed to stop at the point. Then:

1. a clear end: after SIGINT, SIGTERM or SIGHUP the command exits 128 + the signal's number,
   with one line on stderr that names the signal, and no traceback; SIGKILL and ``exit``
   (``os._exit``) end it as they do;
2. nothing half-written: every golden folder is byte-identical to its old or its new version
   (its manifest and plan.json with it: never a mix), the signed bundle is absent, old, or the
   new one whole (which verifies), each session's statements folder absent, old or whole, and
   SUMMARY.md old or whole;
3. the same command run again completes (exit 0) and leaves exactly what the uninterrupted run
   left, with no lock, work folder or temporary file beside the goldens or the written files;
   what the stopped run left is recovered and named in its output.

Deep tier: CI runs a covering design (each point once, each action at least once, seeded as the
session harness is: ``tests/faults/tiers.py``); ``PYTEST_LOSSLESS_FULL_HARNESS=1`` runs every
point of every command with every action.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_lossless.core import faults
from tests.faults import tiers

pytestmark = [pytest.mark.deep, pytest.mark.slow]

MODEL = """
import numpy as np

VERSION = {version}

def model():
    latent = np.arange(16, dtype=np.float32) * VERSION
    return {{"latent.npy": latent, "tokens.bin": b"v%d" % VERSION}}

def other():
    return {{"o.bin": b"other %d" % VERSION}}

def same():
    return {{"t.npy": np.arange(8, dtype=np.float32)}}
"""

SUITE = """
import pytest

from model import model, other, same

@pytest.mark.lossless
def test_a(golden, lossless):
    golden.check_all(model)
    lossless.compare(same, same, runs=2, gate="tolerance(atol=0)", label="same")

@pytest.mark.lossless
def test_b(golden):
    golden.check_all(other)
"""

GOLDENS = Path("goldens") / "test_cmd"
OLD_SUMMARY = b"# a summary written before the second session\n"


def command_lines(command: str) -> list[list[str]]:
    """The invocations of each command (``sign``: with a key, then without)."""
    return {
        "accept": [["accept", "export", "--no-entry-points"]],
        "sign": [
            ["sign", "receipts", "--key", "../key.pem", "--out", "att", "--no-entry-points"],
            ["sign", "receipts", "--out", "att-plain", "--no-entry-points"],
        ],
        "summary": [["summary", "--write", "receipts"]],
    }[command]


def lossless(root: Path, args: list[str], fault: str | None = None) -> tuple[int, str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    if fault:
        environment[faults.FAULT_ENV] = fault
    done = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", *args],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def pytest_session(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--lossless-receipts=receipts",
            f"--lossless-lock-dir={root.parent / 'locks'}",
            *args,
        ],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


def files(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (hidden ones included), by relative path."""
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


@dataclass(frozen=True)
class State:
    """What the commands write: each golden folder, what lies beside them (hidden: locks and
    work folders), the attestations, SUMMARY.md."""

    goldens: dict[str, dict[str, bytes]]
    beside: list[str]
    bundle: dict[str, bytes]
    plain: dict[str, dict[str, bytes]]
    summary: bytes | None

    @classmethod
    def of(cls, root: Path) -> State:
        where = root / GOLDENS
        names = sorted(os.listdir(where)) if where.is_dir() else []
        plain = root / "att-plain"
        summary = root / "receipts" / "SUMMARY.md"
        return cls(
            goldens={n: files(where / n) for n in names if not n.startswith(".")},
            beside=[n for n in names if n.startswith(".")],
            bundle=files(root / "att"),
            plain={p.name: files(p) for p in sorted(plain.iterdir())} if plain.is_dir() else {},
            summary=summary.read_bytes() if summary.exists() else None,
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, State, dict[str, State]]:
    """The project (the old version of everything), its state, and the state each command's
    uninterrupted run leaves (each on a copy of its own: sign refuses goldens accept changed)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    base = tmp_path_factory.mktemp("commands")
    key = Ed25519PrivateKey.generate()
    (base / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (base / "key.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    root = base / "project"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "model.py").write_text(MODEL.format(version=1))
    (root / "test_cmd.py").write_text(SUITE)
    done = pytest_session(root, "--update-goldens")
    assert done.returncode == 0, done.stdout + done.stderr
    (root / "model.py").write_text(MODEL.format(version=2))
    shutil.rmtree(root / "__pycache__", ignore_errors=True)
    done = pytest_session(root, "--lossless", "--lossless-export=export")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (root / "export" / "export.json").is_file()
    # The old attestations: the second session alone (sign meets the first one first).
    first = sorted(p.parent for p in (root / "receipts").rglob("INDEX.json"))[-1]
    relative = str(first.relative_to(root))
    for args in (["--key", "../key.pem", "--out", "att"], ["--out", "att-plain"]):
        code, out, err = lossless(root, ["sign", relative, *args, "--no-entry-points"])
        assert code == 0, out + err
    (root / "receipts" / "SUMMARY.md").write_bytes(OLD_SUMMARY)
    old = State.of(root)
    new = {}
    for command in faults.COMMANDS:
        after = base / f"after-{command}"
        shutil.copytree(root, after, symlinks=True)
        for args in command_lines(command):
            code, out, err = lossless(after, args)
            assert code == 0, f"{args}: {out}{err}"
        new[command] = State.of(after)
    code, out, err = lossless(
        base / "after-sign",
        ["verify", "receipts", "--attestation", "att/lossless.intoto.jsonl", "--key", "../key.pub"],
    )
    assert "signed: 2 session(s)" in out, out + err
    # Every command changes what it writes: each case can tell the old from the new.
    accepted, signed = new["accept"], new["sign"]
    assert set(old.goldens) == set(accepted.goldens) == {"test_a", "test_b"}
    assert all(old.goldens[n] != accepted.goldens[n] for n in old.goldens)
    assert old.bundle != signed.bundle
    assert (len(old.plain), len(signed.plain)) == (1, 2)
    assert old.summary != new["summary"].summary
    assert old.beside == accepted.beside == [], (old.beside, accepted.beside)
    return root, old, new


def cases() -> list[object]:
    points = [(command, p) for command, found in faults.COMMANDS.items() for p in found]
    labels = [f"{command}:{point}" for command, point in points]
    return [
        pytest.param(*label.split(":"), action, id=f"{label.replace(':', '-')}-{action}")
        for label, action in tiers.cases(labels, faults.ACTIONS)
    ]


def expected_code(action: str) -> int:
    if action == "SIGKILL":
        return -signal.SIGKILL
    if action == "exit":
        return 3
    return 128 + int(getattr(signal, action))


@pytest.mark.parametrize(("command", "point", "action"), cases())
def test_a_command_stopped_at_any_point_breaks_no_invariant(
    tmp_path: Path,
    world: tuple[Path, State, dict[str, State]],
    command: str,
    point: str,
    action: str,
) -> None:
    baseline, old, done = world
    new = done[command]
    root = tmp_path / "project"
    shutil.copytree(baseline, root, symlinks=True)
    shutil.copy(baseline.parent / "key.pem", tmp_path / "key.pem")
    armed = f"{point}:{action}"
    if point == "golden-retired":
        armed = f"no-exchange,{armed}"
    where = f"{command} at {armed}"

    # 1. A clear end.
    for args in command_lines(command):
        code, out, err = lossless(root, args, armed)
        said = f"{where}: {args}\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-3000:]}"
        assert code == expected_code(action), f"exit {code}\n{said}"
        assert "Traceback" not in out + err, said
        if action not in ("SIGKILL", "exit"):
            lines = err.splitlines()
            assert len(lines) == 1, said
            assert f"interrupted by {action}" in lines[0], said

    # 2. Nothing half-written.
    stopped = State.of(root)
    for name in old.goldens:
        folder = stopped.goldens.get(name)
        if folder is None:
            # Killed between the fallback's two renames: the old golden lies whole in the work
            # folder, and the next run puts it back first (docs/faults.md).
            retired = [
                files(root / GOLDENS / left / "old")
                for left in stopped.beside
                if left.startswith(f".{name}.tmp-")
            ]
            assert point == "golden-retired", f"{where}: {name} is missing"
            assert old.goldens[name] in retired, f"{where}: {name} missing, not in {retired}"
            continue
        assert folder in (old.goldens[name], new.goldens[name]), f"{where}: {name} is a mix"
    bundle = {k: v for k, v in stopped.bundle.items() if not k.startswith(".")}
    assert bundle in (old.bundle, new.bundle), f"{where}: the bundle is {sorted(stopped.bundle)}"
    for session, written in stopped.plain.items():
        if session.startswith("."):
            continue  # a lock, a work folder: the run again must recover it (3.)
        whole = (old.plain.get(session), new.plain[session])
        assert written in whole, f"{where}: {session} holds {sorted(written)}"
    assert stopped.summary in (old.summary, new.summary), f"{where}: SUMMARY.md half-written"

    # 3. Run again: the uninterrupted run's result, nothing left beside it, what was left named.
    again = ""
    for args in command_lines(command):
        code, out, err = lossless(root, args)
        again += out + err
        assert code == 0, f"{where}: run again, {args} exited {code}\n{out}{err}"
    assert "Traceback" not in again, again
    final = State.of(root)
    assert final == new, f"{where}: run again, the result differs from an uninterrupted run"
    for left in stopped.beside:
        if left.endswith(".lock"):
            continue  # an flock dies with its holder: a lock file left blocks nothing
        assert left in again, f"{where}: {left} was recovered without a word\n{again}"
