"""The curve-model protocol: what turns learning curves into predictions.

A curve model has a :attr:`~CurveModel.name`, the fewest points it predicts from
(:attr:`~CurveModel.min_points`), whether it predicts a batch at once in the calling process
(:attr:`~CurveModel.batched`), and one call, :meth:`~CurveModel.predict`: a batch of
:class:`~hpctune.curves.fitter.CurveRequest` to one
:class:`~hpctune.curves.predict.CurvePrediction` each. hpctune's own are the amortised network
(:class:`~hpctune.curves.amortised.AmortisedModel`) and Domhan et al.'s MCMC
(:class:`~hpctune.curves.domhan.DomhanModel`); others are found by name
(:mod:`hpctune.curves.registry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from hpctune.curves.fitter import CurveRequest, FitOptions
    from hpctune.curves.predict import CurvePrediction


@runtime_checkable
class CurveModel(Protocol):
    """A learning-curve model (a class with these members, built with no arguments).

    Attributes:
        name: Its name, as ``[curves] model`` gives it.
        min_points: The fewest observed points it predicts from: the controller asks for no fit
            of a shorter curve (nor of one shorter than ``FitOptions.min_points``).
        batched: It predicts a whole batch in one pass in the calling process, in about a
            millisecond a curve (the amortised network): the controller fits inline, in the
            iteration that asks. ``False``: one curve at a time, for seconds each (Domhan's
            MCMC): fits run in a process pool of the controller or in its backend's job arrays.
    """

    name: str
    min_points: int
    batched: bool

    def predict(
        self, requests: Sequence[CurveRequest], options: FitOptions
    ) -> list[CurvePrediction]:
        """One prediction per request, in request order, the same for the same requests (each
        carries its seed) whatever the batch. A request it cannot predict (too few points,
        invalid bounds, a failed fit) gets an unknown prediction saying why
        (:func:`~hpctune.curves.fitter.unknown_prediction`): one bad request never fails the
        batch."""
        ...


__all__ = ["CurveModel"]
