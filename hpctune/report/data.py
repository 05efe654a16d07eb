"""Everything the study report shows, as one JSON-able dict read from the journal.

Each key is one section of the page (``docs/cli.md#hpctune-report``); a section the study has
nothing for (no PBT lineage, no stage tree, no POP pools) is ``None`` and the page leaves it out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from hpctune.analysis.lineage import schedule
from hpctune.analysis.params import dimensions
from hpctune.analysis.summary import best_trial, policy_lines, stage_steps, study_line
from hpctune.analysis.timeline import best_so_far, time_to_best
from hpctune.journal import state as st
from hpctune.journal.best import describe_best, peak_value, trial_value
from hpctune.journal.delta import policy_states
from hpctune.journal.state import decode_data
from hpctune.journal.usage import study_usage
from hpctune.stagetree.pieces import describe_config
from hpctune.stagetree.plots import stage_rows
from hpctune.stagetree.status import status_counts, study_stage_tree
from hpctune.study.formatting import format_duration, format_params, format_value
from hpctune.study.space import SearchSpace
from hpctune.study.states import TrialStatus

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader

REPORT_VERSION = 1
MAX_PREDICTIONS = 40  # curves whose latest prediction is drawn (the best trials first)


def _r(value: float) -> float | None:
    """A value rounded to 6 significant digits for the page, ``None`` if not finite."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.6g}")


def report_data(study: StudyReader, *, importance: bool = True) -> dict[str, Any]:
    """The report's content (see the module docstring)."""
    space = SearchSpace.from_dict(study.spec["space"])
    dims = dimensions(space, (t.params for t in study.trials))
    return {
        "version": REPORT_VERSION,
        "overview": _overview(study),
        "states": [s.value for s in TrialStatus],
        "trials": _trials(study, dims),
        "dimensions": [
            {
                "name": d.name,
                "kind": d.kind,
                "low": _r(d.low),
                "high": _r(d.high),
                "log": d.log,
                "choices": [format_value(c) for c in d.choices],
            }
            for d in dims
        ],
        "best_so_far": _best_so_far(study),
        "predictions": _predictions(study),
        "pools": _pools(study),
        "lineage": _lineage(study),
        "stages": _stages(study),
        "importance": _importance(study) if importance else None,
        "failures": _failures(study),
    }


def _overview(study: StudyReader) -> dict[str, Any]:
    record = study.record
    usage = study_usage(record)
    best = describe_best(record, study.directory)
    gpus = usage.gpus_per_worker
    hours = usage.gpu_hours if gpus else usage.cpu_hours
    out: dict[str, Any] = {
        "name": study.spec.get("name"),
        "directory": str(study.directory),
        "state": record.state.value,
        "reason": record.reason,
        "line": study_line(record),
        "metric": study.metric,
        "mode": study.mode,
        "max_steps": study.spec.get("max_steps"),
        "step_unit": study.spec.get("step_unit", "step"),
        "policy": study.spec.get("policy", {}).get("name"),
        "generator": study.spec.get("generator", {}).get("name"),
        "best_rule": study.spec.get("best", "peak"),
        "counts": record.counts(),
        "hours": _r(hours),
        "hours_unit": "GPU-h" if gpus else "CPU-h",
        "workers": usage.workers,
        "training_share": _r(1.0 - usage.not_training_share) if usage.allocated_s else None,
        "elapsed": format_duration(
            (record.ended_time or record.started_time or 0) - (record.started_time or 0)
        )
        if record.started_time
        else "",
        "policy_lines": policy_lines(record),
        "best": None,
        "best_reported": None,
    }
    reported = [(*peak_value(record, t), t) for t in record.trials.values()]
    reported = [r for r in reported if not math.isnan(r[0])]
    if reported and best is None:
        sign = 1.0 if study.mode == "max" else -1.0
        value, step, trial = max(reported, key=lambda r: (sign * r[0], -r[2].trial_id))
        out["best_reported"] = {
            "trial": trial.trial_id,
            "value": _r(value),
            "step": step,
            "status": trial.status.value,
        }
    if best is not None:
        seconds = time_to_best(record, best.value)
        out["best"] = {
            "trial": best.trial_id,
            "value": _r(best.value),
            "step": best.step,
            "params": {k: format_value(v) for k, v in best.params.items()},
            "checkpoint": None if best.checkpoint is None else str(best.checkpoint),
            "time_to_best": None if math.isnan(seconds) else format_duration(seconds),
        }
    return out


def _trials(study: StudyReader, dims: list[Any]) -> list[dict[str, Any]]:
    record = study.record
    out = []
    for t in study.trials:
        value, value_step = trial_value(record, t)
        peak, peak_step = peak_value(record, t)
        out.append(
            {
                "id": t.trial_id,
                "status": t.status.value,
                "step": t.step,
                "value": _r(value),
                "value_step": value_step,
                "peak": _r(peak),
                "peak_step": peak_step,
                "steps": [int(s) for s in t.curve_steps],
                "values": [_r(v) for v in t.curve_values],
                "params": format_params(t.params),
                "dims": [_dim_value(d.value(t.params)) for d in dims],
                "parent": t.parent_trial,
                "parent_step": t.parent_step,
                "generation": t.generation,
                "reason": t.reason,
            }
        )
    return out


def _dim_value(value: Any) -> Any:
    if isinstance(value, float):
        return _r(value)
    if value is None or isinstance(value, int | str | bool):
        return value
    return format_value(value)


def _best_so_far(study: StudyReader) -> dict[str, Any]:
    curve = best_so_far(study.record)
    return {
        "seconds": [_r(x) for x in curve.seconds],
        "hours": [_r(x) for x in curve.hours],
        "values": [_r(x) for x in curve.values],
        "trials": [int(x) for x in curve.trials],
        "unit": curve.unit,
    }


