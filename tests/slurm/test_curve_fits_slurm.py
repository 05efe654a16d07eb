"""Learning-curve fits as Slurm job arrays on the local cluster: the same predictions as in-process
fits for the same seeds; a task that dies is resubmitted once, then its fits are unknown.

Needs ``tests/slurm/cluster.sh up`` first (docs/slurm-dev-cluster.md).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from hpctune.curves import Budget, FitOptions, fit_many
from hpctune.curves.options import CurvesSpec
from hpctune.curves.service import CurveService, FitJob, FitResult, read_result
from hpctune.slurm.curve_fits import SlurmArrayBackend, curve_job_parameters
from hpctune.slurm.options import JobOptions
from tests.slurm.conftest import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(150)]

OPTIONS = FitOptions(
    model="domhan", budget=Budget(nwalkers=40, nsamples=200, burn_in=100), n_keep=100
)


def _jobs(folder: Path) -> list[FitJob]:
    rng = np.random.default_rng(1)
    jobs = []
    for trial in range(4):
        x = np.arange(1, 6 + 2 * trial + 1)
        y = 0.95 - 0.7 * x ** -(0.4 + 0.2 * trial) + rng.normal(0, 0.01, x.size)
        jobs.append(
            FitJob.build(folder, trial, y, x_max=30, bounds=(0.0, 1.0), mode="max", study_seed=11)
        )
    loss = 2.0 - 1.4 * (1 - np.exp(-np.arange(1, 10) / 4)) + rng.normal(0, 0.02, 9)
    jobs.append(
        FitJob.build(folder, 4, loss, x_max=30, bounds=(0.0, 2.5), mode="min", study_seed=11)
    )
    return jobs


def _service(folder: Path, backend: SlurmArrayBackend) -> CurveService:
    # task_seconds 1 with 0.4 s per fit: two curves per array task
    service = CurveService(
        folder,
        CurvesSpec(backend="slurm", task_seconds=1.0),
        OPTIONS,
        jobs_backend=lambda: backend,
    )
    service.fit_seconds = 0.4
    return service


def _collect(service: CurveService, count: int, timeout: float) -> list[FitResult]:
    results: list[FitResult] = []
    deadline = time.monotonic() + timeout
    while len(results) < count and time.monotonic() < deadline:
        results += service.poll()
        time.sleep(0.2)
    return results


def test_array_fits_equal_in_process_fits_for_the_same_seeds(
    slurm_cluster: SlurmCluster, submitit_folder: Path, tmp_path: Path
) -> None:
    parameters = curve_job_parameters(
        "test", JobOptions(partition="debug"), CurvesSpec(task_seconds=1.0)
    )
    backend = SlurmArrayBackend(submitit_folder, parameters, OPTIONS, poll_interval=0.5)
    service = _service(tmp_path / "curves", backend)
    jobs = _jobs(tmp_path / "curves")
    for job in jobs:
        service.request(job)
    assert service.poll() == []  # submitted, not waited for
    tasks = backend.job_ids()
    assert len(tasks) == 3  # 5 curves, 2 per task: one array of 3 tasks
    assert len({t.split("_")[0] for t in tasks}) == 1
    assert all("_" in t for t in tasks)
    try:
        results = _collect(service, len(jobs), 100)
    finally:
        service.close()
    assert sorted(r.trial_id for r in results) == list(range(5))
    for result in results:
        job = jobs[result.trial_id]
        assert result.backend == "slurm"
        loaded = read_result(Path(job.path))
        assert loaded is not None
        assert loaded[1]["slurm_job_id"] is not None
        assert not result.prediction.unknown
        expected = fit_many([job.request], OPTIONS)[0]  # in this process, same seed
        assert result.prediction.to_dict() == expected.to_dict()


def test_a_task_that_dies_is_resubmitted_once_then_unknown(
    slurm_cluster: SlurmCluster, submitit_folder: Path, tmp_path: Path
) -> None:
    dying = JobOptions(partition="debug", setup=("exit 3",))  # the job ends before Python
    parameters = curve_job_parameters("test", dying, CurvesSpec(task_seconds=1.0))
    backend = SlurmArrayBackend(submitit_folder, parameters, OPTIONS, poll_interval=0.5)
    service = _service(tmp_path / "curves", backend)
    job = _jobs(tmp_path / "curves")[0]
    service.request(job)
    service.poll()
    first = backend.job_ids()
    try:
        results = _collect(service, 1, 100)
        assert backend.job_ids() == []
    finally:
        service.close()
    assert len(first) == 1
    (result,) = results
    assert result.prediction.unknown
    assert "ended without its result" in result.prediction.reason
    assert result.backend == "controller"
    assert service.submitted == 2  # the first attempt and one resubmission
    loaded = read_result(Path(job.path))
    assert loaded is not None
    assert loaded[0].unknown
