"""A study with `[resources] deadline` follows its elastic plan (issue 18, items 5 and 6).

The spec field and its refusals; the stage tracker; the plan journaled and replayed; a local
study whose pool shrinks across rungs as the plan says (counted from the journal); a controller
SIGKILLed mid-plan that resumes the same plan.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.elastic.cost import CostModel
from hpctune.elastic.experiment import ExperimentSpec, PlanningError, Stage
from hpctune.elastic.follow import (
    PLAN_REASON_LAUNCH,
    StageTracker,
    TrialProgress,
    bracket_trials,
    current_stage,
    drift_reason,
    load_study_profile,
    measured_profile,
    plan_record,
    plan_study,
    replan,
    study_cost_model,
)
from hpctune.elastic.measured import study_decisions, study_latencies
from hpctune.elastic.planner import PlanResult
from hpctune.elastic.profile import Profile
from hpctune.elastic.report import format_plan
from hpctune.elastic.status import plan_status
from hpctune.errors import StudySpecError
from hpctune.journal.state import StudyRecord
from hpctune.spec import load_spec, with_deadline
from hpctune.study.states import StudyState
from tests.conftest import kill_workers, run_hpctune, start_hpctune, wait_for, write_study

TRAIN = """
import time


def train(ctx):
    state = ctx.load_checkpoint()
    total = state["total"] if state else 0.0
    for step in range(ctx.start_step + 1, ctx.until_step + 1):
        time.sleep(0.3)
        total += ctx.params["x"]
        result = ctx.report(step=step, score=total)
        ctx.save_checkpoint({"total": total})
        if result.should_stop:
            return
