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

from hpctune.journal import records as rec
from hpctune.journal.checkpoints import CheckpointRef, CheckpointTable
from hpctune.journal.curve_rows import copy_prefix
from hpctune.journal.delta import apply_delta
from hpctune.journal.entities import (
    PredictionRef,
    RejectedCommand,
    SegmentRecord,
    StatusChange,
    StudyWarning,
    TrialRecord,
    WorkerRecord,
    WorkerRun,
)
from hpctune.study.states import SegmentStatus, StudyState, TrialStatus, WorkerLife

# Log record kinds (their record types: hpctune/journal/records.py).
STUDY = rec.StudyEntry.kind
TRIAL_CREATED = rec.TrialCreatedEntry.kind
TRIAL_STATUS = rec.TrialStatusEntry.kind
SEGMENT_ASSIGNED = rec.SegmentAssignedEntry.kind
SEGMENT_STARTED = rec.SegmentStartedEntry.kind
SEGMENT_ENDED = rec.SegmentEndedEntry.kind
DECISION = rec.DecisionEntry.kind
WORKER = rec.WorkerEntry.kind
COMMAND = rec.CommandEntry.kind
POLICY_STATE = rec.PolicyStateEntry.kind
POLICY_DELTA = rec.PolicyDeltaEntry.kind  # a patch of the last policy state (journal/delta.py)
CHECKPOINT_DELETED = rec.CheckpointDeletedEntry.kind
CONTROLLER = rec.ControllerEntry.kind
PREDICTION = rec.PredictionEntry.kind
LINEAGE = rec.LineageEntry.kind
REQUEST = rec.RequestEntry.kind
IMPORTED = rec.ImportedEntry.kind
WARNING = rec.WarningEntry.kind
CORRUPT_LINES = rec.CorruptLinesEntry.kind
SUBMISSION = rec.SubmissionEntry.kind
SLURM_CHANGED = rec.SlurmChangedEntry.kind  # older journals' SETTINGS_CHANGED
SETTINGS_CHANGED = rec.SettingsChangedEntry.kind
ELASTIC_PLAN = rec.ElasticPlanEntry.kind  # the plan a study with a deadline follows
ELASTIC_STAGE = rec.ElasticStageEntry.kind  # the controller moved to a stage of that plan

