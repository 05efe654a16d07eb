"""Policy states journaled as patches (``journal/delta.py``): a patch of the state as the policy
gives it (int keys, tuples) applies to the JSON form the journal holds."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hpctune.files import dumps
from hpctune.journal.delta import apply_delta, policy_states, state_delta

leaves = st.one_of(
    st.integers(-5, 5), st.floats(-1e3, 1e3, allow_nan=False), st.text(max_size=3), st.none()
)
keys = st.one_of(st.integers(0, 6), st.sampled_from(["a", "b", "c"]))
values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=20,
)
states = st.dictionaries(keys, values, max_size=4)


def _json(value: Any) -> Any:
    return json.loads(dumps(value))


@given(states, states)
def test_a_patch_of_the_raw_states_turns_the_journaled_one_into_the_new(
    old: dict[Any, Any], new: dict[Any, Any]
) -> None:
    patch = _json(state_delta(old, new))
    assert apply_delta(_json(old), patch) == _json(new)
    if _json(old) == _json(new):
        assert patch == {}


def test_a_state_that_grows_is_patched_with_what_it_grew_by() -> None:
    """ASHA's state: rungs of [milestone, [[trial, value], ...]] lists that only grow."""
    old = {
        "rungs": [[1, [[t, t / 100] for t in range(100)]], [4, [[t, 0.5] for t in range(20)]]],
        "assigned": [[t, 0] for t in range(100)],
    }
    new = {
        "rungs": [[1, [[t, t / 100] for t in range(101)]], [4, [[t, 0.5] for t in range(21)]]],
        "assigned": [[t, 0] for t in range(101)],
    }
    patch = _json(state_delta(old, new))
    assert apply_delta(_json(old), patch) == _json(new)
    assert len(dumps(patch)) < len(dumps(new)) / 10
    assert patch["sub"]["assigned"] == {"ext": [[100, 0]]}


def test_policy_states_fold_whole_states_and_patches_in_order() -> None:
    first = {"1": {"0": 0.5}, "stopped": {}}
    records = [
        (1.0, "policy_state", {"state": first}),
        (2.0, "decision", {}),
        (3.0, "policy_delta", {"delta": _json(state_delta({1: {0: 0.5}}, {1: {0: 0.5, 7: 0.9}}))}),
    ]
    folded = policy_states(records)
    assert [t for t, _ in folded] == [1.0, 3.0]
    assert folded[-1][1] == {"1": {"0": 0.5, "7": 0.9}, "stopped": {}}
