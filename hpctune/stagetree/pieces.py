"""Stage identity: a trial's configuration cut into stages, each a canonical, hashable piece.

Hippo (§3) calls two sub-sequences identical when they have the same function and the same
domain. Here every hyperparameter's value over steps ``[0, max_steps)`` is cut into *pieces*:
maximal stretches on which one elementary function gives the value. A :class:`Piece` names that
function canonically, in absolute steps:

- ``constant``: the value itself (as evaluated, so ``step(0.1, 10)`` on ``[0, 10)``,
  ``piecewise([0.1, 0.01], [10])`` on ``[0, 10)`` and ``constant(0.1)`` are the same piece).
  Every stretch of a piecewise-constant schedule (constant, step, multistep, piecewise) and the
  tail of linear and cosine schedules after their last step is one.
- ``linear`` (``start``, ``end``, ``steps``): the ramp of a linear schedule *and* the warm-up of
  a warmup schedule (start value to the first value of ``then``), which are the same formula; so
  ``warmup(5)`` before a cosine and ``warmup(5)`` before a step schedule share the 5-step ramp
  when their start and target values are equal.
- ``cosine`` (``base``, ``total_steps``, ``min_value``), ``exponential`` (``base``, ``gamma``),
  ``cyclic`` (``low``, ``high``, ``period``, ``mode``): one piece each while they vary.
- ``value``: a parameter that is not a schedule (its canonical JSON), constant over all steps.

Non-constant pieces also carry ``offset``, the absolute step where the function's own step 0
lies (``warmup_steps`` for the schedule after a warm-up), and ``rounded`` (some level of the
schedule rounds to integers). Every piece carries ``integer`` (the value is an int). Degenerate
curves (a linear ramp or warm-up between equal values, a cosine with ``base == min_value``,
``exponential`` with ``gamma = 1``) are the constants they evaluate to.

The rule: two stretches share a stage exactly when they cover the same steps and every
parameter's pieces are equal. Equal pieces are evaluated by the same formula with the same
arguments, so equal pieces always give equal values (never a false merge); the converse does not
hold (``step(0.1, gamma = 0.1)`` after its first step gives ``0.010000000000000002``, which is
not the constant ``0.01``; two ``exponential`` pieces with different offsets are different
pieces even where a shift of ``base`` would make them agree).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpctune.study.formatting import format_schedule, format_value
from hpctune.study.schedules import (
    Constant,
    Cosine,
    Cyclic,
    Exponential,
    Linear,
    MultiStep,
    Piecewise,
    Schedule,
    Step,
    Warmup,
    is_schedule_dict,
    schedule_from_dict,
)

KINDS = ("constant", "linear", "cosine", "exponential", "cyclic", "value")


@dataclass(frozen=True)
class Piece:
    """One parameter's elementary function on a stretch of steps (hashable, canonical).

    Attributes:
        kind: One of :data:`KINDS`.
        args: The function's arguments (floats, ints, strings; ``value``: canonical JSON).
        offset: The absolute step of the function's own step 0 (0 for constants and values).
        rounded: The value is rounded to the nearest integer (halves up).
        integer: The value is an int (else a float; ``value`` pieces: as given).
    """

    kind: str
    args: tuple[Any, ...]
    offset: int = 0
    rounded: bool = False
    integer: bool = False

    def value(self, step: float) -> Any:
        """Return the value at absolute ``step`` (as the schedule it came from gives it)."""
        if self.kind == "value":
            return json.loads(self.args[0])
        if self.kind == "constant":
            return self.args[0]
        local = float(step) - self.offset
        raw = float(_elementary(self).value(local))
        if self.rounded:
            raw = math.floor(raw + 0.5)
        return int(raw) if self.integer else float(raw)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-able form."""
        return {
            "kind": self.kind,
            "args": list(self.args),
            "offset": self.offset,
            "rounded": self.rounded,
            "integer": self.integer,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Piece:
        """Rebuild a piece from :meth:`to_dict`."""
        return cls(
            str(d["kind"]),
            tuple(d["args"]),
            int(d["offset"]),
            bool(d["rounded"]),
            bool(d["integer"]),
        )

    def describe(self) -> str:
        """Return a short human form in the one schedule format, e.g.
        ``cosine(base=0.1, total_steps=20)@5`` (``@``: the step of the function's own step 0)."""
        if self.kind == "value":
            return format_value(json.loads(self.args[0]))
        if self.kind == "constant":
            return format_value(self.args[0])
        text = format_schedule(_elementary(self).to_dict())
        return text + (f"@{self.offset}" if self.offset else "")


def _elementary(piece: Piece) -> Schedule:
    """The schedule (no rounding) that evaluates a non-constant piece at its local step."""
    a = piece.args
    if piece.kind == "linear":
        return Linear(a[0], a[1], a[2])
    if piece.kind == "cosine":
        return Cosine(a[0], a[1], a[2])
    if piece.kind == "exponential":
        return Exponential(a[0], a[1])
    if piece.kind == "cyclic":
        return Cyclic(a[0], a[1], a[2], a[3])
    raise ValueError(f"unknown piece kind {piece.kind!r}; kinds: {', '.join(KINDS)}")


@dataclass(frozen=True)
class Stretch:
    """A piece on the steps ``[start, end)``."""

    start: int
    end: int
    piece: Piece


def schedule_pieces(schedule: Schedule, max_steps: int) -> list[Stretch]:
    """Cut ``schedule`` over ``[0, max_steps)`` into maximal stretches of equal pieces.

    Raises:
        ValueError: ``max_steps`` is below 1.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, but got {max_steps}")
    raw = _pieces(schedule, 0, max_steps, (), schedule.integer)
    return _merge(raw)


def _pieces(
    s: Schedule, offset: int, end: int, rounds: tuple[bool, ...], integer: bool
) -> list[Stretch]:
    """Stretches of ``s`` whose own step 0 is at absolute ``offset``, on ``[offset, end)``.

    ``rounds`` are the rounding flags of the enclosing schedules; ``integer`` the outermost's.
    """
    rounded = any(rounds) or s.integer
    if offset >= end:
        return []

    def constant(start: int, stop: int) -> Stretch:
        # The value as the outermost schedule gives it: evaluate through the same chain.
        value = _chain_value(s, start - offset, rounds, integer)
        return Stretch(start, stop, Piece("constant", (value,), integer=integer))

    def varying(kind: str, args: tuple[Any, ...], start: int, stop: int, flat: bool) -> Stretch:
        if flat:  # a degenerate curve (equal ends, gamma 1) is the constant it evaluates to
            return constant(start, stop)
        return Stretch(start, stop, Piece(kind, args, offset, rounded, integer))

    if isinstance(s, Constant | Step | MultiStep | Piecewise):
        points = [offset + p for p in s.change_points(end - offset)]
        bounds = [offset, *points, end]
        return [constant(a, b) for a, b in itertools.pairwise(bounds)]
    if isinstance(s, Linear | Cosine):
        ramp_end = offset + (s.steps if isinstance(s, Linear) else s.total_steps)
        if isinstance(s, Linear):
            args: tuple[Any, ...] = (s.start, s.end, s.steps)
            kind, flat = "linear", s.start == s.end
        else:
            args, kind = (s.base, s.total_steps, s.min_value), "cosine"
            flat = s.base == s.min_value
        out = [varying(kind, args, offset, min(ramp_end, end), flat)]
        if ramp_end < end:
            out.append(constant(ramp_end, end))
        return out
    if isinstance(s, Exponential):
        return [varying("exponential", (s.base, s.gamma), offset, end, s.gamma == 1.0)]
    if isinstance(s, Cyclic):
        return [varying("cyclic", (s.low, s.high, s.period, s.mode), offset, end, False)]
    if isinstance(s, Warmup):
        target = float(s.then.value(0))
        ramp_end = offset + s.warmup_steps
        args = (s.start_value, target, s.warmup_steps)
        out = [varying("linear", args, offset, min(ramp_end, end), s.start_value == target)]
        return out + _pieces(s.then, ramp_end, end, (*rounds, s.integer), integer)
    raise ValueError(f"no stage pieces for schedule shape {s.shape!r}")  # pragma: no cover


def _chain_value(s: Schedule, local: int, rounds: tuple[bool, ...], integer: bool) -> Any:
    """Evaluate ``s`` at its local step and apply the enclosing schedules' conversions."""
    value: Any = s.value(local)
    for r in reversed(rounds):  # innermost enclosing first
        value = math.floor(float(value) + 0.5) if r else float(value)
    if rounds:  # the outermost conversion decides the type
        value = int(value) if integer else float(value)
    return value


def _merge(stretches: list[Stretch]) -> list[Stretch]:
    """Join neighbours with equal pieces; drop empty stretches."""
    out: list[Stretch] = []
    for st in stretches:
        if st.end <= st.start:
            continue
        if out and out[-1].piece == st.piece and out[-1].end == st.start:
            out[-1] = Stretch(out[-1].start, st.end, st.piece)
        else:
            out.append(st)
    return out


def value_pieces(value: Any, max_steps: int) -> list[Stretch]:
    """Stretches of one configuration value: a schedule dict, or a plain value (one stretch).

    Raises:
        ValueError: A schedule dict is invalid (message from :func:`schedule_from_dict`).
    """
    if is_schedule_dict(value):
        return schedule_pieces(schedule_from_dict(value), max_steps)
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, but got {max_steps}")
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return [Stretch(0, max_steps, Piece("value", (text,)))]


ConfigPiece = tuple[tuple[str, Piece], ...]
"""The pieces of all parameters on one stretch, sorted by parameter name (hashable)."""


@dataclass(frozen=True)
class TrialStage:
    """One stage of a trial: the steps ``[start, end)`` under one configuration piece."""

    start: int
    end: int
    config: ConfigPiece


def trial_stages(config: Mapping[str, Any], max_steps: int) -> list[TrialStage]:
    """Cut a trial's configuration into stages at every step where some piece changes.

    Args:
        config: Parameter name to value (schedules as schedule dicts), as generators give them.
        max_steps: The trial's last step; the stages cover ``[0, max_steps)``.

    Raises:
        ValueError: ``max_steps`` is below 1 or a schedule dict is invalid (the message names
            the parameter).
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, but got {max_steps}")
    per_param: dict[str, list[Stretch]] = {}
    for name in sorted(config):
        try:
            per_param[name] = value_pieces(config[name], max_steps)
        except ValueError as exc:
            raise ValueError(f"parameter {name!r}: {exc}") from None
    bounds = sorted({0, max_steps} | {st.start for sts in per_param.values() for st in sts})
    stages: list[TrialStage] = []
    for start, end in itertools.pairwise(bounds):
        piece = tuple((name, _piece_at(sts, start)) for name, sts in per_param.items())
        stages.append(TrialStage(start, end, piece))
    return stages


def _piece_at(stretches: list[Stretch], step: int) -> Piece:
    for st in stretches:
        if st.start <= step < st.end:
            return st.piece
    raise ValueError(f"no stretch covers step {step}")  # pragma: no cover - stretches tile


def config_piece_to_json(config: ConfigPiece) -> list[list[Any]]:
    """Return ``[[name, piece dict], ...]``."""
    return [[name, piece.to_dict()] for name, piece in config]


def config_piece_from_json(data: list[list[Any]]) -> ConfigPiece:
    """Rebuild a configuration piece from :func:`config_piece_to_json`."""
    return tuple((str(name), Piece.from_dict(d)) for name, d in data)


def describe_config(config: ConfigPiece, only: set[str] | None = None) -> str:
    """Return ``name=piece`` pairs, e.g. ``batch_size=32 lr=cosine(0.1, 20, 0)@5``."""
    return " ".join(f"{n}={p.describe()}" for n, p in config if only is None or n in only)


__all__ = [
    "KINDS",
    "ConfigPiece",
    "Piece",
    "Stretch",
    "TrialStage",
    "config_piece_from_json",
    "config_piece_to_json",
    "describe_config",
    "schedule_pieces",
    "trial_stages",
    "value_pieces",
]
