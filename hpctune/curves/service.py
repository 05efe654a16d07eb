"""The controller's fit service: asynchronous learning-curve fits, each one a result file.

The controller asks for a fit of a trial's curve at its boundaries (:meth:`CurveService.request`)
and collects finished fits every iteration (:meth:`CurveService.poll`); it never waits for one.

Rules:

* **At most one fit per trial in flight.** A newer request for a trial whose fit runs waits; a
  newer request for a trial whose request waits replaces it (the newest curve wins; the trial
  keeps its place in the queue).
* **One writer per result file.** Whoever runs a fit (a pool process, a Slurm array task) writes
  ``<study>/curves/trial-<TTTTTT>-n<NNNNNNNN>.json`` atomically; a task finding the file there
  (a resubmitted request) leaves it alone. Only for a fit whose process or job died without a
  file does the controller write the file itself, with an unknown prediction.
* **Failures are unknown predictions.** A failed fit is resubmitted once; after that (or for an
  unreadable file) the result is an unknown prediction. Nothing raises into the controller.

Backends: for a batched curve model (:attr:`~hpctune.curves.curve_model.CurveModel.batched`:
the amortised one) :class:`InlineBackend` (fits at once in the controller's process, a batch
per call: a prediction is there in the iteration that asked for it); for the others (Domhan's)
:class:`PoolBackend` (spawned processes of the controller) and the study's backend's jobs
(:meth:`hpctune.backends.Backend.fit_backend`: on Slurm, submitit ``map_array`` with several
curves per task), which run :func:`run_fit_task`. All call
:func:`~hpctune.curves.fitter.fit_many`.
"""

from __future__ import annotations

import abc
import hashlib
import logging
import math
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.curves.curve_model import CurveModel
from hpctune.curves.fitter import CurveRequest, FitOptions, fit_many
from hpctune.curves.options import JOB_BACKENDS, CurvesSpec
from hpctune.curves.predict import CurvePrediction
from hpctune.curves.registry import make_curve_model
from hpctune.files import read_json, write_json_atomic
from hpctune.study.seeding import component_seed
from hpctune.study.states import Mode

logger = logging.getLogger(__name__)

RESULT_FORMAT = "hpctune.curve/1"
#: Seconds per fit assumed before any was measured (HyperDrive budget, benchmarks/curves.py).
PRIOR_FIT_SECONDS = 1.0
#: Attempts of one request before it is given up as unknown.
MAX_ATTEMPTS = 2


def result_path(folder: Path, trial_id: int, n: int) -> Path:
    """The result file of the fit of trial ``trial_id`` on its first ``n`` points."""
    return Path(folder) / f"trial-{trial_id:06d}-n{n:08d}.json"


def curve_fit_seed(study_seed: int, trial_id: int, n: int) -> int:
    """The seed of the fit of trial ``trial_id`` on ``n`` points under the study's seed."""
    seq = np.random.SeedSequence(component_seed(study_seed, "curves"), spawn_key=(trial_id, n))
    return int(seq.generate_state(1, np.uint32)[0])


