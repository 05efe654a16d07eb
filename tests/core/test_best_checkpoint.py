"""The checkpoint behind the reported best value is kept, also across a killed controller.

A real study whose metric peaks at step 3 of 8; the controller is SIGKILLed after both trials
passed the peak (their step-3 checkpoints would have been deleted by then without
``keep_checkpoints``) and the study is resumed by a new controller.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from hpctune.api import open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import run_hpctune, start_hpctune, wait_for, write_study

PEAKED = """
import time

def train(ctx):
    for step in range(ctx.start_step + 1, ctx.max_steps + 1):
        time.sleep(ctx.params["sleep"])
        score = ctx.params["x"] - 0.1 * (step - 3) ** 2
        ctx.report(step=step, score=score)
        ctx.save_checkpoint({"step": step, "x": ctx.params["x"]})
"""


def _past_peak(study_dir: Path) -> bool:
    try:
        trials = open_study(study_dir).trials
    except Exception:  # the journal is being created
        return False
    return len(trials) == 2 and all(t.step >= 5 for t in trials)


@pytest.mark.slow
def test_the_best_checkpoint_survives_collection_and_a_controller_restart(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=PEAKED,
        max_steps=8,
        num_trials=2,
        generator={"name": "grid"},
        space={"x": [1.0, 2.0], "sleep": 0.3},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    launch = start_hpctune("launch", str(spec), "--local")
    try:
        assert wait_for(lambda: _past_peak(study_dir), 90)
        os.kill(launch.pid, signal.SIGKILL)  # the controller only: its workers go on
        launch.wait(timeout=30)
    finally:
        launch.kill()
    mid = open_study(study_dir)
    assert mid.record.state is StudyState.RUNNING  # killed, not ended
    for trial in mid.trials:  # each trial's peak is kept while it may become the best
        steps = {c.step for c in mid.record.live_checkpoints(trial.trial_id)}
        assert 3 in steps

    run_hpctune("resume", str(study_dir), "--local", check=True)
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    assert study.record.controller_starts == 2
    best = study.best_trial()
    assert best is not None
    assert (best.params["x"], best.step, best.value) == (2.0, 3, pytest.approx(2.0))
    assert best.checkpoint is not None
    assert torch.load(best.checkpoint, weights_only=True) == {"step": 3, "x": 2.0}
    for trial in study.trials:
        assert trial.status is TrialStatus.COMPLETED
        folder = study_dir / "checkpoints" / f"trial-{trial.trial_id:06d}"
        files = sorted(p.name.split("-")[1] for p in folder.glob("*.pt"))
        # the best trial keeps its best and its last model; the other only its last
        assert files == (
            ["00000003", "00000008"] if trial.trial_id == best.trial_id else ["00000008"]
        )
