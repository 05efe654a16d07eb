"""Ingestion: the workers' event files into the journal, and what a segment's end means."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.controller._base import _SEGMENT_TO_TRIAL, ControllerBase
from hpctune.eventlog import read_events
from hpctune.journal import state as st
from hpctune.journal.state import CheckpointRef, SegmentRecord
from hpctune.policies import Event
from hpctune.protocol import (
    EV_CHECKPOINT,
    EV_END,
    EV_REPORT,
    EV_START,
)
from hpctune.states import Decision, SegmentStatus, StudyState, TrialStatus

logger = logging.getLogger(__name__)


class IngestingController(ControllerBase):
    """Reads the event files of active segments (byte cursors kept in the journal's commits)."""

    def _ingest(self) -> None:
        for seg in self.state.active_segments():
            self._ingest_segment(seg)

    def _ingest_segment(self, seg: SegmentRecord) -> None:
        path = self.paths.event_file(seg.segment_id)
        key = path.name
        offset = self.cursors.get(key, 0)
        try:
            if path.stat().st_size <= offset:
                return
        except FileNotFoundError:
            return
        result = read_events(path, offset)
        if result.corrupt:
            logger.warning("%s: %d corrupt line(s) skipped", path, result.corrupt)
        self.cursors[key] = result.offset
        for record in result.records:
            if seg.status.is_final:
                break
            self._on_event(seg, record)
        if seg.status.is_final:
            self.cursors.pop(key, None)

    def _on_event(self, seg: SegmentRecord, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        t = float(record.get("t", self.clock.now()))
        trial = self.state.trials[seg.trial_id]
        if kind == EV_START:
            self._log(
                st.SEGMENT_STARTED,
                trial=seg.trial_id,
                segment=seg.segment_id,
                host=record.get("host", ""),
                pid=record.get("pid"),
                slurm_job_id=record.get("slurm_job_id"),
                at=t,
            )
        elif kind == EV_REPORT:
            step = int(record["step"])
            if step <= trial.step:
                logger.warning(
                    "trial %d: report for step %d ignored (not after %d)",
                    trial.trial_id,
                    step,
                    trial.step,
                )
                return
            metrics = {k: float(v) for k, v in record.get("metrics", {}).items()}
            self.writer.append_metrics(seg.trial_id, seg.segment_id, step, t, metrics)
            value = metrics.get(self.spec.metric)
            self.state.add_report(
                seg.trial_id,
                step,
                t,
                None if value is None or np.isnan(value) else value,
                metrics,
            )
            self._events.append(Event.report(seg.trial_id, step))
            if step % self.spec.boundary == 0 or step >= seg.until_step:
                self._events.append(Event.boundary(seg.trial_id, step))
        elif kind == EV_CHECKPOINT:
            self._on_checkpoint(seg, record, t)
        elif kind == EV_END:
            status = SegmentStatus(record["status"])
            if status is SegmentStatus.LOST:  # a requeued worker found it half done
                self._end_segment(
                    seg,
                    status,
                    str(record.get("reason", "")),
                    "",
                    None,
                    count_retry=not record.get("requeued", False),
                )
                return
            self._end_segment(
                seg,
                status,
                str(record.get("reason", "")),
                str(record.get("error", "")),
                record.get("step"),
                at=t,
            )

    def _add_checkpoint(
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
            self.writer.next_index("checkpoints"),
            trial_id,
            segment_id,
            step,
            t,
            nbytes,
            sha256,
            path,
        )
        self.writer.append(
            "checkpoints",
            trial=ref.trial_id,
            segment=ref.segment_id,
            step=ref.step,
            time=ref.time,
            nbytes=ref.nbytes,
            sha256=ref.sha256,
            path=ref.path,
        )
        self.state.add_checkpoint(ref)
        return ref

    def _on_checkpoint(self, seg: SegmentRecord, record: dict[str, Any], t: float) -> None:
        self._add_checkpoint(
            seg.trial_id,
            seg.segment_id,
            int(record["step"]),
            t,
            int(record.get("nbytes", 0)),
            str(record.get("sha256", "")),
            str(record["path"]),
        )
        if self.spec.stages.enabled:
            self._dirty = True  # a branch point's children may be ready; stage GC deletes
        # the previous one goes in this iteration's checkpoint collection unless it is kept

    def _delete_checkpoints(self, rows: list[int]) -> None:
        refs = [self.state.checkpoints[r] for r in rows if not self.state.checkpoints[r].deleted]
        if not refs:
            return
        self._log(st.CHECKPOINT_DELETED, rows=[r.row for r in refs])
        for ref in refs:
            self._outbox.append(partial(Path.unlink, self.paths.root / ref.path, missing_ok=True))

    def _end_segment(
        self,
        seg: SegmentRecord,
        status: SegmentStatus,
        reason: str,
        error: str,
        step: Any,
        *,
        count_retry: bool = True,
        at: float | None = None,
    ) -> None:
        """Record a segment's end (``at``: the worker's time of it) and what follows for its trial.

        A lost segment (dead worker) queues its trial again, from its last checkpoint; that
        counts against ``max_retries`` unless the worker's job was requeued or preempted
        (``count_retry=False``), which Slurm does on purpose.
        """
        trial = self.state.trials[seg.trial_id]
        if status is SegmentStatus.SUSPENDED and seg.decision == Decision.STOP.value:
            # it reached the end of its assignment before it read the stop
            status, reason = SegmentStatus.TERMINATED, seg.decision_reason or reason
        self._log(
            st.SEGMENT_ENDED,
            trial=seg.trial_id,
            segment=seg.segment_id,
            status=status.value,
            step=step if step is None else int(step),
            reason=reason,
            at=self.clock.now() if at is None else at,
        )
        if status is SegmentStatus.LOST:
            retries = trial.retries + int(count_retry)
            if retries > self.spec.max_retries:
                self._set_trial(
                    trial,
                    TrialStatus.FAILED,
                    f"its worker was lost {retries} times (max_retries "
                    f"{self.spec.max_retries}): {reason}",
                    retries=retries,
                )
            else:
                self._set_trial(trial, TrialStatus.QUEUED, reason, retries=retries)
            return
        end = trial.end_step
        if status is SegmentStatus.SUSPENDED and end is not None and trial.step >= end:
            status, reason = SegmentStatus.COMPLETED, f"reached its end step {end}"
        self._set_trial(trial, _SEGMENT_TO_TRIAL[status], reason, error=error)
        if status is SegmentStatus.FAILED and self.spec.fail_fast:
            self._set_study(
                StudyState.STOPPING, f"trial {trial.trial_id} failed (fail_fast)", fail=True
            )
