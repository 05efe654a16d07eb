"""SYNC (the rung decision) measured from a running study's journal: each finished stage's last
segment end to the next stage's first segment start (``profiling.study_decisions``), and the
re-plans that take it (``follow.measured_profile``). Hand-built journals, no processes."""

from __future__ import annotations

import dataclasses

import pytest

from hpctune.elastic import CostModel, ExperimentSpec, PlanOptions, Profile, Stage, plan_elastic
from hpctune.elastic.follow import measured_profile, plan_record, replan
from hpctune.elastic.measured import study_decisions, study_stages
from hpctune.elastic.status import format_plan_status, plan_status
from hpctune.journal.entities import SegmentRecord
from hpctune.journal.state import StudyRecord
from hpctune.study.states import SegmentStatus

# bracket 0: trials 0-3 to steps 1, 2, 4; bracket 1: trials 4-5 to steps 1, 2
SPEC = ExperimentSpec(
    (
        Stage(4, 0, 1, 0),
        Stage(2, 1, 2, 0),
        Stage(1, 2, 4, 0),
        Stage(2, 0, 1, 1),
        Stage(1, 1, 2, 1),
    )
)


def _record(segments: list[tuple[int, int, float, float | None]]) -> StudyRecord:
    """A study record of ``(trial, start step, started, ended)`` segments, one worker each."""
    record = StudyRecord()
    for i, (trial, start, started, ended) in enumerate(segments):
        record.segments[i] = SegmentRecord(
            segment_id=i,
            trial_id=trial,
            worker_id=f"w{i}",
            start_step=start,
            until_step=start + 1,
            checkpoint_row=None,
            assigned_time=started - 0.5,
            status=SegmentStatus.RUNNING if ended is None else SegmentStatus.SUSPENDED,
            started_time=started,
            ended_time=ended,
        )
    return record


def test_sync_is_a_finished_stages_last_end_to_the_next_stages_first_start() -> None:
    stage0_ends = {0: 10.0, 1: 12.0, 2: 11.0, 3: 15.0}  # trial 3 failed at 9 s and ran again
    stage1_starts = {0: 18.0, 2: 17.5}
    stage1_ends = {0: 25.0, 2: 27.0}
    stage2_start = 30.25
    bracket1 = [(4, 0, 3.0, 40.0), (5, 0, 3.0, 45.0), (4, 1, 41.0, None)]  # overlapping rungs
    segments = [(t, 0, 2.0, end) for t, end in stage0_ends.items()]
    segments.append((3, 0, 1.0, 9.0))
    segments += [(t, 1, stage1_starts[t], stage1_ends[t]) for t in stage1_starts]
    segments.append((2, 2, stage2_start, None))
    segments += bracket1
    record = _record(segments)

    expected = (
        min(stage1_starts.values()) - max(stage0_ends.values()),
        stage2_start - max(stage1_ends.values()),
        0.0,  # bracket 1's stage 1 began (41 s) before its stage 0 ended (45 s): no wait
    )
    assert study_decisions(record, SPEC) == pytest.approx(expected)
    # stage 2 is a bracket's last stage: no rung after it, no sample even when bracket 1 ran

    # a stage with a segment still running is not finished: no sample for it
    running = _record([*segments[:-3], (4, 0, 3.0, 40.0), (5, 0, 3.0, None), (4, 1, 41.0, None)])
    assert study_decisions(running, SPEC) == pytest.approx(expected[:2])
    # a stage whose next stage has not started a segment is not finished either
    assert study_decisions(_record(segments[:5]), SPEC) == ()
    assert study_decisions(StudyRecord(), SPEC) == ()


