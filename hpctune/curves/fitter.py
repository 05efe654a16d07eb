"""Fit many learning curves at once: in process or in a pool of spawned processes.

The curve model is named by ``FitOptions.model`` and found in :mod:`.registry`
(:class:`~.curve_model.CurveModel`): ``"amortised"`` (the default; :mod:`.amortised`, one
vectorised pass for a whole batch, always in process), ``"domhan"`` (Domhan et al.'s MCMC,
:mod:`.domhan`, one curve at a time, in a pool when ``workers`` > 0), another package's, or a
``MODULE:CLASS``.

:func:`fit_many` is a plain top-level function of picklable arguments (a list of
:class:`CurveRequest` and one :class:`FitOptions`), so a Slurm job-array backend can ship chunks
of requests to it as they are (e.g. submitit's ``executor.map_array(fit_many, chunks,
[options] * len(chunks))``). Each request carries its own seed, so results do not depend on how
requests are grouped or on the pool size.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from hpctune.curves.fit import Budget
from hpctune.curves.model import InitWeights, Monotonicity
from hpctune.curves.predict import CurvePrediction
from hpctune.curves.registry import make_curve_model
from hpctune.study.states import Mode


@dataclass(frozen=True)
class CurveRequest:
    """One curve to fit.

    Attributes:
        key: Caller's identifier (a trial id); the key of the result.
        y: Observed values at epochs 1..n (raw units).
        x_max: Horizon.
        bounds: ``(low, high)`` of the raw scale.
        mode: ``"max"`` or ``"min"``.
        seed: Seed (an int >= 0) of this fit's ``np.random.default_rng``.
    """

    key: Hashable
    y: tuple[float, ...]
    x_max: int
    bounds: tuple[float, float] = (0.0, 1.0)
    mode: Mode = "max"
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "y", tuple(float(v) for v in self.y))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, but got {self.seed!r}")


@dataclass(frozen=True)
class FitOptions:
    """Options shared by a batch: the curve model (a name of :mod:`.registry`), and for
    ``"domhan"`` the options of :func:`~hpctune.curves.fit.fit_curve` (see its docs);
    ``min_points`` applies to every model."""

    model: str = "amortised"
    budget: str | Budget = "hyperdrive"
    recency_weighting: bool = True
    families: tuple[str, ...] | None = None
    monotonicity: Monotonicity = "soft"
    sanity: tuple[float, float] = (0.0, 1.0)
    init_weights: InitWeights = "equal"
    min_points: int = 3
    init: Literal["laplace", "ball"] = "laplace"
    n_keep: int = 500

    @property
    def fewest_points(self) -> int:
        """The fewest points of a curve worth a fit: :attr:`min_points`, or the curve model's
        own minimum (:attr:`~.curve_model.CurveModel.min_points`) where that is larger.

        Raises:
            PluginError: :attr:`model` names no curve model.
        """
        return max(self.min_points, make_curve_model(self.model).min_points)


def unknown_prediction(request: CurveRequest, reason: str) -> CurvePrediction:
    """The unknown prediction of a request a curve model cannot predict, saying ``reason``;
    made for any request, even one with invalid bounds, mode or horizon."""
    return CurvePrediction.unknown_result(
        len(request.y),
        max(int(request.x_max), 1),
        _safe_bounds(request.bounds),
        request.mode if request.mode in ("max", "min") else "max",
        reason,
    )


def _safe_bounds(bounds: tuple[float, float]) -> tuple[float, float]:
    low, high = float(bounds[0]), float(bounds[1])
    if math.isfinite(low) and math.isfinite(high) and low < high:
        return (low, high)
    return (0.0, 1.0)


def fit_one(request: CurveRequest, options: FitOptions) -> CurvePrediction:
    """Fit one request and summarise it (:func:`fit_many` of one)."""
    return fit_many([request], options)[0]


def fit_many(
    requests: Sequence[CurveRequest], options: FitOptions | None = None
) -> list[CurvePrediction]:
    """Predict ``requests`` in this process with the options' curve model; results in request
    order (a request the model cannot predict gets an unknown prediction).

    A top-level function of picklable arguments: the unit of work shipped to pool workers and,
    later, to Slurm array tasks. A batched model (the amortised one) predicts the whole batch in
    one pass, the others one request after the other.

    Raises:
        PluginError: The options name no curve model.
    """
    opts = FitOptions() if options is None else options
    return make_curve_model(opts.model).predict(requests, opts)


def _chunks(requests: Sequence[CurveRequest], size: int) -> list[list[CurveRequest]]:
    return [list(requests[i : i + size]) for i in range(0, len(requests), size)]


@dataclass(frozen=True)
class CurveFitter:
    """Fit batches of curves in process (``workers=0``) or in ``workers`` spawned processes.

    A batched curve model (:attr:`~.curve_model.CurveModel.batched`: the amortised one) always
    runs in process (one vectorised pass is faster than a pool).

    The pool is created per :meth:`fit` call and shut down afterwards (no state between calls).
    Workers inherit the environment; set ``OMP_NUM_THREADS=1`` (etc.) before starting the
    controller to keep each worker on one core.

    Attributes:
        workers: Number of processes (0: in this process).
        options: Fit options shared by every request.
        chunk_size: Requests per task (default: spread evenly, ~4 tasks per worker).
    """

    workers: int = 0
    options: FitOptions = field(default_factory=FitOptions)
    chunk_size: int | None = None

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0, but got {self.workers}")
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, but got {self.chunk_size}")

    def fit(
        self,
        requests: Sequence[CurveRequest],
        on_fitted: Callable[[int], None] | None = None,
    ) -> dict[Hashable, CurvePrediction]:
        """Fit every request; the result maps each key to its prediction.

        Deterministic for given seeds whatever ``workers`` and ``chunk_size``. ``on_fitted(n)``
        is called after every ``n`` curves fitted (a progress bar): per curve for MCMC without
        workers, per chunk with workers, once for a batched model's single pass.

        Raises:
            ValueError: Two requests share a key.
            PluginError: The options name no curve model.
        """
        keys = [r.key for r in requests]
        if len(set(keys)) != len(keys):
            raise ValueError("request keys must be unique")
        done = on_fitted or (lambda n: None)
        results: list[CurvePrediction] = []
        if make_curve_model(self.options.model).batched or len(requests) <= 1:
            results = fit_many(requests, self.options)
            done(len(requests))
        elif self.workers == 0:
            for request in requests:
                results += fit_many([request], self.options)
                done(1)
        else:
            size = self.chunk_size or max(1, math.ceil(len(requests) / (4 * self.workers)))
            chunks = _chunks(requests, size)
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=self.workers, mp_context=context) as pool:
                for chunk, part in zip(
                    chunks, pool.map(fit_many, chunks, [self.options] * len(chunks)), strict=True
                ):
                    results += part
                    done(len(chunk))
        return dict(zip(keys, results, strict=True))
