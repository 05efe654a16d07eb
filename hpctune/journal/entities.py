"""What the fold of the journal knows of each trial, segment and worker, and the study's
warnings and rejected commands (:class:`~hpctune.journal.state.StudyRecord` holds them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpctune.study.states import SegmentStatus, TrialStatus, WorkerLife


@dataclass
class StatusChange:
    """One entry of a trial's status history."""

    time: float
    status: TrialStatus
    step: int
    reason: str = ""


@dataclass
class SegmentRecord:
    """A stretch of one trial on one worker between two checkpoints."""

    segment_id: int
    trial_id: int
    worker_id: str
    start_step: int
    until_step: int
    checkpoint_row: int | None
    assigned_time: float
    status: SegmentStatus = SegmentStatus.ASSIGNED
    started_time: float | None = None
    ended_time: float | None = None
    end_step: int | None = None
    reason: str = ""
    host: str = ""
    pid: int | None = None
    decision: str = ""  # the last non-continue decision sent to it ("suspend" or "stop")
    decision_reason: str = ""
    decision_time: float | None = None
    checkpoint_steps: tuple[int, ...] = ()  # stage trees: save a checkpoint at these steps


@dataclass
class TrialRecord:
    """Everything the journal knows of one trial."""

    trial_id: int
    params: dict[str, Any]
    created_time: float
    seed: int
    generator_index: int | None = None
    parent_trial: int | None = None
    parent_step: int | None = None
    parent_checkpoint_row: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    end_step: int | None = None  # the step at which it is complete (None: max_steps)
    generation: int | None = None  # PBT
    initiator: int | None = None  # PBT: the trial whose reproduction created it
    shares_prefix: bool = False  # stage trees: its steps up to parent_step are its parent's
    request_step: int | None = None  # stage trees: train it up to here for now (a rung)
    status: TrialStatus = TrialStatus.QUEUED
    history: list[StatusChange] = field(default_factory=list)
    segments: list[int] = field(default_factory=list)
    step: int = 0
    checkpoint_row: int | None = None
    priority: float = 0.0
    retries: int = 0
    reason: str = ""
    error: str = ""
    # The study metric's curve (valid rows only), kept by the controller and the reader.
    curve_steps: list[int] = field(default_factory=list)
    curve_values: list[float] = field(default_factory=list)
    curve_times: list[float] = field(default_factory=list)
    last_metrics: dict[str, float] = field(default_factory=dict)  # latest value of each metric
    # Corrupt event lines that may have held a report, as (segment, step reached before it);
    # dropped when a later segment retrains from a step at or before it.
    missing: list[tuple[int, int]] = field(default_factory=list)

    @property
    def missing_rows(self) -> int:
        """Metric rows lost to corrupt event lines (skipped, never silently)."""
        return len(self.missing)

    def truncate_curve(self, step: int) -> None:
        """Drop curve points after ``step`` (a new segment restarts there)."""
        keep = 0
        while keep < len(self.curve_steps) and self.curve_steps[keep] <= step:
            keep += 1
        del self.curve_steps[keep:], self.curve_values[keep:], self.curve_times[keep:]


@dataclass
class PredictionRef:
    """A learning-curve prediction of a trial: a result file in ``curves/``.

    Attributes:
        trial_id: The trial.
        n: Points of its curve the fit used (steps 1..n).
        path: The result file, relative to the study directory.
        time: Controller's time of the ``prediction`` record.
        unknown: The fit gave no prediction (too few points, degenerate curve, failed job).
        median: Predicted median of the metric at ``max_steps`` (None if unknown).
        y_sha256: Digest of the fitted values (tells a stale file from the right one).
    """

    trial_id: int
    n: int
    path: str
    time: float
    unknown: bool = False
    median: float | None = None
    y_sha256: str = ""


@dataclass
class WorkerRun:
    """When one process of a worker ran."""

    since: float
    until: float | None = None


@dataclass
class WorkerRecord:
    """A worker process or Slurm job known to the journal."""

    worker_id: str
    started_time: float
    info: dict[str, Any] = field(default_factory=dict)
    state: WorkerLife = WorkerLife.STARTED
    segment_id: int | None = None  # the segment assigned and not ended
    ended_time: float | None = None
    reason: str = ""
    submitted_time: float | None = None
    runs: list[WorkerRun] = field(default_factory=list)  # one per process (Slurm: per requeue)
    devices: int | None = None  # its size, when the elastic plan gave it one (else the spec's)

    @property
    def open_run(self) -> float | None:
        """The start of the process running now (as far as the journal knows), or ``None``."""
        return self.runs[-1].since if self.runs and self.runs[-1].until is None else None


@dataclass
class RejectedCommand:
    """An inbox file the controller refused (moved to ``inbox/rejected/``)."""

    file: str
    reason: str
    time: float


@dataclass
class StudyWarning:
    """Something the user should know, journaled once (``code`` tells its kind)."""

    code: str
    message: str
    time: float
    trial: int = -1


__all__ = [
    "PredictionRef",
    "RejectedCommand",
    "SegmentRecord",
    "StatusChange",
    "StudyWarning",
    "TrialRecord",
    "WorkerRecord",
    "WorkerRun",
]
