"""Properties of search plans and their stage trees on random studies.

Whatever trials arrive, with whatever checkpoints present: the stages serving a trial train
exactly that trial's configuration at every step from a state of its own prefix, every step is
trained once, and running every stage answers every request (the stateless regeneration loop).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.stagetree.makespan import simulate_plan
from hpctune.stagetree.pieces import ConfigPiece, trial_stages
from hpctune.stagetree.plan import RequestStatus, SearchPlan
from hpctune.stagetree.schedulers import Scheduler
from hpctune.stagetree.tree import Point, StageTree, build_stage_tree, needed_checkpoints

MAX = 12
LRS = [0.1, 0.05, 0.01]


@st.composite
def trials(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """A piecewise lr and a batch-size milestone schedule; the request's end step."""
    milestones = sorted(draw(st.sets(st.integers(1, MAX - 1), max_size=3)))
    values = draw(
        st.lists(st.sampled_from(LRS), min_size=len(milestones) + 1, max_size=len(milestones) + 1)
    )
    bs_milestones = sorted(draw(st.sets(st.integers(1, MAX - 1), max_size=1)))
    config = {
        "lr": {"schedule": "piecewise", "values": values, "milestones": milestones},
        "batch_size": {
            "schedule": "multistep",
            "base": 32,
            "milestones": bs_milestones,
            "gamma": 2,
            "integer": True,
        },
    }
    return config, draw(st.integers(1, MAX))


def config_at(config: dict[str, Any], step: int) -> ConfigPiece:
    return next(s.config for s in trial_stages(config, MAX) if s.start <= step < s.end)


def serving_chain(tree: StageTree, trial: int) -> list[int]:
    """The stages a trial's request needs, from its top-level stage down to its own stage."""
    (leaf,) = [s.id for s in tree.stages if trial in s.trials]
    chain = [leaf]
    while (parent := tree.stages[chain[-1]].parent) is not None:
        chain.append(parent)
    return chain[::-1]


def check_tree(plan: SearchPlan, tree: StageTree, configs: dict[int, dict[str, Any]]) -> None:
    for trial, path in plan.trials.items():
        request = plan.nodes[path.nodes[-1]].requests[path.end]
        if trial in tree.answered or request.status is RequestStatus.DONE:
            continue
        chain = [tree.stages[i] for i in serving_chain(tree, trial)]
        top = chain[0]
        if top.source is None:
            assert top.start == 0
        else:  # the checkpoint lies on the trial's own prefix
            assert top.source.node in path.nodes
            assert top.source.step == top.start
            assert top.start in plan.nodes[top.source.node].checkpoints
            node = plan.nodes[top.source.node]
            assert node.start <= top.start
        for a, b in itertools.pairwise(chain):
            assert a.end == b.start
        assert chain[-1].end == path.end
        for stage in chain:
            assert stage.node in path.nodes
            for step in range(stage.start, stage.end):
                assert stage.config == config_at(configs[trial], step)


@settings(max_examples=150, deadline=None)
@given(st.lists(trials(), min_size=1, max_size=8), st.data())
def test_stage_trees_serve_every_request_with_its_own_configuration(
    drawn: list[tuple[dict[str, Any], int]], data: st.DataObject
) -> None:
    plan = SearchPlan()
    configs = {t: c for t, (c, _) in enumerate(drawn)}
    for t, (config, end) in enumerate(drawn):
        plan.add_trial(t, trial_stages(config, MAX), end=end)
    fresh = build_stage_tree(plan)
    check_tree(plan, fresh, configs)
    # from scratch, the tree trains exactly the unique steps, each once
    assert sum(s.steps for s in fresh.stages) == plan.unique_steps()
    covered = [(s.node, step) for s in fresh.stages for step in range(s.start, s.end)]
    assert len(covered) == len(set(covered))

    # some checkpoints exist already (on live trials' stretches)
    for node in plan.nodes:
        steps = range(node.start + 1, plan.node_end(node.id) + 1)
        for step in data.draw(st.sets(st.sampled_from(steps), max_size=2)) if steps else ():
            plan.add_checkpoint(node.id, step, f"n{node.id}-s{step}")
    tree = build_stage_tree(plan)
    check_tree(plan, tree, configs)
    assert sum(s.steps for s in tree.stages) <= sum(s.steps for s in fresh.stages)

    # JSON round trip gives the same tree
    again = SearchPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert build_stage_tree(again) == tree

    # deleting the checkpoints no live trial needs changes nothing
    needed = needed_checkpoints(again)
    for node in again.nodes:
        node.checkpoints = {
            s: c for s, c in node.checkpoints.items() if Point(node.id, s) in needed
        }
    assert build_stage_tree(again) == tree

    # run every stage (parents first), saving its end state: every request is answered
    for stage in tree.stages:
        plan.add_checkpoint(stage.node, stage.end, f"stage-{stage.id}")
    for node in plan.nodes:
        for request in node.requests.values():
            assert request.status is RequestStatus.DONE
    assert build_stage_tree(plan).stages == []


