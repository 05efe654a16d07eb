"""Synchronous successive halving: bracket shapes, the bracket on its own, the policy's
decisions on hand-made views, and an end-to-end digits study on the local executor."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.policies import ActionKind, Event, ShaPolicy, make_policy
from hpctune.policies._halving import (
    BracketShape,
    SyncBracket,
    bracket_milestones,
    max_bracket,
)
from hpctune.simulator import simulate
from hpctune.simulator.traces import Trace
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import DIGITS, run_hpctune, write_study
from tests.policies._views import RNG, context, trial, view

S = TrialStatus


def test_bracket_geometry_follows_li_et_al() -> None:
    assert max_bracket(1, 3, 81) == 4
    assert max_bracket(1, 3, 80) == 3
    assert max_bracket(2, 3, 17) == 1
    assert bracket_milestones(4, 3, 81, 1) == (1, 3, 9, 27, 81)
    assert bracket_milestones(3, 3, 30, 1) == (1, 3, 10, 30)  # R * eta**(i - s), rounded down
    assert bracket_milestones(0, 3, 30, 1) == (30,)
    assert ShaPolicy(context()).shapes(81) == [BracketShape(4, 81, (1, 3, 9, 27, 81))]
    assert ShaPolicy(context(), ShaPolicy.Options(bracket_size=10)).shapes(9)[0].capacity == 10


def _suspended(values: list[float], step: int = 1) -> list:
    return [trial(i, [v], S.SUSPENDED, first_step=step) for i, v in enumerate(values)]


def test_a_bracket_waits_for_all_then_keeps_exactly_the_top_third() -> None:
    bracket = SyncBracket(BracketShape(2, 9, (1, 3, 9)), eta=3)
    for tid in range(9):
        bracket.add(tid)
    assert bracket.closed
    values = [0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4]
    trials = {t.trial_id: t for t in _suspended(values)}
    trials[4] = trial(4, [0.3], S.RUNNING)
    assert not bracket.rung_done(trials)
    trials[4] = trial(4, [0.3], S.SUSPENDED)
    assert bracket.rung_done(trials)
    promoted, dropped = bracket.halve(trials, sign=1.0)
    assert promoted == [1, 5, 3]  # best first
    assert sorted(dropped) == [0, 2, 4, 6, 7, 8]
    assert bracket.milestone == 3
    assert bracket.waiting(trials) == [1, 5, 3]
    again = SyncBracket.from_state_dict(json.loads(json.dumps(bracket.state_dict())), eta=3)
    assert again.state_dict() == bracket.state_dict()


def test_sha_starts_a_bracket_then_promotes_exactly_the_top_one_over_eta() -> None:
    policy = ShaPolicy(context())
    first = list(policy.decide(view([], free=4, remaining=9), Event.slot_free(4), RNG).actions)
    assert [(a.kind, a.until_step) for a in first] == [(ActionKind.START, 1)] * 4
    values = [0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4]
    v = view(_suspended(values), free=4, remaining=0)
    actions = list(policy.decide(v, Event.slot_free(4), RNG).actions)
    terminated = [a.trial_id for a in actions if a.kind is ActionKind.TERMINATE]
    resumed = [(a.trial_id, a.until_step) for a in actions if a.kind is ActionKind.RESUME]
    assert sorted(terminated) == [0, 2, 4, 6, 7, 8]
    assert resumed == [(1, 3), (5, 3), (3, 3)]  # exactly 9 / 3, best first, to the next rung
    assert (
        list(policy.decide(v, Event.slot_free(4), RNG).actions) == actions
    )  # idempotent on the same view


def test_sha_in_min_mode_promotes_the_lowest() -> None:
    policy = ShaPolicy(context())
    values = [0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4]
    v = view(_suspended(values), mode="min", free=3, remaining=0)
    actions = list(policy.decide(v, Event.slot_free(3), RNG).actions)
    assert [a.trial_id for a in actions if a.kind is ActionKind.RESUME] == [2, 6, 4]


def test_sha_does_not_halve_before_the_bracket_is_full() -> None:
    policy = ShaPolicy(context())
    v = view(_suspended([0.5, 0.9, 0.1]), free=2, remaining=6)
    actions = list(policy.decide(v, Event.slot_free(2), RNG).actions)
    assert [(a.kind, a.until_step) for a in actions] == [(ActionKind.START, 1)] * 2


def test_sha_closes_a_partial_bracket_when_the_generator_is_exhausted() -> None:
    policy = ShaPolicy(context())
    v = view(_suspended([0.5, 0.9, 0.1, 0.7, 0.3]), free=2, remaining=0)
    actions = list(policy.decide(v, Event.slot_free(2), RNG).actions)
    assert [(a.kind, a.trial_id) for a in actions if a.kind is not ActionKind.TERMINATE] == [
        (ActionKind.RESUME, 1)
    ]
    assert sum(a.kind is ActionKind.TERMINATE for a in actions) == 4


def test_sha_terminates_survivors_at_max_t_below_max_steps() -> None:
    policy = make_policy("sha", {"max_t": 3, "reduction_factor": 3}, context())
    v = view(_suspended([0.5, 0.9, 0.1]), free=1, remaining=0, max_steps=9)
    # max_t 3: s_max 1, milestones (1, 3), bracket of 3
    actions = list(policy.decide(v, Event.slot_free(1), RNG).actions)
    assert [(a.kind, a.trial_id, a.until_step) for a in actions if a.trial_id == 1] == [
        (ActionKind.RESUME, 1, 3)
    ]
    v = view(
        [trial(1, [0.9, 0.95, 0.97], S.SUSPENDED)]
        + [trial(i, [0.1], S.TERMINATED) for i in (0, 2)],
        free=1,
        remaining=0,
    )
    actions = list(policy.decide(v, Event.slot_free(1), RNG).actions)
    assert [(a.kind, a.trial_id) for a in actions] == [(ActionKind.TERMINATE, 1)]
    assert "max_t=3" in actions[0].reason


def test_sha_options_are_checked() -> None:
    from hpctune.policies import OptionError

    with pytest.raises(OptionError) as err:
        make_policy("sha", {"reduction_factor": 1}, context())
    assert err.value.key == "reduction_factor"
    with pytest.raises(OptionError) as err:
        make_policy("sha", {"max_t": 0}, context())
    assert err.value.key == "max_t"


DIGITS_SPACE = {
    "hidden": {"type": "int", "low": 16, "high": 64, "log": True},
    "layers": 1,
    "dropout": 0.1,
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "batch_size": 64,
    "activation": ["relu", "tanh"],
    "lr": {"type": "float", "low": 0.001, "high": 0.3, "log": True},
}


@pytest.mark.slow
def test_sha_digits_study_end_to_end_matches_the_rule_and_the_simulator(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    """9 trials, eta 3, 9 epochs: rungs at 1, 3 and 9 steps; 3 promoted, then 1."""
    spec = write_study(
        tmp_path,
        train=DIGITS / "train.py",
        metric="val_accuracy",
        max_steps=9,
        num_trials=9,
        space=DIGITS_SPACE,
        policy={"name": "sha"},
        resources={"slots": 2},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    trials = study.trials
    assert len(trials) == 9

    def value(tid: int, step: int) -> float:
        curve = study.curve(tid)
        return float(curve.values[list(curve.steps).index(step)])

    rung1 = sorted(range(9), key=lambda t: (-value(t, 1), t))
    assert {t.trial_id for t in trials if t.step == 1} == set(rung1[3:])
    for t in rung1[3:]:
        assert trials[t].status is TrialStatus.TERMINATED
    survivors = rung1[:3]
    assert all(trials[t].step >= 3 for t in survivors)
    rung2 = sorted(survivors, key=lambda t: (-value(t, 3), t))
    assert trials[rung2[0]].status is TrialStatus.COMPLETED
    assert trials[rung2[0]].step == 9
    for t in rung2[1:]:
        assert trials[t].status is TrialStatus.TERMINATED
        assert trials[t].step == 3
    # promoted trials were suspended at the rung and resumed from their checkpoint
    winner = trials[rung2[0]]
    starts = [study.record.segments[s].start_step for s in winner.segments]
    assert starts == [0, 1, 3]
    assert study.curve(winner.trial_id).steps.tolist() == list(range(1, 10))

    # the simulator, on the trace of this very study, takes the same decisions
    trace = Trace.from_study(study_dir)
    assert np.isnan(trace.curves[rung1[-1], 1:]).all()  # terminated at step 1: NaN tail
    result = simulate(trace, "sha", slots=2, order=list(range(9)), target=2.0)
    assert result.trials_out_of_trace == 0
    simulated = {(o.trial, o.status, o.step) for o in result.trials}
    assert simulated == {(t.trial_id, t.status, t.step) for t in trials}
