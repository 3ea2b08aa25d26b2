"""The scheduler's allocation: what Slurm gave this job, read from the environment it set.

Pure parsing of variables; nothing is asked of ``slurmctld``. Inside a Slurm job the devices the
job was given are the pool (:func:`scheduler_pool`): the scheduler, not this plugin, decides
which devices of the host are this job's. The host-wide locks still keep pytest-xdist workers
and other jobs on the host apart, keyed by the devices' physical identity: a GPU's UUID or bus
id, an emulated slot by the scheduler's own device index (``SLURM_JOB_GPUS``), never by the
index a job sees after Slurm renumbered them (``CUDA_VISIBLE_DEVICES=0,1`` in every job of a
node whose device cgroups are constrained).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.sharding import Shard
from ..errors import ConfigError
from ..settings import parse_device_list

#: The scheduler's own device indices, the step's first (``srun`` inside the job narrows them).
DEVICE_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
#: What a job's processes see, as Slurm exports it for its generic resources; an Ascend site's
#: prolog (or Slurm's gres plugin) sets the first, Slurm's ``gpu`` gres the second.
VISIBLE_VARIABLES = ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
#: Every variable recorded as "the allocation as Slurm gave it", when set.
RECORDED = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_STEP",
    #: How many times Slurm requeued the job (``scontrol requeue``, preemption): the one thing
    #: that tells a requeued task's sessions apart, same job id and array task as the first.
    "SLURM_RESTART_COUNT",
    "SLURM_STEP_ID",
    "SLURM_CLUSTER_NAME",
    "SLURM_JOB_PARTITION",
    "SLURMD_NODENAME",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GRES",
    "SLURM_TRES_PER_TASK",
    "GPU_DEVICE_ORDINAL",
    *VISIBLE_VARIABLES,
)
_NUMBER = re.compile(r"\s*\d+\s*")


@dataclass(frozen=True)
class SlurmJob:
    """One Slurm job (or array task) as its environment describes it."""

    job_id: str
    node: str | None
    #: The scheduler's own indices of the job's devices (``SLURM_STEP_GPUS``, else
    #: ``SLURM_JOB_GPUS``): the physical identity of an emulated slot.
    devices: tuple[str, ...]
    devices_from: str | None
    #: What the job's processes see (``ASCEND_RT_VISIBLE_DEVICES``, else
    #: ``CUDA_VISIBLE_DEVICES``), possibly renumbered from 0.
    visible: tuple[str, ...]
    visible_from: str | None
    array_job_id: str | None
    array_task_id: int | None
    array_task_min: int | None
    array_task_count: int | None
    array_task_step: int | None
    #: The variables as Slurm set them, name -> value.
    given: tuple[tuple[str, str], ...]

    @property
    def allocated(self) -> bool:
        """Whether the job was given devices (a generic resource); without them the scheduler
        says nothing about devices and the usual pool applies."""
        return bool(self.devices or self.visible)

    @property
    def size(self) -> int:
        return max(len(self.devices), len(self.visible))

    @property
    def name(self) -> str:
        """``123_2`` for task 2 of array 123, else the job id."""
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id

    def describe(self) -> str:
        """The allocation in the scheduler's words: ``SLURM_JOB_GPUS=2,3``."""
        given = dict(self.given)
        shown = [f"{n}={given[n]}" for n in (self.devices_from, self.visible_from) if n]
        return ", ".join(shown) or "no devices"

    def record(self) -> dict[str, Any]:
        """The scheduler's identity, as each receipt's RunSpec records it."""
        return {
            "name": "slurm",
            "job_id": self.job_id,
            "array_job_id": self.array_job_id,
            "array_task_id": self.array_task_id,
            "node": self.node,
            "devices": list(self.devices),
            "visible": list(self.visible),
            "allocation": dict(self.given),
        }

    def array_shard(self) -> Shard | None:
        """The shard an array task stands for: its position in the array (its id less the
        array's first, over the step) of the array's task count; None outside an array."""
        if self.array_task_id is None or self.array_task_count is None:
            return None
        low = self.array_task_min if self.array_task_min is not None else 0
        step = self.array_task_step or 1
        offset = self.array_task_id - low
        position, rest = divmod(offset, step)
        source = (
            f"Slurm array task {self.name} (SLURM_ARRAY_TASK_ID={self.array_task_id}, "
            f"SLURM_ARRAY_TASK_MIN={low}, SLURM_ARRAY_TASK_COUNT={self.array_task_count})"
        )
        if self.array_task_count == 1 and self.array_task_id != 0:
            # ``sbatch --array=2`` is how one task of a campaign is run again: its position in
            # this one-task array (0 of 1) is not the shard it stands for (2 of the first
            # array's N), and running every test there is never what a rerun meant. (Task 0
            # alone is the one-shard campaign ``--array=0-0``: shard 0/1.)
            raise ConfigError(
                "SLURM_ARRAY_TASK_COUNT",
                self.array_task_count,
                f"this array has one task ({source}), the way one task of a campaign is run "
                "again, so its shard is not known here: give --lossless-shard I/N, the shard "
                f"the task ran as in the campaign's array (task {self.array_task_id} of "
                f"--array=0-3: --lossless-shard {self.array_task_id}/4), or --lossless-shard "
                "0/1 to run every test",
            )
        if rest or not 0 <= position < self.array_task_count:
            raise ConfigError(
                "SLURM_ARRAY_TASK_ID",
                self.array_task_id,
                f"this array's task ids are not one evenly spaced range ({source}), so the "
                "task's position is not its shard: give --lossless-shard I/N to each task",
            )
        return Shard(position, self.array_task_count, source=source)


