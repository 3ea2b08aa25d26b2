"""End to end: the built-in canary proves each (kind, gate) once per session, a comparator that
cannot fail is an ERROR of the test that used it, and the receipt, the summary and ``verify``
say so; ``--lossless-no-canary`` skips it and says that too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.e2e.mediagen import gray_frames, mux, tone, write_video, write_wav

pytestmark = pytest.mark.slow

#: A conftest kind whose compare always passes: the deliberately broken comparator.
ALWAYS_PASSES = """
import hashlib
from pytest_lossless.gates import GateResult

def pytest_lossless_detect_kind(path, head):
    return "csv" if path.suffix == ".csv" else None

def pytest_lossless_fingerprint(kind, path):
    if kind != "csv":
        return None
    data = path.read_bytes()
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}

def pytest_lossless_default_gate(kind):
    return "decoded" if kind == "csv" else None

def pytest_lossless_compare(kind, gate, expected, obtained):
    if kind != "csv":
        return None
    return GateResult(artifact=expected.name, kind=kind, gate=gate.spec, lossless=True,
                      passed=True)
"""

#: The same kind with a compare that works and a perturbation of its own: one row changed.
ROWS_KIND = """
from pytest_lossless.gates import GateResult

def pytest_lossless_detect_kind(path, head):
    return "csv" if path.suffix == ".csv" else None

def pytest_lossless_fingerprint(kind, path):
    return {"rows": path.read_text().splitlines()} if kind == "csv" else None

def pytest_lossless_default_gate(kind):
    return "decoded" if kind == "csv" else None

def pytest_lossless_compare(kind, gate, expected, obtained):
    if kind != "csv":
        return None
    a, b = expected.fingerprint["rows"], obtained.fingerprint["rows"]
    bad = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    result = GateResult(artifact=expected.name, kind=kind, gate=gate.spec, lossless=True,
                        passed=a == b, unit="row")
    if bad:
        result.first_mismatch = f"row {bad[0]}"
    return result

def pytest_lossless_perturb(kind, gate, path, out):
    if kind != "csv":
        return None
    rows = path.read_text().splitlines()
    rows[-1] += "9"
    out.write_text("\\n".join(rows) + "\\n")
    return f"row {len(rows) - 1}"
"""

CSV_TESTS = """
import pytest
from pathlib import Path

@pytest.mark.lossless
def test_first(golden):
    golden.check("t.csv", Path(__file__).parent / "t.csv")

@pytest.mark.lossless
def test_second(golden):
    golden.check("t.csv", Path(__file__).parent / "t.csv")
"""


def _csv_project(pytester: pytest.Pytester, conftest: str) -> Path:
    pytester.makeconftest(conftest)
    (pytester.path / "t.csv").write_text("a,b\n1,2\n3,4\n")
    pytester.makepyfile(test_csv=CSV_TESTS)
    assert pytester.runpytest("--update-goldens").ret == 0
    return pytester.path


def _receipts(root: Path) -> dict[str, dict[str, Any]]:
    """The latest session's receipts, by test name."""
    session = max(p for p in (root / "lossless-receipts").iterdir() if p.is_dir())
    found = {}
    for path in session.glob("*.json"):
        if path.name != "INDEX.json":
            data = json.loads(path.read_text())
            found[data["test_id"].split("::")[-1]] = data
    return found


def _verify(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", "lossless-receipts"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_conftest_kind_whose_compare_always_passes_is_caught_by_the_canary_as_an_error(
    pytester: pytest.Pytester,
) -> None:
    root = _csv_project(pytester, ALWAYS_PASSES)
    result = pytester.runpytest("--lossless")
    # Both tests used the gate that cannot fail: both are errors, neither passes.
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*CanaryError: canary: the csv gate decoded cannot fail: in a copy of 't.csv' with "
            "one unit changed (byte *), the comparator said PASS; this gate cannot fail*",
            "*ERROR*test_csv.py::test_first*t.csv*",
            "canary: csv/decoded: CANNOT FAIL, an ERROR ('t.csv': byte * said PASS; * s)",
        ]
    )
    receipts = _receipts(root)
    (record,) = receipts["test_first"]["canary"]
    assert record["status"] == "cannot-fail"
    assert record["verdict"] == "PASS"
    assert record["kind"] == "csv"
    assert record["gate"] == "decoded"
    assert record["test_id"] == "test_csv.py::test_first"
    assert record["unit"].startswith("byte ")
    assert isinstance(record["seconds"], float)
    assert "canary" not in receipts["test_second"]  # run once, where it ran
    assert receipts["test_second"]["gates"][0]["error"] == "CanaryError"
    assert _verify(root).returncode == 0


def test_no_canary_skips_it_and_the_receipt_and_summary_say_so(
    pytester: pytest.Pytester,
) -> None:
    root = _csv_project(pytester, ALWAYS_PASSES)
    result = pytester.runpytest("--lossless", "--lossless-no-canary")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["canary skipped (--lossless-no-canary): csv/decoded not proven able to fail"]
    )
    (record,) = _receipts(root)["test_first"]["canary"]
    assert record["status"] == "skipped"
    assert record["reason"] == "--lossless-no-canary"


def test_a_kind_with_its_own_perturbation_is_proved_by_it(pytester: pytest.Pytester) -> None:
    root = _csv_project(pytester, ROWS_KIND)
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["canary: csv/decoded: FAIL as required ('t.csv': row 2; * s)"])
    (record,) = _receipts(root)["test_first"]["canary"]
    assert (record["status"], record["unit"], record["verdict"]) == ("proved", "row 2", "FAIL")
    assert record["first_mismatch"] == "row 2"


