"""Hyperparameter schedules: a hyperparameter's value as a function of the step.

A schedule is a *hyperparameter sequence* in the sense of the Hippo stage-tree paper (§3): a
function of the step. Two stretches of training use the same hyperparameters when their schedules
are the same function over the same steps, so every schedule has one canonical dict form
(:meth:`Schedule.to_dict`) that compares equal exactly when the functions are the same.

The step counts steps completed: step 0 is before the first step. Fractional steps are allowed
(e.g. a per-batch learning rate inside an epoch). Trials receive schedules as dicts such as
``{"schedule": "cosine", "base": 0.1, "total_steps": 20, "min_value": 0.0, "integer": false}``;
:func:`evaluate` turns such a dict (or a plain value) into the value at a step.
"""

from __future__ import annotations

import abc
import bisect
import itertools
import math
import numbers
from collections.abc import Mapping
from dataclasses import KW_ONLY, MISSING, Field, dataclass, fields
from typing import Any, ClassVar

from hpctune.errors import HpctuneError


class ScheduleArgError(HpctuneError, ValueError):
    """An argument of a schedule is missing, unknown or invalid (bad input: exit code 2).

    Args:
        arg: The argument's name; nested arguments are dotted (``then.base``).
        message: What must hold and what was given.
    """

    exit_code = 2

    def __init__(self, arg: str, message: str) -> None:
        self.arg = arg
        self.message = message
        super().__init__(message)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _convert(shape: str, arg: str, kind: str, value: Any) -> Any:
    """Check ``value`` against the argument kind and return its canonical form."""
    where = f"schedule {shape!r}: `{arg}`"
    if kind == "number":
        if not _is_number(value) or not math.isfinite(value):
            raise ScheduleArgError(arg, f"{where} must be a finite number, but got {value!r}")
        return float(value)
    if kind == "int":
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise ScheduleArgError(arg, f"{where} must be an integer, but got {value!r}")
        return int(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ScheduleArgError(arg, f"{where} must be true or false, but got {value!r}")
        return bool(value)
    if kind == "str":
        if not isinstance(value, str):
            raise ScheduleArgError(arg, f"{where} must be a string, but got {value!r}")
        return value
    if kind in ("numbers", "ints"):
        if not isinstance(value, list | tuple):
            raise ScheduleArgError(arg, f"{where} must be a list, but got {value!r}")
        item_kind = "number" if kind == "numbers" else "int"
        items = []
        for item in value:
            try:
                items.append(_convert(shape, arg, item_kind, item))
            except ScheduleArgError:
                what = "finite numbers" if kind == "numbers" else "integers"
                raise ScheduleArgError(
                    arg, f"{where} must be a list of {what}, but got {list(value)!r}"
                ) from None
        return tuple(items)
    if kind == "schedule":
        if isinstance(value, Schedule):
            return value
        if not is_schedule_dict(value):
            raise ScheduleArgError(
                arg,
                f"{where} must be a schedule table such as "
                f'{{schedule = "cosine", base = 0.1, total_steps = 20}}, but got {value!r}',
            )
        try:
            return schedule_from_dict(value)
        except ScheduleArgError as exc:
            raise ScheduleArgError(f"{arg}.{exc.arg}", f"{where}: {exc.message}") from None
        except ValueError as exc:
            raise ScheduleArgError(arg, f"{where}: {exc}") from None
    raise ValueError(f"unknown argument kind {kind!r}")  # pragma: no cover - programming error


@dataclass(frozen=True)
class Schedule(abc.ABC):
    """Base class of all schedules.

    Subclasses are frozen dataclasses; their fields are the schedule's arguments, checked and
    brought to canonical form (floats for numbers, tuples for lists) on construction.

    Attributes:
        integer: Round the value to the nearest int (halves up), e.g. for batch sizes.
    """

    shape: ClassVar[str] = ""
    arg_kinds: ClassVar[Mapping[str, str]] = {}
    piecewise_constant: ClassVar[bool] = False

    _: KW_ONLY
    integer: bool = False

    def __post_init__(self) -> None:
        for name, kind in {**self.arg_kinds, "integer": "bool"}.items():
            arg = _FIELD_ALIASES.get(name, name)
            object.__setattr__(self, name, _convert(self.shape, arg, kind, getattr(self, name)))
        self._validate()

    def _validate(self) -> None:  # noqa: B027 - optional hook
        """Check the arguments' ranges (the kinds are checked already)."""

    def _fail(self, arg: str, must: str) -> ScheduleArgError:
        value = getattr(self, _ARG_FIELDS.get(arg, arg))
        shown = list(value) if isinstance(value, tuple) else value
        return ScheduleArgError(
            arg, f"schedule {self.shape!r}: `{arg}` must be {must}, but got {shown!r}"
        )

    @abc.abstractmethod
    def _raw(self, step: float) -> float:
        """The value at ``step`` before rounding."""

    def value(self, step: float) -> float | int:
        """Return the value after ``step`` steps (0 = before the first step).

        Raises:
            ValueError: ``step`` is negative or not finite.
        """
        if not _is_number(step) or not math.isfinite(step) or step < 0:
            raise ValueError(f"step must be a finite number >= 0, but got {step!r}")
        raw = self._raw(float(step))
        if self.integer:
            return math.floor(raw + 0.5)
        return float(raw)

    def to_dict(self) -> dict[str, Any]:
        """Return the canonical JSON-able form, every argument included."""
        out: dict[str, Any] = {"schedule": self.shape}
        for f in _arg_fields(type(self)):
            value = getattr(self, f.name)
            if isinstance(value, Schedule):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[_FIELD_ALIASES.get(f.name, f.name)] = value
        return out

    def _candidate_points(self, max_step: int) -> list[int]:
        """Integer steps where a piecewise-constant schedule may change."""
        return []

    def change_points(self, max_step: int) -> list[int]:
        """Return the steps in ``[1, max_step)`` where the value changes.

        For piecewise-constant shapes (constant, step, multistep, piecewise) these are the steps
        whose value differs from the previous step's; for the others every step, since their
        value changes continuously.
        """
        if not self.piecewise_constant:
            return list(range(1, max_step))
        return [
            s
            for s in self._candidate_points(max_step)
            if 1 <= s < max_step and self.value(s) != self.value(s - 1)
        ]


@dataclass(frozen=True)
class Constant(Schedule):
    """``value`` at every step."""

    shape: ClassVar[str] = "constant"
    arg_kinds: ClassVar[Mapping[str, str]] = {"value_": "number"}
    piecewise_constant: ClassVar[bool] = True

    value_: float  # the argument `value` (a field cannot shadow the method `value`)

    def _raw(self, step: float) -> float:
        return self.value_


@dataclass(frozen=True)
class Step(Schedule):
    """``base * gamma ** floor(step / step_size)`` (PyTorch ``StepLR``)."""

    shape: ClassVar[str] = "step"
    arg_kinds: ClassVar[Mapping[str, str]] = {
        "base": "number",
        "step_size": "int",
        "gamma": "number",
    }
    piecewise_constant: ClassVar[bool] = True

    base: float
    step_size: int
    gamma: float = 0.1

    def _validate(self) -> None:
        if self.step_size < 1:
            raise self._fail("step_size", "an integer >= 1")
        if self.gamma <= 0:
            raise self._fail("gamma", "> 0")

    def _raw(self, step: float) -> float:
        return self.base * self.gamma ** math.floor(step / self.step_size)

    def _candidate_points(self, max_step: int) -> list[int]:
        return list(range(self.step_size, max_step, self.step_size))


@dataclass(frozen=True)
class MultiStep(Schedule):
    """``base * gamma ** (number of milestones <= step)`` (PyTorch ``MultiStepLR``)."""

    shape: ClassVar[str] = "multistep"
    arg_kinds: ClassVar[Mapping[str, str]] = {
        "base": "number",
        "milestones": "ints",
        "gamma": "number",
    }
    piecewise_constant: ClassVar[bool] = True

    base: float
    milestones: tuple[int, ...]
    gamma: float = 0.1

    def _validate(self) -> None:
        _check_milestones(self)
        if self.gamma <= 0:
            raise self._fail("gamma", "> 0")

    def _raw(self, step: float) -> float:
        return self.base * self.gamma ** bisect.bisect_right(self.milestones, step)

    def _candidate_points(self, max_step: int) -> list[int]:
        return list(self.milestones)


@dataclass(frozen=True)
class Piecewise(Schedule):
    """``values[i]`` from ``milestones[i-1]`` (inclusive) to ``milestones[i]`` (exclusive)."""

    shape: ClassVar[str] = "piecewise"
    arg_kinds: ClassVar[Mapping[str, str]] = {"values": "numbers", "milestones": "ints"}
    piecewise_constant: ClassVar[bool] = True

    values: tuple[float, ...]
    milestones: tuple[int, ...]

    def _validate(self) -> None:
        _check_milestones(self)
        if len(self.values) != len(self.milestones) + 1:
            raise self._fail(
                "values",
                f"a list with one value more than milestones ({len(self.milestones) + 1} "
                f"values for {len(self.milestones)} milestones)",
            )

    def _raw(self, step: float) -> float:
        return self.values[bisect.bisect_right(self.milestones, step)]

    def _candidate_points(self, max_step: int) -> list[int]:
        return list(self.milestones)


def _check_milestones(schedule: MultiStep | Piecewise) -> None:
    ms = schedule.milestones
    if any(m < 1 for m in ms) or any(b <= a for a, b in itertools.pairwise(ms)):
        raise schedule._fail("milestones", "strictly increasing integers >= 1")


@dataclass(frozen=True)
class Exponential(Schedule):
    """``base * gamma ** step`` (PyTorch ``ExponentialLR``)."""

    shape: ClassVar[str] = "exponential"
    arg_kinds: ClassVar[Mapping[str, str]] = {"base": "number", "gamma": "number"}

    base: float
    gamma: float

    def _validate(self) -> None:
        if self.gamma <= 0:
            raise self._fail("gamma", "> 0")

    def _raw(self, step: float) -> float:
        return float(self.base * self.gamma**step)


@dataclass(frozen=True)
class Linear(Schedule):
    """From ``start`` to ``end`` linearly over ``steps`` steps, then ``end``."""

    shape: ClassVar[str] = "linear"
    arg_kinds: ClassVar[Mapping[str, str]] = {"start": "number", "end": "number", "steps": "int"}

    start: float
    end: float
    steps: int

    def _validate(self) -> None:
        if self.steps < 1:
            raise self._fail("steps", "an integer >= 1")

    def _raw(self, step: float) -> float:
        return self.start + (self.end - self.start) * min(step, self.steps) / self.steps


@dataclass(frozen=True)
class Cosine(Schedule):
    """``min_value + (base - min_value) * (1 + cos(pi * step / total_steps)) / 2``.

    PyTorch's ``CosineAnnealingLR`` with ``T_max = total_steps``; holds ``min_value`` after.
    """

    shape: ClassVar[str] = "cosine"
    arg_kinds: ClassVar[Mapping[str, str]] = {
        "base": "number",
        "total_steps": "int",
        "min_value": "number",
    }

    base: float
    total_steps: int
    min_value: float = 0.0

    def _validate(self) -> None:
        if self.total_steps < 1:
            raise self._fail("total_steps", "an integer >= 1")

    def _raw(self, step: float) -> float:
        t = min(step, self.total_steps) / self.total_steps
        return self.min_value + (self.base - self.min_value) * (1 + math.cos(math.pi * t)) / 2


@dataclass(frozen=True)
class Warmup(Schedule):
    """Linear warm-up from ``start_value`` to ``then``'s first value, then ``then``.

    For ``step < warmup_steps`` the value is ``start_value + (then(0) - start_value) * step /
    warmup_steps``; afterwards ``then(step - warmup_steps)``.
    """

    shape: ClassVar[str] = "warmup"
    arg_kinds: ClassVar[Mapping[str, str]] = {
        "warmup_steps": "int",
        "then": "schedule",
        "start_value": "number",
    }

    warmup_steps: int
    then: Schedule
    start_value: float = 0.0

    def _validate(self) -> None:
        if self.warmup_steps < 1:
            raise self._fail("warmup_steps", "an integer >= 1")

    def _raw(self, step: float) -> float:
        if step >= self.warmup_steps:
            return float(self.then.value(step - self.warmup_steps))
        target = float(self.then.value(0))
        return self.start_value + (target - self.start_value) * step / self.warmup_steps


@dataclass(frozen=True)
class Cyclic(Schedule):
    """Triangle waves between ``low`` and ``high`` (PyTorch ``CyclicLR``).

    Each cycle lasts ``period`` steps, starts at ``low`` and peaks at ``period / 2``. With
    ``mode = "triangular2"`` the amplitude halves every cycle.
    """

    shape: ClassVar[str] = "cyclic"
    arg_kinds: ClassVar[Mapping[str, str]] = {
        "low": "number",
        "high": "number",
        "period": "int",
        "mode": "str",
    }
    modes: ClassVar[tuple[str, ...]] = ("triangular", "triangular2")

    low: float
    high: float
    period: int
    mode: str = "triangular"

    def _validate(self) -> None:
        if self.period < 2:
            raise self._fail("period", "an integer >= 2 (the full cycle length in steps)")
        if self.mode not in self.modes:
            raise self._fail("mode", f"one of {', '.join(map(repr, self.modes))}")
        if not self.low < self.high:
            raise self._fail("high", f"greater than low ({self.low})")

    def _raw(self, step: float) -> float:
        cycle = math.floor(step / self.period)
        x = abs(2 * (step / self.period - cycle) - 1)  # 1 at cycle ends, 0 at the peak
        scale = 1.0 if self.mode == "triangular" else 0.5**cycle
        return self.low + (self.high - self.low) * (1 - x) * scale


SHAPES: Mapping[str, type[Schedule]] = {
    cls.shape: cls
    for cls in (Constant, Step, MultiStep, Piecewise, Exponential, Linear, Cosine, Warmup, Cyclic)
}

# Dataclass field name -> argument name, where a field cannot be called like the argument.
_FIELD_ALIASES: Mapping[str, str] = {"value_": "value"}
_ARG_FIELDS: Mapping[str, str] = {v: k for k, v in _FIELD_ALIASES.items()}


def shape_args(shape: str) -> dict[str, str]:
    """Return ``{argument: kind}`` for ``shape``, ``integer`` included.

    Kinds: ``number``, ``int``, ``bool``, ``str``, ``numbers`` and ``ints`` (lists), ``schedule``.
    """
    cls = SHAPES[shape]
    kinds = {_FIELD_ALIASES.get(k, k): v for k, v in cls.arg_kinds.items()}
    return {**kinds, "integer": "bool"}


def _toml_repr(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _arg_fields(cls: type[Schedule]) -> list[Field[Any]]:
    """The dataclass fields of ``cls`` in argument order, ``integer`` last."""
    all_fields = fields(cls)
    return [f for f in all_fields if f.name != "integer"] + [
        f for f in all_fields if f.name == "integer"
    ]


def _has_default(cls: type[Schedule], field_name: str) -> bool:
    f = next(f for f in fields(cls) if f.name == field_name)
    return f.default is not MISSING


def schedule_from_dict(d: Mapping[str, Any]) -> Schedule:
    """Build a schedule from its dict form ``{"schedule": <shape>, <arg>: <value>, ...}``.

    Raises:
        ValueError: The shape is unknown (message lists the shapes), or
            :class:`ScheduleArgError` (a ``ValueError`` with ``.arg``) for a missing, unknown or
            invalid argument; the message says what is allowed.
    """
    if not isinstance(d, Mapping):
        raise ValueError(f"a schedule must be a table with a `schedule` key, but got {d!r}")
    shape = d.get("schedule")
    if not isinstance(shape, str) or shape not in SHAPES:
        raise ScheduleArgError(
            "schedule", f"unknown schedule shape {shape!r}; valid shapes: {', '.join(SHAPES)}"
        )
    cls = SHAPES[shape]
    by_arg = {_FIELD_ALIASES.get(f.name, f.name): f.name for f in _arg_fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        if key == "schedule":
            continue
        if key not in by_arg:
            raise ScheduleArgError(
                key,
                f"schedule {shape!r} has no argument `{key}`; valid arguments: {_signature(cls)}",
            )
        kwargs[by_arg[key]] = value
    for arg, field_name in by_arg.items():
        if field_name not in kwargs and not _has_default(cls, field_name):
            raise ScheduleArgError(
                arg,
                f"schedule {shape!r} needs the argument `{arg}`; arguments: {_signature(cls)}",
            )
    return cls(**kwargs)


def _signature(cls: type[Schedule]) -> str:
    parts = []
    for f in _arg_fields(cls):
        name = _FIELD_ALIASES.get(f.name, f.name)
        if _has_default(cls, f.name):
            parts.append(f"{name} (default {_toml_repr(f.default)})")
        else:
            parts.append(name)
    return ", ".join(parts)


def is_schedule_dict(obj: Any) -> bool:
    """Return True if ``obj`` is a dict-like with a ``schedule`` key."""
    return isinstance(obj, Mapping) and "schedule" in obj


def evaluate(value: Any, step: float) -> Any:
    """Return the value of the schedule dict ``value`` at ``step``, or ``value`` unchanged."""
    if is_schedule_dict(value):
        return schedule_from_dict(value).value(step)
    return value


__all__ = [
    "SHAPES",
    "Constant",
    "Cosine",
    "Cyclic",
    "Exponential",
    "Linear",
    "MultiStep",
    "Piecewise",
    "Schedule",
    "ScheduleArgError",
    "Step",
    "Warmup",
    "evaluate",
    "is_schedule_dict",
    "schedule_from_dict",
    "shape_args",
]
