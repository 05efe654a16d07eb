"""Tests of hpctune.study.schedules: values, canonical dicts, errors, change points, PyTorch
parity."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.study.schedules import (
    SHAPES,
    Constant,
    Cosine,
    Cyclic,
    Exponential,
    Linear,
    MultiStep,
    Piecewise,
    Schedule,
    ScheduleArgError,
    Step,
    Warmup,
    evaluate,
    is_schedule_dict,
    schedule_from_dict,
    shape_args,
)

# ----------------------------------------------------------------------------------------------
# PyTorch parity: hpctune's value at step k equals the learning rate after k scheduler steps.


def _torch_lrs(make: Any, base: float, steps: int) -> list[float]:
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=base)
    sched = make(opt)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


def _assert_matches(schedule: Schedule, lrs: list[float], rel: float = 1e-9) -> None:
    ours = [schedule.value(k) for k in range(len(lrs))]
    assert ours == pytest.approx(lrs, rel=rel, abs=1e-12)


@pytest.mark.parametrize(("step_size", "gamma"), [(1, 0.5), (3, 0.1), (7, 0.9)])
def test_step_matches_torch_steplr(step_size: int, gamma: float) -> None:
    lrs = _torch_lrs(
        lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=step_size, gamma=gamma), 0.1, 40
    )
    _assert_matches(Step(0.1, step_size, gamma), lrs)


@pytest.mark.parametrize("milestones", [[5], [3, 10, 11], [1, 2, 30]])
def test_multistep_matches_torch_multisteplr(milestones: list[int]) -> None:
    lrs = _torch_lrs(
        lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=milestones, gamma=0.3),
        0.2,
        35,
    )
    _assert_matches(MultiStep(0.2, milestones, gamma=0.3), lrs)


def test_exponential_matches_torch_exponentiallr() -> None:
    lrs = _torch_lrs(lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.93), 0.5, 50)
    _assert_matches(Exponential(0.5, 0.93), lrs)


@pytest.mark.parametrize(("total", "eta_min"), [(10, 0.0), (25, 0.001)])
def test_cosine_matches_torch_within_total_steps(total: int, eta_min: float) -> None:
    lrs = _torch_lrs(
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total, eta_min=eta_min),
        0.1,
        total,
    )
    _assert_matches(Cosine(0.1, total, min_value=eta_min), lrs, rel=1e-6)


def test_cosine_holds_min_value_after_total_steps() -> None:
    c = Cosine(0.1, 10, min_value=0.01)
    assert [c.value(s) for s in (10, 11, 100, 10.5)] == pytest.approx([0.01] * 4)


def test_linear_matches_torch_linearlr() -> None:
    lrs = _torch_lrs(
        lambda o: torch.optim.lr_scheduler.LinearLR(
            o, start_factor=0.25, end_factor=1.0, total_iters=8
        ),
        0.4,
        20,
    )
    _assert_matches(Linear(0.1, 0.4, 8), lrs, rel=1e-6)


@pytest.mark.parametrize("mode", ["triangular", "triangular2"])
@pytest.mark.parametrize("period", [2, 5, 8])
def test_cyclic_matches_torch_cycliclr(mode: str, period: int) -> None:
    lrs = _torch_lrs(
        lambda o: torch.optim.lr_scheduler.CyclicLR(
            o,
            base_lr=0.01,
            max_lr=0.1,
            step_size_up=period / 2,
            mode=mode,
            cycle_momentum=False,
        ),
        0.01,
        5 * period,
    )
    _assert_matches(Cyclic(0.01, 0.1, period, mode=mode), lrs, rel=1e-6)


# ----------------------------------------------------------------------------------------------
# Semantics


def test_step_values_and_fractional_steps() -> None:
    s = Step(1.0, 10, 0.5)
    assert s.value(0) == 1.0
    assert s.value(9.999) == 1.0
    assert s.value(10) == 0.5
    assert s.value(25.5) == 0.25


def test_piecewise_values_switch_at_milestones() -> None:
    p = Piecewise([32, 64, 128], [5, 10], integer=True)
    assert [p.value(s) for s in (0, 4, 4.9, 5, 9, 10, 1000)] == [32, 32, 32, 64, 64, 128, 128]
    assert all(isinstance(p.value(s), int) for s in range(12))


def test_linear_then_holds_end() -> None:
    lin = Linear(1.0, 0.0, 4)
    assert [lin.value(s) for s in (0, 1, 2, 4, 5, 100)] == pytest.approx([1, 0.75, 0.5, 0, 0, 0])


def test_warmup_ramps_to_then_first_value_then_follows_it_shifted() -> None:
    then = Step(0.1, 5, 0.1)
    w = Warmup(4, then, start_value=0.02)
    assert w.value(0) == pytest.approx(0.02)
    assert w.value(2) == pytest.approx(0.06)
    assert w.value(4) == pytest.approx(0.1)
    assert w.value(9) == pytest.approx(then.value(5)) == pytest.approx(0.01)


def test_cyclic_triangular2_halves_the_amplitude_each_cycle() -> None:
    c = Cyclic(0.0, 1.0, 4, mode="triangular2")
    peaks = [c.value(2 + 4 * k) for k in range(4)]
    assert peaks == pytest.approx([1.0, 0.5, 0.25, 0.125])
    assert c.value(4) == pytest.approx(0.0)


def test_integer_rounds_half_up() -> None:
    lin = Linear(0, 3, 6, integer=True)
    assert [lin.value(s) for s in range(7)] == [0, 1, 1, 2, 2, 3, 3]  # 0.5 -> 1, 1.5 -> 2


@pytest.mark.parametrize("step", [-1, -0.001, math.nan, math.inf, "3"])
def test_value_rejects_bad_steps(step: Any) -> None:
    with pytest.raises(ValueError, match="step must be"):
        Constant(1.0).value(step)


# ----------------------------------------------------------------------------------------------
# Canonical dicts


def test_to_dict_is_canonical_with_defaults() -> None:
    d = schedule_from_dict({"schedule": "step", "base": 1, "step_size": 3})
    assert d.to_dict() == {
        "schedule": "step",
        "base": 1.0,
        "step_size": 3,
        "gamma": 0.1,
        "integer": False,
    }
    assert isinstance(d.to_dict()["base"], float)
    same = schedule_from_dict({"schedule": "step", "base": 1.0, "step_size": 3, "gamma": 0.1})
    assert same.to_dict() == d.to_dict()
    assert same == d


def test_constant_dict_uses_value_key() -> None:
    c = schedule_from_dict({"schedule": "constant", "value": 3})
    assert c.to_dict() == {"schedule": "constant", "value": 3.0, "integer": False}
    assert c.value(7) == 3.0


EXAMPLES: list[dict[str, Any]] = [
    {"schedule": "constant", "value": 0.5},
    {"schedule": "step", "base": 0.1, "step_size": 3, "gamma": 0.5},
    {"schedule": "multistep", "base": 0.1, "milestones": [3, 8]},
    {"schedule": "piecewise", "values": [32, 64], "milestones": [4], "integer": True},
    {"schedule": "exponential", "base": 0.1, "gamma": 0.9},
    {"schedule": "linear", "start": 0.0, "end": 1.0, "steps": 10},
    {"schedule": "cosine", "base": 0.1, "total_steps": 20},
    {
        "schedule": "warmup",
        "warmup_steps": 3,
        "then": {"schedule": "cosine", "base": 0.1, "total_steps": 20},
    },
    {"schedule": "cyclic", "low": 0.01, "high": 0.1, "period": 6, "mode": "triangular2"},
]


def test_examples_cover_every_shape() -> None:
    assert {e["schedule"] for e in EXAMPLES} == set(SHAPES)


@pytest.mark.parametrize("d", EXAMPLES, ids=lambda d: d["schedule"])
def test_round_trip_through_json(d: dict[str, Any]) -> None:
    s = schedule_from_dict(d)
    canonical = s.to_dict()
    again = schedule_from_dict(json.loads(json.dumps(canonical)))
    assert again == s
    assert again.to_dict() == canonical
    assert set(canonical) == {"schedule", *shape_args(d["schedule"])}
    assert [again.value(k) for k in range(30)] == [s.value(k) for k in range(30)]


def test_evaluate_and_is_schedule_dict() -> None:
    d = {"schedule": "step", "base": 1.0, "step_size": 2, "gamma": 0.5}
    assert is_schedule_dict(d)
    assert not is_schedule_dict({"type": "float"})
    assert not is_schedule_dict(0.1)
    assert evaluate(d, 4) == 0.25
    assert evaluate(0.1, 4) == 0.1
    assert evaluate("adam", 4) == "adam"


# ----------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    ("d", "arg", "text"),
    [
        ({"schedule": "cosin", "base": 1}, "schedule", "valid shapes: constant, step"),
        ({"schedule": "cosine", "base": 1}, "total_steps", "needs the argument `total_steps`"),
        ({"schedule": "cosine", "base": 1, "total_steps": 3, "lr": 1}, "lr", "no argument `lr`"),
        ({"schedule": "step", "base": 1, "step_size": 0}, "step_size", "integer >= 1"),
        ({"schedule": "step", "base": 1, "step_size": 2.5}, "step_size", "must be an integer"),
        ({"schedule": "step", "base": "x", "step_size": 2}, "base", "finite number"),
        ({"schedule": "step", "base": True, "step_size": 2}, "base", "finite number"),
        ({"schedule": "exponential", "base": 1, "gamma": 0}, "gamma", "> 0"),
        ({"schedule": "exponential", "base": math.inf, "gamma": 0.5}, "base", "finite"),
        ({"schedule": "multistep", "base": 1, "milestones": [5, 5]}, "milestones", "strictly"),
        ({"schedule": "multistep", "base": 1, "milestones": [0, 5]}, "milestones", ">= 1"),
        ({"schedule": "multistep", "base": 1, "milestones": 5}, "milestones", "must be a list"),
        ({"schedule": "piecewise", "values": [1, 2], "milestones": [3, 4]}, "values", "one value"),
        ({"schedule": "linear", "start": 1, "end": 0, "steps": 0}, "steps", ">= 1"),
        ({"schedule": "cyclic", "low": 1, "high": 1, "period": 4}, "high", "greater than low"),
        ({"schedule": "cyclic", "low": 0, "high": 1, "period": 1}, "period", ">= 2"),
        (
            {"schedule": "cyclic", "low": 0, "high": 1, "period": 4, "mode": "exp"},
            "mode",
            "one of",
        ),
        ({"schedule": "warmup", "warmup_steps": 2, "then": 0.1}, "then", "schedule table"),
        (
            {"schedule": "warmup", "warmup_steps": 2, "then": {"schedule": "step", "base": 1}},
            "then.step_size",
            "needs the argument",
        ),
        ({"schedule": "constant", "value": 1, "integer": 1}, "integer", "true or false"),
    ],
)
def test_bad_arguments_name_the_argument(d: dict[str, Any], arg: str, text: str) -> None:
    with pytest.raises(ScheduleArgError) as info:
        schedule_from_dict(d)
    assert info.value.arg == arg
    assert text in str(info.value)
    assert isinstance(info.value, ValueError)


def test_not_a_mapping_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="`schedule` key"):
        schedule_from_dict([1, 2])  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# Change points


def _brute_force_changes(s: Schedule, max_step: int) -> list[int]:
    return [k for k in range(1, max_step) if s.value(k) != s.value(k - 1)]


def test_change_points_of_piecewise_constant_shapes() -> None:
    assert Constant(1.0).change_points(100) == []
    assert Step(1.0, 10).change_points(35) == [10, 20, 30]
    assert Step(1.0, 10, gamma=1.0).change_points(35) == []
    assert MultiStep(1.0, [5, 40]).change_points(40) == [5]
    assert Piecewise([1, 2, 2, 3], [3, 6, 9]).change_points(20) == [3, 9]
    assert Piecewise([32, 32.2], [3], integer=True).change_points(20) == []


@pytest.mark.parametrize(
    "s",
    [
        Exponential(1.0, 0.9),
        Linear(0, 1, 5),
        Cosine(1.0, 5),
        Cyclic(0, 1, 4),
        Warmup(2, Constant(1.0)),
    ],
    ids=lambda s: s.shape,
)
def test_change_points_of_other_shapes_are_every_step(s: Schedule) -> None:
    assert s.change_points(12) == list(range(1, 12))


@settings(max_examples=150, deadline=None)
@given(
    base=st.floats(0.001, 10),
    gamma=st.floats(0.01, 2),
    step_size=st.integers(1, 12),
    milestones=st.lists(st.integers(1, 60), max_size=5, unique=True).map(sorted),
    values=st.lists(st.integers(1, 4), min_size=6, max_size=6),
    integer=st.booleans(),
    max_step=st.integers(1, 70),
)
def test_change_points_match_brute_force(
    base: float,
    gamma: float,
    step_size: int,
    milestones: list[int],
    values: list[int],
    integer: bool,
    max_step: int,
) -> None:
    schedules = [
        Step(base, step_size, gamma, integer=integer),
        MultiStep(base, milestones, gamma, integer=integer),
        Piecewise(values[: len(milestones) + 1], milestones, integer=integer),
    ]
    for s in schedules:
        assert s.change_points(max_step) == _brute_force_changes(s, max_step)
        # between change points the value is constant, also at fractional steps
        points = [0, *s.change_points(max_step), max_step]
        for a, b in itertools.pairwise(points):
            assert s.value(a) == s.value((a + b) / 2) == s.value(b - 0.001)
