"""Learning-curve extrapolation: an amortised network (the default, :func:`predict_curves`) and
Domhan et al. (IJCAI 2015) as HyperDrive (Middleware 2017) uses.

Each is a curve model (:class:`CurveModel`: a name, its minimum of points, and
:meth:`~CurveModel.predict`), found by name with :func:`make_curve_model` (``"amortised"``,
``"domhan"``, another package's through the entry-point group ``hpctune.curve_models``, or an
importable ``MODULE:CLASS``). Predict many curves at once with :func:`predict_curves` (or
:func:`fit_many` with ``FitOptions(model="amortised")``). Fit one curve with Domhan's model with
:func:`fit_curve` (a :class:`CurvePosterior`), summarise it with
:meth:`CurvePrediction.from_posterior`, or fit many with :class:`CurveFitter` /
:func:`fit_many`. A :class:`CurvePrediction` answers POP's and EarlyTerm's questions
(:meth:`~CurvePrediction.prob_at_least`, :meth:`~CurvePrediction.first_reach_mass`,
:meth:`~CurvePrediction.confidence`, :meth:`~CurvePrediction.expected_remaining_time`,
:meth:`~CurvePrediction.prob_final_at_least`) and round-trips through JSON.

The names below are imported on first use (PEP 562): importing a light submodule such as
:mod:`hpctune.curves.options` (which ``hpctune.spec`` needs) does not pay for emcee and
scipy.stats (about a second).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpctune.curves.amortised import AmortisedModel, predict_curves
    from hpctune.curves.curve_model import CurveModel
    from hpctune.curves.domhan import DomhanModel
    from hpctune.curves.families import (
        DEFAULT_FAMILIES,
        FAMILIES,
        Family,
        Grid,
        Param,
        get_families,
    )
    from hpctune.curves.fit import (
        BUDGETS,
        MIN_POINTS,
        Budget,
        CurvePosterior,
        denormalise,
        fit_curve,
        normalise,
    )
    from hpctune.curves.fitter import (
        CurveFitter,
        CurveRequest,
        FitOptions,
        fit_many,
        fit_one,
        unknown_prediction,
    )
    from hpctune.curves.model import (
        CombinationModel,
        PriorCurve,
        build_model,
        sample_prior_curve,
    )
    from hpctune.curves.predict import DEFAULT_QUANTILES, LEVELS, CurvePrediction
    from hpctune.curves.prior import PriorBatch, sample_curves
    from hpctune.curves.registry import CURVE_MODELS, curve_model_names, make_curve_model

_MODULES = {
    "amortised": ("AmortisedModel", "predict_curves"),
    "curve_model": ("CurveModel",),
    "domhan": ("DomhanModel",),
    "registry": ("CURVE_MODELS", "curve_model_names", "make_curve_model"),
    "prior": ("PriorBatch", "sample_curves"),
    "families": ("DEFAULT_FAMILIES", "FAMILIES", "Family", "Grid", "Param", "get_families"),
    "fit": (
        "BUDGETS",
        "MIN_POINTS",
        "Budget",
        "CurvePosterior",
        "denormalise",
        "fit_curve",
        "normalise",
    ),
    "fitter": (
        "CurveFitter",
        "CurveRequest",
        "FitOptions",
        "fit_many",
        "fit_one",
        "unknown_prediction",
    ),
    "model": ("CombinationModel", "PriorCurve", "build_model", "sample_prior_curve"),
    "predict": ("DEFAULT_QUANTILES", "LEVELS", "CurvePrediction"),
}


def __getattr__(name: str) -> Any:
    for module, names in _MODULES.items():
        if name in names:
            return getattr(importlib.import_module(f"hpctune.curves.{module}"), name)
    raise AttributeError(f"module 'hpctune.curves' has no attribute {name!r}")


__all__ = [
    "BUDGETS",
    "CURVE_MODELS",
    "DEFAULT_FAMILIES",
    "DEFAULT_QUANTILES",
    "FAMILIES",
    "LEVELS",
    "MIN_POINTS",
    "AmortisedModel",
    "Budget",
    "CombinationModel",
    "CurveFitter",
    "CurveModel",
    "CurvePosterior",
    "CurvePrediction",
    "CurveRequest",
    "DomhanModel",
    "Family",
    "FitOptions",
    "Grid",
    "Param",
    "PriorBatch",
    "PriorCurve",
    "build_model",
    "curve_model_names",
    "denormalise",
    "fit_curve",
    "fit_many",
    "fit_one",
    "get_families",
    "make_curve_model",
    "normalise",
    "predict_curves",
    "sample_curves",
    "sample_prior_curve",
    "unknown_prediction",
]
