"""Issue 13, item 4: watchdogs, so that a study cannot hang forever.

Before: one failed write of an assignment file left its trial ``assigned`` while the worker sat
idle with a fresh heartbeat, and a training function that never reported again held its slot
for good (there was no report timeout).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.controller.launch import create_study
from hpctune.spec import load_spec
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import kill_workers, launch_local, start_hpctune, wait_for, write_study

FAULTY = Path(__file__).with_name("faulty.py")


def test_an_assignment_file_that_was_not_written_is_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCTUNE_ASSIGNMENT_TIMEOUT", "1")
    spec = write_study(
        tmp_path, train=FAULTY, max_steps=3, num_trials=1, resources={"slots": 1}, space={"x": 1}
    )
    paths = create_study(load_spec(spec))
    blocker = paths.assignment("w0000")  # a directory where the file must go: writes fail
    blocker.mkdir(parents=True)
    log = paths.controller_log
    process = start_hpctune("resume", str(paths.root), "--local")
    try:
        assert wait_for(lambda: log.exists() and "re-sending it" in log.read_text(), 120)
        assert "could not write a file after commit" in log.read_text()
        shutil.rmtree(blocker)  # the disk has room again
        out, _ = process.communicate(timeout=120)
    finally:
        process.kill()
        kill_workers(paths.root)
    assert process.returncode == 0, out
    study = open_study(paths.root)
    assert study.record.state is StudyState.FINISHED
    trial = study.trial(0)
    assert trial.status is TrialStatus.COMPLETED
    assert trial.retries == 0
    assert [study.record.segments[s].worker_id for s in trial.segments] == ["w0000"]


def test_a_trial_that_stops_reporting_is_ended_and_frees_its_slot(tmp_path: Path) -> None:
    spec = write_study(
        tmp_path,
        train=FAULTY,
        max_steps=4,
        num_trials=2,
        report_timeout=2,
        resources={"slots": 1},
        space={"x": 1.0, "behaviour": "hang_once"},
    )
    result = launch_local(spec)
    assert result.returncode == 0, result.stdout + result.stderr
    study = open_study(tmp_path / "study")
    assert study.record.state is StudyState.FINISHED
    for trial in study.trials:  # each hung once in step 3, was ended, and ran again
        assert trial.status is TrialStatus.COMPLETED
        assert trial.retries == 1
        hung = study.record.segments[trial.segments[0]]
        assert hung.reason.startswith("no report for 2 s (report_timeout); worker w")
        assert hung.end_step is None
        assert study.record.workers[hung.worker_id].state == "lost"
        assert study.curve(trial.trial_id).steps.tolist() == [1, 2, 3, 4]
    queued = [h for h in study.trial(0).history if h.status is TrialStatus.QUEUED]
    assert any("no report for 2 s" in h.reason for h in queued)
