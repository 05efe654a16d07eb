"""What a simulation returns: one run's result, and medians and quartiles over many runs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpctune.policies import ActionKind
from hpctune.study.states import Mode, SegmentStatus, TrialStatus


@dataclass(frozen=True)
class DecisionRecord:
    """A non-continue decision: a trial told to suspend or terminate.

    Attributes:
        time: Simulated seconds since the start.
        trial: The trial's id.
        config: Its configuration (row of the trace).
        step: Its last reported step then.
        kind: ``SUSPEND`` or ``TERMINATE``.
        reason: The policy's reason.
    """

    time: float
    trial: int
    config: int
    step: int
    kind: ActionKind
    reason: str


@dataclass(frozen=True)
class SegmentSpan:
    """A segment on the timeline: which slot trained which trial from when to when."""

    slot: int
    worker: int
    trial: int
    config: int
    start: float
    end: float
    start_step: int
    end_step: int
    outcome: SegmentStatus  # running (cut by the end), completed, suspended, terminated, failed


@dataclass(frozen=True)
class WorkerSpan:
    """A worker on the timeline: submitted, running (allocated) from ``started``, exited."""

    slot: int
    worker: int
    submitted: float
    started: float
    ready: float
    exited: float


@dataclass(frozen=True)
class TrialOutcome:
    """Where a trial ended up."""

    trial: int
    config: int
    status: TrialStatus
    step: int
    suspensions: int
    reason: str


@dataclass(frozen=True)
class SimulationResult:
    """The result of one simulated study.

    Attributes:
        policy: The policy's name.
        options: Its options.
        slots: The slots it ran on.
        seed: The seed of the configuration order and the policy's random numbers.
        target: The target value.
        mode: ``"max"`` or ``"min"``.
        time_to_target: Seconds until a trial first reported a value at least as good as the
            target; ``None`` if none did.
        target_trial: The trial that reached it first.
        end_time: When the study ended (or the simulation was cut).
        gpu_hours: Slot-hours allocated: from each worker's start (after the queue) to its exit,
            with start-up, checkpoints, suspend/resume and idle time.
        gpu_hours_to_target: The same until the target was reached.
        training_hours: Hours of training steps only.
        trials_started: Trials created.
        trials_completed: Trials trained to ``max_steps``.
        trials_terminated: Trials stopped for good.
        trials_suspended: Trials suspended at least once.
        suspensions: Suspensions in all.
        trials_out_of_trace: Trials stopped because the trace has no more steps of them.
        ignored_actions: Actions that could not be carried out (as the controller ignores them).
        incumbent: ``(time, value, trial)`` each time the best value improved.
        decisions: Every suspend and terminate decision.
        segments: The timeline of segments per slot.
        workers: The timeline of workers per slot.
        trials: Every trial's outcome.
        policy_states: ``(time, state_dict)`` each time the policy's state changed (POP's
            promising slots over time, for its resource-split plot).
    """

    policy: str
    options: Mapping[str, Any]
    slots: int
    seed: int
    target: float
    mode: Mode
    time_to_target: float | None
    target_trial: int | None
    end_time: float
    gpu_hours: float
    gpu_hours_to_target: float | None
    training_hours: float
    trials_started: int
    trials_completed: int
    trials_terminated: int
    trials_suspended: int
    suspensions: int
    trials_out_of_trace: int
    ignored_actions: int
    incumbent: tuple[tuple[float, float, int], ...]
    decisions: tuple[DecisionRecord, ...]
    segments: tuple[SegmentSpan, ...]
    workers: tuple[WorkerSpan, ...]
    trials: tuple[TrialOutcome, ...]
    policy_states: tuple[tuple[float, Mapping[str, Any]], ...] = ()

    @property
    def best_value(self) -> float:
        """The best value reported in the whole run (NaN if none)."""
        return self.incumbent[-1][1] if self.incumbent else math.nan

    def best_value_at(self, time: float) -> float:
        """The best value reported by ``time`` seconds (NaN if none yet)."""
        best = math.nan
        for t, value, _ in self.incumbent:
            if t > time:
                break
            best = value
        return best

    def to_dict(self, *, timeline: bool = False, budget: float | None = None) -> dict[str, Any]:
        """The result as JSON-able data (``docs/traces.md``); timelines only if asked."""
        data: dict[str, Any] = {
            "policy": self.policy,
            "options": dict(self.options),
            "slots": self.slots,
            "seed": self.seed,
            "target": self.target,
            "time_to_target": self.time_to_target,
            "target_trial": self.target_trial,
            "end_time": self.end_time,
            "gpu_hours": self.gpu_hours,
            "gpu_hours_to_target": self.gpu_hours_to_target,
            "training_hours": self.training_hours,
            "best_value": _finite(self.best_value),
            "trials_started": self.trials_started,
            "trials_completed": self.trials_completed,
            "trials_terminated": self.trials_terminated,
            "trials_suspended": self.trials_suspended,
            "suspensions": self.suspensions,
            "trials_out_of_trace": self.trials_out_of_trace,
            "ignored_actions": self.ignored_actions,
        }
        if budget is not None:
            data["best_value_at_budget"] = _finite(self.best_value_at(budget))
        if timeline:
            data["segments"] = [{**vars(s), "outcome": s.outcome.value} for s in self.segments]
            data["workers"] = [vars(w) for w in self.workers]
            data["incumbent"] = [list(i) for i in self.incumbent]
            data["decisions"] = [{**vars(d), "kind": d.kind.value} for d in self.decisions]
            data["policy_states"] = [[t, dict(state)] for t, state in self.policy_states]
        return data


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def quantiles(values: Sequence[float]) -> dict[str, float | None]:
    """Median and quartiles (linear interpolation; ``inf`` for runs that never got there).

    A quantile that falls among the infinite values is ``None`` (never), so "median None"
    means fewer than half the runs reached it.
    """
    xs = sorted(values)
    if not xs:
        return {"q25": None, "median": None, "q75": None}
    out: dict[str, float | None] = {}
    for name, q in (("q25", 0.25), ("median", 0.5), ("q75", 0.75)):
        pos = q * (len(xs) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        frac = pos - lo
        if math.isinf(xs[lo]) or (frac > 0 and math.isinf(xs[hi])):
            out[name] = None
        else:
            out[name] = xs[lo] + (xs[hi] - xs[lo]) * frac
    return out


SUMMARY_FIELDS = (
    "time_to_target",
    "gpu_hours_to_target",
    "gpu_hours",
    "best_value",
    "trials_started",
    "trials_terminated",
    "trials_suspended",
)


def summarize(results: Sequence[SimulationResult], budget: float | None = None) -> dict[str, Any]:
    """Medians and quartiles of one policy's runs.

    ``time_to_target`` and ``gpu_hours_to_target`` count runs that never reached the target as
    infinite; ``reached`` says how many did.
    """
    summary: dict[str, Any] = {
        "runs": len(results),
        "reached": sum(r.time_to_target is not None for r in results),
    }
    for name in SUMMARY_FIELDS:
        if name == "best_value":
            values = [r.best_value for r in results]
        else:
            raw = [getattr(r, name) for r in results]
            values = [math.inf if v is None else float(v) for v in raw]
        summary[name] = quantiles([v for v in values if not math.isnan(v)])
    if budget is not None:
        at = [r.best_value_at(budget) for r in results]
        summary["best_value_at_budget"] = quantiles([v for v in at if not math.isnan(v)])
    return summary


__all__ = [
    "DecisionRecord",
    "SegmentSpan",
    "SimulationResult",
    "TrialOutcome",
    "WorkerSpan",
    "quantiles",
    "summarize",
]
