"""The curve-model registry: a curve model found by its name, hpctune's own or another package's.

``[curves] model`` (and ``hpctune simulate --curve-model``, ``hpctune fit-curves --model``) is
one of :data:`CURVE_MODELS`, a name another package registers in the entry-point group
``hpctune.curve_models``, or an importable ``MODULE:CLASS`` (a class following
:class:`~hpctune.curves.curve_model.CurveModel`). hpctune's own are imported only when asked
for: checking a study.toml does not pay for the MCMC sampler's imports.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from hpctune.curves.curve_model import CurveModel
from hpctune.plugins import PluginError, describe, find, registered

#: hpctune's own curve models, by name (``MODULE:CLASS``, imported when asked for): the amortised
#: network (the default) and Domhan et al.'s MCMC (the paper's).
CURVE_MODELS: Mapping[str, str] = {
    "amortised": "hpctune.curves.amortised:AmortisedModel",
    "domhan": "hpctune.curves.domhan:DomhanModel",
}

_MEMBERS = ("name", "min_points", "batched", "predict")


def make_curve_model(name: str) -> CurveModel:
    """Build the curve model ``name``: one of :data:`CURVE_MODELS`, another package's (entry
    point ``hpctune.curve_models``) or an importable ``MODULE:CLASS``.

    Raises:
        PluginError: Unknown (with a close match and the known names), it fails to load, or it
            is not a curve model (a class with ``name``, ``min_points``, ``batched`` and
            ``predict``, built with no arguments).
    """
    cls = _curve_model_class(name)
    try:
        model = cls()
    except Exception as exc:
        raise PluginError(
            f"the curve model {name!r} ({describe(cls)}) cannot be built with no arguments: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(model, CurveModel):
        missing = [m for m in _MEMBERS if not hasattr(model, m)]
        raise PluginError(
            f"the curve model {name!r} ({describe(cls)}) lacks {', '.join(missing)}; a curve "
            "model is a class with name, min_points, batched and predict "
            "(hpctune.curves.CurveModel)"
        )
    return model


@functools.cache  # looked up once per process (a fit asks at every boundary)
def _curve_model_class(name: str) -> type:
    found = find("curve model", name, CURVE_MODELS)
    if not isinstance(found, type):
        raise PluginError(
            f"the curve model {name!r} is {describe(found)}, not a class; a curve model is a "
            "class with name, min_points, batched and predict (hpctune.curves.CurveModel)"
        )
    return found


def curve_model_names() -> list[str]:
    """Every registered curve model: hpctune's own, then other packages'."""
    return registered("curve model", CURVE_MODELS)


def check_curve_model(name: str) -> str:
    """``name`` if it names a curve model; another package's is loaded and checked, hpctune's
    own are not imported.

    Raises:
        PluginError: As :func:`make_curve_model`.
    """
    if name not in CURVE_MODELS:
        make_curve_model(name)
    return name


__all__ = ["CURVE_MODELS", "check_curve_model", "curve_model_names", "make_curve_model"]
