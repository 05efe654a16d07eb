"""Stage-tree execution on the local executor with real PyTorch training (jobs/digits-stages).

A grid of learning-rate sequences and batch-size milestones whose trials share prefixes runs
with ``[stages] enabled = true``: every unique step is trained once, every trial completes with
its whole curve, a trial run through shared stages has exactly the curve it has when run alone,
checkpoints nothing needs are deleted, and a controller killed mid-study resumes the plan.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hpctune.api import Study, open_study
from hpctune.journal.best import best_checkpoint_rows
from hpctune.stagetree.from_study import plan_from_study
from hpctune.stagetree.pieces import trial_stages
from hpctune.stagetree.plan import SearchPlan
from hpctune.stagetree.preview import plan_configs
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import REPO, kill_workers, run_hpctune, start_hpctune, write_study

TRAIN = REPO / "jobs" / "digits-stages" / "train.py"
MAX_STEPS = 8
LRS: list[Any] = [
    {"schedule": "piecewise", "values": [0.1, 0.02], "milestones": [4]},
    {"schedule": "piecewise", "values": [0.1, 0.05], "milestones": [4]},
    {"schedule": "multistep", "base": 0.1, "milestones": [6], "gamma": 0.1},
]
BATCH_SIZES: list[Any] = [
    {"schedule": "constant", "value": 32, "integer": True},
    {"schedule": "multistep", "base": 32, "milestones": [5], "gamma": 2, "integer": True},
]
FIXED = {
    "hidden": 32,
    "layers": 1,
    "dropout": 0.1,
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "activation": "relu",
}


def _spec(folder: Path, directory: Path, space: dict[str, Any], num_trials: int) -> Path:
    path = write_study(
        folder,
        train=TRAIN,
        metric="val_accuracy",
        max_steps=MAX_STEPS,
        num_trials=num_trials,
        seed=5,
        directory=str(directory),
        space=space,
        generator={"name": "grid"},
    )
    path.write_text(path.read_text() + "\n[stages]\nenabled = true\n")
    return path


def _grid_space() -> dict[str, Any]:
    return {**FIXED, "lr": LRS, "batch_size": BATCH_SIZES}


def _trained_steps(study: Study) -> int:
    return sum((s.end_step or s.start_step) - s.start_step for s in study.record.segments.values())


def _assert_reached_steps_trained_once(study: Study) -> None:
    """Trials stopped and promoted over time: each step some trial reached was trained once,
    and fewer steps than trial by trial."""
    plan = SearchPlan()
    for trial in study.trials:
        plan.add_trial(trial.trial_id, trial_stages(trial.params, MAX_STEPS), trial.step)
    assert _trained_steps(study) == plan.unique_steps() < plan.total_steps()


def _pbt_spec(
    folder: Path,
    directory: Path,
    steps_per_generation: int,
    *,
    keep_last: bool,
    space: dict[str, Any] | None = None,
    **fields: Any,
) -> Path:
    """PBT (population 4) over two learning rates as a stage tree: generation 0 has identical
    trials (4 of 2 values), and mutation moves a child to the other value, so children of one
    parent are identical too. ``space`` overrides the fixed parameters."""
    study = {"metric": "val_accuracy", "max_steps": MAX_STEPS, "num_trials": 4, "seed": 5}
    path = write_study(
        folder,
        train=TRAIN,
        **{**study, "directory": str(directory), **fields},
        space={**FIXED, **(space or {}), "lr": [0.05, 0.1], "batch_size": 32},
        generator={"name": "random"},
        policy={
            "name": "pbt",
            "population_size": 4,
            "steps_per_generation": steps_per_generation,
            "keep_last_checkpoints": keep_last,  # True: a late identical child finds its twin's
        },
    )
    path.write_text(path.read_text() + "\n[stages]\nenabled = true\n")
    return path


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Study:
    """The grid run once as a stage tree (the reference for the tests below)."""
    folder = tmp_path_factory.mktemp("shared")
    spec = _spec(folder, folder / "study", _grid_space(), 6)
    run_hpctune("launch", str(spec), "--local", check=True)
    return open_study(folder / "study")


def test_every_unique_step_is_trained_once(shared: Study) -> None:
    record = shared.record
    assert record.state is StudyState.FINISHED
    configs = [t.params for t in shared.trials]
    plan = plan_configs(configs, MAX_STEPS)
    assert plan.unique_steps() < plan.total_steps() == 6 * MAX_STEPS
    assert _trained_steps(shared) == plan.unique_steps()
    for trial in shared.trials:
        assert trial.status is TrialStatus.COMPLETED
        curve = shared.curve(trial.trial_id)
        assert curve.steps.tolist() == list(range(1, MAX_STEPS + 1))
        assert np.isfinite(curve.values).all()


def test_a_branching_trial_inherits_its_parents_curve(shared: Study) -> None:
    forked = [t for t in shared.trials if t.shares_prefix]
    assert forked, "no trial went on from another trial's checkpoint"
    for trial in forked:
        assert trial.parent_trial is not None
        assert trial.parent_step is not None
        mine, theirs = shared.curve(trial.trial_id), shared.curve(trial.parent_trial)
        n = trial.parent_step
        assert np.array_equal(mine.values[:n], theirs.values[:n])
        own = [shared.record.segments[s].start_step for s in trial.segments]
        assert own
        assert min(own) >= n


def test_checkpoints_nothing_needs_are_deleted(shared: Study) -> None:
    kept = [c for c in shared.record.checkpoints.values() if not c.deleted]
    best = best_checkpoint_rows(shared.record)  # the model behind the best value is kept too
    assert len(best) <= 1
    assert {c.row for c in kept} == {t.checkpoint_row for t in shared.trials} | best
    assert len(shared.record.checkpoints) > len(kept)
    assert {c.step for c in kept if c.row not in best} == {MAX_STEPS}
    files = sorted((shared.directory / "checkpoints").rglob("*.pt"))
    assert files == sorted(shared.directory / c.path for c in kept)


def test_the_report_shows_the_stage_tree(shared: Study, tmp_path: Path) -> None:
    from tests.browser import open_report

    run_hpctune("report", str(shared.directory), "--out", str(tmp_path / "r"), check=True)
    load = open_report(tmp_path / "r" / "index.html", tmp_path / "shots")
    assert (load.errors, load.failed) == ([], [])
    assert load.plots["stages"] == 1
    page = (tmp_path / "r" / "index.html").read_text()
    trained = _trained_steps(shared)
    assert f"{trained} epochs trained for the {6 * MAX_STEPS} the trials reached" in page
    status = run_hpctune("status", str(shared.directory), check=True).stdout
    assert f"stage tree: {trained} steps trained for {6 * MAX_STEPS} steps reached" in status


def test_a_trial_through_shared_stages_has_its_curve_when_run_alone(
    shared: Study, tmp_path: Path
) -> None:
    # the trial that branched off latest went through the most shared stages
    trial = max((t for t in shared.trials if t.shares_prefix), key=lambda t: t.parent_step or 0)
    alone = _spec(tmp_path, tmp_path / "alone", {**trial.params}, 1)
    run_hpctune("launch", str(alone), "--local", check=True)
    study = open_study(tmp_path / "alone")
    assert _trained_steps(study) == MAX_STEPS
    assert np.array_equal(study.curve(0).values, shared.curve(trial.trial_id).values), (
        "resuming from another trial's checkpoint changed the curve"
    )


def _reports(study_dir: Path) -> int:
    events = study_dir / "events"
    if not events.exists():
        return 0
    return sum(p.read_bytes().count(b'"report"') for p in events.glob("*.jsonl"))


@pytest.mark.slow
def test_a_killed_controller_resumes_the_stage_tree(shared: Study, tmp_path: Path) -> None:
    study_dir = tmp_path / "killed"
    spec = _spec(tmp_path, study_dir, _grid_space(), 6)
    rng = random.Random(int(os.environ.get("HPCTUNE_KILL_SEED", "7")))
    process = start_hpctune("launch", str(spec), "--local")
    kills = 0
    for round_ in range(3):
        target = _reports(study_dir) + rng.randint(3, 10)
        while process.poll() is None and _reports(study_dir) < target:
            time.sleep(0.01)
        if process.poll() is not None:
            break
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        kills += 1
        if round_ == 1:
            kill_workers(study_dir)
        process = start_hpctune("resume", str(study_dir), "--local")
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    assert kills >= 2, "the study ended before the controller could be killed twice"
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    assert len(study.trials) == 6
    for trial in study.trials:
        assert trial.status is TrialStatus.COMPLETED
        assert [h.status for h in trial.history].count(TrialStatus.COMPLETED) == 1
        assert np.array_equal(
            study.curve(trial.trial_id).values, shared.curve(trial.trial_id).values
        )


def test_stagetree_command_shows_every_stage_done(shared: Study, tmp_path: Path) -> None:
    result = run_hpctune("stagetree", str(shared.directory), "--json", check=True)
    out = json.loads(result.stdout)
    assert out["counts"]["done"] == len(out["stages"]) > 0
    assert sum(s["end"] - s["start"] for s in out["stages"]) == _trained_steps(shared)
    plot = tmp_path / "tree.png"
    text = run_hpctune("stagetree", str(shared.directory), "--plot", str(plot), check=True)
    assert f"{len(out['stages'])} stages: {len(out['stages'])} done" in text.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_successive_halving_over_the_stage_tree(tmp_path: Path) -> None:
    spec = _spec(tmp_path, tmp_path / "sha", _grid_space(), 6)
    text = spec.read_text().replace(
        "[generator]",
        '[policy]\nname = "sha"\nreduction_factor = 2\ngrace_period = 2\n\n[generator]',
    )
    spec.write_text(text)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(tmp_path / "sha")
    record = study.record
    assert record.state is StudyState.FINISHED
    assert all(t.status.is_final for t in study.trials)
    completed = [t for t in study.trials if t.status is TrialStatus.COMPLETED]
    assert len(completed) == 2  # one per bracket (4 and 2 trials, rungs 2, 4, 8)
    # trials reached their rungs from shared checkpoints: several trained nothing themselves
    answered = [t for t in study.trials if t.shares_prefix and not t.segments]
    assert answered
    # every step any trial reached was trained once (the stage tree of the reached steps)
    plan = SearchPlan()
    for trial in study.trials:
        plan.add_trial(trial.trial_id, trial_stages(trial.params, MAX_STEPS), trial.step)
    assert _trained_steps(study) == plan.unique_steps() < plan.total_steps()
    for trial in completed:
        assert study.curve(trial.trial_id).steps.tolist() == list(range(1, MAX_STEPS + 1))


def test_a_second_study_reuses_the_first_ones_stages(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shared_store = f'\nstore = "{store}"\nfingerprint = "digits-mlp-test"\n'

    def spec(name: str, lrs: list[Any]) -> Path:
        space = {**FIXED, "lr": lrs, "batch_size": BATCH_SIZES[0]}
        path = _spec(tmp_path / name, tmp_path / name / "study", space, len(lrs))
        path.write_text(path.read_text() + shared_store)
        return path

    first = spec("a", LRS[:2])
    second = spec("b", LRS[1:])
    run_hpctune("launch", str(first), "--local", check=True)
    assert len(list((store).glob("*/entries/*.json"))) == 3  # the branch point, two ends
    run_hpctune("launch", str(second), "--local", check=True)
    a, b = open_study(tmp_path / "a" / "study"), open_study(tmp_path / "b" / "study")
    assert _trained_steps(a) == 4 + 2 * 4
    # b's first trial is a's second: answered from the store without training; its second
    # shares a's first four steps (lr 0.1) and trains only the last four
    assert _trained_steps(b) == 4
    assert not b.trial(0).segments
    assert [s.start_step for s in (b.record.segments[i] for i in b.trial(1).segments)] == [4]
    assert np.array_equal(b.curve(0).values, a.curve(1).values)
    assert np.array_equal(b.curve(1).values[:4], a.curve(0).values[:4])
    assert b.curve(1).steps.tolist() == list(range(1, MAX_STEPS + 1))
    imported = [i for t in b.trials for i in t.info.get("imported", [])]
    assert {(i["study"], i["step"]) for i in imported} == {("test", 8), ("test", 4)}
    # a study whose training code differs shares nothing
    changed = spec("c", LRS[1:2])
    (changed.parent / "train.py").write_text(TRAIN.read_text() + "\n# changed\n")
    run_hpctune("launch", str(changed), "--local", check=True)
    assert _trained_steps(open_study(tmp_path / "c" / "study")) == MAX_STEPS


def test_asha_judges_each_trial_at_its_rungs_over_the_stage_tree(tmp_path: Path) -> None:
    spec = _spec(tmp_path, tmp_path / "asha", _grid_space(), 6)
    # the trials differ from step 4 on (the learning rates): one rung, at step 5
    asha = '[policy]\nname = "asha"\nreduction_factor = 2\ngrace_period = 5\n\n'
    spec.write_text(spec.read_text().replace("[generator]", asha + "[generator]"))
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(tmp_path / "asha")
    assert study.record.state is StudyState.FINISHED
    assert all(t.status.is_final for t in study.trials)
    # judged at the rung: some stopped there, the others completed
    stopped = [t for t in study.trials if t.status is TrialStatus.TERMINATED]
    assert stopped
    assert {t.step for t in stopped} == {5}
    assert all(t.step == MAX_STEPS for t in study.trials if t not in stopped)
    assert [t for t in study.trials if t.shares_prefix and not t.segments]
    # no step trained twice, although trials arrived and were promoted over time
    _assert_reached_steps_trained_once(study)


def test_median_stopping_judges_trials_at_each_boundary_over_the_stage_tree(
    tmp_path: Path,
) -> None:
    # a learning rate too small to learn in 8 epochs: its two trials (sharing all but the last
    # 3 steps) run last on the one worker, and are stopped at the first boundary
    slow = {"schedule": "constant", "value": 0.0005}
    spec = _spec(tmp_path, tmp_path / "median", {**_grid_space(), "lr": [*LRS[:2], slow]}, 6)
    median = '[policy]\nname = "median"\ngrace_period = 2\nmin_samples_required = 2\n\n'
    text = spec.read_text().replace("[generator]", median + "[generator]")
    text = text.replace("max_steps = 8", "max_steps = 8\nboundary = 2")
    spec.write_text(text.replace("slots = 2", "slots = 1"))
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(tmp_path / "median")
    assert study.record.state is StudyState.FINISHED
    assert all(t.status.is_final for t in study.trials)
    # judged at the milestones 2, 4, 6 (every boundary from the grace period): stopped ones
    # end at one, with the rule's reason; the others completed
    stopped = [t for t in study.trials if t.status is TrialStatus.TERMINATED]
    assert [(t.trial_id, t.step) for t in stopped] == [(4, 2), (5, 2)]
    for trial in stopped:
        assert trial.reason.startswith("median: best"), trial.reason
    assert all(t.step == MAX_STEPS for t in study.trials if t not in stopped)
    # segments end at boundaries (requests), and no step was trained twice
    assert {s.until_step for s in study.record.segments.values()} <= {2, 4, 6, MAX_STEPS}
    _assert_reached_steps_trained_once(study)


@pytest.mark.parametrize("keep_last", [True, False])
def test_pbt_over_the_stage_tree_trains_identical_children_once(
    tmp_path: Path, keep_last: bool
) -> None:
    spec = _pbt_spec(tmp_path, tmp_path / "pbt", 2, keep_last=keep_last)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(tmp_path / "pbt")
    assert study.record.state is StudyState.FINISHED
    trials = study.trials
    assert all(t.status is TrialStatus.COMPLETED for t in trials)
    assert sorted(t.generation for t in trials) == [g for g in range(4) for _ in range(4)]
    by_id = {t.trial_id: t for t in trials}
    for trial in trials:
        assert trial.end_step == 2 * ((trial.generation or 0) + 1)
        curve = study.curve(trial.trial_id)
        assert curve.steps[-1] == trial.end_step
        assert np.isfinite(curve.values).all()
        if trial.parent_trial is None:
            continue
        parent = by_id[trial.parent_trial]
        theirs = study.curve(parent.trial_id)
        if trial.shares_prefix:  # answered by an identical trial's checkpoint at its end
            assert trial.parent_step == parent.end_step == trial.end_step
            assert (trial.params, trial.generation) == (parent.params, parent.generation)
            assert np.array_equal(curve.values, theirs.values)
        else:  # a child goes on from its parent's end with the other learning rate
            assert trial.parent_step == parent.end_step == trial.end_step - 2
            assert trial.params["lr"] != parent.params["lr"]
            assert curve.steps.tolist() == [trial.end_step - 1, trial.end_step]
    # the paths: a child's is its parent's up to the fork; identical ones are trained once
    plan = plan_from_study(study.record, MAX_STEPS)
    assert [t for t in trials if not t.segments], "no trial was answered by a twin"
    kept = {c.row for c in study.record.checkpoints.values() if not c.deleted}
    if keep_last:  # nothing identical is trained twice
        assert _trained_steps(study) == plan.unique_steps() < 2 * len(trials)
        assert kept == {t.checkpoint_row for t in trials}
    else:  # PBT's garbage collection: in the end only the fittest trial's checkpoint is left,
        # and the best final model's ([study] keep_checkpoints keeps the model behind the best)
        assert plan.unique_steps() <= _trained_steps(study) < 2 * len(trials)
        last = {t.trial_id: study.curve(t.trial_id).values[-1] for t in trials}
        fittest = {t.checkpoint_row for t in trials if last[t.trial_id] == max(last.values())}
        best = study.best_trial()
        assert best is not None
        assert best.step == MAX_STEPS
        assert best.checkpoint is not None
        assert best.checkpoint.is_file()
        best_row = best_checkpoint_rows(study.record)
        assert len(best_row) == 1
        assert len(kept - best_row) <= 1
        assert kept - best_row <= fittest
