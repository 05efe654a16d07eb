"""The study's state as a fold over the journal's log, shared by the controller and readers.

The controller appends a log record and applies it to its in-memory :class:`StudyRecord` with
the same :meth:`StudyRecord.apply` a reader uses to rebuild the state from the journal, so what the
controller acts on and what ``hpctune status`` shows cannot drift apart, and a restarted
controller rebuilds exactly the state the killed one had committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpctune.journal.checkpoints import CheckpointRef, CheckpointTable
from hpctune.journal.delta import apply_delta
from hpctune.wire.states import SegmentStatus, StudyState, TrialStatus, WorkerLife

# Log record kinds.
STUDY = "study"
TRIAL_CREATED = "trial_created"
TRIAL_STATUS = "trial_status"
SEGMENT_ASSIGNED = "segment_assigned"
SEGMENT_STARTED = "segment_started"
SEGMENT_ENDED = "segment_ended"
DECISION = "decision"
WORKER = "worker"
COMMAND = "command"
POLICY_STATE = "policy_state"
POLICY_DELTA = "policy_delta"  # a patch of the last policy state (journal/delta.py)
CHECKPOINT_DELETED = "checkpoint_deleted"
CONTROLLER = "controller"
PREDICTION = "prediction"
LINEAGE = "lineage"
REQUEST = "request"
IMPORTED = "imported"
WARNING = "warning"
CORRUPT_LINES = "corrupt_lines"
SUBMISSION = "submission"
SLURM_CHANGED = "slurm_changed"
ELASTIC_PLAN = "elastic_plan"  # the plan a study with a deadline follows (hpctune.elastic.follow)
ELASTIC_STAGE = "elastic_stage"  # the controller moved to a stage of that plan

# the kinds that can change which checkpoints a study still needs
_CHECKPOINT_KINDS = frozenset(
    {TRIAL_CREATED, TRIAL_STATUS, SEGMENT_ASSIGNED, SEGMENT_ENDED, CHECKPOINT_DELETED, LINEAGE}
)
LOG_KINDS = (
    STUDY,
    TRIAL_CREATED,
    TRIAL_STATUS,
    SEGMENT_ASSIGNED,
    SEGMENT_STARTED,
    SEGMENT_ENDED,
    DECISION,
    WORKER,
    COMMAND,
    POLICY_STATE,
    POLICY_DELTA,
    CHECKPOINT_DELETED,
    CONTROLLER,
    PREDICTION,
    LINEAGE,
    REQUEST,
    IMPORTED,
    WARNING,
    CORRUPT_LINES,
    SUBMISSION,
    SLURM_CHANGED,
    ELASTIC_PLAN,
    ELASTIC_STAGE,
)


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
    """The latest learning-curve prediction of a trial: a result file in ``curves/``.

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


