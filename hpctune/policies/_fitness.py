"""Fitness tuples for PBT (Li et al., KDD 2019, §3.5.1): several objectives, missing values.

A trial's fitness is a tuple ``(f_1, ..., f_k)`` of signed objective values (larger is better);
an objective the trial never reported (or reported as NaN) is missing (``None``). Two tuples
compare

- **lexicographically**: the first objective decides, the next ones only break ties; or
- **by Pareto dominance** as the paper defines it: ``a`` is better than ``b`` only if *every*
  objective of ``a`` is larger; otherwise neither is better.

A missing value is worse than any present one, and two missing values are equal: a trial with
no measurement loses every tournament against one that has it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hpctune.policies._base import OptionError, StudyView, TrialView
from hpctune.study.states import Mode, as_mode

COMPARISONS = ("lexicographic", "pareto")

Fitness = tuple[float | None, ...]


@dataclass(frozen=True)
class Objective:
    """One element of the fitness tuple: a metric and its direction."""

    metric: str
    mode: Mode

    @property
    def sign(self) -> float:
        """+1 for ``max``, -1 for ``min``."""
        return 1.0 if self.mode == "max" else -1.0


def parse_objectives(texts: Sequence[str] | None, metric: str, mode: Mode) -> list[Objective]:
    """Parse ``["val_accuracy", "val_loss:min"]``; ``None`` or empty: the study's metric.

    A name without ``:max``/``:min`` takes the study's ``mode``.

    Raises:
        OptionError: ``objectives`` is not a list of such strings.
    """
    if not texts:
        return [Objective(metric, mode)]
    if isinstance(texts, str) or not all(isinstance(t, str) and t for t in texts):
        raise OptionError(
            "objectives",
            f'must be a list of metric names such as ["val_accuracy", "val_loss:min"], but got '
            f"{texts!r}",
        )
    out: list[Objective] = []
    for text in texts:
        name, _, direction = text.partition(":")
        direction = direction or mode
        if direction not in ("max", "min") or not name:
            raise OptionError("objectives", f"{text!r} must be NAME, NAME:max or NAME:min")
        out.append(Objective(name, as_mode(direction)))
    return out


def check_comparison(value: str) -> str:
    """Return ``value`` if it names a comparison, else raise :class:`OptionError`."""
    if value not in COMPARISONS:
        raise OptionError(
            "comparison", f"must be one of {', '.join(COMPARISONS)}, but got {value!r}"
        )
    return value


def fitness(trial: TrialView, objectives: Sequence[Objective], view: StudyView) -> Fitness:
    """The trial's fitness tuple from its latest reported metrics (signed; ``None`` missing)."""
    values: list[float | None] = []
    for objective in objectives:
        value = trial.last_metrics.get(objective.metric)
        if value is None and objective.metric == view.metric:
            value = trial.last_value
        if value is None or not math.isfinite(value):
            values.append(None)
        else:
            values.append(objective.sign * float(value))
    return tuple(values)


def _cmp(a: float | None, b: float | None) -> int:
    if a is None or b is None:
        return (a is not None) - (b is not None)
    return (a > b) - (a < b)


def compare(a: Fitness, b: Fitness, comparison: str = "lexicographic") -> int:
    """+1 if ``a`` is better, -1 if ``b`` is better, 0 if neither."""
    if comparison == "pareto":
        signs = [_cmp(x, y) for x, y in zip(a, b, strict=True)]
        if all(s > 0 for s in signs):
            return 1
        if all(s < 0 for s in signs):
            return -1
        return 0
    for x, y in zip(a, b, strict=True):
        c = _cmp(x, y)
        if c:
            return c
    return 0
