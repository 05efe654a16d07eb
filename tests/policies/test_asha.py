"""ASHA: the bracket's cutoff rule on its own (as Ray's ``_Bracket``), and the policy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hpctune.policies import ActionKind, AshaPolicy, Event, OptionError, make_policy
from hpctune.policies.asha import AshaBracket
from hpctune.study.states import Decision, TrialStatus
from tests.policies._views import RNG, context, trial, view


def test_rungs_are_grace_times_eta_powers_below_max_t() -> None:
    assert [m for m, _ in AshaBracket(1, 4, 100).rungs] == [64, 16, 4, 1]
    assert [m for m, _ in AshaBracket(1, 4, 100, s=1).rungs] == [64, 16, 4]
    assert [m for m, _ in AshaBracket(2, 3, 18).rungs] == [6, 2]


def test_cutoff_is_the_one_minus_one_over_eta_percentile() -> None:
    bracket = AshaBracket(1, 4, 100)
    assert bracket.cutoff({}) is None
    assert bracket.cutoff({1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0, 5: 5.0}) == pytest.approx(4.0)
    assert AshaBracket(1, 2, 10).cutoff({1: 2.0, 2: 4.0}) == pytest.approx(3.0)


def test_a_trial_below_the_cutoff_of_earlier_trials_is_stopped() -> None:
    bracket = AshaBracket(1, 2, 10)  # rungs 1, 2, 4, 8; keeps the top half
    assert bracket.on_result(1, 1, 2.0) is Decision.CONTINUE  # nothing recorded yet
    assert bracket.on_result(2, 1, 4.0) is Decision.CONTINUE  # 4 >= cutoff(2) = 2
    assert bracket.on_result(3, 1, 1.0) is Decision.STOP  # 1 < cutoff(2, 4) = 3
    assert bracket.on_result(4, 1, 3.0) is Decision.CONTINUE  # 3 >= cutoff(2, 4, 1) = 2
    assert bracket.stopped == {3: (1, 3.0)}
    assert bracket.on_result(3, 1, 1.0) is Decision.STOP  # stays stopped
    assert bracket.on_result(2, 2, 5.0) is Decision.CONTINUE  # first at rung 2
    assert bracket.on_result(2, 3, 0.0) is Decision.CONTINUE  # judged at rung 2 already
    assert dict(bracket.rungs)[1] == {1: 2.0, 2: 4.0, 3: 1.0, 4: 3.0}
    restored = AshaBracket(1, 2, 10)
    restored.load_state_dict(json.loads(json.dumps(bracket.state_dict())))
    assert restored.state_dict() == bracket.state_dict()


def test_policy_terminates_below_the_cutoff_and_continues_otherwise() -> None:
    policy = AshaPolicy(context(), AshaPolicy.Options(reduction_factor=2))
    a, b, c = trial(0, [0.5]), trial(1, [0.9]), trial(2, [0.2])
    v = view([a, b, c], max_steps=4)
    assert policy.decide(v, Event.boundary(0, 1), RNG).actions[0].kind is ActionKind.CONTINUE
    assert policy.decide(v, Event.boundary(1, 1), RNG).actions[0].kind is ActionKind.CONTINUE
    stop = list(policy.decide(v, Event.boundary(2, 1), RNG).actions)
    assert [(x.kind, x.trial_id) for x in stop] == [(ActionKind.TERMINATE, 2)]
    assert "cutoff 0.7" in stop[0].reason
    assert list(policy.decide(v, Event.report(2, 1), RNG).actions) == []
    # at max_steps there is nothing to decide
    assert policy.decide(v, Event.boundary(0, 4), RNG).actions[0].kind is ActionKind.CONTINUE


def test_policy_mode_min_stops_the_high_losses() -> None:
    policy = AshaPolicy(context(), AshaPolicy.Options(reduction_factor=2))
    v = view([trial(0, [0.5]), trial(1, [0.9]), trial(2, [0.2])], mode="min")
    kinds = [policy.decide(v, Event.boundary(t, 1), RNG).actions[0].kind for t in (0, 1, 2)]
    assert kinds == [ActionKind.CONTINUE, ActionKind.TERMINATE, ActionKind.CONTINUE]


def test_max_t_below_max_steps_stops_trials_there() -> None:
    policy = make_policy("asha", {"max_t": 3}, context())
    v = view([trial(0, [0.5, 0.6, 0.7])], max_steps=9)
    assert policy.decide(v, Event.boundary(0, 3), RNG).actions[0].kind is ActionKind.TERMINATE


def test_several_brackets_draw_from_the_generator_and_restore() -> None:
    policy = AshaPolicy(context(), AshaPolicy.Options(brackets=3, reduction_factor=2))
    v = view([trial(i, [0.1 * i]) for i in range(20)], max_steps=16)
    for i in range(20):
        list(policy.decide(v, Event.boundary(i, 1), np.random.default_rng(i)).actions)
    assert set(policy.assigned.values()) <= {0, 1, 2}
    assert len(set(policy.assigned.values())) > 1
    state = json.loads(json.dumps(policy.state_dict(), allow_nan=False))
    again = AshaPolicy(context(), AshaPolicy.Options(brackets=3, reduction_factor=2))
    again.load_state_dict(state)
    assert again.state_dict() == state


def test_slot_free_fills_every_slot() -> None:
    policy = AshaPolicy(context())
    v = view([trial(0, [0.5], TrialStatus.QUEUED)], free=3, remaining=5)
    kinds = [a.kind for a in list(policy.decide(v, Event.slot_free(3), RNG).actions)]
    assert kinds == [ActionKind.RESUME, ActionKind.START, ActionKind.START]


def test_options_are_checked() -> None:
    with pytest.raises(OptionError) as err:
        make_policy("asha", {"reduction_factor": 1}, context())
    assert err.value.key == "reduction_factor"
    with pytest.raises(OptionError) as err:
        make_policy("asha", {"grace_period": 4, "max_t": 2}, context())
    assert err.value.key == "max_t"
    with pytest.raises(OptionError, match="unknown option"):
        make_policy("asha", {"eta": 3}, context())
