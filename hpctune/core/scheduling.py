"""How free workers get work, chosen from the spec: trial by trial, or paths of a stage tree.

The controller holds one :class:`Scheduling` (``SchedulingCore.scheduling``):
:class:`TrialScheduling` offers free slots to the policy trial by trial; with ``[stages]
enabled`` the :class:`~hpctune.core.stages.StageTreeScheduling` admits the trials to a
stage tree and gives free workers paths of stages. The rest of the controller asks it, and never
which one it is, how to fill slots, when to collect checkpoints, which seed a segment gets and
how long a worker waits for a decision at a boundary.
"""

from __future__ import annotations

import abc
import logging
from typing import TYPE_CHECKING

from hpctune.journal.best import best_checkpoint_rows, keep_mode, keeps_latest
from hpctune.policies import ActionKind, Event
from hpctune.study.states import StudyState

if TYPE_CHECKING:
    from hpctune.core.hosts import SchedulingHost
    from hpctune.journal.entities import TrialRecord

logger = logging.getLogger(__name__)


class Scheduling(abc.ABC):
    """The controller's way of giving free workers work.

    Args:
        controller: The controller it schedules for (its state, policy, workers).
    """

    def __init__(self, controller: SchedulingHost) -> None:
        self.c = controller

    @abc.abstractmethod
    def fill_slots(self) -> None:
        """Give free workers work; end the study when nothing is left to run."""

    @abc.abstractmethod
    def collect_checkpoints(self) -> None:
        """Delete the checkpoints nothing needs any more (the checkpoint table changed)."""

    @abc.abstractmethod
    def segment_seed(self, trial: TrialRecord) -> int:
        """The seed a segment of ``trial`` trains with."""

    @abc.abstractmethod
    def decision_wait(self) -> float:
        """Seconds a worker waits at a boundary for the decision of its step."""


class TrialScheduling(Scheduling):
    """Trial by trial: the policy places trials on free slots (SLOT_FREE decisions)."""

    def segment_seed(self, trial: TrialRecord) -> int:
        """The trial's own seed."""
        return trial.seed

    def decision_wait(self) -> float:
        """The controller's wait, for a policy that decides at boundaries; else none."""
        c = self.c
        return c.settings.decision_wait if c.policy.traits.boundary_decisions else 0.0

    def collect_checkpoints(self) -> None:
        """Delete the checkpoints nothing needs any more.

        Kept: a trial's latest while it has not ended (to resume from) and, after it ended, as
        ``[study] keep_checkpoints`` says (:mod:`hpctune.journal.best`); the checkpoint behind
        the best value of every trial not ended and of the study's best trial (unless
        ``"last"``); any checkpoint a trial not yet ended was forked from. A policy that forks
        (``makes_configurations``) and names the ended trials it may still fork from
        (:meth:`Policy.needed_checkpoints`, PBT's garbage collection, §3.7) has the latest
        checkpoints of the other ended trials deleted.
        """
        c = self.c
        needed: set[int] | None = None
        if c.policy.traits.makes_configurations:
            needed = c.policy.needed_checkpoints(c.view())
            if needed is None:
                return  # the policy keeps everything (e.g. keep_last_checkpoints)
        keep = best_checkpoint_rows(c.state)
        forks = (c.state.trials[tid] for tid in c.state.forked)
        keep |= {
            t.parent_checkpoint_row
            for t in forks
            if not t.status.is_final and t.parent_checkpoint_row is not None
        }
        rows = []
        latest_kept = needed is None and keep_mode(c.state) != "best"
        for trial_id, live_rows in c.state.live_rows().items():
            trial = c.state.trials.get(trial_id)
            if trial is None or (latest_kept and live_rows == {trial.checkpoint_row}):
                continue  # its only checkpoint is its latest, which the rule keeps
            live = c.state.live_checkpoints(trial_id)
            if needed is not None:
                drop_latest = trial.status.is_final and trial.trial_id not in needed
            else:
                drop_latest = not keeps_latest(c.state, trial)
            for ref in live:
                if ref.row in keep:
                    continue
                if ref.row != trial.checkpoint_row or drop_latest:
                    rows.append(ref.row)
        if rows:
            c.ingest.delete_checkpoints(rows)

    def fill_slots(self) -> None:
        """Offer free slots to the policy; end the study if it has nothing and nothing runs."""
        c = self.c
        if c.spec.resources.slots == 0:  # ask/tell only: no workers
            if c.commands.ask_tell_only_done():
                c.set_study(StudyState.FINISHED, "every trial was asked for and told")
            return
        active = c.state.active_segments()
        idle, free_slots = c.idle_workers()
        if free_slots <= 0:
            return
        view = c.view(free_slots)
        placed = 0
        event = Event.slot_free(free_slots)
        decision = c.policy.decide(view, event, c.rng_for(event))
        for action in decision.actions:
            if action.kind not in (ActionKind.START, ActionKind.RESUME, ActionKind.FORK):
                c.actions.apply(action, None)
                continue
            if placed >= free_slots:
                logger.warning("policy asked for more trials than free slots; %s ignored", action)
                continue
            trial = c.actions.trial_for(action, view)
            if trial is None:
                continue
            worker_id = (
                idle.pop(0).worker_id if idle else c.pool.new_worker(c.elastic.worker_size())
            )
            c.actions.assign(trial, worker_id, action.until_step)
            placed += 1
        if idle and active and decision.hold_idle_workers:
            return  # work will come when a running trial ends: keep the allocations
        for worker in c.elastic.idle_to_release(idle):  # the policy has nothing for them
            c.pool.order_exit(worker, "no work for it")
        if not placed and not active and not c.commands.external_running():
            c.set_study(StudyState.FINISHED, "no trial left to run")


__all__ = ["Scheduling", "TrialScheduling"]
