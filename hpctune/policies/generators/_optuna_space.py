"""The search space as Optuna distributions, and configurations to and from Optuna's values.

Every searchable value of the space becomes one *dimension* with an Optuna distribution:

- ``float`` and ``int`` ranges: ``FloatDistribution`` / ``IntDistribution`` with the same bounds
  and ``log``; ``grid_points`` is ignored (it only shapes the grid generator);
- ``categorical``: ``CategoricalDistribution`` over the choices when they are all plain values
  (strings, numbers, booleans), else over the choices' positions (schedule tables as choices);
- ``fixed`` values are no dimension: they pass through unchanged;
- ``schedule`` templates: each argument that is a range or a choice is a dimension named
  ``<param>.<argument>`` (nested schedule arguments: ``<param>.<argument>.<argument>``); fixed
  arguments pass through. The configuration is the schedule built from the drawn arguments.

A conditional parameter (``when = {...}``) and all of its dimensions are asked for only when its
condition holds for the values drawn before it (Optuna's define-by-run), so the samplers see the
parameter only in the trials that have it.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial

from hpctune.study.space import (
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    Param,
    ScheduleParam,
    SearchSpace,
)

_PLAIN = (str, int, float, bool)


@dataclass(frozen=True)
class Dimension:
    """One searchable value: its dotted name, its distribution and how to read it back.

    Attributes:
        name: ``param`` or ``param.arg[.arg...]`` for schedule arguments.
        distribution: The Optuna distribution.
        choices: For categoricals encoded by position, the choices themselves; else ``None``.
    """

    name: str
    distribution: BaseDistribution
    choices: tuple[Any, ...] | None = None

    def decode(self, value: Any) -> Any:
        """The configuration's value for Optuna's ``value``."""
        if self.choices is not None:
            return self.choices[int(value)]
        return value

    def encode(self, value: Any) -> Any | None:
        """Optuna's value for a configuration's ``value``; ``None`` if it is not in range."""
        dist = self.distribution
        if self.choices is not None:
            text = json.dumps(value, sort_keys=True)
            for i, choice in enumerate(self.choices):
                if json.dumps(choice, sort_keys=True) == text:
                    return i
            return None
        if isinstance(dist, CategoricalDistribution):
            for choice in dist.choices:
                if type(choice) is type(value) and choice == value:
                    return choice
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if not math.isfinite(value):
            return None
        if isinstance(dist, IntDistribution):
            if int(value) != value or not dist.low <= value <= dist.high:
                return None
            return int(value)
        assert isinstance(dist, FloatDistribution)
        if not dist.low <= value <= dist.high:
            return None
        return float(value)


def _distribution(param: Param, name: str) -> Dimension | None:
    if isinstance(param, FloatParam):
        return Dimension(name, FloatDistribution(param.low, param.high, log=param.log))
    if isinstance(param, IntParam):
        return Dimension(name, IntDistribution(param.low, param.high, log=param.log))
    if isinstance(param, CategoricalParam):
        if all(isinstance(c, _PLAIN) for c in param.choices):
            return Dimension(name, CategoricalDistribution(param.choices))
        return Dimension(
            name, CategoricalDistribution(tuple(range(len(param.choices)))), param.choices
        )
    return None


def dimensions(param: Param, name: str) -> list[Dimension]:
    """The dimensions of one parameter (none for a fixed value), in declaration order."""
    if isinstance(param, FixedParam):
        return []
    if isinstance(param, ScheduleParam):
        out: list[Dimension] = []
        for arg, sub in param.args.items():
            out.extend(dimensions(sub, f"{name}.{arg}"))
        return out
    dim = _distribution(param, name)
    return [] if dim is None else [dim]


def all_dimensions(space: SearchSpace) -> list[Dimension]:
    """Every dimension of the space (conditional ones included), in declaration order."""
    out: list[Dimension] = []
    for name, param in space.params.items():
        out.extend(dimensions(param, name))
    return out


def _build(
    param: Param, name: str, draw: Callable[[Dimension], Any], dims: Mapping[str, Dimension]
) -> Any:
    if isinstance(param, FixedParam):
        return param.sample(None)  # type: ignore[arg-type]  # a fixed value draws nothing
    if isinstance(param, ScheduleParam):
        args = {arg: _build(sub, f"{name}.{arg}", draw, dims) for arg, sub in param.args.items()}
        return param._build(args)
    return dims[name].decode(draw(dims[name]))


def draw_config(space: SearchSpace, draw: Callable[[Dimension], Any]) -> dict[str, Any]:
    """Build a configuration, asking ``draw(dimension)`` for each dimension of each active
    parameter in declaration order (an Optuna trial's ``suggest_*``)."""
    dims = {d.name: d for d in all_dimensions(space)}
    config: dict[str, Any] = {}
    for name, param in space.params.items():
        if space.is_active(name, config):
            config[name] = _build(param, name, draw, dims)
    return config


def _read(
    param: Param, name: str, value: Any, out: dict[str, Any], dims: Mapping[str, Any]
) -> None:
    if isinstance(param, FixedParam):
        return
    if isinstance(param, ScheduleParam):
        if not isinstance(value, Mapping):
            return
        for arg, sub in param.args.items():
            if arg in value:
                _read(sub, f"{name}.{arg}", value[arg], out, dims)
        return
    dim = dims[name]
    encoded = dim.encode(value)
    if encoded is not None:
        out[name] = encoded


def encode_config(space: SearchSpace, config: Mapping[str, Any]) -> dict[str, Any]:
    """Optuna's values of a configuration's dimensions (those it has and that are in range)."""
    dims = {d.name: d for d in all_dimensions(space)}
    out: dict[str, Any] = {}
    for name, param in space.params.items():
        if name in config:
            _read(param, name, config[name], out, dims)
    return out


class TrialTemplate(FrozenTrial):
    """A ``FrozenTrial`` whose deep copy is shallow.

    The in-memory storage deep-copies every trial it is given; the generator's templates (one per
    trial and state, cached) are never changed afterwards and the storage replaces rather than
    mutates what it holds, so sharing their dictionaries is safe and halves the cost of a
    rebuild with hundreds of trials.
    """

    def __deepcopy__(self, memo: dict[int, Any]) -> TrialTemplate:
        return copy.copy(self)


__all__ = [
    "Dimension",
    "TrialTemplate",
    "all_dimensions",
    "dimensions",
    "draw_config",
    "encode_config",
]
