"""A re-plan (``follow.replan``, the controller's path after a late stage or a new deadline)
keeps the planner's guarantees from where the study stands: on random small SHA experiments,
profiles and progress it is never predicted costlier than its warm starts simulated from the
same progress, and it meets the deadline whenever some plan it could start from does."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.elastic import CostModel, ExperimentSpec, PlanOptions, Profile, Progress, simulate
from hpctune.elastic.allocation import (
    Allocation,
    device_sizes,
    elastic_allocation,
    round_down,
    static_allocation,
    static_pools,
)
from hpctune.elastic.follow import plan_record, replan
from hpctune.elastic.planner import plan_elastic
from tests.elastic.test_planner import draw_experiment

DEVICE_SECONDS = CostModel(price=3600.0)  # cost = device-seconds


@st.composite
def replans(draw):  # type: ignore[no-untyped-def]
    """A first plan's record, where the study stands and the re-plan's deadline (as
    ``test_planner.problems``, with progress)."""
    spec, profile = draw_experiment(draw, min_rungs=2, between=True)
    options = PlanOptions(
        samples=4,
        max_devices=draw(st.sampled_from([1, None])),  # one device per trial, or sizes
        max_pool=draw(st.sampled_from([None, 2, 4, 8])),
    )
    first = plan_elastic(
        spec, profile, draw(st.floats(20.0, 2000.0)), DEVICE_SECONDS, options=options
    )
    record = plan_record(first, profile, "planned at the study's start")
    stage = draw(st.integers(0, spec.num_stages() - 1))
    steps = spec.stages[stage].steps
    ended = draw(st.booleans())  # a late stage (its trials at the rung) or a new deadline
    left = None if ended else draw(st.tuples(*[st.integers(0, steps)] * spec.stages[stage].trials))
    elapsed = draw(st.floats(0.0, 1500.0))
    spent = draw(st.floats(0.0, 5000.0))
    deadline = draw(st.one_of(st.none(), st.floats(20.0, 3000.0)))
    return record, stage, elapsed, spent, deadline, left


@settings(max_examples=40, deadline=None)
@given(replans())
def test_a_replan_is_never_worse_than_its_warm_starts(problem: Any) -> None:
    record, stage, elapsed, spent, deadline, left = problem
    result, profile = replan(record, stage, elapsed, spent, deadline=deadline, steps_left=left)
    spec = result.spec
    in_force = record["plan"]
    options = PlanOptions.from_dict(in_force["options"])
    deadline = float(in_force["deadline_s"]) if deadline is None else deadline
    assert result.deadline == deadline
    progress = result.progress
    assert progress is not None
    shapes = in_force["plan"]["allocation"]["shapes"]
    assert progress == Progress(
        stage,
        tuple(left) if left is not None else (0,) * spec.stages[stage].trials,
        elapsed,
        spent,
        shapes[stage][0],
        shapes[stage][1],
    )

    def predict(allocation):  # type: ignore[no-untyped-def]
        return simulate(
            spec,
            allocation,
            profile,
            DEVICE_SECONDS,
            samples=options.samples,
            seed=options.seed,
            progress=progress,
        )

    # the plan's prediction is its allocation's from the progress (the stages that ran keep
    # the shapes they had: the prediction does not depend on them)
    plan = result.plan
    assert predict(plan.allocation) == plan.prediction
    assert plan.feasible == (plan.prediction.time.mean <= deadline)
    # its warm starts, simulated from the same progress: the plan in force followed on from
    # here, every static pool, and the elastic allocations of 1x, 2x, 3x the cheapest static
    # pool that meets the deadline
    kept = predict(Allocation.from_dict(in_force["plan"]["allocation"]))
    sizes = device_sizes(options.max_devices or profile.max_devices)
    largest = max(s.trials for s in spec.stages) * sizes[-1]
    max_pool = min(options.max_pool or largest, largest)
    pools = static_pools(spec, sizes, max_pool)
    statics = [predict(static_allocation(spec, p, sizes)) for p in pools]
    feasible = [p for p in [kept, *statics] if p.time.mean <= deadline]
    if not feasible:  # none meets the deadline: the fastest static plan
        assert not plan.feasible
        assert plan.allocation.static_pool is not None
        assert plan.prediction.time.mean == min(p.time.mean for p in statics)
        return
    assert plan.feasible
    assert plan.prediction.time.mean <= deadline
    assert all(plan.prediction.cost.mean <= p.cost.mean for p in feasible), (plan, feasible)
    static = [(p.cost.mean, p.time.mean, pool) for p, pool in zip(statics, pools, strict=True)]
    best = min((s for s in static if s[1] <= deadline), default=None)
    for multiple in options.warm_starts if best is not None else ():
        vector = [
            round_down(s.trials, min(multiple * best[2], max_pool), sizes) for s in spec.stages
        ]
        start = predict(elastic_allocation(spec, vector, sizes))
        if start.time.mean <= deadline:
            assert plan.prediction.cost.mean <= start.cost.mean


def test_a_replan_keeps_the_plan_in_force_when_it_is_the_cheapest() -> None:
    """The case hypothesis found: with a lax deadline, the descents from the static warm starts
    end in a plan costlier than following the plan in force on (a local optimum they do not
    reach); the plan in force is now a warm start of the re-plan."""
    spec = ExperimentSpec.successive_halving(4, [1, 2, 3], 2)
    profile = Profile.scaling(1.0, {2: 1.5, 4: 2.0}, segment_gap=(1.0,))
    first = plan_elastic(spec, profile, 20.0, DEVICE_SECONDS, options=PlanOptions(samples=4))
    record = plan_record(first, profile, "planned at the study's start")
    result, _ = replan(record, 0, 0.0, 0.0)
    assert result.progress is not None
    kept = simulate(
        spec, first.plan.allocation, profile, DEVICE_SECONDS, samples=4, progress=result.progress
    )
    assert kept.time.mean <= 20.0
    static = result.static.prediction.cost.mean
    assert kept.cost.mean < static  # not the static plan: only the plan in force is this cheap
    assert result.plan.prediction.cost.mean <= kept.cost.mean
