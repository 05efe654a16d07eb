"""The search plan: merging trials, the split-a-stage case, reference counts, JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hpctune.stagetree.pieces import trial_stages
from hpctune.stagetree.plan import PlanError, RequestStatus, SearchPlan
from hpctune.stagetree.tree import build_stage_tree

# The thesis's Figure 1.1 / 3.1: learning rate A = 0.1, B = 0.05, C = 0.02, D = E = F = 0.01.
A, B, C, D = 0.1, 0.05, 0.02, 0.01


def lr(values: list[float], milestones: list[int]) -> dict[str, Any]:
    return {"lr": {"schedule": "piecewise", "values": values, "milestones": milestones}}


TRIALS = {
    1: lr([A, D], [200]),  # A1 A2 E
    2: lr([A, B, C], [100, 200]),  # A1 B1 C
    3: lr([A, B], [100]),  # A1 B1 B2
    4: lr([A, B, D], [100, 200]),  # A1 B1 D
}
TRIAL_5 = lr([A, D], [150])  # Figure 3.2: A for 150 steps, then F


def figure_plan() -> SearchPlan:
    plan = SearchPlan()
    for t, config in TRIALS.items():
        plan.add_trial(t, trial_stages(config, 300))
    return plan


def tree_shape(plan: SearchPlan) -> list[tuple[Any, ...]]:
    """Stages, sorted, as (lr, start, end, parent's (lr, start, end) or None)."""
    tree = build_stage_tree(plan)

    def key(sid: int) -> tuple[Any, ...]:
        s = tree.stages[sid]
        return (dict(s.config)["lr"].args[0], s.start, s.end)

    return sorted((*key(s.id), None if s.parent is None else key(s.parent)) for s in tree.stages)


def test_figure_3_1_trials_merge_into_the_papers_stage_tree() -> None:
    plan = figure_plan()
    assert [(n.start, dict(n.config)["lr"].args[0]) for n in plan.nodes] == [
        (0, A),
        (200, D),
        (100, B),
        (200, C),
        (200, D),
    ]
    assert tree_shape(plan) == sorted(
        [
            (A, 0, 100, None),  # A1: all four trials
            (A, 100, 200, (A, 0, 100)),  # A2
            (B, 100, 200, (A, 0, 100)),  # B1: trials 2, 3, 4
            (D, 200, 300, (A, 100, 200)),  # E
            (C, 200, 300, (B, 100, 200)),  # C
            (D, 200, 300, (B, 100, 200)),  # D
            (B, 200, 300, (B, 100, 200)),  # B2
        ]
    )
    assert plan.total_steps() == 1200
    assert plan.unique_steps() == 200 + 200 + 3 * 100
    assert plan.merge_rate() == pytest.approx(1200 / 700)


def test_a_new_trial_splits_a_stage_without_restructuring_the_plan() -> None:
    plan = figure_plan()
    before = json.loads(json.dumps(plan.to_dict()))["nodes"]
    plan.add_trial(5, trial_stages(TRIAL_5, 300))
    after = plan.to_dict()["nodes"]
    # the old nodes are unchanged but for the root's new child and reference count
    assert len(after) == len(before) + 1
    for old, new in zip(before, after, strict=False):
        if old["id"] == 0:
            assert new["children"] == [*old["children"], 5]
            assert new["refs"] == old["refs"] + 1
            old, new = {**old, "children": 0, "refs": 0}, {**new, "children": 0, "refs": 0}
        assert old == new
    assert after[5]["start"] == 150
    assert after[5]["parent"] == 0
    # Figure 3.2: A2 is split into A3 (100-150) and A4 (150-200); F follows A3, E follows A4
    assert tree_shape(plan) == sorted(
        [
            (A, 0, 100, None),  # A1
            (A, 100, 150, (A, 0, 100)),  # A3
            (A, 150, 200, (A, 100, 150)),  # A4
            (D, 150, 300, (A, 100, 150)),  # F
            (D, 200, 300, (A, 150, 200)),  # E
            (B, 100, 200, (A, 0, 100)),  # B1
            (C, 200, 300, (B, 100, 200)),
            (D, 200, 300, (B, 100, 200)),
            (B, 200, 300, (B, 100, 200)),  # B2
        ]
    )
    assert plan.unique_steps() == 700 + 150


def test_reference_counts_follow_trials_in_and_out() -> None:
    plan = figure_plan()
    assert [n.refs for n in plan.nodes] == [4, 1, 3, 1, 1]
    assert [plan.trials_through(n.id) for n in plan.nodes] == [
        [1, 2, 3, 4],
        [1],
        [2, 3, 4],
        [2],
        [4],
    ]
    assert [n.status for n in plan.nodes] == ["idle", "pending", "pending", "pending", "pending"]
    plan.claim(1, 200, 300)
    plan.set_status(2, 300, RequestStatus.SCHEDULED)
    plan.add_checkpoint(3, 300, "c-300")
    assert [n.status for n in plan.nodes] == ["idle", "running", "scheduled", "done", "pending"]
    plan.add_trial(5, trial_stages(TRIAL_5, 300))
    assert plan.nodes[0].refs == 5
    assert plan.nodes[5].refs == 1
    assert plan.remove_trial(5) == [5]
    assert plan.nodes[0].refs == 4
    assert plan.nodes[5].refs == 0
    assert not plan.nodes[5].requests
    assert plan.unique_steps() == 700  # a node nobody needs costs nothing
    assert plan.remove_trial(2) == [3]  # C's node; A and B still serve trials 1, 3, 4
    assert [n.refs for n in plan.nodes] == [3, 1, 2, 0, 1, 0]
    with pytest.raises(PlanError, match="trial 2 is not in the search plan"):
        plan.remove_trial(2)


def test_identical_trials_share_one_request_and_stored_results_answer_them() -> None:
    plan = figure_plan()
    assert plan.add_trial(6, trial_stages(TRIALS[2], 300)) is False
    assert len(plan.nodes) == 5
    leaf = plan.nodes[plan.trials[2].nodes[-1]]
    assert leaf.requests[300].trials == [2, 6]
    assert plan.add_checkpoint(leaf.id, 300, "ckpt-c-300") == [2, 6]
    assert leaf.requests[300].status is RequestStatus.DONE
    assert plan.add_trial(7, trial_stages(TRIALS[2], 300)) is True  # answered, no training
    # a shorter request (e.g. a rung of SHA) ends inside a node
    assert plan.add_trial(8, trial_stages(TRIALS[2], 300), end=150) is False
    assert plan.trials[8].nodes == (0, 2)
    assert 150 in plan.nodes[2].requests
    plan.remove_trial(6)
    assert leaf.requests[300].trials == [2, 7]


def test_json_round_trip_keeps_everything() -> None:
    plan = figure_plan()
    plan.add_trial(5, trial_stages(TRIAL_5, 300), end=250)
    plan.add_checkpoint(0, 100, "ckpt-a-100")
    plan.nodes[2].metrics[150] = {"val_accuracy": 0.5}
    plan.claim(2, 100, 200)
    plan.set_status(2, 300, RequestStatus.SCHEDULED)
    text = json.dumps(plan.to_dict())
    again = SearchPlan.from_dict(json.loads(text))
    assert again.to_dict() == plan.to_dict()
    assert tree_shape(again) == tree_shape(plan)
    # merging into the restored plan finds the same nodes
    again.add_trial(9, trial_stages(TRIALS[4], 300))
    assert again.trials[9].nodes == plan.trials[4].nodes


def test_bad_input_is_refused_with_the_reason() -> None:
    plan = figure_plan()
    stages = trial_stages(TRIALS[1], 300)
    with pytest.raises(PlanError, match="already in the search plan"):
        plan.add_trial(1, stages)
    with pytest.raises(PlanError, match="contiguous"):
        plan.add_trial(10, [stages[0], stages[0]])
    with pytest.raises(PlanError, match=r"end must be in \[1, 300\]"):
        plan.add_trial(10, stages, end=301)
    with pytest.raises(PlanError, match="version"):
        SearchPlan.from_dict({"version": 99})
    with pytest.raises(PlanError, match="malformed"):
        SearchPlan.from_dict({"version": 1, "nodes": [{"id": 0}]})
