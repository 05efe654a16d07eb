"""The nearest-configuration rule: a proposed configuration answered from a trace's fixed set.

A trace holds a fixed set of configurations, so a generator that proposes points of its own (TPE,
GP, CMA-ES) is answered, as in the tabular protocol of HPO benchmarks, with the configuration of
the trace *not used yet in this run* that is nearest to the proposal:

- every searched value is a coordinate: a ``float`` or ``int`` parameter (and each ranged argument
  of a schedule, ``lr.base``) is normalised to ``[0, 1]`` over its range, on a log scale where the
  space says ``log``; a categorical parameter (or argument) is a coordinate whose distance is 0
  for equal values and 1 otherwise; fixed values are no coordinate;
- a conditional parameter present in one configuration and absent from the other is at distance
  1; absent from both, 0;
- the distance is the Euclidean norm of the coordinates' distances; ties go to the lowest trace
  row.

The space is the trace's ``search_space`` attribute (the study's ``[search_space]`` table), or,
for traces without one, :func:`infer_space`'s guess from the configurations.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hpctune.simulator.traces import Trace
from hpctune.study.space import (
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    Param,
    ScheduleParam,
    SearchSpace,
)


def infer_space(hparams: Sequence[Mapping[str, Any]]) -> SearchSpace:
    """A search space that covers ``hparams``, for traces that do not store theirs.

    Numbers: a range from the smallest to the largest value (int if all are integers), on a log
    scale if all are positive and the largest is at least 20 times the smallest; anything else
    with several values: a categorical of the values seen; one value: fixed. Schedules: the same
    per argument.
    """
    names: list[str] = []
    for config in hparams:
        for name in config:
            if name not in names:
                names.append(name)
    params: dict[str, Param] = {}
    for name in names:
        values = [c[name] for c in hparams if name in c]
        params[name] = _infer(values)
    return SearchSpace(params)


def _infer(values: list[Any]) -> Param:
    if values and all(isinstance(v, Mapping) and "schedule" in v for v in values):
        shapes = {v["schedule"] for v in values}
        if len(shapes) == 1:
            shape = next(iter(shapes))
            args = [k for k in values[0] if k != "schedule"]
            return ScheduleParam(shape, {k: _infer([v.get(k) for v in values]) for k in args})
    texts = {json.dumps(v, sort_keys=True) for v in values}
    if len(texts) == 1:
        return FixedParam(values[0])
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if numeric and len(texts) > 3:
        low, high = min(values), max(values)
        log = low > 0 and high >= 20 * low
        if all(isinstance(v, int) for v in values):
            return IntParam(int(low), int(high), log=log)
        return FloatParam(float(low), float(high), log=log)
    unique: list[Any] = []
    seen: set[str] = set()
    for v in values:
        key = json.dumps(v, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(v)
    return CategoricalParam(tuple(unique))


def trace_space(trace: Trace) -> SearchSpace:
    """The trace's search space: its ``search_space`` attribute, else :func:`infer_space`."""
    if trace.search_space is not None:
        return SearchSpace.from_dict(trace.search_space)
    return infer_space(trace.hparams)


def _coordinates(param: Param, name: str, out: list[tuple[str, Param]]) -> None:
    if isinstance(param, ScheduleParam):
        for arg, sub in param.args.items():
            _coordinates(sub, f"{name}.{arg}", out)
    elif not isinstance(param, FixedParam):
        out.append((name, param))


def _lookup(config: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _scaled(param: FloatParam | IntParam, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return math.nan
    low, high, x = float(param.low), float(param.high), float(value)
    if param.log:
        if x <= 0:
            return math.nan
        low, high, x = math.log(low), math.log(high), math.log(x)
    return (x - low) / (high - low)


class NearestConfigurations:
    """Answer proposals with the nearest unused configuration of a trace.

    Args:
        space: The space the distance is measured in.
        configs: The trace's configurations (rows).
    """

    def __init__(self, space: SearchSpace, configs: Sequence[Mapping[str, Any]]) -> None:
        coords: list[tuple[str, Param]] = []
        for name, param in space.params.items():
            _coordinates(param, name, coords)
        self.coordinates = coords
        self._rows = [self.encode(c) for c in configs]
        self._numeric = np.array([r[0] for r in self._rows], dtype=float)
        self._present = np.array([r[1] for r in self._rows], dtype=bool)
        self._labels = [r[2] for r in self._rows]
        self.used = np.zeros(len(configs), dtype=bool)

    def encode(self, config: Mapping[str, Any]) -> tuple[list[float], list[bool], list[str]]:
        """Scaled numbers (NaN for categoricals), presence, and categorical labels."""
        numbers: list[float] = []
        present: list[bool] = []
        labels: list[str] = []
        for name, param in self.coordinates:
            found, value = _lookup(config, name)
            present.append(found)
            if isinstance(param, FloatParam | IntParam):
                numbers.append(_scaled(param, value) if found else math.nan)
                labels.append("")
            else:
                numbers.append(math.nan)
                labels.append(json.dumps(value, sort_keys=True) if found else "")
        return numbers, present, labels

    def distances(self, config: Mapping[str, Any]) -> np.ndarray:
        """The distance of ``config`` to every row (used or not)."""
        numbers, present, labels = self.encode(config)
        total = np.zeros(len(self._rows))
        for j, (_, param) in enumerate(self.coordinates):
            here = self._present[:, j]
            mismatch = here != present[j]
            if isinstance(param, FloatParam | IntParam):
                diff = np.abs(self._numeric[:, j] - numbers[j])
                diff = np.where(np.isnan(diff), 1.0, np.minimum(diff, 1.0))
            else:
                diff = np.array([0.0 if lab == labels[j] else 1.0 for lab in self._labels_col(j)])
            part = np.where(mismatch, 1.0, np.where(here, diff, 0.0))
            total += part**2
        return np.sqrt(total)

    def _labels_col(self, j: int) -> list[str]:
        return [row[j] for row in self._labels]

    def take(self, config: Mapping[str, Any]) -> int | None:
        """The nearest unused row to ``config`` (marked used), ``None`` when all are used."""
        if self.used.all():
            return None
        d = self.distances(config)
        d[self.used] = np.inf
        row = int(np.argmin(d))  # the lowest row among equal distances
        self.used[row] = True
        return row


__all__ = ["NearestConfigurations", "infer_space", "trace_space"]
