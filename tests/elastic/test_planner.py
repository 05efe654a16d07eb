"""The elastic planner (RubberBand, EuroSys 2021): the DAG, its simulator and Algorithm 2."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.elastic import (
    Allocation,
    CostModel,
    ExperimentSpec,
    NodeKind,
    PlanningError,
    PlanOptions,
    Profile,
    Progress,
    Stage,
    StageShape,
    critical_path,
    plan_elastic,
    simulate,
    to_dag,
)
from hpctune.elastic.allocation import (
    device_sizes,
    fair_values,
    static_allocation,
    step_down,
)
from hpctune.elastic.cost import device_billing, parse_tres_weights
from hpctune.elastic.planner import naive_elastic
from hpctune.elastic.predict import mean_latencies
from hpctune.elastic.profile import at_together

# -- the paper's example (§6.3.1, Tables 2 and 3) ----------------------------------------------

PAPER_SPEC = ExperimentSpec.successive_halving(32, [1, 4, 13, 50], 3)
# ResNet-101-like data-parallel scaling: 120 s an epoch on one GPU; 15 s to scale and to start.
PAPER_PROFILE = Profile.scaling(
    120.0,
    {2: 1.95, 4: 3.7, 8: 6.9},
    cv=0.05,
    queue_wait={1: (15.0,)},
    startup=(15.0,),
)
PAPER_COST = CostModel(price=3.06)  # a p3.8xlarge's GPU-hour


def test_the_paper_example_has_its_stages() -> None:
    assert [PAPER_SPEC.get_stage(i) for i in range(PAPER_SPEC.num_stages())] == [
        (32, 1),
        (10, 3),
        (3, 9),
        (1, 37),
    ]


def test_the_paper_example_halves_the_cost_at_a_tight_deadline() -> None:
    result = plan_elastic(
        PAPER_SPEC, PAPER_PROFILE, 20 * 60, PAPER_COST, options=PlanOptions(samples=16)
    )
    plan, static = result.plan, result.static
    assert plan.kind == "elastic"
    assert plan.feasible
    assert static.feasible
    assert plan.prediction.time.mean <= 20 * 60
    # the paper: $15.68 against $34.00; here about half as well
    assert result.saving >= 1.7, (plan.prediction.cost.mean, static.prediction.cost.mean)
    # the allocation shrinks across rungs and the survivors get more GPUs each (Table 3)
    pools = plan.allocation.vector
    per_trial = [s.devices for s in plan.allocation.shapes]
    assert all(a >= b for a, b in itertools.pairwise(pools)), pools
    assert pools[0] > pools[-1]
    assert all(a <= b for a, b in itertools.pairwise(per_trial)), per_trial
    assert per_trial[-1] > per_trial[0]
    # the naive elastic baseline (the same GPUs per trial throughout) costs more (§6.3.1)
    naive = naive_elastic(PAPER_SPEC, PAPER_PROFILE, 20 * 60, PAPER_COST, options=PlanOptions(16))
    assert naive is not None
    assert naive.prediction.time.mean <= 20 * 60
    assert len({s.devices for s in naive.allocation.shapes}) == 1
    assert [s.workers for s in naive.allocation.shapes] == [32, 10, 3, 1]
    assert plan.prediction.cost.mean < naive.prediction.cost.mean


def test_the_paper_example_is_close_to_static_at_a_lax_deadline() -> None:
    tight = plan_elastic(
        PAPER_SPEC, PAPER_PROFILE, 20 * 60, PAPER_COST, options=PlanOptions(samples=16)
    )
    lax = plan_elastic(
        PAPER_SPEC, PAPER_PROFILE, 40 * 60, PAPER_COST, options=PlanOptions(samples=16)
    )
    assert lax.plan.feasible
    assert 1.0 <= lax.saving < 1.3 < tight.saving
    assert lax.static.prediction.cost.mean < tight.static.prediction.cost.mean


# -- the DAG and its critical path, by hand ----------------------------------------------------

TWO_STAGES = ExperimentSpec((Stage(2, 0, 2), Stage(1, 2, 4)))
CONSTANT = Profile(
    step_seconds={1: (10.0,)},
    segment_start=(1.0,),
    queue_wait={1: (5.0,)},
    startup=(3.0,),
    decision=(2.0,),
)
DEVICE_SECONDS = CostModel(price=3600.0)  # cost = device-seconds


def test_an_elastic_dag_by_hand() -> None:
    allocation = Allocation((StageShape(1, 2), StageShape(1, 1)))
    dag = to_dag(TWO_STAGES, allocation)
    kinds = [n.kind for n in dag.nodes]
    # two workers scale and start; stage 1 keeps one of them (same size): no SCALE, no INIT
    assert kinds.count(NodeKind.SCALE) == 2
    assert kinds.count(NodeKind.INIT) == 2
    assert kinds.count(NodeKind.TRAIN) == 3
    assert kinds.count(NodeKind.SYNC) == 2
    lat = mean_latencies(dag, CONSTANT)
    path = [dag.nodes[v].kind for v in critical_path(dag, lat)]
    assert path == [
        NodeKind.SCALE,
        NodeKind.INIT,
        NodeKind.TRAIN,
        NodeKind.SYNC,
        NodeKind.TRAIN,
        NodeKind.SYNC,
    ]
    held = simulate(TWO_STAGES, allocation, CONSTANT, DEVICE_SECONDS, samples=3)
    # 5 + 3 + (1 + 20) + 2 + (1 + 20) + 2
    assert held.time.mean == pytest.approx(54.0)
    # stage 0: one worker from 5 to its last segment's end 29, the kept one to the SYNC at 31;
    # stage 1: the kept worker from 31 to 52
    assert held.cost.mean == pytest.approx(24.0 + 26.0 + 21.0)
    assert held.critical == pytest.approx({"SCALE": 5.0, "INIT": 3.0, "TRAIN": 42.0, "SYNC": 4.0})
    used = simulate(
        TWO_STAGES, allocation, CONSTANT, CostModel(basis="used", price=3600.0), samples=3
    )
    assert used.cost.mean == pytest.approx(3 * 21.0)


def test_a_static_dag_by_hand() -> None:
    allocation = static_allocation(TWO_STAGES, 2, (1,))
    assert allocation.vector == (2, 2)
    prediction = simulate(TWO_STAGES, allocation, CONSTANT, DEVICE_SECONDS, samples=3)
    assert prediction.time.mean == pytest.approx(54.0)
    assert prediction.cost.mean == pytest.approx(2 * (54.0 - 5.0))  # idle in stage 1 too


def test_a_dag_in_waves_and_a_resize() -> None:
    """Three trials on two workers run in two waves; the next stage resizes (new workers)."""
    spec = ExperimentSpec((Stage(3, 0, 1), Stage(1, 1, 2)))
    profile = Profile(
        step_seconds={1: (10.0,), 2: (6.0,)},
        queue_wait={1: (5.0,), 2: (7.0,)},
        startup=(3.0,),
    )
    allocation = Allocation((StageShape(1, 2), StageShape(2, 1)))
    dag = to_dag(spec, allocation)
    assert dag.count(NodeKind.SCALE) == 3
    prediction = simulate(spec, allocation, profile, DEVICE_SECONDS, samples=2)
    # stage 0: 5 + 3 + 10 + 10 = 28; stage 1 scales a 2-device worker: 7 + 3 + 6
    assert prediction.time.mean == pytest.approx(28.0 + 16.0)
    # stage 0: worker 0 holds 5..28, worker 1 5..18; stage 1: 2 devices from 35 to 44
    assert prediction.cost.mean == pytest.approx(23.0 + 13.0 + 2 * 9.0)


# A profile that measured a worker's start-up, warm-up and steps with two workers at once.
TOGETHER = Profile(
    step_seconds={1: (10.0,)},
    segment_start=(1.0,),
    queue_wait={1: (5.0,)},
    startup=(3.0,),
    startup_together={2: (4.0,)},
    warmup=(0.5,),
    warmup_together={2: (1.5,)},
    segment_gap=(0.25,),
    crowding={2: (1.5,)},
    decision=(2.0,),
)


def test_a_profile_answers_alike_from_its_memo_and_a_copy_keeps_none_of_it() -> None:
    """The simulator's repeated questions are answered from a memo: the same answers as a
    fresh profile's, and a changed copy (``dataclasses.replace``) computes its own."""
    import dataclasses

    profile = Profile(step_seconds={1: (10.0, 12.0), 4: (3.0,)}, crowding={2: (1.5,)})
    first = [
        (profile.step_mean(d), profile.step_sd(d), profile.crowding_at(d)) for d in (1, 2, 3, 8)
    ]
    again = [
        (profile.step_mean(d), profile.step_sd(d), profile.crowding_at(d)) for d in (1, 2, 3, 8)
    ]
    fresh = Profile(step_seconds={1: (10.0, 12.0), 4: (3.0,)}, crowding={2: (1.5,)})
    assert (
        first
        == again
        == [(fresh.step_mean(d), fresh.step_sd(d), fresh.crowding_at(d)) for d in (1, 2, 3, 8)]
    )
    assert profile == fresh  # the memo is not part of what a profile is
    slower = dataclasses.replace(profile, step_seconds={1: (20.0, 24.0)}, crowding={2: (3.0,)})
    assert slower.step_mean(1) == pytest.approx(2 * profile.step_mean(1))
    assert slower.crowding_at(2) == pytest.approx(3.0)
    assert profile.crowding_at(2) == pytest.approx(1.5)


