"""Ingestion: the workers' event files into the journal, and what a segment's end means."""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from hpctune.journal import records as rec
from hpctune.journal.checkpoints import CheckpointRef
from hpctune.journal.entities import SegmentRecord, TrialRecord
from hpctune.policies import Event
from hpctune.study.boundaries import at_boundary
from hpctune.study.metric_names import metric_name_problem
from hpctune.study.states import Decision, SegmentStatus, StudyState, TrialStatus
from hpctune.wire.protocol import (
    EV_CHECKPOINT,
    EV_END,
    EV_REPORT,
    EV_START,
)

if TYPE_CHECKING:
    from hpctune.core.hosts import IngestHost

logger = logging.getLogger(__name__)

IDENTICAL_START_FAILURES = 3  # trials failing the same way before a report stop the study
_SEGMENT_TO_TRIAL = {
    SegmentStatus.COMPLETED: TrialStatus.COMPLETED,
    SegmentStatus.SUSPENDED: TrialStatus.SUSPENDED,
    SegmentStatus.TERMINATED: TrialStatus.TERMINATED,
    SegmentStatus.ENDED_EARLY: TrialStatus.ENDED_EARLY,
    SegmentStatus.FAILED: TrialStatus.FAILED,
}


class Ingest:
    """Reads the event files of active segments into the journal (byte cursors kept in the
    journal's commits) and carries out what a segment's end means for its trial.

    Args:
        controller: The controller whose journal and state the events go into.
    """

    def __init__(self, controller: IngestHost) -> None:
        self.c = controller

    def ingest(self) -> None:
        """Read the new event lines of every active segment into the journal."""
        for seg in self.c.state.active_segments():
            self.ingest_segment(seg)

    def ingest_segment(self, seg: SegmentRecord) -> None:
        """Read a segment's new event lines into the journal (its read cursor moves on)."""
        key = self.c.wire.event_name(seg.segment_id)
        offset = self.c.cursors.get(key, 0)
        result = self.c.wire.read_events(seg.segment_id, offset)
        if result is None:
            return
        self.c.cursors[key] = result.offset
        corrupt: dict[int, list[bytes]] = {}
        for position, line in result.corrupt_lines:
            corrupt.setdefault(position, []).append(line)
        for index in range(len(result.records) + 1):
            if seg.status.is_final:
                break
            for line in corrupt.get(index, ()):
                self._on_corrupt_line(seg, key, _line_kind(line))
            if index < len(result.records):
                self._on_event_checked(seg, result.records[index])
        if seg.status.is_final:
            self.c.cursors.pop(key, None)

    def _on_corrupt_line(self, seg: SegmentRecord, name: str, kind: str) -> None:
        """Journal a skipped line: a report (or a line of unknown kind) is a missing row."""
        trial = self.c.state.trials[seg.trial_id]
        rows = int(kind in (EV_REPORT, ""))
        logger.warning(
            "%s: a corrupt %s line skipped after step %d of trial %d",
            name,
            kind or "event",
            trial.step,
            trial.trial_id,
        )
        entry = rec.CorruptLinesEntry(file=name, line_kind=kind, rows=rows, step=trial.step)
        self.c.log(entry, trial=seg.trial_id, segment=seg.segment_id)

    def _on_event_checked(self, seg: SegmentRecord, record: dict[str, Any]) -> None:
        """Apply one event; a record that does not parse is skipped as a corrupt line."""
        try:
            self._on_event(seg, record)
        except (KeyError, ValueError, TypeError, OverflowError, rec.RecordError) as exc:
            logger.warning("segment %d: bad event %r skipped (%s)", seg.segment_id, record, exc)
            self._on_corrupt_line(
                seg, self.c.wire.event_name(seg.segment_id), str(record.get("kind", ""))
            )

    def _report_metrics(self, seg: SegmentRecord, raw: Any) -> dict[str, float]:
        """The metrics of a report line; names that cannot be stored are dropped, with a warning
        journaled once per name (a line written before names were checked, or by hand)."""
        if not isinstance(raw, dict):
            raise TypeError(f"metrics must be an object, got {type(raw).__name__}")
        metrics: dict[str, float] = {}
        for name, value in raw.items():
            problem = metric_name_problem(name)
            if problem:
                shown = name if len(name) <= 60 else name[:60] + "..."
                code = f"metric-name:{shown}"
                if not any(w.code == code for w in self.c.state.warnings):
                    self.c.warn(
                        code,
                        f"trial {seg.trial_id} reported a metric the journal cannot keep "
                        f"({problem}); its values are dropped",
                        seg.trial_id,
                    )
                continue
            metrics[name] = float(value)
        return metrics

    def _on_event(self, seg: SegmentRecord, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        t = float(record.get("t", self.c.clock.now()))
        trial = self.c.state.trials[seg.trial_id]
        self.c.last_event[seg.segment_id] = self.c.clock.now()  # report_timeout counts from here
        if kind == EV_START:
            entry = rec.SegmentStartedEntry(
                host=record.get("host", ""),
                pid=record.get("pid"),
                slurm_job_id=record.get("slurm_job_id"),
                at=t,
            )
            self.c.log(entry, trial=seg.trial_id, segment=seg.segment_id)
        elif kind == EV_REPORT:
            step = int(record["step"])
            metrics = self._report_metrics(seg, record.get("metrics", {}))
            if step <= trial.step:
                logger.warning(
                    "trial %d: report for step %d ignored (not after %d)",
                    trial.trial_id,
                    step,
                    trial.step,
                )
                return
            self.c.writer.append_metrics(seg.trial_id, seg.segment_id, step, t, metrics)
            value = metrics.get(self.c.spec.metric)
            self.c.state.add_report(
                seg.trial_id,
                step,
                t,
                None if value is None or np.isnan(value) else value,
                metrics,
            )
            self.c.pending_events.append(Event.report(seg.trial_id, step))
            if at_boundary(step, self.c.spec.boundary, seg.until_step):
                self.c.pending_events.append(Event.boundary(seg.trial_id, step))
        elif kind == EV_CHECKPOINT:
            self._on_checkpoint(seg, record, t)
        elif kind == EV_END:
            status = SegmentStatus(record["status"])
            if status is SegmentStatus.LOST:  # a requeued worker found it half done
                self.end_segment(
                    seg,
                    status,
                    str(record.get("reason", "")),
                    "",
                    None,
                    count_retry=not record.get("requeued", False),
                )
                return
            storage = str(record.get("storage") or "")
            if storage:  # a write failed for want of space (or an I/O error): not the trial's
                self.c.storage.failed(storage, f"segment {seg.segment_id}: {record.get('reason')}")
            self.end_segment(
                seg,
                status,
                str(record.get("reason", "")),
                str(record.get("error", "")),
                record.get("step"),
                at=t,
                requeue=bool(storage),
            )

    def add_checkpoint(
        self,
        trial_id: int,
        segment_id: int,
        step: int,
        t: float,
        nbytes: int,
        sha256: str,
        path: str,
    ) -> CheckpointRef:
        """Append a row to the journal's ``checkpoints`` table; it becomes the trial's latest."""
        ref = CheckpointRef(
            self.c.writer.next_index("checkpoints"),
            trial_id,
            segment_id,
            step,
            t,
            nbytes,
            sha256,
            path,
        )
        self.c.writer.append(
            "checkpoints",
            trial=ref.trial_id,
            segment=ref.segment_id,
            step=ref.step,
            time=ref.time,
            nbytes=ref.nbytes,
            sha256=ref.sha256,
            path=ref.path,
        )
        self.c.state.add_checkpoint(ref)
        return ref

    def _on_checkpoint(self, seg: SegmentRecord, record: dict[str, Any], t: float) -> None:
        self.add_checkpoint(
            seg.trial_id,
            seg.segment_id,
            int(record["step"]),
            t,
            int(record.get("nbytes", 0)),
            str(record.get("sha256", "")),
            str(record["path"]),
        )
        if self.c.spec.stages.enabled:
            self.c.dirty = True  # a branch point's children may be ready; stage GC deletes
        # the previous one goes in this iteration's checkpoint collection unless it is kept

    def delete_checkpoints(self, rows: list[int]) -> None:
        """Journal the checkpoints of ``rows`` as deleted; their files go after the commit."""
        refs = [
            self.c.state.checkpoints[r] for r in rows if not self.c.state.checkpoints[r].deleted
        ]
        if not refs:
            return
        self.c.log(rec.CheckpointDeletedEntry(rows=[r.row for r in refs]))
        for ref in refs:
            self.c.after_commit(partial(self.c.wire.delete_checkpoint, ref.path))

    def end_segment(
        self,
        seg: SegmentRecord,
        status: SegmentStatus,
        reason: str,
        error: str,
        step: Any,
        *,
        count_retry: bool = True,
        at: float | None = None,
        requeue: bool = False,
    ) -> None:
        """Record a segment's end (``at``: the worker's time of it) and what follows for its trial.

        A lost segment (dead worker) queues its trial again, from its last checkpoint; that
        counts against ``max_retries`` unless the worker's job was requeued or preempted, or an
        operator stopped it (``count_retry=False``). ``requeue``: the segment ended for a
        reason that is not the trial's (a full disk): its trial is queued again, no retry
        counted.
        """
        trial = self.c.state.trials[seg.trial_id]
        if status is SegmentStatus.SUSPENDED and seg.decision == Decision.STOP.value:
            # it reached the end of its assignment before it read the stop
            status, reason = SegmentStatus.TERMINATED, seg.decision_reason or reason
        entry = rec.SegmentEndedEntry(
            status=status,
            step=step if step is None else int(step),
            reason=reason,
            at=self.c.clock.now() if at is None else at,
        )
        self.c.log(entry, trial=seg.trial_id, segment=seg.segment_id)
        if status is SegmentStatus.LOST or requeue:
            retries = trial.retries + int(count_retry and status is SegmentStatus.LOST)
            if retries > self.c.spec.max_retries:
                self.c.set_trial(
                    trial,
                    TrialStatus.FAILED,
                    f"its worker was lost {retries} times (max_retries "
                    f"{self.c.spec.max_retries}): {reason}",
                    retries=retries,
                )
            else:
                self.c.set_trial(trial, TrialStatus.QUEUED, reason, retries=retries)
            return
        end = trial.end_step
        if status is SegmentStatus.SUSPENDED and end is not None and trial.step >= end:
            status, reason = SegmentStatus.COMPLETED, f"reached its end step {end}"
        if status is SegmentStatus.ENDED_EARLY:
            last = min(trial.end_step or self.c.spec.max_steps, self.c.spec.max_steps)
            reason = f"{reason or 'the function returned'} (step {trial.step} of {last})"
            self.c.warn(
                "ended_early",
                f"trial {trial.trial_id} ended early: its function returned at step "
                f"{trial.step} of {last} without being told to stop; `hpctune retry "
                f"{self.c.paths.root} --trial {trial.trial_id}` runs it again",
                trial.trial_id,
            )
        self.c.set_trial(trial, _SEGMENT_TO_TRIAL[status], reason, error=error)
        self._check_metric_reported(trial)
        if status is SegmentStatus.FAILED:
            if self.c.spec.fail_fast:
                self.c.set_study(
                    StudyState.STOPPING, f"trial {trial.trial_id} failed (fail_fast)", fail=True
                )
            elif step is None or int(step) <= seg.start_step:
                self._check_start_failures(reason)

    def _check_metric_reported(self, trial: TrialRecord) -> None:
        """Warn once when a trial ends having reported metrics, but not the study's."""
        if trial.curve_values or not trial.last_metrics:
            return
        if any(w.code == "metric_missing" for w in self.c.state.warnings):
            return
        names = ", ".join(sorted(trial.last_metrics)[:20])
        self.c.warn(
            "metric_missing",
            f"trial {trial.trial_id} ended without reporting the study metric "
            f"{self.c.spec.metric!r} ([study] metric); it reported: {names}",
            trial.trial_id,
        )

    def _check_start_failures(self, reason: str) -> None:
        """Stop the study when trials keep failing the same way before their first report."""
        same = sum(
            s.status is SegmentStatus.FAILED
            and (s.end_step is None or s.end_step <= s.start_step)
            and s.reason == reason
            for s in self.c.state.segments.values()
        )
        if same >= IDENTICAL_START_FAILURES:
            self.c.set_study(
                StudyState.STOPPING,
                f"{same} trials failed the same way before their first report: {reason}; fix "
                f"it, then `hpctune retry {self.c.paths.root} --failed` re-runs them",
                fail=True,
            )


def _line_kind(line: bytes) -> str:
    """The event kind a corrupt line seems to hold (``""`` when it cannot be told)."""
    for kind in (EV_REPORT, EV_CHECKPOINT, EV_START, EV_END):
        if b'"kind":"%s"' % kind.encode() in line:
            return kind
    return ""
