"""Hybrid: ASHA's cheap first screen, then rungs and a stopping rule read from the curve model.

Issue 17's candidate for a recommended policy. It is stop-based, as ASHA (nothing is
suspended, so no slot is held for a trial that waits and no checkpoint is moved), and fills
every free slot with queued trials, then new configurations. Two rules may terminate a running
trial:

1. **Rungs** (ASHA's, Li et al. MLSys 2020, Algorithm 2; :mod:`.asha`): the first time a trial
   reaches a rung (``grace_period * reduction_factor**k`` steps) its score is compared with the
   scores recorded there so far, and the trial is stopped when it is below their
   ``(1 - 1/reduction_factor)`` percentile. Below ``model_from`` (the first rung, step 1 by
   default) the score is the best value so far, as ASHA's cheap first screen. From
   ``model_from`` on the rung is judged when the curve prediction fitted at that rung arrives,
   and the score is the best of the trial's best value and the ``optimism`` quantile (99 %) of
   its predicted values over the remaining steps: a late learner whose curve may still rise is
   kept (digits-cnn), a trial whose curve has flattened is ranked by what it has. A trial is
   only stopped when its score is below the cutoff by more than ``noise_guard`` times its own
   noise (the spread of its curve's second differences): rungs do not rank differences the
   measurement cannot resolve (diabetes, 89 validation patients). The guard is dropped at a
   rung once the study's noise, measured on the curves past the second rung where they no
   longer fall steeply, is below ``noise_share`` of the spread of the values recorded there:
   the second differences of a trial's first steps mostly measure how fast its curve falls,
   and a guard built on them keeps trials that a smooth metric can rank (digits loss).
2. **Curve rule** (Domhan et al.'s criterion, HyperDrive §5.3's EarlyTerm): every
   ``check_every`` steps from ``model_from`` on, when the trial's prediction arrives, a trial
   whose final value beats the best value seen so far with probability below ``delta`` is
   stopped. This ends the survivors of a rung that will not catch up before the next rung.

Unknown predictions stop nothing (the rung then uses the best value).

With ``adaptive`` the policy measures, from the study itself, whether early rankings hold. The
first ``probes`` trials to reach the first rung pass it whatever their value, so that the
ranking at the next rung is seen over trials the first rung did not select; a probe the first
rung would have stopped is stopped at the second, once its value there is recorded, and is
left out of that rung's cutoff. The rank (Spearman) correlation of the probes' values at the
first two rungs is the study's reliability. Once ``min_pairs`` probes have reached the second
rung and the correlation is at least ``reliable``, the rungs after the first are judged as
ASHA's, when the trial reaches them: best value, no optimism quantile, no noise guard.
Otherwise (and until then) they are judged as above. Measured (docs/policies.md), ``adaptive``
is not faster than ``hybrid`` or ASHA on benchmarks/traces: it is off by default. The measured
figures, and where ASHA is as good, are in docs/policies.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sortedcontainers import SortedList

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
from hpctune.policies._common import best_until, best_value, geometric_rungs, require
from hpctune.policies._order import percentile_of_sorted
from hpctune.study.states import TrialStatus


@dataclass(frozen=True)
class HybridOptions:
    """Options of :class:`HybridPolicy` (defaults measured on benchmarks/traces at S = 8).

    Attributes:
        grace_period: Steps before the first rung (ASHA's).
        reduction_factor: η: rungs are η times apart and keep the top 1/η.
        rungs: How many of the rungs judge trials (the lowest ones); 0: every rung.
        model_from: The first step at which predictions are used (the curve model needs 3
            points): rungs from it on are judged with the prediction, and the curve rule starts.
        check_every: The curve rule applies at multiples of this many steps.
        delta: The curve rule stops a trial with P(final >= best so far) below it.
        optimism: Rungs from ``model_from`` on score a trial by this quantile of its predicted
            values over the remaining steps (or its best value if better).
        noise_guard: A rung stops a trial only when its score is below the cutoff by more than
            this many times the trial's noise (:func:`noise`).
        noise_share: The guard applies at a rung only while the study's noise
            (:meth:`HybridPolicy.study_noise`) is unknown or at least this share of the
            spread (interquartile range) of the values recorded at the rung; 0: always.
        noise_steps: How many steps past the second rung measure the study's noise
            (:meth:`HybridPolicy.noise_window`).
        adaptive: Judge the rungs after the first as ASHA's where the rankings of the probes at
            the first two rungs agree (:meth:`HybridPolicy.reliability` at least ``reliable``).
        probes: With ``adaptive``: how many trials (the first to reach the first rung) pass it
            unjudged, the unselected sample the reliability is measured on.
        min_pairs: Probes recorded at both of the first two rungs needed for the reliability.
        reliable: The rank correlation from which the rungs are judged as ASHA's.
    """

    grace_period: int = 1
    reduction_factor: int = 4
    rungs: int = 0
    model_from: int = 3
    check_every: int = 5
    delta: float = 0.05
    optimism: float = 0.99
    noise_guard: float = 2.0
    noise_share: float = 0.1
    noise_steps: int = 4
    adaptive: bool = False
    probes: int = 12
    min_pairs: int = 8
    reliable: float = 0.8


def rank_correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of ``x`` and ``y`` (ties share their mean rank).

    NaN with fewer than 2 pairs or when either side is constant.
    """
    if len(x) < 2:
        return math.nan
    rx, ry = _ranks(np.asarray(x, dtype=float)), _ranks(np.asarray(y, dtype=float))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum()) / denominator if denominator > 0 else math.nan


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x``, ties given their mean rank."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    mean_rank = np.cumsum(counts) - (counts - 1) / 2
    return mean_rank[inverse.reshape(-1)]


