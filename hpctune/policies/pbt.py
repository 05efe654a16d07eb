"""Black-box population based training (Li et al., "A Generalized Framework for Population Based
Training", KDD 2019, §3).

A PBT **trial** is a short warm-started session: it trains ``steps_per_generation`` steps from its
parent's checkpoint with its own hyperparameters, then ends (``completed``). Its journal record
carries the lineage: ``parent_trial``, ``parent_step``, ``parent_checkpoint_row`` (the warm start),
``initiator`` and ``generation``.

**GetNewSuggestion** (Algorithm 1), asked whenever a worker is free:

1. while generation 0 has fewer than ``population_size`` trials, sample one (the generator's next
   configuration);
2. otherwise take the **initiator**: the oldest ended trial that has not initiated a reproduction
   (each trial initiates exactly once; trials ending at ``max_steps`` do not);
3. draw one **opponent** uniformly from the ended trials of the past ``opponent_generations``
   (k, default 2) generations up to the initiator's, the initiator excluded;
4. **binary tournament**: the fitter of the two (ties: the initiator) is the **parent**;
5. the child takes the parent's configuration **mutated** (:mod:`._mutation`), is of generation
   ``initiator + 1``, and forks from the parent's latest checkpoint.

**Budget mode** (§3.8, default when ``population_size`` exceeds the slots): a reproduction starts
only once the initiator's generation has ``population_size`` trials (or all it can get, see
:meth:`PbtPolicy.generation_complete`), so the population evolves generation by generation on
fewer workers (synchronously on one). **GetEarlyStoppingTrials**
(§3.4) is the hook for stopping running trials; the paper calls it optional and this policy
stops none.

The policy is stateless, as the paper's service (§3.1, §3.10): generations, initiators and
fitness all come from the trials in the view, so a restarted controller resumes the population
from the journal alone, and trials that have not initiated do so then.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

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
    TrialView,
)
from hpctune.policies._common import require
from hpctune.policies._fitness import (
    Fitness,
    Objective,
    check_comparison,
    compare,
    fitness,
    parse_objectives,
)
from hpctune.policies._mutation import FACTORS, mutate
from hpctune.study.space import SearchSpace
from hpctune.study.states import TrialStatus

WAITING = (TrialStatus.QUEUED, TrialStatus.SUSPENDED)


@dataclass(frozen=True)
class PbtOptions:
    """Options of :class:`PbtPolicy` (defaults of the paper where it gives them).

    Attributes:
        population_size: Trials per generation (generation 0 is sampled).
        steps_per_generation: Steps a trial trains from its parent's checkpoint.
        opponent_generations: k: opponents come from the past k generations (paper: 2).
        objectives: The fitness tuple, e.g. ``["val_accuracy", "val_loss:min"]``; default the
            study's metric.
        comparison: ``"lexicographic"`` or ``"pareto"``.
        exclude: Parameters never mutated.
        budget: Budget mode; ``None``: when ``population_size`` exceeds the study's slots.
        factors: Multipliers for scalar mutation (paper: 0.8 and 1.2).
        keep_last_checkpoints: Keep every trial's last checkpoint (no garbage collection).
    """

    population_size: int = 8
    steps_per_generation: int = 5
    opponent_generations: int = 2
    objectives: list[str] | None = None
    comparison: str = "lexicographic"
    exclude: list[str] | None = None
    budget: bool | None = None
    factors: list[float] | None = None
    keep_last_checkpoints: bool = False


def generation(trial: TrialView) -> int:
    """A trial's generation (0 when the journal has none)."""
    return trial.generation if trial.generation is not None else 0


def end_of(trial: TrialView, max_steps: int) -> int:
    """The step at which a trial is complete."""
    return min(trial.end_step or max_steps, max_steps)


def check_factors(factors: Sequence[float] | None) -> tuple[float, ...]:
    """Return the mutation factors (default 0.8, 1.2); raise :class:`OptionError` if invalid."""
    if factors is None:
        return FACTORS
    ok = (
        not isinstance(factors, str)
        and len(factors) > 0
        and all(
            isinstance(f, int | float) and not isinstance(f, bool) and f > 0 and math.isfinite(f)
            for f in factors
        )
    )
    if not ok:
        raise OptionError("factors", f"must be a list of positive numbers, but got {factors!r}")
    return tuple(float(f) for f in factors)


