"""A study as Optuna trials: an Optuna journal file (``optuna-dashboard FILE`` opens it), and
the in-memory Optuna study the report's parameter importance uses.

Each hpctune trial becomes one Optuna trial, written with Optuna's own storage API:

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
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpctune.analysis.best import trial_value
from hpctune.analysis.params import Dimension, dimensions
from hpctune.study.space import FixedParam, SearchSpace
from hpctune.wire.files import atomic_path
from hpctune.wire.states import TrialStatus

if TYPE_CHECKING:
    import optuna

    from hpctune.journal.reader import Study
    from hpctune.journal.state import TrialRecord


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


def frozen_trials(study: Study) -> list[optuna.trial.FrozenTrial]:
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


def _user_attrs(study: Study, t: TrialRecord, fixed: dict[str, Any]) -> dict[str, Any]:
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


def write_optuna_journal(study: Study, out: Path) -> Path:
    """Write an Optuna journal file that ``optuna-dashboard out`` and
    ``optuna.load_study(storage=JournalStorage(JournalFileBackend(out)))`` open.

    Written under a temporary name and renamed, so a failed export leaves nothing.
    """
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    out = Path(out)
    with atomic_path(out) as tmp:
        try:
            storage = JournalStorage(JournalFileBackend(str(tmp)))
            target = optuna.create_study(
                storage=storage,
                study_name=str(study.spec.get("name", "hpctune")),
                direction="maximize" if study.mode == "max" else "minimize",
            )
            target.set_user_attr("hpctune.metric", study.metric)
            target.set_user_attr("hpctune.directory", str(study.directory))
            target.set_user_attr("hpctune.analysis.best", str(study.spec.get("best", "peak")))
            target.add_trials(frozen_trials(study))
        finally:
            Path(f"{tmp}.lock").unlink(missing_ok=True)
    return out


def in_memory_study(study: Study) -> optuna.Study:
    """The study's trials in an in-memory Optuna study (for Optuna's importance evaluators)."""
    import optuna

    target = optuna.create_study(direction="maximize" if study.mode == "max" else "minimize")
    target.add_trials(frozen_trials(study))
    return target


__all__ = ["frozen_trials", "in_memory_study", "write_optuna_journal"]