def test_at_together_interpolates_and_extrapolates() -> None:
    assert at_together((2.0,), {4: (5.0,)}, 1) == (2.0,)
    assert at_together((2.0,), {4: (5.0,)}, 4) == (5.0,)
    assert at_together((2.0,), {4: (5.0,)}, 2) == pytest.approx((3.0,))  # 2 + 3 * 1/3
    assert at_together((2.0,), {4: (5.0,)}, 3) == pytest.approx((4.0,))
    assert at_together((2.0,), {4: (5.0,)}, 6) == pytest.approx((7.0,))  # slope 1 beyond 4
    assert at_together((2.0,), {}, 8) == (2.0,)  # measured alone only: as alone
    assert at_together((2.0,), {4: (1.0,)}, 8) == (1.0,)  # never below the largest measured
    # samples keep their spread, scaled to the interpolated mean
    assert at_together((1.0, 3.0), {3: (4.0,)}, 2) == pytest.approx((1.5, 4.5))
    assert at_together((0.0,), {3: (3.0,)}, 2) == pytest.approx((1.5,))  # 0 + 3 x 1/2
    with pytest.raises(PlanningError, match="crowding"):
        Profile(step_seconds={1: (1.0,)}, crowding={1: (2.0,)})  # n >= 2: alone is 1


