"""What a worker holds: its CPUs and GPUs, as the training function sees them (``ctx.devices``).

The executors say it in the environment of every worker: ``HPCTUNE_CPUS`` and ``HPCTUNE_GPUS``
(the local executor: the study's ``cpus_per_worker`` and no GPUs; Slurm: ``cpus_per_worker``
and ``gpus_per_worker``). Without them (a worker started by hand) Slurm's variables
(``SLURM_CPUS_PER_TASK``, ``SLURM_GPUS_ON_NODE``), ``CUDA_VISIBLE_DEVICES`` and the CPUs this
process may run on are used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

CPUS_VARIABLE = "HPCTUNE_CPUS"
GPUS_VARIABLE = "HPCTUNE_GPUS"


@dataclass(frozen=True)
class WorkerResources:
    """A worker's allocation.

    Attributes:
        cpus: CPUs it may use.
        gpus: GPUs it holds.
    """

    cpus: int
    gpus: int

    @property
    def devices(self) -> int:
        """Devices to train on: the GPUs, or the CPUs when there are none."""
        return self.gpus if self.gpus > 0 else self.cpus


def _count(value: str | None) -> int | None:
    if value is None or not value.strip():
        return None
    try:
        number = int(value.strip().split("(")[0])  # SLURM_CPUS_PER_TASK may read "4(x2)"
    except ValueError:
        return None
    return number if number >= 0 else None


def worker_resources(environ: Mapping[str, str] | None = None) -> WorkerResources:
    """The CPUs and GPUs of the worker this process runs in (see the module's docstring)."""
    env = os.environ if environ is None else environ
    cpus = _count(env.get(CPUS_VARIABLE)) or _count(env.get("SLURM_CPUS_PER_TASK"))
    if not cpus:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    gpus = _count(env.get(GPUS_VARIABLE))
    if gpus is None:
        visible = env.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            gpus = len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
        else:
            gpus = _count(env.get("SLURM_GPUS_ON_NODE")) or 0
    return WorkerResources(cpus=max(cpus, 1), gpus=gpus)


__all__ = ["CPUS_VARIABLE", "GPUS_VARIABLE", "WorkerResources", "worker_resources"]