"""

# SHA, eta 2, 8 trials to steps 1, 2, 4: stages of 8, 4 and 2 trials. With this profile and an
# 8 s deadline the planner keeps 4, then 2, then 1 worker busy: fewer than each rung's trials,
# so the policy alone (slots = 4) would run 4, 4 and 2.
PROFILE = {
    "version": 1,
    "device": "cpu",
    "source": "tests/elastic/test_follow.py",
    "step_seconds": {"1": [0.3]},
    "segment_start": [0.3],
    "startup": [0.5],
    "queue_wait": {"1": [0.0]},
    "decision": [1.0],
    "checkpoint_save": [],
    "checkpoint_load": [],
}
PLANNED_WORKERS = [4, 2, 1]


def _study(folder: Path, *, deadline: Any = "8s", **changes: Any) -> Path:
    resources = {"slots": 4, "deadline": deadline, "profile": "profile.json"}
    resources.update(changes.pop("resources", {}))
    resources = {k: v for k, v in resources.items() if v is not None}
    spec = write_study(
        folder,
        train=TRAIN,
        space={"x": [0.3, 0.8, 0.45, 0.9, 0.2, 0.7, 0.5, 0.6]},
        policy=changes.pop("policy", {"name": "sha", "reduction_factor": 2, "bracket_size": 8}),
        resources=resources,
        max_steps=4,
        num_trials=8,
        **changes,
    )
    (folder / "profile.json").write_text(json.dumps(PROFILE))
    return spec


# -- the spec ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"deadline": "soon"}, "resources.deadline", "such as"),
        ({"deadline": -5}, "resources.deadline", "such as"),
        ({"deadline": True}, "resources.deadline", "such as"),
        ({"policy": {"name": "default"}}, "policy.name", "remove resources.deadline"),
        ({"policy": {"name": "median"}}, "policy.name", "'median'"),
        ({"resources": {"cpus_per_worker": 2}}, "resources.cpus_per_worker", "max_devices = 2"),
        ({"resources": {"gpus_per_worker": 2}}, "resources.gpus_per_worker", "max_devices = 2"),
        ({"resources": {"max_devices": 0}}, "resources.max_devices", ">= 1"),
        (
            {"resources": {"max_devices": 3, "node_devices": 2}},
            "resources.max_devices",
            "a multiple of it",
        ),
        ({"resources": {"slots": 0}}, "resources.slots", ">= 1"),
        ({"resources": {"profile": ""}}, "resources.profile", "non-empty"),
        ({"resources": {"budget": 1}}, "resources.budget", "valid keys"),
        ({"resources": {"price": 0}}, "resources.price", "a number > 0"),
        ({"resources": {"price": "2.5"}}, "resources.price", "a number > 0"),
        ({"resources": {"billing_weight": -1}}, "resources.billing_weight", '"partition"'),
        ({"resources": {"billing_weight": "site"}}, "resources.billing_weight", '"partition"'),
        ({"deadline": None, "resources": {"price": 2.5}}, "resources.price", "set resources."),
        (
            {"deadline": None, "resources": {"billing_weight": "partition"}},
            "resources.billing_weight",
            "set resources.deadline",
        ),
    ],
)
def test_spec_refuses_a_deadline_it_cannot_follow(
    tmp_path: Path, change: dict[str, Any], field: str, words: str
) -> None:
    change = dict(change)
    deadline = change.pop("deadline", "8s")
    path = _study(tmp_path, deadline=deadline, **change)
    with pytest.raises(StudySpecError) as caught:
        load_spec(path)
    assert caught.value.field == field
    assert caught.value.path == path
    assert words in str(caught.value)


def test_spec_reads_the_deadline_and_profile(tmp_path: Path) -> None:
    spec = load_spec(_study(tmp_path, deadline="1h30m"))
    assert spec.resources.deadline == 5400.0
    assert spec.resources.profile == tmp_path / "profile.json"
    again = type(spec).from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.resources == spec.resources
    assert load_spec(_study(tmp_path / "b", deadline=90)).resources.deadline == 90.0
    assert load_spec(_study(tmp_path / "c", deadline=None)).resources.deadline is None
    assert with_deadline(spec, "2h").resources.deadline == 7200.0
    with pytest.raises(StudySpecError, match=r"resources\.deadline"):
        with_deadline(spec, "later")


def test_a_priced_study_plans_in_money_and_its_plan_keeps_the_price(tmp_path: Path) -> None:
    """``[resources] price`` and ``billing_weight`` price the plan the controller follows: the
    same allocation (a constant factor changes no choice), its costs in money."""
    plain = load_spec(_study(tmp_path / "a", deadline="1h"))
    priced = load_spec(
        _study(tmp_path / "b", deadline="1h", resources={"price": 2.5, "billing_weight": 4})
    )
    assert (priced.resources.price, priced.resources.billing_weight) == (2.5, 4.0)
    again = type(priced).from_dict(json.loads(json.dumps(priced.to_dict())))
    assert again.resources == priced.resources
    assert study_cost_model(plain) == CostModel(device="CPU")
    model = study_cost_model(priced)
    assert (model.unit, model.billing_weight, model.price) == ("$", 4.0, 2.5)
    assert model.billing_source == "[resources] billing_weight"
    a, b = plan_study(plain, samples=8), plan_study(priced, samples=8)
    assert b.plan.allocation == a.plan.allocation
    assert b.plan.prediction.cost.mean == pytest.approx(10.0 * a.plan.prediction.cost.mean)
    assert PlanResult.from_dict(b.to_dict()).cost == model  # journaled with the plan
    assert format_plan(b).count("$") >= 2


def test_launch_refuses_a_deadline_without_a_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _study(tmp_path)
    (tmp_path / "profile.json").unlink()
    assert main(["launch", str(path), "--local"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "profile.json") in err
    assert "[resources] profile" in err
    assert "hpctune profile" in err
    assert not (tmp_path / "study").exists()  # nothing created


def test_launch_deadline_option_refuses_other_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _study(tmp_path, deadline=None, policy={"name": "median"})
    assert main(["launch", str(path), "--local", "--deadline", "2h"]) == 2
    err = capsys.readouterr().err
    assert "policy.name" in err
    assert "'median'" in err
    assert not (tmp_path / "study").exists()


# -- the stage tracker ---------------------------------------------------------------------------


def _progress(step: int, running_from: int | None = None, ended: bool = False) -> TrialProgress:
    return TrialProgress(step, running_from, ended)


def test_stages_follow_the_trials_steps() -> None:
    spec = ExperimentSpec.successive_halving(4, [1, 2, 4], 2)
    two = ExperimentSpec(
        (*spec.stages, Stage(2, 0, 2, bracket=1), Stage(1, 2, 4, bracket=1)),
    )
    assert bracket_trials(two) == {0: range(0, 4), 1: range(4, 6)}
    assert current_stage(spec, {}) == 0
    trials = {i: _progress(0, 0) for i in range(4)}
    assert current_stage(spec, trials) == 0
    trials = {i: _progress(1, 0) for i in range(4)}  # reported step 1, segments not ended
    assert current_stage(spec, trials) == 0
    trials = {0: _progress(1), 1: _progress(1), 2: _progress(1), 3: _progress(1, 0)}
    assert current_stage(spec, trials) == 0
    trials[3] = _progress(1)  # at the rung, its segment ended
    assert current_stage(spec, trials) == 1
    trials = {0: _progress(1, 1), 1: _progress(1, 1), 2: _progress(1, ended=True)}
    trials[3] = _progress(1, ended=True)  # promoted ones run from the rung; others dropped
    assert current_stage(spec, trials) == 1
    trials = {0: _progress(2), 1: _progress(2, ended=True), 2: trials[2], 3: trials[3]}
    assert current_stage(spec, trials) == 2
    trials[0] = _progress(4, ended=True)
    assert current_stage(spec, trials) == 3
    # never backwards: a trial resumed from an earlier checkpoint keeps the stage
    assert current_stage(spec, {i: _progress(0, 0) for i in range(4)}, since=2) == 2


def test_the_stage_tracker_asks_for_few_trials_per_call() -> None:
    """Two brackets of 4 trials (stages 0-2 and 3-5): the tracker gives current_stage's answer
    and asks for the progress of the current stage's trials only, each once while it is past
    the stage's end, until the stage is left (then its bracket once more)."""
    one = ExperimentSpec.successive_halving(4, [1, 2, 4], 2).stages
    spec = ExperimentSpec((*one, *(Stage(t.trials, t.start_step, t.end_step, 1) for t in one)))
    trials: dict[int, TrialProgress] = {i: _progress(0, 0) for i in range(8)}
    asked: list[int] = []

    def progress(trial_id: int) -> TrialProgress | None:
        asked.append(trial_id)
        return trials.get(trial_id)

    tracker = StageTracker(spec)
    for _ in range(5):  # nothing changes: one trial a call
        assert tracker.advance(progress) == 0
    assert asked == [0] * 5
    asked.clear()
    for i in range(3):
        trials[i] = _progress(1)
    assert tracker.advance(progress) == 0
    assert asked == [0, 1, 2, 3]  # 0 still past, so on to the first not past
    asked.clear()
    assert tracker.advance(progress) == 0
    assert asked == [3]
    trials[3] = _progress(1)
    asked.clear()
    assert tracker.advance(progress) == current_stage(spec, trials) == 1
    assert asked == [3, 0, 1, 2, 3, 0]  # the whole bracket once more, then stage 1 from 0
    assert set(asked) <= set(range(4))  # never the other bracket's trials
    for i in range(4):  # bracket 0 ends; bracket 1 has not started: its trials do not exist
        trials[i] = _progress(4, ended=True)
    for i in range(4, 8):
        del trials[i]
    assert tracker.advance(progress) == current_stage(spec, trials) == 3
    trials[4] = _progress(0, 0)
    asked.clear()
    assert tracker.advance(progress) == 3
    assert asked == [4]
    for i in range(4, 8):
        trials[i] = _progress(4, ended=True)
    assert tracker.advance(progress) == current_stage(spec, trials) == 6
    trials[0] = _progress(0, 0)  # a trial resumed from an earlier checkpoint: never back
    assert tracker.advance(progress) == 6
    assert StageTracker(spec, since=2).advance(lambda _: None) == 2


