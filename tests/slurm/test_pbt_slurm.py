"""PBT on the real local Slurm cluster: both worker jobs are preempted mid-generation, requeue
and carry on; no generation is lost and the lineage stays intact."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import WORKLOADS, run_hpctune, wait_for, write_study
from tests.slurm.test_hpctune_slurm import (
    _reports,
    _sacct,
    _wait_final,
    assert_preemptions_suspended,
    submit_preemptor,
)

pytestmark = pytest.mark.slurm

MAX_STEPS = 8
POPULATION = 4


def test_pbt_survives_preempted_workers(tmp_path: Path, study_name: str) -> None:
    spec = write_study(
        tmp_path,
        train=WORKLOADS / "pbt_toy.py",
        name=study_name,
        metric="score",
        max_steps=MAX_STEPS,
        num_trials=POPULATION,
        space={"lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True}, "sleep": 0.1},
        policy={"name": "pbt", "population_size": POPULATION, "steps_per_generation": 2},
        resources={"slots": 2, "gpus_per_worker": 1},
        slurm={"partition": "debug", "time": 20, "controller": {"partition": "high"}},
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(spec), check=True)
    # preempt in the middle of the study, once some children have been forked
    assert wait_for(lambda: _reports(study_dir) >= 10, 180, interval=0.2)
    submit_preemptor(study_name, tmp_path)
    study = _wait_final(study_dir, 300)
    record = study.record
    assert record.state is StudyState.FINISHED
    trials = record.trials
    assert all(t.status is TrialStatus.COMPLETED for t in trials.values())

    # the preemption reached a running segment, which was suspended and carried on
    assert_preemptions_suspended(study)
    jobs = {w.info["job_id"] for w in record.workers.values()}
    states = [row[1] for job in jobs for row in _sacct("-D", "-X", "-j", job, "-o", "JobID,State")]
    assert any(state.startswith(("PREEMPTED", "REQUEUED")) for state in states), states

    # no generation lost: every generation complete, every trial initiated at most once
    generations = Counter(t.generation for t in trials.values())
    assert generations[0] == POPULATION
    assert sum(generations.values()) >= POPULATION * MAX_STEPS // 2
    initiators = Counter(t.initiator for t in trials.values() if t.initiator is not None)
    assert max(initiators.values()) == 1
    # the lineage: each child forked at its parent's last step and continued from its checkpoint;
    # every step of each trial reported exactly once, across the requeues
    for trial in trials.values():
        steps = study.curve(trial.trial_id).steps.tolist()
        start = trial.parent_step or 0
        assert steps == list(range(start + 1, (trial.end_step or MAX_STEPS) + 1))
        if trial.parent_trial is None:
            continue
        parent = trials[trial.parent_trial]
        assert trial.parent_step == parent.end_step
        start_x = study.curve(trial.trial_id, "start_x").values[0]
        assert start_x == pytest.approx(study.curve(parent.trial_id).values[-1])
