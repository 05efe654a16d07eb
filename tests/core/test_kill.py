"""The kill test: SIGKILL the controller (and sometimes its workers) at random moments of a real
local study, `hpctune resume` each time, and compare with an uninterrupted run.

At the end every trial is complete exactly once, no metric row is lost or duplicated, and every
curve equals the uninterrupted run's (the digits example is deterministic for a seed).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.study.states import SegmentStatus, StudyState, TrialStatus
from tests.conftest import DIGITS, kill_and_resume, run_hpctune, start_hpctune, write_study

MAX_STEPS = 50
NUM_TRIALS = 6
SPACE = {
    "hidden": {"type": "int", "low": 16, "high": 64},
    "layers": 1,
    "dropout": {"type": "float", "low": 0.0, "high": 0.3},
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "batch_size": 64,
    "activation": ["relu", "tanh"],
    "lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True},
}


def _spec(folder: Path, directory: str) -> Path:
    return write_study(
        folder,
        train=DIGITS / "train.py",
        metric="val_accuracy",
        max_steps=MAX_STEPS,
        num_trials=NUM_TRIALS,
        seed=3,
        directory=directory,
        space=SPACE,
    )


@pytest.mark.slow
def test_controller_killed_at_random_moments(tmp_path: Path, cleanup_studies: list[Path]) -> None:
    reference_dir = tmp_path / "reference"
    killed_dir = tmp_path / "killed"
    cleanup_studies += [reference_dir, killed_dir]
    run_hpctune("launch", str(_spec(tmp_path / "a", str(reference_dir))), "--local", check=True)
    reference = open_study(reference_dir)

    rng = random.Random(int(os.environ.get("HPCTUNE_KILL_SEED", "20261122")))
    spec = _spec(tmp_path / "b", str(killed_dir))
    process = start_hpctune("launch", str(spec), "--local")
    process, kills = kill_and_resume(process, killed_dir, rng, rounds=5, reports=(10, 60))
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    assert kills >= 3, "the study ended before the controller could be killed three times"

    study = open_study(killed_dir)
    assert study.record.state is StudyState.FINISHED
    # a controller killed during its start-up (before its first commit) leaves no record
    assert 2 <= study.record.controller_starts <= kills + 1
    assert len(study.trials) == NUM_TRIALS  # no trial created twice
    lost = [s for s in study.record.segments.values() if s.status is SegmentStatus.LOST]
    assert lost, "no segment was lost: the workers were never killed mid-trial"
    resumed = [s for s in study.record.segments.values() if s.start_step > 0]
    assert resumed, "no trial resumed from a checkpoint"
    frame = study.metrics_frame()
    assert len(frame) == NUM_TRIALS * MAX_STEPS  # no valid row lost or duplicated
    best = study.best_trial()
    assert best is not None
    assert (best.trial_id, best.step) == (
        reference.best_trial().trial_id,
        reference.best_trial().step,
    )
    for trial in study.trials:
        expected = reference.trial(trial.trial_id)
        assert trial.params == expected.params
        assert trial.status is TrialStatus.COMPLETED
        assert [h.status for h in trial.history].count(TrialStatus.COMPLETED) == 1
        rows = frame[frame.trial == trial.trial_id]
        assert rows.step.tolist() == list(range(1, MAX_STEPS + 1))
        curve, ref_curve = study.curve(trial.trial_id), reference.curve(trial.trial_id)
        assert np.array_equal(curve.steps, ref_curve.steps)
        assert np.array_equal(curve.values, ref_curve.values)
        assert np.array_equal(
            study.curve(trial.trial_id, "train_loss").values,
            reference.curve(trial.trial_id, "train_loss").values,
        )
        starts = [study.record.segments[s].start_step for s in trial.segments]
        assert starts == sorted(starts)  # never restarted before an earlier restart point
        files = set((killed_dir / "checkpoints" / f"trial-{trial.trial_id:06d}").iterdir())
        kept = {study.checkpoint_path(trial.trial_id)}  # its latest, and the best model
        if trial.trial_id == best.trial_id:
            kept.add(best.checkpoint)
        assert files == kept
