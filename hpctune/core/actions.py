"""The policy's actions carried out: trials created, segments assigned, decisions sent."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from hpctune.journal import records as rec
from hpctune.journal.entities import SegmentRecord, TrialRecord
from hpctune.policies import Action, ActionKind, Event, EventKind, StudyView
from hpctune.study.seeding import trial_seed
from hpctune.study.states import Decision, TrialStatus
from hpctune.wire.protocol import Assignment, DecisionMessage

if TYPE_CHECKING:
    from hpctune.core.hosts import ActionsHost

logger = logging.getLogger(__name__)


class TrialActions:
    """Turns the policy's actions into journal records and the files that follow from them
    (assignments and decisions, written after the commit).

    Args:
        controller: The core whose study the actions change.

    Attributes:
        decision_sent: Each active segment's last decision, when it was written.
    """

    def __init__(self, controller: ActionsHost) -> None:
        self.c = controller
        self.decision_sent: dict[int, float] = {}  # segment -> when its decision was last sent

    def apply(self, action: Action, event: Event | None) -> None:
        """Carry out one policy action (``event``: the event it answers, if any)."""
        c = self.c
        trial = c.state.trials.get(action.trial_id)  # type: ignore[arg-type]
        if trial is None:
            logger.warning("action %s names no trial; ignored", action)
            return
        if action.kind is ActionKind.CONTINUE:
            if action.priority != trial.priority:
                entry = rec.DecisionEntry(
                    decision="continue", priority=action.priority, reason=action.reason
                )
                c.log(entry, trial=trial.trial_id)
            if event is not None and event.kind is EventKind.BOUNDARY:
                self.answer_boundary(trial, int(event.step or 0))
        elif action.kind is ActionKind.SUSPEND:
            seg = self.running_segment(trial)
            if seg is not None:
                self.send_decision(seg, Decision.SUSPEND, action.reason, priority=action.priority)
            elif trial.status is TrialStatus.QUEUED:
                c.set_trial(trial, TrialStatus.SUSPENDED, action.reason)
        elif action.kind is ActionKind.TERMINATE:
            self.terminate(trial, action.reason or "terminated by the policy")
        else:
            logger.warning("action %s cannot be carried out here; ignored", action)

    def terminate(self, trial: TrialRecord, reason: str) -> None:
        """Stop ``trial``: its running segment is told to stop, or it ends at once."""
        seg = self.running_segment(trial)
        if seg is not None:
            self.send_decision(seg, Decision.STOP, reason)
        elif not trial.status.is_final:
            self.c.set_trial(trial, TrialStatus.TERMINATED, reason)

    def running_segment(self, trial: TrialRecord) -> SegmentRecord | None:
        """The segment of ``trial`` that has not ended, if any."""
        if trial.segments:
            seg = self.c.state.segments[trial.segments[-1]]
            if not seg.status.is_final:
                return seg
        return None

    def answer_boundary(self, trial: TrialRecord, step: int) -> None:
        """Tell a worker waiting at a boundary to go on when the policy said nothing of its
        trial (a policy that decides at boundaries answers every one; the worker would
        otherwise wait ``decision_wait``)."""
        c = self.c
        seg = self.running_segment(trial)
        if seg is None or not c.policy.traits.boundary_decisions or seg.decision:
            return
        message = DecisionMessage(seg.segment_id, step, Decision.CONTINUE, epoch=c.epoch)
        c.after_commit(partial(c.wire.write_decision, message))

    def send_decision(
        self,
        seg: SegmentRecord,
        decision: Decision,
        reason: str,
        *,
        log: bool = True,
        priority: float | None = None,
    ) -> None:
        """Journal a decision for a running segment (unless ``log`` is false: a re-send) and
        write it to the segment after the commit."""
        c = self.c
        step = c.state.trials[seg.trial_id].step
        if log:
            entry = rec.DecisionEntry(
                step=step, decision=decision.value, reason=reason, priority=priority
            )
            c.log(entry, trial=seg.trial_id, segment=seg.segment_id)
        message = DecisionMessage(seg.segment_id, step, decision, reason, c.epoch)
        c.after_commit(partial(c.wire.write_decision, message))  # see write_assignment
        self.decision_sent[seg.segment_id] = c.clock.now()

    def trial_for(self, action: Action, view: StudyView) -> TrialRecord | None:
        """Return the trial an action starts or resumes (creating it for START and FORK)."""
        c = self.c
        if action.kind is ActionKind.RESUME:
            trial = c.state.trials.get(action.trial_id)  # type: ignore[arg-type]
            if trial is None or trial.status not in (TrialStatus.QUEUED, TrialStatus.SUSPENDED):
                logger.warning("cannot resume trial %s; ignored", action.trial_id)
                return None
            return trial
        trial_id = len(c.state.trials)
        seed = action.seed if action.seed is not None else trial_seed(c.spec.seed, trial_id)
        entry = rec.TrialCreatedEntry(
            params={},
            seed=seed,
            priority=action.priority,
            end_step=action.end_step,
            generation=action.generation,
            initiator=action.initiator,
        )
        if action.kind is ActionKind.FORK:
            parent = c.state.trials.get(action.trial_id)  # type: ignore[arg-type]
            row = self._checkpoint_row(action.trial_id, action.step)
            own = None if parent is None else parent.checkpoint_row
            if row is None and own is not None and c.state.checkpoints[own].step == action.step:
                row = own  # stage trees: another trial's checkpoint answered the parent
            if parent is None or row is None:
                logger.warning(
                    "cannot fork trial %s at step %s; ignored", action.trial_id, action.step
                )
                return None
            entry = dataclasses.replace(
                entry,
                params=dict(action.params or {}),
                parent_trial=parent.trial_id,
                parent_step=action.step,
                parent_checkpoint_row=row,
            )
        elif action.params is not None:
            entry = dataclasses.replace(entry, params=dict(action.params))
        else:
            if c.state.generated >= c.spec.num_trials:
                return None
            index = c.state.generated
            proposal = c.propose(index, view)
            entry = dataclasses.replace(
                entry, params=proposal.params, generator_index=index, info=proposal.info or None
            )
        c.log(entry, trial=trial_id)
        logger.info("trial %d created: %s", trial_id, entry.params)
        return c.state.trials[trial_id]

    def _checkpoint_row(self, trial_id: int | None, step: int | None) -> int | None:
        """The row of ``trial_id``'s live checkpoint at ``step`` (the first), or ``None``."""
        if trial_id is None:
            return None
        for ref in self.c.state.live_checkpoints(trial_id):
            if ref.step == step:
                return ref.row
        return None

    def assign(self, trial: TrialRecord, worker_id: str, until_step: int | None) -> None:
        """Start a segment of ``trial`` on worker ``worker_id`` from its checkpoint (or its
        parent's), to ``until_step``; its assignment file is written after the commit."""
        c = self.c
        row = trial.checkpoint_row
        if row is None:  # a forked trial restarts from its parent's checkpoint until it has one
            row = trial.parent_checkpoint_row
        ref = c.state.checkpoints.get(row) if row is not None else None
        start = ref.step if ref is not None else 0
        end = min(trial.end_step or c.spec.max_steps, c.spec.max_steps)
        until = min(until_step or end, end)
        if start >= end:
            c.set_trial(trial, TrialStatus.COMPLETED, "its checkpoint is at its last step")
            return
        seg = self.new_segment(trial, worker_id, start, max(until, start + 1), row)
        logger.info(
            "segment %d: trial %d on worker %s from step %d",
            seg.segment_id,
            trial.trial_id,
            worker_id,
            start,
        )

    def new_segment(
        self,
        trial: TrialRecord,
        worker_id: str,
        start: int,
        until: int,
        row: int | None,
        *,
        checkpoint_steps: list[int] | None = None,
        stages: list[int] | None = None,
    ) -> SegmentRecord:
        """Journal a segment of ``trial`` on ``worker_id`` and queue its assignment file."""
        c = self.c
        segment_id = len(c.state.segments)
        entry = rec.SegmentAssignedEntry(
            worker=worker_id,
            start_step=start,
            until_step=until,
            checkpoint_row=row,
            checkpoint_steps=checkpoint_steps,
            stages=stages,
        )
        c.log(entry, trial=trial.trial_id, segment=segment_id)
        seg = c.state.segments[segment_id]
        c.after_commit(self.assignment_writer(seg))
        return seg

    def assignment_writer(self, seg: SegmentRecord) -> Callable[[], None]:
        """A function that writes the assignment of ``seg`` to its worker."""
        c = self.c
        trial = c.state.trials[seg.trial_id]
        row = seg.checkpoint_row
        ref = c.state.checkpoints.get(row) if row is not None else None
        spec = c.spec
        entry = spec.entry
        assignment = Assignment(
            segment_id=seg.segment_id,
            trial_id=seg.trial_id,
            params=trial.params,
            seed=c.scheduling.segment_seed(trial),
            start_step=seg.start_step,
            until_step=seg.until_step,
            max_steps=spec.max_steps,
            boundary=spec.boundary,
            metric=spec.metric,
            mode=spec.mode,
            entry={
                "file": str(entry.file) if entry.file else None,
                "module": entry.module,
                "function": entry.function,
            },
            checkpoint=ref.path if ref is not None else None,
            checkpoint_sha256=ref.sha256 if ref is not None else None,
            decision_wait=c.scheduling.decision_wait(),
            checkpoint_steps=seg.checkpoint_steps,
            epoch=c.epoch,
        )
        return partial(c.wire.write_assignment, seg.worker_id, assignment)


__all__ = ["TrialActions"]
