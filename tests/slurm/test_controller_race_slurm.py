"""A requeued controller job whose first run still runs (its node lost contact) takes the study
over on the real local Slurm cluster: the first run is fenced and exits, one controller commits,
the journal stays readable and no metric row is doubled (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import races

pytestmark = pytest.mark.slurm


@pytest.mark.slow
def test_a_requeued_controller_job_fences_its_first_run(tmp_path: Path, study_name: str) -> None:
    outcome = races.slurm_requeue(tmp_path, study_name)
    assert outcome.ok, outcome.explain()
    assert outcome.fenced == 1, outcome.explain()  # the first run stopped, saying why
