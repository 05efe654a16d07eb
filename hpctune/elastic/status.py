"""How a study stands against its elastic plan: per stage its trials, devices per trial and
workers, predicted against measured stage ends, and the predicted completion time and cost
against those so far (``hpctune status``, the report, :meth:`hpctune.Study.elastic_plan`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpctune.elastic.follow import replanned_after
from hpctune.elastic.planner import PlanResult
from hpctune.elastic.profile import Profile
from hpctune.journal.usage import study_usage
from hpctune.study.formatting import format_duration


@dataclass(frozen=True)
class StageStatus:
    """One stage of a followed plan: planned shape, predicted and measured end.

    Attributes:
        stage: Its index.
        bracket: Its bracket.
        trials: Trials it trains.
        start_step: The step they start from.
        end_step: The step they train to.
        devices_per_trial: Devices per trial (planned).
        workers: Workers at once (planned).
        pool: Devices held (planned).
        predicted_end: Seconds from the study's start (mean latencies).
        measured_end: Seconds from the study's start when the controller saw it done, or
            ``None``.
    """

    stage: int
    bracket: int
    trials: int
    start_step: int
    end_step: int
    devices_per_trial: int
    workers: int
    pool: int
    predicted_end: float
    measured_end: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class PlanStatus:
    """A followed plan as ``hpctune status`` shows it.

    Attributes:
        result: The plan in force (the last journaled).
        reason: Why it was made.
        planned_at: Seconds from the study's start when it was made.
        plans: How many plans were journaled.
        stages: Per stage, planned, predicted and measured.
        stage: The stage the study is in (``len(stages)`` when all are done).
        elapsed: Seconds since the study's start (to its end once it ended).
        spent: The cost so far, in the plan's cost unit and basis.
        predicted_time: The plan's predicted completion, seconds from the start (mean).
        predicted_cost: The plan's predicted cost (mean).
        latencies: The mean SCALE, INIT, gap between segments and SYNC of the profile the
            plan was made with (seconds; empty for a record without its profile).
        measured: Those of them a re-plan took from the study (:func:`measured_profile`):
            they differ from the first plan's.
    """

    result: PlanResult
    reason: str
    planned_at: float
    plans: int
    stages: tuple[StageStatus, ...]
    stage: int
    elapsed: float
    spent: float
    predicted_time: float
    predicted_cost: float
    latencies: Mapping[str, float] = dataclasses.field(default_factory=dict)
    measured: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``hpctune status --json``'s ``elastic``)."""
        return {
            "reason": self.reason,
            "planned_at": self.planned_at,
            "plans": self.plans,
            "kind": self.result.plan.kind,
            "feasible": self.result.feasible,
            "deadline_s": self.result.deadline,
            "cost_unit": self.result.cost.unit,
            "cost_basis": self.result.cost.basis,
            "stage": self.stage,
            "elapsed_s": self.elapsed,
            "spent": self.spent,
            "predicted_time_s": self.predicted_time,
            "predicted_cost": self.predicted_cost,
            "stages": [s.to_dict() for s in self.stages],
            "latencies_s": dict(self.latencies),
            "latencies_measured": list(self.measured),
        }


def plan_latencies(profile: Profile) -> dict[str, float]:
    """The mean SCALE (over worker sizes), INIT (one worker alone), gap between segments and
    SYNC of ``profile``, as ``hpctune status`` shows those a plan was made with."""
    queue = [v for samples in profile.queue_wait.values() for v in samples]
    return {
        "SCALE": float(np.mean(queue)),
        "INIT": float(np.mean(profile.startup)),
        "gap": float(np.mean(profile.segment_gap)),
        "SYNC": float(np.mean(profile.decision)),
    }


