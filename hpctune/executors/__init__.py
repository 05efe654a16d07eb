"""Executors start, watch and cancel workers: local processes here, Slurm jobs in hpctune.slurm."""

from __future__ import annotations

from hpctune.executors._base import Executor, WorkerState
from hpctune.executors.local import LocalExecutor

__all__ = ["Executor", "LocalExecutor", "WorkerState"]