@dataclass
class StudyRecord:
    """The fold of the journal's log: the whole state of a study."""

    spec: dict[str, Any] = field(default_factory=dict)
    state: StudyState = StudyState.CREATED
    created_time: float = 0.0
    started_time: float | None = None
    ended_time: float | None = None
    reason: str = ""
    failing: bool = False  # the study is stopping because of a failure; it ends as failed
    trials: dict[int, TrialRecord] = field(default_factory=dict)
    segments: dict[int, SegmentRecord] = field(default_factory=dict)
    workers: dict[str, WorkerRecord] = field(default_factory=dict)
    checkpoints: CheckpointTable = field(default_factory=CheckpointTable)
    policy_state: dict[str, Any] = field(default_factory=dict)
    commands_done: set[str] = field(default_factory=set)
    controller_starts: int = 0
    submit_failures: int = 0  # worker submissions failed in a row (this controller)
    submit_error: str = ""  # the last failure's message (Slurm's own)
    slurm_changes: list[dict[str, Any]] = field(default_factory=list)  # `resume --slurm`
    generated: int = 0  # trials created from the generator
    predictions: dict[int, PredictionRef] = field(default_factory=dict)  # latest per trial
    rejected_commands: list[RejectedCommand] = field(default_factory=list)
    warnings: list[StudyWarning] = field(default_factory=list)
    # a deadline's plans (each ``elastic_plan`` record's data and ``time``; the last is in force)
    elastic_plans: list[dict[str, Any]] = field(default_factory=list)
    # ``(stage, time)`` of each ``elastic_stage`` record: the controller entered that stage
    elastic_stages: list[tuple[int, float]] = field(default_factory=list)
    # checkpoint rows not deleted, by trial (built on first use from ``checkpoints``)
    _live_rows: dict[int, set[int]] | None = field(default=None, repr=False, compare=False)
    # segments assigned or running, by id (kept as segments are assigned and end)
    _active: dict[int, SegmentRecord] = field(default_factory=dict, repr=False, compare=False)
    # counts the records that can change which checkpoints are needed (trials created and their
    # statuses, checkpoints added and deleted, lineage): the controller collects on a change
    checkpoint_changes: int = field(default=0, repr=False, compare=False)
    # checkpoint row -> the trials whose latest checkpoint it is (kept by hold_checkpoint)
    _holders: dict[int, set[int]] = field(default_factory=dict, repr=False, compare=False)
    # the trials made from another trial's checkpoint (forks, stage-tree trials), by id
    forked: set[int] = field(default_factory=set, repr=False, compare=False)
    # trials changed since the controller last took this set (its views of them are stale)
    changed: set[int] = field(default_factory=set, repr=False, compare=False)
    # completed trials' values under the study's ``best`` rule (hpctune.analysis.best.best_trial's
    # memo)
    best_values: dict[int, tuple[Any, Any]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def metric(self) -> str:
        """The name of the study's metric."""
        return str(self.spec.get("metric", ""))

    def apply(
        self, kind: str, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        """Apply one log record."""
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            return  # kinds from a newer minor version are ignored
        handler(trial, segment, time, data)
        if trial >= 0:
            self.changed.add(trial)
        if kind in _CHECKPOINT_KINDS:
            self.checkpoint_changes += 1

    # -- handlers, one per kind ------------------------------------------------------------

    def _on_study(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        if "spec" in data:
            self.spec = data["spec"]
            self.created_time = time
        self.state = StudyState(data["state"])
        self.reason = data.get("reason", "")
        if self.state in (StudyState.RUNNING, StudyState.STOPPING):
            self.failing = bool(data.get("fail", False))
        if self.state is StudyState.RUNNING and self.started_time is None:
            self.started_time = time
        final = (StudyState.FINISHED, StudyState.STOPPED, StudyState.FAILED)
        self.ended_time = time if self.state in final else None

    def _on_trial_created(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        record = TrialRecord(
            trial_id=trial,
            params=data["params"],
            created_time=time,
            seed=int(data["seed"]),
            generator_index=data.get("generator_index"),
            parent_trial=data.get("parent_trial"),
            parent_step=data.get("parent_step"),
            parent_checkpoint_row=data.get("parent_checkpoint_row"),
            info=data.get("info", {}),
            end_step=data.get("end_step"),
            generation=data.get("generation"),
            initiator=data.get("initiator"),
            priority=float(data.get("priority", 0.0)),
            step=int(data.get("parent_step") or 0),
        )
        record.history.append(StatusChange(time, TrialStatus.QUEUED, record.step))
        self.trials[trial] = record
        if record.parent_checkpoint_row is not None:
            self.forked.add(trial)
        if record.generator_index is not None:
            self.generated = max(self.generated, record.generator_index + 1)

    def _on_trial_status(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        record = self.trials[trial]
        record.status = TrialStatus(data["status"])
        record.reason = data.get("reason", "")
        if "error" in data:
            record.error = data["error"]
        if "retries" in data:
            record.retries = int(data["retries"])
        if "priority" in data:
            record.priority = float(data["priority"])
        record.history.append(StatusChange(time, record.status, record.step, record.reason))

    def _on_segment_assigned(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        record = SegmentRecord(
            segment_id=segment,
            trial_id=trial,
            worker_id=data["worker"],
            start_step=int(data["start_step"]),
            until_step=int(data["until_step"]),
            checkpoint_row=data.get("checkpoint_row"),
            assigned_time=time,
            checkpoint_steps=tuple(int(s) for s in data.get("checkpoint_steps", ())),
        )
        self.segments[segment] = record
        self._active[segment] = record
        tr = self.trials[trial]
        tr.segments.append(segment)
        tr.truncate_curve(record.start_step)
        tr.missing = [m for m in tr.missing if m[1] < record.start_step]  # retrained
        tr.step = record.start_step
        tr.status = TrialStatus.RUNNING
        tr.history.append(StatusChange(time, TrialStatus.RUNNING, tr.step))
        worker = self.workers.get(record.worker_id)
        if worker is not None:
            worker.segment_id = segment

    def _on_segment_started(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        record = self.segments[segment]
        record.status = SegmentStatus.RUNNING
        record.started_time = float(data.get("at", time))  # the worker's clock
        record.host = data.get("host", "")
        record.pid = data.get("pid")

    def _on_segment_ended(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        record = self.segments[segment]
        record.status = SegmentStatus(data["status"])
        self._active.pop(segment, None)
        record.ended_time = float(data.get("at", time))
        record.end_step = data.get("step")
        record.reason = data.get("reason", "")
        worker = self.workers.get(record.worker_id)
        if worker is not None and worker.segment_id == segment:
            worker.segment_id = None

    def _on_decision(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        if trial in self.trials and "priority" in data:
            self.trials[trial].priority = float(data["priority"])
        seg = self.segments.get(segment)
        if seg is not None and data.get("decision") in ("suspend", "stop"):
            seg.decision = data["decision"]
            seg.decision_reason = data.get("reason", "")
            seg.decision_time = time

    def _on_worker(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        worker_id = data["worker"]
        event = data["event"]
        if event == "started":
            self.workers[worker_id] = WorkerRecord(worker_id, time, info=data.get("info", {}))
            return
        worker = self.workers[worker_id]
        if event == "submitted":
            self.submit_failures, self.submit_error = 0, ""
            worker.info = data.get("info", {})
            worker.started_time = time
            worker.submitted_time = time
            return
        if event == "running":
            worker.runs.append(WorkerRun(float(data["since"])))
            return
        if event == "down":
            if worker.runs and worker.runs[-1].until is None:
                worker.runs[-1].until = float(data["at"])
            return
        worker.state = WorkerLife(event)
        worker.reason = data.get("reason", "")
        if not worker.state.is_alive:
            worker.ended_time = time

    def _on_command(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        if data.get("file"):
            self.commands_done.add(data["file"])
            if data.get("rejected"):
                self.rejected_commands.append(
                    RejectedCommand(str(data["file"]), str(data["rejected"]), time)
                )

    def _on_warning(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        self.warnings.append(
            StudyWarning(str(data.get("code", "")), str(data.get("message", "")), time, trial)
        )

    def _on_elastic_plan(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        self.elastic_plans.append({**data, "time": time})

    def _on_elastic_stage(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        self.elastic_stages.append((int(data["stage"]), time))

    @property
    def elastic_plan(self) -> dict[str, Any] | None:
        """The data of the plan in force (the last ``elastic_plan`` record), or ``None``."""
        return self.elastic_plans[-1] if self.elastic_plans else None

    def _on_corrupt_lines(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        """Corrupt lines of a segment's event file were skipped; ``rows``: how many may have
        held a report, after ``step`` (the last step read before them)."""
        record = self.trials.get(trial)
        if record is not None:
            record.missing.extend([(segment, int(data.get("step", 0)))] * int(data["rows"]))

    def _on_policy_state(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        self.policy_state = data["state"]

    def _on_policy_delta(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        self.policy_state = apply_delta(self.policy_state, data["delta"])

    def _on_checkpoint_deleted(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        marked = self.checkpoints.mark_deleted(data["rows"])
        if self._live_rows is not None:
            for row, trial_id in marked.items():
                self._live_rows.get(trial_id, set()).discard(row)
        held = self._holders.keys() & marked.keys()
        holders = sorted({tid for row in held for tid in self._holders[row]})
        for tid in holders:  # its own or (stage trees) one it went on from
            tr = self.trials[tid]
            ref = self.checkpoints.get(tr.checkpoint_row)  # type: ignore[arg-type]
            own = self.live_checkpoints(tr.trial_id)  # its previous one, as readers find it
            mine = ref is not None and ref.trial_id == tr.trial_id
            self.hold_checkpoint(tr, own[-1].row if own and mine else None)

    def _on_lineage(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        """A stage-tree trial goes on from another trial's checkpoint: its curve up to that step
        is the parent's (copied here; :func:`inherit_prefix_curves` does it for readers)."""
        record = self.trials[trial]
        parent = self.trials[int(data["parent_trial"])]
        step = int(data["parent_step"])
        record.parent_trial = parent.trial_id
        record.parent_step = step
        record.parent_checkpoint_row = data.get("parent_checkpoint_row")
        record.shares_prefix = True
        if record.parent_checkpoint_row is not None:
            self.forked.add(trial)
        row = record.parent_checkpoint_row
        current = self.checkpoints.get(record.checkpoint_row)  # type: ignore[arg-type]
        if (
            row is not None
            and row in self.checkpoints
            and (current is None or current.step <= step)
        ):
            self.hold_checkpoint(record, int(row))  # its latest until it writes its own
        _copy_prefix(parent, record, step)
        record.step = max(record.step, step) if record.status.is_final else step

    def _on_request(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        """A stage-tree tuner asks for a trial to be trained up to ``until_step`` (a rung)."""
        until = data.get("until_step")
        self.trials[trial].request_step = None if until is None else int(until)

    def _on_imported(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        """A stage-tree trial starts from another study's checkpoint (the stage store)."""
        self.trials[trial].info.setdefault("imported", []).append(
            {k: data.get(k) for k in ("study", "source_trial", "step", "key")}
        )

    def _on_controller(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        if data.get("event") == "started":
            self.controller_starts += 1
            self.submit_failures = 0  # a new controller gets a fresh set of tries

    def _on_submission(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        """Submitting workers failed (sbatch's message in ``error``)."""
        self.submit_failures += 1
        self.submit_error = str(data.get("error", ""))

    def _on_slurm_changed(
        self, trial: int, segment: int, time: float, data: dict[str, Any]
    ) -> None:
        """New ``[slurm]`` settings (``hpctune resume --slurm``) for the jobs submitted next."""
        self.spec = {**self.spec, "slurm": data["slurm"]}
        self.slurm_changes.append(
            {"time": time, "changes": data.get("changes", {}), "source": data.get("source", "")}
        )
        self.submit_failures, self.submit_error = 0, ""

    def _on_prediction(self, trial: int, segment: int, time: float, data: dict[str, Any]) -> None:
        median = data.get("median")
        self.predictions[trial] = PredictionRef(
            trial_id=trial,
            n=int(data["n"]),
            path=str(data["path"]),
            time=time,
            unknown=bool(data.get("unknown", False)),
            median=None if median is None else float(median),
            y_sha256=str(data.get("y_sha256", "")),
        )

    # -- the other tables --------------------------------------------------------------------

    def add_checkpoint(self, ref: CheckpointRef) -> None:
        """Record a checkpoint row; it becomes its trial's latest checkpoint."""
        self.checkpoint_changes += 1
        self.checkpoints[ref.row] = ref
        if self._live_rows is not None and not ref.deleted:
            self._live_rows.setdefault(ref.trial_id, set()).add(ref.row)
        trial = self.trials.get(ref.trial_id)
        if trial is not None and not ref.deleted:
            self.hold_checkpoint(trial, ref.row)

    def hold_checkpoint(self, trial: TrialRecord, row: int | None) -> None:
        """Make ``row`` the trial's latest checkpoint (``None``: none), keeping the index of
        which trials hold each checkpoint (a deletion then visits only those)."""
        old = trial.checkpoint_row
        self.changed.add(trial.trial_id)
        if old is not None:
            self._holders.get(old, set()).discard(trial.trial_id)
        trial.checkpoint_row = row
        if row is not None:
            self._holders.setdefault(row, set()).add(trial.trial_id)

    def add_report(
        self,
        trial_id: int,
        step: int,
        time: float,
        value: float | None,
        metrics: dict[str, float] | None = None,
    ) -> None:
        """Record a report of trial ``trial_id`` (``value``: the study metric, if reported;
        ``metrics``: every metric of the report)."""
        trial = self.trials[trial_id]
        self.changed.add(trial_id)
        trial.step = step
        for name, v in (metrics or {}).items():
            if not np.isnan(v):
                trial.last_metrics[name] = float(v)
        if value is not None:
            trial.curve_steps.append(step)
            trial.curve_values.append(float(value))
            trial.curve_times.append(time)

    def live_checkpoints(self, trial_id: int) -> list[CheckpointRef]:
        """A trial's checkpoints that are not deleted, by row."""
        if self._live_rows is None:
            self._live_rows = self.checkpoints.live_rows_by_trial()
        return [self.checkpoints[r] for r in sorted(self._live_rows.get(trial_id, ()))]

    def checkpoint_step(self, trial_id: int) -> int | None:
        """The step of a trial's latest checkpoint, or ``None``."""
        row = self.trials[trial_id].checkpoint_row
        return None if row is None else self.checkpoints.step(row)

    def active_segments(self) -> list[SegmentRecord]:
        """Segments assigned or running, not yet ended (by id)."""
        return [self._active[k] for k in sorted(self._active)]

    def live_rows(self) -> dict[int, set[int]]:
        """The rows of the checkpoints not deleted, by trial (the index itself: read only)."""
        self.live_checkpoints(-1)  # builds the index
        assert self._live_rows is not None
        return self._live_rows

    def counts(self) -> dict[str, int]:
        """Number of trials in each status."""
        result = {status.value: 0 for status in TrialStatus}
        for trial in self.trials.values():
            result[trial.status.value] += 1
        return result


def _copy_prefix(parent: TrialRecord, child: TrialRecord, step: int) -> None:
    """Make ``child``'s curve the parent's up to ``step``, then its own points after it."""
    keep = [i for i, s in enumerate(parent.curve_steps) if s <= step]
    own = [i for i, s in enumerate(child.curve_steps) if s > step]
    child.curve_steps, child.curve_values, child.curve_times = (
        [parent.curve_steps[i] for i in keep] + [child.curve_steps[i] for i in own],
        [parent.curve_values[i] for i in keep] + [child.curve_values[i] for i in own],
        [parent.curve_times[i] for i in keep] + [child.curve_times[i] for i in own],
    )


def inherit_prefix_curves(record: StudyRecord) -> None:
    """Give every stage-tree trial its parent's curve up to its branch step (parents first).

    Readers build curves from each trial's own metric rows; a trial that went on from another
    trial's checkpoint (a ``lineage`` record) trained only the steps after it.
    """
    trials = record.trials
    done: set[int] = set()

    def visit(trial: TrialRecord) -> None:
        chain = []
        while trial.trial_id not in done and trial.shares_prefix:
            chain.append(trial)
            parent = trials.get(trial.parent_trial)  # type: ignore[arg-type]
            if parent is None or parent.trial_id in (t.trial_id for t in chain):
                break
            trial = parent
        for t in reversed(chain):
            parent = trials.get(t.parent_trial)  # type: ignore[arg-type]
            if parent is not None:
                _copy_prefix(parent, t, int(t.parent_step or 0))
            done.add(t.trial_id)

    for trial in list(trials.values()):
        visit(trial)


def decode_data(text: str) -> dict[str, Any]:
    """Decode the JSON ``data`` column of a log row."""
    return json.loads(text) if text else {}


def valid_rows(
    segment: np.ndarray, step: np.ndarray, segments: dict[int, SegmentRecord]
) -> np.ndarray:
    """Return the mask of metric rows still valid.

    A row of segment ``s`` at step ``x`` is superseded when a later segment of the same trial
    started at a step below ``x`` (training was redone from an earlier checkpoint).
    """
    if not len(segment):
        return np.zeros(0, dtype=bool)
    lut = np.full(max(max(segments, default=0), int(segment.max())) + 1, np.inf)
    running_min: dict[int, float] = {}
    for seg_id in sorted(segments, reverse=True):
        seg = segments[seg_id]
        lut[seg_id] = running_min.get(seg.trial_id, np.inf)
        running_min[seg.trial_id] = min(running_min.get(seg.trial_id, np.inf), seg.start_step)
    known = segment >= 0  # rows without a segment are never superseded
    return ~known | (step <= lut[np.where(known, segment, 0)])