def check_exclude(exclude: Sequence[str] | None) -> frozenset[str]:
    """Return the excluded names; raise :class:`OptionError` unless a list of strings."""
    if exclude is None:
        return frozenset()
    if isinstance(exclude, str) or not all(isinstance(x, str) for x in exclude):
        raise OptionError("exclude", f"must be a list of parameter names, but got {exclude!r}")
    return frozenset(exclude)


def check_exclude_in_space(exclude: frozenset[str], space: SearchSpace) -> None:
    """Raise :class:`OptionError` if ``exclude`` names a parameter the space lacks."""
    unknown = sorted(exclude - set(space.params))
    if unknown:
        raise OptionError(
            "exclude",
            f"names {unknown} not in the search space; parameters: {', '.join(space.params)}",
        )


def best_trial(
    trials: Sequence[TrialView], objectives: Sequence[Objective], view: StudyView
) -> TrialView | None:
    """The fittest of ``trials`` (lexicographic; ties: the oldest), ``None`` if none."""
    best: TrialView | None = None
    best_fitness: Fitness = ()
    for trial in trials:
        current = fitness(trial, objectives, view)
        if best is None or compare(current, best_fitness) > 0:
            best, best_fitness = trial, current
    return best


class _Ledger:
    """The generation bookkeeping of one view, made in one pass over its trials (by id).

    What :meth:`PbtPolicy.uninitiated`, :meth:`PbtPolicy.generation_complete`,
    :meth:`PbtPolicy.opponents` and :meth:`PbtPolicy._population` find by scanning every trial,
    for every suggestion of a SLOT_FREE; here once per call, then O(log n) a suggestion.
    """

    def __init__(self, view: StudyView, population_size: int) -> None:
        max_steps = view.max_steps
        trials = [t for _, t in sorted(view.trials.items())]
        initiated = {t.initiator for t in trials if t.initiator is not None}
        self.sampled = 0  # trials of generation 0
        self.uninitiated: list[TrialView] = []  # ended, not initiated, can have a child
        self.running: Counter[int] = Counter()  # per generation: not ended, can have a child
        self.open: Counter[int] = Counter()  # per generation: uninitiated trials
        self.ended: dict[int, list[TrialView]] = {}  # per generation, by id
        for t in trials:
            g = generation(t)
            self.sampled += g == 0
            final = t.status.is_final
            if final:
                self.ended.setdefault(g, []).append(t)
            if end_of(t, max_steps) < max_steps:
                if not final:
                    self.running[g] += 1
                elif t.trial_id not in initiated:
                    self.uninitiated.append(t)
                    self.open[g] += 1
        remaining = view.trials_remaining
        self.population = (
            population_size
            if remaining is None
            else min(population_size, self.sampled + remaining)
        )
        self.next = 0  # the next of ``uninitiated`` to initiate
        self.initiated: Counter[int] = Counter()  # per generation: initiated in this call
        self._windows: dict[int, tuple[list[TrialView], list[int]]] = {}

    def complete(self, g: int) -> bool:
        """:meth:`PbtPolicy.generation_complete` with this call's initiations."""
        if g == 0:
            return True
        return self.running[g - 1] == 0 and self.open[g - 1] == self.initiated[g - 1]

    def opponent(self, initiator: TrialView, k: int, rng: np.random.Generator) -> TrialView | None:
        """One of :meth:`PbtPolicy.opponents` drawn uniformly (the same draw, the same trial)."""
        g = generation(initiator)
        if g not in self._windows:
            window = sorted(
                (t for h in range(g - k + 1, g + 1) for t in self.ended.get(h, ())),
                key=lambda t: t.trial_id,
            )
            self._windows[g] = (window, [t.trial_id for t in window])
        window, ids = self._windows[g]
        at = bisect_left(ids, initiator.trial_id)
        mine = at < len(ids) and ids[at] == initiator.trial_id
        count = len(window) - mine
        if count <= 0:
            return None
        i = int(rng.integers(count))
        return window[i + 1 if mine and i >= at else i]


@dataclass
class _Round:
    """Suggestions made within one SLOT_FREE, not yet in the view."""

    initiated: set[int] = field(default_factory=set)
    sizes: Counter[int] = field(default_factory=Counter)  # new trials per generation
    ledger: _Ledger | None = None  # the view's bookkeeping, made at the first suggestion


