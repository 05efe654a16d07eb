"""Ray Tune's asynchronous PBT with truncation selection, as ``pbt-truncation``.

Jaderberg et al. (2017) in the form of Ray Tune's ``PopulationBasedTraining`` (REFERENCE.md §2.1;
defaults ``quantile_fraction=0.25``, ``resample_probability=0.25``, ``perturbation_factors=(1.2,
0.8)``): ``population_size`` trials train towards ``max_steps``. When a trial reaches a boundary
``perturbation_interval`` steps or more after its last check (and after ``burn_in_period``), the
live trials with a finite value are ranked by their latest value; the bottom
``ceil(quantile_fraction * n)`` (at most half) are the lower quantile, as many at the top the
upper. A trial in the lower quantile **exploits**: it is terminated, and a new trial forks from
the latest checkpoint of an upper-quantile trial drawn at random, with that trial's configuration
**explored** (:func:`._mutation.explore`). Ray continues the same trial in place; here the clone
is a new trial whose ``initiator`` is the replaced one and whose ``generation`` is its parent's
plus one, so the lineage is in the journal.
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
    OptionError,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
)
from hpctune.policies._common import require
from hpctune.policies._fitness import Objective
from hpctune.policies._mutation import explore
from hpctune.policies.pbt import (
    WAITING,
    best_trial,
    check_exclude,
    check_exclude_in_space,
    check_factors,
    generation,
)
from hpctune.study.space import SearchSpace


@dataclass(frozen=True)
class TruncationOptions:
    """Options of :class:`TruncationPbtPolicy`; Ray Tune's defaults except the interval's unit.

    Attributes:
        population_size: Trials training at once (all sampled by the generator at first).
        perturbation_interval: Steps between a trial's exploit checks (Ray: 60 s of training).
        burn_in_period: Steps before the first check (Ray: 0).
        quantile_fraction: Share of the population in each quantile (Ray: 0.25; at most 0.5).
        resample_probability: Probability of resampling a parameter when exploring (Ray: 0.25).
        factors: Perturbation multipliers (Ray: 1.2, 0.8).
        exclude: Parameters never changed.
        keep_last_checkpoints: Keep every trial's last checkpoint (no garbage collection).
    """

    population_size: int = 8
    perturbation_interval: int = 5
    burn_in_period: int = 0
    quantile_fraction: float = 0.25
    resample_probability: float = 0.25
    factors: list[float] | None = None
    exclude: list[str] | None = None
    keep_last_checkpoints: bool = False


class TruncationPbtPolicy(Policy):
    """Asynchronous PBT with truncation selection (Ray Tune's ``PopulationBasedTraining``).

    Use it when users know Ray's PBT and want its behaviour, or when a population of long-lived
    trials (each trained to ``max_steps``) suits better than short sessions. State: each trial's
    last check step and the clones waiting for a free slot.
    """

    name: ClassVar[str] = "pbt-truncation"
    traits: ClassVar[PolicyTraits] = PolicyTraits(makes_configurations=True)
    Options = TruncationOptions

    def __init__(self, context: StudyContext, options: TruncationOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or TruncationOptions()
        o = self.options
        require("population_size", o.population_size, 2)
        require("perturbation_interval", o.perturbation_interval, 1)
        require("burn_in_period", o.burn_in_period, 0)
        if not 0 < o.quantile_fraction <= 0.5:
            raise OptionError(
                "quantile_fraction", f"must be in (0, 0.5], but got {o.quantile_fraction!r}"
            )
        if not 0 <= o.resample_probability <= 1:
            raise OptionError(
                "resample_probability",
                f"must be in [0, 1], but got {o.resample_probability!r}",
            )
        self.factors = check_factors(o.factors if o.factors is not None else [1.2, 0.8])
        self.exclude = check_exclude(o.exclude)
        self.last_check: dict[int, int] = {}  # trial -> step of its last exploit check
        self.pending: list[tuple[int, int, dict[str, Any]]] = []  # (replaced, parent, params)
        # the quantiles of the last view asked (one instant's boundaries share a view)
        self._quantiles_memo: tuple[StudyView, tuple[list[int], list[int]]] | None = None

    def check_space(self, space: SearchSpace) -> None:
        """``exclude`` must name parameters of the space."""
        check_exclude_in_space(self.exclude, space)

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """SLOT_FREE: waiting trials, then clones, then the initial population; BOUNDARY: the
        exploit check."""
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self._fill(view, event.free_slots))
        if event.kind is EventKind.BOUNDARY and event.trial_id is not None:
            return PolicyDecision.of(self._check(view, event.trial_id, int(event.step or 0), rng))
        return PolicyDecision()

    def _fill(self, view: StudyView, free: int) -> list[Action]:
        actions = [Action.resume(t.trial_id) for t in view.with_status(*WAITING)[:free]]
        while self.pending and len(actions) < free:
            replaced, parent_id, params = self.pending.pop(0)
            parent = view.trials.get(parent_id)
            step = parent.checkpoint_step if parent is not None else None
            if parent is None or step is None or step >= view.max_steps:
                continue  # nothing left to train from it
            actions.append(
                Action.fork(
                    parent_id,
                    step,
                    params,
                    generation=generation(parent) + 1,
                    initiator=replaced,
                    reason=f"PBT truncation: replaces trial {replaced}",
                )
            )
        sampled = sum(generation(t) == 0 for t in view.trials.values())
        remaining = view.trials_remaining
        starts = self.options.population_size - sampled
        if remaining is not None:
            starts = min(starts, remaining)
        actions += [
            Action.start(generation=0) for _ in range(max(min(starts, free - len(actions)), 0))
        ]
        return actions

    def quantiles(self, view: StudyView) -> tuple[list[int], list[int]]:
        """(lower, upper): the trial ids of the bottom and top quantiles of the live trials
        (computed once per view: every boundary of one instant shares it)."""
        memo = self._quantiles_memo
        if memo is not None and memo[0] is view:
            return list(memo[1][0]), list(memo[1][1])
        found = self._quantiles(view)
        self._quantiles_memo = (view, found)
        return list(found[0]), list(found[1])

    def _quantiles(self, view: StudyView) -> tuple[list[int], list[int]]:
        live = [
            t
            for _, t in sorted(view.trials.items())
            if not t.status.is_final and math.isfinite(t.last_value)
        ]
        if len(live) <= 1:
            return [], []
        ranked = sorted(live, key=lambda t: view.sign * t.last_value)
        n = math.ceil(len(ranked) * self.options.quantile_fraction)
        if n > len(ranked) / 2:
            n = len(ranked) // 2
        return [t.trial_id for t in ranked[:n]], [t.trial_id for t in ranked[len(ranked) - n :]]

    def _check(
        self, view: StudyView, trial_id: int, step: int, rng: np.random.Generator
    ) -> list[Action]:
        trial = view.trials.get(trial_id)
        if trial is None:
            return []
        o = self.options
        last = self.last_check.get(trial_id, trial.parent_step or 0)
        due = step - last >= o.perturbation_interval and step >= o.burn_in_period
        if step >= view.max_steps or not due:
            return [Action.continue_(trial_id)]
        self.last_check[trial_id] = step
        lower, upper = self.quantiles(view)
        upper = [u for u in upper if (view.trials[u].checkpoint_step or 0) < view.max_steps]
        if trial_id not in lower or not upper:
            return [Action.continue_(trial_id)]  # (a parent at max_steps has nothing to give)
        parent_id = upper[int(rng.integers(len(upper)))]
        parent = view.trials[parent_id]
        params = dict(parent.params)
        if view.space is not None:
            params = explore(
                view.space,
                params,
                rng,
                resample_probability=o.resample_probability,
                exclude=self.exclude,
                factors=self.factors,
            )
        self.pending.append((trial_id, parent_id, params))
        del self.last_check[trial_id]
        return [
            Action.terminate(
                trial_id, reason=f"PBT truncation: lower quantile, cloning trial {parent_id}"
            )
        ]

    def needed_checkpoints(self, view: StudyView) -> set[int] | None:
        """Parents of clones waiting for a slot, and the fittest ended trial."""
        if self.options.keep_last_checkpoints:
            return None
        needed = {parent for _, parent, _ in self.pending}
        ended = [t for t in view.trials.values() if t.status.is_final]
        best = best_trial(ended, [Objective(view.metric, view.mode)], view)
        if best is not None:
            needed.add(best.trial_id)
        return needed

    def state_dict(self) -> dict[str, Any]:
        """Last check steps and waiting clones (JSON-able)."""
        return {
            "last_check": [[t, s] for t, s in sorted(self.last_check.items())],
            "pending": [[r, p, params] for r, p, params in self.pending],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        if not state:
            return
        self.last_check = {int(t): int(s) for t, s in state["last_check"]}
        self.pending = [(int(r), int(p), dict(params)) for r, p, params in state["pending"]]