MEDIA_TESTS = """
import pytest
from pathlib import Path

HERE = Path(__file__).parent

@pytest.mark.lossless
def test_media(golden):
    for name in ("clip.mp4", "audio.wav", "latent.npy", "notes.txt"):
        golden.check(name, HERE / name)

@pytest.mark.lossless
def test_lossy(golden):
    golden.check("latent.npy", HERE / "latent.npy", "ulp(2)")

@pytest.mark.lossless
def test_again(golden):
    golden.check("clip.mp4", HERE / "clip.mp4")
"""


def test_every_builtin_kind_and_gate_in_use_is_proved_once_per_session(
    pytester: pytest.Pytester,
) -> None:
    root = pytester.path
    write_video(root / "clip.mp4", gray_frames())
    write_wav(root / "audio.wav", tone())
    np.save(root / "latent.npy", np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
    (root / "notes.txt").write_bytes(b"seed=7 steps=4\n")
    pytester.makepyfile(test_media=MEDIA_TESTS)
    assert pytester.runpytest("--update-goldens").ret == 0
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "canary: audio/decoded: FAIL as required ('audio.wav': sample * of channel 0 "
            "(PCM_16): * one LSB; * s)",
            "*bytes/bytes: FAIL as required ('notes.txt': byte 7 of 15, *",
            "*tensor/elementwise: FAIL as required ('latent.npy': element (4, 0): last bit *",
            "*tensor/ulp(2): FAIL as required ('latent.npy': element (4, 0): moved 3 float32 *",
            "*video/decoded: FAIL as required ('clip.mp4': frame 6: byte * (a rawvideo copy of "
            "frames 5-7); * s)",
        ]
    )
    receipts = _receipts(root)
    statuses = {(r["kind"], r["gate"]): r["status"] for r in receipts["test_media"]["canary"]}
    assert statuses == {
        ("video", "decoded"): "proved",
        ("audio", "decoded"): "proved",
        ("tensor", "elementwise"): "proved",
        ("bytes", "bytes"): "proved",
    }
    assert [r["gate"] for r in receipts["test_lossy"]["canary"]] == ["ulp(2)"]
    assert "canary" not in receipts["test_again"]  # video/decoded was proved already
    done = _verify(root)
    assert done.returncode == 0, done.stdout + done.stderr


AAC_TESTS = """
import pytest
from pathlib import Path

HERE = Path(__file__).parent

@pytest.mark.lossless
def test_clip(golden):
    golden.check("clip.mp4", HERE / "clip.mp4")

@pytest.mark.lossless
def test_song(golden):
    golden.check("song.m4a", HERE / "song.m4a")
"""

#: A conftest that makes the container gate blind to audio: its audio streams are not compared.
DEAF = """
import pytest_lossless.kinds.video as video

video._compare_audio_streams = lambda *args, **kwargs: None
"""


def _aac_project(pytester: pytest.Pytester) -> Path:
    root = pytester.path
    frames = write_video(root / "frames.mp4", gray_frames())
    sound = write_wav(root / "sound.wav", tone(8000))
    mux(frames, sound, root / "clip.mp4", "aac")
    mux(None, sound, root / "song.m4a", "aac")
    pytester.makepyfile(test_aac=AAC_TESTS)
    assert pytester.runpytest_subprocess("--update-goldens").ret == 0
    return root


def test_the_canary_proves_the_audio_side_of_an_mp4_with_aac(pytester: pytest.Pytester) -> None:
    """Audio in a container is perturbed too (a PCM copy of a window of its decoded samples,
    one sample's last bit changed): the audio kind's (an .m4a) and the video kind's, whose
    canary must fail on a changed frame and on a changed audio sample."""
    root = _aac_project(pytester)
    result = pytester.runpytest_subprocess("--lossless")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*audio/decoded: FAIL as required ('song.m4a': audio stream #0 sample * of channel 0 "
            "(fltp): * its last bit (a PCM copy of samples *); * s)",
            "*video/decoded: FAIL as required ('clip.mp4': frame 6: byte * (a rawvideo copy of "
            "frames 5-7); and audio stream #1 sample * of channel 0 (fltp): *; * s)",
        ]
    )
    receipts = _receipts(root)
    for test, kind in (("test_clip", "video"), ("test_song", "audio")):
        (record,) = receipts[test]["canary"]
        assert (record["kind"], record["status"], record["verdict"]) == (kind, "proved", "FAIL")
        assert "audio stream #" in record["unit"]
    done = _verify(root)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_gate_blind_to_audio_is_caught_by_the_canary(pytester: pytest.Pytester) -> None:
    """The container gate with its audio comparison taken out still fails on a changed frame:
    only the audio copy shows it blind, and both kinds' tests are errors naming the sample."""
    root = _aac_project(pytester)
    pytester.makeconftest(DEAF)
    result = pytester.runpytest_subprocess("--lossless")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*CanaryError: canary: the video gate decoded cannot fail: in a copy of 'clip.mp4' "
            "with one unit changed (audio stream #1 sample *), the comparator said PASS*",
            "*CanaryError: canary: the audio gate decoded cannot fail: in a copy of 'song.m4a' "
            "with one unit changed (audio stream #0 sample *), the comparator said PASS*",
            "*video/decoded: CANNOT FAIL, an ERROR ('clip.mp4': audio stream #1 sample *: said "
            "PASS; * s)",
        ]
    )
    (record,) = _receipts(root)["test_clip"]["canary"]
    assert (record["status"], record["verdict"]) == ("cannot-fail", "PASS")
    assert record["unit"].startswith("audio stream #1 sample ")
