"""`hpctune resume STUDY_DIR --deadline DURATION` (issue 18): the new deadline is journaled
(``deadline_changed``) and the controller re-plans the stages not yet finished to it (an
``elastic_plan`` with the reason); a restarted controller keeps that plan; refusals change
nothing.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.controller.launch import create_study
from hpctune.elastic.experiment import ExperimentSpec
from hpctune.elastic.follow import (
    PLAN_REASON_LAUNCH,
    TrialProgress,
    deadline_reason,
    load_study_profile,
    plan_record,
    plan_study,
    replan,
    stage_steps_left,
)
from hpctune.spec import load_spec
from hpctune.study.formatting import format_duration
from hpctune.study.states import StudyState
from hpctune.wire.inbox import check_deadline, send_command
from hpctune.wire.layout import StudyPaths
from tests.conftest import run_hpctune
from tests.elastic.test_follow import PROFILE, _busy_per_stage, _study

HOUR = 3600.0


def _files(root: Path) -> dict[str, bytes]:
    """Every file of a study directory and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _inbox_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "inbox").glob("*.json"))


# -- the pure part -------------------------------------------------------------------------------


def test_stage_steps_left_counts_the_running_stage(tmp_path: Path) -> None:
    # SHA, eta 2, 8 trials to steps 1, 2, 4: stages 0-1 (8 trials), 1-2 (4), 2-4 (2)
    spec = plan_study(load_spec(_study(tmp_path))).spec
    assert [(s.trials, s.start_step, s.end_step) for s in spec.stages] == [
        (8, 0, 1),
        (4, 1, 2),
        (2, 2, 4),
    ]
    assert stage_steps_left(spec, 0, {}) == (1,) * 8
    trials = {i: TrialProgress(1, None, False) for i in range(8)}
    trials[0] = TrialProgress(2, None, False)  # trained stage 1 to its end
    trials[1] = TrialProgress(1, None, True)  # ended at the rung: not in stage 1
    assert stage_steps_left(spec, 1, trials) == (1, 1, 1, 0)
    trials[0] = TrialProgress(3, 2, False)  # half-way through stage 2
    trials[2] = TrialProgress(4, None, True)
    assert stage_steps_left(spec, 2, trials) == (1, 0)


def test_replan_to_a_new_deadline_from_a_running_stage(tmp_path: Path) -> None:
    spec = load_spec(_study(tmp_path))
    profile = load_study_profile(spec)
    start = plan_study(spec, profile=profile)
    record = plan_record(start, profile, PLAN_REASON_LAUNCH)
    left = (1, 1, 0, 0, 0, 0, 0, 0)  # stage 0, two trials still to train
    tight, _ = replan(record, 0, elapsed=4.0, spent=0.001, steps_left=left)
    loose, profile = replan(record, 0, elapsed=4.0, spent=0.001, steps_left=left, deadline=HOUR)
    assert tight.deadline == start.deadline == 8.0
    assert loose.deadline == HOUR
    assert loose.feasible
    assert loose.progress is not None
    assert loose.progress.steps_left == left
    assert loose.progress.elapsed == 4.0
    assert loose.plan.allocation.shapes[0] == start.plan.allocation.shapes[0]  # it runs so
    # an hour allows the cheapest plan: never dearer than the one for 8 s
    assert loose.plan.prediction.cost.mean <= tight.plan.prediction.cost.mean
    assert [s.workers for s in loose.plan.allocation.shapes[1:]] != [
        s.workers for s in start.plan.allocation.shapes[1:]
    ]
    data = plan_record(loose, profile, deadline_reason(HOUR), record["stage_ends"])
    assert data["reason"] == "deadline changed to 1h00m00s at resume"
    assert data["plan"]["deadline_s"] == HOUR
    assert data["stage_ends"][0] > 4.0  # stage 0 is still running: predicted again


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), True, "3h", None])
def test_the_inbox_refuses_a_bad_deadline(value: object) -> None:
    from hpctune.journal.state import StudyRecord

    record = StudyRecord()
    assert "'deadline'" in check_deadline({"command": "deadline", "deadline": value}, record)
    assert check_deadline({"command": "deadline", "deadline": HOUR, "source": "x"}, record) == ""


# -- resume --deadline ---------------------------------------------------------------------------


