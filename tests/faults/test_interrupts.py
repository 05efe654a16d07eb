"""Issue 13, items 5 and 6: Ctrl-C and a second Ctrl-C in the foreground.

Before: Ctrl-C exited 0 with a resume hint lacking ``--local``, and the workers a second Ctrl-C
killed counted against ``max_retries`` when the study was resumed (with ``max_retries = 0`` the
trials failed for good).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctune.api import Study, open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import (
    count_reports,
    kill_workers,
    run_hpctune,
    start_hpctune,
    wait_for,
    write_study,
)

FAULTY = Path(__file__).with_name("faulty.py")


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, str]]:
    folder = tmp_path_factory.mktemp("interrupts")
    spec = write_study(
        folder,
        train=FAULTY,
        max_steps=6,
        num_trials=2,
        max_retries=0,
        space={"x": 1.0, "behaviour": "hang_once", "checkpoint": True},
    )
    study_dir = folder / "study"
    launch = start_hpctune("launch", str(spec), "--local")
    try:  # both trials hang in step 3: a stop cannot reach them before they report again
        assert wait_for(lambda: count_reports(study_dir) >= 4, 120)
        os.killpg(launch.pid, signal.SIGINT)  # Ctrl-C: stop cooperatively
        assert wait_for(lambda: open_study(study_dir).record.state is StudyState.STOPPING, 60)
        os.killpg(launch.pid, signal.SIGINT)  # and again: kill the workers
        out, _ = launch.communicate(timeout=120)
        yield study_dir, launch.returncode, out
    finally:
        launch.kill()
        kill_workers(study_dir)


def test_ctrl_c_exits_130_with_the_exact_resume_command(
    interrupted: tuple[Path, int, str],
) -> None:
    study_dir, code, out = interrupted
    assert code == 130, out
    assert f"resume with `hpctune resume {study_dir} --local`" in out
    assert f"resume with: hpctune resume {study_dir} --local" in out
    assert open_study(study_dir).record.state is StudyState.STOPPED


def test_operator_aborts_never_count_as_retries(interrupted: tuple[Path, int, str]) -> None:
    study_dir, _, _ = interrupted
    before: Study = open_study(study_dir)
    killed = [s for s in before.record.segments.values() if s.reason.startswith("killed on")]
    assert killed, "the second Ctrl-C killed no running segment"
    assert all(t.retries == 0 for t in before.trials)
    result = run_hpctune("resume", str(study_dir), "--local")
    assert result.returncode == 0, result.stdout + result.stderr
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    for trial in study.trials:
        assert trial.status is TrialStatus.COMPLETED
        assert trial.retries == 0
        assert study.curve(trial.trial_id).steps.tolist() == list(range(1, 7))
        assert study.record.segments[trial.segments[-1]].start_step == 2  # its checkpoint
