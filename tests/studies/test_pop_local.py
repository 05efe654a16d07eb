"""POP end to end on the local executor with the digits example (real PyTorch, real curve fits):
a trial that does not learn is killed at its first boundary, opportunistic trials are suspended
at boundaries and resumed from their checkpoints, and the study finishes."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.study.states import SegmentStatus, StudyState, TrialStatus
from tests.browser import open_report
from tests.conftest import DIGITS, run_hpctune, write_study

LR = [0.0, 0.01, 0.05, 0.2, 0.3]  # lr 0 never learns: its accuracy stays where it started
MAX_STEPS = 12
BOUNDARY = 3


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_pop_study_kills_poor_suspends_and_resumes_from_checkpoints(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=DIGITS / "train.py",
        space={
            "hidden": 32,
            "layers": 1,
            "dropout": 0.0,
            "momentum": 0.9,
            "weight_decay": 1e-5,
            "batch_size": 64,
            "activation": "relu",
            "lr": LR,
        },
        generator={"name": "grid"},
        policy={"name": "pop", "boundary": BOUNDARY, "target": 0.97, "kill_threshold": 0.3},
        resources={"slots": 2},
        metric="val_accuracy",
        max_steps=MAX_STEPS,
        num_trials=len(LR),
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    result = run_hpctune("launch", str(spec), "--local", timeout=360, check=True)
    assert "best configuration:" in result.stdout

    study = open_study(study_dir)
    record = study.record
    assert record.state is StudyState.FINISHED
    by_lr = {t.params["lr"]: t for t in study.trials}
    assert sorted(by_lr) == sorted(LR)

    # poor: lr 0 has not passed the kill threshold at its first boundary
    dead = by_lr[0.0]
    assert dead.status is TrialStatus.TERMINATED
    assert study.curve(dead.trial_id).steps.tolist() == list(range(1, BOUNDARY + 1))
    assert any("kill threshold" in record.segments[s].reason for s in dead.segments)

    # opportunistic trials yielded their slot at a boundary and resumed from that checkpoint
    resumed = 0
    for trial in study.trials:
        segments = [record.segments[s] for s in trial.segments]
        for before, after in itertools.pairwise(segments):
            if before.status is SegmentStatus.SUSPENDED:
                assert before.end_step is not None
                assert before.end_step % BOUNDARY == 0
                assert after.start_step == before.end_step
                assert after.checkpoint_row is not None
                assert record.checkpoints[after.checkpoint_row].step == before.end_step
                resumed += 1
    assert resumed >= 2

    # every learning trial ran to the end or was judged poor; curves have no gap or repeat
    for lr, trial in by_lr.items():
        if lr == 0.0:
            continue
        steps = study.curve(trial.trial_id).steps.tolist()
        assert steps == list(range(1, len(steps) + 1))
        if trial.status is TrialStatus.COMPLETED:
            assert len(steps) == MAX_STEPS
        else:
            assert trial.status is TrialStatus.TERMINATED
    assert sum(t.status is TrialStatus.COMPLETED for t in study.trials) >= 1
    best = study.best_trial()
    assert best is not None
    assert study.best_value(best.trial_id) >= 0.9

    # POP acted on learning-curve predictions that the controller journaled
    assert len(record.predictions) >= 2
    # the report shows POP's pools over time and the predictions (headless Chromium)
    run_hpctune("report", str(study_dir), "--out", str(tmp_path / "report"), check=True)
    load = open_report(tmp_path / "report" / "index.html", tmp_path / "shots")
    assert (load.errors, load.failed) == ([], [])
    assert load.plots["pools"] == 1
    assert "curve model" in (tmp_path / "report" / "index.html").read_text()
    status = run_hpctune("status", str(study_dir), check=True).stdout
    assert re.search(r"policy pop: \d+ trials? terminated before the end, \d+ suspensions", status)