def noise(trial: TrialView, step: int) -> float:
    """The noise of a trial's curve up to ``step``, in the metric's units.

    The standard deviation of the second differences over sqrt(6): white noise of variance v
    gives second differences of variance 6 v, and a smooth trend adds little. 0 with fewer than
    4 values.
    """
    return curve_noise(trial.values[trial.steps <= step]) or 0.0


def curve_noise(values: np.ndarray) -> float | None:
    """The median absolute second difference of the finite ``values`` over sqrt(6) (see
    :func:`noise`); None with fewer than 4 of them."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    if len(finite) < 4:
        return None
    return float(np.median(np.abs(np.diff(finite, 2))) / math.sqrt(6))


class HybridPolicy(Policy):
    """ASHA's rungs scored by the curve model, and EarlyTerm's rule between them (see module).

    Use it where ASHA's rungs may drop the configurations that matter: noisy metrics and late
    learners (on benchmarks/traces it reaches the target in every order, where ASHA misses it
    on diabetes and digits-cnn). Where early rankings are reliable ASHA is as fast or faster.
    """

    name: ClassVar[str] = "hybrid"
    traits: ClassVar[PolicyTraits] = PolicyTraits(wants_predictions=True)
    Options = HybridOptions

    def __init__(self, context: StudyContext, options: HybridOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or HybridOptions()
        o = self.options
        require("grace_period", o.grace_period, 1)
        require("reduction_factor", o.reduction_factor, 2)
        require("rungs", o.rungs, 0)
        require("model_from", o.model_from, 3)
        require("check_every", o.check_every, 1)
        if not 0 < o.delta < 1:
            raise OptionError("delta", f"must be between 0 and 1, but got {o.delta}")
        if not 0.001 <= o.optimism <= 0.999:
            raise OptionError("optimism", f"must be in [0.001, 0.999], but got {o.optimism}")
        if not (math.isfinite(o.noise_guard) and o.noise_guard >= 0):
            raise OptionError("noise_guard", f"must be >= 0, but got {o.noise_guard}")
        if not (math.isfinite(o.noise_share) and o.noise_share >= 0):
            raise OptionError("noise_share", f"must be >= 0, but got {o.noise_share}")
        require("noise_steps", o.noise_steps, 4)
        require("probes", o.probes, 0)
        require("min_pairs", o.min_pairs, 3)
        if not -1 <= o.reliable <= 1:
            raise OptionError("reliable", f"must be in [-1, 1], but got {o.reliable}")
        rungs = geometric_rungs(o.grace_period, o.reduction_factor, context.max_steps)
        self.milestones = rungs[: o.rungs] if o.rungs else rungs
        # the signed scores (larger is better) recorded at each rung, by trial, and sorted
        self.recorded: dict[int, dict[int, float]] = {}
        self._sorted: dict[int, SortedList] = {}
        # with ``adaptive``: the signed best value of each trial recorded at each rung, and
        # those values sorted (ASHA's cutoff)
        self.values: dict[int, dict[int, float]] = {}
        self._sorted_values: dict[int, SortedList] = {}
        # the probes the first rung would have stopped (stopped at the second rung)
        self.held: set[int] = set()
        self._best_memo: tuple[StudyView, float | None] | None = None
        self._trial_best: dict[int, tuple[TrialView, float | None]] = {}
        # with ``noise_share``: each trial's noise over the noise window (None: it ended
        # before the window's end), and each trial's signed best value at each rung; both
        # read from the trials' curves, so a restored policy rebuilds them
        self._window_noise: dict[int, float | None] = {}
        self._rung_values: dict[int, dict[int, float]] = {}

    # -- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The rungs and the scores recorded at each, and with ``adaptive`` the values
        (JSON-able)."""
        state: dict[str, Any] = {
            "milestones": list(self.milestones),
            "recorded": [
                [m, [[t, v] for t, v in rec.items()]] for m, rec in self.recorded.items()
            ],
        }
        if self.options.adaptive:
            state["values"] = [
                [m, [[t, v] for t, v in rec.items()]] for m, rec in self.values.items()
            ]
            state["held"] = sorted(self.held)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        if not state:
            return
        self.milestones = [int(m) for m in state["milestones"]]
        self.recorded = {
            int(m): {int(t): float(v) for t, v in rec} for m, rec in state["recorded"]
        }
        self._sorted = {m: SortedList(rec.values()) for m, rec in self.recorded.items()}
        self.values = {
            int(m): {int(t): float(v) for t, v in rec} for m, rec in state.get("values", [])
        }
        self.held = {int(t) for t in state.get("held", [])}
        first = self.milestones[0] if self.milestones else 0
        self._sorted_values = {
            m: SortedList(v for t, v in rec.items() if m == first or t not in self.held)
            for m, rec in self.values.items()
        }

    def wants_fit(self, step: int) -> bool:
        """Fit where the curve rule applies and at the rungs judged with a prediction."""
        o = self.options
        if step < o.model_from:
            return False
        return step % o.check_every == 0 or self._is_rung(step)

    def _is_rung(self, step: int) -> bool:
        """Whether ``step`` is one of the judging rungs (whatever the study's ``max_steps``)."""
        o = self.options
        milestone, k = o.grace_period, 0
        while milestone < step and (o.rungs == 0 or k < o.rungs - 1):
            milestone *= o.reduction_factor
            k += 1
        return milestone == step

    # -- decisions -----------------------------------------------------------------------------

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill slots as ASHA; judge a trial at its rungs and by its curve's prediction."""
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self.fill_slots(view, event.free_slots))
        if event.trial_id is None or event.trial_id not in view.trials or event.step is None:
            return PolicyDecision()
        trial = view.trials[event.trial_id]
        if trial.status is not TrialStatus.RUNNING:
            return PolicyDecision()
        if event.kind is EventKind.PREDICTION:
            reason = self._rung_reason(view, trial, event.step, predicted=True)
            if not reason and event.step % self.options.check_every == 0:
                reason = self._curve_reason(view, trial)
            return PolicyDecision.of(
                [Action.terminate(trial.trial_id, reason=reason)] if reason else []
            )
        if event.kind is not EventKind.BOUNDARY:
            return PolicyDecision()
        adaptive = self._held_reason(view, trial, event.step)
        if adaptive is None:
            adaptive = self._asha_reason(view, trial, event.step)
        reason = (
            self._rung_reason(view, trial, event.step, predicted=False)
            if adaptive is None
            else adaptive
        )
        if reason:
            return PolicyDecision.of([Action.terminate(trial.trial_id, reason=reason)])
        return PolicyDecision.of([Action.continue_(trial.trial_id)])

    def _rung_reason(self, view: StudyView, trial: TrialView, step: int, predicted: bool) -> str:
        """Judge the trial if ``step`` is a rung it was not judged at; why it stops there.

        Rungs below ``model_from`` are judged at the BOUNDARY event, the others when the
        prediction fitted at that rung arrives (``predicted``). Empty if the trial goes on.
        """
        if step not in self.milestones or (step >= self.options.model_from) != predicted:
            return ""
        recorded = self.recorded.setdefault(step, {})
        if trial.trial_id in recorded or trial.trial_id in self.held:
            return ""
        score = self._score(view, trial, step, predicted)
        if math.isnan(score):
            return ""
        values = self._sorted.setdefault(step, SortedList())
        cutoff = (
            percentile_of_sorted(values, (1 - 1 / self.options.reduction_factor) * 100)
            if len(values)
            else math.nan
        )
        recorded[trial.trial_id] = score
        values.add(score)
        if self.options.adaptive:
            self._record_value(step, trial.trial_id, best_until(trial, step, view.sign))
        if math.isnan(cutoff):
            return ""
        if score >= cutoff or score >= cutoff - self._guard(view, trial, step):
            return ""
        first = step == self.milestones[0] and len(self.milestones) > 1
        if self.options.adaptive and first and len(recorded) <= self.options.probes:
            self.held.add(trial.trial_id)  # a probe: on to the second rung
            return ""
        what = "optimistic prediction" if predicted else view.metric
        return (
            f"hybrid: {what} {view.sign * score:.6g} at rung {step} below the cutoff "
            f"{view.sign * cutoff:.6g}"
        )

    def _asha_reason(self, view: StudyView, trial: TrialView, step: int) -> str | None:
        """With ``adaptive``, judge the trial at the rung ``step`` as ASHA's if the rankings
        are reliable (:meth:`reliability`); why it stops (empty if it goes on). ``None``:
        not judged here (not adaptive, not a rung, judged before, or rankings not reliable).
        """
        if not self.options.adaptive or step not in self.milestones[1:]:
            return None
        if trial.trial_id in self.recorded.get(step, {}) or not (trial.steps == step).any():
            return None
        rho = self.reliability()
        if math.isnan(rho) or rho < self.options.reliable:
            return None
        value = best_until(trial, step, view.sign)
        if not math.isfinite(value):
            return None
        sorted_values = self._sorted_values.setdefault(step, SortedList())
        cutoff = (
            percentile_of_sorted(sorted_values, (1 - 1 / self.options.reduction_factor) * 100)
            if len(sorted_values)
            else math.nan
        )
        self.recorded.setdefault(step, {})[trial.trial_id] = value
        self._sorted.setdefault(step, SortedList()).add(value)
        self._record_value(step, trial.trial_id, value)
        if math.isnan(cutoff) or value >= cutoff:
            return ""
        return (
            f"hybrid (as ASHA, rank correlation {rho:.2f}): {view.metric} "
            f"{view.sign * value:.6g} at rung {step} below the cutoff {view.sign * cutoff:.6g}"
        )

    def _held_reason(self, view: StudyView, trial: TrialView, step: int) -> str | None:
        """Stop a held probe (:attr:`held`) from the second rung on, its value there
        recorded for :meth:`reliability` only. ``None``: not a held probe there."""
        if trial.trial_id not in self.held or len(self.milestones) < 2:
            return None
        if step < self.milestones[1]:
            return None
        if step == self.milestones[1]:
            value = best_until(trial, step, view.sign)
            if math.isfinite(value):
                self.values.setdefault(step, {}).setdefault(trial.trial_id, value)
        return f"hybrid: probe below the cutoff of rung {self.milestones[0]}, measured"

    def _guard(self, view: StudyView, trial: TrialView, step: int) -> float:
        """How far below the cutoff a trial's score must be to stop it at the rung ``step``:
        ``noise_guard`` times its noise, or 0 where the study's noise is known to be below
        ``noise_share`` of the spread of the rung's values."""
        o = self.options
        guard = o.noise_guard * noise(trial, step)
        if guard == 0 or o.noise_share == 0:
            return guard
        spread = self._rung_spread(view, step)
        study = self.study_noise(view)
        if math.isfinite(spread) and math.isfinite(study) and study < o.noise_share * spread:
            return 0.0
        return guard

    def noise_window(self) -> tuple[int, int]:
        """The steps ``(low, low + noise_steps]`` whose values measure the study's noise:
        past the second rung (the first if there is only one), where curves have left their
        steep start."""
        low = self.milestones[1] if len(self.milestones) > 1 else self.milestones[0]
        return low, low + self.options.noise_steps

    def study_noise(self, view: StudyView) -> float:
        """The median noise (:func:`noise`) of the trials' curves over :meth:`noise_window`,
        over the trials that reached its end; NaN before 3 of them have.

        A property of the metric's measurement (the validation set) rather than of a trial,
        measured where the curves' curvature no longer inflates it (the second differences of
        the first steps mostly measure how fast a curve falls).
        """
        low, high = self.noise_window()
        for trial_id, trial in view.trials.items():
            if trial_id in self._window_noise:
                continue
            if len(trial.steps) and trial.steps[-1] >= high:
                window = (trial.steps > low) & (trial.steps <= high)
                self._window_noise[trial_id] = curve_noise(trial.values[window])
            elif trial.status.is_final:
                self._window_noise[trial_id] = None
        measured = [v for v in self._window_noise.values() if v is not None]
        return float(np.median(measured)) if len(measured) >= 3 else math.nan

    def _rung_spread(self, view: StudyView, step: int) -> float:
        """The interquartile range of the signed best values up to ``step`` of the trials
        recorded at the rung ``step``; NaN with fewer than 4 of them."""
        values = self._rung_values.setdefault(step, {})
        for trial_id in self.recorded.get(step, {}):
            if trial_id not in values and trial_id in view.trials:
                value = best_until(view.trials[trial_id], step, view.sign)
                if math.isfinite(value):
                    values[trial_id] = value
        if len(values) < 4:
            return math.nan
        q75, q25 = np.percentile(list(values.values()), [75, 25])
        return float(q75 - q25)

    def reliability(self) -> float:
        """The rank correlation of the probes' values at the first two rungs, over the probes
        recorded at both (NaN with fewer than ``min_pairs`` of them or fewer than two rungs)."""
        if len(self.milestones) < 2:
            return math.nan
        first = self.values.get(self.milestones[0], {})
        second = self.values.get(self.milestones[1], {})
        probes = list(self.recorded.get(self.milestones[0], {}))[: self.options.probes]
        both = [t for t in probes if t in first and t in second]
        if len(both) < self.options.min_pairs:
            return math.nan
        return rank_correlation(
            np.array([first[t] for t in both]), np.array([second[t] for t in both])
        )

    def _record_value(self, step: int, trial_id: int, value: float) -> None:
        """Record a trial's signed best value at the rung ``step`` (``adaptive``)."""
        if trial_id in self.values.setdefault(step, {}) or not math.isfinite(value):
            return
        self.values[step][trial_id] = value
        self._sorted_values.setdefault(step, SortedList()).add(value)

    def _score(self, view: StudyView, trial: TrialView, step: int, predicted: bool) -> float:
        """The signed score of a trial at the rung ``step`` (NaN: none).

        Its best value up to the rung; with ``predicted`` and a known prediction, the best of
        that and the ``optimism`` quantile of its predicted values over the remaining steps.
        """
        if not (trial.steps == step).any():
            return math.nan
        value = best_until(trial, step, view.sign)
        if not math.isfinite(value):
            return math.nan
        prediction = view.predictions.get(trial.trial_id)
        if not predicted or prediction is None or prediction.unknown or not prediction.horizon:
            return value
        upper = view.sign * prediction.quantiles((self.options.optimism,))[:, 0]
        upper = upper[np.isfinite(upper)]
        return max(value, float(upper.max())) if len(upper) else value

    def _curve_reason(self, view: StudyView, trial: TrialView) -> str:
        """Why the curve rule stops the trial (empty if it does not)."""
        prediction = view.predictions.get(trial.trial_id)
        if prediction is None or prediction.unknown:
            return ""
        if self._best_memo is None or self._best_memo[0] is not view:
            self._best_memo = (view, best_value(view, self._trial_best))
        best = self._best_memo[1]
        if best is None:
            return ""
        p = prediction.prob_final_at_least(best)
        if math.isnan(p) or p >= self.options.delta:
            return ""
        return f"hybrid: P(final >= best {best:.4g}) = {p:.3f} < {self.options.delta}"
