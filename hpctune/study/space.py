"""The search space: the hyperparameters of a study and the values each may take.

A :class:`SearchSpace` maps parameter names to parameters (:mod:`hpctune.study.params`), in the
order the ``[search_space]`` table declares them. Parameters are ``float`` and ``int`` ranges,
``categorical`` choices, ``fixed`` values and ``schedule`` templates (a schedule shape whose
arguments are themselves literals, choices or ranges). Sampled configurations are JSON-able
dicts; schedules appear in them as schedule dicts (see :mod:`hpctune.study.schedules`).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.errors import StudySpecError
from hpctune.study.params import (
    TYPES,
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    NoGridError,
    Param,
    ScheduleParam,
)
from hpctune.study.schedules import SHAPES, ScheduleArgError, schedule_from_dict, shape_args


@dataclass(frozen=True)
class SearchSpace:
    """The hyperparameters of a study, in declaration order.

    Attributes:
        params: Parameter name to parameter.
        conditions: Conditional parameters: name to ``{other: allowed values}``. A conditional
            parameter is present in a configuration only when every ``other`` parameter (a
            categorical declared before it, itself present) takes one of its allowed values.
    """

    params: Mapping[str, Param]
    conditions: Mapping[str, Mapping[str, tuple[Any, ...]]] = field(default_factory=dict)

    def is_active(self, name: str, config: Mapping[str, Any]) -> bool:
        """Whether parameter ``name`` is present given the values in ``config`` so far."""
        for other, allowed in self.conditions.get(name, {}).items():
            if other not in config or config[other] not in allowed:
                return False
        return True

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        """Draw one configuration (JSON-able; schedules as schedule dicts).

        Parameters are drawn in declaration order; an inactive conditional parameter is left
        out and draws nothing.
        """
        config: dict[str, Any] = {}
        for name, p in self.params.items():
            if self.is_active(name, config):
                config[name] = p.sample(rng)
        return config

    def _grids(self) -> list[list[Any]]:
        return [p.grid_values(name) for name, p in self.params.items()]

    def _conditional_grid(self) -> list[dict[str, Any]]:
        """The product of the grids with inactive parameters left out, duplicates dropped."""
        names = list(self.params)
        seen: set[str] = set()
        out: list[dict[str, Any]] = []
        for combo in itertools.product(*self._grids()):
            config: dict[str, Any] = {}
            for name, value in zip(names, combo, strict=True):
                if self.is_active(name, config):
                    config[name] = value
            key = json.dumps(config, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(config)
        return out

    def grid(self) -> list[dict[str, Any]]:
        """Return the cartesian product of the parameters' grids (first parameter slowest).

        Conditional parameters are left out where inactive and repeated points dropped.

        Raises:
            NoGridError: A parameter is a range without ``grid_points`` (``.param`` names it).
        """
        if self.conditions:
            return self._conditional_grid()
        names = list(self.params)
        return [dict(zip(names, c, strict=True)) for c in itertools.product(*self._grids())]

    def grid_size(self) -> int | None:
        """Return the number of grid points, ``None`` if some parameter has no grid."""
        n = 1
        for p in self.params.values():
            m = p.grid_len()
            if m is None:
                return None
            n *= m
        if self.conditions:
            return len(self._conditional_grid())
        return n

    def require_grid(self) -> int:
        """Return :meth:`grid_size`, raising :class:`NoGridError` if there is no grid."""
        size = self.grid_size()
        if size is not None:
            return size
        self._grids()  # raises NoGridError naming the first parameter without a grid
        raise NoGridError("", "the search space has no grid")  # pragma: no cover

    def grid_point(self, index: int) -> dict[str, Any]:
        """Return ``grid()[index]`` without building the whole grid (unless conditional).

        Raises:
            IndexError: ``index`` is outside ``[0, grid_size())``.
            NoGridError: A parameter has no grid.
        """
        if self.conditions:
            points = self._conditional_grid()
            if not 0 <= index < len(points):
                raise IndexError(f"grid index must be in [0, {len(points)}), but got {index}")
            return points[index]
        grids = self._grids()
        size = math.prod(len(g) for g in grids)
        if not 0 <= index < size:
            raise IndexError(f"grid index must be in [0, {size}), but got {index}")
        picked: list[Any] = []
        for g in reversed(grids):
            index, i = divmod(index, len(g))
            picked.append(g[i])
        return dict(zip(self.params, reversed(picked), strict=True))

    def to_dict(self) -> dict[str, Any]:
        """Return the canonical ``[search_space]`` table (every parameter with its ``type``)."""
        out = {name: p.to_dict() for name, p in self.params.items()}
        for name, condition in self.conditions.items():
            out[name]["when"] = {k: copy.deepcopy(list(v)) for k, v in condition.items()}
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SearchSpace:
        """Rebuild a space from :meth:`to_dict` (or any valid ``[search_space]`` table)."""
        return parse_space(d, path=None)


# --------------------------------------------------------------------------------------------
# Parsing


_RANGE_KEYS = ("type", "low", "high", "log", "grid_points")
_KEYS: Mapping[str, tuple[str, ...]] = {
    "float": _RANGE_KEYS,
    "int": _RANGE_KEYS,
    "categorical": ("type", "choices"),
    "fixed": ("type", "value"),
}


class _Ctx:
    """Where a value is being parsed: its file, its dotted field and the argument kind.

    ``kind`` is ``None`` for a top-level parameter, else a schedule argument kind.
    """

    def __init__(self, path: Path | None, field: str, kind: str | None) -> None:
        self.path, self.field, self.kind = path, field, kind

    def sub(self, key: str, kind: str | None = None) -> _Ctx:
        return _Ctx(self.path, f"{self.field}.{key}", kind if kind is not None else self.kind)

    def error(self, message: str, key: str | None = None) -> StudySpecError:
        return StudySpecError(self.path, self.field + (f".{key}" if key else ""), message)


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def parse_space(table: Mapping[str, Any], *, path: Path | str | None) -> SearchSpace:
    """Parse the ``[search_space]`` table.

    Raises:
        StudySpecError: A parameter is invalid; ``field`` is ``search_space.<name>[.<key>]``.
    """
    path = None if path is None else Path(path)
    if not isinstance(table, Mapping):
        raise StudySpecError(
            path, "search_space", f"must be a table of parameters, but got {_show(table)}"
        )
    if not table:
        raise StudySpecError(
            path,
            "search_space",
            'must define at least one parameter, e.g. lr = {type = "float", low = 1e-4, '
            "high = 1e-1, log = true}",
        )
    params: dict[str, Param] = {}
    conditions: dict[str, dict[str, tuple[Any, ...]]] = {}
    for name, entry in table.items():
        ctx = _Ctx(path, f"search_space.{name}", None)
        if not name.strip():
            raise ctx.error("a parameter name must not be empty")
        if isinstance(entry, Mapping) and "when" in entry:
            conditions[name] = _parse_condition(entry["when"], params, conditions, ctx)
            entry = _without(entry, "when")
        params[name] = _parse_entry(entry, ctx)
    return SearchSpace(params, conditions)


def _parse_condition(
    when: Any,
    earlier: Mapping[str, Param],
    conditions: Mapping[str, Mapping[str, tuple[Any, ...]]],
    ctx: _Ctx,
) -> dict[str, tuple[Any, ...]]:
    """Parse ``when = {other = value or [values], ...}`` of a conditional parameter."""
    example = 'e.g. when = { optimizer = "sgd" } or when = { optimizer = ["sgd", "rmsprop"] }'
    if not isinstance(when, Mapping) or not when:
        raise ctx.error(
            f"`when` must be a table of earlier categorical parameters and their values, "
            f"{example}; got {_show(when)}",
            "when",
        )
    out: dict[str, tuple[Any, ...]] = {}
    for other, value in when.items():
        sub = f"when.{other}"
        param = earlier.get(other)
        if param is None:
            raise ctx.error(
                f"`{other}` is not a parameter declared before this one; a condition names an "
                f"earlier categorical parameter (declared: {', '.join(earlier) or 'none'})",
                sub,
            )
        if not isinstance(param, CategoricalParam):
            raise ctx.error(
                f"`{other}` is a {param.type_name} parameter; conditions name categorical ones",
                sub,
            )
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ctx.error(f"name at least one value of `{other}`, {example}", sub)
        for v in values:
            if v not in param.choices:
                raise ctx.error(
                    f"{v!r} is not a choice of `{other}` (choices: {list(param.choices)})", sub
                )
        out[other] = tuple(values)
    return out


def _parse_entry(entry: Any, ctx: _Ctx) -> Param:
    """Parse a parameter or schedule argument, shorthands included."""
    if isinstance(entry, Mapping):
        if "type" in entry:
            return _parse_typed(entry, ctx)
        if "schedule" in entry:
            shape = entry["schedule"]
            param = _parse_schedule(shape, _without(entry, "schedule"), ctx, "schedule")
            if all(isinstance(p, FixedParam) for p in param.args.values()):
                return FixedParam(param.extremes()[0])
            return param
        valid = ", ".join(TYPES)
        raise ctx.error(
            f"a parameter table needs a `type` (one of {valid}) or, for a schedule literal, a "
            f"`schedule` key; got keys {sorted(entry)}"
        )
    if isinstance(entry, list):
        is_list_arg = ctx.kind in ("numbers", "ints")
        if is_list_arg and (not entry or not all(isinstance(c, list) for c in entry)):
            return FixedParam(_check_value(entry, ctx, None))
        return _categorical(entry, ctx, None)
    return FixedParam(_check_value(entry, ctx, None))


def _without(table: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in table.items() if k != key}


def _parse_typed(table: Mapping[str, Any], ctx: _Ctx) -> Param:
    kind = table["type"]
    if kind not in TYPES:
        raise ctx.error(f"unknown type {kind!r}; valid types: {', '.join(TYPES)}", "type")
    if kind == "schedule":
        args = _without(_without(table, "type"), "shape")
        return _parse_schedule(table.get("shape"), args, ctx, "shape")
    _check_keys(table, _KEYS[kind], ctx, f"a {kind} parameter")
    if kind in ("float", "int"):
        return _parse_range(table, kind, ctx)
    if kind == "categorical":
        if "choices" not in table:
            raise ctx.error("a categorical parameter needs `choices = [...]`", "choices")
        return _categorical(table["choices"], ctx, "choices")
    if "value" not in table:
        raise ctx.error("a fixed parameter needs `value = ...`", "value")
    return FixedParam(_check_value(table["value"], ctx, "value"))


def _check_keys(table: Mapping[str, Any], valid: Sequence[str], ctx: _Ctx, what: str) -> None:
    for key in table:
        if key not in valid:
            raise ctx.error(f"unknown key for {what}; valid keys: {', '.join(valid)}", key)


def _parse_range(table: Mapping[str, Any], kind: str, ctx: _Ctx) -> Param:
    bounds: dict[str, Any] = {}
    for key in ("low", "high"):
        if key not in table:
            raise ctx.error(f"a {kind} parameter needs `{key}`", key)
        v = table[key]
        if kind == "int" and (not isinstance(v, int) or isinstance(v, bool)):
            raise ctx.error(
                f"the bounds of an int parameter must be integers, but got {key} = {_show(v)}; "
                'use type = "float" for a real-valued range',
                key,
            )
        if not _is_number(v) or not math.isfinite(v):
            raise ctx.error(f"`{key}` must be a finite number, but got {_show(v)}", key)
        bounds[key] = v if kind == "int" else float(v)
    low, high = bounds["low"], bounds["high"]
    if not low < high:
        raise ctx.error(
            f"`high` must be greater than `low`, but got low = {low}, high = {high}; "
            "use a fixed value for a single value",
            "high",
        )
    log = table.get("log", False)
    if not isinstance(log, bool):
        raise ctx.error(f"`log` must be true or false, but got {_show(log)}", "log")
    if log and low <= 0:
        raise ctx.error(f"a log-scaled range needs low > 0, but got low = {low}", "low")
    grid_points = table.get("grid_points")
    if grid_points is not None and (
        not isinstance(grid_points, int) or isinstance(grid_points, bool) or grid_points < 2
    ):
        raise ctx.error(
            f"`grid_points` must be an integer >= 2, but got {_show(grid_points)}", "grid_points"
        )
    cls = FloatParam if kind == "float" else IntParam
    return cls(low, high, log=log, grid_points=grid_points)


def _categorical(choices: Any, ctx: _Ctx, key: str | None) -> CategoricalParam:
    if not isinstance(choices, list) or not choices:
        raise ctx.error(f"choices must be a non-empty list, but got {_show(choices)}", key)
    values = [_check_value(c, ctx, key) for c in choices]
    seen: set[str] = set()
    for v in values:
        text = json.dumps(v, sort_keys=True)
        if text in seen:
            raise ctx.error(f"choices must be distinct, but {text} appears twice", key)
        seen.add(text)
    return CategoricalParam(tuple(values))


def _check_value(value: Any, ctx: _Ctx, key: str | None) -> Any:
    """Check a literal value (a fixed value or a choice) and return its canonical form."""
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ctx.error(f"values must be finite, but got {value}", key)
        return value
    if isinstance(value, Mapping) and "schedule" in value:
        sub = ctx.sub(key) if key else ctx
        try:
            return schedule_from_dict(value).to_dict()
        except ScheduleArgError as exc:
            raise sub.error(exc.message, exc.arg) from None
        except ValueError as exc:
            raise sub.error(str(exc)) from None
    if isinstance(value, list) and ctx.kind in ("numbers", "ints"):
        for v in value:
            if not _is_number(v):
                raise ctx.error(f"list elements must be numbers, but got {_show(v)}", key)
        return list(value)
    raise ctx.error(
        "values must be strings, integers, floats, booleans or schedule tables such as "
        f'{{schedule = "cosine", base = 0.1, total_steps = 20}}, but got {_show(value)}',
        key,
    )


def _parse_schedule(
    shape: Any, args: Mapping[str, Any], ctx: _Ctx, shape_key: str
) -> ScheduleParam:
    if not isinstance(shape, str) or shape not in SHAPES:
        raise ctx.error(
            f"unknown schedule shape {shape!r}; valid shapes: {', '.join(SHAPES)}", shape_key
        )
    kinds = shape_args(shape)
    parsed: dict[str, Param] = {}
    for arg, value in args.items():
        if arg not in kinds:
            valid = ", ".join(kinds)
            raise ctx.error(f"schedule {shape!r} has no argument `{arg}`; valid: {valid}", arg)
        parsed[arg] = _parse_entry(value, ctx.sub(arg, kinds[arg]))
    param = ScheduleParam(shape, parsed)
    _check_schedule(param, ctx)
    return param


def _check_schedule(param: ScheduleParam, ctx: _Ctx) -> None:
    """Build the schedule at the extremes of its arguments; report the first failure."""
    for combo in param.corners():
        try:
            schedule_from_dict({"schedule": param.shape, **combo})
        except ScheduleArgError as exc:
            top = exc.arg.split(".")[0]
            p = param.args.get(top)
            extra = ""
            if p is not None and not isinstance(p, FixedParam):
                extra = " (at the edge of its range or choices; narrow them)"
            elif any(not isinstance(q, FixedParam) for q in param.args.values()):
                extra = f" (with arguments {combo}; narrow the ranges or choices)"
            raise ctx.error(exc.message + extra, exc.arg) from None


__all__ = [
    "TYPES",
    "CategoricalParam",
    "FixedParam",
    "FloatParam",
    "IntParam",
    "NoGridError",
    "Param",
    "ScheduleParam",
    "SearchSpace",
    "parse_space",
]