def values_digest(values: Sequence[float]) -> str:
    """A short digest of fitted values (float64 bytes): tells a stale result file apart."""
    return hashlib.sha256(np.asarray(values, dtype=np.float64).tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class FitJob:
    """One fit to run: a request and the result file it goes to.

    Attributes:
        trial_id: The trial.
        request: The curve (values of steps 1..n), horizon, scale and seed.
        path: Absolute path of the result file.
        y_sha256: :func:`values_digest` of the request's values.
    """

    trial_id: int
    request: CurveRequest
    path: str
    y_sha256: str

    @property
    def n(self) -> int:
        """Number of points fitted."""
        return len(self.request.y)

    @classmethod
    def build(
        cls,
        folder: Path,
        trial_id: int,
        values: Sequence[float],
        *,
        x_max: int,
        bounds: tuple[float, float],
        mode: Mode,
        study_seed: int,
    ) -> FitJob:
        """The job for a trial's curve ``values`` (steps 1..n), seeded by (study, trial, n)."""
        y = tuple(float(v) for v in values)
        request = CurveRequest(
            key=trial_id,
            y=y,
            x_max=x_max,
            bounds=bounds,
            mode=mode,
            seed=curve_fit_seed(study_seed, trial_id, len(y)),
        )
        path = result_path(folder, trial_id, len(y)).resolve()
        return cls(trial_id, request, str(path), values_digest(y))


@dataclass(frozen=True)
class FitResult:
    """A finished fit: the prediction and what its result file says of it.

    Attributes:
        job: The job.
        prediction: The prediction (unknown for failures).
        seconds: Measured seconds of the fit (None when not measured).
        backend: Who ran it (``pool``, ``slurm``, ``controller`` for a given-up failure).
    """

    job: FitJob
    prediction: CurvePrediction
    seconds: float | None
    backend: str

    @property
    def trial_id(self) -> int:
        """The trial."""
        return self.job.trial_id

    @property
    def n(self) -> int:
        """Points fitted."""
        return self.job.n


def write_result(
    job: FitJob, prediction: CurvePrediction, seconds: float | None, backend: str
) -> None:
    """Write a job's result file atomically: metadata and ``prediction.to_dict()``."""
    path = Path(job.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": RESULT_FORMAT,
        "trial": job.trial_id,
        "n": job.n,
        "x_max": job.request.x_max,
        "seed": job.request.seed,
        "y_sha256": job.y_sha256,
        "seconds": None if seconds is None else round(seconds, 4),
        "backend": backend,
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "time": time.time(),
        "prediction": prediction.to_dict(),
    }
    write_json_atomic(path, doc, fsync=True)


def read_result(path: Path) -> tuple[CurvePrediction, dict[str, Any]] | None:
    """Read a result file: ``(prediction, metadata)``, or None if missing or malformed."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != RESULT_FORMAT:
        return None
    try:
        return CurvePrediction.from_dict(data["prediction"]), data
    except (KeyError, TypeError, ValueError) as exc:
        logger.warning("curve result %s is malformed: %s", path, exc)
        return None


def run_fit_task(
    jobs: Sequence[FitJob], options: FitOptions, backend: str = "pool"
) -> list[float | None]:
    """Run fit jobs one after the other with :func:`fit_many`, writing each result file.

    The unit of work of both backends (a top-level function of picklable arguments). A job whose
    file exists already is skipped (its seconds are None). Returns the seconds of each fit.
    """
    seconds: list[float | None] = []
    for job in jobs:
        if Path(job.path).exists():
            seconds.append(None)
            continue
        start = time.perf_counter()
        prediction = fit_many([job.request], options)[0]
        elapsed = time.perf_counter() - start
        write_result(job, prediction, elapsed, backend)
        seconds.append(elapsed)
    return seconds


class FitBackend(abc.ABC):
    """Where fit jobs run. Completion is a result file; failures are reported, never raised."""

    name: str = ""

    @abc.abstractmethod
    def submit(self, jobs: list[FitJob], per_task: int) -> list[tuple[FitJob, str]]:
        """Start ``jobs`` (``per_task`` per task where tasks are batched); return refusals."""

    @abc.abstractmethod
    def poll(self) -> tuple[list[FitJob], list[tuple[FitJob, str]]]:
        """Jobs finished since the last poll (their file exists) and failed ones (reason)."""

    @abc.abstractmethod
    def in_flight(self) -> int:
        """Jobs submitted and not yet reported."""

    def close(self) -> None:  # noqa: B027
        """Stop what still runs (nothing needs it any more)."""


class PoolBackend(FitBackend):
    """Spawned processes of the controller's process, one job per pool task.

    Args:
        workers: Processes.
        options: Fit options.
    """

    name = "pool"

    def __init__(self, workers: int, options: FitOptions) -> None:
        self.workers = workers
        self.options = options
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[Future[list[float | None]], FitJob] = {}

    def submit(self, jobs: list[FitJob], per_task: int) -> list[tuple[FitJob, str]]:
        """Queue each job as its own task (the pool is created on first use)."""
        refused: list[tuple[FitJob, str]] = []
        for job in jobs:
            try:
                if self._pool is None:
                    context = multiprocessing.get_context("spawn")
                    self._pool = ProcessPoolExecutor(
                        max_workers=self.workers, mp_context=context, initializer=_ignore_sigint
                    )
                future = self._pool.submit(run_fit_task, [job], self.options, self.name)
            except Exception as exc:  # a broken or shut-down pool: start a new one next time
                self._drop_pool()
                refused.append((job, f"pool: {type(exc).__name__}: {exc}"))
                continue
            self._futures[future] = job
        return refused

    def poll(self) -> tuple[list[FitJob], list[tuple[FitJob, str]]]:
        """Finished futures: done if the task returned, failed if it raised."""
        done: list[FitJob] = []
        failed: list[tuple[FitJob, str]] = []
        broken = False
        for future in [f for f in self._futures if f.done()]:
            job = self._futures.pop(future)
            exc = future.exception()
            if exc is None:
                done.append(job)
            else:
                failed.append((job, f"pool: {type(exc).__name__}: {exc}"))
                broken = broken or "Broken" in type(exc).__name__
        if broken:
            self._drop_pool()
        return done, failed

    def in_flight(self) -> int:
        """Tasks queued or running."""
        return len(self._futures)

    def _drop_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Cancel queued tasks and wait for the running ones (at most one fit each)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._futures.clear()


class InlineBackend(FitBackend):
    """Fits run at once in the controller's process, a whole batch in one call (a batched curve
    model, the amortised one: about a millisecond per curve, so a pool would only add start-up
    and lag)."""

    name = "inline"

    def __init__(self, options: FitOptions) -> None:
        self.options = options
        self._done: list[FitJob] = []
        self._failed: list[tuple[FitJob, str]] = []

    def submit(self, jobs: list[FitJob], per_task: int) -> list[tuple[FitJob, str]]:
        """Fit the jobs whose file does not exist yet, write their files; all done at return."""
        todo = [job for job in jobs if not Path(job.path).exists()]
        start = time.perf_counter()
        try:
            predictions = fit_many([job.request for job in todo], self.options)
        except Exception as exc:  # a bug in the model must not stop the controller
            return [(job, f"inline: {type(exc).__name__}: {exc}") for job in jobs]
        seconds = (time.perf_counter() - start) / max(len(todo), 1)
        for job, prediction in zip(todo, predictions, strict=True):
            try:
                write_result(job, prediction, seconds, self.name)
            except OSError as exc:
                self._failed.append((job, f"inline: {exc}"))
                continue
            self._done.append(job)
        self._done.extend(job for job in jobs if job not in todo)
        return []

    def poll(self) -> tuple[list[FitJob], list[tuple[FitJob, str]]]:
        """The jobs fitted since the last poll."""
        done, self._done = self._done, []
        failed, self._failed = self._failed, []
        return done, failed

    def in_flight(self) -> int:
        """Jobs fitted and not yet reported."""
        return len(self._done) + len(self._failed)


class CurveService:
    """Asynchronous fits for the controller (see the module's rules).

    Args:
        folder: Where result files go (``<study>/curves``).
        spec: The ``[curves]`` section.
        options: Fit options (from ``spec.budget`` unless given).
        in_job: The controller runs in one of its backend's jobs (``auto`` may then use job
            arrays).
        jobs_backend: Builds the backend's fit jobs (Slurm arrays) when first needed;
            ``None``: the backend has none.
        clock: Monotonic seconds (to order waiting requests).
    """

    def __init__(
        self,
        folder: Path,
        spec: CurvesSpec,
        options: FitOptions | None = None,
        *,
        in_job: bool = False,
        jobs_backend: Callable[[], FitBackend] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder = Path(folder)
        self.spec = spec
        self.options = options or FitOptions(model=spec.model, budget=spec.budget)
        self.model: CurveModel = make_curve_model(self.options.model)
        self.in_job = in_job
        self._make_jobs = jobs_backend
        self._clock = clock
        self.pool: FitBackend = (
            InlineBackend(self.options)
            if self.model.batched
            else PoolBackend(spec.workers, self.options)
        )
        self.jobs: FitBackend | None = None
        self._pending: dict[int, FitJob] = {}  # newest waiting request per trial, oldest first
        self._running: dict[int, tuple[FitJob, FitBackend]] = {}
        self._attempts: dict[tuple[int, int, str], int] = {}
        self.fit_seconds = PRIOR_FIT_SECONDS
        self.submitted = 0
        self.finished = 0

    # -- requests --------------------------------------------------------------------------

    def request(self, job: FitJob) -> None:
        """Ask for ``job``; it replaces a waiting request of the same trial."""
        running = self._running.get(job.trial_id)
        if running is not None and _same(running[0], job):
            self._pending.pop(job.trial_id, None)
            return
        self._pending[job.trial_id] = job

    def load(self, trial_id: int, n: int) -> CurvePrediction | None:
        """The prediction of a finished fit of trial ``trial_id`` on ``n`` points, read back
        from its result file (``None``: missing or malformed)."""
        loaded = read_result(result_path(self.folder, trial_id, n))
        return None if loaded is None else loaded[0]

    @property
    def pending(self) -> dict[int, FitJob]:
        """Waiting requests by trial (a copy)."""
        return dict(self._pending)

    @property
    def running(self) -> dict[int, FitJob]:
        """Jobs in flight by trial (a copy)."""
        return {t: job for t, (job, _) in self._running.items()}

    @property
    def idle(self) -> bool:
        """Nothing waits and nothing runs."""
        return not self._pending and not self._running

    # -- the loop --------------------------------------------------------------------------

    def poll(self) -> list[FitResult]:
        """Collect finished fits, then start waiting ones; never blocks on a fit."""
        results: list[FitResult] = []
        for backend in (self.pool, self.jobs):
            if backend is not None and backend.in_flight():
                results.extend(self._collect(backend))
        results.extend(self._submit())
        if isinstance(self.pool, InlineBackend) and self.pool.in_flight():
            results.extend(self._collect(self.pool))  # fitted just now: no lag
        return results

    def _collect(self, backend: FitBackend) -> list[FitResult]:
        results: list[FitResult] = []
        done, failed = backend.poll()
        for job in done:
            self._running.pop(job.trial_id, None)
            result = self._load(job, backend.name)
            if result is not None:
                results.append(result)
        for job, reason in failed:
            self._running.pop(job.trial_id, None)
            results.extend(self._failed(job, reason))
        return results

    def _submit(self) -> list[FitResult]:
        results: list[FitResult] = []
        ready: list[FitJob] = []
        for trial_id, job in list(self._pending.items()):
            if trial_id in self._running:
                continue
            del self._pending[trial_id]
            if Path(job.path).exists():  # fitted before (a restarted controller's request)
                result = self._load(job, "file")
                if result is not None:
                    results.append(result)
            else:
                ready.append(job)
        if not ready:
            return results
        backend = self._choose(len(ready))
        if backend is self.pool and not isinstance(backend, InlineBackend):
            room = max(self.spec.workers - self.pool.in_flight(), 0)
            for job in ready[room:]:  # back to the queue, in order, unless replaced meanwhile
                self._pending.setdefault(job.trial_id, job)
            ready = ready[:room]
        per_task = max(1, math.floor(self.spec.task_seconds / max(self.fit_seconds, 1e-3)))
        refused = backend.submit(ready, per_task) if ready else []
        refused_ids = {id(job) for job, _ in refused}
        for job in ready:
            if id(job) not in refused_ids:
                self._running[job.trial_id] = (job, backend)
                self.submitted += 1
        for job, reason in refused:
            results.extend(self._failed(job, reason))
        return results

    def _choose(self, ready: int) -> FitBackend:
        """The backend for ``ready`` jobs (see :class:`~hpctune.curves.options.CurvesSpec`); a
        batched curve model always fits inline."""
        if isinstance(self.pool, InlineBackend):
            return self.pool
        backlog = (ready + len(self._pending)) * self.fit_seconds / self.spec.workers
        use_jobs = self.spec.backend in JOB_BACKENDS or (
            self.spec.backend == "auto" and self.in_job and backlog > self.spec.task_seconds
        )
        if use_jobs and self._make_jobs is not None:
            if self.jobs is None:
                try:
                    self.jobs = self._make_jobs()
                except Exception as exc:  # no submitit, no sbatch: fall back to the pool
                    logger.warning(
                        "cannot use job arrays for curve fits (%s); using the pool", exc
                    )
                    self._make_jobs = None
                    return self.pool
            return self.jobs
        return self.pool

    def _load(self, job: FitJob, backend: str) -> FitResult | None:
        self.finished += 1
        loaded = read_result(Path(job.path))
        if loaded is None:
            return self._give_up(job, "the result file is missing or unreadable")
        prediction, meta = loaded
        if meta.get("y_sha256") != job.y_sha256 or meta.get("n") != job.n:
            # a file left by an earlier run of the trial's steps (restarted from a checkpoint)
            Path(job.path).unlink(missing_ok=True)
            return self._give_up(job, "the result file belongs to another curve", retry=True)
        seconds = meta.get("seconds")
        if isinstance(seconds, int | float) and seconds > 0:
            self.fit_seconds = 0.8 * self.fit_seconds + 0.2 * float(seconds)
        who = backend if backend == "file" else str(meta.get("backend", backend))
        return FitResult(job, prediction, seconds, who)

    def _failed(self, job: FitJob, reason: str) -> list[FitResult]:
        logger.warning("curve fit of trial %d (n=%d) failed: %s", job.trial_id, job.n, reason)
        result = self._give_up(job, reason, retry=True)
        return [] if result is None else [result]

    def _give_up(self, job: FitJob, reason: str, retry: bool = False) -> FitResult | None:
        """Retry ``job`` (once) or return its unknown result, writing the file if none exists."""
        key = (job.trial_id, job.n, job.y_sha256)
        self._attempts[key] = self._attempts.get(key, 0) + 1
        if retry and self._attempts[key] < MAX_ATTEMPTS:
            self._pending.setdefault(job.trial_id, job)  # unless a newer request waits
            return None
        request = job.request
        prediction = CurvePrediction.unknown_result(
            job.n, request.x_max, request.bounds, request.mode, f"fit failed: {reason}"
        )
        if not Path(job.path).exists():
            try:
                write_result(job, prediction, None, "controller")
            except OSError as exc:
                logger.warning("cannot write %s: %s", job.path, exc)
        return FitResult(job, prediction, None, "controller")

    def close(self) -> None:
        """Stop the pool and cancel fit jobs still running; forget waiting requests."""
        for backend in (self.pool, self.jobs):
            if backend is not None:
                try:
                    backend.close()
                except Exception as exc:  # closing must not fail the controller's exit
                    logger.warning("closing the %s curve-fit backend: %s", backend.name, exc)
        self._pending.clear()
        self._running.clear()


def _ignore_sigint() -> None:
    """Pool processes leave Ctrl-C to the controller (which stops the study, then the pool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _same(a: FitJob, b: FitJob) -> bool:
    return a.n == b.n and a.y_sha256 == b.y_sha256
