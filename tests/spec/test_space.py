"""Tests of hpctune.study.space: parsing, validation, sampling, grids and serialisation."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.errors import StudySpecError
from hpctune.study.schedules import schedule_from_dict
from hpctune.study.space import (
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    NoGridError,
    ScheduleParam,
    SearchSpace,
    parse_space,
)

PATH = Path("/studies/study.toml")


def _parse(table: dict[str, Any]) -> SearchSpace:
    return parse_space(table, path=PATH)


# ----------------------------------------------------------------------------------------------
# Parsing and shorthands


def test_shorthands_and_types() -> None:
    space = _parse(
        {
            "opt": "adam",
            "wd": 0.0,
            "bs": [32, 64, 128],
            "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
            "layers": {"type": "int", "low": 1, "high": 4},
            "act": {"type": "categorical", "choices": ["relu", "gelu"]},
            "seed_fixed": {"type": "fixed", "value": 7},
            "sched": {"schedule": "cosine", "base": 0.1, "total_steps": 20},
        }
    )
    p = space.params
    assert p["opt"] == FixedParam("adam")
    assert p["wd"] == FixedParam(0.0)
    assert p["bs"] == CategoricalParam((32, 64, 128))
    assert p["lr"] == FloatParam(1e-4, 1e-1, log=True)
    assert p["layers"] == IntParam(1, 4)
    assert p["act"] == CategoricalParam(("relu", "gelu"))
    assert p["seed_fixed"] == FixedParam(7)
    # a schedule literal with only literal arguments is a fixed, canonical schedule dict
    assert p["sched"] == FixedParam(
        {"schedule": "cosine", "base": 0.1, "total_steps": 20, "min_value": 0.0, "integer": False}
    )
    assert list(p) == ["opt", "wd", "bs", "lr", "layers", "act", "seed_fixed", "sched"]


def test_schedule_template_with_distributions() -> None:
    space = _parse(
        {
            "lr": {
                "type": "schedule",
                "shape": "multistep",
                "base": {"type": "float", "low": 0.01, "high": 0.1, "log": True},
                "milestones": [[10, 20], [15]],
                "gamma": [0.1, 0.5],
            }
        }
    )
    lr = space.params["lr"]
    assert isinstance(lr, ScheduleParam)
    assert lr.args["milestones"] == CategoricalParam(([10, 20], [15]))
    assert lr.args["gamma"] == CategoricalParam((0.1, 0.5))
    rng = np.random.default_rng(3)
    for _ in range(50):
        d = space.sample(rng)["lr"]
        s = schedule_from_dict(d)
        assert s.to_dict() == d
        assert 0.01 <= d["base"] <= 0.1
        assert d["milestones"] in ([10, 20], [15])
        assert d["gamma"] in (0.1, 0.5)


def test_literal_list_argument_is_fixed_not_a_choice() -> None:
    space = _parse({"bs": {"schedule": "piecewise", "values": [32, 64], "milestones": [5]}})
    assert isinstance(space.params["bs"], FixedParam)
    space = _parse(
        {"lr": {"type": "schedule", "shape": "multistep", "base": 0.1, "milestones": []}}
    )
    assert space.params["lr"].sample(np.random.default_rng(0))["milestones"] == []


def test_nested_schedule_template_in_warmup() -> None:
    space = _parse(
        {
            "lr": {
                "schedule": "warmup",
                "warmup_steps": [2, 5],
                "then": {
                    "schedule": "cosine",
                    "base": {"type": "float", "low": 0.05, "high": 0.2},
                    "total_steps": 30,
                },
            }
        }
    )
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(40):
        d = space.sample(rng)["lr"]
        assert 0.05 <= d["then"]["base"] <= 0.2
        seen.add(d["warmup_steps"])
    assert seen == {2, 5}


# ----------------------------------------------------------------------------------------------
# Validation errors name the field


@pytest.mark.parametrize(
    ("table", "field", "text"),
    [
        ({"lr": {"type": "float", "low": 1.0, "high": 0.5}}, "lr.high", "greater than `low`"),
        ({"lr": {"type": "float", "low": 1.0, "high": 1.0}}, "lr.high", "greater than `low`"),
        ({"lr": {"type": "float", "low": 0, "high": 1, "log": True}}, "lr.low", "low > 0"),
        ({"lr": {"type": "float", "low": "0", "high": 1}}, "lr.low", "finite number"),
        ({"lr": {"type": "float", "low": 0, "high": math.inf}}, "lr.high", "finite number"),
        ({"lr": {"type": "float", "low": 0, "high": 1, "log": 1}}, "lr.log", "true or false"),
        ({"lr": {"type": "float", "high": 1}}, "lr.low", "needs `low`"),
        ({"lr": {"type": "float", "low": 0, "high": 1, "lo": 2}}, "lr.lo", "valid keys: type"),
        (
            {"lr": {"type": "float", "low": 0, "high": 1, "grid_points": 1}},
            "lr.grid_points",
            ">= 2",
        ),
        ({"n": {"type": "int", "low": 1.5, "high": 4}}, "n.low", "must be integers"),
        ({"n": {"type": "int", "low": 1, "high": 4.0}}, "n.high", "must be integers"),
        ({"n": {"type": "int", "low": True, "high": 4}}, "n.low", "must be integers"),
        ({"x": {"type": "flaot"}}, "x.type", "valid types: float, int, categorical"),
        ({"x": {"low": 1}}, "x", "needs a `type`"),
        ({"x": {"type": "categorical", "choices": []}}, "x.choices", "non-empty"),
        ({"x": {"type": "categorical"}}, "x.choices", "needs `choices"),
        ({"x": {"type": "categorical", "choices": "ab"}}, "x.choices", "non-empty list"),
        ({"x": {"type": "categorical", "choices": [1, 1]}}, "x.choices", "distinct"),
        ({"x": {"type": "categorical", "choices": [[1, 2]]}}, "x.choices", "values must be"),
        ({"x": {"type": "fixed"}}, "x.value", "needs `value"),
        ({"x": []}, "x", "non-empty"),
        ({"x": [1.0, math.nan]}, "x", "finite"),
        ({"x": {"schedule": "cosin", "base": 1}}, "x.schedule", "valid shapes"),
        ({"x": {"type": "schedule", "shape": "cosin"}}, "x.shape", "valid shapes"),
        ({"x": {"type": "schedule"}}, "x.shape", "valid shapes"),
        ({"x": {"schedule": "cosine", "base": 1}}, "x.total_steps", "needs the argument"),
        ({"x": {"schedule": "cosine", "base": 1, "total_steps": 2, "t": 1}}, "x.t", "no argument"),
        (
            {"x": {"type": "schedule", "shape": "step", "base": 1, "step_size": [0, 5]}},
            "x.step_size",
            "integer >= 1",
        ),
        (
            {
                "x": {
                    "type": "schedule",
                    "shape": "step",
                    "base": 1,
                    "step_size": {"type": "float", "low": 1, "high": 9},
                }
            },
            "x.step_size",
            "must be an integer",
        ),
        (
            {
                "x": {
                    "type": "schedule",
                    "shape": "cyclic",
                    "low": {"type": "float", "low": 0.01, "high": 0.2},
                    "high": {"type": "float", "low": 0.1, "high": 1.0},
                    "period": 10,
                }
            },
            "x.high",
            "greater than low",
        ),
        (
            {
                "x": {
                    "schedule": "warmup",
                    "warmup_steps": 2,
                    "then": {
                        "schedule": "step",
                        "base": 0.1,
                        "step_size": {"type": "int", "low": 0, "high": 3},
                    },
                }
            },
            "x.then.step_size",
            "integer >= 1",
        ),
        (
            {"x": {"type": "categorical", "choices": [{"schedule": "step", "base": 1}]}},
            "x.choices.step_size",
            "needs the argument",
        ),
    ],
)
def test_invalid_parameters_name_the_field(table: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(StudySpecError) as info:
        _parse(table)
    assert info.value.field == f"search_space.{field}"
    assert info.value.path == PATH
    assert text in info.value.message


def test_empty_and_non_table_spaces_are_errors() -> None:
    with pytest.raises(StudySpecError, match="at least one parameter") as info:
        _parse({})
    assert info.value.field == "search_space"
    with pytest.raises(StudySpecError, match="table of parameters"):
        parse_space([1, 2], path=PATH)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# Sampling


def _param_table() -> st.SearchStrategy[dict[str, Any]]:
    bounds = st.tuples(
        st.floats(-1e3, 1e3, allow_nan=False), st.floats(1e-6, 1e3, allow_nan=False)
    ).map(lambda t: (t[0], t[0] + t[1]))
    pos_bounds = st.tuples(st.floats(1e-6, 1e2), st.floats(1.001, 1e3)).map(
        lambda t: (t[0], t[0] * t[1])
    )
    floats = st.one_of(
        bounds.map(lambda b: {"type": "float", "low": b[0], "high": b[1]}),
        pos_bounds.map(lambda b: {"type": "float", "low": b[0], "high": b[1], "log": True}),
    )
    ints = st.tuples(st.integers(1, 1000), st.integers(1, 1000), st.booleans()).map(
        lambda t: {"type": "int", "low": t[0], "high": t[0] + t[1], "log": t[2]}
    )
    scalars = st.one_of(
        st.integers(-(2**40), 2**40),
        st.floats(-1e6, 1e6, allow_nan=False),
        st.text(max_size=5),
        st.booleans(),
    )
    cats = st.lists(scalars, min_size=1, max_size=5, unique_by=lambda v: json.dumps(v))
    sched = st.tuples(st.floats(1e-4, 1.0), st.integers(1, 50)).map(
        lambda t: {
            "type": "schedule",
            "shape": "cosine",
            "base": {"type": "float", "low": t[0], "high": t[0] * 10},
            "total_steps": {"type": "int", "low": 1, "high": t[1] + 1},
        }
    )
    return st.one_of(floats, ints, cats, scalars, sched)


spaces = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), _param_table(), min_size=1, max_size=6
)


@settings(max_examples=150, deadline=None)
@given(table=spaces, seed=st.integers(0, 2**32))
def test_samples_are_in_bounds_and_json_able(table: dict[str, Any], seed: int) -> None:
    space = _parse(table)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        config = space.sample(rng)
        assert list(config) == list(table)
        assert json.loads(json.dumps(config)) == config
        for name, value in config.items():
            p = space.params[name]
            if isinstance(p, FloatParam):
                assert type(value) is float
                assert p.low <= value <= p.high
            elif isinstance(p, IntParam):
                assert type(value) is int
                assert p.low <= value <= p.high
            elif isinstance(p, CategoricalParam):
                assert value in p.choices
            elif isinstance(p, FixedParam):
                assert value == p.value
            else:
                assert isinstance(p, ScheduleParam)
                assert schedule_from_dict(value).to_dict() == value


@settings(max_examples=100, deadline=None)
@given(table=spaces)
def test_to_dict_from_dict_round_trip(table: dict[str, Any]) -> None:
    space = _parse(table)
    d = json.loads(json.dumps(space.to_dict()))
    again = SearchSpace.from_dict(d)
    assert again == space
    assert again.to_dict() == space.to_dict()
    assert all("type" in v for v in d.values())


def test_same_rng_state_gives_same_sample() -> None:
    space = _parse({"a": {"type": "float", "low": 0, "high": 1}, "b": [1, 2, 3]})
    assert space.sample(np.random.default_rng(5)) == space.sample(np.random.default_rng(5))
    assert space.sample(np.random.default_rng(5)) != space.sample(np.random.default_rng(6))


def test_log_float_is_log_uniform() -> None:
    p = FloatParam(1e-4, 1.0, log=True)
    rng = np.random.default_rng(0)
    xs = np.log10([p.sample(rng) for _ in range(4000)])
    # uniform on [-4, 0]: mean -2, each decade ~25 %
    assert abs(xs.mean() + 2) < 0.08
    counts = np.histogram(xs, bins=4, range=(-4, 0))[0] / len(xs)
    assert np.all(np.abs(counts - 0.25) < 0.03)


def test_int_sampling_reaches_both_ends_uniformly() -> None:
    p = IntParam(3, 6)
    rng = np.random.default_rng(1)
    values = [p.sample(rng) for _ in range(4000)]
    counts = np.bincount(values)[3:7] / len(values)
    assert set(values) == {3, 4, 5, 6}
    assert np.all(np.abs(counts - 0.25) < 0.03)


def test_log_int_sampling_favours_small_values_and_stays_in_range() -> None:
    p = IntParam(1, 100, log=True)
    rng = np.random.default_rng(2)
    values = [p.sample(rng) for _ in range(4000)]
    assert min(values) == 1
    assert max(values) <= 100
    assert np.median(values) < 15  # geometric middle ~10, uniform middle would be ~50


def test_samples_do_not_alias_stored_choices() -> None:
    space = _parse({"m": [{"schedule": "constant", "value": 1.0}]})
    config = space.sample(np.random.default_rng(0))
    config["m"]["value"] = 99
    assert space.sample(np.random.default_rng(0))["m"]["value"] == 1.0


# ----------------------------------------------------------------------------------------------
# Grids


def test_grid_is_a_product_in_declaration_order() -> None:
    space = _parse(
        {
            "a": [1, 2],
            "b": {"type": "float", "low": 0.0, "high": 1.0, "grid_points": 3},
            "c": "x",
        }
    )
    assert space.grid_size() == 6
    assert space.grid() == [
        {"a": 1, "b": 0.0, "c": "x"},
        {"a": 1, "b": 0.5, "c": "x"},
        {"a": 1, "b": 1.0, "c": "x"},
        {"a": 2, "b": 0.0, "c": "x"},
        {"a": 2, "b": 0.5, "c": "x"},
        {"a": 2, "b": 1.0, "c": "x"},
    ]
    assert [space.grid_point(i) for i in range(6)] == space.grid()
    with pytest.raises(IndexError, match=r"\[0, 6\)"):
        space.grid_point(6)


def test_log_grid_and_int_grid_deduplicated() -> None:
    f = FloatParam(1e-4, 1e-1, log=True, grid_points=4)
    assert f.grid_values("lr") == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1])
    i = IntParam(1, 4, grid_points=10)
    assert i.grid_values("n") == [1, 2, 3, 4]
    assert i.grid_len() == 4
    j = IntParam(1, 1000, log=True, grid_points=4)
    assert j.grid_values("n") == [1, 10, 100, 1000]


def test_schedule_grid_is_the_product_of_its_arguments() -> None:
    space = _parse(
        {
            "lr": {
                "type": "schedule",
                "shape": "step",
                "base": {"type": "float", "low": 0.01, "high": 0.1, "grid_points": 2},
                "step_size": [5, 10, 20],
            }
        }
    )
    grid = space.grid()
    assert space.grid_size() == len(grid) == 6
    assert [(g["lr"]["base"], g["lr"]["step_size"]) for g in grid] == [
        (0.01, 5),
        (0.01, 10),
        (0.01, 20),
        (0.1, 5),
        (0.1, 10),
        (0.1, 20),
    ]


def test_range_without_grid_points_has_no_grid() -> None:
    space = _parse({"a": [1, 2], "lr": {"type": "float", "low": 0.0, "high": 1.0}})
    assert space.grid_size() is None
    with pytest.raises(NoGridError) as info:
        space.grid()
    assert info.value.param == "lr"
    assert "grid_points" in str(info.value)
    assert "categorical" in str(info.value)
    with pytest.raises(NoGridError):
        space.require_grid()


def test_schedule_argument_without_grid_is_named() -> None:
    space = _parse(
        {
            "lr": {
                "type": "schedule",
                "shape": "cosine",
                "base": {"type": "int", "low": 1, "high": 9},
                "total_steps": 10,
            }
        }
    )
    assert space.grid_size() is None
    with pytest.raises(NoGridError) as info:
        space.grid()
    assert info.value.param == "lr.base"


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    points=st.integers(2, 5),
)
def test_grid_size_matches_grid_and_grid_point(sizes: list[int], points: int) -> None:
    table: dict[str, Any] = {f"p{i}": list(range(n)) for i, n in enumerate(sizes)}
    table["f"] = {"type": "float", "low": 1.0, "high": 2.0, "grid_points": points}
    space = _parse(table)
    grid = space.grid()
    assert space.grid_size() == len(grid) == math.prod(sizes) * points
    assert space.require_grid() == len(grid)
    assert [space.grid_point(i) for i in range(len(grid))] == grid
    assert len({json.dumps(g, sort_keys=True) for g in grid}) == len(grid)
