"""Trials resized between rungs (issue 18, item 5): `[resources] max_devices` lets the elastic
plan give a stage's trials more devices; the controller starts workers of that size, lets the
idle workers of the old size go, and a resized trial goes on from its rung checkpoint with
`ctx.devices` set to its new size. Its curve continues exactly: every step reported once, each
value the one training on from the checkpoint gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpctune.api import open_study
from hpctune.elastic.follow import plan_study
from hpctune.journal.usage import study_usage
from hpctune.spec import load_spec
from hpctune.study.states import StudyState, WorkerLife
from tests.conftest import run_hpctune, write_study

# Each step adds x to a running total kept in the checkpoint, and takes 0.2 s on one device,
# 0.1 s on two (a fixed global batch over more devices); it reports the devices it trained on.
TRAIN = """
import time


def train(ctx):
    state = ctx.load_checkpoint()
    total = state["total"] if state else 0.0
    for step in range(ctx.start_step + 1, ctx.until_step + 1):
        time.sleep(0.2 / ctx.devices)
        total += ctx.params["x"] * step
        result = ctx.report(step=step, score=total, devices=ctx.devices)
        ctx.save_checkpoint({"total": total})
        if result.should_stop:
            return
"""

XS = [0.3, 0.8, 0.45, 0.9, 0.2, 0.7, 0.5, 0.6]

# Two devices halve a step and a worker starts in 0.05 s: with an 8 s deadline the plan runs
# SHA's last rung (one trial, steps 5-8) on a worker of two devices, the rungs before on one.
PROFILE = {
    "version": 1,
    "device": "cpu",
    "source": "tests/elastic/test_resize.py",
    "step_seconds": {"1": [0.4], "2": [0.2]},
    "segment_start": [0.1],
    "startup": [0.05],
    "queue_wait": {"1": [0.0], "2": [0.0]},
    "decision": [0.2],
    "checkpoint_save": [],
    "checkpoint_load": [],
}
PLANNED = [[1, 2], [1, 1], [1, 1], [2, 1]]  # [devices, workers] per stage


def _study(folder: Path, resources: dict[str, Any] | None = None, **changes: Any) -> Path:
    spec = write_study(
        folder,
        train=TRAIN,
        space={"x": XS},
        policy={"name": "sha", "reduction_factor": 2, "bracket_size": 8},
        resources={"slots": 4, "deadline": "8s", "profile": "profile.json", **(resources or {})},
        max_steps=8,
        num_trials=8,
        **changes,
    )
    (folder / "profile.json").write_text(json.dumps(PROFILE))
    return spec


def test_the_plan_sizes_trials_up_to_max_devices(tmp_path: Path) -> None:
    sized = plan_study(load_spec(_study(tmp_path, {"max_devices": 2})))
    assert [[s.devices, s.workers] for s in sized.plan.allocation.shapes] == PLANNED
    one = plan_study(load_spec(_study(tmp_path / "one")))  # max_devices = 1, the default
    assert {s.devices for s in one.plan.allocation.shapes} == {1}
    assert sized.plan.prediction.cost.mean < one.plan.prediction.cost.mean


def test_a_resized_trial_goes_on_from_its_checkpoint_on_a_worker_of_its_new_size(
    tmp_path: Path, cleanup_studies: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")  # the first plan, followed to the end
    path = _study(tmp_path, {"max_devices": 2})
    cleanup_studies.append(tmp_path / "study")
    done = run_hpctune("launch", str(path), "--local", check=True)
    assert "workers per stage 2, 1, 1, 1 (devices each 1, 1, 1, 2)" in done.stdout

    study = open_study(tmp_path / "study")
    record = study.record
    assert record.state is StudyState.FINISHED
    assert record.elastic_plan is not None
    assert record.elastic_plan["plan"]["plan"]["allocation"]["shapes"] == PLANNED

    # the last rung's trial trained steps 5-8 on a worker of two devices, all else on one
    last = [s for s in record.segments.values() if s.until_step == 8]
    assert len(last) == 1
    winner = last[0].trial_id
    assert record.workers[last[0].worker_id].devices == 2
    earlier = [s for s in record.segments.values() if s.until_step < 8]
    assert {record.workers[s.worker_id].devices for s in earlier} == {1}
    # the workers of one device left once the stage ran on two (told to, or out of work)
    assert all(w.state is WorkerLife.EXITED for w in record.workers.values() if w.devices == 1)

    # the plan's cost counts each worker's devices: the two-device worker's time twice
    usage = study_usage(record)
    held = sum(
        ((run.until or record.ended_time or 0.0) - run.since) * (worker.devices or 1)
        for worker in record.workers.values()
        for run in worker.runs
    )
    assert usage.device_s == pytest.approx(held)
    assert usage.device_s > usage.allocated_s
    assert usage.cpu_hours == pytest.approx(held / 3600)
    check_curves(study, winner)


def check_curves(study: Any, winner: int) -> None:
    """Every trial's curve has each step once, each value the one training on from its
    checkpoint gives (exactly); ``winner`` trained steps 1-4 on one device, 5-8 on two."""
    for trial_id, trial in study.record.trials.items():
        x = trial.params["x"]
        steps, values = study.curve(trial_id)
        assert steps.tolist() == list(range(1, trial.step + 1))
        total, expected = 0.0, []
        for step in steps.tolist():
            total += x * step
            expected.append(total)
        assert values.tolist() == expected  # exact: the checkpoint carried the total
    steps, devices = study.curve(winner, "devices")
    assert steps.tolist() == list(range(1, 9))
    assert devices.tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
