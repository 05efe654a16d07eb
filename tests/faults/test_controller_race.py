"""Two controllers on one study end with exactly one committing controller, a readable journal
and no duplicate metric row (issue 13): one repetition of each local race; the Slurm one is in
``tests/slurm/test_controller_race_slurm.py`` and ``benchmarks/controller_race.py`` repeats them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import races


@pytest.mark.slow
def test_two_resumes_a_moment_apart_leave_one_controller(tmp_path: Path) -> None:
    outcome = races.resume_resume(tmp_path)
    assert outcome.ok, outcome.explain()
    assert outcome.refused == 1, outcome.explain()  # told who holds the lease


@pytest.mark.slow
def test_a_stopped_controller_past_its_heartbeat_age_keeps_the_study(tmp_path: Path) -> None:
    # the built-in 30 s: a stopped (Ctrl-Z) foreground controller on this host is alive
    outcome = races.sigstop(tmp_path)
    assert outcome.ok, outcome.explain()
    assert outcome.refused == 1, outcome.explain()
    assert "it may be stopped (Ctrl-Z)" in outcome.outputs[0], outcome.explain()


@pytest.mark.slow
def test_resume_force_fences_a_stopped_controller(tmp_path: Path) -> None:
    outcome = races.sigstop(tmp_path, lease_timeout=1.0, force=True)
    assert outcome.ok, outcome.explain()
    assert outcome.fenced == 1, outcome.explain()  # the continued one stopped at once
