"""Where the allocated time went, from the journal alone: workers, queue, training.

* A worker's **allocated** time is the sum of its processes' run times (Slurm: from the job's
  start to its end or requeue), idle time included; GPU-hours multiply it by the GPUs per worker
  (and by the worker's size where the elastic plan gave it one: its **device** time).
* Its **queue** time runs from submission (or a requeue) to the start of the next process.
* **Training** time is the sum of its segments (from the worker's start record to its end
  record): what the user's function ran, checkpoint loads and saves included.
* What is allocated but not training (start-up, waiting for assignments and decisions, idle
  at the end) is ``1 - training / allocated``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpctune.journal.entities import SegmentRecord, TrialRecord
from hpctune.journal.state import StudyRecord


@dataclass(frozen=True)
class Usage:
    """What a study used.

    Attributes:
        workers: Workers (processes or jobs) it submitted.
        allocated_s: Seconds the workers held their allocation.
        training_s: Seconds of segments.
        queue_s: Seconds the workers waited in the queue.
        gpus_per_worker: GPUs each worker held (per device, for a worker the elastic plan
            sized).
        cpus_per_worker: CPUs each worker held (likewise).
        device_s: Seconds held times each worker's devices (its size, else 1): the elastic
            plan's cost basis; ``allocated_s`` when no worker was sized.
        training_device_s: Seconds of segments times their workers' devices.
    """

    workers: int
    allocated_s: float
    training_s: float
    queue_s: float
    gpus_per_worker: int
    cpus_per_worker: int
    device_s: float = 0.0
    training_device_s: float = 0.0

    @property
    def gpu_hours(self) -> float:
        """Allocated GPU-hours."""
        return self.device_s * self.gpus_per_worker / 3600.0

    @property
    def cpu_hours(self) -> float:
        """Allocated CPU-hours."""
        return self.device_s * self.cpus_per_worker / 3600.0

    @property
    def not_training_share(self) -> float:
        """The share of allocated time not spent in segments (0 when nothing was allocated)."""
        if self.allocated_s <= 0:
            return 0.0
        return max(0.0, 1.0 - self.training_s / self.allocated_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (used by ``hpctune status --json``)."""
        return {
            "workers": self.workers,
            "allocated_s": self.allocated_s,
            "training_s": self.training_s,
            "queue_s": self.queue_s,
            "gpu_hours": self.gpu_hours,
            "cpu_hours": self.cpu_hours,
            "not_training_share": self.not_training_share,
        }


def study_usage(record: StudyRecord, now: float | None = None) -> Usage:
    """The usage of a whole study as of its journal (open runs count until ``now``)."""
    now = time.time() if now is None else now
    end = record.ended_time or now
    allocated = queue = device = 0.0
    submitted = 0
    for worker in record.workers.values():
        if worker.submitted_time is None:
            continue
        submitted += 1
        waiting_since: float | None = worker.submitted_time
        for run in worker.runs:
            if waiting_since is not None:
                queue += max(0.0, run.since - waiting_since)
            stop = run.until if run.until is not None else (worker.ended_time or end)
            allocated += max(0.0, stop - run.since)
            device += max(0.0, stop - run.since) * (worker.devices or 1)
            waiting_since = run.until
        if not worker.runs and worker.ended_time is None:
            queue += max(0.0, end - worker.submitted_time)
    training = training_device = 0.0
    for seg in record.segments.values():
        seconds = segment_seconds(seg, now)
        held_by = record.workers.get(seg.worker_id)
        training += seconds
        training_device += seconds * ((held_by.devices if held_by else None) or 1)
    resources = record.spec.get("resources", {})
    return Usage(
        workers=submitted,
        allocated_s=allocated,
        training_s=training,
        queue_s=queue,
        gpus_per_worker=int(resources.get("gpus_per_worker", 0)),
        cpus_per_worker=int(resources.get("cpus_per_worker", 1)),
        device_s=device,
        training_device_s=training_device,
    )


def trial_training_s(record: StudyRecord, trial: TrialRecord, now: float | None = None) -> float:
    """Seconds a trial's segments ran."""
    now = time.time() if now is None else now
    return sum((segment_seconds(record.segments[s], now) for s in trial.segments), 0.0)


def segment_seconds(seg: SegmentRecord, now: float) -> float:
    """Seconds a segment ran: from its start to its end, or to ``now`` (0 if not started)."""
    if seg.started_time is None:
        return 0.0
    return max(0.0, (seg.ended_time or now) - seg.started_time)


def trial_wall_s(record: StudyRecord, trial: TrialRecord, now: float | None = None) -> float:
    """Seconds from a trial's creation to its last segment's end (or ``now``)."""
    now = time.time() if now is None else now
    end = now
    if trial.status.is_final and trial.segments:
        last = record.segments[trial.segments[-1]]
        end = last.ended_time or now
    return max(0.0, end - trial.created_time)


def allocated_by(
    record: StudyRecord, times: Sequence[float], now: float | None = None
) -> np.ndarray:
    """Seconds of allocation the workers had used by each of ``times`` (absolute)."""
    now = time.time() if now is None else now
    end = record.ended_time or now
    since, stop = [], []
    for worker in record.workers.values():
        for run in worker.runs:
            since.append(run.since)
            stop.append(
                max(run.until if run.until is not None else (worker.ended_time or end), run.since)
            )
    t = np.asarray(times, dtype=float)[:, None]
    a, b = np.asarray(since, dtype=float)[None, :], np.asarray(stop, dtype=float)[None, :]
    return np.clip(t - a, 0.0, b - a).sum(axis=1) if len(since) else np.zeros(len(times))
