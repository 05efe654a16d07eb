"""Mutation of configurations for PBT: pure functions over the study's search space.

The rules of the black-box PBT paper (Li et al., KDD 2019, §3.5.2), by parameter type:

- **scalars** (``float`` ranges, linear or log; ``int`` ranges): multiply by a factor drawn from
  ``factors`` (0.8 or 1.2); an ``int`` is rounded, and moved by one in the factor's direction if
  rounding gave the same value back;
- **discrete** values (ranges with ``grid_points``, categorical lists whose choices are all
  numbers): move to the neighbouring value, the largest lower or the smallest larger one, each
  with probability 1/2 (the only neighbour at an end);
- **categorical** values (other choices): resample uniformly from the choices;
- ``fixed`` values, schedules and excluded parameters are never mutated.

Every result is clipped to the parameter's bounds. :func:`explore` is Ray Tune's variant
(``pbt-truncation``): each parameter is resampled with ``resample_probability``, else perturbed,
categorical lists moving to the adjacent choice in their declared order.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from hpctune.study.space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    Param,
    SearchSpace,
)

FACTORS = (0.8, 1.2)


def is_mutable(param: Param) -> bool:
    """True for the parameter types mutation changes (ranges and categorical lists)."""
    if isinstance(param, CategoricalParam):
        return len(param.choices) > 1
    return isinstance(param, FloatParam | IntParam)


def is_discrete(param: Param) -> bool:
    """True for ranges with ``grid_points`` and categorical lists of numbers."""
    if isinstance(param, FloatParam | IntParam):
        return param.grid_points is not None
    if isinstance(param, CategoricalParam):
        return all(_is_number(c) for c in param.choices)
    return False


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def neighbour(values: Sequence[float], value: float, rng: np.random.Generator) -> float:
    """The largest value below ``value`` or the smallest above it (1/2 each; one at an end)."""
    ordered = sorted(set(values))
    lower = [v for v in ordered if v < value]
    upper = [v for v in ordered if v > value]
    if lower and upper:
        return lower[-1] if rng.random() < 0.5 else upper[0]
    if lower:
        return lower[-1]
    if upper:
        return upper[0]
    return value


def scale(param: FloatParam | IntParam, value: Any, factor: float) -> float | int:
    """``value * factor`` within the parameter's bounds (rounded for ``int``, which moves)."""
    if isinstance(param, IntParam):
        scaled = math.floor(int(value) * factor + 0.5)
        if scaled == int(value):
            scaled += 1 if factor > 1 else -1
        return int(min(max(scaled, param.low), param.high))
    return float(min(max(float(value) * factor, param.low), param.high))


def mutate_value(
    param: Param,
    value: Any,
    rng: np.random.Generator,
    factors: Sequence[float] = FACTORS,
) -> Any:
    """Mutate one value by the paper's rule for its parameter type (see the module docstring)."""
    if isinstance(param, CategoricalParam):
        if len(param.choices) < 2:
            return value
        if is_discrete(param) and _is_number(value):
            moved = neighbour([float(c) for c in param.choices], float(value), rng)
            return next(c for c in param.choices if float(c) == moved)
        return param.sample(rng)
    if not isinstance(param, FloatParam | IntParam):
        return value  # fixed values and schedules
    if not _is_number(value):
        return param.sample(rng)
    if param.grid_points is not None:
        moved = neighbour(param.grid_values(""), float(value), rng)
        return int(moved) if isinstance(param, IntParam) else float(moved)
    return scale(param, value, float(factors[int(rng.integers(len(factors)))]))


def mutate(
    space: SearchSpace,
    params: Mapping[str, Any],
    rng: np.random.Generator,
    *,
    exclude: Collection[str] = (),
    factors: Sequence[float] = FACTORS,
) -> dict[str, Any]:
    """Return a mutated copy of ``params``: every mutable parameter not in ``exclude`` changes.

    Parameters missing from ``params`` are sampled; names not in the space are kept as they are;
    conditional parameters are dropped where their condition fails (and drawn where it holds).
    Draws happen in the space's declaration order, so a seed gives the same child.
    """
    child = dict(params)
    for name, param in space.params.items():
        if not space.is_active(name, child):  # a conditional parameter whose condition fails
            child.pop(name, None)
        elif name not in child:
            child[name] = param.sample(rng)
        elif name not in exclude:
            child[name] = mutate_value(param, child[name], rng, factors)
    return child


def explore(
    space: SearchSpace,
    params: Mapping[str, Any],
    rng: np.random.Generator,
    *,
    resample_probability: float = 0.25,
    exclude: Collection[str] = (),
    factors: Sequence[float] = FACTORS,
) -> dict[str, Any]:
    """Ray Tune's explore step: resample each parameter with ``resample_probability``, else
    perturb it (ranges by a factor, categorical lists to the adjacent choice in declared order).
    """
    child = dict(params)
    for name, param in space.params.items():
        if not space.is_active(name, child):  # a conditional parameter whose condition fails
            child.pop(name, None)
            continue
        if name not in child:
            child[name] = param.sample(rng)
            continue
        if name in exclude or not is_mutable(param):
            continue
        if rng.random() < resample_probability:
            child[name] = param.sample(rng)
        elif isinstance(param, CategoricalParam):
            child[name] = _adjacent(param, child[name], rng)
        else:
            child[name] = mutate_value(param, child[name], rng, factors)
    return child


def _adjacent(param: CategoricalParam, value: Any, rng: np.random.Generator) -> Any:
    """The choice before or after ``value`` in declared order (clipped at the ends)."""
    choices = list(param.choices)
    if value not in choices:
        return param.sample(rng)
    index = choices.index(value) + (1 if rng.random() < 0.5 else -1)
    return choices[min(max(index, 0), len(choices) - 1)]