def test_start_up_together_gaps_and_crowding_by_hand() -> None:
    """The DAG of test_an_elastic_dag_by_hand with a profile measured with workers together."""
    allocation = Allocation((StageShape(1, 2), StageShape(1, 1)))
    dag = to_dag(TWO_STAGES, allocation)
    inits = [n for n in dag.nodes if n.kind is NodeKind.INIT]
    trains = [n for n in dag.nodes if n.kind is NodeKind.TRAIN]
    assert [n.together for n in inits] == [2, 2]
    assert [(n.stage, n.together, n.gap) for n in trains] == [
        (0, 2, False),  # after its worker's INIT: no gap
        (0, 2, False),
        (1, 1, False),  # the kept worker's next segment, after the SYNC (which holds the gap)
    ]
    prediction = simulate(TWO_STAGES, allocation, TOGETHER, DEVICE_SECONDS, samples=3)
    # SCALE 5, INIT 4 + 1.5 (two at once), TRAIN 1 + 2 x 10 x 1.5 = 31 (two at once): 41.5;
    # SYNC 2: 43.5; the kept worker: 1 + 2 x 10 = 21: 64.5; SYNC 2
    assert prediction.time.mean == pytest.approx(66.5)
    # stage 0: both workers 5..41.5, the kept one on to the SYNC at 43.5; stage 1: 43.5..64.5
    assert prediction.cost.mean == pytest.approx(36.5 + 38.5 + 21.0)
    assert prediction.critical == pytest.approx(
        {"SCALE": 5.0, "INIT": 5.5, "TRAIN": 31.0 + 21.0, "SYNC": 4.0}
    )
    lat = mean_latencies(dag, TOGETHER)
    assert sorted(lat[[v for v, n in enumerate(dag.nodes) if n.kind is NodeKind.INIT]]) == [
        5.5,
        5.5,
    ]


