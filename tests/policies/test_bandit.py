"""HyperDrive's Bandit policy: the epsilon rule in both directions, at its boundary only."""

from __future__ import annotations

import pytest

from hpctune.policies import ActionKind, BanditPolicy, Event, OptionError, make_policy
from hpctune.policies.bandit import eliminated
from hpctune.study.states import TrialStatus
from tests.policies._views import RNG, context, trial, view


def test_epsilon_rule_in_both_modes() -> None:
    # max: stop iff jobBest * (1 + eps) <= globalBest
    assert eliminated(0.5, 0.75, 0.5, "max")  # 0.75 <= 0.75
    assert not eliminated(0.51, 0.75, 0.5, "max")
    # min: stop iff jobBest >= globalBest * (1 + eps)
    assert eliminated(0.75, 0.5, 0.5, "min")
    assert not eliminated(0.74, 0.5, 0.5, "min")
    assert not eliminated(float("nan"), 0.5, 0.5, "min")


def _curve(best: float) -> list[float]:
    return [best * 0.5] * 9 + [best]  # best reached at step 10


def test_bandit_terminates_at_its_boundary_only() -> None:
    policy = BanditPolicy(context())
    leader = trial(0, _curve(0.9), TrialStatus.COMPLETED)
    weak = trial(1, _curve(0.6))  # 0.6 * 1.5 = 0.9 <= 0.9
    close = trial(2, _curve(0.61))
    v = view([leader, weak, close], max_steps=30)
    assert policy.decide(v, Event.boundary(1, 9), RNG).actions[0].kind is ActionKind.CONTINUE
    stop = list(policy.decide(v, Event.boundary(1, 10), RNG).actions)
    assert [(a.kind, a.trial_id) for a in stop] == [(ActionKind.TERMINATE, 1)]
    assert "global best 0.9" in stop[0].reason
    assert policy.decide(v, Event.boundary(2, 10), RNG).actions[0].kind is ActionKind.CONTINUE
    assert list(policy.decide(v, Event.report(1, 10), RNG).actions) == []


def test_bandit_in_min_mode() -> None:
    policy = make_policy("bandit", {"boundary": 5, "epsilon": 0.5}, context())
    leader = trial(0, [0.4] * 4 + [0.2], TrialStatus.COMPLETED)
    slow = trial(1, [0.5] * 4 + [0.31])  # 0.31 >= 0.2 * 1.5
    fine = trial(2, [0.5] * 4 + [0.29])
    v = view([leader, slow, fine], mode="min", max_steps=30)
    assert policy.decide(v, Event.boundary(1, 5), RNG).actions[0].kind is ActionKind.TERMINATE
    assert policy.decide(v, Event.boundary(2, 5), RNG).actions[0].kind is ActionKind.CONTINUE


def test_bandit_job_best_counts_only_steps_up_to_the_boundary() -> None:
    policy = make_policy("bandit", {"boundary": 2}, context())
    leader = trial(0, [0.9, 0.9], TrialStatus.COMPLETED)
    late = trial(1, [0.1, 0.1, 0.95])  # its 0.95 at step 3 comes after the boundary at 2
    v = view([leader, late], max_steps=9)
    assert policy.decide(v, Event.boundary(1, 2), RNG).actions[0].kind is ActionKind.TERMINATE


def test_bandit_fills_slots_as_default_and_checks_options() -> None:
    v = view([], free=2, remaining=5)
    assert [
        a.kind for a in list(BanditPolicy(context()).decide(v, Event.slot_free(2), RNG).actions)
    ] == [
        ActionKind.START,
        ActionKind.START,
    ]
    assert BanditPolicy(context()).options == BanditPolicy.Options(epsilon=0.5, boundary=10)
    with pytest.raises(OptionError) as err:
        make_policy("bandit", {"boundary": 0}, context())
    assert err.value.key == "boundary"
    with pytest.raises(OptionError) as err:
        make_policy("bandit", {"epsilon": -1}, context())
    assert err.value.key == "epsilon"
