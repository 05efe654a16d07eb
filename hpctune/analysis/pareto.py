"""The Pareto front of a multi-objective study: the completed trials no other trial dominates.

A trial *dominates* another when it is at least as good in every objective (``[study]
objectives``, each with its direction) and better in at least one. The front is computed from
each completed trial's latest value of every objective; trials missing one of them are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpctune.journal.state import StudyRecord
from hpctune.study.states import TrialStatus


def non_dominated(points: np.ndarray) -> np.ndarray:
    """Indices of the rows of ``points`` (larger is better in every column) that no other row
    dominates, in row order. Equal rows do not dominate each other."""
    points = np.asarray(points, dtype=float)
    keep = []
    for i, p in enumerate(points):
        at_least = np.all(points >= p, axis=1)
        better = np.any(points > p, axis=1)
        if not np.any(at_least & better):
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)


@dataclass(frozen=True)
class FrontTrial:
    """One trial of the Pareto front.

    Attributes:
        trial_id: The trial.
        values: Its value of each objective, by metric name.
        params: Its hyperparameters.
    """

    trial_id: int
    values: Mapping[str, float]
    params: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"trial", "values", "params"}``."""
        return {"trial": self.trial_id, "values": dict(self.values), "params": dict(self.params)}


def pareto_front(
    record: StudyRecord, objectives: Sequence[Sequence[str]] | None = None
) -> list[FrontTrial]:
    """The Pareto front of the study's completed trials, by trial id.

    Args:
        record: The study's state (controller or reader).
        objectives: ``(metric, mode)`` pairs; default: the spec's ``objectives``, else the
            study's one metric (then the front is the best trial, or several that tie).
    """
    if objectives is None:
        objectives = record.spec.get("objectives") or [
            (record.spec.get("metric", ""), record.spec.get("mode", "max"))
        ]
    names = [str(o[0]) for o in objectives]
    signs = np.array([1.0 if o[1] == "max" else -1.0 for o in objectives])
    trials = []
    rows = []
    for trial in sorted(record.trials.values(), key=lambda t: t.trial_id):
        if trial.status is not TrialStatus.COMPLETED:
            continue
        values = [trial.last_metrics.get(n, math.nan) for n in names]
        if all(math.isfinite(v) for v in values):
            trials.append(trial)
            rows.append(values)
    if not rows:
        return []
    front = non_dominated(np.asarray(rows) * signs)
    return [
        FrontTrial(
            trials[i].trial_id,
            dict(zip(names, rows[i], strict=True)),
            dict(trials[i].params),
        )
        for i in front
    ]


__all__ = ["FrontTrial", "non_dominated", "pareto_front"]
