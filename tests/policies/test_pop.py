"""POP (HyperDrive §3, §5.3) and EarlyTerm (§5.3) on hand-made views with known predictions."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from hpctune.curves.predict import LEVELS, CurvePrediction
from hpctune.policies import ActionKind, Event, OptionError, make_policy
from hpctune.policies.earlyterm import EarlyTermPolicy
from hpctune.policies.pop import Assessment, PopPolicy, epoch_seconds, split_slots
from hpctune.study.states import TrialStatus
from tests.policies._views import RNG, context, trial, view


def certain(n: int, x_max: int, value: float) -> CurvePrediction:
    """A prediction certain that every future epoch scores ``value``."""
    q = np.full((x_max - n, len(LEVELS)), value)
    return CurvePrediction(n=n, x_max=x_max, bounds=(0.0, 1.0), mode="max", u_quantiles=q)


def uniform(n: int, x_max: int) -> CurvePrediction:
    """A prediction uniform on [0, 1] at every future epoch: P(y >= t) = 1 - t."""
    q = np.tile(np.asarray(LEVELS), (x_max - n, 1))
    return CurvePrediction(n=n, x_max=x_max, bounds=(0.0, 1.0), mode="max", u_quantiles=q)


def with_predictions(v, predictions, **changes):
    return dataclasses.replace(v, predictions=predictions, **changes)


def test_split_follows_desired_and_deserved_slots() -> None:
    a = [Assessment(i, p, 10.0, 1.0) for i, p in enumerate([0.9, 0.8, 0.3, 0.1])]
    split = split_slots(a, slots=4, k=1, time_left=math.inf)
    # p = 0.9: min(1, 3.6) = 1; 0.8: min(2, 3.2) = 2; 0.3: min(3, 1.2); 0.1: min(4, 0.4)
    assert split.s_promising == 2
    assert split.promising == (0, 1)
    assert split.threshold == 0.8


def test_split_drops_trials_that_cannot_finish_in_time() -> None:
    a = [Assessment(0, 0.95, 500.0, 1.0), Assessment(1, 0.9, 50.0, 1.0)]
    split = split_slots(a, slots=2, k=1, time_left=100.0)
    assert split.promising == (1,)


def test_split_with_no_confidence_has_no_promising_trials() -> None:
    a = [Assessment(0, math.nan, math.inf, 1.0), Assessment(1, 0.0, 5.0, 1.0)]
    assert split_slots(a, slots=4, k=1, time_left=math.inf).s_promising == 0


def test_epoch_seconds_ignores_gaps_across_suspensions() -> None:
    t = dataclasses.replace(
        trial(0, [0.1] * 4), steps=np.array([1, 2, 5, 6]), times=np.array([1.0, 2.0, 100.0, 101.0])
    )
    assert epoch_seconds(t) == 1.0


def test_pop_kills_a_trial_flat_at_random_at_its_first_boundary() -> None:
    policy = PopPolicy(context(), PopPolicy.Options(target=0.9, boundary=5))
    flat = trial(0, [0.1, 0.1, 0.11, 0.1, 0.12])
    v = with_predictions(view([flat], remaining=3), {}, random_level=0.1)
    (action,) = list(policy.decide(v, Event.boundary(0, 5), RNG).actions)
    assert action.kind is ActionKind.TERMINATE
    assert "kill threshold 0.15" in action.reason
    assert (
        list(policy.decide(v, Event.boundary(0, 4), RNG).actions) == []
    )  # not a boundary of b = 5


def test_pop_terminates_a_trial_with_p_below_five_percent() -> None:
    policy = PopPolicy(context(), PopPolicy.Options(target=0.9, boundary=5))
    t = trial(0, [0.3, 0.4, 0.5, 0.55, 0.6])
    v = with_predictions(view([t], max_steps=20, remaining=3), {0: certain(5, 20, 0.7)})
    (action,) = list(policy.decide(v, Event.boundary(0, 5), RNG).actions)
    assert action.kind is ActionKind.TERMINATE
    assert "p = 0.000 < 0.05" in action.reason
    # a new prediction of a suspended trial is enough to terminate it
    suspended = dataclasses.replace(t, status=TrialStatus.SUSPENDED)
    v2 = with_predictions(view([suspended], max_steps=20), {0: certain(5, 20, 0.7)})
    (again,) = list(policy.decide(v2, Event.prediction(0, 5), RNG).actions)
    assert again.kind is ActionKind.TERMINATE


def test_pop_promising_continues_and_opportunistic_yields_its_slot() -> None:
    policy = PopPolicy(context(), PopPolicy.Options(target=0.9, boundary=5))
    good = trial(0, [0.5, 0.6, 0.7, 0.8, 0.85])
    unsure = trial(1, [0.5, 0.55, 0.6, 0.62, 0.65])
    predictions = {0: certain(5, 20, 0.95), 1: uniform(5, 20)}
    v = with_predictions(view([good, unsure], max_steps=20, remaining=5, slots=2), predictions)
    (a0,) = list(policy.decide(v, Event.boundary(0, 5), RNG).actions)
    assert a0.kind is ActionKind.CONTINUE
    assert a0.priority == pytest.approx(1.0)
    (a1,) = list(policy.decide(v, Event.boundary(1, 5), RNG).actions)
    # p = P(y >= 0.9) summed over the first-reach masses = 0.1: opportunistic, new work waits
    assert a1.kind is ActionKind.SUSPEND
    assert a1.priority == pytest.approx(0.1, abs=1e-3)
    assert policy.state_dict()["promising"] == [0]
    # with nothing else to run, an opportunistic trial keeps its slot
    v_alone = with_predictions(
        view([good, unsure], max_steps=20, remaining=0, slots=2), predictions
    )
    (a2,) = list(policy.decide(v_alone, Event.boundary(1, 5), RNG).actions)
    assert a2.kind is ActionKind.CONTINUE


def test_pop_fills_slots_promising_then_new_then_oldest_suspended() -> None:
    policy = PopPolicy(context(), PopPolicy.Options(target=0.9, boundary=5))
    promising = trial(0, [0.5, 0.6, 0.7, 0.8, 0.85], TrialStatus.SUSPENDED)
    old = dataclasses.replace(
        trial(1, [0.3] * 5, TrialStatus.SUSPENDED), times=np.arange(1.0, 6.0)
    )
    recent = dataclasses.replace(
        trial(2, [0.3] * 5, TrialStatus.SUSPENDED), times=np.arange(11.0, 16.0)
    )
    predictions = {0: certain(5, 20, 0.95), 1: uniform(5, 20), 2: uniform(5, 20)}
    v = with_predictions(
        view([promising, old, recent], max_steps=20, remaining=1, slots=4), predictions
    )
    actions = list(policy.decide(v, Event.slot_free(4), RNG).actions)
    assert [(a.kind, a.trial_id) for a in actions] == [
        (ActionKind.RESUME, 0),
        (ActionKind.START, None),
        (ActionKind.RESUME, 1),
        (ActionKind.RESUME, 2),
    ]


def test_pop_dynamic_target_is_raised_when_reached() -> None:
    policy = PopPolicy(context(), PopPolicy.Options(boundary=5, dynamic_step=0.05))
    v = with_predictions(view([trial(0, [0.2, 0.4])], remaining=1), {}, random_level=0.1)
    list(policy.decide(v, Event.slot_free(1), RNG).actions)
    assert policy.target == pytest.approx(0.45)
    v2 = with_predictions(view([trial(0, [0.2, 0.4, 0.5])], remaining=1), {})
    list(policy.decide(v2, Event.slot_free(1), RNG).actions)
    assert policy.target == pytest.approx(0.55)  # 0.5 reached 0.45: one step above the best
    restored = PopPolicy(context(), PopPolicy.Options(boundary=5, dynamic_step=0.05))
    restored.load_state_dict(policy.state_dict())
    assert restored.target == policy.target


def test_pop_mode_min_reads_the_kill_threshold_downwards() -> None:
    policy = PopPolicy(context(), PopPolicy.Options(target=0.1, boundary=2))
    t = trial(0, [0.9, 0.88])
    v = with_predictions(view([t], mode="min", remaining=1), {}, random_level=0.9)
    (action,) = list(policy.decide(v, Event.boundary(0, 2), RNG).actions)
    assert action.kind is ActionKind.TERMINATE  # 0.88 has not gone below 0.9 - 0.05


def test_pop_options_are_checked() -> None:
    with pytest.raises(OptionError, match="p_poor"):
        make_policy("pop", {"p_poor": 1.5}, context())
    with pytest.raises(OptionError, match="k"):
        make_policy("pop", {"k": 0}, context())
    assert PopPolicy(context()).wants_fit(10)
    assert not PopPolicy(context()).wants_fit(7)


def test_earlyterm_terminates_a_trial_unlikely_to_beat_the_best() -> None:
    policy = EarlyTermPolicy(context(), EarlyTermPolicy.Options(boundary=5))
    leader = trial(0, [0.9] * 5)
    laggard = trial(1, [0.5] * 5)
    predictions = {1: certain(5, 20, 0.6)}
    v = with_predictions(view([leader, laggard], max_steps=20), predictions)
    (action,) = list(policy.decide(v, Event.boundary(1, 5), RNG).actions)
    assert action.kind is ActionKind.TERMINATE
    assert "< 0.05" in action.reason
    assert list(policy.decide(v, Event.boundary(1, 4), RNG).actions) == []  # not at b
    hopeful = {1: uniform(5, 20)}  # P(final >= 0.9) = 0.1 >= 0.05
    assert (
        list(policy.decide(with_predictions(v, hopeful), Event.boundary(1, 5), RNG).actions) == []
    )
    assert list(policy.decide(with_predictions(v, {}), Event.boundary(1, 5), RNG).actions) == []
