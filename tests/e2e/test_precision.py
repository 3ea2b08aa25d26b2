"""End to end: a bfloat16 tensor one ULP off passes ``ulp(1)`` as LOSSY-PASS (terminal table,
receipt, ``verify``) and fails ``elementwise``; two ULPs off fails naming the element; the gate
is frozen with its golden; a receipt whose statistics contradict its pass is named by ``verify``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

from pytest_lossless.evidence.receipts import derive_verdicts, raw_sha256

pytestmark = pytest.mark.slow

PRECISION = """
import numpy as np
import pytest
from pytest_lossless import ulp

LATENT = np.linspace(-3, 3, 256, dtype=np.float32).reshape(16, 16)
WORDS = (LATENT.view(np.uint32) >> 16).astype("<u2")  # bfloat16: a float32's upper half


def bf16_file(path, shift):
    # As np.save writes an ml_dtypes.bfloat16 array: descr '<V2', raw 16-bit words.
    words = WORDS.copy()
    words[3, 7] += shift
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {{"descr": "<V2", "fortran_order": False, "shape": words.shape}}
        )
        fh.write(words.tobytes())
    return path


@pytest.mark.lossless
@pytest.mark.parametrize("gate", ["elementwise", {gate}], ids=["exact", "ulp"])
def test_bf16(golden, gate, tmp_path):
    golden.check("h.npy", bf16_file(tmp_path / "h.npy", {shift}), gate=gate)
"""
ULP_1 = 'ulp(1, dtype="bfloat16")'


def _write(pytester: pytest.Pytester, shift: int, gate: str = ULP_1) -> None:
    pytester.makepyfile(test_precision=PRECISION.format(shift=shift, gate=gate))


def _receipt(folder: Path, name: str) -> tuple[Path, dict[str, Any]]:
    """The named receipt of the latest session: an ``--update-goldens`` session leaves receipts
    too (their ``updates`` block, no gates), and session folders sort by their start (a UTC
    timestamp first in their name)."""
    path = max(folder.glob(f"*/*{name}*.json"), key=lambda p: p.parent.name)
    return path, json.loads(path.read_text())


def _verify(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )


def _table_text(output: str) -> str:
    """The terminal output with wrapped table cells joined: one space between words."""
    return re.sub(r"\s+", " ", output)


def test_bf16_one_ulp_off_is_lossy_pass_and_fails_elementwise(pytester: pytest.Pytester) -> None:
    _write(pytester, shift=0)
    assert pytester.runpytest("--update-goldens").ret == 0
    manifest = pytester.path / "goldens/test_precision/test_bf16[ulp]/manifest.json"
    frozen = json.loads(manifest.read_text())["artifacts"]["h.npy"]["gate"]
    assert frozen == "ulp(1, dtype='bfloat16')"

    _write(pytester, shift=1)
    result = pytester.runpytest("--lossless", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_bf16?exact? FAILED*", "*test_bf16?ulp? PASSED*"])
    result.stdout.fnmatch_lines(["*LOSSY-PASS*test_bf16?ulp?*h.npy*"])
    text = _table_text(result.stdout.str())
    assert "256 elements: max 1 ulp at [3, 7], p99 0 ulp, 0 beyond 1" in text
    assert "first differing element (3, 7)" in text  # the elementwise failure names it too

    receipts = pytester.path / "lossless-receipts"
    path, lossy = _receipt(receipts, "test_bf16_ulp")
    assert lossy["verdicts"]["overall"] == "LOSSY-PASS"
    (gate,) = lossy["gates"]
    assert gate["gate"] == "ulp(1, dtype='bfloat16')"
    assert gate["lossless"] is False
    assert gate["passed"] is True
    assert gate["diagnostics"]["max_ulp"] == 1
    assert gate["diagnostics"]["max_ulp_at"] == "[3, 7]"
    assert gate["diagnostics"]["p99_ulp"] == 0
    assert gate["diagnostics"]["count_beyond"] == 0
    _path, exact = _receipt(receipts, "test_bf16_exact")
    assert exact["verdicts"]["overall"] == "FAIL"
    done = _verify(path.parent)  # the judging session's folder
    assert done.returncode == 0, done.stdout + done.stderr


def test_bf16_two_ulps_off_fails_naming_the_element(pytester: pytest.Pytester) -> None:
    _write(pytester, shift=0)
    assert pytester.runpytest("--update-goldens").ret == 0
    _write(pytester, shift=2)
    result = pytester.runpytest("--lossless", "-k", "ulp")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*first differing element: ?3, 7?: expected *, obtained *: 2 bfloat16 ulps apart*"]
    )
    assert "max 2 ulp at [3, 7], p99 0 ulp, 1 beyond 1" in _table_text(result.stdout.str())
    path, _receipt_data = _receipt(pytester.path / "lossless-receipts", "test_bf16_ulp")
    done = _verify(path.parent)
    assert done.returncode == 0, done.stdout + done.stderr  # a FAIL, consistently recorded


def test_the_ulp_gate_is_frozen_with_its_golden(pytester: pytest.Pytester) -> None:
    _write(pytester, shift=0)
    assert pytester.runpytest("--update-goldens").ret == 0
    _write(pytester, shift=0, gate='ulp(2, dtype="bfloat16")')
    result = pytester.runpytest("--lossless", "-k", "ulp")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*gate changed*ulp(1, dtype='bfloat16')*ulp(2, dtype='bfloat16')*--update-goldens*"]
    )


def test_verify_names_statistics_that_contradict_a_lossy_pass(pytester: pytest.Pytester) -> None:
    _write(pytester, shift=0)
    assert pytester.runpytest("--update-goldens").ret == 0
    _write(pytester, shift=1)
    pytester.runpytest("--lossless", "-k", "ulp").assert_outcomes(passed=1)
    receipts = pytester.path / "lossless-receipts"
    path, receipt = _receipt(receipts, "test_bf16_ulp")
    receipt["gates"][0]["diagnostics"]["max_ulp"] = 3  # forged, every hash recomputed
    receipt["verdicts"] = derive_verdicts(receipt)
    receipt["integrity"]["raw_sha256"] = raw_sha256(receipt)
    path.write_text(json.dumps(receipt))
    done = _verify(path.parent)
    assert done.returncode != 0
    assert "max_ulp=3 and count_beyond=0 disagree under ulp(1, dtype='bfloat16')" in done.stdout
