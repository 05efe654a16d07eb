"""A study as Optuna trials: what the Optuna export writes and parameter importance reads.

Each hpctune trial becomes one Optuna ``FrozenTrial``:

- parameters: the searched columns of :mod:`hpctune.analysis.params` (a schedule's searched
  arguments as ``lr.base``; categorical choices that are not plain values as text) with their
  distributions from the search space; fixed parameters and the whole configuration (schedules
  as dicts) go to the user attributes ``fixed.<name>`` and ``hpctune.params``;
- the study metric's curve as intermediate values (step -> value, finite values only);
- the state: completed -> COMPLETE (value: the trial's value under ``[study] best``), failed ->
  FAIL, running -> RUNNING, queued or suspended -> WAITING, any other ended state (terminated by
  the policy, ended early, ...) -> PRUNED;
- start and end times from the journal; the hpctune trial id, status, reason, lineage and the
  last value of every other metric as user attributes.

Optuna is imported when a function is called (``pip install 'hpctune[report]'``).
"""

from __future__ import annotations

import datetime
import json
import math
from typing import TYPE_CHECKING, Any

from hpctune.analysis.params import Dimension, dimensions
from hpctune.journal.best import trial_value
from hpctune.journal.entities import TrialRecord
from hpctune.journal.reader import StudyReader
from hpctune.study.space import FixedParam, SearchSpace
from hpctune.study.states import TrialStatus

if TYPE_CHECKING:
    import optuna


def _distribution(dim: Dimension) -> Any:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if dim.kind == "categorical":
        return CategoricalDistribution(list(dim.choices))
    if dim.kind == "int":
        return IntDistribution(int(dim.low), int(dim.high), log=dim.log)
    return FloatDistribution(dim.low, dim.high, log=dim.log)


def _state(status: TrialStatus) -> Any:
    from optuna.trial import TrialState

    if status is TrialStatus.COMPLETED:
        return TrialState.COMPLETE
    if status is TrialStatus.FAILED:
        return TrialState.FAIL
    if status is TrialStatus.RUNNING:
        return TrialState.RUNNING
    if status.is_final:
        return TrialState.PRUNED
    return TrialState.WAITING


def _time(t: float | None) -> datetime.datetime | None:
    return None if t is None else datetime.datetime.fromtimestamp(t)


def frozen_trials(study: StudyReader) -> list[optuna.trial.FrozenTrial]:
    """The study's trials as Optuna ``FrozenTrial`` objects (see the module's docstring)."""
    import optuna
    from optuna.trial import TrialState

    space = SearchSpace.from_dict(study.spec["space"])
    dims = dimensions(space, (t.params for t in study.trials))
    fixed = {n: p for n, p in space.params.items() if isinstance(p, FixedParam)}
    out = []
    for t in study.trials:
        params = {d.name: d.value(t.params) for d in dims}
        params = {k: v for k, v in params.items() if v is not None}
        dists = {d.name: _distribution(d) for d in dims if d.name in params}
        state = _state(t.status)
        value, _ = trial_value(study.record, t)
        intermediate = {
            int(s): float(v)
            for s, v in zip(t.curve_steps, t.curve_values, strict=True)
            if math.isfinite(v)
        }
        trial = optuna.trial.create_trial(
            state=state,
            value=value if state is TrialState.COMPLETE and math.isfinite(value) else None,
            params=params,
            distributions=dists,
            user_attrs=_user_attrs(study, t, fixed),
            intermediate_values=intermediate,
        )
        trial.datetime_start = _time(_started(t)) if state is not TrialState.WAITING else None
        trial.datetime_complete = _time(_ended(t)) if state.is_finished() else None
        out.append(trial)
    return out


def _started(t: TrialRecord) -> float:
    running = [h.time for h in t.history if h.status is TrialStatus.RUNNING]
    return running[0] if running else t.created_time


def _ended(t: TrialRecord) -> float:
    return t.history[-1].time if t.history else t.created_time


def _user_attrs(study: StudyReader, t: TrialRecord, fixed: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "hpctune.trial": t.trial_id,
        "hpctune.status": t.status.value,
        "hpctune.step": t.step,
        "hpctune.params": json.dumps(t.params),
    }
    if t.reason:
        attrs["hpctune.reason"] = t.reason
    for key in ("parent_trial", "parent_step", "generation"):
        if getattr(t, key) is not None:
            attrs[f"hpctune.{key}"] = getattr(t, key)
    for name in fixed:
        if name in t.params:
            attrs[f"fixed.{name}"] = json.dumps(t.params[name])
    for name, value in t.last_metrics.items():
        if math.isfinite(value):
            attrs[f"last.{name}"] = value
    return attrs


def in_memory_study(study: StudyReader) -> optuna.Study:
    """The study's trials in an in-memory Optuna study (for Optuna's importance evaluators)."""
    import optuna

    target = optuna.create_study(direction="maximize" if study.mode == "max" else "minimize")
    target.add_trials(frozen_trials(study))
    return target


__all__ = ["frozen_trials", "in_memory_study"]