class PbtPolicy(Policy):
    """Initiator-based black-box PBT (Li et al. 2019, §3; see the module docstring).

    Use it to tune hyperparameters that should change during training (a learning-rate
    schedule found rather than designed) and to get a trained model, with a population of
    about 8-20 and checkpoints that load into a model built from the child's hyperparameters.
    """

    name: ClassVar[str] = "pbt"
    traits: ClassVar[PolicyTraits] = PolicyTraits(
        boundary_decisions=False, makes_configurations=True, runs_on_stage_trees=True
    )
    Options = PbtOptions

    def __init__(self, context: StudyContext, options: PbtOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or PbtOptions()
        o = self.options
        require("population_size", o.population_size, 2)
        require("steps_per_generation", o.steps_per_generation, 1)
        require("opponent_generations", o.opponent_generations, 1)
        self.comparison = check_comparison(o.comparison)
        self.factors = check_factors(o.factors)
        self.exclude = check_exclude(o.exclude)
        parse_objectives(o.objectives, "metric", "max")  # checks the form

    def check_space(self, space: SearchSpace) -> None:
        """``exclude`` must name parameters of the space."""
        check_exclude_in_space(self.exclude, space)

    def objectives(self, view: StudyView) -> list[Objective]:
        """The fitness tuple's objectives for this study."""
        return parse_objectives(self.options.objectives, view.metric, view.mode)

    def budget_mode(self, view: StudyView) -> bool:
        """Whether the population evolves generation by generation (§3.8)."""
        if self.options.budget is not None:
            return self.options.budget
        return self.options.population_size > view.total_slots

    # -- the events ---------------------------------------------------------------------------

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill free slots: waiting trials first (lost workers', a stopped study's), then new
        suggestions; at other events stop what :meth:`get_early_stopping_trials` names."""
        if event.kind is not EventKind.SLOT_FREE:
            return PolicyDecision.of(
                [
                    Action.terminate(t, reason="PBT: early stopping")
                    for t in self.get_early_stopping_trials(view)
                    if t == event.trial_id
                ]
            )
        actions = [
            Action.resume(t.trial_id) for t in view.with_status(*WAITING)[: event.free_slots]
        ]
        holds = self.holds_idle_workers(view)  # as the view shows the study before the actions
        actions += self.get_new_suggestions(view, event.free_slots - len(actions), rng)
        return PolicyDecision.of(actions, hold_idle_workers=holds)

    def get_early_stopping_trials(self, view: StudyView) -> list[int]:
        """Running trials to stop now (§3.4); none: trials are short sessions already."""
        return []

    def get_new_suggestions(
        self, view: StudyView, count: int, rng: np.random.Generator
    ) -> list[Action]:
        """Up to ``count`` new trials (Algorithm 1, in order; fewer if none can start now)."""
        round_ = _Round()
        actions: list[Action] = []
        for _ in range(max(count, 0)):
            action = self._suggest(view, rng, round_)
            if action is None:
                break
            actions.append(action)
        return actions

    # -- Algorithm 1 --------------------------------------------------------------------------

    def _population(self, view: StudyView) -> int:
        """``population_size``, or fewer if the generator cannot make that many trials."""
        sampled = sum(generation(t) == 0 for t in view.trials.values())
        remaining = view.trials_remaining
        if remaining is None:
            return self.options.population_size
        return min(self.options.population_size, sampled + remaining)

    def _suggest(self, view: StudyView, rng: np.random.Generator, round_: _Round) -> Action | None:
        o = self.options
        if round_.ledger is None:
            round_.ledger = _Ledger(view, o.population_size)
        ledger = round_.ledger
        if ledger.sampled + round_.sizes[0] < ledger.population:
            round_.sizes[0] += 1
            end = min(o.steps_per_generation, view.max_steps)
            return Action.start(end_step=end, generation=0, reason="PBT: generation 0")
        while ledger.next < len(ledger.uninitiated):
            initiator = ledger.uninitiated[ledger.next]
            if initiator.trial_id in round_.initiated:  # (initiated outside the ledger)
                ledger.next += 1
                continue
            g = generation(initiator)
            if self.budget_mode(view) and not ledger.complete(g):
                return None  # the oldest waits for its generation to fill (§3.8)
            ledger.next += 1
            ledger.initiated[g] += 1
            round_.initiated.add(initiator.trial_id)
            round_.sizes[g + 1] += 1
            return self.reproduce(view, initiator, rng, ledger)
        return None

    def generation_complete(self, view: StudyView, g: int, round_: _Round | None = None) -> bool:
        """True once generation ``g`` can get no more trials (budget mode's condition, §3.8).

        Generation 0 is complete once sampled; generation g > 0 once every trial of generation
        g - 1 that can reproduce (it ends before ``max_steps``) has ended and initiated. That is
        ``population_size`` trials, or fewer when some of generation g - 1 reached ``max_steps``
        (a lineage that forked from an older parent trains to the end a generation later).
        """
        if g == 0:
            return True
        initiated = {t.initiator for t in view.trials.values() if t.initiator is not None}
        if round_ is not None:
            initiated |= round_.initiated
        return all(
            t.status.is_final and t.trial_id in initiated
            for t in view.trials.values()
            if generation(t) == g - 1 and end_of(t, view.max_steps) < view.max_steps
        )

    def uninitiated(self, view: StudyView) -> list[TrialView]:
        """Ended trials that have not initiated a reproduction and can have a child, oldest
        first."""
        initiated = {t.initiator for t in view.trials.values() if t.initiator is not None}
        return [
            t
            for _, t in sorted(view.trials.items())
            if t.status.is_final
            and t.trial_id not in initiated
            and end_of(t, view.max_steps) < view.max_steps
        ]

    def opponents(self, view: StudyView, initiator: TrialView) -> list[TrialView]:
        """Ended trials of the past k generations up to the initiator's (it excluded)."""
        g = generation(initiator)
        low = g - self.options.opponent_generations + 1
        return [
            t
            for _, t in sorted(view.trials.items())
            if t.trial_id != initiator.trial_id and t.status.is_final and low <= generation(t) <= g
        ]

    def tournament(
        self, view: StudyView, initiator: TrialView, opponent: TrialView | None
    ) -> tuple[TrialView, TrialView | None]:
        """Return (winner, loser) of the binary tournament; ties go to the initiator."""
        if opponent is None:
            return initiator, None
        objectives = self.objectives(view)
        a = fitness(initiator, objectives, view)
        b = fitness(opponent, objectives, view)
        if compare(a, b, self.comparison) < 0:
            return opponent, initiator
        return initiator, opponent

    def reproduce(
        self,
        view: StudyView,
        initiator: TrialView,
        rng: np.random.Generator,
        ledger: _Ledger | None = None,
    ) -> Action:
        """The initiator's child: tournament, mutation, fork from the winner's checkpoint
        (``ledger``: the view's bookkeeping, if made already)."""
        if ledger is None:
            ledger = _Ledger(view, self.options.population_size)
        opponent = ledger.opponent(initiator, self.options.opponent_generations, rng)
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

    # -- workers and checkpoints --------------------------------------------------------------

    def holds_idle_workers(self, view: StudyView) -> bool:
        """True while a trial runs whose end will let a reproduction start."""
        return any(
            not t.status.is_final and end_of(t, view.max_steps) < view.max_steps
            for t in view.trials.values()
        )

    def needed_checkpoints(self, view: StudyView) -> set[int] | None:
        """Ended trials that may still be a parent (§3.7), and the fittest trial.

        A trial of generation g can be the parent of a child whose initiator is of generation
        ``g .. g + k - 1``; every future initiator is of a generation at least that of the
        youngest-generation trial that has not initiated yet (running ones included), or 0
        while generation 0 is incomplete.
        """
        if self.options.keep_last_checkpoints:
            return None
        trials = list(view.trials.values())
        ledger = _Ledger(view, self.options.population_size)
        pending = [generation(t) for t in trials if not t.status.is_final]
        pending += [generation(t) for t in ledger.uninitiated]
        if ledger.sampled < ledger.population:
            pending.append(0)
        lowest = min(pending, default=math.inf)
        k = self.options.opponent_generations
        ended = [t for t in trials if t.status.is_final and t.checkpoint_step is not None]
        needed = {
            t.trial_id
            for t in ended
            if generation(t) + k - 1 >= lowest and (t.checkpoint_step or 0) < view.max_steps
        }
        best = best_trial(ended, self.objectives(view), view)
        if best is not None:
            needed.add(best.trial_id)
        return needed
