"""The Slurm environment parsed (devices/scheduler.py): the allocation, the array task's shard,
and the pool rules (the allocation replaces an ini pool; a larger command-line pool is an error
naming both)."""

from __future__ import annotations

import pytest

from pytest_lossless.devices.scheduler import scheduler_pool, slurm_job
from pytest_lossless.errors import ConfigError

#: As slurmd 22.05 set them for task 1 of `sbatch --array=0-3 --gres=gpu:2` on a node with
#: Gres=gpu:4 and no device cgroup (seen in this repository's Slurm test).
TASK = {
    "SLURM_JOB_ID": "17",
    "SLURM_ARRAY_JOB_ID": "16",
    "SLURM_ARRAY_TASK_ID": "1",
    "SLURM_ARRAY_TASK_MIN": "0",
    "SLURM_ARRAY_TASK_MAX": "3",
    "SLURM_ARRAY_TASK_COUNT": "4",
    "SLURMD_NODENAME": "vm",
    "SLURM_JOB_GPUS": "2,3",
    "SLURM_GPUS_ON_NODE": "2",
    "CUDA_VISIBLE_DEVICES": "2,3",
    "HOME": "/root",
}


def test_outside_slurm_there_is_no_job():
    assert slurm_job({"CUDA_VISIBLE_DEVICES": "0"}) is None
    assert slurm_job({"SLURM_JOB_ID": ""}) is None


def test_an_array_task_is_parsed_with_its_allocation():
    job = slurm_job(TASK)
    assert job is not None
    assert job.name == "16_1"
    assert job.node == "vm"
    assert job.devices == ("2", "3")
    assert job.devices_from == "SLURM_JOB_GPUS"
    assert job.visible == ("2", "3")
    assert job.describe() == "SLURM_JOB_GPUS=2,3, CUDA_VISIBLE_DEVICES=2,3"
    record = job.record()
    assert record["job_id"] == "17"
    assert record["array_task_id"] == 1
    assert record["allocation"]["SLURM_JOB_GPUS"] == "2,3"
    assert "HOME" not in record["allocation"]  # only what the scheduler set


def test_the_step_gpus_win_over_the_job_gpus_and_ascend_over_cuda():
    job = slurm_job(
        {
            **TASK,
            "SLURM_STEP_GPUS": "3",
            "ASCEND_RT_VISIBLE_DEVICES": "1",
            "CUDA_VISIBLE_DEVICES": "0",
        }
    )
    assert job is not None
    assert (job.devices, job.devices_from) == (("3",), "SLURM_STEP_GPUS")
    assert (job.visible, job.visible_from) == (("1",), "ASCEND_RT_VISIBLE_DEVICES")


def test_a_damaged_variable_is_named():
    with pytest.raises(ConfigError, match="environment SLURM_JOB_GPUS"):
        slurm_job({**TASK, "SLURM_JOB_GPUS": "3-1"})


def test_an_array_task_is_its_shard():
    job = slurm_job({**TASK, "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_ID": "3"})
    assert job is not None
    shard = job.array_shard()
    assert shard is not None
    assert shard.label == "2/4"
    assert "SLURM_ARRAY_TASK_ID=3" in shard.source


def test_a_stepped_array_counts_positions():
    job = slurm_job({**TASK, "SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_STEP": "2"})
    assert job is not None
    shard = job.array_shard()
    assert shard is not None
    assert shard.label == "3/4"


def test_an_irregular_array_asks_for_an_explicit_shard():
    job = slurm_job({**TASK, "SLURM_ARRAY_TASK_ID": "9"})  # --array=0,1,2,9
    assert job is not None
    with pytest.raises(ConfigError, match="give --lossless-shard I/N"):
        job.array_shard()


def test_a_plain_job_is_no_shard():
    job = slurm_job({"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "0"})
    assert job is not None
    assert job.array_shard() is None


# -- the pool rules


def test_no_job_or_no_devices_keeps_the_given_pool():
    assert scheduler_pool(None, ("0", "1"), source="ini lossless_devices", emulated=True) == (
        "0",
        "1",
    )
    bare = slurm_job({"SLURM_JOB_ID": "5"})
    assert scheduler_pool(bare, None, source="default", emulated=False) is None


def test_the_allocation_replaces_an_ini_pool():
    job = slurm_job(TASK)
    ini = ("0", "1", "2", "3")
    # Emulated slots are the scheduler's own indices: their locks are the physical devices'.
    assert scheduler_pool(job, ini, source="ini lossless_devices", emulated=True) == ("2", "3")
    assert scheduler_pool(job, None, source="default", emulated=True) == ("2", "3")
    # A real backend: the devices as the job sees them (as the discovery numbers them).
    renumbered = slurm_job({**TASK, "CUDA_VISIBLE_DEVICES": "0,1"})
    assert scheduler_pool(renumbered, ini, source="ini lossless_devices", emulated=False) == (
        "0",
        "1",
    )
    assert scheduler_pool(renumbered, ini, source="ini lossless_devices", emulated=True) == (
        "2",
        "3",
    )


def test_a_command_line_pool_within_the_allocation_stays():
    job = slurm_job(TASK)
    assert scheduler_pool(job, ("3",), source="--lossless-devices", emulated=True) == ("3",)
    env = "environment PYTEST_LOSSLESS_DEVICES"
    assert scheduler_pool(job, ("GPU-1",), source=env, emulated=False) == ("GPU-1",)


def test_a_command_line_pool_larger_than_the_allocation_names_both():
    job = slurm_job(TASK)
    with pytest.raises(ConfigError) as caught:
        scheduler_pool(job, ("0", "1", "2", "3"), source="--lossless-devices", emulated=False)
    text = str(caught.value)
    assert "--lossless-devices='0,1,2,3'" in text
    assert "names 4 devices" in text
    assert "Slurm job 16_1 on vm (SLURM_JOB_GPUS=2,3, CUDA_VISIBLE_DEVICES=2,3) was given 2" in text


def test_an_emulated_slot_outside_the_allocation_is_refused():
    job = slurm_job(TASK)
    with pytest.raises(ConfigError, match=r"names 0, which the Slurm job 16_1"):
        scheduler_pool(job, ("0", "3"), source="--lossless-devices", emulated=True)
