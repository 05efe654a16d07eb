"""Following an elastic plan in a running study: the plan of a study spec, the stage a study
is in, and what was predicted against what was measured (issue 18, items 5 and 6).

Everything here is pure but :func:`load_study_profile` and :func:`plan_study` (they read the
profile). The controller
(:mod:`hpctune.core.elastic`) journals the plan (an ``elastic_plan`` record, again at each
re-plan: :func:`drift_reason`, :func:`replan`) and each stage it moves to (``elastic_stage``);
``hpctune status`` reads them (:mod:`hpctune.elastic.status`).

A study follows a plan by the number of workers it keeps busy in each stage; every worker holds
one device and runs one trial at a time (the planner is asked for one device per trial: the
controller does not resize trials between rungs).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpctune.elastic.allocation import StageShape
from hpctune.elastic.cost import CostModel
from hpctune.elastic.dag import finish_times, to_dag
from hpctune.elastic.experiment import (
    ExperimentSpec,
    PlanningError,
    Progress,
    bracket_trials,
    experiment_from_study,
)
from hpctune.elastic.measured import segment_stages, study_decisions, study_latencies
from hpctune.elastic.planner import PlanOptions, PlanResult, plan_elastic
from hpctune.elastic.predict import mean_latencies
from hpctune.elastic.profile import PROFILE_FILE, Profile
from hpctune.spec import BILLING_FROM_PARTITION
from hpctune.study.formatting import format_duration

PLAN_REASON_LAUNCH = "planned at the study's start"


def profile_path(spec: Any) -> Path:
    """The profile a study with a deadline plans from: ``[resources] profile``, else
    ``profile.json`` in the study directory (where ``hpctune profile study.toml`` writes it)."""
    given = spec.resources.profile
    return Path(given) if given is not None else Path(spec.directory) / PROFILE_FILE


def load_study_profile(spec: Any) -> Profile:
    """The profile of a study with a deadline.

    Raises:
        PlanningError: It is missing or unreadable (the message names the file, the field and
            the fix).
    """
    path = profile_path(spec)
    field = (
        "[resources] profile"
        if spec.resources.profile is not None
        else "no [resources] profile, so the study directory's"
    )
    if not path.exists():
        raise PlanningError(
            f"{spec.source}: [resources] deadline needs the workload's profile, but {path} "
            f"({field} profile.json) does not exist; measure it with `hpctune profile "
            f"{spec.source}` before launching, or name one with [resources] profile = "
            '"profile.json" (made by `hpctune profile --steps 1=TRACE --out profile.json`)'
        )
    try:
        return Profile.load(path)
    except PlanningError as exc:
        raise PlanningError(f"{spec.source}: [resources] deadline: {exc}") from None


#: Billed units per device-hour of a study's workers on a partition (``None``: theirs), and
#: where the figure came from: its backend's (:meth:`hpctune.backends.Backend.billing_weight`).
Billing = Callable[[Any, str | None, bool], tuple[float, str]]


def plan_study(
    spec: Any,
    *,
    profile: Profile | None = None,
    samples: int = 64,
    billing: Billing | None = None,
) -> PlanResult:
    """The plan of a study spec with ``[resources] deadline``: its rungs as stages, its
    profile, up to ``[resources] max_devices`` devices per trial (no more than the profile
    measured; above ``node_devices`` in whole nodes), at most ``slots`` devices held at once;
    the cost in device-hours held, billed and priced as ``[resources] billing_weight`` and
    ``price`` say. ``profile``: default :func:`load_study_profile`; ``billing``: the backend's
    billing weights (``billing_weight = "partition"``).

    Raises:
        PlanningError: No deadline, a policy the planner does not know, no profile, or a
            billing weight to read from a partition the backend does not know.
    """
    deadline = spec.resources.deadline
    if deadline is None:
        raise PlanningError(f"{spec.source}: [resources] deadline is not set; nothing to plan")
    experiment = experiment_from_study(spec)
    profile = profile or load_study_profile(spec)
    cost = study_cost_model(spec, billing)
    resources = spec.resources
    options = PlanOptions(
        samples=samples,
        max_pool=resources.slots,
        max_devices=min(resources.max_devices, profile.max_devices),
        node_devices=resources.node_devices,
    )
    return plan_elastic(experiment, profile, deadline, cost, options=options)


def study_cost_model(spec: Any, billing: Billing | None = None) -> CostModel:
    """The cost model of a study's plan: device-hours held, times ``[resources]
    billing_weight`` (a number, or ``"partition"``: the workers' partition's weight as its
    backend's ``billing`` says, on Slurm its ``TRESBillingWeights``), times ``price``.

    Raises:
        PlanningError: The backend does not know the partition (or cannot be asked).
    """
    resources = spec.resources
    gpu = resources.gpus_per_worker > 0
    weight, source = resources.billing_weight, ""
    if weight == BILLING_FROM_PARTITION:
        if billing is None:
            raise PlanningError(
                f'{spec.source}: [resources] billing_weight = "partition" needs the backend '
                "that bills the partition (Slurm); give a number instead"
            )
        weight, source = billing(spec, None, gpu)
    elif weight is not None:
        source = "[resources] billing_weight"
    return CostModel(
        billing_weight=1.0 if weight is None else float(weight),
        price=resources.price,
        device="GPU" if gpu else "CPU",
        billing_source=source,
    )


def predicted_stage_ends(
    result: PlanResult, profile: Profile, before: Sequence[float] = ()
) -> list[float]:
    """Seconds from the study's start at which each stage of the plan is predicted to end
    (judged: its SYNC), at the profile's mean latencies; the stages a re-plan starts after (its
    progress' stage when its trials are at the rung, and those before) keep the ends ``before``
    gave them."""
    dag = to_dag(result.spec, result.plan.allocation, result.progress)
    finish = finish_times(dag, mean_latencies(dag, profile)[None, :])[0]
    elapsed = result.progress.elapsed if result.progress is not None else 0.0
    ends = [0.0] * result.spec.num_stages()
    for v, node in enumerate(dag.nodes):
        ends[node.stage] = max(ends[node.stage], float(finish[v]) + elapsed)
    for i in range(min(replanned_after(result), len(before))):
        ends[i] = float(before[i])
    return ends


def replanned_after(result: PlanResult) -> int:
    """How many stages ran before ``result`` was planned: those before its progress' stage,
    and that one too when its trials are at the rung (0 for a plan made at the start)."""
    progress = result.progress
    if progress is None:
        return 0
    return progress.stage + (0 if any(progress.steps_left) else 1)


def plan_record(
    result: PlanResult, profile: Profile, reason: str, before: Sequence[float] = ()
) -> dict[str, Any]:
    """The data of an ``elastic_plan`` journal record (with the profile, so that a re-plan
    needs no file)."""
    return {
        "reason": reason,
        "plan": result.to_dict(),
        "stage_ends": predicted_stage_ends(result, profile, before),
        "profile": profile.source,
        "profile_data": profile.to_dict(),
    }


#: What the source of a re-plan's profile ends with when the study measured its latencies.
MEASURED_IN_STUDY = "latencies measured in the study"

#: A stage that ends later than predicted by more than this share of the predicted time
#: (from the study's start) makes the controller re-plan (``HPCTUNE_REPLAN_DRIFT``; ``inf``:
#: never).
REPLAN_DRIFT = 0.15


def drift_reason(record: Mapping[str, Any], stage: int, measured: float, drift: float) -> str:
    """Why the plan of ``record`` (an ``elastic_plan`` record's data) must be made again now
    that ``stage`` ended ``measured`` seconds after the study's start, or ``""``."""
    predicted = float(record["stage_ends"][stage])
    if not measured > predicted * (1.0 + drift):
        return ""
    late = 100.0 * (measured / predicted - 1.0) if predicted > 0 else math.inf
    return (
        f"stage {stage} ended {measured:.1f} s after the start, {late:.0f} % later than the "
        f"{predicted:.1f} s predicted (more than {100 * drift:.0f} %)"
    )


def measured_profile(profile: Profile, study: Any, spec: ExperimentSpec) -> Profile:
    """``profile`` with the latencies the running study measured (a
    :class:`~hpctune.journal.state.StudyRecord` whose stages are ``spec``) in place of the
    profile's, where it has any: SCALE and INIT of its workers
    (:func:`~hpctune.profiler.from_traces.study_latencies`; INIT as its workers started, together
    as they were, so the profile's start-ups with workers together are dropped), the gaps
    between two segments of one worker in one stage (the previous one's end to the next one's
    start: the controller seeing the end, the assignment; one across a rung also holds the
    wait for the rung's last trial and its decision, which the plan's DAG has apart), and
    SYNC: for each stage it finished, its last segment end to the next stage's first segment
    start (:func:`~hpctune.profiler.from_traces.study_decisions`). The seconds per step, the
    warm-up and the crowding stay the profile's."""
    queue, startup = study_latencies(study)
    stages = segment_stages(study, spec)
    decisions = study_decisions(study, spec, stages)
    gaps: list[float] = []
    last: dict[str, tuple[float, int | None]] = {}  # a worker's last segment: end and stage
    for seg in sorted(study.segments.values(), key=lambda s: s.assigned_time):
        stage = stages[seg.segment_id]
        previous = last.get(seg.worker_id)
        if previous is not None and previous[1] == stage and seg.started_time is not None:
            gaps.append(max(seg.started_time - previous[0], 0.0))
        if seg.ended_time is not None:
            last[seg.worker_id] = (seg.ended_time, stage)
    changes: dict[str, Any] = {}
    if queue:
        changes["queue_wait"] = {size: queue for size in profile.queue_wait}
    if startup:
        changes["startup"] = startup
        changes["startup_together"] = {}
    if gaps:
        changes["segment_gap"] = tuple(gaps)
    if decisions:
        changes["decision"] = decisions
    if not changes:
        return profile
    source = f"{profile.source}; {MEASURED_IN_STUDY}"
    return dataclasses.replace(profile, source=source, **changes)


def replan(
    record: Mapping[str, Any],
    stage: int,
    elapsed: float,
    spent: float,
    study: Any | None = None,
    *,
    deadline: float | None = None,
    steps_left: Sequence[int] | None = None,
) -> tuple[PlanResult, Profile]:
    """The plan of the stages after ``stage`` (just ended: its trials at the rung) from the
    plan of ``record``: the same experiment, profile, deadline, cost model and options, from
    ``elapsed`` seconds and ``spent`` cost; with ``study`` (its record), the profile takes the
    latencies the study measured (:func:`measured_profile`). The plan in force is one of the
    planner's warm starts (``keep``): the new plan is never predicted costlier than following
    it on, and meets the deadline whenever following it does. The stages up to ``stage`` keep
    the shapes they ran with in the result (they are history; the prediction starts after
    them).

    Args:
        deadline: A new deadline (seconds from the study's start: ``hpctune resume
            --deadline``) in place of the plan's.
        steps_left: ``stage`` is still running: the steps each of its trials has left
            (:func:`stage_steps_left`); default: none, it just ended.
    """
    old = PlanResult.from_dict(record["plan"])
    spec = old.spec
    profile = Profile.from_dict(record["profile_data"], str(record.get("profile", "")))
    if study is not None:
        profile = measured_profile(profile, study, spec)
    progress = Progress(
        stage=stage,
        steps_left=tuple(steps_left)
        if steps_left is not None
        else (0,) * spec.stages[stage].trials,
        elapsed=elapsed,
        spent=spent,
        devices=old.plan.allocation.shapes[stage].devices,
        workers=old.plan.allocation.shapes[stage].workers,
    )
    new = plan_elastic(
        spec,
        profile,
        old.deadline if deadline is None else deadline,
        old.cost,
        progress=progress,
        options=old.options,
        keep=old.plan.allocation,
    )
    shapes = (*old.plan.allocation.shapes[: stage + 1], *new.plan.allocation.shapes[stage + 1 :])
    allocation = dataclasses.replace(new.plan.allocation, shapes=shapes)
    plan = dataclasses.replace(new.plan, allocation=allocation)
    return dataclasses.replace(new, plan=plan), profile


def deadline_reason(deadline: float) -> str:
    """The reason of the ``elastic_plan`` record made for ``hpctune resume --deadline``."""
    return f"deadline changed to {format_duration(deadline)} at resume"


def stage_steps_left(
    spec: ExperimentSpec, index: int, trials: Mapping[int, TrialProgress]
) -> tuple[int, ...]:
    """The steps each trial of stage ``index`` (running) has left, as :class:`Progress` takes
    them: a trial of its bracket that trained beyond the stage's start step is in it (0 left
    when it has ended or is past the end); the stage's other trials have not started it yet
    (all its steps left)."""
    stage = spec.stages[index]
    started = sorted(
        (
            0 if t.ended else min(max(stage.end_step - t.step, 0), stage.steps)
            for t in (trials.get(i) for i in bracket_trials(spec)[stage.bracket])
            if t is not None and t.step > stage.start_step
        ),
        reverse=True,
    )[: stage.trials]
    return (stage.steps,) * (stage.trials - len(started)) + tuple(started)


@dataclass(frozen=True)
class TrialProgress:
    """What the stage tracker needs of a trial.

    Attributes:
        step: The last step it reached.
        running_from: The start step of its segment running now, or ``None``.
        ended: It has ended (completed, terminated, failed).
    """

    step: int
    running_from: int | None
    ended: bool

    def past(self, step: int) -> bool:
        """It has ended, trained beyond ``step``, stopped at it (no segment runs), or runs a
        segment that starts there (the next stage)."""
        if self.ended or self.step > step:
            return True
        return self.step == step and (self.running_from is None or self.running_from >= step)


def stage_done(spec: ExperimentSpec, index: int, trials: Mapping[int, TrialProgress]) -> bool:
    """True when every trial of stage ``index``'s bracket exists and has ended or is past the
    stage's end step (:meth:`TrialProgress.past`: the rung can be judged)."""
    stage = spec.stages[index]
    for trial_id in bracket_trials(spec)[stage.bracket]:
        trial = trials.get(trial_id)
        if trial is None or not trial.past(stage.end_step):
            return False
    return True


def current_stage(
    spec: ExperimentSpec, trials: Mapping[int, TrialProgress], since: int = 0
) -> int:
    """The first stage from ``since`` on not done (``num_stages()`` when all are); a plan is
    never followed backwards (a trial lost and resumed from an earlier checkpoint)."""
    for index in range(since, spec.num_stages()):
        if not stage_done(spec, index, trials):
            return index
    return spec.num_stages()


class StageTracker:
    """:func:`current_stage`, kept up as a study runs at the cost of a few trials a call.

    A controller asks at every iteration; looking at every trial each time costs as many
    progress look-ups as the study has trials. The tracker looks only at the trials of the
    current stage's bracket, and within it goes on from the first trial that was not past the
    stage's end the last time (a trial once past it is not asked again until all are: then
    the whole bracket is checked once more before the stage is left, as :func:`stage_done`
    would). It never goes back (a trial lost and resumed from an earlier checkpoint).
    """

    def __init__(self, spec: ExperimentSpec, since: int = 0) -> None:
        self.spec = spec
        self.brackets = {b: list(ids) for b, ids in bracket_trials(spec).items()}
        self.stage = since
        self._cursor = 0  # trials of the current stage's bracket before it were past its end

    def advance(self, progress: Callable[[int], TrialProgress | None]) -> int:
        """The stage the study is in now, given each trial's progress (``None``: no such
        trial yet)."""
        while self.stage < self.spec.num_stages():
            stage = self.spec.stages[self.stage]
            ids = self.brackets[stage.bracket]

            def past(trial_id: int, end: int = stage.end_step) -> bool:
                trial = progress(trial_id)
                return trial is not None and trial.past(end)

            while self._cursor < len(ids) and past(ids[self._cursor]):
                self._cursor += 1
            if self._cursor < len(ids) or not all(past(t) for t in ids):
                return self.stage
            self.stage += 1
            self._cursor = 0
        return self.stage


def stage_shape(result: PlanResult, stage: int) -> StageShape:
    """The shape the plan gives ``stage``: its workers and their devices (the last stage's
    after the end)."""
    shapes = result.plan.allocation.shapes
    return shapes[min(stage, len(shapes) - 1)]


def stage_workers(result: PlanResult, stage: int) -> int:
    """The workers the plan keeps busy in ``stage`` (the last stage's after the end)."""
    return stage_shape(result, stage).workers


def shapes_text(result: PlanResult) -> str:
    """The plan's workers per stage, and their devices when any worker holds more than one:
    ``"workers per stage 2, 1, 1, 1 (devices each 1, 1, 1, 2)"``."""
    shapes = result.plan.allocation.shapes
    text = "workers per stage " + ", ".join(str(s.workers) for s in shapes)
    if any(s.devices > 1 for s in shapes):
        text += " (devices each " + ", ".join(str(s.devices) for s in shapes) + ")"
    return text


__all__ = [
    "MEASURED_IN_STUDY",
    "PLAN_REASON_LAUNCH",
    "REPLAN_DRIFT",
    "StageTracker",
    "TrialProgress",
    "current_stage",
    "deadline_reason",
    "drift_reason",
    "load_study_profile",
    "measured_profile",
    "plan_record",
    "plan_study",
    "predicted_stage_ends",
    "profile_path",
    "replan",
    "shapes_text",
    "stage_done",
    "stage_shape",
    "stage_steps_left",
    "stage_workers",
]