def _predictions(study: StudyReader) -> list[dict[str, Any]] | None:
    """The latest learning-curve prediction of the trials that had one (the best first)."""
    # imported here: the curve fits pull in emcee and SciPy (1.6 s), only for predicted studies
    from hpctune.curves.service import read_result

    refs = study.record.predictions
    if not refs:
        return None
    record = study.record
    order = sorted(
        (r for r in refs.values() if not r.unknown and r.trial_id in record.trials),
        key=lambda r: (
            -(trial_value(record, record.trials[r.trial_id])[0] or 0.0)
            * (1 if study.mode == "max" else -1)
        ),
    )
    out = []
    for ref in order[:MAX_PREDICTIONS]:
        result = read_result(study.directory / ref.path)
        if result is None:
            continue
        prediction, _ = result
        q = prediction.quantiles((0.05, 0.5, 0.95))
        out.append(
            {
                "trial": ref.trial_id,
                "n": ref.n,
                "steps": [int(s) for s in prediction.epochs],
                "low": [_r(v) for v in q[:, 0]],
                "median": [_r(v) for v in q[:, 1]],
                "high": [_r(v) for v in q[:, 2]],
            }
        )
    return out or None


def _pools(study: StudyReader) -> dict[str, Any] | None:
    """POP's promising and opportunistic slots over time, from its journaled policy states."""
    log = study.journal.table("log")
    records = (
        (float(t), str(k), decode_data(str(d)))
        for k, t, d in zip(log["kind"], log["time"], log["data"], strict=True)
        if k in (st.POLICY_STATE, st.POLICY_DELTA)
    )
    states = policy_states(records)
    points = [(t, s) for t, s in states if isinstance(s, dict) and "s_promising" in s]
    if not points:
        return None
    start = study.record.started_time or study.record.created_time
    slots = int(study.spec.get("resources", {}).get("slots", 1) or 1)
    return {
        "slots": slots,
        "seconds": [_r(t - start) for t, _ in points],
        "promising_slots": [int(s["s_promising"]) for _, s in points],
        "promising_trials": [len(s.get("promising", [])) for _, s in points],
        "target": [_r(s["target"]) if s.get("target") is not None else None for _, s in points],
    }


def _lineage(study: StudyReader) -> dict[str, Any] | None:
    """The PBT population (each trial with its parent) and the schedule of the best lineage."""
    record = study.record
    if not any(t.generation is not None for t in record.trials.values()):
        return None

    best = best_trial(record)
    chain = []
    if best is not None:
        chain = [
            {"trial": s.trial_id, "start": s.start_step, "end": s.end_step,
             "params": {k: _dim_value(v) for k, v in s.params.items()}}
            for s in schedule(record, best.trial_id)
        ]  # fmt: skip
    generations = max(t.generation or 0 for t in record.trials.values()) + 1
    return {"best": None if best is None else best.trial_id, "schedule": chain,
            "generations": generations}  # fmt: skip


def _stages(study: StudyReader) -> dict[str, Any] | None:
    """The stage tree with each stage's status, trials served and the metric at its end."""
    record = study.record
    if not study.spec.get("stages", {}).get("enabled"):
        return None

    tree, statuses = study_stage_tree(record, int(study.spec.get("max_steps", 0)))
    rows = stage_rows(tree)
    trained, requested = stage_steps(record)
    values: dict[tuple[int, int], list[float]] = defaultdict(list)
    for t in record.trials.values():
        for s, v in zip(t.curve_steps, t.curve_values, strict=True):
            values[(t.trial_id, s)].append(v)
    served = [len(s.trials) for s in tree.stages]
    for stage in reversed(tree.stages):  # children have larger ids than their parents
        if stage.parent is not None:
            served[stage.parent] += served[stage.id]
    stages = []
    for stage in tree.stages:
        parent = None if stage.parent is None else tree.stages[stage.parent]
        before = dict(parent.config) if parent is not None else {}
        changed = {n for n, p in stage.config if before.get(n) != p} if parent else None
        at_end = [
            values[(tid, stage.end)][0] for tid in stage.trials if values.get((tid, stage.end))
        ]
        stages.append(
            {
                "id": stage.id,
                "start": stage.start,
                "end": stage.end,
                "parent": stage.parent,
                "row": rows[stage.id],
                "trials": list(stage.trials),
                "served": served[stage.id],
                "status": statuses[stage.id],
                "label": describe_config(stage.config, changed) if changed != set() else "",
                "value": _r(float(np.mean(at_end))) if at_end else None,
            }
        )
    return {
        "stages": stages,
        "counts": status_counts(statuses),
        "trained": trained,
        "requested": requested,
    }


def _importance(study: StudyReader) -> dict[str, Any] | None:
    # imported here: fANOVA pulls in Optuna (0.6 s), only for studies with enough trials
    from hpctune.analysis.importance import parameter_importance

    return parameter_importance(study)


def _failures(study: StudyReader) -> list[dict[str, Any]]:
    """Trials that ended without completing, with their reasons (failed first)."""
    out = []
    for t in study.trials:
        if not t.status.is_final or t.status is TrialStatus.COMPLETED:
            continue
        error = t.error.strip().splitlines()[-1] if t.error.strip() else ""
        out.append(
            {
                "trial": t.trial_id,
                "status": t.status.value,
                "step": t.step,
                "reason": t.reason,
                "error": error,
            }
        )
    out.sort(key=lambda f: (f["status"] != TrialStatus.FAILED.value, f["trial"]))
    return out


__all__ = ["REPORT_VERSION", "report_data"]
