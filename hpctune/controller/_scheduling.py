"""How free workers get work, chosen from the spec: trial by trial, or paths of a stage tree.

The controller holds one :class:`Scheduling` (``Controller.scheduling``):
:class:`TrialScheduling` offers free slots to the policy trial by trial; with ``[stages]
enabled`` the :class:`~hpctune.controller._stages.StageTreeScheduling` admits the trials to a
stage tree and gives free workers paths of stages. The rest of the controller asks it, and never
which one it is, how to fill slots, when to collect checkpoints, which seed a segment gets and
how long a worker waits for a decision at a boundary.
"""

from __future__ import annotations

import abc
import logging
from typing import TYPE_CHECKING

from hpctune.policies import ActionKind, Event
from hpctune.wire.states import StudyState

if TYPE_CHECKING:
    from hpctune.controller._loop import Controller
    from hpctune.journal.state import TrialRecord

logger = logging.getLogger(__name__)


class Scheduling(abc.ABC):
    """The controller's way of giving free workers work.

    Args:
        controller: The controller it schedules for (its state, policy, workers).
    """

    def __init__(self, controller: Controller) -> None:
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
        return c.decision_wait if c.policy.traits.boundary_decisions else 0.0

    def collect_checkpoints(self) -> None:
        """The trial-based collection (:meth:`Controller._collect_checkpoints`)."""
        self.c._collect_checkpoints()

    def fill_slots(self) -> None:
        """Offer free slots to the policy; end the study if it has nothing and nothing runs."""
        c = self.c
        if c.spec.resources.slots == 0:  # ask/tell only: no workers
            if c.commands.ask_tell_only_done():
                c._set_study(StudyState.FINISHED, "every trial was asked for and told")
            return
        active = c.state.active_segments()
        idle, free_slots = c._idle_workers()
        if free_slots <= 0:
            return
        view = c._view(free_slots)
        placed = 0
        event = Event.slot_free(free_slots)
        decision = c.policy.decide(view, event, c._rng(event))
        for action in decision.actions:
            if action.kind not in (ActionKind.START, ActionKind.RESUME, ActionKind.FORK):
                c._apply(action, None)
                continue
            if placed >= free_slots:
                logger.warning("policy asked for more trials than free slots; %s ignored", action)
                continue
            trial = c._trial_for(action, view)
            if trial is None:
                continue
            worker_id = idle.pop(0).worker_id if idle else c.pool.new_worker()
            c._assign(trial, worker_id, action.until_step)
            placed += 1
        if idle and active and decision.hold_idle_workers:
            return  # work will come when a running trial ends: keep the allocations
        for worker in c.elastic.idle_to_release(idle):  # the policy has nothing for them
            c.pool.order_exit(worker, "no work for it")
        if not placed and not active and not c.commands.external_running():
            c._set_study(StudyState.FINISHED, "no trial left to run")


__all__ = ["Scheduling", "TrialScheduling"]
