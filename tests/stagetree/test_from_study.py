"""The search plan rebuilt from a study's journal state (what the controller decides from).

Two trials share a learning rate of 0.1 for 3 steps, then 0.01 or 0.05, for 6 steps. Trial 0
trains from step 0 on a worker; until its checkpoint at the branch point (step 3) exists, trial
1's request waits (the steps it needs are claimed); then trial 1 resumes from it.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from hpctune.journal import state as st
from hpctune.journal.state import CheckpointRef, StudyRecord
from hpctune.stagetree.from_study import (
    answered_trials,
    node_at,
    plan_from_study,
    profile_step_cost,
)
from hpctune.stagetree.plan import RequestStatus
from hpctune.stagetree.tree import Point, build_stage_tree, needed_checkpoints
from hpctune.study.states import StudyState
from tests.policies._views import context


def lr(after: float) -> dict[str, Any]:
    return {"schedule": "piecewise", "values": [0.1, after], "milestones": [3]}


def record_with_two_trials() -> StudyRecord:
    record = StudyRecord()
    for trial, after in ((0, 0.01), (1, 0.05)):
        record.apply(st.TRIAL_CREATED, trial, -1, 0.0, {"params": {"lr": lr(after)}, "seed": 1})
    record.apply(
        st.SEGMENT_ASSIGNED,
        0,
        0,
        1.0,
        {"worker": "w0", "start_step": 0, "until_step": 6, "checkpoint_row": None},
    )
    record.apply(st.SEGMENT_STARTED, 0, 0, 1.0, {"at": 1.0})
    return record


def checkpoint(record: StudyRecord, trial: int, segment: int, step: int) -> None:
    row = len(record.checkpoints)
    record.add_checkpoint(
        CheckpointRef(row, trial, segment, step, float(step), 10, "x", f"ck-{row}.pt")
    )


def test_a_request_waits_for_a_claimed_branch_point_then_resumes_from_it() -> None:
    record = record_with_two_trials()
    plan = plan_from_study(record, 6)
    assert plan.merge_rate() == pytest.approx(12 / 9)
    root = plan.trials[0].nodes[0]
    assert plan.nodes[root].claims == [(0, 3)]
    tree = build_stage_tree(plan)
    assert tree.stages == []  # trial 0 trains now; trial 1 needs its steps 0-3
    assert len(tree.waiting) == 2

    for step in (1, 2):
        checkpoint(record, 0, 0, step)
    plan = plan_from_study(record, 6)
    assert plan.nodes[root].claims == [(2, 3)]  # the claim shrinks with the checkpoints
    assert not build_stage_tree(plan).stages

    checkpoint(record, 0, 0, 3)
    plan = plan_from_study(record, 6)
    assert plan.nodes[root].claims == []
    assert node_at(plan, 0, 3) == root
    assert node_at(plan, 1, 4) == plan.trials[1].nodes[1]
    tree = build_stage_tree(plan)
    assert [(s.node, s.start, s.end, s.trials) for s in tree.stages] == [
        (plan.trials[1].nodes[1], 3, 6, [1])
    ]
    assert tree.stages[0].source == Point(root, 3)
    assert Point(root, 3) in needed_checkpoints(plan)
    assert Point(root, 1) not in needed_checkpoints(plan)


def test_ended_trials_need_nothing_and_answered_ones_are_found() -> None:
    record = record_with_two_trials()
    for step in range(1, 7):
        checkpoint(record, 0, 0, step)
    record.apply(st.SEGMENT_ENDED, 0, 0, 7.0, {"status": "lost", "step": 6})
    record.apply(st.TRIAL_STATUS, 0, -1, 7.0, {"status": "queued"})
    record.apply(st.TRIAL_STATUS, 1, -1, 7.0, {"status": "failed"})
    plan = plan_from_study(record, 6)
    # trial 0's worker died after its last checkpoint: no training, it is answered
    assert answered_trials(record, plan) == [0]
    leaf = plan.nodes[plan.trials[1].nodes[-1]]
    assert leaf.requests[6].status is RequestStatus.DONE  # trial 1 failed: nothing to train
    assert build_stage_tree(plan).stages == []


def test_step_cost_is_measured_per_configuration_piece() -> None:
    record = record_with_two_trials()
    for step, t in ((1, 2.0), (2, 4.0), (3, 6.0), (4, 7.0), (5, 8.0)):
        record.add_report(0, step, 1.0 + t, 0.5)
    plan = plan_from_study(record, 6)
    cost = profile_step_cost(record, plan)
    first, second = (plan.nodes[n].config for n in plan.trials[0].nodes)
    other = plan.nodes[plan.trials[1].nodes[1]].config
    assert cost(first) == pytest.approx(2.0)  # steps 2 and 3 (step 1 pays the start-up)
    assert cost(second) == pytest.approx(1.0)  # steps 4 and 5
    assert cost(other) == pytest.approx(1.5)  # never trained: the mean of all steps
    assert profile_step_cost(StudyRecord(), plan)(first) == 1.0


def test_stage_statuses_follow_the_study() -> None:
    from hpctune.stagetree.status import status_counts, study_stage_tree

    record = record_with_two_trials()
    record.state = StudyState.RUNNING
    record.add_report(0, 1, 2.0, 0.5)
    checkpoint(record, 0, 0, 1)
    tree, statuses = study_stage_tree(record, 6)
    # the shared ramp 0-3, then each trial's 3-6
    assert [(s.start, s.end) for s in tree.stages] == [(0, 3), (3, 6), (3, 6)]
    # trial 0's segment trains the ramp now; the rest of its path comes later
    assert statuses == ["running", "pending", "pending"]
    for step in (2, 3, 4):
        record.add_report(0, step, 2.0 + step, 0.5)
    tree, statuses = study_stage_tree(record, 6)
    assert statuses[0] == "done"
    assert sorted(statuses[1:]) == ["pending", "running"]
    stopped = copy.deepcopy(record)  # a stopped study's segments train nothing
    stopped.state = StudyState.STOPPED
    assert "running" not in study_stage_tree(stopped, 6)[1]
    record.apply(st.TRIAL_STATUS, 1, -1, 9.0, {"status": "terminated"})
    tree, statuses = study_stage_tree(record, 6)
    assert status_counts(statuses) == {"done": 1, "running": 1, "pending": 0, "released": 1}


def test_checkpoints_at_rungs_and_branch_points_are_kept_for_trials_to_come() -> None:
    from hpctune.stagetree.from_study import future_checkpoints

    record = record_with_two_trials()
    for step in range(1, 7):
        checkpoint(record, 0, 0, step)  # rows 0..5 at steps 1..6
    record.apply(st.SEGMENT_ENDED, 0, 0, 7.0, {"status": "completed", "step": 6})
    record.apply(st.TRIAL_STATUS, 0, -1, 7.0, {"status": "completed"})
    record.apply(st.TRIAL_STATUS, 1, -1, 7.0, {"status": "terminated"})
    # nothing live: nothing to keep, though trial 0's path has a branch point at step 3
    full = plan_from_study(record, 6, full_paths=True)
    assert future_checkpoints(record, full, [2]) == set()
    # a trial still to come with trial 1's lr: it branches off at step 3; a rung at step 2
    future = [{"lr": lr(0.05)}]
    full = plan_from_study(record, 6, full_paths=True, future=future)
    assert future_checkpoints(record, full) == {"2"}  # the branch point (row 2: step 3)
    assert future_checkpoints(record, full, [2]) == {"1", "2"}  # and the rung (step 2)


def test_tuners_name_their_milestones_for_stage_trees() -> None:
    import numpy as np

    from hpctune.policies import make_policy
    from hpctune.policies._base import StudyView

    view = StudyView(
        metric="m",
        mode="max",
        max_steps=20,
        boundary=1,
        now=0.0,
        trials={},
        free_slots=0,
        total_slots=2,
        trials_remaining=0,
    )
    asha = make_policy("asha", {"grace_period": 1, "reduction_factor": 4}, context(20))
    rng = np.random.default_rng(0)
    assert asha.stage_milestones(view, None, rng) == [1, 4, 16, 20]
    assert asha.stage_milestones(view, 3, rng) == [1, 4, 16, 20]
    sha = make_policy("sha", {}, context(20))
    assert sha.stage_milestones(view, None, rng) == [2, 6, 20]
    # median stopping: every boundary from the grace period on, then max_steps
    assert make_policy("median", {}, context(20)).stage_milestones(view, None, rng) == list(
        range(1, 21)
    )
    median = make_policy("median", {"grace_period": 3}, context(20))
    assert median.stage_milestones(replace(view, boundary=5), None, rng) == [5, 10, 15, 20]
    assert median.stage_milestones(replace(view, boundary=2), 0, rng) == list(range(4, 21, 2))
    assert make_policy("bandit", {}, context(20)).stage_milestones(view, None, rng) is None


def test_later_stage_ends_are_branch_points_and_milestones_inside_the_segment() -> None:
    from hpctune.stagetree.from_study import later_stage_ends
    from hpctune.stagetree.pieces import trial_stages
    from hpctune.stagetree.plan import SearchPlan

    plan = SearchPlan()
    lr = {"schedule": "piecewise", "values": [0.1, 0.01], "milestones": [6]}
    other = {"schedule": "piecewise", "values": [0.1, 0.05], "milestones": [3]}
    plan.add_trial(0, trial_stages({"lr": lr}, 10))
    plan.add_trial(1, trial_stages({"lr": other}, 10))  # leaves trial 0's path at step 3
    plan.add_trial(2, trial_stages({"lr": {**lr, "values": [0.1, 0.02]}}, 10))  # at step 6
    assert later_stage_ends(plan, 0, 0, 10) == {3, 6}
    assert later_stage_ends(plan, 0, 3, 10) == {6}  # the segment's own ends are excluded
    assert later_stage_ends(plan, 0, 0, 6, [2, 6, 8]) == {2, 3}
    assert later_stage_ends(plan, 7, 0, 10) == set()  # not in the plan
