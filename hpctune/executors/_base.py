"""The executor interface: how the controller starts, watches and cancels workers.

An executor knows nothing of trials or policies. It starts worker processes or jobs for given
worker ids and returns, for each, a JSON-able ``info`` dict that the controller stores in the
journal, so that a restarted controller (a new process, maybe on another node) can still ask
whether that worker lives and cancel it. Liveness answers are a second opinion: the worker's
heartbeat file is the first.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any


class WorkerState(Enum):
    """What the executor knows of a worker's process or job."""

    PENDING = "pending"  # waiting in the queue (also after a requeue): no process now
    RUNNING = "running"  # a process exists
    GONE = "gone"  # finished, failed, cancelled: it will not run again
    UNKNOWN = "unknown"  # no answer (another host, squeue failing)


class Executor(abc.ABC):
    """Base class of executors (local processes; Slurm jobs through submitit)."""

    name: str = ""

    @abc.abstractmethod
    def start(
        self, worker_ids: list[str], devices: int | None = None
    ) -> dict[str, dict[str, Any]]:
        """Start one worker per id (as one batch where the backend allows); return their infos.

        ``devices``: the size of each worker, in devices of the study's ``[resources]`` worker
        (a GPU with its CPUs, or a CPU), as the elastic plan gives it: the worker holds
        ``devices`` times the resources of one, and its trials see ``ctx.devices ==
        devices``; ``None``: the spec's worker as it is.

        Raises:
            SubmissionError: A worker could not be started.
        """

    @abc.abstractmethod
    def state(self, worker_id: str, info: Mapping[str, Any]) -> WorkerState:
        """Where the worker's process or job stands (a second opinion after its heartbeat)."""

    @abc.abstractmethod
    def cancel(self, worker_id: str, info: Mapping[str, Any]) -> None:
        """Stop the worker at once (SIGKILL or scancel). Idempotent."""

    def end_reason(self, worker_id: str, info: Mapping[str, Any]) -> str:
        """How a worker that is gone ended, as far as the backend knows ("" if it does not):
        its exit code or signal, "out of memory" when the kernel or Slurm says so."""
        return ""

    def end_time(self, worker_id: str, info: Mapping[str, Any]) -> float | None:
        """When a worker that is gone released its allocation, as the backend accounts it
        (Slurm: the job's end in sacct), or ``None`` if the backend does not say."""
        return None

    def close(self) -> None:  # noqa: B027
        """Release resources held by the executor (not the workers)."""

    def use_spec(self, spec: Any) -> None:  # noqa: B027
        """Start the next workers with changed settings (``resume --slurm``); default: none."""

    def output_path(self, worker_id: str, info: Mapping[str, Any]) -> Path | None:
        """The file that holds the worker's own output (a traceback when it dies at start)."""
        return None
