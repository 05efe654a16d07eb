"""A study over time: the best value reported so far against wall-clock time and GPU-hours.

The best-so-far curve takes every report of the study metric (valid rows, any trial, in any
state) in time order and keeps the best value up to each; its x-axes are seconds since the
study started and the allocated GPU-hours (CPU-hours when the workers hold no GPU) used by then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hpctune.journal.best import sign
from hpctune.journal.state import StudyRecord
from hpctune.journal.usage import allocated_by


@dataclass(frozen=True)
class BestSoFar:
    """The best value reported so far, at each report that improved it.

    Attributes:
        seconds: Seconds since the study started.
        hours: Allocated GPU-hours (or CPU-hours, see ``unit``) used by then.
        values: The best value so far.
        trials: The trial that reported it.
        unit: ``"GPU-h"`` or ``"CPU-h"``.
    """

    seconds: np.ndarray
    hours: np.ndarray
    values: np.ndarray
    trials: np.ndarray
    unit: str


def best_so_far(record: StudyRecord) -> BestSoFar:
    """The best-so-far curve of a study (points where the best improved)."""
    times, values, trials = [], [], []
    for trial in record.trials.values():
        times.extend(trial.curve_times)
        values.extend(trial.curve_values)
        trials.extend([trial.trial_id] * len(trial.curve_times))
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    ids = np.asarray(trials, dtype=np.int64)
    keep = np.isfinite(v) & np.isfinite(t)
    t, v, ids = t[keep], v[keep], ids[keep]
    order = np.argsort(t, kind="stable")
    t, v, ids = t[order], v[order], ids[order]
    s = sign(record)
    running = s * np.maximum.accumulate(s * v) if len(v) else v
    improved = np.ones(len(v), dtype=bool)
    improved[1:] = running[1:] != running[:-1]
    t, running, ids = t[improved], running[improved], ids[improved]
    start = record.started_time or record.created_time
    resources = record.spec.get("resources", {})
    gpus = int(resources.get("gpus_per_worker", 0) or 0)
    per = gpus if gpus else int(resources.get("cpus_per_worker", 1) or 1)
    hours = allocated_by(record, t) * per / 3600.0
    return BestSoFar(t - start, hours, running, ids, "GPU-h" if gpus else "CPU-h")


def time_to_best(record: StudyRecord, value: float) -> float:
    """Seconds from the study's start to the first report at least as good as ``value``."""
    curve = best_so_far(record)
    s = sign(record)
    reached = np.nonzero(s * curve.values >= s * value - 1e-12)[0]
    return float(curve.seconds[reached[0]]) if len(reached) else math.nan


__all__ = ["BestSoFar", "best_so_far", "time_to_best"]
