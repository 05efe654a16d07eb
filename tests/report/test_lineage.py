"""Lineage queries (dependency graph, schedule, replay plan) and the replay policy."""

from __future__ import annotations

import numpy as np
import pytest

from hpctune.analysis.lineage import ancestors, replay_plan, schedule, tree_text
from hpctune.errors import UsageError
from hpctune.journal import state as st
from hpctune.journal.state import StudyRecord
from hpctune.policies import ActionKind, Event, OptionError, StudyView, TrialView, make_policy
from hpctune.study.space import parse_space
from hpctune.study.states import TrialStatus
from tests.policies._views import context

# (trial, parent, parent_step, end_step, lr)
TREE = [
    (0, None, None, 2, 0.1),
    (1, None, None, 2, 0.2),
    (2, 0, 2, 4, 0.08),
    (3, 2, 4, 6, 0.06),
    (4, 0, 2, 4, 0.12),
    (5, 1, 2, 4, 0.16),
    (6, 3, 6, 8, 0.05),
]


def record(tree: list[tuple[int, int | None, int | None, int, float]] = TREE) -> StudyRecord:
    rec = StudyRecord(spec={"metric": "score", "mode": "max", "max_steps": 8})
    for tid, parent, step, end, lr in tree:
        data = {"params": {"lr": lr}, "seed": 100 + tid, "end_step": end, "generation": 0}
        if parent is not None:
            data.update(parent_trial=parent, parent_step=step, parent_checkpoint_row=parent)
            data["generation"] = rec.trials[parent].generation + 1  # type: ignore[operator]
        rec.apply(st.TRIAL_CREATED, tid, -1, 0.0, data)
        rec.apply(st.TRIAL_STATUS, tid, -1, 0.0, {"status": "completed"})
        rec.trials[tid].step = end
        rec.trials[tid].curve_steps = [end]
        rec.trials[tid].curve_values = [float(end) + lr]
    return rec


def test_ancestors_are_the_dependency_graph_in_topological_order() -> None:
    rec = record()
    assert ancestors(rec, [6]) == [0, 2, 3, 6]
    assert ancestors(rec, [6, 5]) == [0, 1, 2, 3, 5, 6]  # parents before children, ties by id
    with pytest.raises(UsageError, match="no trial 9"):
        ancestors(rec, [9])


def test_schedule_is_the_chain_of_sessions() -> None:
    sessions = schedule(record(), 6)
    assert [(s.trial_id, s.start_step, s.end_step, s.params["lr"]) for s in sessions] == [
        (0, 0, 2, 0.1),
        (2, 2, 4, 0.08),
        (3, 4, 6, 0.06),
        (6, 6, 8, 0.05),
    ]


def test_replay_plan_indexes_parents_and_refuses_forks_at_several_steps() -> None:
    plan = replay_plan(record(), [6, 4])
    assert [e["trial"] for e in plan] == [0, 2, 3, 4, 6]
    assert [e["parent"] for e in plan] == [None, 0, 1, 0, 2]
    assert [e["end_step"] for e in plan] == [2, 4, 6, 4, 8]
    assert [e["target"] for e in plan] == [False, False, False, True, True]
    assert plan[4]["seed"] == 106
    tree = [*TREE, (7, 0, 1, 3, 0.3)]
    with pytest.raises(UsageError, match=r"trial 0 is forked at steps \[1, 2\]"):
        replay_plan(record(tree), [6, 7])
    text = tree_text(record(), [6])
    assert text.splitlines() == [
        "trial 0 gen 0 steps 0-2 score 2.1 lr=0.1",
        "  trial 2 gen 1 steps 2-4 score 4.08 lr=0.08",
        "    trial 3 gen 2 steps 4-6 score 6.06 lr=0.06",
        "      trial 6 gen 3 steps 6-8 score 8.05 lr=0.05",
    ]


def _view(trials: list[TrialView]) -> StudyView:
    return StudyView(
        metric="score",
        mode="max",
        max_steps=8,
        boundary=1,
        now=0.0,
        trials={t.trial_id: t for t in trials},
        free_slots=2,
        total_slots=2,
        trials_remaining=0,
        space=parse_space({"lr": {"type": "float", "low": 0.01, "high": 1.0}}, path=None),
    )


def test_replay_policy_creates_entries_in_order_once_parents_are_done() -> None:
    policy = make_policy("replay", {"trials": replay_plan(record(), [6])}, context())
    rng = np.random.default_rng(0)
    first = list(policy.decide(_view([]), Event.slot_free(2), rng).actions)
    assert [(a.kind, a.params, a.seed, a.end_step) for a in first] == [
        (ActionKind.START, {"lr": 0.1}, 100, 2)
    ]  # entry 1 waits for its parent
    running = TrialView(0, TrialStatus.RUNNING, {"lr": 0.1}, step=1)
    waiting = policy.decide(_view([running]), Event.slot_free(1), rng)
    assert waiting.actions == ()
    assert waiting.hold_idle_workers  # the worker waits for the parent's end
    done = TrialView(0, TrialStatus.COMPLETED, {"lr": 0.1}, step=2, checkpoint_step=2)
    fork = list(policy.decide(_view([done]), Event.slot_free(2), rng).actions)
    assert [(a.kind, a.trial_id, a.step, a.seed, a.end_step) for a in fork] == [
        (ActionKind.FORK, 0, 2, 102, 4)
    ]
    # parents of entries still to come, and the target
    assert policy.needed_checkpoints(_view([done])) == {0, 1, 2, 3}
    with pytest.raises(OptionError, match="plan is empty"):
        make_policy("replay", {}, context()).check_space(_view([]).space)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="earlier entry"):
        make_policy(
            "replay",
            {"trials": [{"params": {}, "seed": 1, "end_step": 2, "parent": 0}]},
            context(),
        )
