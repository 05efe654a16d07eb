"""Policies are built with their study's context and set themselves up there (no lazy set-up)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest

from hpctune.backends.local import local_executor
from hpctune.controller import Controller
from hpctune.controller.launch import create_study
from hpctune.policies import POLICIES, Action, ActionKind, Event, StudyContext, make_policy
from hpctune.simulator import Simulator, SimulatorError, simulation_context
from hpctune.simulator.traces import Trace
from hpctune.spec import load_spec, study_context
from tests.conftest import write_study
from tests.policies._views import RNG, trial, view

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}
TRAIN = "def train(ctx):\n    pass\n"


def test_the_context_is_built_from_the_spec(tmp_path: Path) -> None:
    path = write_study(tmp_path, train=TRAIN, space=SPACE, mode="min", max_steps=27, boundary=3)
    spec = load_spec(path)
    assert study_context(spec) == StudyContext(max_steps=27, mode="min", boundary=3)


def test_the_controller_builds_its_policy_with_the_studys_context(tmp_path: Path) -> None:
    path = write_study(
        tmp_path, train=TRAIN, space=SPACE, max_steps=16, boundary=2, policy={"name": "asha"}
    )
    paths = create_study(load_spec(path))
    controller = Controller(paths.root, lambda spec: local_executor(paths, spec))
    try:
        assert controller.core.policy.context == StudyContext(max_steps=16, mode="max", boundary=2)
        assert controller.core.policy.state_dict()["max_t"] == 16
    finally:
        controller.core.executor.close()


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_no_policy_sets_itself_up_on_its_first_decision(name: str) -> None:
    cls = POLICIES[name]
    lazy = [n for n, _ in inspect.getmembers(cls) if n.startswith("_ensure")]
    assert lazy == []
    assert "context" in inspect.signature(cls).parameters


@pytest.mark.parametrize(
    ("name", "options", "key", "expected"),
    [
        ("asha", {"reduction_factor": 2}, "max_t", 16),
        ("asha", {"reduction_factor": 2, "max_t": 8}, "max_t", 8),
        ("sha", {}, "max_t", 16),
        ("hyperband", {"max_t": 40}, "max_t", 16),
        ("hybrid", {"reduction_factor": 2}, "milestones", [1, 2, 4, 8]),
    ],
)
def test_a_new_policy_has_its_rungs_before_any_view(
    name: str, options: dict[str, object], key: str, expected: object
) -> None:
    """Rungs and brackets follow from the context at construction: the state a new study's
    controller journals has them, whatever view comes first."""
    policy = make_policy(name, options, StudyContext(max_steps=16))
    assert policy.state_dict()[key] == expected
    policy.load_state_dict({})  # a new study's journal has no state: the policy stays as built
    assert policy.state_dict()[key] == expected


def test_asha_judges_by_the_rungs_of_its_context() -> None:
    """ASHA built for 16 steps has its rungs from the context, not from the first view it is
    shown (lazily set up, a view saying 9 steps would have fixed ``max_t`` at 9 for good)."""
    policy = make_policy("asha", {"reduction_factor": 2}, StudyContext(max_steps=16))
    assert policy.stage_milestones(view([], max_steps=9), None, RNG) == [1, 2, 4, 8, 16]
    trials = [trial(i, [0.9 - 0.1 * i] * 4) for i in range(3)]
    v = view(trials, max_steps=16)
    assert list(policy.decide(v, Event.boundary(0, 4), RNG).actions) == [Action.continue_(0)]
    assert policy.decide(v, Event.boundary(1, 4), RNG).actions[0].kind is ActionKind.TERMINATE
    state = policy.state_dict()
    assert [m for m, _ in state["brackets"][0]["rungs"]] == [8, 4, 2, 1]
    assert json.loads(json.dumps(state)) == state


def test_a_context_refuses_impossible_studies() -> None:
    with pytest.raises(ValueError, match="max_steps >= 1"):
        StudyContext(max_steps=0)
    with pytest.raises(ValueError, match="boundary >= 1"):
        StudyContext(max_steps=3, boundary=0)
    with pytest.raises(ValueError, match='"max" or "min"'):
        StudyContext(max_steps=3, mode="best")  # type: ignore[arg-type]


def test_the_simulator_refuses_a_policy_built_for_another_study() -> None:
    trace = Trace(
        np.array([[0.1, 0.2, 0.3]]), np.ones((1, 3)), ({"c": 0},), metric="acc", mode="max"
    )
    assert simulation_context(trace) == StudyContext(max_steps=3, mode="max", boundary=1)
    Simulator(trace, make_policy("asha", {}, simulation_context(trace)), slots=1)
    with pytest.raises(SimulatorError, match="build it with simulation_context"):
        Simulator(trace, make_policy("asha", {}, StudyContext(max_steps=9)), slots=1)
