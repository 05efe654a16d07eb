"""Stage trees on the real local Slurm cluster: a grid of learning-rate sequences whose trials
share prefixes runs as a stage tree with worker jobs that are preempted mid-study; every unique
step is trained once across the requeues and the curves equal the local run's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.stagetree.from_study import plan_from_study
from hpctune.stagetree.preview import plan_configs
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import run_hpctune, wait_for, write_study
from tests.slurm.test_hpctune_slurm import (
    _reports,
    _wait_final,
    assert_preemptions_suspended,
    submit_preemptor,
)
from tests.stagetree.test_stage_execution import TRAIN, _grid_space, _pbt_spec, _trained_steps

pytestmark = pytest.mark.slurm

MAX_STEPS = 16  # with a wider model: about 10 s of training, long enough to preempt it


def _spec(folder: Path, name: str, slurm: bool) -> Path:
    path = write_study(
        folder,
        train=TRAIN,
        name=name,
        metric="val_accuracy",
        max_steps=MAX_STEPS,
        num_trials=6,
        seed=5,
        directory=str(folder / "study"),
        space={**_grid_space(), "hidden": 1024, "layers": 2},
        generator={"name": "grid"},
        resources={"slots": 2, "gpus_per_worker": 1 if slurm else 0},
        slurm={"partition": "debug", "time": 20, "controller": {"partition": "high"}}
        if slurm
        else None,
    )
    path.write_text(path.read_text() + "\n[stages]\nenabled = true\n")
    return path


def test_stage_tree_survives_preempted_workers(tmp_path: Path, study_name: str) -> None:
    local = _spec(tmp_path / "local", "local", slurm=False)
    run_hpctune("launch", str(local), "--local", check=True)
    reference = open_study(tmp_path / "local" / "study")

    spec = _spec(tmp_path / "slurm", study_name, slurm=True)
    study_dir = tmp_path / "slurm" / "study"
    run_hpctune("launch", str(spec), check=True)
    assert wait_for(lambda: _reports(study_dir) >= 3, 180, interval=0.1)
    submit_preemptor(study_name, tmp_path)
    study = _wait_final(study_dir, 300)
    record = study.record
    assert record.state is StudyState.FINISHED
    assert all(t.status is TrialStatus.COMPLETED for t in study.trials)
    assert_preemptions_suspended(study)
    # checkpoints at every epoch: the requeued paths resume where they stopped
    plan = plan_configs([t.params for t in study.trials], MAX_STEPS)
    assert _trained_steps(study) == plan.unique_steps()
    for trial in study.trials:
        assert np.array_equal(
            study.curve(trial.trial_id).values, reference.curve(trial.trial_id).values
        )


def test_pbt_over_a_stage_tree_survives_preempted_workers(tmp_path: Path, study_name: str) -> None:
    # two learning rates: identical generation-0 trials and identical children are one stage
    path = _pbt_spec(
        tmp_path,
        tmp_path / "study",
        4,
        keep_last=True,
        space={"hidden": 1024, "layers": 2},
        name=study_name,
        max_steps=MAX_STEPS,
        resources={"slots": 2, "gpus_per_worker": 1},
        slurm={"partition": "debug", "time": 20, "controller": {"partition": "high"}},
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(path), check=True)
    assert wait_for(lambda: _reports(study_dir) >= 3, 180, interval=0.1)
    submit_preemptor(study_name, tmp_path)
    study = _wait_final(study_dir, 300)
    record = study.record
    assert record.state is StudyState.FINISHED
    trials = study.trials
    assert all(t.status is TrialStatus.COMPLETED for t in trials)
    assert sorted(t.generation for t in trials) == [g for g in range(4) for _ in range(4)]
    assert_preemptions_suspended(study)
    # every unique step once across the requeues; identical trials trained nothing
    plan = plan_from_study(record, MAX_STEPS)
    assert _trained_steps(study) == plan.unique_steps() < 4 * len(trials)
    assert [t for t in trials if not t.segments]
    for trial in trials:
        assert study.curve(trial.trial_id).steps[-1] == trial.end_step
