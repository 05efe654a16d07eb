"""Workers as Slurm jobs, submitted through submitit.

Several workers that start at once go in one job array (submitit's ``batch``). Each job runs
:class:`WorkerJob`, the same :class:`~hpctune.worker.loop.Worker` loop the local executor runs.
Jobs are
submitted with ``--requeue`` and ``--signal=USR2@signal_delay_s``; the worker handles the signal
itself (suspend at the next report, then ``scontrol requeue`` of exactly its own array task).
Liveness comes from the workers' heartbeat files first and from
:class:`~hpctune.slurm.queue.SlurmQueue` second. The jobs set their environment explicitly
(:mod:`hpctune.slurm.environment`), so that they run the same under ``SBATCH_EXPORT=NONE``.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import submitit
from submitit.core.utils import JobPaths

from hpctune.backends.base import Executor, WorkerState
from hpctune.errors import SubmissionError
from hpctune.slurm.cluster import partition_billing, resolve_times
from hpctune.slurm.environment import SRUN_ARGS, export_lines
from hpctune.slurm.options import DEFAULT_WORKER_TIME_MIN, slurm_spec
from hpctune.slurm.queue import SlurmQueue, job_end_reason, job_end_time
from hpctune.spec import StudySpec
from hpctune.wire.layout import StudyPaths
from hpctune.worker.context import DEVICES_VARIABLE
from hpctune.worker.loop import Worker, setup_logging

logger = logging.getLogger(__name__)


class WorkerJob:
    """The callable a worker's Slurm job runs (pickled by submitit).

    Args:
        study_dir: The study directory.
        worker_id: The worker's id in the journal.
        controller_timeout: Seconds the worker waits for a silent controller before it exits.
    """

    def __init__(self, study_dir: str, worker_id: str, controller_timeout: float) -> None:
        self.study_dir = study_dir
        self.worker_id = worker_id
        self.controller_timeout = controller_timeout

    def __call__(self) -> int:
        """Run the worker loop in this job (also after a requeue: same worker id)."""
        if int(os.environ.get("SLURM_PROCID", "0")) != 0:
            return 0  # a whole-node worker's other nodes: its training function reaches them
        worker = Worker(self.study_dir, self.worker_id, controller_timeout=self.controller_timeout)
        setup_logging(StudyPaths.of(self.study_dir).worker_log(self.worker_id))
        try:
            return worker.run()
        finally:
            # a SIGUSR2 that comes after the loop (Slurm repeats it near the time limit) must
            # not kill the process while submitit writes the result
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def worker_parameters(
    spec: StudySpec, env: Mapping[str, str] | None = None, devices: int | None = None
) -> dict[str, Any]:
    """The submitit ``SlurmExecutor`` parameters of a study's worker jobs.

    ``env`` (default: this process's) gives the variables the jobs export explicitly.
    ``devices``: a worker of that many of ``[resources]``'s workers (the elastic plan's size:
    ``devices`` times the GPUs and CPUs, ``ctx.devices == devices``). With ``[resources]
    node_devices``, a worker of a whole node's devices or more asks for whole nodes
    (``--exclusive``), one task per node: the worker runs on the first, and its training
    function reaches the others (``SLURM_JOB_NODELIST``, ``srun --overlap``).
    """
    slurm = slurm_spec(spec)
    options, resources = slurm.worker, spec.resources
    size = 1 if devices is None else devices
    nodes = 1
    node = resources.node_devices
    if devices is not None and node is not None and size > node:
        nodes = size // node  # whole nodes (the spec keeps max_devices a multiple)
    per_node = size // nodes
    threads = resources.cpus_per_worker * per_node
    exported = devices if devices is not None else resources.gpus_per_worker or threads
    params: dict[str, Any] = {
        "job_name": f"hpctune-{spec.name}",
        "time": options.time_min or DEFAULT_WORKER_TIME_MIN,
        "cpus_per_task": threads,
        "signal_delay_s": slurm.signal_delay_s,
        "stderr_to_stdout": True,
        "array_parallelism": resources.slots,
        "srun_args": list(SRUN_ARGS),
        "setup": [
            f"export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "
            f"{DEVICES_VARIABLE}={exported}",
            *export_lines(env),
            *options.setup,
        ],
        "additional_parameters": {"requeue": True, **options.extra},
    }
    if resources.gpus_per_worker:
        params["gpus_per_node"] = resources.gpus_per_worker * per_node
    if node is not None and devices is not None and per_node >= node:
        params["exclusive"] = True  # the whole node: no other job's trial beside it
        params["nodes"] = nodes
        params["ntasks_per_node"] = 1
    if options.mem_gb is not None:
        params["mem"] = f"{math.ceil(options.mem_gb * 1024)}M"
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(options, key)
        if value is not None:
            params[key] = value
    return params


class SlurmExecutor(Executor):
    """Start workers as Slurm jobs.

    Args:
        study_dir: The study directory (submitit's files go to ``slurm/workers/``).
        spec: The study spec (its ``[slurm]`` and ``[resources]`` sections).
        queue: The job-state poller (one per executor).
    """

    name = "slurm"

    def __init__(self, study_dir: Path, spec: StudySpec, queue: SlurmQueue | None = None) -> None:
        self.paths = StudyPaths.of(study_dir)
        self.queue = queue or SlurmQueue()
        self.folder = self.paths.root / "slurm" / "workers"
        self.use_spec(spec)

    def use_spec(self, spec: StudySpec) -> None:
        """Submit the next workers with ``spec``'s settings (unset times: the partition's)."""
        self.spec = resolve_times(spec)
        self.max_pending = slurm_spec(spec).max_pending
        self._executors: dict[int | None, submitit.SlurmExecutor] = {}
        self._executor_for(None)  # its parameters checked now

    def _executor_for(self, devices: int | None) -> submitit.SlurmExecutor:
        """submitit's executor for workers of ``devices`` devices (one per size, kept)."""
        executor = self._executors.get(devices)
        if executor is None:
            executor = submitit.SlurmExecutor(folder=self.folder / "%j")
            executor.update_parameters(**worker_parameters(self.spec, devices=devices))
            self._executors[devices] = executor
        return executor

    def output_path(self, worker_id: str, info: Mapping[str, Any]) -> Path | None:
        """submitit's log of the worker's job: its stdout and stderr, and the traceback of a
        worker that died at start (``slurm/workers/<job>/<job>_0_log.out``)."""
        job = info.get("job_id")
        if not job:
            return None
        return JobPaths(self.folder / "%j", job_id=str(job), task_id=0).stdout

    def start(
        self, worker_ids: list[str], devices: int | None = None
    ) -> dict[str, dict[str, Any]]:
        """Submit one job per worker (of ``devices`` devices each), as one job array when
        there are several."""
        timeout = float(slurm_spec(self.spec).controller_timeout_s)
        root = str(self.paths.root)
        try:
            executor = self._executor_for(devices)
            if len(worker_ids) == 1:
                jobs = [executor.submit(WorkerJob(root, worker_ids[0], timeout))]
            else:
                with executor.batch():
                    jobs = [executor.submit(WorkerJob(root, w, timeout)) for w in worker_ids]
        except Exception as exc:  # submitit raises several types, with sbatch's message
            raise SubmissionError(
                f"sbatch failed for workers {', '.join(worker_ids)}: {exc}; check the [slurm] "
                "section (partition, account, qos, time, mem) against `sinfo` and your limits"
            ) from exc
        now = time.time()
        self.queue.refresh(force=True)
        return {
            w: {"executor": self.name, "job_id": str(job.job_id), "submitted": now}
            for w, job in zip(worker_ids, jobs, strict=True)
        }

    def state(self, worker_id: str, info: Mapping[str, Any]) -> WorkerState:
        """Ask squeue (and sacct) about the worker's job."""
        job = info.get("job_id")
        if not job:
            return WorkerState.UNKNOWN
        return self.queue.state(str(job), info.get("submitted"))

    def end_reason(self, worker_id: str, info: Mapping[str, Any]) -> str:
        """What ``sacct`` says of the worker's job: its state and exit code or signal."""
        job = info.get("job_id")
        return job_end_reason(str(job)) if job else ""

    def end_time(self, worker_id: str, info: Mapping[str, Any]) -> float | None:
        """The worker's job's end in ``sacct``."""
        job = info.get("job_id")
        return job_end_time(str(job)) if job else None

    def billing_weight(
        self, spec: StudySpec, partition: str | None, gpu: bool
    ) -> tuple[float, str]:
        """The partition's ``TRESBillingWeights`` per device of the study's workers."""
        return partition_billing(spec, partition, gpu=gpu)

    def cancel(self, worker_id: str, info: Mapping[str, Any]) -> None:
        """``scancel`` the worker's job."""
        job = info.get("job_id")
        if not job:
            return
        try:
            subprocess.run(["scancel", str(job)], check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("scancel %s failed: %s", job, exc)
        self.queue.refresh(force=True)
