"""POP: HyperDrive's Promising / Opportunistic / Poor scheduling (Rasley et al., Middleware 2017).

At each evaluation boundary ``b`` (§5.3, "OnIterationFinish"):

1. **Poor** (§2.1, §5.3): a trial whose best value has not passed the kill threshold (domain
   knowledge: slightly better than random, e.g. 15 % for a 10-class task) is terminated; so is a
   trial whose confidence ``p`` is below ``p_poor`` (0.05).
2. **Confidence** (§3.1.1): from the trial's learning-curve prediction, ``p_i`` is the
   probability of reaching ``y_target`` within ``M_i = (T_max - T_pass) / Epoch_i`` more epochs
   (the sum of the first-reach masses ``p_m``), and ``ERT_i`` the expected remaining time.
3. **Split** (§3.2): for each candidate ``p`` (the tail of the active trials' ``p_i``),
   ``N_satisfying(p)`` counts trials with ``p_i >= p`` and ``ERT_i <= T_max - T_pass``;
   ``S_desired(p) = k * N_satisfying(p)``, ``S_deserved(p) = S * p``; ``S_promising`` is the
   largest ``min(S_desired, S_deserved)`` (its ``p`` is the threshold). Promising trials (the
   ``S_promising`` best above the threshold) get dedicated slots with priority ``p``.
4. **Opportunistic** trials share the other slots round robin: at its boundary an opportunistic
   trial is suspended (keeping its checkpoint) when other work waits, "and a new job started"
   (§5.3); it resumes later, after new configurations, oldest-suspended first.

Without a target (``target`` unset), the "dynamic target" of §9 is used: the target starts one
``dynamic_step`` above the best value seen (or the random level) and is raised by
``dynamic_step`` whenever a trial reaches it. Without ``t_max`` the time budget is unbounded:
``M_i`` is the trial's remaining steps.

Predictions come from :mod:`hpctune.curves` (Domhan et al.'s model) and may lag one boundary
behind the curve (fits run beside training); trials without a prediction yet are
opportunistic. Every quantity here is in the metric's own direction (``mode``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

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
from hpctune.policies._common import best_value, require
from hpctune.study.boundaries import at_boundary
from hpctune.study.states import TrialStatus

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hpctune.curves.predict import CurvePrediction

ACTIVE = (TrialStatus.RUNNING, TrialStatus.SUSPENDED, TrialStatus.QUEUED)
_WAITING = (TrialStatus.QUEUED, TrialStatus.SUSPENDED)


@dataclass(frozen=True)
class PopOptions:
    """Options of POP; defaults from HyperDrive §5.3 (b = 10, p < 0.05 is poor, k = 1)."""

    target: float | None = None
    t_max: float | None = None
    boundary: int = 10
    kill_threshold: float | None = None
    kill_margin: float = 0.05
    p_poor: float = 0.05
    k: int = 1
    dynamic_step: float = 0.01


@dataclass(frozen=True)
class Assessment:
    """What POP knows of one trial at a decision: its confidence and expected remaining time."""

    trial_id: int
    p: float  # NaN without a known prediction
    ert: float  # seconds; inf when unknown
    epoch_seconds: float


@dataclass(frozen=True)
class Split:
    """The classification of the active trials (§3.2)."""

    threshold: float
    promising: tuple[int, ...]  # by decreasing p
    s_promising: int

    @property
    def promising_set(self) -> frozenset[int]:
        """The promising trials as a set."""
        return frozenset(self.promising)


def epoch_seconds(trial: TrialView) -> float:
    """The trial's measured seconds per step: the median gap between consecutive steps' reports.

    Gaps across a suspension are not consecutive steps, so they do not count. NaN if unknown.
    """
    steps, times = np.asarray(trial.steps), np.asarray(trial.times)
    if len(steps) < 2:
        return math.nan
    consecutive = np.diff(steps) == 1
    gaps = np.diff(times)[consecutive]
    gaps = gaps[gaps > 0]
    return float(np.median(gaps)) if len(gaps) else math.nan


def split_slots(assessments: list[Assessment], slots: int, k: int, time_left: float) -> Split:
    """S_promising = max over p of min(k * N_satisfying(p), S * p) (HyperDrive §3.2).

    ``N_satisfying(p)`` counts trials with ``p_i >= p`` whose expected remaining time fits the
    time left. Ties go to the higher ``p`` (fewer, surer promising trials).
    """
    known = sorted(
        (a for a in assessments if not math.isnan(a.p) and a.p > 0 and a.ert <= time_left),
        key=lambda a: (-a.p, a.trial_id),
    )
    best = Split(threshold=math.inf, promising=(), s_promising=0)
    best_effective = 0.0
    for index, candidate in enumerate(known):
        satisfying = index + 1  # trials with p_i >= candidate.p (sorted by p)
        effective = min(k * satisfying, slots * candidate.p)
        if effective > best_effective + 1e-12:
            best_effective = effective
            count = math.floor(effective / k + 1e-9)
            best = Split(
                threshold=candidate.p,
                promising=tuple(a.trial_id for a in known[: max(count, 0)]),
                s_promising=math.floor(effective + 1e-9),
            )
    return best


class PopPolicy(Policy):
    """HyperDrive's POP (see the module docstring for the algorithm and its sources)."""

    name: ClassVar[str] = "pop"
    traits: ClassVar[PolicyTraits] = PolicyTraits(wants_predictions=True)
    Options = PopOptions

    def __init__(self, context: StudyContext, options: PopOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or PopOptions()
        o = self.options
        require("boundary", o.boundary, 1)
        if not 0 < o.p_poor < 1:
            raise OptionError("p_poor", f"must be between 0 and 1, but got {o.p_poor}")
        require("k", o.k, 1)
        if o.t_max is not None and o.t_max <= 0:
            raise OptionError("t_max", f"must be > 0 seconds, but got {o.t_max}")
        if o.dynamic_step <= 0:
            raise OptionError("dynamic_step", f"must be > 0, but got {o.dynamic_step}")
        self.target: float | None = o.target
        self.last_split: Split = Split(math.inf, (), 0)
        # results computed from one frozen view, kept while the same view is asked again (one
        # instant's events share a view): the best value, the split, each trial's epoch time
        self._best_memo: tuple[StudyView, float | None] | None = None
        self._trial_best: dict[int, tuple[TrialView, float | None]] = {}
        self._split_memo: tuple[StudyView, float | None, Split] | None = None
        self._seconds_memo: dict[int, tuple[TrialView, float]] = {}
        # each trial's assessment, kept while its view, prediction, the target and the time left
        # are the same; the number of queued or suspended trials of the last view
        self._assess_memo: dict[int, tuple[tuple[Any, ...], Assessment]] = {}
        self._waiting_memo: tuple[StudyView, int] | None = None

    # -- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The (dynamic) target and the last split, for the journal and the simulator's plots."""
        return {
            "target": self.target,
            "s_promising": self.last_split.s_promising,
            "promising": list(self.last_split.promising),
            "threshold": None
            if math.isinf(self.last_split.threshold)
            else self.last_split.threshold,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.target = state.get("target", self.options.target)
        threshold = state.get("threshold")
        self.last_split = Split(
            math.inf if threshold is None else float(threshold),
            tuple(int(t) for t in state.get("promising", [])),
            int(state.get("s_promising", 0)),
        )

    def wants_fit(self, step: int) -> bool:
        """Fit at evaluation boundaries only."""
        return at_boundary(step, self.options.boundary)

    # -- decisions -----------------------------------------------------------------------------

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Classify at boundaries and on new predictions; fill slots by class."""
        self._update_target(view)
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self._fill(view, event.free_slots))
        if event.trial_id is None or event.trial_id not in view.trials:
            return PolicyDecision()
        trial = view.trials[event.trial_id]
        if event.kind is EventKind.PREDICTION:
            return PolicyDecision.of(self._prune_on_prediction(view, trial))
        if event.kind is not EventKind.BOUNDARY or event.step is None:
            return PolicyDecision()
        if (
            not at_boundary(event.step, self.options.boundary)
            or trial.status is not TrialStatus.RUNNING
        ):
            return PolicyDecision()
        return PolicyDecision.of(self._at_boundary(view, trial))

    def _at_boundary(self, view: StudyView, trial: TrialView) -> list[Action]:
        poor = self._poor_reason(view, trial)
        if poor:
            return [Action.terminate(trial.trial_id, reason=poor)]
        split = self._split(view)
        assessment = self._assess(view, trial)
        p = 0.0 if math.isnan(assessment.p) else assessment.p
        if trial.trial_id in split.promising_set:
            return [Action.continue_(trial.trial_id, priority=p, reason="promising")]
        if self._work_waiting(view, exclude=trial):
            return [Action.suspend(trial.trial_id, priority=p, reason="opportunistic")]
        return [Action.continue_(trial.trial_id, priority=p, reason="opportunistic, no one waits")]

    def _prune_on_prediction(self, view: StudyView, trial: TrialView) -> list[Action]:
        if trial.status not in ACTIVE:
            return []
        poor = self._poor_reason(view, trial)
        return [Action.terminate(trial.trial_id, reason=poor)] if poor else []

    def _fill(self, view: StudyView, free: int) -> list[Action]:
        """Promising trials first (by p), then queued ones, new configurations, and suspended
        opportunistic trials, oldest suspension first (round robin)."""
        split = self._split(view)
        running = {t.trial_id for t in view.with_status(TrialStatus.RUNNING)}
        promising_waiting = [
            view.trials[t]
            for t in split.promising
            if t not in running and view.trials[t].status in ACTIVE
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
        waiting = heapq.nsmallest(  # sorted(...)[:free], without sorting them all
            max(free, 0),
            (
                t
                for t in view.with_status(TrialStatus.SUSPENDED)
                if t.trial_id not in split.promising_set
            ),
            key=lambda t: (t.times[-1] if len(t.times) else -math.inf, t.trial_id),
        )
        for trial in waiting:
            actions.append(Action.resume(trial.trial_id, reason="opportunistic turn"))
        return actions

    # -- classification ------------------------------------------------------------------------

    def _split(self, view: StudyView) -> Split:
        memo = self._split_memo
        if memo is not None and memo[0] is view and memo[1] == self.target:
            self.last_split = memo[2]
            return memo[2]
        assessments = [self._assess(view, t) for t in view.trials.values() if t.status in ACTIVE]
        self.last_split = split_slots(
            assessments, view.total_slots, self.options.k, self._time_left(view)
        )
        self._split_memo = (view, self.target, self.last_split)
        return self.last_split

    def _epoch_seconds(self, trial: TrialView) -> float:
        """:func:`epoch_seconds`, remembered for as long as the trial's view is the same."""
        memo = self._seconds_memo.get(trial.trial_id)
        if memo is not None and memo[0] is trial:
            return memo[1]
        seconds = epoch_seconds(trial)
        self._seconds_memo[trial.trial_id] = (trial, seconds)
        return seconds

    def _time_left(self, view: StudyView) -> float:
        return math.inf if self.options.t_max is None else max(self.options.t_max - view.now, 0.0)

    def _assess(self, view: StudyView, trial: TrialView) -> Assessment:
        """The trial's assessment, remembered while what it depends on is the same."""
        prediction = view.predictions.get(trial.trial_id)
        target, time_left = self.target, self._time_left(view)
        memo = self._assess_memo.get(trial.trial_id)
        if memo is not None:
            (known, predicted, known_target, known_left), assessment = memo
            if (
                known is trial
                and predicted is prediction
                and known_target == target
                and known_left == time_left
            ):
                return assessment
        assessment = self._assess_now(view, trial, prediction)
        self._assess_memo[trial.trial_id] = ((trial, prediction, target, time_left), assessment)
        return assessment

    def _assess_now(
        self, view: StudyView, trial: TrialView, prediction: CurvePrediction | None
    ) -> Assessment:
        seconds = self._epoch_seconds(trial)
        target = self.target
        if prediction is None or prediction.unknown or target is None or math.isnan(seconds):
            return Assessment(trial.trial_id, math.nan, math.inf, seconds)
        time_left = self._time_left(view)
        if math.isinf(time_left):  # no T_max: every step left fits
            time_left = seconds * (prediction.horizon + 1)
        p = float(prediction.confidence(target, seconds, time_left))
        ert = float(prediction.expected_remaining_time(target, seconds, time_left))
        return Assessment(trial.trial_id, p, ert if math.isfinite(ert) else math.inf, seconds)

    def _poor_reason(self, view: StudyView, trial: TrialView) -> str:
        """Why a trial is poor (empty if it is not)."""
        kill = self._kill_threshold(view)
        values = np.asarray(trial.values, dtype=float)
        values = values[np.isfinite(values)]
        if kill is not None and len(values):
            best = float(values.max() if view.mode == "max" else values.min())
            if view.sign * best <= view.sign * kill:
                return f"poor: best {best:.4g} has not passed the kill threshold {kill:.4g}"
        p = self._assess(view, trial).p
        if not math.isnan(p) and p < self.options.p_poor:
            return f"poor: p = {p:.3f} < {self.options.p_poor} of reaching {self.target:.4g}"
        return ""

    def _kill_threshold(self, view: StudyView) -> float | None:
        if self.options.kill_threshold is not None:
            return self.options.kill_threshold
        if view.random_level is None:
            return None
        margin = self.options.kill_margin * (view.bounds[1] - view.bounds[0])
        return view.random_level + view.sign * margin

    def _work_waiting(self, view: StudyView, exclude: TrialView) -> bool:
        """True when another trial than ``exclude`` could use the slot: a new configuration, or
        a queued or suspended trial (round robin among opportunistic trials)."""
        if view.trials_remaining is None or view.trials_remaining > 0:
            return True
        memo = self._waiting_memo
        if memo is None or memo[0] is not view:  # counted once per view
            memo = (view, sum(t.status in _WAITING for t in view.trials.values()))
            self._waiting_memo = memo
        return memo[1] - (exclude.status in _WAITING) > 0

    def _update_target(self, view: StudyView) -> None:
        """The dynamic target (§9): one step above the best value seen, raised when reached."""
        if self.options.target is not None:
            self.target = self.options.target
            return
        step = self.options.dynamic_step * (view.bounds[1] - view.bounds[0])
        if self._best_memo is None or self._best_memo[0] is not view:
            self._best_memo = (view, best_value(view, self._trial_best))
        best = self._best_memo[1]
        if best is None:
            base = (
                view.random_level
                if view.random_level is not None
                else (view.bounds[0] if view.mode == "max" else view.bounds[1])
            )
            self.target = self.target if self.target is not None else base + view.sign * step
            return
        if self.target is None or view.sign * best >= view.sign * self.target:
            self.target = best + view.sign * step
