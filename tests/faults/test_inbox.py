"""Issue 13, item 3: the inbox checks every command, and `stop` needs a controller.

Before: ``{"command": "stop_trial", "trial": "abc"}`` (or ``null``) crashed the controller at
every resume until deleted by hand, non-object files sat in the inbox forever, and `hpctune
stop` of a study that was not running exited 0 and left a command that stopped the next resume
at once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.controller.launch import create_study
from hpctune.spec import load_spec
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import kill_workers, run_hpctune, write_study

FAULTY = Path(__file__).with_name("faulty.py")
GARBAGE = {
    "a-text-trial.json": b'{"command": "stop_trial", "trial": "abc"}',
    "b-null-trial.json": b'{"command": "stop_trial", "trial": null}',
    "c-no-trial.json": b'{"command": "stop_trial", "trial": 99}',
    "d-list.json": b"[1, 2]",
    "e-unknown.json": b'{"command": "reboot"}',
    "f-not-json.json": b"stop please",
    "g-bad-retry.json": b'{"command": "retry", "trials": [0]}',
}


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("inbox")
    spec = write_study(folder, train=FAULTY, max_steps=2, num_trials=2, space={"x": 1.0})
    paths = create_study(load_spec(spec))
    old = time.time() - 60  # written long ago: not a file still being written
    for name, data in GARBAGE.items():
        (paths.inbox / name).write_bytes(data)
        os.utime(paths.inbox / name, (old, old))
    (paths.inbox / "z-stop.json").write_text(json.dumps({"command": "stop"}))
    try:
        yield paths.root
    finally:
        kill_workers(paths.root)


def test_bad_inbox_files_are_rejected_and_shown(study_dir: Path) -> None:
    result = run_hpctune("resume", str(study_dir), "--local")
    assert result.returncode == 0, result.stdout + result.stderr
    study = open_study(study_dir)
    assert study.record.state is StudyState.STOPPED  # the good command after them worked
    rejected = {c.file: c.reason for c in study.record.rejected_commands}
    assert set(rejected) == set(GARBAGE)
    assert "must be a trial id (an integer), but got 'abc'" in rejected["a-text-trial.json"]
    assert "but got None" in rejected["b-null-trial.json"]
    assert "names no trial" in rejected["c-no-trial.json"]
    assert "must be a JSON object" in rejected["d-list.json"]
    assert "unknown command 'reboot'; known commands: stop" in rejected["e-unknown.json"]
    assert "not JSON" in rejected["f-not-json.json"]
    assert "'trials' entry 0 names no trial of the study" in rejected["g-bad-retry.json"]
    inbox = study_dir / "inbox"
    assert sorted(p.name for p in inbox.glob("*.json")) == []
    for name, data in GARBAGE.items():
        assert (inbox / "rejected" / name).read_bytes() == data
        reason = (inbox / "rejected" / f"{name}.reason.txt").read_text()
        assert reason.strip() == rejected[name]
    status = run_hpctune("status", str(study_dir), check=True).stdout
    assert "rejected inbox file a-text-trial.json (see inbox/rejected/)" in status
    rejected_json = json.loads(run_hpctune("status", str(study_dir), "--json").stdout)
    assert len(rejected_json["study"]["rejected_commands"]) == len(GARBAGE)
    assert "inbox file d-list.json rejected" in (study_dir / "logs/controller.log").read_text()


def test_stop_of_a_study_that_is_not_running_is_refused(study_dir: Path) -> None:
    result = run_hpctune("stop", str(study_dir))
    assert result.returncode == 2
    assert "no controller is running" in result.stderr
    assert "nothing to stop" in result.stderr
    assert list((study_dir / "inbox").glob("*.json")) == []
    result = run_hpctune("resume", str(study_dir), "--local")  # not stopped at once
    assert result.returncode == 0, result.stdout + result.stderr
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    assert all(t.status is TrialStatus.COMPLETED for t in study.trials)
