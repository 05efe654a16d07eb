"""The median stopping rule (Golovin et al., "Google Vizier", KDD 2017, §3.2.2), as Ray Tune's.

Ray Tune's ``MedianStoppingRule`` (``median_stopping_rule.py``): once past ``grace_period``, a
trial at step ``t`` is stopped if its best value so far is strictly worse than the median, over
the other trials that reached ``t``, of their running means between ``grace_period`` and ``t``.
With fewer than ``min_samples_required`` such trials it yields its slot (suspends) when others
are waiting and it ran ``min_time_slice`` steps since it last yielded; the free slots go to
waiting trials first-in first-out (queued, new, then suspended: Ray's ``FIFOScheduler``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hpctune.policies._base import (
    Action,
    Event,
    EventKind,
    Policy,
    StudyView,
    TrialView,
)
from hpctune.policies._common import best_until, last_step, require
from hpctune.states import TrialStatus


@dataclass(frozen=True)
class MedianOptions:
    """Options of :class:`MedianStoppingPolicy` (Ray's ``MedianStoppingRule`` defaults).

    Attributes:
        grace_period: Steps before a trial may be stopped; running means start here. Ray counts
            60 s of ``time_total_s``; hpctune counts steps (1: from the first step on).
        min_samples_required: Other trials needed at a step to compute the median (Ray: 3).
        min_time_slice: Steps a trial trains between two yields (Ray: 0).
        hard_stop: Terminate a stopped trial (Ray: True); False suspends it, to be resumed
            once nothing else waits.
    """

    grace_period: int = 1
    min_samples_required: int = 3
    min_time_slice: int = 0
    hard_stop: bool = True


def running_mean(trial: TrialView, start: int, step: int, sign: float) -> float:
    """Mean of ``sign * value`` over the steps in ``[start, step]``; NaN if none."""
    mask = (trial.steps >= start) & (trial.steps <= step)
    values = sign * np.asarray(trial.values[mask], dtype=float)
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else math.nan


def median_of_running_means(others: list[TrialView], start: int, step: int, sign: float) -> float:
    """The median of the others' running means (NaN means are left out)."""
    means = [running_mean(t, start, step, sign) for t in others]
    means = [m for m in means if not math.isnan(m)]
    return float(np.median(means)) if means else math.nan


class MedianStoppingPolicy(Policy):
    """The median stopping rule (Vizier; Ray's ``MedianStoppingRule``) at every boundary.

    Use it as a cheap, model-free early stopper when trials are started in large numbers and
    curves of different configurations are comparable step by step. Its yielding (suspending a
    trial that is ahead of all but ``min_time_slice`` others while new trials wait) makes it
    breadth-first, as Ray's; set ``min_time_slice`` to ``max_steps`` to never yield.
    """

    name: ClassVar[str] = "median"
    Options = MedianOptions

    def __init__(self, options: MedianOptions | None = None) -> None:
        self.options = options or MedianOptions()
        o = self.options
        require("grace_period", o.grace_period, 0)
        require("min_samples_required", o.min_samples_required, 1)
        require("min_time_slice", o.min_time_slice, 0)
        self.paused_at: dict[int, int] = {}  # trial -> step of its last yield
        self.stopped_at: dict[int, int] = {}  # trial -> step it was stopped at (soft stop)

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> list[Action]:
        """Fill slots FIFO on SLOT_FREE; apply the rule at a BOUNDARY."""
        if event.kind is EventKind.SLOT_FREE:
            return self._fifo(view, event.free_slots)
        if event.kind is not EventKind.BOUNDARY or event.trial_id is None:
            return []
        trial = view.trials.get(event.trial_id)
        if trial is None:
            return []
        return [self._rule(view, trial, int(event.step or trial.step))]

    def _rule(self, view: StudyView, trial: TrialView, step: int) -> Action:
        o = self.options
        tid = trial.trial_id
        if tid in self.stopped_at:  # a soft-stopped trial resumed: Ray falls back to FIFO
            if self.stopped_at[tid] == step:
                return Action.suspend(tid, reason="median: stopped (hard_stop = false)")
            return Action.continue_(tid)
        if step < o.grace_period:
            return Action.continue_(tid)
        others = [t for t in view.trials.values() if t.trial_id != tid and last_step(t) >= step]
        if len(others) < o.min_samples_required:
            yield_ = Action.suspend(
                tid,
                reason=f"median: yields its slot, {len(others)} other trials reached step "
                f"{step} (< {o.min_samples_required})",
            )
            if self.paused_at.get(tid) == step:  # decided already (the same event again)
                return yield_
            waiting = (view.trials_remaining is None or view.trials_remaining > 0) or any(
                t.status in (TrialStatus.QUEUED, TrialStatus.SUSPENDED) and t.trial_id != tid
                for t in view.trials.values()
            )
            if waiting and step - self.paused_at.get(tid, -math.inf) > o.min_time_slice:
                self.paused_at[tid] = step
                return yield_
            return Action.continue_(tid)
        median = median_of_running_means(others, o.grace_period, step, view.sign)
        best = best_until(trial, step, view.sign)
        if not math.isnan(median) and not math.isnan(best) and best < median:
            reason = (
                f"median: best {view.metric} {view.sign * best:.6g} by step {step} is worse "
                f"than the median {view.sign * median:.6g} of {len(others)} trials' running means"
            )
            if o.hard_stop:
                return Action.terminate(tid, reason=reason)
            self.stopped_at[tid] = step
            return Action.suspend(tid, reason=reason)
        return Action.continue_(tid)

    def stage_milestones(
        self, view: StudyView, trial_id: int | None, rng: np.random.Generator
    ) -> list[int] | None:
        """Over a stage tree: every evaluation boundary from ``grace_period`` on, then
        ``max_steps`` (Hippo's milestones). A trial is trained from one to the next and judged
        there; the yield of the rule does not apply (trials hold no slot between requests)."""
        start = max(self.options.grace_period, 1)
        first = -(-start // view.boundary) * view.boundary  # the first boundary >= start
        return [*range(first, view.max_steps, view.boundary), view.max_steps]

    def _fifo(self, view: StudyView, free_slots: int) -> list[Action]:
        """Queued trials, then new ones, then suspended ones, each by id (Ray's FIFO order)."""
        actions = [
            Action.resume(t.trial_id) for t in view.with_status(TrialStatus.QUEUED)[:free_slots]
        ]
        new = free_slots - len(actions)
        if view.trials_remaining is not None:
            new = min(new, view.trials_remaining)
        actions.extend(Action.start() for _ in range(max(new, 0)))
        left = free_slots - len(actions)
        for trial in view.with_status(TrialStatus.SUSPENDED)[: max(left, 0)]:
            actions.append(Action.resume(trial.trial_id))
        return actions

    def state_dict(self) -> dict[str, Any]:
        """Steps of the last yield and of soft stops, per trial (JSON-able)."""
        if not self.paused_at and not self.stopped_at:
            return {}
        return {
            "paused_at": [[t, s] for t, s in self.paused_at.items()],
            "stopped_at": [[t, s] for t, s in self.stopped_at.items()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.paused_at = {int(t): int(s) for t, s in state.get("paused_at", [])}
        self.stopped_at = {int(t): int(s) for t, s in state.get("stopped_at", [])}
