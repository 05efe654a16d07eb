"""The kinds of hyperparameter a search space holds: ranges, choices, fixed values and schedule
templates, each sampled, put on a grid and written as JSON (:mod:`hpctune.study.space` holds
them by name and reads them from a study.toml)."""

from __future__ import annotations

import abc
import copy
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from hpctune.errors import HpctuneError
from hpctune.study.schedules import schedule_from_dict

TYPES = ("float", "int", "categorical", "fixed", "schedule")


_MAX_CORNERS = 512  # schedule argument combinations tried when checking a schedule template


class NoGridError(HpctuneError, ValueError):
    """A parameter has no finite grid (a range without ``grid_points``; bad input: exit 2).

    Args:
        param: The parameter's name; schedule arguments are dotted (``lr.base``).
        message: What to do about it.
    """

    exit_code = 2

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        self.message = message
        super().__init__(message)


class Param(abc.ABC):
    """Base class of parameters: frozen dataclasses that sample, enumerate and serialise."""

    type_name: ClassVar[str] = ""

    @abc.abstractmethod
    def sample(self, rng: np.random.Generator) -> Any:
        """Draw one JSON-able value with ``rng``."""

    @abc.abstractmethod
    def grid_values(self, name: str) -> list[Any]:
        """Return the grid of this parameter; raise :class:`NoGridError` if it has none."""

    @abc.abstractmethod
    def grid_len(self) -> int | None:
        """Return the number of grid values, ``None`` if there is no grid."""

    @abc.abstractmethod
    def extremes(self) -> list[Any]:
        """Return the values that bound what :meth:`sample` can give (for validation)."""

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """Return the canonical table form, with ``type``."""


def _no_grid(name: str, what: str) -> NoGridError:
    return NoGridError(
        name,
        f"parameter `{name}` is a {what} without a grid; add `grid_points = N` to it or use a "
        f"categorical list to search it with the grid generator",
    )


def _spaced(low: float, high: float, n: int, log: bool) -> list[float]:
    points = np.geomspace(low, high, n) if log else np.linspace(low, high, n)
    values = [float(v) for v in points]
    values[0], values[-1] = float(low), float(high)
    return values


@dataclass(frozen=True)
class FloatParam(Param):
    """A real number in ``[low, high]``, uniform or log-uniform."""

    type_name: ClassVar[str] = "float"

    low: float
    high: float
    log: bool = False
    grid_points: int | None = None

    def sample(self, rng: np.random.Generator) -> float:
        """Draw uniformly (in log space if ``log``)."""
        if self.log:
            v = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            v = rng.uniform(self.low, self.high)
        return float(min(max(v, self.low), self.high))

    def grid_values(self, name: str) -> list[Any]:
        """Return ``grid_points`` values, linearly or log spaced, ends included."""
        if self.grid_points is None:
            raise _no_grid(name, "float range")
        return _spaced(self.low, self.high, self.grid_points, self.log)

    def grid_len(self) -> int | None:
        """Return ``grid_points``."""
        return self.grid_points

    def extremes(self) -> list[Any]:
        """Return ``[low, high]``."""
        return [self.low, self.high]

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"type": "float", "low", "high", "log"[, "grid_points"]}``."""
        out: dict[str, Any] = {"type": "float", "low": self.low, "high": self.high}
        out["log"] = self.log
        if self.grid_points is not None:
            out["grid_points"] = self.grid_points
        return out


@dataclass(frozen=True)
class IntParam(Param):
    """An integer in ``[low, high]`` (both included), uniform or log-uniform."""

    type_name: ClassVar[str] = "int"

    low: int
    high: int
    log: bool = False
    grid_points: int | None = None

    def sample(self, rng: np.random.Generator) -> int:
        """Draw uniformly (in log space if ``log``, each integer covering ``±0.5``)."""
        if self.log:
            x = math.exp(rng.uniform(math.log(self.low - 0.5), math.log(self.high + 0.5)))
            return min(max(math.floor(x + 0.5), self.low), self.high)
        return int(rng.integers(self.low, self.high, endpoint=True))

    def grid_values(self, name: str) -> list[Any]:
        """Return up to ``grid_points`` distinct integers, linearly or log spaced."""
        if self.grid_points is None:
            raise _no_grid(name, "int range")
        spaced = _spaced(self.low, self.high, self.grid_points, self.log)
        return list(dict.fromkeys(math.floor(v + 0.5) for v in spaced))

    def grid_len(self) -> int | None:
        """Return the number of distinct grid integers."""
        return None if self.grid_points is None else len(self.grid_values(""))

    def extremes(self) -> list[Any]:
        """Return ``[low, high]``."""
        return [self.low, self.high]

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"type": "int", "low", "high", "log"[, "grid_points"]}``."""
        out: dict[str, Any] = {"type": "int", "low": self.low, "high": self.high}
        out["log"] = self.log
        if self.grid_points is not None:
            out["grid_points"] = self.grid_points
        return out