def test_a_replan_after_a_finished_stage_carries_the_measured_sync() -> None:
    spec = ExperimentSpec.successive_halving(4, [1, 2, 3], 2)  # 4, 2, 1 trials
    profile = Profile.scaling(1.0, {2: 1.5}, decision=(5.0,))
    cost = CostModel(price=3600.0)
    first = plan_elastic(spec, profile, 60.0, cost, options=PlanOptions(samples=4))
    record = plan_record(first, profile, "planned at the study's start")
    last_end, next_start = 4.0, 6.75
    study = _record(
        [
            (0, 0, 0.5, 2.0),
            (1, 0, 0.5, 3.0),
            (2, 0, 0.5, 1.5),
            (3, 0, 0.5, last_end),
            (0, 1, next_start, 8.0),
            (2, 1, 7.0, 9.5),
        ]
    )
    # stage 1 just ended (its trials at the rung): stage 0's decision is measured, stage 1's
    # is being made
    result, measured = replan(record, 1, 9.5, 0.01, study)
    assert measured.decision == (next_start - last_end,)
    assert plan_record(result, measured, "r")["profile_data"]["decision"] == [
        next_start - last_end
    ]
    # every SYNC from here is on the critical path: stage 1's and stage 2's, at the measured
    # seconds, not the profile's 5 s
    assert result.plan.prediction.critical["SYNC"] == pytest.approx(2 * (next_start - last_end))
    # SYNC is all the study measured here (one worker per segment: no gap, no worker start)
    assert dataclasses.replace(measured, source=profile.source) == dataclasses.replace(
        profile, decision=(next_start - last_end,)
    )
    # nothing finished: the profile's SYNC stays
    assert measured_profile(profile, StudyRecord(), spec) is profile
    # `hpctune status` shows the latencies the plan in force was made with, marking the
    # study's
    replanned = {**plan_record(result, measured, "r", record["stage_ends"]), "time": 9.5}
    status = plan_status(
        replanned,
        [(0, 0.0), (1, 4.0), (2, 9.5)],
        plans=2,
        started=0.0,
        now=9.5,
        held_seconds=20.0,
        used_seconds=15.0,
        launched={**record, "time": 0.0},
    )
    sync = next_start - last_end
    assert status.latencies == {"SCALE": 0.0, "INIT": 0.0, "gap": 0.0, "SYNC": sync}
    assert status.measured == ("SYNC",)
    assert status.to_dict()["latencies_measured"] == ["SYNC"]
    line = f"  latencies planned with: SCALE 0 s, INIT 0 s, gap 0 s, SYNC {sync:.3g} s*"
    assert f"{line} (* measured in the study)" in format_plan_status(status)


def test_the_stages_of_a_study_with_a_plan_are_its_plans() -> None:
    spec = ExperimentSpec.successive_halving(4, [1, 2], 2)
    profile = Profile.scaling(1.0, {})
    first = plan_elastic(spec, profile, 60.0, CostModel(), options=PlanOptions(samples=2))
    record = StudyRecord(spec={"not": "a study spec"})
    assert study_stages(record) is None
    record.elastic_plans.append(plan_record(first, profile, "r"))
    assert study_stages(record) == spec


def test_a_re_plan_takes_the_gaps_within_a_stage_not_across_a_rung() -> None:
    """A worker's gap across a rung holds the wait for the rung's last trial and the decision
    (the SYNC, measured apart): only the gaps between two segments of one stage are taken."""
    spec = ExperimentSpec.successive_halving(4, [1, 2], 2)  # 4 then 2 trials
    profile = Profile.scaling(1.0, {}, segment_gap=(9.0,))
    first_end, second_start, second_end, other_end, promoted = 2.0, 2.4, 4.0, 7.0, 7.5
    record = StudyRecord()
    for i, (trial, worker, start, started, ended) in enumerate(
        [
            (0, "a", 0, 1.0, first_end),
            (1, "a", 0, second_start, second_end),  # a's second trial of stage 0: a gap
            (2, "b", 0, 1.0, 5.0),
            (3, "b", 0, 5.3, other_end),
            (1, "a", 1, promoted, None),  # a again, across the rung: not a gap
        ]
    ):
        record.segments[i] = SegmentRecord(
            segment_id=i,
            trial_id=trial,
            worker_id=worker,
            start_step=start,
            until_step=start + 1,
            checkpoint_row=None,
            assigned_time=started - 0.1,
            started_time=started,
            ended_time=ended,
        )
    measured = measured_profile(profile, record, spec)
    assert measured.segment_gap == pytest.approx((second_start - first_end, 5.3 - 5.0))
    assert measured.decision == pytest.approx((promoted - other_end,))