def test_plan_status_sets_predicted_against_measured(tmp_path: Path) -> None:
    spec = load_spec(_study(tmp_path))
    result = plan_study(spec)
    record = {
        "plan": result.to_dict(),
        "stage_ends": [10.0, 20.0, 30.0],
        "reason": "r",
        "time": 100.0,
    }
    status = plan_status(
        record,
        [(0, 100.0), (1, 112.0), (2, 125.0)],
        plans=1,
        started=100.0,
        now=130.0,
        held_seconds=3600.0,
        used_seconds=1800.0,
    )
    assert [s.workers for s in status.stages] == PLANNED_WORKERS
    assert [s.measured_end for s in status.stages] == [12.0, 25.0, None]
    assert [s.predicted_end for s in status.stages] == [10.0, 20.0, 30.0]
    assert status.stage == 2
    assert status.elapsed == 30.0
    assert status.spent == pytest.approx(1.0)  # one CPU-hour held
    assert status.to_dict()["stages"][1]["trials"] == 4


def test_drift_and_replan(tmp_path: Path) -> None:
    spec = load_spec(_study(tmp_path))
    result = plan_study(spec)
    record = plan_record(result, load_study_profile(spec), "r")
    predicted = record["stage_ends"][0]
    assert drift_reason(record, 0, predicted * 1.1, 0.15) == ""
    reason = drift_reason(record, 0, predicted * 2, 0.15)
    assert reason.startswith("stage 0 ended")
    assert "100 % later" in reason

    new, _ = replan(record, 0, elapsed=100.0, spent=0.5)
    assert new.progress is not None
    assert new.progress.stage == 0
    assert new.plan.allocation.shapes[0] == result.plan.allocation.shapes[0]  # it ran so
    assert new.plan.prediction.time.mean > 100.0  # from the elapsed time on
    assert new.plan.prediction.cost.mean > 0.5
    again = plan_record(new, load_study_profile(spec), reason, record["stage_ends"])
    assert again["stage_ends"][0] == predicted  # the stage that ran keeps its prediction
    assert again["stage_ends"][1] > 100.0
    assert not new.feasible  # 100 s in, an 8 s deadline cannot be met: the fastest plan
    # after stage 1 the fastest plan is static (a pool of 2): the stages that ran
    # show the workers and pool they ran with
    later, profile = replan(record, 1, elapsed=100.0, spent=0.5)
    assert later.plan.allocation.static_pool == 2
    status = plan_status(
        {**plan_record(later, profile, reason, record["stage_ends"]), "time": 100.0},
        [(0, 0.0), (1, 50.0), (2, 100.0)],
        plans=2,
        started=0.0,
        now=100.0,
        held_seconds=1800.0,
        used_seconds=900.0,
    )
    assert [(s.workers, s.pool) for s in status.stages[:2]] == [(4, 4), (2, 2)]
    assert status.planned_at == 100.0
    assert status.plans == 2


