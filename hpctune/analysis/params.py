"""The searched dimensions of a study as flat, plottable columns.

A trial's parameters may hold schedules (dicts) and categorical choices of any JSON value; the
report's parallel coordinates, slices and parameter importance, and the Optuna export, need one
number or category per column. :func:`dimensions` turns the study's search space into such
columns: a float or int range is one numeric column; a categorical parameter one categorical
column (non-scalar choices shown in the one schedule format); a schedule's searched arguments
one column each (``lr.base``); fixed parameters are not searched and give no column. Values of
trials that the space does not explain (e.g. a PBT mutation outside it) widen the range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hpctune.study.formatting import format_value
from hpctune.study.space import (
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    Param,
    ScheduleParam,
    SearchSpace,
)


@dataclass(frozen=True)
class Dimension:
    """One searched column.

    Attributes:
        name: ``lr`` or, for a schedule's argument, ``lr.base``.
        path: The keys from a trial's params to the value (``("lr", "base")``).
        kind: ``"float"``, ``"int"`` or ``"categorical"``.
        low: Lowest value (numeric kinds).
        high: Highest value (numeric kinds).
        log: Searched on a log scale.
        choices: The categories (categorical): plain values as they are, other values (lists,
            schedules) as text.
    """

    name: str
    path: tuple[str, ...]
    kind: str
    low: float = math.nan
    high: float = math.nan
    log: bool = False
    choices: tuple[Any, ...] = ()

    def value(self, params: Mapping[str, Any]) -> Any:
        """The trial's value in this column: a number, a category, or ``None``."""
        current: Any = params
        for key in self.path:
            if not isinstance(current, Mapping) or key not in current:
                return None
            current = current[key]
        if self.kind == "categorical":
            return category(current)
        if isinstance(current, bool) or not isinstance(current, int | float):
            return None
        return current


def category(value: Any) -> Any:
    """A categorical choice as a column value: plain values (text, numbers, booleans) as they
    are, others (schedules, lists) as text in the one schedule format."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return format_value(value)


def _walk(name: str, path: tuple[str, ...], param: Param) -> Iterable[Dimension]:
    if isinstance(param, FloatParam | IntParam):
        kind = "float" if isinstance(param, FloatParam) else "int"
        yield Dimension(name, path, kind, float(param.low), float(param.high), param.log)
    elif isinstance(param, CategoricalParam):
        if len(param.choices) > 1:
            choices = tuple(dict.fromkeys(category(c) for c in param.choices))
            yield Dimension(name, path, "categorical", choices=choices)
    elif isinstance(param, ScheduleParam):
        for arg, sub in param.args.items():
            yield from _walk(f"{name}.{arg}", (*path, arg), sub)
    elif isinstance(param, FixedParam):
        return


def dimensions(
    space: SearchSpace, trials_params: Iterable[Mapping[str, Any]] = ()
) -> list[Dimension]:
    """The searched columns of ``space``, ranges widened to the values in ``trials_params``."""
    dims = [d for name, p in space.params.items() for d in _walk(name, (name,), p)]
    seen = list(trials_params)
    out = []
    for dim in dims:
        values = [dim.value(p) for p in seen]
        if dim.kind == "categorical":
            extra = [v for v in values if v is not None and v not in dim.choices]
            if extra:
                dim = Dimension(
                    dim.name, dim.path, dim.kind, choices=dim.choices + tuple(dict.fromkeys(extra))
                )
        else:
            numbers = [float(v) for v in values if v is not None and math.isfinite(v)]
            if numbers:
                low, high = min(dim.low, *numbers), max(dim.high, *numbers)
                dim = Dimension(dim.name, dim.path, dim.kind, low, high, dim.log and low > 0)
        out.append(dim)
    return out


__all__ = ["Dimension", "category", "dimensions"]