def test_waves_pay_the_gap_and_a_static_pool_starts_together() -> None:
    spec = ExperimentSpec((Stage(3, 0, 1),))
    profile = Profile(
        step_seconds={1: (10.0,)},
        startup=(3.0,),
        segment_gap=(0.5,),
        crowding={2: (2.0,)},
    )
    elastic = simulate(spec, Allocation((StageShape(1, 2),)), profile, DEVICE_SECONDS)
    # worker 0: INIT 3 (no together measured: as alone), 10 x 2, then gap 0.5 + 10 x 2
    assert elastic.time.mean == pytest.approx(3.0 + 20.0 + 20.5)
    static = to_dag(TWO_STAGES, static_allocation(TWO_STAGES, 2, (1,)))
    assert [n.together for n in static.nodes if n.kind is NodeKind.INIT] == [2, 2]
    assert [n.gap for n in static.nodes if n.kind is NodeKind.TRAIN] == [False, False, False]
    prediction = simulate(
        TWO_STAGES, static_allocation(TWO_STAGES, 2, (1,)), TOGETHER, DEVICE_SECONDS, samples=3
    )
    # as the elastic plan's time: the pool holds 2 devices from 5 to 66.5
    assert prediction.time.mean == pytest.approx(66.5)
    assert prediction.cost.mean == pytest.approx(2 * (66.5 - 5.0))


def test_a_version_1_profile_reads_with_nothing_together(tmp_path) -> None:  # type: ignore[no-untyped-def]
    old = {"version": 1, "step_seconds": {"1": [0.5]}, "startup": [1.5]}
    profile = Profile.from_dict(old)
    assert profile.startup_at(4) == (1.5,)
    assert profile.warmup == (0.0,)
    assert profile.segment_gap == (0.0,)
    assert profile.crowding_at(4) == 1.0
    TOGETHER.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json") == TOGETHER


def test_a_replan_starts_from_progress() -> None:
    allocation = Allocation((StageShape(1, 2), StageShape(1, 1)))
    progress = Progress(stage=0, steps_left=(1, 0), elapsed=100.0, spent=7.0, devices=1, workers=2)
    prediction = simulate(
        TWO_STAGES, allocation, CONSTANT, DEVICE_SECONDS, samples=2, progress=progress
    )
    # one trial has a step left (no segment start: it is running), then SYNC, stage 1
    assert prediction.time.mean == pytest.approx(100.0 + 10.0 + 2.0 + 21.0 + 2.0)
    with pytest.raises(PlanningError, match="steps_left"):
        simulate(
            TWO_STAGES,
            allocation,
            CONSTANT,
            DEVICE_SECONDS,
            progress=Progress(0, (1,), 0.0, 0.0, 1, 2),
        )


