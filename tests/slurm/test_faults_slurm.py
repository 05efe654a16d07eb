"""Issue 13, item 5 on the real local Slurm cluster: a worker job that dies is named by how it
ended (sacct's state and exit code), not only "its process or job is gone"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpctune.study.states import TrialStatus
from tests.conftest import run_hpctune, write_study
from tests.slurm.test_hpctune_slurm import _wait_final

pytestmark = pytest.mark.slurm
FAULTY = Path(__file__).resolve().parent.parent / "faults" / "faulty.py"


def test_a_crashed_worker_job_is_named_by_its_state_and_exit_code(
    tmp_path: Path, study_name: str
) -> None:
    spec = write_study(
        tmp_path,
        train=FAULTY,
        name=study_name,
        num_trials=1,
        max_steps=3,
        max_retries=0,
        space={"behaviour": "exit", "x": 1.0},
        resources={"slots": 1},
        slurm={"partition": "debug", "time": 10},
    )
    run_hpctune("launch", str(spec), check=True)
    study = _wait_final(tmp_path / "study", 240)
    trial = study.trial(0)
    assert trial.status is TrialStatus.FAILED
    segment = study.record.segments[trial.segments[-1]]
    assert re.search(r"its job \d+ ended FAILED with exit code 3", segment.reason), segment.reason