def _number(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name)
    if text is None or not _NUMBER.fullmatch(text):
        return None
    return int(text)


def _devices(env: Mapping[str, str], names: Sequence[str]) -> tuple[tuple[str, ...], str | None]:
    for name in names:
        text = env.get(name, "").strip()
        if not text:
            continue
        try:
            return parse_device_list(text), name
        except ValueError as exc:
            raise ConfigError(f"environment {name}", text, str(exc)) from None
    return (), None


def slurm_job(env: Mapping[str, str]) -> SlurmJob | None:
    """The Slurm job this process runs in, or None outside one (no ``SLURM_JOB_ID``)."""
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id:
        return None
    devices, devices_from = _devices(env, DEVICE_VARIABLES)
    visible, visible_from = _devices(env, VISIBLE_VARIABLES)
    return SlurmJob(
        job_id=job_id,
        node=env.get("SLURMD_NODENAME") or None,
        devices=devices,
        devices_from=devices_from,
        visible=visible,
        visible_from=visible_from,
        array_job_id=env.get("SLURM_ARRAY_JOB_ID") or None,
        array_task_id=_number(env, "SLURM_ARRAY_TASK_ID"),
        array_task_min=_number(env, "SLURM_ARRAY_TASK_MIN"),
        array_task_count=_number(env, "SLURM_ARRAY_TASK_COUNT"),
        array_task_step=_number(env, "SLURM_ARRAY_TASK_STEP"),
        given=tuple((n, env[n]) for n in RECORDED if n in env),
    )


def scheduler_pool(
    job: SlurmJob | None,
    given: Sequence[str] | None,
    *,
    source: str,
    emulated: bool,
) -> tuple[str, ...] | None:
    """The pool a session takes its devices from, under a scheduler or not.

    Outside a job, or in one given no devices, it is ``given`` (``--lossless-devices`` or the
    ini's). Inside one, the allocation replaces a pool from the ini file or the default: an
    emulated backend (cpu slots) takes one slot per scheduler index, a real one the devices the
    job sees (its discovery is also narrowed by the visible-devices variable). A pool the user
    gave for this run (``source``: the command line or the environment) stays, but may not be
    larger than the allocation, and an emulated slot must be one the job was given: either is a
    :class:`ConfigError` naming both.
    """
    if job is None or not job.allocated:
        return tuple(given) if given is not None else None
    slots = job.devices or job.visible
    seen = job.visible if not emulated and job.visible else slots
    if given is None or not source.startswith(("--", "environment")):
        return seen
    where = f"Slurm job {job.name}{f' on {job.node}' if job.node else ''} ({job.describe()})"
    if len(given) > job.size:
        raise ConfigError(
            source,
            ",".join(given),
            f"names {len(given)} devices, but the {where} was given {job.size}: name at most "
            f"{job.size} of them, or leave the pool out to take the whole allocation",
        )
    if emulated:
        outside = [d for d in given if d not in slots]
        if outside:
            raise ConfigError(
                source,
                ",".join(given),
                f"names {','.join(outside)}, which the {where} was not given: emulated slots "
                f"are the scheduler's device indices ({','.join(slots)})",
            )
    return tuple(given)


__all__ = ["SlurmJob", "scheduler_pool", "slurm_job"]