def test_plan_study_refuses_without_a_profile(tmp_path: Path) -> None:
    spec = load_spec(_study(tmp_path, resources={"profile": "missing.json"}))
    with pytest.raises(PlanningError, match=r"missing\.json"):
        plan_study(spec)


# -- the controller ------------------------------------------------------------------------------


def _busy_per_stage(record: StudyRecord, spec: ExperimentSpec) -> list[int]:
    """Per stage, the most segments of its trials that ran at once (from the journal)."""
    out = []
    for stage in spec.stages:
        spans = [
            (seg.assigned_time, seg.ended_time or float("inf"))
            for seg in record.segments.values()
            if seg.until_step == stage.end_step and stage.start_step <= seg.start_step
        ]
        out.append(max((sum(a <= t < b for a, b in spans) for t, _ in spans), default=0))
    return out


def _stages_entered(record: StudyRecord) -> list[int]:
    return [stage for stage, _ in record.elastic_stages]


def test_local_study_follows_the_plan_and_shrinks_its_pool(
    tmp_path: Path, cleanup_studies: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")  # this machine is slower than PROFILE
    path = _study(tmp_path)
    cleanup_studies.append(tmp_path / "study")
    done = run_hpctune("launch", str(path), "--local", check=True)
    assert "workers per stage 4, 2, 1" in done.stdout

    study = open_study(tmp_path / "study")
    record = study.record
    assert record.state is StudyState.FINISHED
    assert len(record.elastic_plans) == 1
    # launch's plan, journaled with the study's creation: the controller did not plan again
    assert record.elastic_plans[0]["time"] == record.created_time
    assert record.started_time is not None
    assert record.elastic_plans[0]["time"] < record.started_time
    planned = plan_study(load_spec(path)).to_dict()  # the plan is a pure function of its inputs
    assert record.elastic_plan is not None
    assert record.elastic_plan["plan"] == planned
    spec = ExperimentSpec.from_dict(planned["spec"])
    assert [shape[1] for shape in planned["plan"]["allocation"]["shapes"]] == PLANNED_WORKERS
    assert _stages_entered(record) == [0, 1, 2, 3]
    assert _busy_per_stage(record, spec) == PLANNED_WORKERS
    assert len(record.workers) == 4  # never more than the plan's largest pool (slots is 4)

    status = study.elastic_plan()
    assert status is not None
    assert [s.workers for s in status.stages] == PLANNED_WORKERS
    assert all(s.measured_end is not None for s in status.stages)
    assert status.spent > 0
    assert status.stage == 3
    text = run_hpctune("status", str(tmp_path / "study"), check=True).stdout
    assert "elastic plan (elastic, meets the deadline): deadline 8s" in text
    data = json.loads(run_hpctune("status", str(tmp_path / "study"), "--json").stdout)
    assert [s["workers"] for s in data["elastic"]["stages"]] == PLANNED_WORKERS


def _stage_reached(study_dir: Path, stage: int) -> bool:
    try:
        stages = open_study(study_dir).record.elastic_stages
    except Exception:  # the journal is being created
        return False
    return bool(stages) and stages[-1][0] >= stage


def test_controller_killed_mid_plan_resumes_the_same_plan(
    tmp_path: Path, cleanup_studies: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")  # no re-plan: the plan must stay
    path = _study(tmp_path)
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    process = start_hpctune("launch", str(path), "--local")
    try:
        assert wait_for(lambda: _stage_reached(study_dir, 1), timeout=60, interval=0.2)
        before = open_study(study_dir).record
        assert process.poll() is None, "the study ended before the controller could be killed"
        os.kill(process.pid, signal.SIGKILL)  # the controller only; its workers go on
        process.wait()
        time.sleep(0.5)
        resumed = run_hpctune("resume", str(study_dir), "--local", check=True)
    finally:
        if process.poll() is None:
            process.kill()
        kill_workers(study_dir)
    assert resumed.returncode == 0

    record = open_study(study_dir).record
    assert record.state is StudyState.FINISHED
    assert record.controller_starts == 2
    assert len(record.elastic_plans) == 1  # the same plan, not a re-plan
    assert record.elastic_plan == before.elastic_plan
    stages = _stages_entered(record)
    assert stages == sorted(set(stages))
    assert stages[-1] == 3
    spec = ExperimentSpec.from_dict(record.elastic_plans[0]["plan"]["spec"])
    busy = _busy_per_stage(record, spec)
    assert all(b <= w for b, w in zip(busy, PLANNED_WORKERS, strict=True)), busy
    assert busy[0] == PLANNED_WORKERS[0]
    assert len(record.workers) <= 4


def test_a_late_stage_is_replanned_and_the_new_plan_followed(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    path = _study(tmp_path, deadline="20s")
    fast = dict(PROFILE, step_seconds={"1": [0.01]}, segment_start=[0.01], startup=[0.01])
    (tmp_path / "profile.json").write_text(json.dumps(fast))  # 30x too optimistic
    cleanup_studies.append(tmp_path / "study")
    run_hpctune("launch", str(path), "--local", check=True)

    record = open_study(tmp_path / "study").record
    assert record.state is StudyState.FINISHED
    plans = record.elastic_plans
    assert len(plans) >= 2
    assert plans[0]["reason"] == "planned at the study's start"
    assert plans[1]["reason"].startswith("stage 0 ended")
    assert plans[1]["plan"]["progress"]["stage"] == 0
    assert plans[1]["stage_ends"][0] == plans[0]["stage_ends"][0]
    assert not any(w.code == "elastic-replan" for w in record.warnings)
    # the re-plan took the latencies the study measured, not the profile's 0.01 s
    assert "latencies measured in the study" in plans[1]["profile"]
    assert min(plans[1]["profile_data"]["startup"]) > 0.01
    assert min(plans[1]["profile_data"]["segment_gap"]) > 0.0
    spec = ExperimentSpec.from_dict(plans[0]["plan"]["spec"])
    measured = measured_profile(Profile.from_dict(fast), record, spec)
    assert measured.startup == study_latencies(record)[1]
    assert measured.step_seconds == Profile.from_dict(fast).step_seconds
    # the rung decisions of stages 0 and 1 (each followed by a stage of the bracket)
    assert measured.decision == study_decisions(record, spec)
    assert len(measured.decision) == 2
    # each stage ran with at most the workers of the plan in force (re-plans come only as a
    # stage is entered: the last one before the next stage was entered)
    busy = _busy_per_stage(record, spec)
    stages = record.elastic_stages
    for (stage, _), (_, left) in itertools.pairwise(stages):
        in_force = [p for p in plans if p["time"] < left][-1]
        workers = in_force["plan"]["plan"]["allocation"]["shapes"][stage][1]
        assert busy[stage] <= workers, (stage, busy, workers)
    status = open_study(tmp_path / "study").elastic_plan()
    assert status is not None
    assert status.plans == len(plans)


def test_the_controller_follows_the_plan_the_study_was_created_with(
    tmp_path: Path, cleanup_studies: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan journaled with the study (as `hpctune launch` does) is followed as it is: here
    2, 2 and 1 workers where planning again would give 4, 2 and 1; the controller plans
    nothing, even with the profile gone."""
    from hpctune.controller.launch import create_study

    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")
    spec = load_spec(_study(tmp_path))
    result = plan_study(spec)
    assert [s.workers for s in result.plan.allocation.shapes] == PLANNED_WORKERS
    shapes = tuple(
        dataclasses.replace(s, workers=w)
        for s, w in zip(result.plan.allocation.shapes, [2, 2, 1], strict=True)
    )
    allocation = dataclasses.replace(result.plan.allocation, shapes=shapes)
    given = dataclasses.replace(
        result, plan=dataclasses.replace(result.plan, allocation=allocation)
    )
    record = plan_record(given, load_study_profile(spec), PLAN_REASON_LAUNCH)
    paths = create_study(spec, record)
    cleanup_studies.append(paths.root)
    (tmp_path / "profile.json").unlink()  # planning again would fail the study
    run_hpctune("resume", str(paths.root), "--local", check=True)

    study = open_study(paths.root).record
    assert study.state is StudyState.FINISHED
    assert len(study.elastic_plans) == 1
    assert study.elastic_plans[0]["plan"] == given.to_dict()
    experiment = ExperimentSpec.from_dict(given.to_dict()["spec"])
    assert _busy_per_stage(study, experiment) == [2, 2, 1]
    assert len(study.workers) == 2


def test_a_study_whose_profile_went_missing_fails_with_the_reason(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    from hpctune.controller.launch import create_study

    path = _study(tmp_path)
    paths = create_study(load_spec(path))
    cleanup_studies.append(paths.root)
    (tmp_path / "profile.json").unlink()  # after the launch's check, before the controller
    result = run_hpctune("resume", str(paths.root), "--local")
    assert result.returncode == 1, result.stdout + result.stderr
    record = open_study(paths.root).record
    assert record.state is StudyState.FAILED
    assert "cannot plan the deadline" in record.reason
    assert str(tmp_path / "profile.json") in record.reason
    assert not record.elastic_plans
    assert not record.trials  # nothing ran
