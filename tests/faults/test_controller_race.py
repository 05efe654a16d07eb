"""Two controllers on one study end with exactly one committing controller, a readable journal
and no duplicate metric row (issue 13): one repetition of each local race; the Slurm one is in
``tests/slurm/test_controller_race_slurm.py`` and ``benchmarks/controller_race.py`` repeats them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.controller.launch import create_study
from hpctune.spec import load_spec
from hpctune.study.states import StudyState
from tests.conftest import run_hpctune
from tests.faults import races


@pytest.mark.slow
def test_two_resumes_a_moment_apart_leave_one_controller(tmp_path: Path) -> None:
    outcome = races.resume_resume(tmp_path)
    assert outcome.ok, outcome.explain()
    assert outcome.refused == 1, outcome.explain()  # told who holds the lease


@pytest.mark.slow
def test_a_stopped_controller_past_its_heartbeat_age_keeps_the_study(tmp_path: Path) -> None:
    # a stopped (Ctrl-Z) foreground controller on this host is alive whatever its heartbeat's
    # age: a 3 s lease stands in for the built-in 30 s (benchmarks/controller_race.py runs that)
    outcome = races.sigstop(tmp_path, lease_timeout=3.0)
    assert outcome.ok, outcome.explain()
    assert outcome.refused == 1, outcome.explain()
    assert "it may be stopped (Ctrl-Z)" in outcome.outputs[0], outcome.explain()


@pytest.mark.slow
def test_resume_force_fences_a_stopped_controller(tmp_path: Path) -> None:
    outcome = races.sigstop(tmp_path, lease_timeout=1.0, force=True)
    assert outcome.ok, outcome.explain()
    assert outcome.fenced == 1, outcome.explain()  # the continued one stopped at once


def test_a_study_made_before_lease_epochs_resumes(tmp_path: Path) -> None:
    """A study directory of an older version (a real ``journal.zarr``, no epochs) is taken
    over: its journal becomes epoch 0's directory and the study finishes."""
    spec = races.make_study(tmp_path, directory=str(tmp_path / "study"))
    study = create_study(load_spec(spec)).root
    (study / "journal.zarr").unlink()
    (study / "journal-e00000000.zarr").rename(study / "journal.zarr")
    shutil.rmtree(study / "controller", ignore_errors=True)
    result = run_hpctune("resume", str(study), "--local")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (study / "journal.zarr").is_symlink()
    assert sorted(p.name for p in study.glob("journal-e*.zarr")) == [
        "journal-e00000000.zarr",
        "journal-e00000001.zarr",
    ]
    assert open_study(study).record.state is StudyState.FINISHED