# -- fairness, cost, profile -------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(trials=st.integers(1, 60), max_devices=st.integers(1, 8))
def test_fair_values_split_trials_evenly(trials: int, max_devices: int) -> None:
    sizes = device_sizes(max_devices)
    values = fair_values(trials, sizes)
    for a in values:
        assert (a >= trials and a % trials == 0 and a // trials in sizes) or trials % a == 0
    a = values[-1]
    while (lower := step_down(trials, a, sizes)) is not None:
        assert lower < a
        assert lower in values
        a = lower
    assert a == 1


def test_whole_node_sizes() -> None:
    assert device_sizes(16, node_devices=4) == (1, 2, 3, 4, 8, 12, 16)


def test_tres_billing_weights() -> None:
    weights = parse_tres_weights("CPU=1.0,Mem=0.25G,GRES/gpu=2.0")
    assert weights == {"cpu": 1.0, "mem": 0.25, "gres/gpu": 2.0}
    assert device_billing(weights, cpus_per_device=4, mem_gb_per_device=8) == 4 + 2 + 2
    with pytest.raises(PlanningError, match="NAME=number"):
        parse_tres_weights("CPU=lots")
    assert CostModel(billing_weight=8.0, price=0.5).of(3600.0) == pytest.approx(4.0)


def test_profile_round_trip_and_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = PAPER_PROFILE.save(tmp_path / "profile.json")
    again = Profile.load(tmp_path)
    assert again == PAPER_PROFILE
    assert path.exists()
    assert again.step_mean(8) == pytest.approx(120.0 / 6.9, rel=1e-3)
    assert 1.95 < again.speedup(3) < 3.7  # interpolated between measured sizes
    with pytest.raises(PlanningError, match="does not exist"):
        Profile.load(tmp_path / "nothing.json")
    with pytest.raises(PlanningError, match="at least one size"):
        Profile(step_seconds={})


# -- the planner's guarantees ------------------------------------------------------------------


def draw_experiment(
    draw: st.DrawFn, *, min_rungs: int = 1, between: bool = False
) -> tuple[ExperimentSpec, Profile]:
    """A random SHA experiment and profile (scaling up to 4 devices, SCALE and INIT drawn;
    ``between``: SYNC and the gap between a worker's segments drawn too)."""
    trials = draw(st.integers(2, 12))
    eta = draw(st.integers(2, 3))
    milestones = sorted(draw(st.sets(st.integers(1, 20), min_size=min_rungs, max_size=3)))
    spec = ExperimentSpec.successive_halving(trials, milestones, eta)
    s2 = draw(st.floats(1.2, 2.0))
    s4 = draw(st.floats(s2 + 0.1, 4.0))
    latencies: dict[str, Any] = {}
    if between:
        latencies["decision"] = (draw(st.floats(0.0, 10.0)),)
        latencies["segment_gap"] = (draw(st.floats(0.0, 5.0)),)
    profile = Profile.scaling(
        draw(st.floats(1.0, 30.0)),
        {2: s2, 4: s4},
        cv=draw(st.sampled_from([0.0, 0.1])),
        samples=8,
        queue_wait={1: (draw(st.floats(0.0, 20.0)),)},
        startup=(draw(st.floats(0.0, 20.0)),),
        **latencies,
    )
    return spec, profile


@st.composite
def problems(draw):  # type: ignore[no-untyped-def]
    spec, profile = draw_experiment(draw)
    deadline = draw(st.floats(20.0, 2000.0))
    return spec, profile, deadline


@settings(max_examples=25, deadline=None)
@given(problems())
def test_the_plan_is_never_worse_than_its_warm_start(problem) -> None:  # type: ignore[no-untyped-def]
    spec, profile, deadline = problem
    options = PlanOptions(samples=4)
    result = plan_elastic(spec, profile, deadline, DEVICE_SECONDS, options=options)
    plan, static = result.plan, result.static
    if static.feasible:
        # a feasible plan exists: the plan meets the deadline and costs no more
        assert plan.feasible
        assert plan.prediction.time.mean <= deadline
        assert plan.prediction.cost.mean <= static.prediction.cost.mean
        feasible = [d for d in result.descents if d.feasible]
        assert all(plan.prediction.cost.mean <= d.prediction.cost.mean for d in feasible)
        naive = naive_elastic(spec, profile, deadline, DEVICE_SECONDS, options=options)
        assert naive is None or plan.prediction.cost.mean <= naive.prediction.cost.mean
    else:
        assert not plan.feasible
        assert plan.kind == "static"
    for stage, shape in zip(spec.stages, plan.allocation.shapes, strict=True):
        if plan.allocation.static_pool is None:  # fair shares
            assert shape.workers == stage.trials or (
                shape.devices == 1 and stage.trials % shape.workers == 0
            )
        assert shape.devices <= profile.max_devices
    assert plan.to_dict() == type(plan).from_dict(plan.to_dict()).to_dict()


def test_an_impossible_deadline_is_reported() -> None:
    result = plan_elastic(PAPER_SPEC, PAPER_PROFILE, 60.0, PAPER_COST, options=PlanOptions(8))
    assert not result.feasible
    assert result.plan.prediction.time.mean > 60.0
    with pytest.raises(PlanningError, match="deadline"):
        plan_elastic(PAPER_SPEC, PAPER_PROFILE, -1.0, PAPER_COST)


def test_a_plan_is_a_pure_function_of_its_inputs() -> None:
    a = plan_elastic(PAPER_SPEC, PAPER_PROFILE, 1500.0, PAPER_COST, options=PlanOptions(8))
    b = plan_elastic(PAPER_SPEC, PAPER_PROFILE, 1500.0, PAPER_COST, options=PlanOptions(8))
    assert a.to_dict() == b.to_dict()
    assert np.isfinite(a.plan.prediction.cost.mean)


def test_a_quantile_deadline_is_stricter_than_the_mean() -> None:
    noisy = Profile.scaling(
        120.0, {2: 1.95, 4: 3.7, 8: 6.9}, cv=0.5, queue_wait={1: (15.0,)}, startup=(15.0,)
    )
    deadline = 1450.0
    mean = plan_elastic(PAPER_SPEC, noisy, deadline, PAPER_COST, options=PlanOptions(16))
    p90 = plan_elastic(
        PAPER_SPEC, noisy, deadline, PAPER_COST, options=PlanOptions(16, quantile=0.9)
    )
    assert mean.plan.prediction.time.mean <= deadline < mean.plan.prediction.time.p90
    assert p90.plan.prediction.time.p90 <= deadline
    assert p90.plan.prediction.cost.mean > mean.plan.prediction.cost.mean


def test_a_replan_starts_where_the_study_stands() -> None:
    first = plan_elastic(PAPER_SPEC, PAPER_PROFILE, 20 * 60, PAPER_COST, options=PlanOptions(8))
    shape = first.plan.allocation.shapes[1]
    # stage 1 runs: 5 minutes gone, $5 spent, each trial with 1 of its 3 epochs left
    progress = Progress(1, (1,) * 10, 300.0, 5.0, shape.devices, shape.workers)
    again = plan_elastic(
        PAPER_SPEC, PAPER_PROFILE, 20 * 60, PAPER_COST, progress=progress, options=PlanOptions(8)
    )
    assert again.progress == progress
    assert again.feasible
    assert 300.0 < again.plan.prediction.time.mean <= 20 * 60
    assert again.plan.prediction.cost.mean > 5.0
    assert again.plan.prediction.cost.mean < again.static.prediction.cost.mean
    # 10 minutes gone with 2 epochs left: no plan finishes in 20 minutes
    late = Progress(1, (2,) * 10, 600.0, 5.0, shape.devices, shape.workers)
    assert not plan_elastic(
        PAPER_SPEC, PAPER_PROFILE, 20 * 60, PAPER_COST, progress=late, options=PlanOptions(8)
    ).feasible


@settings(max_examples=30, deadline=None)
@given(problems(), st.integers(0, 2**16), st.booleans())
def test_the_critical_path_is_the_longest_path(problem, seed: int, static: bool) -> None:  # type: ignore[no-untyped-def]
    """On random DAGs with random latencies: the critical path is a chain of predecessors from a
    source to the end whose latencies add up to the end's finish time, and every node finishes
    after each of its predecessors by exactly its latency or more."""
    from hpctune.elastic.dag import finish_times
    from hpctune.elastic.predict import sample_latencies

    spec, profile, _ = problem
    sizes = device_sizes(profile.max_devices)
    rng = np.random.default_rng(seed)
    if static:
        allocation = static_allocation(spec, int(rng.integers(1, 40)), sizes)
    else:
        allocation = Allocation(
            tuple(
                StageShape(int(rng.choice(sizes)), int(rng.integers(1, s.trials + 1)))
                for s in spec.stages
            )
        )
    dag = to_dag(spec, allocation)
    lat = sample_latencies(dag, profile, rng, 1)[0] + rng.uniform(0, 1, len(dag.nodes))
    finish = finish_times(dag, lat[None, :])[0]
    path = critical_path(dag, lat)
    assert path[-1] == dag.end
    assert not dag.nodes[path[0]].preds
    assert all(a in dag.nodes[b].preds for a, b in itertools.pairwise(path))
    assert sum(lat[v] for v in path) == pytest.approx(finish[dag.end])
    for v, node in enumerate(dag.nodes):
        for p in node.preds:
            assert p < v
            assert finish[v] >= finish[p] + lat[v] - 1e-9