@settings(max_examples=100, deadline=None)
@given(
    st.lists(trials(), min_size=1, max_size=8),
    st.integers(min_value=1, max_value=4),
    st.sampled_from(list(Scheduler)),
    st.booleans(),
    st.booleans(),
)
def test_the_stateless_scheduler_trains_every_unique_step_exactly_once(
    drawn: list[tuple[dict[str, Any], int]],
    workers: int,
    scheduler: Scheduler,
    promote: bool,
    whole: bool,
) -> None:
    """Stage trees regenerated at every decision, running nodes and scheduled requests: no
    step is trained twice, also when answered trials are extended (a rung promotion) given a
    checkpoint at every step."""
    plan = SearchPlan()
    stages = {t: trial_stages(c, MAX) for t, (c, _) in enumerate(drawn)}
    for t, (_, end) in enumerate(drawn):
        plan.add_trial(t, stages[t], end=min(end, MAX // 2) if promote else end)
    extended: set[int] = set()

    def on_answer(done: list[int], now: float) -> None:
        for t in done:
            if promote and t not in extended and plan.trials[t].end < MAX:
                extended.add(t)
                if plan.extend_trial(t, stages[t], MAX):
                    on_answer([t], now)

    every = 1 if promote else None  # promotions branch inside trained stretches: need those
    sim, answered = simulate_plan(
        plan,
        scheduler,
        workers,
        checkpoint_every=every,
        claim_whole_nodes=whole,
        on_answer=on_answer,
    )
    assert sim.train_seconds == plan.unique_steps()
    assert sorted(answered) == sorted(plan.trials)
    for t, path in plan.trials.items():
        assert answered[t] >= path.end  # one second per step: no trial beats its own length
        assert plan.nodes[path.nodes[-1]].requests[path.end].status is RequestStatus.DONE
    assert not any(n.running for n in plan.nodes)
    assert sim.makespan >= plan.unique_steps() / workers


def test_a_late_branch_inside_a_trained_stretch_retrains_without_in_stage_checkpoints() -> None:
    """Hippo §3.2: a request branching where no checkpoint was kept retrains from the last one."""
    constant = {"lr": {"schedule": "constant", "value": 0.1}}
    decay = {"lr": {"schedule": "piecewise", "values": [0.1, 0.05], "milestones": [2]}}
    for every, trained in ((None, 4 + 2 + 2), (1, 4 + 2)):  # steps 0-2 again, or not
        plan = SearchPlan()
        plan.add_trial(0, trial_stages(constant, 4))

        def late(done: list[int], now: float, plan: SearchPlan = plan) -> None:
            if 0 in done:  # trial 1 arrives after trial 0 trained steps 0-4
                plan.add_trial(1, trial_stages(decay, 4))

        sim, _ = simulate_plan(plan, Scheduler.BFS, 1, checkpoint_every=every, on_answer=late)
        assert sim.train_seconds == trained


@settings(max_examples=60, deadline=None)
@given(trials(), trials(), st.integers(1, MAX - 1))
def test_a_forked_trial_has_its_parents_configuration_before_the_fork_and_its_own_after(
    parent: tuple[dict[str, Any], int], child: tuple[dict[str, Any], int], fork: int
) -> None:
    from hpctune.stagetree.from_study import forked_stages

    stages = forked_stages(trial_stages(parent[0], MAX), fork, trial_stages(child[0], MAX))
    assert (stages[0].start, stages[-1].end) == (0, MAX)
    assert all(a.end == b.start for a, b in itertools.pairwise(stages))  # they tile [0, MAX)
    for stage in stages:
        assert stage.start < stage.end
        for step in range(stage.start, stage.end):
            source = parent[0] if step < fork else child[0]
            assert stage.config == config_at(source, step)
    # in a plan the fork shares the parent's path up to the fork step, and no further unless
    # the configurations agree there
    plan = SearchPlan()
    plan.add_trial(0, trial_stages(parent[0], MAX))
    plan.add_trial(1, stages)
    shared = sum(
        plan.nodes[n].refs > 1 for n in plan.trials[0].nodes if plan.nodes[n].start < fork
    )
    assert shared == sum(1 for n in plan.trials[0].nodes if plan.nodes[n].start < fork)
