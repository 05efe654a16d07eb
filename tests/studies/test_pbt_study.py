"""PBT carried out by the controller and workers on the local executor (real processes)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.browser import open_report
from tests.conftest import WORKLOADS, run_hpctune, start_hpctune, wait_for, write_study

TOY = WORKLOADS / "pbt_toy.py"


@pytest.mark.slow
def test_budget_mode_pbt_forks_from_parents_reuses_workers_and_collects_checkpoints(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=TOY,
        metric="score",
        max_steps=8,
        num_trials=4,
        space={"lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True}, "sleep": 0.02},
        policy={"name": "pbt", "population_size": 4, "steps_per_generation": 2},
        resources={"slots": 2},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(study_dir)
    record = study.record
    assert record.state is StudyState.FINISHED
    trials = record.trials
    assert all(t.status is TrialStatus.COMPLETED for t in trials.values())
    generations = Counter(t.generation for t in trials.values())
    assert generations[0] == 4
    assert sum(generations.values()) >= 16  # 4 generations of 4 (more if an older parent won)
    initiators = Counter(t.initiator for t in trials.values() if t.initiator is not None)
    assert max(initiators.values()) == 1  # every trial initiates once
    assert set(initiators) == {t.trial_id for t in trials.values() if (t.end_step or 8) < 8}
    for trial in trials.values():
        steps, _ = study.curve(trial.trial_id)
        start = trial.parent_step or 0
        assert steps.tolist() == list(range(start + 1, (trial.end_step or 8) + 1))
        if trial.parent_trial is None:
            assert trial.generation == 0
            continue
        parent = trials[trial.parent_trial]
        initiator = trials[trial.initiator]  # type: ignore[index]
        assert trial.generation == (initiator.generation or 0) + 1
        assert trial.parent_step == parent.end_step
        assert record.checkpoints[trial.parent_checkpoint_row].trial_id == parent.trial_id  # type: ignore[index]
        # the child continued from its parent's checkpoint: its start value is the parent's last
        start_x = study.curve(trial.trial_id, "start_x").values[0]
        assert start_x == pytest.approx(study.curve(parent.trial_id).values[-1])
        assert trial.params["lr"] != parent.params["lr"]  # mutated
    child_of_0 = next(t.trial_id for t in trials.values() if t.initiator == 0)
    # two workers did all the work: each took its next assignment without exiting
    assert len(record.workers) == 2
    # only the fittest trial's (best last value) last checkpoint is left, in the journal and
    # on disk
    live = [ref for ref in record.checkpoints.values() if not ref.deleted]
    best = max(trials.values(), key=lambda t: (t.curve_values[-1], -t.trial_id))
    assert [ref.trial_id for ref in live] == [best.trial_id]
    files = [p for p in (study_dir / "checkpoints").rglob("*") if p.is_file()]
    assert [study_dir / ref.path for ref in live] == files
    status = json.loads(run_hpctune("status", str(study_dir), "--json", check=True).stdout)
    by_id = {t["id"]: t for t in status["trials"]}
    assert by_id[child_of_0]["initiator"] == 0
    assert by_id[child_of_0]["generation"] == 1
    assert by_id[0]["end_step"] == 2
    # the population tree and its plot
    plot = tmp_path / "lineage.png"
    out = run_hpctune("lineage", str(study_dir), "--plot", str(plot), check=True).stdout
    assert len(out.splitlines()) == len(trials) + 1  # one line per trial, then the plot's
    assert out.splitlines()[0].startswith("trial 0 gen 0 steps 0-2 score ")
    assert plot.stat().st_size > 10_000
    child = next(t for t in trials.values() if t.parent_trial is not None)
    assert f"  trial {child.trial_id} gen {child.generation} steps {child.parent_step}-" in out
    # the report shows the population and the schedule found (headless Chromium)
    run_hpctune("report", str(study_dir), "--out", str(tmp_path / "report"), check=True)
    load = open_report(tmp_path / "report" / "index.html", tmp_path / "shots")
    assert (load.errors, load.failed) == ([], [])
    assert load.plots["lineage"] == 2
    assert (tmp_path / "report" / "lineage.png").stat().st_size > 10_000
    best_out = run_hpctune("best", str(study_dir), check=True).stdout
    assert "# schedule found (lineage " in best_out
    assert f"# best trial {best.trial_id} " in best_out
    # a trace of PBT sessions would mislead the simulator: refused, or written with a warning
    refused = run_hpctune("export-trace", str(study_dir), str(tmp_path / "t.h5"))
    assert refused.returncode == 2
    assert "trials were forked from other trials' checkpoints (PBT)" in refused.stderr
    forced = run_hpctune("export-trace", str(study_dir), str(tmp_path / "t.h5"), "--force")
    assert forced.returncode == 0
    assert "warning: " in forced.stderr


@pytest.mark.slow
def test_truncation_pbt_replaces_the_bottom_quantile_with_clones(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=TOY,
        metric="score",
        max_steps=8,
        num_trials=4,
        space={
            "lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True},
            # four trials of equal speed whose steps are long next to the spread of their
            # workers' start-ups: they overlap (and are ranked against each other) also when a
            # loaded machine staggers the starts (at 0.02 s a step one CI run had no clone)
            "sleep": 0.5,
            "slow_factor": 1,
            "sharpness": 2.0,
        },
        policy={
            "name": "pbt-truncation",
            "exclude": ["sleep", "slow_factor", "sharpness"],
            "population_size": 4,
            "perturbation_interval": 2,
        },
        resources={"slots": 4},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(study_dir)
    record = study.record
    assert record.state is StudyState.FINISHED
    clones = [t for t in record.trials.values() if t.parent_trial is not None]
    assert clones
    for clone in clones:
        replaced = record.trials[clone.initiator]  # type: ignore[index]
        assert replaced.status is TrialStatus.TERMINATED
        assert "lower quantile" in replaced.reason
        ref = record.checkpoints[clone.parent_checkpoint_row]  # type: ignore[index]
        assert (ref.trial_id, ref.step) == (clone.parent_trial, clone.parent_step)
        start_x = study.curve(clone.trial_id, "start_x").values[0]
        parent_steps, parent_values = study.curve(clone.parent_trial)  # type: ignore[arg-type]
        assert start_x == pytest.approx(parent_values[parent_steps.tolist().index(ref.step)])
    # each replaced trial has its clone, unless its parent ended before a slot was free
    unreplaced = {t.trial_id for t in record.trials.values() if t.status is TrialStatus.TERMINATED}
    unreplaced -= {c.initiator for c in clones}
    assert len(unreplaced) <= 1
    completed = sum(t.status is TrialStatus.COMPLETED for t in record.trials.values())
    assert completed == 4 - len(unreplaced)
    # at the end: the completed trials' last checkpoints (running trials keep theirs) and none
    # of the intermediate ones
    live = {ref.trial_id for ref in record.checkpoints.values() if not ref.deleted}
    assert len(live) == sum(1 for ref in record.checkpoints.values() if not ref.deleted)


def _has_reported(study_dir: Path, trial_id: int) -> bool:
    """True once the journal holds a report of ``trial_id``."""
    if not (study_dir / "journal.zarr").exists():
        return False
    trial = open_study(study_dir).record.trials.get(trial_id)
    return trial is not None and len(trial.curve_steps) > 0


@pytest.mark.slow
def test_a_stopped_pbt_study_resumes_its_population(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=TOY,
        metric="score",
        max_steps=8,
        num_trials=4,
        space={"lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True}, "sleep": 0.1},
        policy={"name": "pbt", "population_size": 4, "steps_per_generation": 4},
        resources={"slots": 2},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    launch = start_hpctune("launch", str(spec), "--local")
    try:
        # trial 3 takes 3 s per step: once it reported its first step, it is mid-session
        assert wait_for(lambda: _has_reported(study_dir, 3), 120)
        run_hpctune("stop", str(study_dir), check=True)
        out, _ = launch.communicate(timeout=120)
    finally:
        launch.kill()
    assert launch.returncode == 0, out
    stopped = open_study(study_dir).record
    assert stopped.state is StudyState.STOPPED
    suspended = [t for t in stopped.trials.values() if t.status is TrialStatus.SUSPENDED]
    assert suspended, "no trial was stopped mid-session"
    run_hpctune("resume", str(study_dir), "--local", check=True)
    study = open_study(study_dir)
    trials = study.record.trials
    assert study.record.state is StudyState.FINISHED
    assert all(t.status is TrialStatus.COMPLETED for t in trials.values())
    initiators = Counter(t.initiator for t in trials.values() if t.initiator is not None)
    assert max(initiators.values()) == 1
    assert set(initiators) == {t.trial_id for t in trials.values() if (t.end_step or 8) < 8}
    for trial in suspended:  # each resumed to its own end, from its own checkpoint
        again = trials[trial.trial_id]
        start = again.parent_step or 0
        assert study.curve(trial.trial_id).steps.tolist() == list(
            range(start + 1, (again.end_step or 8) + 1)
        )
        assert len(again.segments) == 2
