"""Issue 13, items 2 and 5: metric names and honest end states, on one real local study.

One grid study runs a trial per fault (one worker process each, the real CLI); each test checks
the end its fault must have. On the code before issue 13 the metric names crashed the
controller's commit, the early return ended ``completed``, KeyboardInterrupt killed the worker
without a traceback and the crashed worker's reason named no exit code.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from hpctune.api import Study, open_study
from hpctune.backends import LocalExecutor, WorkerState
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import launch_local, run_hpctune, wait_for, write_study
from tests.faults.faulty import NAMES

FAULTY = Path(__file__).with_name("faulty.py")
BEHAVIOURS = ["names", "empty_name", "long_name", "early", "keyboard", "exit"]
MAX_STEPS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Study, str]:
    folder = tmp_path_factory.mktemp("end-states")
    spec = write_study(
        folder,
        train=FAULTY,
        max_steps=MAX_STEPS,
        num_trials=len(BEHAVIOURS),
        max_retries=0,
        generator={"name": "grid"},
        space={"behaviour": BEHAVIOURS, "x": 1.0},
    )
    result = launch_local(spec)
    assert result.returncode == 0, result.stdout + result.stderr
    return open_study(folder / "study"), result.stdout


def _trial(study: Study, behaviour: str) -> int:
    return BEHAVIOURS.index(behaviour)


def test_metric_names_users_type_are_kept(run: tuple[Study, str]) -> None:
    study, _ = run
    assert study.record.state is StudyState.FINISHED
    trial = study.trial(_trial(study, "names"))
    assert trial.status is TrialStatus.COMPLETED
    assert set(NAMES) <= set(study.metric_names())
    for i, name in enumerate(NAMES):
        curve = study.curve(trial.trial_id, name)
        expected = [s / MAX_STEPS + i for s in range(1, MAX_STEPS + 1)]
        assert curve.steps.tolist() == list(range(1, MAX_STEPS + 1)), name
        assert np.allclose(curve.values, expected), name
    assert set(NAMES) <= set(study.metrics_frame().columns)
    status = run_hpctune("status", str(study.directory), "--json", check=True)
    trials = json.loads(status.stdout)["trials"]
    assert trials[trial.trial_id]["status"] == "completed"


@pytest.mark.parametrize("behaviour", ["empty_name", "long_name"])
def test_an_invalid_metric_name_fails_only_its_trial(
    run: tuple[Study, str], behaviour: str
) -> None:
    study, _ = run
    trial = study.trial(_trial(study, behaviour))
    assert trial.status is TrialStatus.FAILED
    assert "ctx.report(step=2)" in trial.reason
    assert "metric name" in trial.reason
    assert "200 characters" in trial.reason
    assert study.record.state is StudyState.FINISHED  # the controller went on
    assert study.curve(trial.trial_id).steps.tolist() == [1]


def test_a_function_returning_early_ends_ended_early(run: tuple[Study, str]) -> None:
    study, out = run
    trial = study.trial(_trial(study, "early"))
    assert trial.status is TrialStatus.ENDED_EARLY
    assert trial.step == 2
    assert "step 2 of 4" in trial.reason
    assert f"trial {trial.trial_id} ended early" in out  # a warning on the terminal
    codes = [(w.code, w.trial) for w in study.record.warnings]
    assert ("ended_early", trial.trial_id) in codes
    status = run_hpctune("status", str(study.directory), check=True).stdout
    assert "ended_early" in status
    assert f"warning: trial {trial.trial_id} ended early" in status


def test_keyboard_interrupt_in_training_keeps_its_traceback(run: tuple[Study, str]) -> None:
    study, _ = run
    trial = study.trial(_trial(study, "keyboard"))
    assert trial.status is TrialStatus.FAILED
    assert trial.reason == "KeyboardInterrupt"
    assert "raise KeyboardInterrupt" in trial.error
    assert 'train.py", line' in trial.error
    err = study.directory / "logs" / "trials" / f"trial-{trial.trial_id:06d}.err"
    assert "KeyboardInterrupt" in err.read_text()
    segment = study.record.segments[trial.segments[-1]]
    worker = study.record.workers[segment.worker_id]
    later = [
        s
        for s in study.record.segments.values()
        if s.worker_id == worker.worker_id and s.segment_id > segment.segment_id
    ]
    # it survived it: it ended cleanly, or went on to train another trial (which may be the
    # one whose process exits with code 3)
    assert worker.state == "exited" or later, (worker.state, worker.reason)


def test_a_crashed_worker_names_its_exit_code(run: tuple[Study, str]) -> None:
    study, _ = run
    trial = study.trial(_trial(study, "exit"))
    assert trial.status is TrialStatus.FAILED
    segment = study.record.segments[trial.segments[-1]]
    assert "its process exited with code 3" in segment.reason
    assert "exited with code 3" in trial.reason
    worker = study.record.workers[segment.worker_id]
    assert worker.reason == "its process exited with code 3"


def test_a_killed_worker_names_its_signal(tmp_path: Path) -> None:
    """The local executor tells how a worker it started ended (a real worker process)."""
    (tmp_path / "workers").mkdir()
    executor = LocalExecutor(tmp_path)
    info = executor.start(["w0000"])["w0000"]
    os.kill(int(info["pid"]), signal.SIGKILL)
    assert wait_for(lambda: executor.state("w0000", info) is WorkerState.GONE, 30)
    reason = executor.end_reason("w0000", info)
    assert reason.startswith("its process was killed by SIGKILL (signal 9)")
