"""Stage identity: schedules cut into canonical pieces; equal pieces, equal values."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.stagetree.pieces import (
    Piece,
    config_piece_from_json,
    config_piece_to_json,
    schedule_pieces,
    trial_stages,
)
from hpctune.study.schedules import schedule_from_dict

MAX = 40
COSINE = {"schedule": "cosine", "base": 0.1, "total_steps": 20}
STEP = {"schedule": "step", "base": 0.1, "step_size": 10, "gamma": 0.1}


def warmup(then: dict[str, Any], steps: int = 5) -> dict[str, Any]:
    return {"schedule": "warmup", "warmup_steps": steps, "then": then}


def pieces(d: dict[str, Any], max_steps: int = MAX) -> list[tuple[int, int, Piece]]:
    return [(s.start, s.end, s.piece) for s in schedule_pieces(schedule_from_dict(d), max_steps)]


def test_warmup_then_cosine_and_warmup_then_step_share_the_ramp_only() -> None:
    a, b = pieces(warmup(COSINE)), pieces(warmup(STEP))
    assert a[0] == b[0] == (0, 5, Piece("linear", (0.0, 0.1, 5)))
    assert a[1][:2] == (5, 25)
    assert a[1][2].kind == "cosine"
    assert a[1][2].offset == 5
    assert b[1] == (5, 15, Piece("constant", (0.1,)))
    assert a[1][2] != b[1][2]


def test_constant_then_decay_shares_its_first_ten_steps_with_a_constant() -> None:
    decay = pieces({"schedule": "piecewise", "values": [0.1, 0.01], "milestones": [10]})
    const = pieces({"schedule": "constant", "value": 0.1})
    step = pieces(STEP)
    assert decay[0] == (0, 10, Piece("constant", (0.1,))) == step[0]
    assert const == [(0, MAX, Piece("constant", (0.1,)))]
    assert decay[1][2] == Piece("constant", (0.01,))
    # 0.1 * 0.1 is not 0.01 in floating point: the step schedule's second stretch differs
    assert step[1][2] != decay[1][2]


def test_a_linear_ramp_is_the_same_function_as_a_warmup_ramp() -> None:
    ramp = pieces({"schedule": "linear", "start": 0.0, "end": 0.1, "steps": 5})
    warm = pieces(warmup({"schedule": "constant", "value": 0.1}))
    assert ramp == warm == [(0, 5, Piece("linear", (0.0, 0.1, 5))), (5, MAX, warm[1][2])]


def test_same_function_on_another_domain_or_other_arguments_never_merges() -> None:
    plain = pieces(COSINE)[0][2]
    shifted = pieces(warmup(COSINE))[1][2]
    longer = pieces({**COSINE, "total_steps": 30})[0][2]
    other_min = pieces({**COSINE, "min_value": 0.001})[0][2]
    assert len({plain, shifted, longer, other_min}) == 4
    rounded = pieces({**COSINE, "base": 100.0, "integer": True})[0][2]
    assert rounded != pieces({**COSINE, "base": 100.0})[0][2]


def test_degenerate_curves_are_constants() -> None:
    const = [(0, MAX, Piece("constant", (0.1,)))]
    assert pieces({"schedule": "exponential", "base": 0.1, "gamma": 1.0}) == const
    assert pieces({**COSINE, "min_value": 0.1}) == const
    assert pieces({"schedule": "linear", "start": 0.1, "end": 0.1, "steps": 5}) == const
    assert pieces({**warmup(COSINE), "start_value": 0.1})[0] == (0, 5, const[0][2])


def test_pieces_are_maximal_and_tile_the_steps() -> None:
    p = pieces({"schedule": "piecewise", "values": [0.1, 0.1, 0.2], "milestones": [5, 10]})
    assert p == [(0, 10, Piece("constant", (0.1,))), (10, MAX, Piece("constant", (0.2,)))]
    cut = pieces(COSINE, max_steps=7)
    assert [(a, b) for a, b, _ in cut] == [(0, 7)]


# ---- property: a piece evaluates to exactly what its schedule gives on its domain ---------

small = st.integers(min_value=1, max_value=15)
num = st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.1, 0.3, 1.0, 2.5, 64.0])
gamma = st.sampled_from([0.1, 0.5, 0.9, 1.0, 2.0])
milestones = st.lists(small, min_size=1, max_size=3, unique=True).map(sorted)


def leaf_schedules() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda v: {"schedule": "constant", "value": v}, num),
        st.builds(
            lambda b, s, g: {"schedule": "step", "base": b, "step_size": s, "gamma": g},
            num,
            small,
            gamma,
        ),
        st.builds(
            lambda b, m, g: {"schedule": "multistep", "base": b, "milestones": m, "gamma": g},
            num,
            milestones,
            gamma,
        ),
        milestones.flatmap(
            lambda m: st.lists(num, min_size=len(m) + 1, max_size=len(m) + 1).map(
                lambda v: {"schedule": "piecewise", "values": v, "milestones": m}
            )
        ),
        st.builds(lambda b, g: {"schedule": "exponential", "base": b, "gamma": g}, num, gamma),
        st.builds(
            lambda a, b, s: {"schedule": "linear", "start": a, "end": b, "steps": s},
            num,
            num,
            small,
        ),
        st.builds(
            lambda b, t, m: {"schedule": "cosine", "base": b, "total_steps": t, "min_value": m},
            num,
            small,
            num,
        ),
        st.builds(
            lambda p, mode: {
                "schedule": "cyclic",
                "low": 0.01,
                "high": 0.1,
                "period": p,
                "mode": mode,
            },
            st.integers(min_value=2, max_value=9),
            st.sampled_from(["triangular", "triangular2"]),
        ),
    )


def with_integer(s: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda d, i: {**d, "integer": i}, s, st.booleans())


schedules = st.recursive(
    with_integer(leaf_schedules()),
    lambda inner: with_integer(
        st.builds(
            lambda w, then, sv: {
                "schedule": "warmup",
                "warmup_steps": w,
                "then": then,
                "start_value": sv,
            },
            small,
            inner,
            num,
        )
    ),
    max_leaves=3,
)


@settings(max_examples=300, deadline=None)
@given(schedules, st.integers(min_value=1, max_value=30))
def test_every_piece_gives_its_schedules_values_on_its_domain(
    d: dict[str, Any], max_steps: int
) -> None:
    schedule = schedule_from_dict(d)
    stretches = schedule_pieces(schedule, max_steps)
    assert stretches[0].start == 0
    assert stretches[-1].end == max_steps
    for a, b in itertools.pairwise(stretches):
        assert a.end == b.start
        assert a.piece != b.piece
    for s in stretches:
        for step in range(s.start, s.end):
            expected = schedule.value(step)
            got = s.piece.value(step)
            assert got == expected, (s, step)
            assert type(got) is type(expected), (s, step)


@settings(max_examples=300, deadline=None)
@given(schedules, schedules, st.integers(min_value=1, max_value=30))
def test_equal_pieces_mean_equal_values_never_a_false_merge(
    d1: dict[str, Any], d2: dict[str, Any], max_steps: int
) -> None:
    s1, s2 = schedule_from_dict(d1), schedule_from_dict(d2)
    p1 = {st: x.piece for x in schedule_pieces(s1, max_steps) for st in range(x.start, x.end)}
    p2 = {st: x.piece for x in schedule_pieces(s2, max_steps) for st in range(x.start, x.end)}
    for step in range(max_steps):
        if p1[step] == p2[step]:
            assert s1.value(step) == s2.value(step)
            assert s1.value(step + 0.5) == s2.value(step + 0.5)


def test_trial_stages_cut_where_any_parameter_changes() -> None:
    config = {
        "lr": warmup(COSINE),
        "batch_size": {
            "schedule": "multistep",
            "base": 32,
            "milestones": [10],
            "gamma": 2,
            "integer": True,
        },
        "momentum": 0.9,
        "layers": [64, 64],
    }
    stages = trial_stages(config, 30)
    assert [(s.start, s.end) for s in stages] == [(0, 5), (5, 10), (10, 25), (25, 30)]
    names = [n for n, _ in stages[0].config]
    assert names == sorted(config)
    momentum = {dict(s.config)["momentum"] for s in stages}
    assert momentum == {Piece("value", ("0.9",))}
    assert dict(stages[1].config)["batch_size"] == Piece("constant", (32,), integer=True)
    assert dict(stages[2].config)["batch_size"] == Piece("constant", (64,), integer=True)
    assert config_piece_from_json(config_piece_to_json(stages[2].config)) == stages[2].config


def test_a_bad_schedule_names_the_parameter() -> None:
    with pytest.raises(ValueError, match="parameter 'lr'"):
        trial_stages({"lr": {"schedule": "cosine", "base": 0.1}}, 10)
    with pytest.raises(ValueError, match="max_steps"):
        trial_stages({"lr": 0.1}, 0)
