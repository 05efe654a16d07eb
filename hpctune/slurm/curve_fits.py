"""Learning-curve fits as Slurm job arrays (submitit ``map_array``), several curves per task.

Each array task runs :func:`~hpctune.curves.service.run_fit_task` on its chunk of fit jobs: one
:func:`~hpctune.curves.fitter.fit_many` call per curve, each result written to its own file as
soon as it is done (so a task that hits its time limit keeps what it finished). The controller
learns of results from the files; the tasks' Slurm states (batched ``squeue``, ``sacct`` as a
fallback, :class:`~hpctune.slurm.queue.SlurmQueue`) only tell it that a task ended without
writing some of its files, which the fit service then resubmits once or gives up as unknown.

The jobs are CPU jobs with the controller job's partition, account, qos, constraint and setup
lines (``[slurm.controller]``), one CPU each, and a time limit of four times ``task_seconds``
(at least 5 minutes).
"""

from __future__ import annotations

import logging
import math
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit

from hpctune.backends.base import WorkerState
from hpctune.curves.fitter import FitOptions
from hpctune.curves.options import CurvesSpec
from hpctune.curves.service import FitBackend, FitJob, run_fit_task
from hpctune.slurm.environment import SRUN_ARGS, export_lines
from hpctune.slurm.options import JobOptions
from hpctune.slurm.queue import SlurmQueue

logger = logging.getLogger(__name__)

#: Seconds between two looks at the result files of running tasks.
POLL_INTERVAL = 2.0


def curve_job_parameters(name: str, job: JobOptions, curves: CurvesSpec) -> dict[str, Any]:
    """The submitit ``SlurmExecutor`` parameters of a study's curve-fit array jobs."""
    params: dict[str, Any] = {
        "job_name": f"hpctune-{name}-curves",
        "time": max(5, math.ceil(4 * curves.task_seconds / 60)),
        "cpus_per_task": 1,
        "stderr_to_stdout": True,
        "srun_args": list(SRUN_ARGS),
        "setup": [
            "export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1",
            *export_lines(),
            *job.setup,
        ],
    }
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(job, key)
        if value is not None:
            params[key] = value
    return params


@dataclass
class _Task:
    job_id: str
    jobs: list[FitJob]
    submitted: float
    done: set[int] = field(default_factory=set)  # indices of jobs whose file was seen


class SlurmArrayBackend(FitBackend):
    """Run fit jobs as Slurm array tasks.

    Args:
        folder: submitit's folder (``<study>/slurm/curves``).
        parameters: submitit ``SlurmExecutor`` parameters (:func:`curve_job_parameters`).
        options: Fit options.
        queue: The job-state poller (one per backend).
        poll_interval: Seconds between two looks at the result files.
    """

    name = "slurm"

    def __init__(
        self,
        folder: Path,
        parameters: dict[str, Any],
        options: FitOptions,
        queue: SlurmQueue | None = None,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        self.folder = Path(folder)
        self.options = options
        self.queue = queue or SlurmQueue()
        self.poll_interval = poll_interval
        self._executor = submitit.SlurmExecutor(folder=self.folder / "%j")
        self._executor.update_parameters(**parameters)
        self._tasks: list[_Task] = []
        self._last_poll = -math.inf

    def submit(self, jobs: list[FitJob], per_task: int) -> list[tuple[FitJob, str]]:
        """Submit ``jobs`` as one array, ``per_task`` curves per task."""
        if not jobs:
            return []
        size = max(1, per_task)
        chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
        try:
            submitted = self._executor.map_array(
                run_fit_task, chunks, [self.options] * len(chunks), [self.name] * len(chunks)
            )
        except Exception as exc:  # submitit raises several types, with sbatch's message
            reason = f"sbatch failed: {exc}"
            logger.warning("curve-fit array of %d jobs: %s", len(jobs), reason)
            return [(job, reason) for job in jobs]
        now = time.time()
        for handle, chunk in zip(submitted, chunks, strict=True):
            self._tasks.append(_Task(str(handle.job_id), chunk, now))
        logger.info(
            "curve fits: %d curves in %d array tasks (%d per task), job %s",
            len(jobs),
            len(chunks),
            size,
            submitted[0].job_id.split("_")[0],
        )
        self.queue.refresh(force=True)
        return []

    def poll(self) -> tuple[list[FitJob], list[tuple[FitJob, str]]]:
        """Result files that appeared; the rest of a task's jobs fail once the task is gone."""
        now = time.monotonic()
        if not self._tasks or now - self._last_poll < self.poll_interval:
            return [], []
        self._last_poll = now
        done: list[FitJob] = []
        failed: list[tuple[FitJob, str]] = []
        keep: list[_Task] = []
        for task in self._tasks:
            for i, job in enumerate(task.jobs):
                if i not in task.done and Path(job.path).exists():
                    task.done.add(i)
                    done.append(job)
            if len(task.done) == len(task.jobs):
                continue
            state = self.queue.state(task.job_id, task.submitted)
            if state is WorkerState.GONE:
                # it may have written its last files between the look above and squeue's answer
                for i, job in enumerate(task.jobs):
                    if i in task.done:
                        continue
                    if Path(job.path).exists():
                        done.append(job)
                    else:
                        failed.append((job, f"Slurm task {task.job_id} ended without its result"))
                continue
            keep.append(task)
        self._tasks = keep
        return done, failed

    def in_flight(self) -> int:
        """Jobs of tasks not yet finished."""
        return sum(len(t.jobs) - len(t.done) for t in self._tasks)

    def job_ids(self) -> list[str]:
        """Array task ids still watched (``<job>_<index>``)."""
        return [t.job_id for t in self._tasks]

    def close(self) -> None:
        """``scancel`` the tasks still running: no one will read their results."""
        ids = self.job_ids()
        self._tasks = []
        if not ids:
            return
        try:
            subprocess.run(["scancel", *ids], check=False, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("scancel of curve-fit tasks failed: %s", exc)
