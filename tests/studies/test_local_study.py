"""End-to-end studies on the local executor: real processes, real files, the real CLI."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.journal.usage import study_usage
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import (
    DIGITS,
    WORKLOADS,
    kill_workers,
    run_hpctune,
    start_hpctune,
    wait_for,
    write_study,
)

BEHAVIOURS = WORKLOADS / "behaviours.py"


def test_digits_study_runs_to_the_end(tmp_path: Path, cleanup_studies: list[Path]) -> None:
    spec = write_study(
        tmp_path,
        train=DIGITS / "train.py",
        metric="val_accuracy",
        max_steps=4,
        num_trials=4,
        space={
            "hidden": {"type": "int", "low": 16, "high": 64, "log": True},
            "layers": 1,
            "dropout": 0.1,
            "momentum": 0.9,
            "weight_decay": 1e-4,
            "batch_size": 32,
            "activation": ["relu", "tanh"],
            "lr": {"type": "float", "low": 0.05, "high": 0.2},
        },
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    result = run_hpctune("launch", str(spec), "--local", check=True)
    assert "best configuration:" in result.stdout
    assert f"study directory: {study_dir}" in result.stdout
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    assert len(study.trials) == 4
    best = study.best_trial()
    assert best is not None
    assert best.checkpoint is not None
    assert f"step-{best.step:08d}-" in best.checkpoint.name
    for trial in study.trials:
        assert trial.status is TrialStatus.COMPLETED
        steps, values = study.curve(trial.trial_id)
        assert steps.tolist() == [1, 2, 3, 4]
        assert np.all((values > 0) & (values <= 1))
        assert len(study.curve(trial.trial_id, "val_loss")) == 4
        # the latest checkpoint is kept, and the best trial's at its best step
        files = set((study_dir / "checkpoints" / f"trial-{trial.trial_id:06d}").glob("*.pt"))
        kept = {study.checkpoint_path(trial.trial_id)}
        if trial.trial_id == best.trial_id:
            kept.add(best.checkpoint)
        assert files == kept
        out = (study_dir / "logs" / "trials" / f"trial-{trial.trial_id:06d}.out").read_text()
        assert f"trial {trial.trial_id}: val_accuracy" in out
    frame = study.metrics_frame()
    assert {"trial", "step", "val_accuracy", "val_loss", "train_loss"} <= set(frame.columns)
    assert len(frame) == 16
    usage = study_usage(study.record)
    assert usage.workers == 2
    assert 0 < usage.training_s < usage.allocated_s
    assert usage.allocated_s < 2 * (study.record.ended_time - study.record.started_time) + 1
    assert 0 < usage.not_training_share < 1
    assert "usage: 2 workers" in run_hpctune("status", str(study_dir), check=True).stdout


def test_a_crashing_trial_fails_with_its_traceback_and_the_study_goes_on(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        num_trials=3,
        generator={"name": "grid"},
        space={"behaviour": ["ok", "raise", "nan"], "x": 1.0},
    )
    cleanup_studies.append(tmp_path / "study")
    result = run_hpctune("launch", str(spec), "--local")
    assert result.returncode == 0, result.stdout + result.stderr
    study = open_study(tmp_path / "study")
    ok, crashed, diverged = study.trials
    assert ok.status is TrialStatus.COMPLETED
    assert crashed.status is TrialStatus.FAILED
    assert "ValueError: bad value in trial 1" in crashed.error
    assert re.search(r'train\.py", line \d+, in train', crashed.error)  # the traceback
    assert 'raise ValueError(f"bad value' in crashed.error
    assert "hpctune/worker/loop.py" not in crashed.error  # the user's frames only
    err = (tmp_path / "study" / "logs" / "trials" / "trial-000001.err").read_text()
    assert "ValueError" in err
    assert diverged.status is TrialStatus.TERMINATED
    assert "diverged" in diverged.reason
    assert "nan" in diverged.reason
    rows = study.metrics_frame().query("trial == 2")  # the NaN report is recorded
    assert rows["step"].tolist() == [1, 2, 3]
    assert np.isnan(rows["score"].iloc[-1])
    assert "trial 1 failed" in result.stdout


def test_fail_fast_stops_the_study(tmp_path: Path, cleanup_studies: list[Path]) -> None:
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        num_trials=6,
        fail_fast=True,
        resources={"slots": 1},
        generator={"name": "grid"},
        space={"behaviour": ["raise", "ok"], "x": [1.0, 2.0, 3.0]},
    )
    cleanup_studies.append(tmp_path / "study")
    result = run_hpctune("launch", str(spec), "--local")
    assert result.returncode == 1
    study = open_study(tmp_path / "study")
    assert study.record.state is StudyState.FAILED
    assert "fail_fast" in study.record.reason
    assert len(study.trials) == 1


def test_a_lost_worker_is_retried_then_the_trial_fails(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        num_trials=2,
        max_retries=1,
        generator={"name": "grid"},
        space={"behaviour": ["exit", "ok"], "x": 1.0},
    )
    cleanup_studies.append(tmp_path / "study")
    result = run_hpctune("launch", str(spec), "--local")
    assert result.returncode == 0, result.stdout + result.stderr
    study = open_study(tmp_path / "study")
    dying, ok = study.trials
    assert ok.status is TrialStatus.COMPLETED
    assert dying.status is TrialStatus.FAILED
    assert dying.retries == 2
    assert "lost 2 times" in dying.reason
    assert len(dying.segments) == 2
    lost = [w for w in study.record.workers.values() if w.state == "lost"]
    assert len(lost) == 2


def _slow_study(tmp_path: Path, num_trials: int = 4, max_steps: int = 8) -> Path:
    return write_study(
        tmp_path,
        train=BEHAVIOURS,
        num_trials=num_trials,
        max_steps=max_steps,
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}, "sleep": 0.25},
    )


def _expected_curve(x: float, max_steps: int) -> list[float]:
    return [x * s / max_steps for s in range(1, max_steps + 1)]


def test_stop_then_resume_finishes_every_trial_once(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    # every trial waits at step 3 until the gate file exists: the stop lands mid-training
    gate = tmp_path / "gate"
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        num_trials=4,
        max_steps=8,
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}, "gate": str(gate)},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    launch = start_hpctune("launch", str(spec), "--local")
    try:
        assert wait_for(lambda: _reports(study_dir) >= 2, 120)
        status = run_hpctune("status", str(study_dir), "--json", check=True)
        live = json.loads(status.stdout)
        assert live["study"]["state"] == "running"
        assert live["study"]["controller"] is not None
        run_hpctune("stop", str(study_dir), check=True)
        assert wait_for(lambda: open_study(study_dir).record.state is not StudyState.RUNNING, 120)
        gate.touch()
        out, _ = launch.communicate(timeout=120)
    finally:
        launch.kill()
    assert launch.returncode == 0, out
    assert "resume with: hpctune resume" in out
    study = open_study(study_dir)
    assert study.record.state is StudyState.STOPPED
    assert [t.status for t in study.trials].count(TrialStatus.SUSPENDED) >= 1
    assert not any(w.state in ("started", "stopping") for w in study.record.workers.values())

    run_hpctune("resume", str(study_dir), "--local", check=True)
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    assert len(study.trials) == 4
    best = study.best_trial()
    assert best is not None
    assert best.checkpoint is not None
    assert f"step-{best.step:08d}-" in best.checkpoint.name
    for trial in study.trials:
        assert trial.status is TrialStatus.COMPLETED
        assert [h.status for h in trial.history].count(TrialStatus.COMPLETED) == 1
        curve = study.curve(trial.trial_id)
        assert curve.steps.tolist() == list(range(1, 9))
        assert np.allclose(curve.values, _expected_curve(trial.params["x"], 8))
        total = study.curve(trial.trial_id, "total").values
        assert np.allclose(total, np.cumsum(_expected_curve(trial.params["x"], 8)))


def test_stop_one_trial_terminates_it(tmp_path: Path, cleanup_studies: list[Path]) -> None:
    # both trials wait at step 3 until the gate file exists: the stop lands mid-training
    gate = tmp_path / "gate"
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        num_trials=2,
        max_steps=8,
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}, "gate": str(gate)},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    launch = start_hpctune("launch", str(spec), "--local")
    try:
        assert wait_for(lambda: _reports(study_dir) >= 4, 120)  # both at the gate
        run_hpctune("stop", str(study_dir), "--trial", "0", check=True)
        assert wait_for(lambda: open_study(study_dir).record.commands_done, 120)
        gate.touch()
        out, _ = launch.communicate(timeout=120)
    finally:
        launch.kill()
    assert launch.returncode == 0, out
    study = open_study(study_dir)
    assert study.trial(0).status is TrialStatus.TERMINATED
    assert study.trial(0).reason == "stopped by the user"
    assert study.trial(0).step < 8
    assert study.trial(1).status is TrialStatus.COMPLETED


def test_a_killed_worker_resumes_its_trial_from_the_checkpoint(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = _slow_study(tmp_path, num_trials=2)
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    launch = start_hpctune("launch", str(spec), "--local")
    try:
        assert wait_for(lambda: _reports(study_dir) >= 6, 60)
        kill_workers(study_dir)
        out, _ = launch.communicate(timeout=120)
    finally:
        launch.kill()
    assert launch.returncode == 0, out
    study = open_study(study_dir)
    for trial in study.trials:
        assert trial.status is TrialStatus.COMPLETED
        assert trial.retries == 1
        assert len(trial.segments) == 2
        second = study.record.segments[trial.segments[1]]
        assert second.start_step > 0  # resumed from a checkpoint, not from scratch
        curve = study.curve(trial.trial_id, "total")
        assert curve.steps.tolist() == list(range(1, 9))
        assert np.allclose(curve.values, np.cumsum(_expected_curve(trial.params["x"], 8)))


def _reports(study_dir: Path) -> int:
    """Number of report lines the workers wrote so far."""
    total = 0
    for path in (study_dir / "events").glob("*.jsonl") if study_dir.exists() else []:
        total += path.read_text().count('"report"')
    return total


def test_ctrl_c_stops_cooperatively(tmp_path: Path, cleanup_studies: list[Path]) -> None:
    spec = _slow_study(tmp_path, num_trials=2)
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    launch = start_hpctune("launch", str(spec), "--local")
    try:
        assert wait_for(lambda: _reports(study_dir) >= 2, 60)
        os.killpg(launch.pid, signal.SIGINT)
        out, _ = launch.communicate(timeout=60)
    finally:
        launch.kill()
    assert "stopping: running trials suspend" in out
    assert open_study(study_dir).record.state is StudyState.STOPPED


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["launch", "missing.toml", "--local"], "missing.toml"),
        (["status", "."], "is not a study directory"),
        (["resume", "nowhere", "--local"], "is not a study directory"),
        (["stop", "nowhere"], "is not a study directory"),
    ],
)
def test_bad_input_exits_with_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_hpctune(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_launch_refuses_an_existing_study_directory(tmp_path: Path) -> None:
    spec = _slow_study(tmp_path)
    (tmp_path / "study").mkdir()
    result = run_hpctune("launch", str(spec), "--local")
    assert result.returncode == 2
    assert "exists already" in result.stderr
    assert "hpctune resume" in result.stderr


def test_launch_checks_the_entry_point_function(tmp_path: Path) -> None:
    spec = write_study(tmp_path, train="def other(ctx):\n    pass\n", space={"x": 1.0})
    result = run_hpctune("launch", str(spec), "--local")
    assert result.returncode == 2
    assert "study.entry_point" in result.stderr
    assert "'train'" in result.stderr
    assert not (tmp_path / "study").exists()
