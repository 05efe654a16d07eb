"""Issue 13, item 6: transient faults stay transient.

A real full disk: the studies run in a 16 MiB tmpfs of a private mount namespace, filled with a
file until the kernel answers ENOSPC (``benchmarks/_tmpfs.py``). Before: a full disk crashed the
controller with a raw ``OSError`` and failed the running trials for good. A checkpoint that does
not match the journal failed its trial with no way to run it again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks._tmpfs import tmpfs_command
from hpctune.api import open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import REPO, hpctune_env, kill_workers, run_hpctune, write_study

FAULTY = Path(__file__).with_name("faulty.py")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    mount = tmp_path_factory.mktemp("tmpfs")
    command = tmpfs_command(mount, 16, [sys.executable, "-m", "tests.faults._storage_driver"])
    result = subprocess.run(
        [*command, str(mount)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=hpctune_env(),
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_a_disk_full_for_a_while_fails_no_trial(full_disk: dict[str, Any]) -> None:
    run = full_disk["temporary"]
    assert run["code"] == 0, run["out"]
    assert run["state"] == "finished"
    assert any("(ENOSPC)" in reason for reason in run["segment_reasons"]), run
    assert "storage" in run["warnings"]  # writes failed, assignments paused, then went on
    for trial in run["trials"]:
        assert trial["status"] == "completed"
        assert trial["retries"] == 0
        assert trial["steps"] == list(range(1, 9))
        assert trial["missing_rows"] == 0


def test_a_disk_full_for_good_ends_with_a_clear_message(full_disk: dict[str, Any]) -> None:
    run = full_disk["lasting"]
    assert run["code"] == 1, run["out"]
    assert "error: writes to" in run["out"]
    assert "kept failing for" in run["out"]
    assert "(tmpfs) has" in run["out"]
    assert "free and the study needs at least" in run["out"]
    assert "no trial was failed" in run["out"]
    assert "Traceback" not in run["out"]
    assert run["resume_code"] == 0, run["resume_out"]
    assert run["state"] == "finished"
    assert all(t["status"] == "completed" and t["retries"] == 0 for t in run["trials"])


def test_retry_runs_a_failed_trial_again_past_a_corrupt_checkpoint(tmp_path: Path) -> None:
    spec = write_study(
        tmp_path,
        train=FAULTY,
        max_steps=4,
        num_trials=1,
        space={"x": 1.0, "checkpoint": True, "behaviour": "fail_once"},
    )
    study_dir = tmp_path / "study"
    try:  # the trial fails in step 3, its checkpoint at step 2
        run_hpctune("launch", str(spec), "--local", check=True)
        before = open_study(study_dir)
        assert before.trial(0).status is TrialStatus.FAILED
        checkpoint = before.checkpoint_path(0)
        assert checkpoint is not None
        data = bytearray(checkpoint.read_bytes())
        data[len(data) // 2] ^= 0xFF  # and its checkpoint is corrupt
        checkpoint.write_bytes(bytes(data))
        retry = run_hpctune("retry", str(study_dir), "--failed")
        assert retry.returncode == 0, retry.stdout + retry.stderr
        assert f"hpctune resume {study_dir}" in retry.stdout
        run_hpctune("resume", str(study_dir), "--local", check=True)
    finally:
        kill_workers(study_dir)
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    trial = study.trial(0)
    assert trial.status is TrialStatus.COMPLETED
    assert trial.retries == 0
    last = study.record.segments[trial.segments[-1]]
    assert last.start_step == 0  # the corrupt checkpoint was skipped: from the start
    assert study.curve(0).steps.tolist() == [1, 2, 3, 4]
    again = run_hpctune("retry", str(study_dir), "--failed")
    assert again.returncode == 2
    assert "no trial has failed" in again.stderr
