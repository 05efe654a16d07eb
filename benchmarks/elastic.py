"""The elastic planner against the best static allocation (RubberBand, EuroSys 2021, Table 2).

For each workload and deadline: the cost and completion time predicted for the planned elastic
allocation, for the cheapest static allocation and for the paper's naive elastic baseline (the
cluster follows the stages, each trial the same GPUs throughout) that meet the deadline, the
static/elastic cost ratio, and the plan's devices per trial and pool per stage. Workloads:

* ``paper``: SHA(n = 32, r = 1, R = 50, eta = 3) with a ResNet-101-like scaling (120 s an epoch
  on one GPU; speed-ups 1.95, 3.7 and 6.9 at 2, 4 and 8 GPUs), 15 s to scale and to start, $3.06
  a GPU-hour (a p3.8xlarge's GPU), deadlines 20, 30 and 40 minutes (the paper's: $15.68 against
  $34.00 at 20 minutes, $14.68 against $14.99 at 40).
* each trace in ``benchmarks/traces``: its measured seconds per step at one device, a
  data-parallel scaling assumed by Amdahl's law (``--parallel``, the traces were recorded at
  one size), ``--queue-wait`` and ``--startup`` seconds, one SHA bracket of
  ``--bracket`` trials (the policy's rungs); deadlines 1/8, 1/4 and 1/2 of the time the whole
  study takes on one device. The traces' steps last 0.01-0.3 s, so start-up and queue waits
  dominate; ``--time-scale K`` multiplies every step's time by K (a what-if: the same curves
  and spread with a K times larger model).

    nice -n 10 python benchmarks/elastic.py [--samples 64] [--json] [--only paper]

Pure simulation: no cluster, a few seconds per workload.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from hpctune.elastic import (
    CostModel,
    ExperimentSpec,
    PlanOptions,
    Profile,
    plan_elastic,
    simulate,
)
from hpctune.elastic.allocation import static_allocation
from hpctune.elastic.experiment import halving_stages
from hpctune.elastic.planner import PlanResult, naive_elastic
from hpctune.policies import StudyContext, make_policy
from hpctune.profiler.from_traces import profile_from_steps, step_samples
from hpctune.simulator.traces import Trace
from hpctune.study.formatting import format_duration

REPO = Path(__file__).resolve().parent.parent


def paper() -> tuple[ExperimentSpec, Profile, CostModel, list[float]]:
    """RubberBand §6.3.1's workload."""
    spec = ExperimentSpec.successive_halving(32, [1, 4, 13, 50], 3, name="paper")
    profile = Profile.scaling(
        120.0, {2: 1.95, 4: 3.7, 8: 6.9}, cv=0.05, queue_wait={1: (15.0,)}, startup=(15.0,)
    )
    return spec, profile, CostModel(price=3.06), [20 * 60.0, 30 * 60.0, 40 * 60.0]


def from_trace(
    path: Path, bracket: int, parallel: float, queue_wait: float, startup: float, scale: float
) -> tuple[ExperimentSpec, Profile]:
    """A trace's workload: one SHA bracket over its epochs, its step times, Amdahl's scaling."""
    trace = Trace.load(path)
    context = StudyContext(max_steps=int(trace.curves.shape[1]), mode=trace.mode)
    policy = make_policy("sha", {"bracket_size": bracket}, context)
    shape = policy.shapes(trace.curves.shape[1])[0]  # type: ignore[attr-defined]
    spec = ExperimentSpec(
        halving_stages(min(shape.capacity, trace.curves.shape[0]), shape.milestones, 3),
        name=path.stem,
        step_unit="epoch",
    )
    speedups = {g: 1.0 / ((1 - parallel) + parallel / g) for g in (2, 4, 8)}
    profile = profile_from_steps(
        {1: tuple(scale * s for s in step_samples(trace))},
        speedups,
        queue_wait=(queue_wait,),
        startup=(startup,),
        source=str(path.relative_to(REPO)),
    )
    return spec, profile


