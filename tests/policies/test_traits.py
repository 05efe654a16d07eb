"""Policy traits: capabilities as data, read by the core instead of policy names."""

from __future__ import annotations

import dataclasses

import pytest

from hpctune.policies import POLICIES, Policy, PolicyTraits
from hpctune.stagetree.options import stage_policies

OLD_FLAGS = (
    "boundary_decisions",
    "wants_predictions",
    "wants_reports",
    "wants_boundaries",
    "makes_configurations",
    "tracks_state_changes",
)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_declares_one_frozen_traits_record_and_no_loose_flags(name: str) -> None:
    cls = POLICIES[name]
    assert isinstance(cls.traits, PolicyTraits)
    for flag in OLD_FLAGS:
        assert not hasattr(cls, flag), f"{name} still has the class flag {flag}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cls.traits.boundary_decisions = True  # type: ignore[misc]


def test_the_traits_say_what_the_names_said() -> None:
    """The capabilities the core once found by name: Default alone admits every trial; the
    stage-tree policies are the six that were listed by name."""
    admits = {n for n, cls in POLICIES.items() if cls.traits.admits_every_trial}
    assert admits == {"default"}
    assert set(stage_policies()) == {"default", "sha", "hyperband", "asha", "median", "pbt"}
    forks = {n for n, cls in POLICIES.items() if cls.traits.makes_configurations}
    assert forks == {"pbt", "pbt-truncation", "replay"}
    predictions = {n for n, cls in POLICIES.items() if cls.traits.wants_predictions}
    assert predictions == {"pop", "earlyterm", "hybrid"}
    no_boundary = {n for n, cls in POLICIES.items() if not cls.traits.boundary_decisions}
    assert no_boundary == {
        "default",
        "sha",
        "hyperband",
        "pbt",
        "replay",
        "freeze-thaw",
        "one-epoch",
    }
    assert {n for n, cls in POLICIES.items() if cls.traits.tracks_state_changes} == {"asha"}


def test_the_base_traits_are_those_of_a_policy_deciding_at_boundaries() -> None:
    assert Policy.traits == PolicyTraits()
    base = PolicyTraits()
    assert base.boundary_decisions
    assert base.wants_boundaries
    assert not base.admits_every_trial
    assert not base.runs_on_stage_trees
