"""The fit service: newest request wins, one fit per trial, retries, unknown results, the pool."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from hpctune.curves import Budget, FitOptions, fit_many
from hpctune.curves.options import CurvesSpec, parse_curves
from hpctune.curves.predict import CurvePrediction
from hpctune.curves.service import (
    CurveService,
    FitBackend,
    FitJob,
    curve_fit_seed,
    read_result,
    result_path,
    run_fit_task,
)
from hpctune.errors import StudySpecError

SMALL = FitOptions(model="domhan", budget=Budget(nwalkers=32, nsamples=100, burn_in=50), n_keep=64)


def _job(folder: Path, trial: int, n: int, a: float = 0.5) -> FitJob:
    x = np.arange(1, n + 1)
    return FitJob.build(
        folder,
        trial,
        0.9 - 0.6 * x**-a,
        x_max=20,
        bounds=(0.0, 1.0),
        mode="max",
        study_seed=7,
    )


class FakeBackend(FitBackend):
    """Runs nothing by itself: the test finishes or fails submitted jobs by hand."""

    name = "fake"

    def __init__(self) -> None:
        self.submitted: list[FitJob] = []
        self.live: list[FitJob] = []
        self.finish: list[FitJob] = []
        self.fail: list[FitJob] = []

    def submit(self, jobs: list[FitJob], per_task: int) -> list[tuple[FitJob, str]]:
        self.submitted += jobs
        self.live += jobs
        return []

    def poll(self) -> tuple[list[FitJob], list[tuple[FitJob, str]]]:
        done, self.finish = self.finish, []
        failed, self.fail = [(j, "job died") for j in self.fail], []
        self.live = [j for j in self.live if j not in done and j not in [f for f, _ in failed]]
        return done, failed

    def in_flight(self) -> int:
        return len(self.live)


def _service(folder: Path, backend: FitBackend, workers: int = 4) -> CurveService:
    service = CurveService(folder, CurvesSpec(workers=workers), SMALL)
    service.pool = backend
    return service


def test_newest_request_wins_and_a_trial_has_one_fit_in_flight(tmp_path: Path) -> None:
    fake = FakeBackend()
    service = _service(tmp_path, fake)
    service.request(_job(tmp_path, 0, 3))
    service.request(_job(tmp_path, 1, 3))
    assert service.poll() == []
    assert [(j.trial_id, j.n) for j in fake.submitted] == [(0, 3), (1, 3)]
    # trial 0 grows twice while its fit runs: only the newest request waits
    service.request(_job(tmp_path, 0, 4))
    service.request(_job(tmp_path, 0, 5))
    service.request(_job(tmp_path, 1, 3))  # the same curve as in flight: nothing to do
    service.poll()
    assert len(fake.submitted) == 2
    assert {t: j.n for t, j in service.pending.items()} == {0: 5}
    # trial 0's fit finishes: its file is read, and the waiting request goes out
    first = fake.submitted[0]
    run_fit_task([first], SMALL, "fake")
    fake.finish.append(first)
    results = service.poll()
    assert [(r.trial_id, r.n, r.backend) for r in results] == [(0, 3, "fake")]
    assert not results[0].prediction.unknown
    assert [(j.trial_id, j.n) for j in fake.submitted[2:]] == [(0, 5)]
    assert service.running.keys() == {0, 1}
    assert service.fit_seconds > 0


def test_the_pool_takes_at_most_workers_jobs_and_the_rest_keep_their_turn(
    tmp_path: Path,
) -> None:
    fake = FakeBackend()
    service = _service(tmp_path, fake, workers=2)
    for trial in range(4):
        service.request(_job(tmp_path, trial, 3))
    service.poll()
    assert [j.trial_id for j in fake.submitted] == [0, 1]
    service.request(_job(tmp_path, 3, 4))  # replaces trial 3's waiting request, keeps its turn
    assert [(t, j.n) for t, j in service.pending.items()] == [(2, 3), (3, 4)]
    fake.fail.append(fake.submitted[0])  # one slot frees (trial 0 is retried, after the others)
    service.poll()
    assert [j.trial_id for j in fake.submitted] == [0, 1, 2]
    assert list(service.pending) == [3, 0]


def test_a_failed_fit_is_retried_once_then_unknown(tmp_path: Path) -> None:
    fake = FakeBackend()
    service = _service(tmp_path, fake)
    job = _job(tmp_path, 3, 6)
    service.request(job)
    service.poll()
    fake.fail.append(job)
    assert service.poll() == []  # failed once: submitted again
    assert fake.submitted == [job, job]
    fake.fail.append(job)
    (result,) = service.poll()
    assert result.prediction.unknown
    assert "job died" in result.prediction.reason
    assert result.backend == "controller"
    loaded = read_result(Path(job.path))  # the controller wrote the unknown result's file
    assert loaded is not None
    assert loaded[0].unknown
    assert service.idle


def test_a_file_of_another_curve_is_refitted_and_an_existing_one_read(tmp_path: Path) -> None:
    fake = FakeBackend()
    service = _service(tmp_path, fake)
    old = _job(tmp_path, 2, 5, a=0.4)  # written by an earlier run of the trial's steps
    run_fit_task([old], SMALL, "pool")
    new = _job(tmp_path, 2, 5, a=0.9)
    assert new.path == old.path
    assert new.y_sha256 != old.y_sha256
    service.request(new)
    assert service.poll() == []  # the stale file is found and removed; the request waits again
    assert not Path(new.path).exists()
    assert service.pending == {2: new}
    assert service.poll() == []
    assert fake.submitted == [new]
    # a file that fits the request (a restarted controller's) is read without a fit
    fake.live.clear()
    service2 = _service(tmp_path, FakeBackend())
    run_fit_task([new], SMALL, "pool")
    (result,) = service2.poll() or [None]  # nothing requested yet
    assert result is None
    service2.request(new)
    (result,) = service2.poll()
    assert result.backend == "file"
    assert result.n == 5


def test_pool_fits_run_beside_the_caller_and_match_in_process_fits(tmp_path: Path) -> None:
    service = CurveService(tmp_path, CurvesSpec(workers=2, backend="pool"), SMALL)
    jobs = [_job(tmp_path, t, 4 + t) for t in range(3)]
    try:
        start = time.perf_counter()
        for job in jobs:
            service.request(job)
        assert service.poll() == []
        assert time.perf_counter() - start < 0.5  # submitting does not wait for a fit
        results = []
        deadline = time.monotonic() + 60
        while len(results) < 3 and time.monotonic() < deadline:
            results += service.poll()
            time.sleep(0.05)
    finally:
        service.close()
    assert sorted(r.trial_id for r in results) == [0, 1, 2]
    for result in results:
        job = jobs[result.trial_id]
        assert result.backend == "pool"
        assert result.seconds is not None
        assert result.seconds > 0
        assert job.request.seed == curve_fit_seed(7, job.trial_id, job.n)
        assert Path(job.path) == result_path(tmp_path, job.trial_id, job.n).resolve()
        expected = fit_many([job.request], SMALL)[0]
        assert result.prediction.to_dict() == expected.to_dict()
        assert CurvePrediction.from_dict(result.prediction.to_dict()).n == job.n


def test_the_curves_section_is_checked_precisely(tmp_path: Path) -> None:
    spec = parse_curves(
        {
            "model": "domhan",
            "backend": "slurm",
            "workers": 3,
            "budget": "domhan",
            "task_seconds": 30,
        },
        tmp_path,
    )
    assert spec == CurvesSpec(
        model="domhan", backend="slurm", workers=3, budget="domhan", task_seconds=30.0
    )
    assert CurvesSpec.from_dict(spec.to_dict()) == spec
    assert parse_curves({}, tmp_path) == CurvesSpec()
    assert CurvesSpec().model == "amortised"
    # a study journaled before the option existed used Domhan's model
    assert CurvesSpec.from_dict({"backend": "auto"}).model == "domhan"
    cases = {
        "model": ("lcpfn", "unknown curve model 'lcpfn'; known curve models: amortised, domhan"),
        "backend": ("gpu", "must be one of 'auto', 'pool', 'jobs', 'slurm'"),
        "workers": (0, "an integer >= 1"),
        "budget": ("fast", "must be one of 'hyperdrive', 'domhan'"),
        "task_seconds": (0.5, "a number of seconds >= 1"),
    }
    for key, (value, message) in cases.items():
        with pytest.raises(StudySpecError, match=message) as info:
            parse_curves({key: value}, tmp_path)
        assert info.value.field == f"curves.{key}"
    with pytest.raises(StudySpecError, match="did you mean `workers`") as info:
        parse_curves({"worker": 2}, tmp_path)
    assert info.value.field == "curves.worker"
    with pytest.raises(StudySpecError, match="workers"):
        parse_curves({"workers": True}, tmp_path)


def test_amortised_fits_run_inline_and_come_back_in_the_same_poll(tmp_path: Path) -> None:
    service = CurveService(tmp_path, CurvesSpec())  # the default model: amortised
    jobs = [
        FitJob.build(
            tmp_path,
            t,
            [0.1, 0.3, 0.4, 0.45],
            x_max=10,
            bounds=(0.0, 1.0),
            mode="max",
            study_seed=0,
        )
        for t in (1, 2)
    ]
    for job in jobs:
        service.request(job)
    results = service.poll()
    assert sorted(r.trial_id for r in results) == [1, 2]
    assert all(r.backend == "inline" and not r.prediction.unknown for r in results)
    assert all(Path(job.path).exists() for job in jobs)
    assert service.idle
    # asked again (a restarted controller): the file is read, nothing is refitted
    again = CurveService(tmp_path, CurvesSpec())
    again.request(jobs[0])
    (result,) = again.poll()
    assert result.backend == "file"
    assert result.prediction.to_dict() == results[0].prediction.to_dict()
    service.close()
    again.close()
