"""The states of trials, segments and studies (shared by journal, controller and policies)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

Mode = Literal["max", "min"]  # which way a metric is better: the study's `mode`


def as_mode(value: object) -> Mode:
    """``value`` as a :data:`Mode`.

    Raises:
        ValueError: It is neither "max" nor "min".
    """
    if value == "max":
        return "max"
    if value == "min":
        return "min"
    raise ValueError(f"mode must be 'max' or 'min', but got {value!r}")


class TrialStatus(StrEnum):
    """Where a trial stands.

    ``queued``: created, waiting for a slot (also a trial whose worker was lost, until it
    resumes). ``running``: a segment of it is assigned to a worker. ``suspended``: stopped at a
    boundary with a checkpoint, may be resumed. ``completed``: trained to its last step (or its
    end step). ``terminated``: stopped for good by the policy, by the user or because its metric
    diverged. ``ended_early``: the user function returned before its last step without being
    told to stop (`hpctune retry` runs it again). ``failed``: the user function raised, or its
    workers were lost more often than ``max_retries`` allows.
    """

    QUEUED = "queued"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    TERMINATED = "terminated"
    ENDED_EARLY = "ended_early"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        """True for the states a trial leaves only through `hpctune retry`."""
        return self in (
            TrialStatus.COMPLETED,
            TrialStatus.TERMINATED,
            TrialStatus.ENDED_EARLY,
            TrialStatus.FAILED,
        )


class SegmentStatus(StrEnum):
    """How a segment (a stretch of one trial on one worker) ended, or that it has not."""

    ASSIGNED = "assigned"
    RUNNING = "running"
    COMPLETED = "completed"  # the trial reached its last step
    SUSPENDED = "suspended"  # stopped at a boundary or at the assignment's last step; resumable
    TERMINATED = "terminated"  # stopped for good (policy, user, diverged metric)
    ENDED_EARLY = "ended_early"  # the function returned before until_step, not told to stop
    FAILED = "failed"  # the user function raised
    LOST = "lost"  # the worker died; the trial resumes from its last checkpoint

    @property
    def is_final(self) -> bool:
        """True once the segment has ended."""
        return self not in (SegmentStatus.ASSIGNED, SegmentStatus.RUNNING)


class StudyState(StrEnum):
    """The state of a whole study."""

    CREATED = "created"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"  # by the user; `hpctune resume` carries on
    FINISHED = "finished"  # every trial reached a final state
    FAILED = "failed"  # e.g. fail_fast and a trial failed


class WorkerLife(StrEnum):
    """Where a worker stands, as the journal knows it (its ``worker`` records).

    ``started``: submitted or started by the controller, alive as far as it knows (running a
    segment or waiting for one). ``stopping``: told to exit, still finishing. ``exited``: it
    ended on its own or when told. ``lost``: its process or job is gone, or its heartbeat is too
    old (its segment is lost).
    """

    STARTED = "started"
    STOPPING = "stopping"
    EXITED = "exited"
    LOST = "lost"

    @property
    def is_alive(self) -> bool:
        """Started or stopping: its process may still run."""
        return self in (WorkerLife.STARTED, WorkerLife.STOPPING)


class Decision(StrEnum):
    """What a worker is told at a boundary."""

    CONTINUE = "continue"
    SUSPEND = "suspend"
    STOP = "stop"
