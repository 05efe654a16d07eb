"""The digits-cnn example job (noisy labels) and its committed trace (long curves that turn back
and a ranking that changes late)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.simulator.traces import Trace
from hpctune.study.states import TrialStatus
from tests.conftest import REPO, run_hpctune, write_study

JOB = REPO / "jobs" / "digits-cnn"
TRACE = REPO / "benchmarks" / "traces" / "digits-cnn.h5"


@pytest.mark.slow
def test_the_digits_cnn_job_learns_despite_wrong_labels(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=JOB / "train.py",
        metric="val_accuracy",
        mode="max",
        max_steps=3,
        num_trials=2,
        metric_bounds=[0.0, 1.0],
        space={
            "label_noise": [0.0, 0.3],
            "lr": 0.1,
            "momentum": 0.9,
            "weight_decay": 1e-4,
            "batch_size": 32,
            "channels": 8,
            "hidden": 64,
            "dropout": 0.1,
        },
        generator={"name": "grid"},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(study_dir)
    assert [t.status for t in study.trials] == [TrialStatus.COMPLETED] * 2
    for trial in study.trials:
        curve = study.curve(trial.trial_id)
        assert curve.steps.tolist() == [1, 2, 3]
        # three epochs of a sane CNN beat chance (0.1) by far, with or without wrong labels
        assert curve.values[-1] > 0.5
        losses = study.curve(trial.trial_id, metric="val_loss").values
        assert np.all(np.isfinite(losses))


def test_the_committed_digits_cnn_trace_has_long_curves_that_turn_back_and_rank_late() -> None:
    trace = Trace.load(TRACE)
    assert trace.curves.shape == (200, 60)
    assert (trace.lengths() == 60).all()
    assert (trace.metric, trace.mode, trace.random_level) == ("val_accuracy", "max", 0.1)
    assert trace.metric_bounds == (0.0, 1.0)
    assert np.all((trace.curves >= 0) & (trace.curves <= 1))
    assert np.all(trace.epoch_seconds > 0)
    assert {"lr", "label_noise", "channels"} <= set(trace.hparams[0])
    curves = trace.curves
    best = curves.max(axis=1)
    # over-fitting to the wrong labels: many curves end well below their own best
    turned = (best - curves[:, -1] > 0.03) & (best > 0.5)
    assert turned.sum() >= 20
    # long curves: the configurations reaching the default target get there late
    target = trace.default_target()
    reaching = np.flatnonzero(best >= target)
    assert len(reaching) >= 5
    assert np.median([np.argmax(curves[i] >= target) + 1 for i in reaching]) >= 15
    # the ranking at a typical boundary (step 5) is far from the final one
    rank_at_5 = np.argsort(np.argsort(-curves[:, 4]))
    rank_final = np.argsort(np.argsort(-curves[:, -1]))
    assert np.corrcoef(rank_at_5, rank_final)[0, 1] < 0.9
    assert rank_at_5[reaching].max() >= 20
