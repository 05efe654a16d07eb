"""Small helpers shared by the policies: reading curves at a step, checking options."""

from __future__ import annotations

import math

import numpy as np

from hpctune.policies._base import StudyView, TrialView
from hpctune.policies._options import OptionError


def value_at(trial: TrialView, step: int) -> float:
    """The metric of ``trial`` at the last step ``<= step`` that has a value; NaN if none."""
    if not len(trial.steps):
        return math.nan
    i = int(np.searchsorted(trial.steps, step, side="right")) - 1
    return float(trial.values[i]) if i >= 0 else math.nan


def best_until(trial: TrialView, step: int, sign: float) -> float:
    """The best signed value (``sign * metric``, larger is better) up to ``step``; NaN if none."""
    if not len(trial.steps):
        return math.nan
    n = int(np.searchsorted(trial.steps, step, side="right"))
    values = sign * np.asarray(trial.values[:n], dtype=float)
    values = values[~np.isnan(values)]
    return float(values.max()) if len(values) else math.nan


def best_value(
    view: StudyView, memo: dict[int, tuple[TrialView, float | None]] | None = None
) -> float | None:
    """The best value any trial has reported, in the metric's direction (``None`` before any).

    ``memo`` (trial id -> (its view, its best)) keeps each trial's best while its view is the
    same object, so a policy asking at every decision only looks at trials that changed.
    """
    best: float | None = None
    sign = view.sign
    for trial in view.trials.values():
        known = memo.get(trial.trial_id) if memo is not None else None
        if known is not None and known[0] is trial:
            value = known[1]
        else:
            values = np.asarray(trial.values, dtype=float)
            values = values[np.isfinite(values)]
            value = (
                float(values.max() if view.mode == "max" else values.min())
                if len(values)
                else None
            )
            if memo is not None:
                memo[trial.trial_id] = (trial, value)
        if value is not None and (best is None or sign * value > sign * best):
            best = value
    return best


def last_step(trial: TrialView) -> int:
    """The last step with a metric value (0 if none)."""
    return int(trial.steps[-1]) if len(trial.steps) else 0


def require(key: str, value: float, low: float, what: str = "") -> None:
    """Raise :class:`OptionError` unless ``value >= low``."""
    if value < low:
        raise OptionError(key, f"must be >= {low}{what}, but got {value!r}")


def geometric_rungs(grace: int, eta: int, limit: int) -> list[int]:
    """The milestones ``grace * eta**k`` below ``limit`` (Ray's ``_Bracket`` rungs, ascending)."""
    rungs: list[int] = []
    milestone = grace
    while milestone < limit:
        rungs.append(milestone)
        milestone *= eta
    return rungs
