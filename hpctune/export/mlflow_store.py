"""An MLflow file store of a study: one experiment, one run per trial (needs ``mlflow`` or
``mlflow-skinny``).

Each run has the trial's parameters (schedules in the one schedule format), every metric with its
step and report time, tags (``hpctune.trial``, ``hpctune.status``, ``hpctune.reason``, lineage),
its start and end time and a status (completed: FINISHED, failed: FAILED, other ended states:
KILLED, not ended: RUNNING). MLflow 3 keeps its file store in maintenance mode: open it with
``MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri file:OUT``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpctune.errors import UsageError
from hpctune.files import atomic_path
from hpctune.study.formatting import format_value
from hpctune.study.states import TrialStatus

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader

ALLOW = "MLFLOW_ALLOW_FILE_STORE"


def write_mlflow(study: StudyReader, out: Path) -> Path:
    """Write an MLflow file store to ``out`` (built beside it, then renamed); return ``out``.

    Raises:
        UsageError: MLflow is not installed (exit 2 with the pip command).
    """
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise UsageError(
            "--format mlflow needs MLflow: pip install mlflow-skinny (or mlflow)"
        ) from None
    out = Path(out).resolve()
    previous = os.environ.get(ALLOW)
    os.environ[ALLOW] = "true"
    try:
        with atomic_path(out) as tmp:
            _write_runs(study, MlflowClient(tracking_uri=tmp.as_uri()))
    finally:
        if previous is None:
            os.environ.pop(ALLOW, None)
        else:
            os.environ[ALLOW] = previous
    return out


def _write_runs(study: StudyReader, client: Any) -> None:
    """One experiment, one run per trial (see the module's docstring)."""
    from mlflow.entities import Metric, Param, RunTag

    experiment = client.create_experiment(str(study.spec.get("name", "hpctune")))
    table = study.metric_rows()
    for trial in study.trials:
        started = trial.history[0].time if trial.history else trial.created_time
        run = client.create_run(
            experiment,
            start_time=int(started * 1000),
            run_name=f"trial {trial.trial_id}",
            tags={"hpctune.trial": str(trial.trial_id), "hpctune.status": trial.status.value},
        )
        rows = (table["trial"] == trial.trial_id).nonzero()[0]
        metrics = [
            Metric(
                name,
                float(table[name][r]),
                int(table["time"][r] * 1000),
                int(table["step"][r]),
            )
            for name in study.metric_names()
            for r in rows
            if not math.isnan(table[name][r])
        ]
        params = [Param(k, format_value(v)[:6000]) for k, v in trial.params.items()]
        tags = [RunTag("hpctune.reason", trial.reason[:5000])] if trial.reason else []
        for key in ("parent_trial", "parent_step", "generation"):
            if getattr(trial, key) is not None:
                tags.append(RunTag(f"hpctune.{key}", str(getattr(trial, key))))
        for i in range(0, max(len(metrics), 1), 1000):  # MLflow's batch limit
            client.log_batch(
                run.info.run_id,
                metrics=metrics[i : i + 1000],
                params=params if i == 0 else [],
                tags=tags if i == 0 else [],
            )
        if trial.status.is_final:
            status = {TrialStatus.COMPLETED: "FINISHED", TrialStatus.FAILED: "FAILED"}
            ended = trial.history[-1].time if trial.history else started
            client.set_terminated(
                run.info.run_id, status.get(trial.status, "KILLED"), int(ended * 1000)
            )


__all__ = ["write_mlflow"]
