"""The median stopping rule on hand-made views (Ray's ``MedianStoppingRule`` semantics)."""

from __future__ import annotations

import json

import pytest

from hpctune.policies import ActionKind, Event, MedianStoppingPolicy, make_policy
from hpctune.policies.median import median_of_running_means, running_mean
from hpctune.study.states import TrialStatus
from tests.policies._views import RNG, context, trial, view

S = TrialStatus


def _others() -> list:
    # running means over steps 1..3: 0.5, 0.6, 0.7 -> median 0.6
    return [
        trial(1, [0.4, 0.5, 0.6], S.COMPLETED),
        trial(2, [0.5, 0.6, 0.7], S.RUNNING),
        trial(3, [0.6, 0.7, 0.8], S.RUNNING),
    ]


def test_running_means_and_their_median() -> None:
    others = _others()
    assert running_mean(others[0], 1, 3, 1.0) == pytest.approx(0.5)
    assert running_mean(others[0], 2, 3, 1.0) == pytest.approx(0.55)
    assert median_of_running_means(others, 1, 3, 1.0) == pytest.approx(0.6)
    assert median_of_running_means(others, 1, 3, -1.0) == pytest.approx(-0.6)


def test_a_trial_whose_best_is_below_the_median_is_stopped_after_the_grace_period() -> None:
    policy = make_policy("median", {"grace_period": 2}, context())
    weak = trial(0, [0.3, 0.55, 0.58])
    strong = trial(4, [0.3, 0.4, 0.6])
    v = view([weak, strong, *_others()], remaining=0)
    assert (
        policy.decide(v, Event.boundary(0, 1), RNG).actions[0].kind is ActionKind.CONTINUE
    )  # grace
    # others' running means over steps 2..3: 0.5 (trial 4), 0.55, 0.65, 0.75 -> median 0.6
    stop = list(policy.decide(v, Event.boundary(0, 3), RNG).actions)  # best 0.58 < 0.6
    assert [(a.kind, a.trial_id) for a in stop] == [(ActionKind.TERMINATE, 0)]
    assert "median" in stop[0].reason
    # for trial 4: 0.565 (trial 0), 0.55, 0.65, 0.75 -> median 0.6075 > its best 0.6
    assert policy.decide(v, Event.boundary(4, 3), RNG).actions[0].kind is ActionKind.TERMINATE
    lenient = MedianStoppingPolicy(context())  # grace 1, steps 1..3: 0.477, 0.5, 0.6, 0.7 -> 0.55
    assert lenient.decide(v, Event.boundary(4, 3), RNG).actions[0].kind is ActionKind.CONTINUE
    assert list(policy.decide(v, Event.report(0, 3), RNG).actions) == []


def test_mode_min_compares_losses() -> None:
    policy = MedianStoppingPolicy(context())
    others = [trial(i, [1.0 - 0.1 * i] * 3, S.COMPLETED) for i in (1, 2, 3)]  # 0.9, 0.8, 0.7
    v = view([trial(0, [0.95, 0.9, 0.85]), trial(4, [0.9, 0.8, 0.75]), *others], mode="min")
    assert policy.decide(v, Event.boundary(0, 3), RNG).actions[0].kind is ActionKind.TERMINATE
    assert policy.decide(v, Event.boundary(4, 3), RNG).actions[0].kind is ActionKind.CONTINUE


def test_with_too_few_samples_a_trial_goes_on_unless_told_to_yield() -> None:
    lone = [trial(0, [0.5, 0.6]), trial(1, [0.4], S.RUNNING)]
    busy = view(lone, remaining=3)  # new trials are waiting for a slot
    policy = MedianStoppingPolicy(context())  # Vizier's rule: no yield
    assert policy.decide(busy, Event.boundary(0, 2), RNG).actions[0].kind is ActionKind.CONTINUE
    assert policy.paused_at == {}


def test_with_too_few_samples_a_yielding_trial_yields_only_if_others_wait() -> None:
    policy = make_policy("median", {"yield_slots": True}, context())
    lone = [trial(0, [0.5, 0.6]), trial(1, [0.4], S.RUNNING)]
    busy = view(lone, remaining=3)  # new trials are waiting for a slot
    first = list(policy.decide(busy, Event.boundary(0, 2), RNG).actions)
    assert [(a.kind, a.trial_id) for a in first] == [(ActionKind.SUSPEND, 0)]
    assert (
        list(policy.decide(busy, Event.boundary(0, 2), RNG).actions) == first
    )  # same event, same answer
    assert policy.paused_at == {0: 2}
    nobody_waits = view(lone, remaining=0)
    assert (
        policy.decide(nobody_waits, Event.boundary(1, 1), RNG).actions[0].kind
        is ActionKind.CONTINUE
    )
    slice_ = make_policy("median", {"min_time_slice": 5, "yield_slots": True}, context())
    slice_.load_state_dict({"paused_at": [[0, 1]]})
    assert slice_.decide(busy, Event.boundary(0, 2), RNG).actions[0].kind is ActionKind.CONTINUE


def test_slot_free_is_first_in_first_out_new_before_suspended() -> None:
    policy = MedianStoppingPolicy(context())
    v = view(
        [trial(0, [0.5], S.SUSPENDED), trial(1, [0.5], S.QUEUED), trial(2, [0.5], S.SUSPENDED)],
        free=3,
        remaining=1,
    )
    actions = list(policy.decide(v, Event.slot_free(3), RNG).actions)
    assert [(a.kind, a.trial_id) for a in actions] == [
        (ActionKind.RESUME, 1),
        (ActionKind.START, None),
        (ActionKind.RESUME, 0),
    ]


def test_soft_stop_suspends_and_state_round_trips() -> None:
    policy = make_policy("median", {"hard_stop": False}, context())
    v = view([trial(0, [0.3, 0.55, 0.58]), *_others()], remaining=0)
    assert policy.decide(v, Event.boundary(0, 3), RNG).actions[0].kind is ActionKind.SUSPEND
    state = json.loads(json.dumps(policy.state_dict()))
    again = make_policy("median", {"hard_stop": False}, context())
    again.load_state_dict(state)
    later = view([trial(0, [0.3, 0.55, 0.58, 0.59]), *_others()], remaining=0)
    assert again.decide(later, Event.boundary(0, 4), RNG).actions[0].kind is ActionKind.CONTINUE
