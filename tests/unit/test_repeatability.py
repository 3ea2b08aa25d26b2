"""The lossless verdict table and control repeatability, without pytest's fixtures."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_lossless.compare.repeatability import (
    compare_control_candidate,
    lossless_table,
    rederive,
    varied,
)
from pytest_lossless.errors import ConfigError


def test_the_table():
    assert lossless_table(True, True) == "PASS"
    assert lossless_table(True, False) == "FAIL"
    assert lossless_table(False, True) == "INCONCLUSIVE"
    assert lossless_table(False, False) == "INCONCLUSIVE"


def _run(values, extra=b"ok"):
    return lambda: {"t.npy": np.array(values, dtype=np.float32), "log.bin": extra}


def test_pass_fail_inconclusive(tmp_path, kinds):
    same = compare_control_candidate(
        _run([1, 2]), _run([1, 2]), runs=2, kinds=kinds, workdir=tmp_path / "a"
    )
    assert same.verdict == "PASS"
    assert rederive(same.to_json()) == "PASS"
    differ = compare_control_candidate(
        _run([1, 2]), _run([1, 3]), runs=2, kinds=kinds, workdir=tmp_path / "b"
    )
    assert differ.verdict == "FAIL"
    assert "t.npy" in differ.message()
    assert rederive(differ.to_json()) == "FAIL"
    counter = itertools.count()
    flaky = compare_control_candidate(
        lambda: {"t.npy": np.array([next(counter)], dtype=np.int32)},
        _run([1]),
        runs=3,
        kinds=kinds,
        workdir=tmp_path / "c",
    )
    assert flaky.verdict == "INCONCLUSIVE"
    assert varied(flaky) == ["t.npy"]
    assert "not repeatable" in flaky.message()
    assert rederive(flaky.to_json()) == "INCONCLUSIVE"
    assert len(flaky.runs) == 4


def test_missing_artifact_is_a_difference(tmp_path, kinds):
    verdict = compare_control_candidate(
        _run([1]),
        lambda: {"t.npy": np.array([1], dtype=np.float32)},
        runs=2,
        kinds=kinds,
        workdir=tmp_path,
    )
    assert verdict.verdict == "FAIL"
    assert "log.bin" in verdict.message()


def test_control_must_run_twice(tmp_path, kinds):
    with pytest.raises(ConfigError, match="runs"):
        compare_control_candidate(_run([1]), _run([1]), runs=1, kinds=kinds, workdir=tmp_path)


@given(st.booleans(), st.booleans(), st.booleans())
def test_rederive_agrees_with_the_table(c1, c2, cand):
    block = {
        "control_comparisons": [{"results": [{"passed": c1}]}, {"results": [{"passed": c2}]}],
        "candidate_comparison": {"results": [{"passed": cand}]},
    }
    assert rederive(block) == lossless_table(c1 and c2, cand)


def test_one_media_for_the_run_holds_its_track_not_its_latent(tmp_path, kinds):
    """lossless.compare(expect=Media(...)) over a track and a latent: the latent is not held to a
    duration (the README's example); a short track still misses, in every run."""
    import soundfile as sf

    from pytest_lossless import Media

    def run(samples):
        def produce():
            wav = tmp_path / f"a{samples}.wav"
            sf.write(wav, np.zeros((samples, 2), dtype=np.int16), 48000, subtype="PCM_16")
            return {"audio.wav": wav, "latent.npy": np.arange(4, dtype=np.float32)}

        return produce

    asked = Media(5, sample_rate=48000, channels=2)
    whole = compare_control_candidate(
        run(240000), run(240000), runs=2, kinds=kinds, workdir=tmp_path / "w", expect=asked
    )
    assert whole.verdict == "PASS"
    assert whole.coverage == ()
    short = compare_control_candidate(
        run(238800), run(238800), runs=2, kinds=kinds, workdir=tmp_path / "s", expect=asked
    )
    assert short.verdict == "FAIL"
    assert sorted({m.result.artifact for m in short.coverage}) == ["audio.wav"]
    assert len(short.coverage) == 3  # two control runs and the candidate
