"""The resource allocation planner (RubberBand §4.3, Algorithm 2): the cheapest plan by a deadline.

1. **Warm start**: every static pool worth trying (:func:`~.allocation.static_pools`) is
   simulated; the cheapest whose predicted time meets the deadline is the best static plan.
2. **Greedy descent** from the elastic allocation of 1x, 2x and 3x that pool, and from the
   cheapest naive elastic plan (the same devices per trial in every stage, all trials at once:
   its workers carry over from stage to stage, which single-stage steps cannot reach when
   start-up is dear; not in the paper): each step makes one
   candidate per stage by lowering that stage's devices to the next fair value (a factor or a
   multiple of its trials, :func:`~.allocation.step_down`), simulates them, and moves to the
   candidate with the largest marginal benefit ``(C(a*) - C(a_i)) / (T(a_i) - T(a*))`` (cost
   saved per second added; a candidate that saves cost without adding time comes first). It
   stops when no candidate is cheaper by more than ``min_improvement`` and meets the deadline.
   *Where this differs from the paper*: candidates that would miss the deadline are dropped
   before the selection instead of ending the search, so a stage that cannot shrink any further
   does not stop the others from shrinking.
3. The cheapest of the static plan and the descents is the plan. It is never predicted costlier
   than the best static plan, and it meets the deadline whenever some static plan does.

Everything is a pure function of its inputs (the simulator's draws are seeded), so a plan can
be journaled and made again, and re-planned from measured :class:`~.experiment.Progress`. A
re-plan descends from the plan in force too (``keep``), so it is never predicted costlier than
following that plan on, and meets the deadline whenever following it does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpctune.elastic.allocation import (
    Allocation,
    StageShape,
    device_sizes,
    elastic_allocation,
    elastic_shape,
    round_down,
    static_allocation,
    static_pools,
    step_down,
)
from hpctune.elastic.cost import CostModel
from hpctune.elastic.experiment import ExperimentSpec, PlanningError, Progress
from hpctune.elastic.predict import Prediction, simulate
from hpctune.elastic.profile import Profile

PLAN_VERSION = 1


@dataclass(frozen=True)
class PlanOptions:
    """Settings of the planner.

    Attributes:
        samples: Samples per simulation (Algorithm 1's ``n``).
        seed: Seeds the simulator's draws.
        quantile: Judge the deadline on this quantile of the completion time (e.g. 0.9: nine
            runs in ten finish in time); ``None``: on its mean, as the paper.
        max_pool: Most devices held at once (a partition's or a user's limit); ``None``: as many
            as the largest stage's trials times the most devices per trial.
        max_devices: Most devices per trial; ``None``: the profile's largest measured size.
        node_devices: Devices of a node: a trial above it takes whole nodes; ``None``: no rule.
        warm_starts: Multiples of the best static pool the descent starts from (paper: 1, 2, 3).
        min_improvement: A step must save more than this share of the current cost (δ).
    """

    samples: int = 64
    seed: int = 0
    quantile: float | None = None
    max_pool: int | None = None
    max_devices: int | None = None
    node_devices: int | None = None
    warm_starts: tuple[int, ...] = (1, 2, 3)
    min_improvement: float = 1e-6

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise PlanningError(f"samples must be >= 1, but got {self.samples}")
        if self.quantile is not None and not 0 < self.quantile < 1:
            raise PlanningError(f"the quantile must be in (0, 1), but got {self.quantile}")
        for name in ("max_pool", "max_devices", "node_devices"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise PlanningError(f"{name} must be >= 1, but got {value}")
        if not self.warm_starts or min(self.warm_starts) < 1:
            raise PlanningError(f"warm_starts must be multiples >= 1, not {self.warm_starts}")

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "samples": self.samples,
            "seed": self.seed,
            "quantile": self.quantile,
            "max_pool": self.max_pool,
            "max_devices": self.max_devices,
            "node_devices": self.node_devices,
            "warm_starts": list(self.warm_starts),
            "min_improvement": self.min_improvement,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanOptions:
        """Rebuild from :meth:`to_dict`."""
        values = dict(data)
        values["warm_starts"] = tuple(values.get("warm_starts", (1, 2, 3)))
        return cls(**values)


@dataclass(frozen=True)
class Plan:
    """One allocation and what the simulator predicts for it.

    Attributes:
        kind: ``"elastic"``, ``"static"`` or ``"naive"`` (:func:`naive_elastic`).
        allocation: The shape of every stage (a static plan: and its pool).
        prediction: Completion time and cost with their spread.
        feasible: The predicted time meets the deadline.
    """

    kind: str
    allocation: Allocation
    prediction: Prediction
    feasible: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "kind": self.kind,
            "allocation": self.allocation.to_dict(),
            "prediction": self.prediction.to_dict(),
            "feasible": self.feasible,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """Rebuild from :meth:`to_dict`."""
        return cls(
            str(data["kind"]),
            Allocation.from_dict(data["allocation"]),
            Prediction.from_dict(data["prediction"]),
            bool(data["feasible"]),
        )

    def rows(self, spec: ExperimentSpec) -> list[dict[str, int]]:
        """Per stage: trials, steps, devices per trial, workers and the devices held."""
        out = []
        for i, (stage, shape) in enumerate(zip(spec.stages, self.allocation.shapes, strict=True)):
            out.append(
                {
                    "stage": i,
                    "bracket": stage.bracket,
                    "trials": stage.trials,
                    "start_step": stage.start_step,
                    "end_step": stage.end_step,
                    "devices_per_trial": shape.devices,
                    "workers": shape.workers,
                    "pool": self.allocation.vector[i],
                }
            )
        return out


@dataclass(frozen=True)
class PlanResult:
    """The planner's answer: the plan to run and the best static plan to compare with.

    Attributes:
        spec: The experiment planned.
        deadline: Seconds from the study's start.
        cost: The cost model.
        options: The planner's settings.
        plan: The cheapest plan found that meets the deadline (the best static plan when no
            elastic one beats it; the fastest static plan when none meets the deadline, unless
            a re-plan's plan in force, descended, does).
        static: The best static plan (the fastest when none meets the deadline).
        descents: Where each warm start's descent ended.
        evaluations: Simulations run.
        progress: Where the study stood when planned (a re-plan), or ``None``.
        profile_source: Where the profile came from.
    """

    spec: ExperimentSpec
    deadline: float
    cost: CostModel
    options: PlanOptions
    plan: Plan
    static: Plan
    descents: tuple[Plan, ...] = ()
    evaluations: int = 0
    progress: Progress | None = None
    profile_source: str = ""

    @property
    def feasible(self) -> bool:
        """Some plan meets the deadline."""
        return self.plan.feasible

    @property
    def saving(self) -> float:
        """The best static plan's cost over the plan's (2.0: half the cost)."""
        return self.static.prediction.cost.mean / max(self.plan.prediction.cost.mean, 1e-300)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``hpctune plan-elastic --json``, and what the journal is to hold)."""
        return {
            "version": PLAN_VERSION,
            "spec": self.spec.to_dict(),
            "deadline_s": self.deadline,
            "cost_model": self.cost.to_dict(),
            "options": self.options.to_dict(),
            "plan": self.plan.to_dict(),
            "plan_stages": self.plan.rows(self.spec),
            "static": self.static.to_dict(),
            "static_stages": self.static.rows(self.spec),
            "descents": [d.to_dict() for d in self.descents],
            "evaluations": self.evaluations,
            "progress": None if self.progress is None else self.progress.to_dict(),
            "profile_source": self.profile_source,
            "feasible": self.feasible,
            "saving": self.saving,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanResult:
        """Rebuild from :meth:`to_dict` (the derived fields are recomputed).

        Raises:
            PlanningError: The data is of a newer format or not a plan.
        """
        version = int(data.get("version", 0))
        if version != PLAN_VERSION:
            raise PlanningError(f"plan format {version} is not {PLAN_VERSION}, which this reads")
        progress = data.get("progress")
        return cls(
            spec=ExperimentSpec.from_dict(data["spec"]),
            deadline=float(data["deadline_s"]),
            cost=CostModel.from_dict(data["cost_model"]),
            options=PlanOptions.from_dict(data["options"]),
            plan=Plan.from_dict(data["plan"]),
            static=Plan.from_dict(data["static"]),
            descents=tuple(Plan.from_dict(d) for d in data.get("descents", ())),
            evaluations=int(data.get("evaluations", 0)),
            progress=None if progress is None else Progress.from_dict(progress),
            profile_source=str(data.get("profile_source", "")),
        )


@dataclass
class _Evaluator:
    """Simulates allocations, each once (the simulator is deterministic for its inputs)."""

    spec: ExperimentSpec
    profile: Profile
    cost: CostModel
    deadline: float
    options: PlanOptions
    progress: Progress | None
    cache: dict[Allocation, Prediction] = field(default_factory=dict)

    def __call__(self, allocation: Allocation) -> Prediction:
        if allocation not in self.cache:
            self.cache[allocation] = simulate(
                self.spec,
                allocation,
                self.profile,
                self.cost,
                samples=self.options.samples,
                seed=self.options.seed,
                progress=self.progress,
            )
        return self.cache[allocation]

    def time(self, prediction: Prediction) -> float:
        """The completion time the deadline is judged on."""
        q = self.options.quantile
        if q is None:
            return prediction.time.mean
        return _quantile(prediction, q)

    def meets(self, prediction: Prediction) -> bool:
        return self.time(prediction) <= self.deadline

    def plan(self, kind: str, allocation: Allocation) -> Plan:
        prediction = self(allocation)
        return Plan(kind, allocation, prediction, self.meets(prediction))


def _quantile(prediction: Prediction, q: float) -> float:
    """A quantile between the stored ones (10, 50, 90 %), by linear interpolation."""
    t = prediction.time
    return float(np.interp(q, [0.1, 0.5, 0.9], [t.p10, t.p50, t.p90]))


def plan_elastic(
    spec: ExperimentSpec,
    profile: Profile,
    deadline: float,
    cost: CostModel,
    *,
    progress: Progress | None = None,
    options: PlanOptions | None = None,
    keep: Allocation | None = None,
) -> PlanResult:
    """The cheapest plan predicted to finish ``spec`` within ``deadline`` seconds.

    Args:
        spec: The stages of the study.
        profile: The workload's and cluster's latencies.
        deadline: Seconds from the study's start.
        cost: How device-seconds become cost.
        progress: Plan the rest of a running study from here (its running stage keeps its
            shape; the stages after it are planned).
        options: The planner's settings.
        keep: A re-plan's plan in force (its allocation): one more warm start, so that the new
            plan is never predicted costlier than following it on from ``progress``, and meets
            the deadline whenever following it does (a static one is among the static plans).

    Raises:
        PlanningError: The deadline is not positive or ``progress`` does not fit ``spec``.
    """
    options = options or PlanOptions()
    if not (deadline > 0 and math.isfinite(deadline)):
        raise PlanningError(f"the deadline must be a positive time, but got {deadline!r} s")
    if progress is not None:
        progress.check(spec)
    sizes = _sizes(profile, options)
    largest = max(s.trials for s in spec.stages) * sizes[-1]
    max_pool = min(options.max_pool or largest, largest)
    evaluate = _Evaluator(spec, profile, cost, deadline, options, progress)
    first = progress.stage + 1 if progress is not None else 0

    statics = [
        evaluate.plan("static", static_allocation(spec, p, sizes))
        for p in static_pools(spec, sizes, max_pool)
    ]
    feasible = [p for p in statics if p.feasible]
    kept = None
    if keep is not None and keep.static_pool is None:  # the plan in force, then descended
        kept = _descend(spec, keep, first, sizes, evaluate)
    if not feasible:
        fastest = min(statics, key=lambda p: (evaluate.time(p.prediction), p.prediction.cost.mean))
        chosen = kept if kept is not None and kept.feasible else fastest
        return PlanResult(
            spec,
            deadline,
            cost,
            options,
            chosen,
            fastest,
            () if kept is None else (kept,),
            len(evaluate.cache),
            progress,
            profile.source,
        )
    static = min(feasible, key=lambda p: (p.prediction.cost.mean, evaluate.time(p.prediction)))
    pool = static.allocation.static_pool or 1
    descents = []
    for multiple in options.warm_starts:
        vector = [
            round_down(st.trials, min(multiple * pool, max_pool), sizes) for st in spec.stages
        ]
        start = elastic_allocation(spec, vector, sizes)
        descents.append(_descend(spec, start, first, sizes, evaluate))
    naive = _naive(spec, sizes, evaluate) if progress is None else None
    if naive is not None:  # one more warm start: it keeps every worker from stage to stage
        descents.append(_descend(spec, naive.allocation, first, sizes, evaluate))
    if kept is not None:
        descents.append(kept)
    best = min(
        [static, *(d for d in descents if d.feasible)],
        key=lambda p: (p.prediction.cost.mean, evaluate.time(p.prediction)),
    )
    return PlanResult(
        spec,
        deadline,
        cost,
        options,
        best,
        static,
        tuple(descents),
        len(evaluate.cache),
        progress,
        profile.source,
    )


def _descend(
    spec: ExperimentSpec,
    start: Allocation,
    first: int,
    sizes: tuple[int, ...],
    evaluate: _Evaluator,
) -> Plan:
    """Algorithm 2's ``optimize_plan``: greedy decrements by the marginal rule."""
    current = start
    now = evaluate(current)
    while True:
        best: tuple[float, float, int] | None = None
        chosen: tuple[Allocation, Prediction] | None = None
        for i in range(first, spec.num_stages()):
            stage, shape = spec.stages[i], current.shapes[i]
            lower = step_down(stage.trials, shape.pool, sizes)
            if lower is None:
                continue
            shapes = list(current.shapes)
            shapes[i] = elastic_shape(stage.trials, lower, sizes)
            candidate = Allocation(tuple(shapes))
            p = evaluate(candidate)
            saved = now.cost.mean - p.cost.mean
            if not evaluate.meets(p) or saved <= evaluate.options.min_improvement * now.cost.mean:
                continue
            added = evaluate.time(p) - evaluate.time(now)
            marginal = saved / added if added > 0 else math.inf
            key = (marginal, saved, -i)
            if best is None or key > best:
                best, chosen = key, (candidate, p)
        if chosen is None:
            return Plan("elastic", current, now, evaluate.meets(now))
        current, now = chosen


def naive_elastic(
    spec: ExperimentSpec,
    profile: Profile,
    deadline: float,
    cost: CostModel,
    *,
    options: PlanOptions | None = None,
) -> Plan | None:
    """The paper's naive elastic baseline (§6.3.1): the cluster follows the stages, every trial
    of a stage runs at once, and every trial gets the same devices in every stage; the cheapest
    such plan that meets the deadline, or ``None``."""
    options = options or PlanOptions()
    evaluate = _Evaluator(spec, profile, cost, deadline, options, None)
    return _naive(spec, _sizes(profile, options), evaluate)


def _sizes(profile: Profile, options: PlanOptions) -> tuple[int, ...]:
    return device_sizes(options.max_devices or profile.max_devices, options.node_devices)


def _naive(spec: ExperimentSpec, sizes: tuple[int, ...], evaluate: _Evaluator) -> Plan | None:
    widest = max(st.trials for st in spec.stages)
    max_pool = evaluate.options.max_pool
    plans = [
        evaluate.plan("naive", Allocation(tuple(StageShape(g, st.trials) for st in spec.stages)))
        for g in sizes
        if max_pool is None or g * widest <= max_pool
    ]
    feasible = [p for p in plans if p.feasible]
    return min(feasible, key=lambda p: p.prediction.cost.mean) if feasible else None


__all__ = ["PLAN_VERSION", "Plan", "PlanOptions", "PlanResult", "naive_elastic", "plan_elastic"]