def plan_status(
    record: Mapping[str, Any],
    stage_times: Sequence[tuple[int, float]],
    *,
    plans: int,
    started: float,
    now: float,
    held_seconds: float,
    used_seconds: float,
    launched: Mapping[str, Any] | None = None,
) -> PlanStatus:
    """The status of the plan of an ``elastic_plan`` record's data.

    Args:
        record: The data of the last ``elastic_plan`` record, with its ``time``.
        launched: The data of the first ``elastic_plan`` record, when ``record`` is a re-plan
            (the latencies that differ from its profile's are the study's).
        plans: How many ``elastic_plan`` records the journal holds.
        stage_times: ``(stage, time)`` of every ``elastic_stage`` record, in order.
        started: When the study started (Unix time).
        now: Now, or when the study ended.
        held_seconds: Device-seconds held by the study's workers so far.
        used_seconds: Device-seconds in segments so far.
    """
    result = PlanResult.from_dict(record["plan"])
    ends = [float(e) for e in record["stage_ends"]]
    measured: dict[int, float] = {}
    for stage, at in stage_times:  # entering stage s ends the stages before it
        for done in range(stage):
            measured.setdefault(done, at - started)
    rows = result.plan.rows(result.spec)
    ran = replanned_after(result)
    for row in rows[:ran]:  # the stages a re-plan started after ran with their own workers
        row["pool"] = row["devices_per_trial"] * row["workers"]
    stages = tuple(
        StageStatus(
            stage=row["stage"],
            bracket=row["bracket"],
            trials=row["trials"],
            start_step=row["start_step"],
            end_step=row["end_step"],
            devices_per_trial=row["devices_per_trial"],
            workers=row["workers"],
            pool=row["pool"],
            predicted_end=ends[i],
            measured_end=measured.get(i),
        )
        for i, row in enumerate(rows)
    )
    current = stage_times[-1][0] if stage_times else 0
    seconds = held_seconds if result.cost.basis == "held" else used_seconds
    latencies: dict[str, float] = {}
    if "profile_data" in record:
        latencies = plan_latencies(Profile.from_dict(record["profile_data"]))
    first: dict[str, float] = {}
    if launched is not None and "profile_data" in launched:
        first = plan_latencies(Profile.from_dict(launched["profile_data"]))
    from_study = tuple(k for k, v in latencies.items() if k in first and v != first[k])
    return PlanStatus(
        result=result,
        reason=str(record.get("reason", "")),
        planned_at=max(float(record.get("time", started)) - started, 0.0),  # launch's: 0
        plans=plans,
        stages=stages,
        stage=current,
        elapsed=max(now - started, 0.0),
        spent=float(result.cost.of(seconds)),
        predicted_time=result.plan.prediction.time.mean,
        predicted_cost=result.plan.prediction.cost.mean,
        latencies=latencies,
        measured=from_study,
    )


def study_plan_status(record: Any, now: float | None = None) -> PlanStatus | None:
    """The followed plan of a study record (:class:`~hpctune.journal.state.StudyRecord`) as
    of ``now`` (default: the time; the end of a study that ended), or ``None`` without one."""

    data = record.elastic_plan
    if data is None:
        return None
    now = time.time() if now is None else now
    started = record.started_time or record.created_time
    usage = study_usage(record, now)
    return plan_status(
        data,
        record.elastic_stages,
        plans=len(record.elastic_plans),
        started=started,
        now=record.ended_time or now,
        held_seconds=usage.device_s,
        used_seconds=usage.training_device_s,
        launched=record.elastic_plans[0] if len(record.elastic_plans) > 1 else None,
    )


def format_plan_status(status: PlanStatus) -> list[str]:
    """``hpctune status`` lines of a followed plan."""

    result = status.result
    cost = result.cost
    meets = "meets the deadline" if result.feasible else "no plan meets the deadline"
    made = (
        status.reason
        if status.plans == 1
        else f"re-planned {format_duration(status.planned_at)} after the start (plan "
        f"{status.plans}): {status.reason}"
    )
    lines = [
        f"elastic plan ({result.plan.kind}, {meets}): deadline "
        f"{format_duration(result.deadline)}, {made}",
        f"  predicted {format_duration(status.predicted_time)}, "
        f"{cost.format(status.predicted_cost)}; so far {format_duration(status.elapsed)}, "
        f"{cost.format(status.spent)} ({cost.basis})",
    ]
    if status.latencies:
        figures = ", ".join(
            f"{k} {v:.3g} s{'*' if k in status.measured else ''}"
            for k, v in status.latencies.items()
        )
        note = " (* measured in the study)" if status.measured else ""
        lines.append(f"  latencies planned with: {figures}{note}")
    lines.append(
        "  stage bracket   steps trials devices/trial workers pool  predicted end  measured end"
    )
    for s in status.stages:
        mark = ">" if s.stage == status.stage else " "
        measured = "-" if s.measured_end is None else format_duration(s.measured_end)
        lines.append(
            f" {mark}{s.stage:>5} {s.bracket:>7} {s.start_step:>3}-{s.end_step:<4} {s.trials:>6} "
            f"{s.devices_per_trial:>13} {s.workers:>7} {s.pool:>4}  "
            f"{format_duration(s.predicted_end):>13}  {measured:>12}"
        )
    return lines


__all__ = [
    "PlanStatus",
    "StageStatus",
    "format_plan_status",
    "plan_latencies",
    "plan_status",
    "study_plan_status",
]