# the kinds that can change which checkpoints a study still needs
_CHECKPOINT_KINDS = frozenset(
    {TRIAL_CREATED, TRIAL_STATUS, SEGMENT_ASSIGNED, SEGMENT_ENDED, CHECKPOINT_DELETED, LINEAGE}
)
LOG_KINDS = tuple(rec.RECORD_TYPES)  # the registered kinds


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
    settings_changes: list[dict[str, Any]] = field(default_factory=list)  # `resume --set`
    # `resume --deadline`: each ``deadline_changed`` record's data and ``time``
    deadline_changes: list[dict[str, Any]] = field(default_factory=list)
    generated: int = 0  # trials created from the generator
    # every prediction of each trial, in journal order (the latest: ``predictions``)
    prediction_history: dict[int, list[PredictionRef]] = field(default_factory=dict)
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
    # completed trials' values under the study's ``best`` rule (hpctune.journal.best.best_trial's
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
        """Apply one log record as read from the journal (its ``data`` decoded).

        Raises:
            JournalError: ``data`` is not a valid record of its kind (naming the key).
        """
        record_type = rec.RECORD_TYPES.get(kind)
        if record_type is None:
            return  # kinds from a newer minor version are ignored
        self.apply_entry(record_type.from_data(data), trial, segment, time)

    def apply_entry(self, entry: rec.LogEntry, trial: int, segment: int, time: float) -> None:
        """Apply one log record (of a type in :data:`~hpctune.journal.records.RECORD_TYPES`)."""
        getattr(self, f"_on_{entry.kind}")(trial, segment, time, entry)
        if trial >= 0:
            self.changed.add(trial)
        if entry.kind in _CHECKPOINT_KINDS:
            self.checkpoint_changes += 1

    # -- handlers, one per kind ------------------------------------------------------------

    def _on_study(self, trial: int, segment: int, time: float, e: rec.StudyEntry) -> None:
        if e.spec is not None:
            self.spec = e.spec
            self.created_time = time
        self.state = e.state
        self.reason = e.reason
        if self.state in (StudyState.RUNNING, StudyState.STOPPING):
            self.failing = bool(e.fail)
        if self.state is StudyState.RUNNING and self.started_time is None:
            self.started_time = time
        final = (StudyState.FINISHED, StudyState.STOPPED, StudyState.FAILED)
        self.ended_time = time if self.state in final else None

    def _on_trial_created(
        self, trial: int, segment: int, time: float, e: rec.TrialCreatedEntry
    ) -> None:
        record = TrialRecord(
            trial_id=trial,
            params=e.params,
            created_time=time,
            seed=e.seed,
            generator_index=e.generator_index,
            parent_trial=e.parent_trial,
            parent_step=e.parent_step,
            parent_checkpoint_row=e.parent_checkpoint_row,
            info=e.info if e.info is not None else {},
            end_step=e.end_step,
            generation=e.generation,
            initiator=e.initiator,
            priority=e.priority if e.priority is not None else 0.0,
            step=e.parent_step or 0,
        )
        record.history.append(StatusChange(time, TrialStatus.QUEUED, record.step))
        self.trials[trial] = record
        if record.parent_checkpoint_row is not None:
            self.forked.add(trial)
        if record.generator_index is not None:
            self.generated = max(self.generated, record.generator_index + 1)

    def _on_trial_status(
        self, trial: int, segment: int, time: float, e: rec.TrialStatusEntry
    ) -> None:
        record = self.trials[trial]
        record.status = e.status
        record.reason = e.reason
        if e.error is not None:
            record.error = e.error
        if e.retries is not None:
            record.retries = e.retries
        if e.priority is not None:
            record.priority = e.priority
        record.history.append(StatusChange(time, record.status, record.step, record.reason))

    def _on_segment_assigned(
        self, trial: int, segment: int, time: float, e: rec.SegmentAssignedEntry
    ) -> None:
        record = SegmentRecord(
            segment_id=segment,
            trial_id=trial,
            worker_id=e.worker,
            start_step=e.start_step,
            until_step=e.until_step,
            checkpoint_row=e.checkpoint_row,
            assigned_time=time,
            checkpoint_steps=tuple(e.checkpoint_steps or ()),
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
        self, trial: int, segment: int, time: float, e: rec.SegmentStartedEntry
    ) -> None:
        record = self.segments[segment]
        record.status = SegmentStatus.RUNNING
        record.started_time = e.at if e.at is not None else time  # the worker's clock
        record.host = e.host
        record.pid = e.pid

    def _on_segment_ended(
        self, trial: int, segment: int, time: float, e: rec.SegmentEndedEntry
    ) -> None:
        record = self.segments[segment]
        record.status = e.status
        self._active.pop(segment, None)
        record.ended_time = e.at if e.at is not None else time
        record.end_step = e.step
        record.reason = e.reason
        worker = self.workers.get(record.worker_id)
        if worker is not None and worker.segment_id == segment:
            worker.segment_id = None

    def _on_decision(self, trial: int, segment: int, time: float, e: rec.DecisionEntry) -> None:
        if trial in self.trials and e.priority is not None:
            self.trials[trial].priority = e.priority
        seg = self.segments.get(segment)
        if seg is not None and e.decision in ("suspend", "stop"):
            seg.decision = e.decision
            seg.decision_reason = e.reason
            seg.decision_time = time

    def _on_worker(self, trial: int, segment: int, time: float, e: rec.WorkerEntry) -> None:
        info = e.info if e.info is not None else {}
        if e.event == "started":
            self.workers[e.worker] = WorkerRecord(e.worker, time, info=info, devices=e.devices)
            return
        worker = self.workers[e.worker]
        if e.event == "submitted":
            self.submit_failures, self.submit_error = 0, ""
            worker.info = info
            worker.started_time = time
            worker.submitted_time = time
            return
        if e.event == "running":
            worker.runs.append(WorkerRun(_needed(e.since, e, "since")))
            return
        if e.event == "down":
            if worker.runs and worker.runs[-1].until is None:
                worker.runs[-1].until = _needed(e.at, e, "at")
            return
        worker.state = WorkerLife(e.event)
        worker.reason = e.reason or ""
        if not worker.state.is_alive:
            worker.ended_time = time

    def _on_command(self, trial: int, segment: int, time: float, e: rec.CommandEntry) -> None:
        if e.file:
            self.commands_done.add(e.file)
            if e.rejected:
                self.rejected_commands.append(RejectedCommand(e.file, e.rejected, time))

    def _on_warning(self, trial: int, segment: int, time: float, e: rec.WarningEntry) -> None:
        self.warnings.append(StudyWarning(e.code, e.message, time, trial))

    def _on_elastic_plan(
        self, trial: int, segment: int, time: float, e: rec.ElasticPlanEntry
    ) -> None:
        self.elastic_plans.append({**e.to_data(), "time": time})

    def _on_deadline_changed(
        self, trial: int, segment: int, time: float, e: rec.DeadlineChangedEntry
    ) -> None:
        """A new ``[resources] deadline`` (``hpctune resume --deadline``)."""
        resources = {**self.spec.get("resources", {}), "deadline": e.deadline}
        self.spec = {**self.spec, "resources": resources}
        self.deadline_changes.append({**e.to_data(), "time": time})

    def _on_elastic_stage(
        self, trial: int, segment: int, time: float, e: rec.ElasticStageEntry
    ) -> None:
        self.elastic_stages.append((e.stage, time))

    @property
    def predictions(self) -> dict[int, PredictionRef]:
        """The latest prediction of each trial that has one."""
        return {trial: refs[-1] for trial, refs in self.prediction_history.items()}

    @property
    def elastic_plan(self) -> dict[str, Any] | None:
        """The data of the plan in force (the last ``elastic_plan`` record), or ``None``."""
        return self.elastic_plans[-1] if self.elastic_plans else None

    def _on_corrupt_lines(
        self, trial: int, segment: int, time: float, e: rec.CorruptLinesEntry
    ) -> None:
        """Corrupt lines of a segment's event file were skipped; ``rows``: how many may have
        held a report, after ``step`` (the last step read before them)."""
        record = self.trials.get(trial)
        if record is not None:
            record.missing.extend([(segment, e.step)] * e.rows)

    def _on_policy_state(
        self, trial: int, segment: int, time: float, e: rec.PolicyStateEntry
    ) -> None:
        self.policy_state = e.state

    def _on_policy_delta(
        self, trial: int, segment: int, time: float, e: rec.PolicyDeltaEntry
    ) -> None:
        self.policy_state = apply_delta(self.policy_state, e.delta)

    def _on_checkpoint_deleted(
        self, trial: int, segment: int, time: float, e: rec.CheckpointDeletedEntry
    ) -> None:
        marked = self.checkpoints.mark_deleted(e.rows)
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

    def _on_lineage(self, trial: int, segment: int, time: float, e: rec.LineageEntry) -> None:
        """A stage-tree trial goes on from another trial's checkpoint: its curve up to that step
        is the parent's (copied here; :func:`inherit_prefix_curves` does it for readers)."""
        record = self.trials[trial]
        parent = self.trials[e.parent_trial]
        step = e.parent_step
        record.parent_trial = parent.trial_id
        record.parent_step = step
        record.parent_checkpoint_row = e.parent_checkpoint_row
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
            self.hold_checkpoint(record, row)  # its latest until it writes its own
        copy_prefix(parent, record, step)
        record.step = max(record.step, step) if record.status.is_final else step

    def _on_request(self, trial: int, segment: int, time: float, e: rec.RequestEntry) -> None:
        """A stage-tree tuner asks for a trial to be trained up to ``until_step`` (a rung)."""
        self.trials[trial].request_step = e.until_step

    def _on_imported(self, trial: int, segment: int, time: float, e: rec.ImportedEntry) -> None:
        """A stage-tree trial starts from another study's checkpoint (the stage store)."""
        self.trials[trial].info.setdefault("imported", []).append(
            {"study": e.study, "source_trial": e.source_trial, "step": e.step, "key": e.key}
        )

    def _on_controller(
        self, trial: int, segment: int, time: float, e: rec.ControllerEntry
    ) -> None:
        if e.event == "started":
            self.controller_starts += 1
            self.submit_failures = 0  # a new controller gets a fresh set of tries

    def _on_submission(
        self, trial: int, segment: int, time: float, e: rec.SubmissionEntry
    ) -> None:
        """Submitting workers failed (sbatch's message in ``error``)."""
        self.submit_failures += 1
        self.submit_error = e.error

    def _on_settings_changed(
        self, trial: int, segment: int, time: float, e: rec.SettingsChangedEntry
    ) -> None:
        """New settings of the backend's section (``resume --set``) for the jobs started next."""
        self.spec = {**self.spec, e.section: e.settings}
        self.settings_changes.append(
            {"time": time, "section": e.section, "changes": e.changes, "source": e.source}
        )
        self.submit_failures, self.submit_error = 0, ""

    def _on_slurm_changed(
        self, trial: int, segment: int, time: float, e: rec.SlurmChangedEntry
    ) -> None:
        """New ``[slurm]`` settings, as older journals record them."""
        changed = rec.SettingsChangedEntry(
            section="slurm", settings=e.slurm, changes=e.changes, source=e.source
        )
        self._on_settings_changed(trial, segment, time, changed)

    def _on_prediction(
        self, trial: int, segment: int, time: float, e: rec.PredictionEntry
    ) -> None:
        ref = PredictionRef(
            trial_id=trial,
            n=e.n,
            path=e.path,
            time=time,
            unknown=e.unknown,
            median=e.median,
            y_sha256=e.y_sha256,
        )
        self.prediction_history.setdefault(trial, []).append(ref)

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


def _needed(value: float | None, entry: rec.LogEntry, key: str) -> float:
    """``value`` of a key the record's event needs (a ``running`` worker's ``since``)."""
    if value is None:
        raise rec.RecordError(f"a {entry.kind!r} record has no {key!r}")
    return value


def decode_data(text: str) -> dict[str, Any]:
    """Decode the JSON ``data`` column of a log row."""
    return json.loads(text) if text else {}


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
                copy_prefix(parent, t, int(t.parent_step or 0))
            done.add(t.trial_id)

    for trial in list(trials.values()):
        visit(trial)
