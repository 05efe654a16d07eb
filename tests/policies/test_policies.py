"""Tests of the policy interface, the Default policy and the contract every policy must keep."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.policies import (
    POLICIES,
    ActionKind,
    DefaultPolicy,
    Event,
    OptionError,
    StudyView,
    TrialView,
    make_policy,
    parse_options,
)
from hpctune.study.states import TrialStatus
from tests.policies._views import context


def _view(
    statuses: list[TrialStatus],
    *,
    remaining: int | None,
    free: int,
    priorities: list[float] | None = None,
) -> StudyView:
    priorities = priorities or [0.0] * len(statuses)
    trials = {
        i: TrialView(trial_id=i, status=s, params={"x": i}, priority=p)
        for i, (s, p) in enumerate(zip(statuses, priorities, strict=True))
    }
    return StudyView(
        metric="acc",
        mode="max",
        max_steps=10,
        boundary=1,
        now=0.0,
        trials=trials,
        free_slots=free,
        total_slots=4,
        trials_remaining=remaining,
    )


def test_default_fills_free_slots_queued_then_suspended_then_new() -> None:
    statuses = [
        TrialStatus.SUSPENDED,
        TrialStatus.QUEUED,
        TrialStatus.RUNNING,
        TrialStatus.SUSPENDED,
    ]
    view = _view(statuses, remaining=5, free=4, priorities=[0.1, 0.0, 0.0, 0.9])
    actions = list(
        DefaultPolicy(context()).decide(view, Event.slot_free(4), np.random.default_rng(0)).actions
    )
    assert [(a.kind, a.trial_id) for a in actions] == [
        (ActionKind.RESUME, 1),
        (ActionKind.RESUME, 3),
        (ActionKind.RESUME, 0),
        (ActionKind.START, None),
    ]


def test_default_starts_no_more_trials_than_the_budget_allows() -> None:
    view = _view([TrialStatus.COMPLETED], remaining=1, free=3)
    actions = list(
        DefaultPolicy(context()).decide(view, Event.slot_free(3), np.random.default_rng(0)).actions
    )
    assert [a.kind for a in actions] == [ActionKind.START]
    view = _view([TrialStatus.COMPLETED], remaining=0, free=3)
    assert (
        list(
            DefaultPolicy(context())
            .decide(view, Event.slot_free(3), np.random.default_rng(0))
            .actions
        )
        == []
    )


def test_default_ignores_reports_and_boundaries() -> None:
    view = _view([TrialStatus.RUNNING], remaining=0, free=0)
    policy = DefaultPolicy(context())
    assert list(policy.decide(view, Event.report(0, 3), np.random.default_rng(0)).actions) == []
    assert list(policy.decide(view, Event.boundary(0, 3), np.random.default_rng(0)).actions) == []
    assert policy.traits.boundary_decisions is False
    assert policy.state_dict() == {}


def test_make_policy_names_unknown_policies_and_options() -> None:
    assert isinstance(make_policy("default", {}, context()), DefaultPolicy)
    with pytest.raises(OptionError, match="known policies: default") as err:
        make_policy("pop2", {}, context())
    assert err.value.key == "name"
    with pytest.raises(OptionError, match="unknown option") as err:
        make_policy("default", {"eta": 3}, context())
    assert err.value.key == "eta"


@dataclass(frozen=True)
class _Options:
    eta: int = 3
    rate: float = 0.5
    name: str | None = None


def test_parse_options_checks_types_and_lists_valid_keys() -> None:
    assert parse_options(_Options, {"eta": 4, "rate": 1}) == _Options(eta=4, rate=1.0)
    with pytest.raises(OptionError, match=r"eta \(default 3\), rate \(default 0.5\)"):
        parse_options(_Options, {"etta": 4})
    with pytest.raises(OptionError, match="must be of type int") as err:
        parse_options(_Options, {"eta": 2.5})
    assert err.value.key == "eta"
    with pytest.raises(OptionError, match="must be of type int"):
        parse_options(_Options, {"eta": True})
    assert parse_options(_Options, {"name": None}).name is None


_STATUS = st.sampled_from(list(TrialStatus))


@settings(max_examples=200, deadline=None)
@given(
    statuses=st.lists(_STATUS, max_size=12),
    remaining=st.one_of(st.none(), st.integers(0, 5)),
    free=st.integers(0, 6),
    name=st.sampled_from(sorted(POLICIES)),
    seed=st.integers(0, 2**32 - 1),
)
def test_contract_no_policy_places_more_trials_than_free_slots(
    statuses: list[TrialStatus], remaining: int | None, free: int, name: str, seed: int
) -> None:
    view = _view(statuses, remaining=remaining, free=free)
    policy = make_policy(name, {}, context())
    actions = list(policy.decide(view, Event.slot_free(free), np.random.default_rng(seed)).actions)
    placing = [
        a for a in actions if a.kind in (ActionKind.START, ActionKind.RESUME, ActionKind.FORK)
    ]
    assert len(placing) <= free
    starts = sum(a.kind is ActionKind.START for a in placing)
    assert remaining is None or starts <= remaining
    for action in placing:
        if action.kind is ActionKind.RESUME:
            assert view.trials[action.trial_id].status in (
                TrialStatus.QUEUED,
                TrialStatus.SUSPENDED,
            )
    again = list(policy.decide(view, Event.slot_free(free), np.random.default_rng(seed)).actions)
    assert again == actions  # deterministic for a seed
