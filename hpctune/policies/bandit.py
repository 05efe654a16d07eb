"""HyperDrive's Bandit baseline: TuPAQ's action elimination at evaluation boundaries.

Rasley et al., "HyperDrive" (Middleware 2017), §5.3, after TuPAQ (Sparks et al., SoCC 2015) and
Even-Dar et al.'s action elimination: the policy extends Default; at every evaluation boundary
``b`` a trial goes on only if ``jobBest * (1 + epsilon) > globalBest``, where ``jobBest`` is its
best value so far and ``globalBest`` the best of any trial; else it is terminated.
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
    StudyContext,
    StudyView,
)
from hpctune.policies._common import best_until, require
from hpctune.study.boundaries import at_boundary


@dataclass(frozen=True)
class BanditOptions:
    """Options of :class:`BanditPolicy` (HyperDrive §5.3, from TuPAQ).

    Attributes:
        epsilon: The tolerance ε (0.5).
        boundary: The evaluation boundary ``b`` in steps (10 for supervised learning); a
            multiple of the study's ``boundary``.
    """

    epsilon: float = 0.5
    boundary: int = 10


def eliminated(job_best: float, global_best: float, epsilon: float, mode: str) -> bool:
    """TuPAQ's test: True when the trial must stop.

    ``max``: ``job_best * (1 + ε) <= global_best`` (HyperDrive's rule, read literally).
    ``min`` (a loss): the mirror image, ``job_best >= global_best * (1 + ε)``: a trial stops when
    its best loss is more than (1 + ε) times the best loss. Both assume values >= 0, as
    accuracies and losses are.
    """
    if math.isnan(job_best) or math.isnan(global_best):
        return False
    if mode == "max":
        return job_best * (1.0 + epsilon) <= global_best
    return job_best >= global_best * (1.0 + epsilon)


class BanditPolicy(Policy):
    """HyperDrive's Bandit policy (§5.3): Default plus action elimination every ``b`` steps.

    Use it as the paper's baseline, or as a simple model-free stopper when the metric's scale
    makes a relative tolerance meaningful (accuracies, losses).
    """

    name: ClassVar[str] = "bandit"
    Options = BanditOptions

    def __init__(self, context: StudyContext, options: BanditOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or BanditOptions()
        require("boundary", self.options.boundary, 1)
        if not self.options.epsilon >= 0:
            raise OptionError("epsilon", f"must be >= 0, but got {self.options.epsilon!r}")

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill slots on SLOT_FREE; at a boundary that is a multiple of ``b``, eliminate."""
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self.fill_slots(view, event.free_slots))
        if event.kind is not EventKind.BOUNDARY or event.trial_id is None:
            return PolicyDecision()
        trial = view.trials.get(event.trial_id)
        if trial is None:
            return PolicyDecision()
        step = int(event.step if event.step is not None else trial.step)
        tid = trial.trial_id
        if not at_boundary(step, self.options.boundary) or step >= view.max_steps:
            return PolicyDecision.of([Action.continue_(tid)])
        sign = view.sign
        job_best = sign * best_until(trial, step, sign)
        bests = [best_until(t, view.max_steps, sign) for t in view.trials.values()]
        finite = [b for b in bests if not math.isnan(b)]
        global_best = sign * max(finite) if finite else math.nan
        if eliminated(job_best, global_best, self.options.epsilon, view.mode):
            reason = (
                f"bandit: best {view.metric} {job_best:.6g} by step {step} is not within "
                f"(1 + {self.options.epsilon:g}) of the global best {global_best:.6g}"
            )
            return PolicyDecision.of([Action.terminate(tid, reason=reason)])
        return PolicyDecision.of([Action.continue_(tid)])
