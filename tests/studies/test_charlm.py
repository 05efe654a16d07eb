"""The charlm example job and its committed trace (long curves whose ranking changes late)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.simulator.traces import Trace
from hpctune.study.states import TrialStatus
from tests.conftest import REPO, run_hpctune, write_study

CHARLM = REPO / "jobs" / "charlm"
TRACE = REPO / "benchmarks" / "traces" / "charlm.h5"
UNIFORM = math.log(97)


@pytest.mark.slow
def test_the_charlm_job_learns_and_reports_a_diverged_model_as_uniform(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=CHARLM / "train.py",
        metric="val_loss",
        mode="min",
        max_steps=2,
        num_trials=2,
        metric_bounds=[0.0, 5.0],
        space={
            "lr": [0.05, 100.0],
            "momentum": 0.9,
            "hidden": 32,
            "embedding": 8,
            "context": 4,
            "weight_decay": 1e-5,
            "batch_size": 128,
            "activation": "tanh",
        },
        generator={"name": "grid"},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(study_dir)
    assert [t.status for t in study.trials] == [TrialStatus.COMPLETED] * 2
    by_lr = {t.params["lr"]: study.curve(t.trial_id) for t in study.trials}
    learning, diverged = by_lr[0.05], by_lr[100.0]
    assert learning.steps.tolist() == [1, 2]
    # one chunk of a sane model already beats the character frequencies (3.16 nats)
    assert 1.0 < learning.values[1] < 3.16
    assert learning.values[1] < learning.values[0]
    assert diverged.values.tolist() == [UNIFORM, UNIFORM]


def test_the_committed_charlm_trace_is_complete_and_has_long_late_ranking_curves() -> None:
    trace = Trace.load(TRACE)
    assert trace.curves.shape == (128, 60)
    assert (trace.lengths() == 60).all()
    assert (trace.metric, trace.mode, trace.random_level) == ("val_loss", "min", 3.16)
    assert trace.metric_bounds == (0.0, 5.0)
    assert np.all((trace.curves > 0) & (trace.curves <= UNIFORM))
    assert np.all(trace.epoch_seconds > 0)
    assert {"lr", "momentum", "hidden", "context"} <= set(trace.hparams[0])
    best = trace.best_values()
    # a sizeable fraction never passes POP's default kill threshold (random level - 5 % of range)
    assert np.mean(best >= 3.16 - 0.25) >= 0.3
    # the configurations reaching the default target still improve near the last step, and
    # most of them reach the target late
    target = trace.default_target()
    reaching = np.flatnonzero(best <= target)
    assert len(reaching) >= 5
    assert all(np.argmin(trace.curves[i]) + 1 >= 50 for i in reaching)
    assert np.median([np.argmax(trace.curves[i] <= target) + 1 for i in reaching]) >= 25
    # the ranking at the paper's boundary (5 steps) is not the final one
    rank_at_5 = np.argsort(np.argsort(trace.curves[:, 4]))
    rank_final = np.argsort(np.argsort(trace.curves[:, -1]))
    assert np.corrcoef(rank_at_5, rank_final)[0, 1] < 0.97
    assert rank_at_5[reaching].max() >= 10
