"""EarlyTerm: Domhan et al.'s predictive termination, as HyperDrive's baseline (§5.3).

The Default policy, plus: at every evaluation boundary ``b`` (30 epochs, as Domhan et al.) a
trial whose learning-curve prediction gives ``P(y(max_steps) >= y_best) < delta`` (0.05) is
terminated, ``y_best`` being the best value any trial has reached so far (in the metric's own
direction). The check also runs when a new prediction arrives, since fits run beside training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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
from hpctune.policies._common import best_value, require
from hpctune.study.boundaries import at_boundary
from hpctune.study.states import TrialStatus


@dataclass(frozen=True)
class EarlyTermOptions:
    """Options of EarlyTerm; defaults from HyperDrive §5.3 and Domhan et al. (b 30, delta 0.05)."""

    boundary: int = 30
    delta: float = 0.05


class EarlyTermPolicy(Policy):
    """Run trials as Default does; terminate those unlikely to beat the best (see module)."""

    name: ClassVar[str] = "earlyterm"
    traits: ClassVar[PolicyTraits] = PolicyTraits(wants_predictions=True)
    Options = EarlyTermOptions

    def __init__(self, context: StudyContext, options: EarlyTermOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or EarlyTermOptions()
        require("boundary", self.options.boundary, 1)
        if not 0 < self.options.delta < 1:
            raise OptionError("delta", f"must be between 0 and 1, but got {self.options.delta}")
        # the best value of one frozen view (one instant's events share a view)
        self._best_memo: tuple[StudyView, float | None] | None = None
        self._trial_best: dict[int, tuple[TrialView, float | None]] = {}

    def wants_fit(self, step: int) -> bool:
        """Fit at evaluation boundaries only."""
        return at_boundary(step, self.options.boundary)

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill slots as Default; at boundaries and on predictions apply the criterion."""
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self.fill_slots(view, event.free_slots))
        if event.trial_id is None or event.trial_id not in view.trials:
            return PolicyDecision()
        trial = view.trials[event.trial_id]
        if trial.status is not TrialStatus.RUNNING:
            return PolicyDecision()
        judged = (
            event.kind is EventKind.BOUNDARY
            and event.step is not None
            and at_boundary(event.step, self.options.boundary)
        )
        if not (judged or event.kind is EventKind.PREDICTION):
            return PolicyDecision()
        prediction = view.predictions.get(trial.trial_id)
        if self._best_memo is None or self._best_memo[0] is not view:
            self._best_memo = (view, best_value(view, self._trial_best))
        best = self._best_memo[1]
        if prediction is None or prediction.unknown or best is None:
            return PolicyDecision()
        p_val = prediction.prob_final_at_least(best)
        if not math.isnan(p_val) and p_val < self.options.delta:
            return PolicyDecision.of(
                [
                    Action.terminate(
                        trial.trial_id,
                        reason=f"P(final >= best {best:.4g}) = {p_val:.3f} < {self.options.delta}",
                    )
                ]
            )
        return PolicyDecision()
