"""The repository's gate suite: `pytest -m npu --lossless`.

Every test holds a locked device allocation (cpu slots here; NPUs or GPUs on a real campaign),
runs the demo model, and is judged by code: goldens for the control, the verdict table for
control vs candidate, paired timing for speed.
"""

from __future__ import annotations

import pytest

from pytest_lossless import Media
from pytest_lossless.run import lifecycle_verdict
from tests.gates.ref2va import (
    GATE_STEPS,
    OUTPUTS,
    REFERENCE,
    REPO,
    WORKLOADS,
    arm,
    gate_argv,
    generate,
    request_clip,
    start_server,
)

pytestmark = [pytest.mark.slow, pytest.mark.npu(devices=1), pytest.mark.lossless]


def requested(seconds):
    """What a request of ``seconds`` must produce: 24 fps video with its 48 kHz stereo track,
    and the same track alone; a truncated clip fails and is never written as a golden."""
    return {
        "clip.mp4": Media(seconds, fps=24, sample_rate=48000, channels=2),
        "audio.wav": Media(seconds, sample_rate=48000, channels=2),
    }


@pytest.mark.parametrize("seconds", WORKLOADS)
def test_cli_matches_goldens(model_run, golden, seconds):
    # A producer: under --update-goldens it runs twice and must agree with itself.
    golden.check_all(lambda: generate(model_run, "control", seconds), expect=requested(seconds))


@pytest.mark.parametrize("seconds", WORKLOADS)
def test_server_matches_goldens(model_run, golden, seconds):
    server = start_server(model_run)
    golden.check_all(lambda: request_clip(server, seconds), expect=requested(seconds))
    lifecycle = lifecycle_verdict(server.stop())
    assert lifecycle.clean, lifecycle.summary


@pytest.mark.parametrize("seconds", WORKLOADS)
def test_fast_is_lossless(model_run, lossless, seconds):
    verdict = lossless.compare(
        arm(model_run, "control", seconds),
        arm(model_run, "fast", seconds),
        label=f"fast vs control {seconds}s",
        proof=FAST_PATH,
        # Traced at 5 s: every block at every step identical (the 15 s traces tell no more).
        trace=seconds == 5,
    )
    if seconds == 5:
        assert verdict.divergence["identical"], verdict.divergence


#: The line the fast path prints when it runs: the candidate's dispatch proof.
FAST_PATH = r"ref2va: dispatch batched"

# Timing takes the whole pool of (emulated) devices: under pytest-xdist no other gate runs beside
# it, so the arms are timed one at a time on a quiet allocation.
WHOLE_POOL = pytest.mark.npu(devices=4)


@WHOLE_POOL
@pytest.mark.parametrize("seconds", WORKLOADS)
def test_fast_is_faster(model_run, speed_gate, seconds):
    speed_gate(
        arm(model_run, "control", seconds),
        arm(model_run, "fast", seconds),
        target=0.30,
        workload=f"{seconds}s",
        proof=FAST_PATH,
        # Up to 12 pairs: a quiet machine decides at 6 as before; with one core busy, a few
        # spiked blocks are outvoted at the later looks instead of leaving the gate INCONCLUSIVE.
        pairs=12,
    )


# Expected verdicts: these tests prove the gates can say FAIL and INCONCLUSIVE on real runs;
# each passes only when the verdict is the expected one.


def test_fused_is_not_lossless(model_run, lossless):
    verdict = lossless.compare(
        arm(model_run, "control", 5),
        arm(model_run, "fused", 5),
        label="fused vs control 5s",
        expect="FAIL",
        trace=True,
    )
    # Where: the fused operation (the step size folded into the output projection), at the
    # first step; the unfused projection it replaced is listed as present in the control only.
    found = verdict.divergence
    assert (found["first"]["name"], found["first"]["stage"]) == (
        "denoise.eps_scaled",
        "denoise/step 0",
    ), found
    assert ["denoise.eps", int(GATE_STEPS)] in found["only_left"]  # one per step
    assert "first divergence: denoise.eps_scaled" in verdict.message()


def test_racy_control_is_inconclusive(model_run, lossless):
    verdict = lossless.compare(
        arm(model_run, "racy", 5),
        arm(model_run, "fast", 5),
        label="racy control 5s",
        expect="INCONCLUSIVE",
        trace=True,
    )
    # Where the two control runs part: the racy split-K reduction, at the step it first shows.
    found = verdict.divergence
    assert found["between"] == ["control#1", "control#2"], found
    assert found["first"]["name"] == "denoise.eps", found
    assert found["first"]["stage"].startswith("denoise/step "), found
    assert "first divergence: denoise.eps" in verdict.message()


def test_silent_fallback_is_inconclusive(model_run, lossless):
    # Bit-identical to the control, because it *is* the control's path: only the proof tells.
    lossless.compare(
        arm(model_run, "control", 1),
        arm(model_run, "fallback", 1),
        label="fallback vs control 1s",
        proof=FAST_PATH,
        expect="INCONCLUSIVE",
    )


@WHOLE_POOL
def test_a_a_is_not_a_gain(model_run, speed_gate):
    # A 1 s clip keeps the suite short; what matters is that equal builds never show a gain.
    speed_gate(
        arm(model_run, "control", 1),
        arm(model_run, "control", 1),
        target=0.30,
        workload="A/A 1s",
        expect=("FAIL", "INCONCLUSIVE"),
    )


# Which knob breaks it (#24): the racy build has two knobs, its split-K reduction's thread count
# and its frames per batch. One thread is the fast path's order (PASS); two always add the same
# two partial sums, in either order the same result but not the reference's (FAIL); four race
# (INCONCLUSIVE: a cell's own runs disagree). The chunk never matters. Half a second of video
# keeps the 12 runs cheap.
KNOB_CELLS = {
    "threads=2, chunk=1": "FAIL",
    "threads=2, chunk=4": "FAIL",
    "threads=4, chunk=1": "INCONCLUSIVE",
    "threads=4, chunk=4": "INCONCLUSIVE",
}


def test_matrix_of_the_racy_knobs(model_run, lossless):
    def make_run(threads, chunk):
        argv = [*gate_argv("racy", 0.5), "--threads", str(threads), "--chunk", str(chunk)]
        return lambda: model_run(
            argv, outputs=OUTPUTS, cwd=REPO, timeout=300, inputs={"reference": REFERENCE}
        )

    grid = lossless.matrix(
        make_run,
        {"threads": [1, 2, 4], "chunk": [1, 4]},
        runs=2,
        label="racy knobs 0.5s",
        expect=KNOB_CELLS,
    )
    assert grid.explanation.startswith("differs whenever threads > 1, whatever the chunk")
