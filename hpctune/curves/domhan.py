"""Domhan et al.'s model (IJCAI 2015) as a curve model: an MCMC fit per curve, summarised.

``[curves] model = "domhan"``: :func:`~hpctune.curves.fit.fit_curve` with the batch's
:class:`~hpctune.curves.fitter.FitOptions` (budget, families, ...) on each request, one after
the other, then :meth:`~hpctune.curves.predict.CurvePrediction.from_posterior`. Seconds per
curve: the controller runs these fits in a process pool or in its backend's job arrays.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hpctune.curves.fit import MIN_POINTS, fit_curve
from hpctune.curves.fitter import unknown_prediction
from hpctune.curves.predict import CurvePrediction

if TYPE_CHECKING:
    from hpctune.curves.fitter import CurveRequest, FitOptions

logger = logging.getLogger(__name__)


class DomhanModel:
    """Domhan et al.'s weighted combination of parametric families, sampled by MCMC."""

    name: ClassVar[str] = "domhan"
    min_points: ClassVar[int] = MIN_POINTS
    batched: ClassVar[bool] = False

    def predict(
        self, requests: Sequence[CurveRequest], options: FitOptions
    ) -> list[CurvePrediction]:
        """Fit each request in turn (see :meth:`predict_one`)."""
        return [self.predict_one(request, options) for request in requests]

    def predict_one(self, request: CurveRequest, options: FitOptions) -> CurvePrediction:
        """Fit one request and summarise it; an unexpected error gives an unknown prediction.

        Degenerate data already give unknown results inside :func:`fit_curve`; the guard here
        keeps one broken request (invalid bounds, a bug) from failing a whole batch. It is
        logged.
        """
        try:
            posterior = fit_curve(
                np.asarray(request.y, dtype=float),
                x_max=request.x_max,
                rng=np.random.default_rng(request.seed),
                bounds=request.bounds,
                mode=request.mode,
                budget=options.budget,
                recency_weighting=options.recency_weighting,
                families=options.families,
                monotonicity=options.monotonicity,
                sanity=options.sanity,
                init_weights=options.init_weights,
                min_points=options.min_points,
                init=options.init,
                n_keep=options.n_keep,
            )
        except Exception as exc:  # one request must not sink the batch
            logger.exception("curve fit of %r failed", request.key)
            return unknown_prediction(request, f"error: {type(exc).__name__}: {exc}")
        return CurvePrediction.from_posterior(posterior)


__all__ = ["DomhanModel"]
