"""Mutation rules of PBT (Li et al. 2019 §3.5.2) and Ray's explore, as properties."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.policies._fitness import compare, parse_objectives
from hpctune.policies._mutation import explore, mutate, mutate_value, neighbour
from hpctune.study.space import CategoricalParam, FixedParam, FloatParam, IntParam
from hpctune.testing._random_study import default_space

seeds = st.integers(0, 2**32 - 1)


@st.composite
def float_ranges(draw: st.DrawFn) -> tuple[FloatParam, float]:
    log = draw(st.booleans())
    low = draw(st.floats(1e-6 if log else -1e3, 1e3))
    high = draw(st.floats(low + abs(low) * 0.001 + 1e-9, 1e4))  # above low, also for low < 0
    param = FloatParam(low, high, log=log)
    value = draw(st.floats(low, high))
    return param, value


@given(float_ranges(), seeds)
def test_scalars_are_multiplied_by_a_factor_within_bounds(
    case: tuple[FloatParam, float], seed: int
) -> None:
    param, value = case
    out = mutate_value(param, value, np.random.default_rng(seed))
    assert param.low <= out <= param.high
    clipped = [min(max(value * f, param.low), param.high) for f in (0.8, 1.2)]
    assert any(math.isclose(out, c, rel_tol=1e-12, abs_tol=1e-300) for c in clipped)


@given(st.integers(-50, 50), st.integers(1, 100), st.data(), seeds)
def test_ints_move_by_a_factor_or_one_and_stay_in_bounds(
    low: int, span: int, data: st.DataObject, seed: int
) -> None:
    param = IntParam(low, low + span)
    value = data.draw(st.integers(param.low, param.high))
    out = mutate_value(param, value, np.random.default_rng(seed))
    assert isinstance(out, int)
    assert param.low <= out <= param.high
    candidates = set()
    for f in (0.8, 1.2):
        scaled = math.floor(value * f + 0.5)
        if scaled == value:
            scaled += 1 if f > 1 else -1
        candidates.add(min(max(scaled, param.low), param.high))
    assert out in candidates


@given(st.lists(st.integers(-100, 100), min_size=2, max_size=8, unique=True), st.data(), seeds)
def test_discrete_values_move_to_a_neighbour(
    choices: list[int], data: st.DataObject, seed: int
) -> None:
    param = CategoricalParam(tuple(choices))
    value = data.draw(st.sampled_from(choices))
    out = mutate_value(param, value, np.random.default_rng(seed))
    ordered = sorted(choices)
    i = ordered.index(value)
    assert out in ordered[max(i - 1, 0) : i] + ordered[i + 1 : i + 2]


def test_discrete_neighbours_are_either_side_with_equal_chance() -> None:
    rng = np.random.default_rng(0)
    draws = [neighbour([1, 2, 3], 2, rng) for _ in range(2000)]
    assert set(draws) == {1, 3}
    assert 0.45 < draws.count(1) / len(draws) < 0.55
    assert neighbour([1, 2, 3], 1, rng) == 2
    assert neighbour([1, 2, 3], 3, rng) == 2
    assert neighbour([1, 2, 3], 2.5, rng) in (2, 3)  # off the grid: the values around it


def test_grid_ranges_are_discrete() -> None:
    param = FloatParam(0.001, 1.0, log=True, grid_points=4)  # 0.001, 0.01, 0.1, 1
    outs = {
        mutate_value(param, param.grid_values("lr")[1], np.random.default_rng(s))
        for s in range(40)
    }
    grid = param.grid_values("lr")
    assert sorted(outs) == [grid[0], grid[2]]
    assert mutate_value(param, grid[0], np.random.default_rng(0)) == grid[1]
    assert mutate_value(IntParam(1, 9, grid_points=5), 1, np.random.default_rng(0)) == 3


def test_categoricals_are_resampled_and_fixed_values_never_change() -> None:
    param = CategoricalParam(("relu", "tanh", "gelu"))
    outs = {mutate_value(param, "relu", np.random.default_rng(s)) for s in range(60)}
    assert outs == {"relu", "tanh", "gelu"}  # uniform resampling may give the same value
    assert mutate_value(FixedParam(3), 3, np.random.default_rng(0)) == 3


SPACE = default_space()  # every kind of parameter, a schedule included (the kit's)


@settings(max_examples=60)
@given(seeds, seeds, st.sets(st.sampled_from(list(SPACE.params))))
def test_mutate_respects_exclusions_bounds_and_is_deterministic(
    sample_seed: int, seed: int, exclude: set[str]
) -> None:
    params = SPACE.sample(np.random.default_rng(sample_seed))
    child = mutate(SPACE, params, np.random.default_rng(seed), exclude=exclude)
    assert child == mutate(SPACE, params, np.random.default_rng(seed), exclude=exclude)
    for name in exclude | {"width", "sched"}:
        assert child[name] == params[name]
    for name in ("lr", "momentum", "hidden"):
        p = SPACE.params[name]
        assert p.low <= child[name] <= p.high  # type: ignore[attr-defined]
        if name not in exclude and p.low < params[name] < p.high:  # type: ignore[attr-defined]
            assert child[name] != params[name]
    assert child["batch_size"] in (16, 32, 64)
    assert child["act"] in ("relu", "tanh")


@settings(max_examples=60)
@given(seeds, seeds)
def test_explore_stays_in_the_space(sample_seed: int, seed: int) -> None:
    params = SPACE.sample(np.random.default_rng(sample_seed))
    child = explore(SPACE, params, np.random.default_rng(seed), resample_probability=0.25)
    for name in ("lr", "momentum", "hidden"):
        p = SPACE.params[name]
        assert p.low <= child[name] <= p.high  # type: ignore[attr-defined]
    assert child["width"] == 64
    assert child["sched"] == params["sched"]
    i = [16, 32, 64].index(params["batch_size"])
    always = explore(SPACE, params, np.random.default_rng(seed), resample_probability=0.0)
    assert always["batch_size"] in [16, 32, 64][max(i - 1, 0) : i + 2]


def test_fitness_comparisons() -> None:
    assert compare((1.0, 0.0), (0.5, 9.0)) == 1
    assert compare((1.0, 0.0), (1.0, 9.0)) == -1
    assert compare((None,), (0.0,)) == -1
    assert compare((None,), (None,)) == 0
    assert compare((1.0, 2.0), (0.0, 1.0), "pareto") == 1
    assert compare((1.0, 0.0), (0.0, 1.0), "pareto") == 0
    assert compare((1.0, None), (0.0, 1.0), "pareto") == 0
    assert compare((1.0, 2.0), (1.0, 1.0), "pareto") == 0  # the paper's strict "all larger"
    objectives = parse_objectives(["acc", "loss:min"], "acc", "max")
    assert [(o.metric, o.sign) for o in objectives] == [("acc", 1.0), ("loss", -1.0)]
    assert [(o.metric, o.mode) for o in parse_objectives(None, "loss", "min")] == [("loss", "min")]