def row(name: str, result: PlanResult, naive: Any, took: float) -> dict[str, Any]:
    """One line of the table."""
    plan, static = result.plan.prediction, result.static.prediction
    return {
        "naive_time_s": None if naive is None else naive.prediction.time.mean,
        "naive_cost": None if naive is None else naive.prediction.cost.mean,
        "workload": name,
        "deadline_s": result.deadline,
        "feasible": result.feasible,
        "elastic_time_s": plan.time.mean,
        "elastic_cost": plan.cost.mean,
        "static_time_s": static.time.mean,
        "static_cost": static.cost.mean,
        "static_pool": result.static.allocation.static_pool,
        "saving": result.saving,
        "devices_per_trial": [s.devices for s in result.plan.allocation.shapes],
        "pools": list(result.plan.allocation.vector),
        "unit": result.cost.unit,
        "simulations": result.evaluations,
        "planning_s": took,
    }


def run(name: str, spec: ExperimentSpec, profile: Profile, cost: CostModel, deadline: float,
        options: PlanOptions) -> dict[str, Any]:  # fmt: skip
    began = time.perf_counter()
    result = plan_elastic(spec, profile, deadline, cost, options=options)
    took = time.perf_counter() - began
    return row(name, result, naive_elastic(spec, profile, deadline, cost, options=options), took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--bracket", type=int, default=81, help="SHA trials on a trace")
    parser.add_argument("--parallel", type=float, default=0.95, help="Amdahl's parallel share")
    parser.add_argument("--queue-wait", type=float, default=5.0, help="SCALE on a trace (s)")
    parser.add_argument("--startup", type=float, default=3.0, help="INIT on a trace (s)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="Step times x K")
    parser.add_argument("--only", default=None, help="One workload: paper or a trace's stem")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    options = PlanOptions(samples=args.samples)
    rows = []
    if args.only in (None, "paper"):
        spec, profile, cost, deadlines = paper()
        rows += [run("paper", spec, profile, cost, d, options) for d in deadlines]
    for path in sorted((REPO / "benchmarks" / "traces").glob("*.h5")):
        if args.only not in (None, path.stem):
            continue
        spec, profile = from_trace(
            path, args.bracket, args.parallel, args.queue_wait, args.startup, args.time_scale
        )
        cost = CostModel()
        one = simulate(spec, static_allocation(spec, 1, (1,)), profile, cost, samples=8)
        for fraction in (1 / 8, 1 / 4, 1 / 2):
            rows.append(run(path.stem, spec, profile, cost, fraction * one.time.mean, options))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(
        f"{'workload':<12} {'deadline':>9} {'elastic':>9} {'cost':>10} {'static':>9} "
        f"{'cost':>10} {'pool':>5} {'naive':>9} {'cost':>10} {'saving':>7}  "
        "GPUs/trial | pool per stage"
    )
    for r in rows:
        unit = "$" if r["unit"] == "$" else ""
        mark = "" if r["feasible"] else " (no plan meets it)"
        naive = f"{'-':>9} {'-':>10}"
        if r["naive_cost"] is not None:
            naive = f"{format_duration(r['naive_time_s']):>9} {unit}{r['naive_cost']:>9.4g}"
        print(
            f"{r['workload']:<12} {format_duration(r['deadline_s']):>9} "
            f"{format_duration(r['elastic_time_s']):>9} {unit}{r['elastic_cost']:>9.4g} "
            f"{format_duration(r['static_time_s']):>9} {unit}{r['static_cost']:>9.4g} "
            f"{r['static_pool']:>5} {naive} {r['saving']:>6.2f}x  {r['devices_per_trial']} | "
            f"{r['pools']}{mark}"
        )
    print(
        "costs: the paper in $, traces in GPU-hours held; naive: the cluster follows the "
        "stages, every trial the same GPUs throughout (-: none meets the deadline); "
        "saving = static cost / elastic cost"
    )


if __name__ == "__main__":
    main()
