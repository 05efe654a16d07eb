"""Hyperband: Li et al.'s brackets, opened most exploratory first, run synchronously."""

from __future__ import annotations

import json

from hpctune.policies import ActionKind, Event, HyperbandPolicy, make_policy
from hpctune.policies._halving import BracketShape
from hpctune.study.states import TrialStatus
from tests.policies._views import RNG, context, trial, view

S = TrialStatus


def test_brackets_have_li_et_al_sizes_and_resources() -> None:
    shapes = HyperbandPolicy(context()).shapes(81)  # the paper's R = 81, eta = 3 table
    assert [(b.s, b.capacity, b.milestones[0]) for b in shapes] == [
        (4, 81, 1),
        (3, 34, 3),
        (2, 15, 9),
        (1, 8, 27),
        (0, 5, 81),
    ]
    assert shapes[1].milestones == (3, 9, 27, 81)
    assert HyperbandPolicy(context()).shapes(9) == [
        BracketShape(2, 9, (1, 3, 9)),
        BracketShape(1, 5, (3, 9)),
        BracketShape(0, 3, (9,)),
    ]


def test_new_trials_fill_the_brackets_in_order() -> None:
    policy = HyperbandPolicy(context())
    v = view([trial(i, [0.5], S.RUNNING) for i in range(7)], free=5, remaining=10, max_steps=9)
    actions = list(policy.decide(v, Event.slot_free(5), RNG).actions)
    # 7 trials are in bracket s=2 (9 places): 2 more start to step 1, then s=1 starts to 3
    assert [a.until_step for a in actions] == [1, 1, 3, 3, 3]
    assert all(a.kind is ActionKind.START for a in actions)


def test_each_bracket_halves_on_its_own() -> None:
    policy = make_policy("hyperband", {}, context())
    first = [trial(i, [0.1 * i], S.SUSPENDED) for i in range(9)]  # bracket s=2, at step 1
    second = [trial(9 + i, [0.5], S.RUNNING, first_step=3) for i in range(5)]  # s=1, running
    v = view(first + second, free=3, remaining=0, max_steps=9)
    actions = list(policy.decide(v, Event.slot_free(3), RNG).actions)
    assert sorted(a.trial_id for a in actions if a.kind is ActionKind.TERMINATE) == list(range(6))
    assert [(a.trial_id, a.until_step) for a in actions if a.kind is ActionKind.RESUME] == [
        (8, 3),
        (7, 3),
        (6, 3),
    ]
    state = json.loads(json.dumps(policy.state_dict(), allow_nan=False))
    assert [b["s"] for b in state["brackets"]] == [2, 1]
    again = HyperbandPolicy(context())
    again.load_state_dict(state)
    assert list(again.decide(v, Event.slot_free(3), RNG).actions) == actions
