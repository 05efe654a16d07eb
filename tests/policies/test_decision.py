"""A policy's decision: its actions and whether idle workers wait, as one frozen record."""

from __future__ import annotations

import dataclasses

import pytest

from hpctune.policies import POLICIES, Action, Event, Policy, PolicyDecision, make_policy
from tests.policies._views import RNG, context, trial, view


def test_a_decision_holds_its_actions_as_a_tuple() -> None:
    actions = [Action.start(), Action.terminate(3, reason="r")]
    decision = PolicyDecision.of(a for a in actions)
    assert decision.actions == tuple(actions)
    assert decision == PolicyDecision(actions=tuple(actions))
    assert PolicyDecision(actions=actions).actions == tuple(actions)  # type: ignore[arg-type]
    assert PolicyDecision() == PolicyDecision.of([])
    assert not PolicyDecision().hold_idle_workers
    assert PolicyDecision.of([], hold_idle_workers=True).hold_idle_workers
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.hold_idle_workers = True  # type: ignore[misc]


def test_the_policy_interface_has_no_idle_worker_hook() -> None:
    assert not hasattr(Policy, "holds_idle_workers")


@pytest.mark.parametrize("name", sorted(set(POLICIES) - {"replay"}))
def test_every_policy_returns_a_decision(name: str) -> None:
    policy = make_policy(name, {}, context())
    v = view([trial(0, [0.5, 0.6])], free=2, remaining=3)
    for event in (Event.slot_free(2), Event.boundary(0, 2), Event.report(0, 2)):
        assert isinstance(policy.decide(v, event, RNG), PolicyDecision)


def test_pbt_holds_idle_workers_while_a_trial_that_will_reproduce_runs() -> None:
    policy = make_policy("pbt", {"population_size": 2, "steps_per_generation": 2}, context())
    sessions = [dataclasses.replace(trial(i, [0.5 - 0.1 * i]), end_step=2) for i in range(2)]
    running = view(sessions, free=1, remaining=None)
    assert policy.decide(running, Event.slot_free(1), RNG).hold_idle_workers
    to_the_end = view([trial(i, [0.5 - 0.1 * i]) for i in range(2)], free=1, remaining=None)
    assert not policy.decide(to_the_end, Event.slot_free(1), RNG).hold_idle_workers
