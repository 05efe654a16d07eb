"""The policies' decisions as they were computed before issue 15 made them scale.

Each class here is a registered policy with the straightforward computation put back (the code of
the ``core`` branch, verbatim where it could be): every trial scanned, the running means and
percentiles recomputed, at every decision. ``tests/policies/test_scale.py`` drives a policy and its
reference side by side and requires the same actions, reasons included.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from hpctune.policies import (
    AshaPolicy,
    HyperbandPolicy,
    MedianStoppingPolicy,
    PbtPolicy,
    PolicyDecision,
    PopPolicy,
    ShaPolicy,
    TruncationPbtPolicy,
)
from hpctune.policies._base import Action, Event, EventKind, StudyView, TrialView
from hpctune.policies._common import best_until, last_step
from hpctune.policies._fitness import Objective, compare, fitness
from hpctune.policies._halving import SyncHalvingPolicy
from hpctune.policies._mutation import mutate
from hpctune.policies.asha import AshaBracket
from hpctune.policies.median import median_of_running_means
from hpctune.policies.pbt import _Round, generation
from hpctune.policies.pop import Assessment, Split
from hpctune.study.states import Decision, TrialStatus


class ReferenceAshaBracket(AshaBracket):
    """The cutoff as ``np.nanpercentile`` over every value recorded at the rung."""

    def on_result(self, trial_id: int, step: int, value: float | None) -> Decision:
        if trial_id in self.stopped:
            return Decision.STOP
        for milestone, recorded in self.rungs:
            if step < milestone:
                continue
            if trial_id in recorded:
                return Decision.CONTINUE
            cutoff = None
            if recorded:
                q = (1 - 1 / self.reduction_factor) * 100
                cutoff = float(np.nanpercentile(list(recorded.values()), q))
            decision = Decision.CONTINUE
            if cutoff is not None and value is not None and value < cutoff:
                decision = Decision.STOP
                self.stopped[trial_id] = (milestone, cutoff)
            if value is not None and not math.isnan(value):
                recorded[trial_id] = value
            return decision
        return Decision.CONTINUE


class ReferenceAsha(AshaPolicy):
    """ASHA with :class:`ReferenceAshaBracket`."""

    def _make_brackets(self, max_t: int) -> list[AshaBracket]:
        brackets = super()._make_brackets(max_t)
        for bracket in brackets:
            bracket.__class__ = ReferenceAshaBracket
        return brackets


class ReferenceMedian(MedianStoppingPolicy):
    """The rule over every trial of the view, running means recomputed at each decision."""

    def _rule(self, view: StudyView, trial: TrialView, step: int) -> Action:
        o = self.options
        tid = trial.trial_id
        if tid in self.stopped_at:
            if self.stopped_at[tid] == step:
                return Action.suspend(tid, reason="median: stopped (hard_stop = false)")
            return Action.continue_(tid)
        if step < o.grace_period:
            return Action.continue_(tid)
        others = [t for t in view.trials.values() if t.trial_id != tid and last_step(t) >= step]
        if len(others) < o.min_samples_required:
            if not o.yield_slots:
                return Action.continue_(tid)
            yield_ = Action.suspend(
                tid,
                reason=f"median: yields its slot, {len(others)} other trials reached step "
                f"{step} (< {o.min_samples_required})",
            )
            if self.paused_at.get(tid) == step:
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


class _ReferenceHalving(SyncHalvingPolicy):
    """SLOT_FREE over every bracket, the known trials collected anew at each decision."""

    def _absorb(self, view: StudyView) -> None:
        known = {t for b in self.brackets for t in b.trials}
        for tid in sorted(set(view.trials) - known):
            bracket = self.brackets[-1] if self.brackets else None
            if bracket is None or bracket.room == 0:
                bracket = self._open_bracket()
            bracket.add(tid)

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is not EventKind.SLOT_FREE:
            return PolicyDecision()
        self._absorb(view)
        trials = view.trials
        if view.trials_remaining == 0 and self.brackets:
            self.brackets[-1].close()
        for bracket in self.brackets:
            bracket.drop_gone(trials)
            while bracket.rung_done(trials):
                milestone = bracket.milestone
                promoted, dropped = bracket.halve(trials, view.sign)
                for tid in dropped:
                    if promoted:
                        why = (
                            f"not among the top {len(promoted)} at step {milestone} of "
                            f"bracket s={bracket.shape.s}"
                        )
                    else:
                        why = f"reached max_t={milestone}"
                    self.dropped[tid] = f"{self.name}: {why}"
                bracket.drop_gone(trials)
        actions = [
            Action.terminate(tid, reason=reason)
            for tid, reason in self.dropped.items()
            if tid in trials and not trials[tid].status.is_final
        ]
        free = event.free_slots
        placing: list[Action] = []
        queued = [
            (b, t)
            for b in self.brackets
            for t in b.waiting(trials)
            if trials[t].status is TrialStatus.QUEUED
        ]
        suspended = [
            (b, t)
            for b in self.brackets
            for t in b.waiting(trials)
            if trials[t].status is TrialStatus.SUSPENDED
        ]
        for bracket, tid in (queued + suspended)[:free]:
            placing.append(Action.resume(tid, until_step=bracket.milestone))
        new = free - len(placing)
        if view.trials_remaining is not None:
            new = min(new, view.trials_remaining)
        for milestone in self._start_milestones(max(new, 0)):
            placing.append(Action.start(until_step=milestone))
        return PolicyDecision.of(actions + placing)


class ReferenceSha(_ReferenceHalving, ShaPolicy):
    """SHA as before."""


class ReferenceHyperband(_ReferenceHalving, HyperbandPolicy):
    """Hyperband as before."""


def _best_trial(trials: list[TrialView], objectives: list[Objective], view: StudyView) -> Any:
    best: TrialView | None = None
    for trial in trials:
        if (
            best is None
            or compare(fitness(trial, objectives, view), fitness(best, objectives, view)) > 0
        ):
            best = trial
    return best


class ReferencePbt(PbtPolicy):
    """Algorithm 1 with the generations counted anew for every suggestion."""

    def _suggest(self, view: StudyView, rng: np.random.Generator, round_: _Round) -> Action | None:
        o = self.options
        sizes = Counter(generation(t) for t in view.trials.values()) + round_.sizes
        population = self._population(view)
        if sizes[0] < population:
            round_.sizes[0] += 1
            end = min(o.steps_per_generation, view.max_steps)
            return Action.start(end_step=end, generation=0, reason="PBT: generation 0")
        budget = self.budget_mode(view)
        for initiator in self.uninitiated(view):
            if initiator.trial_id in round_.initiated:
                continue
            if budget and not self.generation_complete(view, generation(initiator), round_):
                return None
            round_.initiated.add(initiator.trial_id)
            round_.sizes[generation(initiator) + 1] += 1
            return self._old_reproduce(view, initiator, rng)
        return None

    def _old_reproduce(
        self, view: StudyView, initiator: TrialView, rng: np.random.Generator
    ) -> Action:
        opponents = self.opponents(view, initiator)
        opponent = opponents[int(rng.integers(len(opponents)))] if opponents else None
        winner, loser = self.tournament(view, initiator, opponent)
        parent = next(
            (
                t
                for t in (winner, loser)
                if t is not None
                and t.checkpoint_step is not None
                and t.checkpoint_step < view.max_steps
            ),
            None,
        )
        source = parent or winner
        params = dict(source.params)
        if view.space is not None:
            params = mutate(view.space, params, rng, exclude=self.exclude, factors=self.factors)
        child_generation = generation(initiator) + 1
        versus = "no opponent" if opponent is None else f"opponent {opponent.trial_id}"
        if parent is None or parent.checkpoint_step is None:
            return Action.start(
                params=params,
                end_step=min(self.options.steps_per_generation, view.max_steps),
                generation=child_generation,
                initiator=initiator.trial_id,
                reason=f"PBT: initiator {initiator.trial_id} ({versus}); no checkpoint to "
                "fork from, starting afresh",
            )
        step = parent.checkpoint_step
        return Action.fork(
            parent.trial_id,
            step,
            params,
            end_step=min(step + self.options.steps_per_generation, view.max_steps),
            generation=child_generation,
            initiator=initiator.trial_id,
            reason=f"PBT: initiator {initiator.trial_id} vs {versus}: parent {parent.trial_id}",
        )

    def needed_checkpoints(self, view: StudyView) -> set[int] | None:
        if self.options.keep_last_checkpoints:
            return None
        trials = list(view.trials.values())
        pending = [generation(t) for t in trials if not t.status.is_final]
        pending += [generation(t) for t in self.uninitiated(view)]
        if sum(generation(t) == 0 for t in trials) < self._population(view):
            pending.append(0)
        lowest = min(pending, default=math.inf)
        k = self.options.opponent_generations
        ended = [t for t in trials if t.status.is_final and t.checkpoint_step is not None]
        needed = {
            t.trial_id
            for t in ended
            if generation(t) + k - 1 >= lowest and (t.checkpoint_step or 0) < view.max_steps
        }
        best = _best_trial(ended, self.objectives(view), view)
        if best is not None:
            needed.add(best.trial_id)
        return needed


class ReferenceTruncationPbt(TruncationPbtPolicy):
    """The quantiles ranked anew at every boundary."""

    def quantiles(self, view: StudyView) -> tuple[list[int], list[int]]:
        return self._quantiles(view)

    def needed_checkpoints(self, view: StudyView) -> set[int] | None:
        if self.options.keep_last_checkpoints:
            return None
        needed = {parent for _, parent, _ in self.pending}
        ended = [t for t in view.trials.values() if t.status.is_final]
        best = _best_trial(ended, [Objective(view.metric, view.mode)], view)
        if best is not None:
            needed.add(best.trial_id)
        return needed


class ReferencePop(PopPolicy):
    """Every assessment made anew, waiting trials counted and suspended ones sorted at each
    decision."""

    def _assess(self, view: StudyView, trial: TrialView) -> Assessment:
        return self._assess_now(view, trial, view.predictions.get(trial.trial_id))

    def _work_waiting(self, view: StudyView, exclude: TrialView) -> bool:
        if view.trials_remaining is None or view.trials_remaining > 0:
            return True
        return any(
            t.status in (TrialStatus.QUEUED, TrialStatus.SUSPENDED)
            and t.trial_id != exclude.trial_id
            for t in view.trials.values()
        )

    def _fill(self, view: StudyView, free: int) -> list[Action]:
        split: Split = self._split(view)
        running = {t.trial_id for t in view.with_status(TrialStatus.RUNNING)}
        promising_waiting = [
            view.trials[t]
            for t in split.promising
            if t not in running
            and view.trials[t].status
            in (TrialStatus.RUNNING, TrialStatus.SUSPENDED, TrialStatus.QUEUED)
        ]
        actions: list[Action] = []
        for trial in promising_waiting[:free]:
            p = self._assess(view, trial).p
            actions.append(Action.resume(trial.trial_id, priority=p, reason="promising"))
        free -= len(actions)
        for trial in view.with_status(TrialStatus.QUEUED):
            if free <= 0:
                break
            if trial.trial_id not in split.promising_set:
                actions.append(Action.resume(trial.trial_id, reason="queued"))
                free -= 1
        new = min(free, view.trials_remaining if view.trials_remaining is not None else free)
        actions.extend(Action.start(reason="new configuration") for _ in range(max(new, 0)))
        free -= max(new, 0)
        waiting = sorted(
            (
                t
                for t in view.with_status(TrialStatus.SUSPENDED)
                if t.trial_id not in split.promising_set
            ),
            key=lambda t: (t.times[-1] if len(t.times) else -math.inf, t.trial_id),
        )
        for trial in waiting[: max(free, 0)]:
            actions.append(Action.resume(trial.trial_id, reason="opportunistic turn"))
        return actions


#: Each registered policy that changed, with its reference.
REFERENCES: dict[str, tuple[type, type]] = {
    "asha": (AshaPolicy, ReferenceAsha),
    "median": (MedianStoppingPolicy, ReferenceMedian),
    "sha": (ShaPolicy, ReferenceSha),
    "hyperband": (HyperbandPolicy, ReferenceHyperband),
    "pbt": (PbtPolicy, ReferencePbt),
    "pbt-truncation": (TruncationPbtPolicy, ReferenceTruncationPbt),
    "pop": (PopPolicy, ReferencePop),
}