def test_resume_deadline_replans_and_a_restarted_controller_keeps_the_plan(
    tmp_path: Path, cleanup_studies: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")  # no re-plan but the deadline's
    spec = load_spec(_study(tmp_path))
    profile = load_study_profile(spec)
    launched = plan_record(plan_study(spec, profile=profile), profile, PLAN_REASON_LAUNCH)
    paths = create_study(spec, launched)
    cleanup_studies.append(paths.root)
    # a stop read in the same iteration, after the deadline (inbox files are read in name
    # order): the controller journals the deadline and the plan, then stops
    stop = send_command(paths.inbox, {"command": "stop"})
    stop.rename(paths.inbox / "9999999999.000000-stop.json")
    first = run_hpctune("resume", str(paths.root), "--local", "--deadline", "1h")
    assert "deadline: 8s -> 1h00m00s from the study's start" in first.stdout, first.stderr

    record = open_study(paths.root).record
    assert record.state is StudyState.STOPPED, record.reason
    assert record.spec["resources"]["deadline"] == HOUR
    assert [(c["deadline"], c["previous"], c["source"]) for c in record.deadline_changes] == [
        (HOUR, 8.0, "--deadline 1h")
    ]
    plans = record.elastic_plans
    assert len(plans) == 2
    assert plans[0]["reason"] == PLAN_REASON_LAUNCH
    assert plans[1]["reason"] == "deadline changed to 1h00m00s at resume"
    assert plans[1]["plan"]["deadline_s"] == HOUR
    assert plans[1]["plan"]["progress"]["stage"] == 0
    assert plans[1]["plan"]["progress"]["steps_left"] == [1] * 8  # nothing trained yet
    replanned = plans[1]
    workers = [shape[1] for shape in replanned["plan"]["plan"]["allocation"]["shapes"]]
    assert (
        workers[1:] != [shape[1] for shape in plans[0]["plan"]["plan"]["allocation"]["shapes"]][1:]
    )
    assert not _inbox_files(paths.root)

    again = run_hpctune("resume", str(paths.root), "--local")
    assert again.returncode == 0, again.stdout + again.stderr
    study = open_study(paths.root)
    record = study.record
    assert record.state is StudyState.FINISHED
    assert record.controller_starts == 2
    assert len(record.elastic_plans) == 2  # the restarted controller planned nothing
    assert record.elastic_plan == replanned
    assert len(record.deadline_changes) == 1
    experiment = ExperimentSpec.from_dict(replanned["plan"]["spec"])
    busy = _busy_per_stage(record, experiment)
    assert all(b <= w for b, w in zip(busy, workers, strict=True)), (busy, workers)

    status = study.elastic_plan()
    assert status is not None
    assert status.result.deadline == HOUR
    assert status.reason == "deadline changed to 1h00m00s at resume"
    assert status.plans == 2
    text = run_hpctune("status", str(paths.root), check=True).stdout
    assert "deadline 1h00m00s, re-planned" in text
    assert "deadline changed to 1h00m00s at resume" in text


def test_resume_deadline_plans_a_study_launched_without_one(
    tmp_path: Path, cleanup_studies: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")
    paths = create_study(load_spec(_study(tmp_path, deadline=None, resources={"profile": None})))
    cleanup_studies.append(paths.root)
    (paths.root / "profile.json").write_text(json.dumps(PROFILE))  # the study's own
    # a deadline counts from the study's creation: half a minute more than has passed (a
    # loaded machine may take seconds to start the CLI), so that it cannot have passed at resume
    created = open_study(paths.root).record.created_time
    seconds = float(math.ceil(time.time() - created) + 30)
    text = format_duration(seconds)
    done = run_hpctune("resume", str(paths.root), "--local", "--deadline", f"{seconds:.0f}s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"deadline: none -> {text}" in done.stdout

    study = open_study(paths.root)
    record = study.record
    assert record.state is StudyState.FINISHED
    assert record.spec["resources"]["deadline"] == seconds
    assert [c.get("previous") for c in record.deadline_changes] == [None]
    assert [p["reason"] for p in record.elastic_plans] == [f"deadline changed to {text} at resume"]
    plan = record.elastic_plans[0]
    assert plan["plan"]["deadline_s"] == seconds
    assert plan["plan"]["progress"]["stage"] == 0
    assert [stage for stage, _ in record.elastic_stages][-1] == 3  # it followed the plan
    workers = [shape[1] for shape in plan["plan"]["plan"]["allocation"]["shapes"]]
    busy = _busy_per_stage(record, ExperimentSpec.from_dict(plan["plan"]["spec"]))
    assert all(b <= w for b, w in zip(busy, workers, strict=True)), (busy, workers)
    status = study.elastic_plan()
    assert status is not None
    assert status.result.deadline == seconds
    data = json.loads(run_hpctune("status", str(paths.root), "--json").stdout)
    assert data["elastic"]["reason"] == f"deadline changed to {text} at resume"


def _refused(paths: StudyPaths, deadline: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run `resume --deadline` in this process; check it exits 2 and changes nothing."""
    before = _files(paths.root)
    assert main(["resume", str(paths.root), "--local", "--deadline", deadline]) == 2
    assert _files(paths.root) == before  # no inbox command, no journal record
    err = capsys.readouterr().err
    assert "--deadline" in err
    return err


def test_resume_refuses_a_deadline_that_is_not_a_duration(
    tmp_path: Path, cleanup_studies: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    paths = create_study(load_spec(_study(tmp_path)))
    cleanup_studies.append(paths.root)
    assert "such as 2h, 1h30m" in _refused(paths, "soon", capsys)
    assert "such as 2h, 1h30m" in _refused(paths, "-1h", capsys)


def test_resume_refuses_a_deadline_that_has_passed(
    tmp_path: Path,
    cleanup_studies: list[Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paths = create_study(load_spec(_study(tmp_path)))
    cleanup_studies.append(paths.root)
    created = open_study(paths.root).record.created_time
    monkeypatch.setattr(time, "time", lambda: created + 2 * HOUR)  # two hours after the start
    err = _refused(paths, "1h", capsys)
    assert "has passed already" in err
    assert "from the study's start, 2h00m00s ago" in err


@pytest.mark.parametrize(
    ("policy", "stages", "words"),
    [("median", False, "'median'"), ("sha", True, "stage tree")],
)
def test_resume_refuses_a_deadline_the_study_cannot_follow(
    tmp_path: Path,
    cleanup_studies: list[Path],
    capsys: pytest.CaptureFixture[str],
    policy: str,
    stages: bool,
    words: str,
) -> None:
    changes = {"policy": {"name": policy}} if policy != "sha" else {}
    path = _study(tmp_path, deadline=None, resources={"profile": None}, **changes)
    if stages:
        path.write_text(path.read_text() + "\n[stages]\nenabled = true\n")
    spec = load_spec(path)
    assert (spec.policy.name, spec.stages.enabled) == (policy, stages)
    paths = create_study(spec)
    cleanup_studies.append(paths.root)
    (paths.root / "profile.json").write_text(json.dumps(PROFILE))
    err = _refused(paths, "1h", capsys)
    assert words in err
    assert "resume it without --deadline" in err


def test_resume_refuses_a_deadline_without_a_profile(
    tmp_path: Path, cleanup_studies: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    paths = create_study(load_spec(_study(tmp_path, deadline=None, resources={"profile": None})))
    cleanup_studies.append(paths.root)
    err = _refused(paths, "1h", capsys)
    assert str(paths.root / "profile.json") in err
    assert "hpctune profile" in err


def test_a_deadline_read_while_stopping_is_planned_at_the_next_start(
    tmp_path: Path, cleanup_studies: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")
    spec = load_spec(_study(tmp_path))
    profile = load_study_profile(spec)
    paths = create_study(spec, plan_record(plan_study(spec, profile=profile), profile, "launch"))
    cleanup_studies.append(paths.root)
    stop = send_command(paths.inbox, {"command": "stop"})
    stop.rename(paths.inbox / "0000000000.000000-stop.json")  # read before the deadline
    run_hpctune("resume", str(paths.root), "--local", "--deadline", "1h")
    record = open_study(paths.root).record
    assert record.state is StudyState.STOPPED, record.reason
    assert record.spec["resources"]["deadline"] == HOUR  # journaled, not yet planned
    assert [p["reason"] for p in record.elastic_plans] == ["launch"]

    again = run_hpctune("resume", str(paths.root), "--local")
    assert again.returncode == 0, again.stdout + again.stderr
    record = open_study(paths.root).record
    assert record.state is StudyState.FINISHED
    reasons = [p["reason"] for p in record.elastic_plans]
    assert reasons == ["launch", "deadline changed to 1h00m00s at resume"]
    assert record.elastic_plans[1]["plan"]["deadline_s"] == HOUR
