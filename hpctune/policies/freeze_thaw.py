"""Freeze-thaw: one model of every curve decides which trial trains next, and which is new.

Swersky, Snoek and Adams, "Freeze-Thaw Bayesian Optimization" (2014), in the form of DyHPO
(Wistuba et al., NeurIPS 2022) and ifBO (Rakotoarison et al., ICML 2024): trials train in short
segments (``first`` steps for a new configuration, then ``segment`` x ``max_steps``) and are
suspended (frozen, with their checkpoint) at the end of
each; whenever a slot is free, the joint curve model (:mod:`hpctune.curves.joint`), given the
whole study so far, predicts every frozen trial and ``candidates`` configurations not tried yet
(drawn from the search space), and the slot goes to the option with the largest **expected
improvement over the incumbent per second of training**::

    score(i) = max over steps h > n_i of  EI_i(h) / ((h - n_i) * seconds per step of i)

where ``EI_i(h) = E[max(y_i(h) - y_best, 0)]`` on the normalised scale (from the predictive
quantiles), ``n_i`` the trial's steps so far (0 for a new configuration) and the seconds per
step its own measured step time (a new configuration: the study's median). A frozen trial wins
and is thawed (resumed from its checkpoint for another segment), or a candidate wins
and starts as a new trial with that configuration: search and scheduling are one decision. A
trial that has not trained yet is never compared with the incumbent on its own points alone:
the model conditions each prediction on the curves of trials with similar hyperparameters.

Queued trials (a lost worker's) resume first. A frozen trial whose expected improvement is
below ``drop`` at every later step is terminated (its checkpoint is no longer needed). The
first configurations (an empty study) are drawn at random. New configurations are the policy's
own (``Action.start`` with parameters): ``[study] num_trials`` bounds the trials it makes; a
study without a search space (none in the view) takes the generator's configurations instead.

The policy keeps no state: every decision is a function of the view and the random generator,
so a restarted controller decides as the one that ran. Its only cost is one call of the joint
model per free-slot decision (the trials that may be chosen and the candidates, at a few steps
each), milliseconds at a thousand trials (docs/policies.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hpctune.curves.families import FloatArray
from hpctune.curves.fit import normalise
from hpctune.curves.joint import (
    MAX_COORDS,
    coordinates,
    encode,
    head,
    load_weights,
    query_features,
    space_layout,
    trial_features,
)
from hpctune.curves.predict import BOUND_TOLERANCE, LEVELS
from hpctune.policies._base import (
    Action,
    Event,
    EventKind,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
    TrialView,
)
from hpctune.policies._common import require
from hpctune.policies._options import OptionError
from hpctune.study.states import TrialStatus

#: Most future steps at which each option's expected improvement is evaluated.
HORIZONS = 12
_LEVELS = np.asarray(LEVELS)
# weights of the quantile columns in E[g(Y)] (the trapezoid rule over the levels, the tails to
# 0 and 1 given to the outermost quantiles)
_EDGES = np.concatenate([[0.0], (_LEVELS[1:] + _LEVELS[:-1]) / 2, [1.0]])
_WEIGHTS = np.diff(_EDGES)


@dataclass(frozen=True)
class FreezeThawOptions:
    """Options of :class:`FreezeThawPolicy` (defaults chosen leave-one-workload-out, see
    docs/policies.md).

    Attributes:
        segment: Share of ``max_steps`` a trial trains per segment (rounded, at least 1 step).
        first: Steps of a new configuration's first segment (a cheap first look, as ASHA's
            grace period).
        lookahead: Score an option by its best ratio over every later step (``True``), or at
            the end of its next segment only (DyHPO's myopic acquisition).
        candidates: New configurations drawn from the search space and scored per decision.
        drop: A frozen trial whose expected improvement (normalised scale) is below this at
            every later step is terminated.
    """

    segment: float = 0.1
    first: int = 1
    lookahead: bool = True
    candidates: int = 16
    drop: float = 1e-5


def expected_improvement(quantiles: FloatArray, incumbent: float) -> FloatArray:
    """``E[max(Y - incumbent, 0)]`` from predictive quantiles at :data:`~.predict.LEVELS`
    (last axis), on the normalised scale."""
    gain = np.maximum(quantiles - incumbent, 0.0)
    out: FloatArray = gain @ _WEIGHTS
    return out


def step_seconds(trial: TrialView) -> float:
    """The trial's seconds per step: the lower quartile of the gaps between its reports (a
    gap across a suspension is longer; NaN with fewer than two reports)."""
    if len(trial.times) < 2:
        return math.nan
    gaps = np.diff(np.asarray(trial.times, dtype=float)) / np.maximum(
        np.diff(np.asarray(trial.steps, dtype=float)), 1.0
    )
    gaps = gaps[np.isfinite(gaps) & (gaps > 0)]
    return float(np.quantile(gaps, 0.25)) if len(gaps) else math.nan


class FreezeThawPolicy(Policy):
    """Thaw the frozen trial or start the new configuration with the most expected improvement
    per second (see the module); segments of ``segment`` x ``max_steps`` steps, suspended at
    their end."""

    name: ClassVar[str] = "freeze-thaw"
    traits: ClassVar[PolicyTraits] = PolicyTraits(boundary_decisions=False, wants_boundaries=False)
    Options = FreezeThawOptions

    def __init__(self, context: StudyContext, options: FreezeThawOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or FreezeThawOptions()
        o = self.options
        if not 0 < o.segment <= 1:
            raise OptionError("segment", f"must be in (0, 1], but got {o.segment!r}")
        require("candidates", o.candidates, 0)
        if not o.drop >= 0:
            raise OptionError("drop", f"must be >= 0, but got {o.drop!r}")
        self.increment = max(1, round(context.max_steps * o.segment))
        require("first", o.first, 1)
        self.first = min(o.first, context.max_steps)
        self.weights = load_weights()  # here, not in a decision: loading reads a file
        # trial id -> (its view, normalised curve, coordinates, seconds per step)
        self._memo: dict[int, tuple[TrialView, FloatArray, FloatArray, float]] = {}
        self._space: Any = None
        self._space_layout: Any = None

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill free slots on SLOT_FREE (queued, then the best of frozen and new); else none."""
        if event.kind is not EventKind.SLOT_FREE or event.free_slots <= 0:
            return PolicyDecision()
        free = event.free_slots
        actions: list[Action] = []
        for trial in view.with_status(TrialStatus.QUEUED)[:free]:
            actions.append(Action.resume(trial.trial_id, until_step=self._until(view, trial)))
        free -= len(actions)
        frozen = view.with_status(TrialStatus.SUSPENDED)
        if free <= 0:
            return PolicyDecision.of(actions)
        if view.space is None:  # no space to draw from: the generator's order, frozen after
            new = free if view.trials_remaining is None else min(free, view.trials_remaining)
            actions += [Action.start(until_step=self.first) for _ in range(new)]
            for trial in frozen[: free - new]:
                actions.append(Action.resume(trial.trial_id, until_step=self._until(view, trial)))
            return PolicyDecision.of(actions)
        # every new trial is the policy's own configuration, so the generator's count stays at
        # 0 and ``trials_remaining`` is the study's num_trials: the trials made so far count
        new_left = free
        if view.trials_remaining is not None:
            new_left = min(free, max(view.trials_remaining - len(view.trials), 0))
        configs = [
            view.space.sample(rng) for _ in range(self.options.candidates if new_left else 0)
        ]
        if not view.trials:  # nothing to learn from yet: the first configurations at random
            configs = [view.space.sample(rng) for _ in range(new_left)]
            return PolicyDecision.of(
                actions
                + [
                    Action.start(params=c, until_step=self.first, reason="freeze-thaw: first")
                    for c in configs
                ]
            )
        scores, dead = self._scores(view, frozen, configs)
        dropped = {t.trial_id for t in dead}
        for trial in dead:
            actions.append(
                Action.terminate(trial.trial_id, reason="freeze-thaw: no expected improvement")
            )
        order = np.argsort(-scores, kind="stable")
        starts = 0
        for index in order:
            if free == 0:
                break
            if index < len(frozen):
                trial = frozen[index]
                if trial.trial_id in dropped:
                    continue
                actions.append(
                    Action.resume(
                        trial.trial_id,
                        until_step=self._until(view, trial),
                        priority=float(scores[index]),
                        reason=f"freeze-thaw: thawed, score {scores[index]:.3g}",
                    )
                )
            else:
                if starts >= new_left:
                    continue
                starts += 1
                actions.append(
                    Action.start(
                        params=configs[index - len(frozen)],
                        until_step=self.first,
                        priority=float(scores[index]),
                        reason=f"freeze-thaw: new configuration, score {scores[index]:.3g}",
                    )
                )
            free -= 1
        return PolicyDecision.of(actions)

    def _until(self, view: StudyView, trial: TrialView) -> int:
        """Another segment past the trial's progress: its last report or checkpoint, whichever
        is later (a training function that checkpoints less often than the segments end
        retrains from its last checkpoint, and still moves on)."""
        done = max(int(trial.step), int(trial.checkpoint_step or 0))
        return min(done + self.increment, trial.end_step or view.max_steps)

    def _layout(self, view: StudyView) -> Any:
        """:func:`~hpctune.curves.joint.space_layout` of the view's space, once per space."""
        if view.space is None:
            return None
        if self._space is not view.space:
            self._space, self._space_layout = view.space, space_layout(view.space)
        return self._space_layout

    def _trial_row(
        self, view: StudyView, trial: TrialView
    ) -> tuple[FloatArray, FloatArray, float]:
        """The trial's normalised curve, coordinates and step time, remembered while its view is
        the same object (a cache derived from views alone: nothing to journal)."""
        known = self._memo.get(trial.trial_id)
        if known is not None and known[0] is trial:
            return known[1], known[2], known[3]
        values = np.asarray(trial.values, dtype=float)
        values = values[np.isfinite(values)][: view.max_steps]
        u = np.clip(normalise(values, view.bounds, view.mode), 0.0, 1.0) if values.size else values
        coords = coordinates(view.space, [trial.params], self._layout(view))[0]
        seconds = step_seconds(trial)
        self._memo[trial.trial_id] = (trial, u, coords, seconds)
        return u, coords, seconds

    def _scores(
        self, view: StudyView, frozen: list[TrialView], configs: Sequence[Mapping[str, Any]]
    ) -> tuple[FloatArray, list[TrialView]]:
        """The score of each frozen trial and then each candidate; the frozen trials to drop."""
        trials = list(view.trials.values())
        x_max = view.max_steps
        rows_of = [self._trial_row(view, t) for t in trials]
        total = len(trials) + len(configs)
        width = max([len(r[0]) for r in rows_of] + [1])
        u = np.zeros((total, width))
        n = np.zeros(total, dtype=int)
        coords = np.full((total, MAX_COORDS), np.nan)
        for i, (curve, coord, _) in enumerate(rows_of):
            u[i, : curve.size] = curve
            n[i] = curve.size
            coords[i] = coord
        if configs:
            coords[len(trials) :] = coordinates(view.space, configs, self._layout(view))
        index = {t.trial_id: i for i, t in enumerate(trials)}
        rows = [index[t.trial_id] for t in frozen] + list(range(len(trials), total))
        if not rows:
            return np.zeros(0), []
        feats = trial_features(u, n, x_max, coords)
        rep = encode(self.weights, feats, np.zeros(total, dtype=int))
        rows_a = np.asarray(rows)
        best = [float(r[0].max()) for r in rows_of if r[0].size]
        incumbent = min(max(best), 1.0 - BOUND_TOLERANCE) if best else 0.0
        done = n[rows_a]
        m = np.stack([self._horizons(int(d), x_max) for d in done])
        base = np.where(done > 0, u[rows_a, np.maximum(done - 1, 0)], 0.0)
        q = np.clip(head(self.weights, rep[rows_a], query_features(done, x_max, m), base), 0, 1)
        q = np.maximum.accumulate(q, axis=-1)
        ei = expected_improvement(q, incumbent)  # (options, horizons)
        finite = [r[2] for r in rows_of if math.isfinite(r[2])]
        typical = float(np.median(finite)) if finite else 1.0
        per_step = np.array(
            [
                rows_of[r][2] if r < len(trials) and math.isfinite(rows_of[r][2]) else typical
                for r in rows
            ]
        )
        cost = (m - done[:, None]) * per_step[:, None]
        ratios = ei / np.maximum(cost, 1e-9)
        score = ratios.max(axis=1) if self.options.lookahead else ratios[:, 0]
        dead = [t for i, t in enumerate(frozen) if ei[i].max() < self.options.drop]
        return score, dead

    def _horizons(self, done: int, x_max: int) -> np.ndarray:
        """Up to :data:`HORIZONS` later steps: the next segment's end (``first`` for a new
        configuration), then every ``increment`` steps, and ``x_max`` (repeated to a fixed
        width)."""
        start = self.first if done == 0 else done + self.increment
        steps = np.arange(start, x_max + 1, self.increment)
        if steps.size == 0 or steps[-1] != x_max:
            steps = np.append(steps, x_max)
        if steps.size > HORIZONS:
            pick = np.unique(np.round(np.linspace(0, steps.size - 1, HORIZONS)).astype(int))
            steps = steps[pick]
        out = np.full(HORIZONS, steps[-1])
        out[: steps.size] = steps
        return out