@dataclass(frozen=True)
class CategoricalParam(Param):
    """One of ``choices``, each equally likely."""

    type_name: ClassVar[str] = "categorical"

    choices: tuple[Any, ...]

    def sample(self, rng: np.random.Generator) -> Any:
        """Draw one choice."""
        return copy.deepcopy(self.choices[int(rng.integers(len(self.choices)))])

    def grid_values(self, name: str) -> list[Any]:
        """Return the choices."""
        return copy.deepcopy(list(self.choices))

    def grid_len(self) -> int | None:
        """Return the number of choices."""
        return len(self.choices)

    def extremes(self) -> list[Any]:
        """Return the choices."""
        return list(self.choices)

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"type": "categorical", "choices": [...]}``."""
        return {"type": "categorical", "choices": copy.deepcopy(list(self.choices))}


@dataclass(frozen=True)
class FixedParam(Param):
    """Always ``value``."""

    type_name: ClassVar[str] = "fixed"

    value: Any

    def sample(self, rng: np.random.Generator) -> Any:
        """Return ``value`` (drawing nothing)."""
        return copy.deepcopy(self.value)

    def grid_values(self, name: str) -> list[Any]:
        """Return ``[value]``."""
        return [copy.deepcopy(self.value)]

    def grid_len(self) -> int | None:
        """Return 1."""
        return 1

    def extremes(self) -> list[Any]:
        """Return ``[value]``."""
        return [self.value]

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"type": "fixed", "value": ...}``."""
        return {"type": "fixed", "value": copy.deepcopy(self.value)}


@dataclass(frozen=True)
class ScheduleParam(Param):
    """A schedule of shape ``shape`` whose arguments are parameters.

    Arguments left out take the shape's defaults.
    """

    type_name: ClassVar[str] = "schedule"

    shape: str
    args: Mapping[str, Param] = field(default_factory=dict)

    def _build(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return schedule_from_dict({"schedule": self.shape, **values}).to_dict()

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        """Draw every argument (in declaration order) and return the schedule dict."""
        return self._build({name: p.sample(rng) for name, p in self.args.items()})

    def grid_values(self, name: str) -> list[Any]:
        """Return the schedule dicts of the product of the arguments' grids."""
        grids = [p.grid_values(f"{name}.{arg}") for arg, p in self.args.items()]
        return [
            self._build(dict(zip(self.args, combo, strict=True)))
            for combo in itertools.product(*grids)
        ]

    def grid_len(self) -> int | None:
        """Return the product of the arguments' grid sizes."""
        n = 1
        for p in self.args.values():
            m = p.grid_len()
            if m is None:
                return None
            n *= m
        return n

    def corners(self) -> list[dict[str, Any]]:
        """Return argument combinations at the extremes (all of them, or one at a time)."""
        names = list(self.args)
        options = [self.args[n].extremes() for n in names]
        if math.prod(len(o) for o in options) <= _MAX_CORNERS:
            return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*options)]
        base = [o[0] for o in options]
        combos = [dict(zip(names, [o[-1] for o in options], strict=True))]
        for i, opts in enumerate(options):
            for v in opts:
                combos.append(dict(zip(names, [*base[:i], v, *base[i + 1 :]], strict=True)))
        return combos

    def extremes(self) -> list[Any]:
        """Return the schedule dicts at the corners of the arguments' ranges."""
        return [self._build(c) for c in self.corners()]

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"type": "schedule", "shape": ..., <arg>: <param table>, ...}``."""
        out: dict[str, Any] = {"type": "schedule", "shape": self.shape}
        for name, p in self.args.items():
            out[name] = p.to_dict()
        return out


__all__ = [
    "TYPES",
    "CategoricalParam",
    "FixedParam",
    "FloatParam",
    "IntParam",
    "NoGridError",
    "Param",
    "ScheduleParam",
]
