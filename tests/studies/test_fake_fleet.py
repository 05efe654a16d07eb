"""Studies on a fake fleet (workers writing the real files from one loop,
:mod:`hpctune.testing.fake_workers`) whose controller dies: 2,000 trials on 200 workers with the
controller SIGKILLed five times at random moments (every metric row in the journal exactly
once), and a controller that dies while it submits its workers."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.controller.launch import create_study
from hpctune.spec import load_spec
from hpctune.study.states import StudyState, TrialStatus
from hpctune.testing.fake_workers import FakeFleet, score
from tests.conftest import WORKLOADS, write_study

TRIALS, WORKERS, STEPS = 2000, 200, 3


def _controller(root: Path, *options: str) -> subprocess.Popen[str]:
    command = [sys.executable, str(WORKLOADS / "fake_fleet_controller.py"), str(root), *options]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _study(folder: Path, trials: int, workers: int) -> tuple[Path, FakeFleet]:
    spec = write_study(
        folder,
        train="def train(ctx):\n    pass\n",  # never run: the fleet trains
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        num_trials=trials,
        max_steps=STEPS,
        resources={"slots": workers},
    )
    root = create_study(load_spec(spec)).root
    return root, FakeFleet(root)


@contextlib.contextmanager
def _training(fleet: FakeFleet) -> Iterator[None]:
    """The fleet's workers train (in a thread) while the block runs."""
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            if fleet.paths.workers.is_dir():
                fleet.tick()
            time.sleep(0.1)  # a worker polls its assignment file every 0.1 s

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    try:
        yield
    finally:
        stop.set()
        trainer.join()


def _check_rows(root: Path, trials: int) -> None:
    """Every trial completed, with steps 1..STEPS once each and the fleet's values."""
    study = open_study(root)
    assert study.record.state is StudyState.FINISHED, study.record.reason
    assert len(study.trials) == trials  # no trial created twice
    assert all(t.status is TrialStatus.COMPLETED for t in study.trials)
    frame = study.metrics_frame()
    assert len(frame) == trials * STEPS  # no valid row lost or duplicated
    for trial_id, rows in frame.groupby("trial"):
        assert rows.step.tolist() == list(range(1, STEPS + 1)), trial_id
        params = study.record.trials[int(trial_id)].params
        assert rows.score.tolist() == [score(params, s) for s in range(1, STEPS + 1)]


def test_a_controller_that_died_submitting_its_workers_is_resumed(tmp_path: Path) -> None:
    """Workers journaled as created but never started (the controller died in the middle of
    submitting them) are let go by the next controller, which starts others: the study ends
    finished, not failed for workers that "died before their first heartbeat"."""
    root, fleet = _study(tmp_path, 12, 4)
    dead = _controller(root, "--die-submitting")
    assert dead.wait(timeout=120) == 137
    assert len(open_study(root).record.workers) == 4  # created, none started
    with _training(fleet):
        process = _controller(root)
        out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    _check_rows(root, 12)


@pytest.mark.slow
def test_two_thousand_trials_on_two_hundred_workers_survive_five_controller_kills(
    tmp_path: Path,
) -> None:
    root, fleet = _study(tmp_path, TRIALS, WORKERS)
    rng = random.Random(int(os.environ.get("HPCTUNE_KILL_SEED", "20261125")))
    kills = 0
    process = _controller(root)
    try:
        with _training(fleet):
            for _ in range(5):
                target = fleet.steps + rng.randint(200, 800)
                while process.poll() is None and fleet.steps < target:
                    time.sleep(0.01)
                time.sleep(rng.uniform(0.0, 0.3))
                if process.poll() is not None:
                    break
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
                kills += 1
                process = _controller(root)
            out, _ = process.communicate(timeout=900)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out
    assert kills == 5, "the study ended before the controller was killed five times"
    assert open_study(root).record.controller_starts >= 2
    _check_rows(root, TRIALS)
