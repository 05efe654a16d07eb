"""PBT (Li et al. 2019): Algorithm 1, opponents over generations, budget mode, GC, and Ray's
truncation variant; whole studies run by the controller on a synthetic trace (the simulator)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.errors import StudySpecError
from hpctune.journal.entities import TrialRecord
from hpctune.journal.state import CHECKPOINT_DELETED, SEGMENT_ASSIGNED, TRIAL_CREATED, StudyRecord
from hpctune.policies import (
    ActionKind,
    Event,
    OptionError,
    PbtPolicy,
    Policy,
    StudyView,
    TrialView,
    TruncationPbtPolicy,
    make_policy,
)
from hpctune.simulator import Simulator, SimulatorConfig, simulation_context
from hpctune.simulator.traces import Trace
from hpctune.spec import load_spec
from hpctune.study.space import parse_space
from hpctune.study.states import TrialStatus
from tests.conftest import write_study
from tests.policies._views import context

SPACE_TABLE: dict[str, Any] = {
    "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "batch_size": [16, 32, 64],
    "act": ["relu", "tanh"],
    "width": 64,
}
SPACE = parse_space(SPACE_TABLE, path=None)
DONE = TrialStatus.COMPLETED


def tv(
    tid: int,
    value: float | None,
    *,
    gen: int,
    status: TrialStatus = DONE,
    initiator: int | None = None,
    end: int | None = None,
    checkpoint: int | None = None,
    parent: int | None = None,
) -> TrialView:
    """A trial of generation ``gen`` that ended with ``value`` at its end step."""
    end = end if end is not None else 2 * (gen + 1)
    values = np.array([] if value is None else [value], dtype=float)
    steps = np.array([] if value is None else [end], dtype=np.int64)
    return TrialView(
        trial_id=tid,
        status=status,
        params={"lr": 0.01, "batch_size": 32, "act": "relu", "width": 64},
        step=end,
        steps=steps,
        values=values,
        times=steps.astype(float),
        checkpoint_step=(checkpoint if checkpoint is not None else end)
        if status.is_final
        else None,
        parent_trial=parent,
        end_step=end,
        generation=gen,
        initiator=initiator,
        last_metrics={} if value is None else {"score": value},
    )


def view(
    trials: list[TrialView], *, slots: int = 4, max_steps: int = 20, remaining: int = 0
) -> StudyView:
    return StudyView(
        metric="score",
        mode="max",
        max_steps=max_steps,
        boundary=1,
        now=0.0,
        trials={t.trial_id: t for t in trials},
        free_slots=0,
        total_slots=slots,
        trials_remaining=remaining,
        space=SPACE,
    )


def pbt(**options: object) -> PbtPolicy:
    policy = make_policy(
        "pbt", {"population_size": 4, "steps_per_generation": 2, **options}, context()
    )
    assert isinstance(policy, PbtPolicy)
    return policy


RNG = np.random.default_rng(0)


def test_generation_zero_is_sampled_until_the_population_is_full() -> None:
    actions = list(pbt().decide(view([], remaining=10), Event.slot_free(3), RNG).actions)
    assert [(a.kind, a.params, a.generation, a.end_step) for a in actions] == [
        (ActionKind.START, None, 0, 2)
    ] * 3
    one_more = list(
        pbt()
        .decide(
            view([tv(0, None, gen=0, status=TrialStatus.RUNNING)] * 1, remaining=10),
            Event.slot_free(5),
            RNG,
        )
        .actions
    )
    assert len(one_more) == 3  # 1 exists, 3 more; nothing has ended to initiate


def test_the_oldest_uninitiated_ended_trial_initiates_and_the_fitter_is_the_parent() -> None:
    trials = [tv(0, 0.9, gen=0), tv(1, 0.5, gen=0), tv(2, 0.7, gen=0), tv(3, 0.1, gen=0)]
    trials.append(tv(4, None, gen=1, status=TrialStatus.RUNNING, initiator=0, parent=0))
    policy = pbt()
    actions = policy.get_new_suggestions(view(trials), 3, np.random.default_rng(1))
    assert [a.initiator for a in actions] == [1, 2, 3]  # 0 has initiated already
    assert all(a.kind is ActionKind.FORK and a.generation == 1 for a in actions)
    for action in actions:
        initiator = trials[action.initiator]  # type: ignore[index]
        parent = trials[action.trial_id]  # type: ignore[index]
        assert parent.last_value >= initiator.last_value  # the winner of the tournament
        assert action.step == parent.checkpoint_step == 2
        assert action.end_step == 4
        assert action.params != parent.params  # mutated
        assert action.params["width"] == 64  # fixed: never mutated


def test_tournament_ties_go_to_the_initiator_and_missing_values_lose() -> None:
    policy = pbt()
    v = view([tv(0, 0.5, gen=0), tv(1, 0.5, gen=0), tv(2, None, gen=0)])
    assert policy.tournament(v, v.trials[0], v.trials[1])[0].trial_id == 0
    assert policy.tournament(v, v.trials[1], v.trials[0])[0].trial_id == 1
    assert policy.tournament(v, v.trials[2], v.trials[0])[0].trial_id == 0
    assert policy.tournament(v, v.trials[0], None)[0].trial_id == 0


def test_opponents_come_from_the_past_k_generations_up_to_the_initiators() -> None:
    trials = [tv(i, 0.1 * i, gen=i // 2) for i in range(10)]  # generations 0..4, two each
    trials.append(tv(10, None, gen=3, status=TrialStatus.RUNNING))
    v = view(trials)
    assert [t.trial_id for t in pbt().opponents(v, v.trials[6])] == [4, 5, 7]  # gens 2, 3
    k3 = pbt(opponent_generations=3)
    assert [t.trial_id for t in k3.opponents(v, v.trials[6])] == [2, 3, 4, 5, 7]
    assert [t.trial_id for t in pbt(opponent_generations=1).opponents(v, v.trials[0])] == [1]
    # the opponent is drawn uniformly from them: over many draws each appears
    seen = Counter(
        pbt().reproduce(v, v.trials[6], np.random.default_rng(s)).reason.split("opponent ")[1][0]
        for s in range(60)
    )
    assert set(seen) == {"4", "5", "7"}


def test_budget_mode_waits_for_the_initiators_generation_to_fill() -> None:
    # population 4 on 2 slots: trial 3 (generation 0) still runs, so generation 1 has 3 trials
    trials = [tv(i, 0.1 * i, gen=0) for i in range(3)]
    trials.append(tv(3, None, gen=0, status=TrialStatus.RUNNING))
    trials += [
        tv(4, 0.5, gen=1, initiator=0, parent=0),
        tv(5, 0.6, gen=1, initiator=1, parent=1),
        tv(6, None, gen=1, status=TrialStatus.RUNNING, initiator=2, parent=2),
    ]
    v = view(trials, slots=2)
    policy = pbt()
    assert policy.budget_mode(v)
    assert policy.get_new_suggestions(v, 2, RNG) == []  # trial 4 waits for generation 1
    assert policy.holds_idle_workers(v)  # and the idle worker with it
    # without budget mode trials 4 and 5 initiate at once
    actions = pbt(budget=False).get_new_suggestions(v, 2, RNG)
    assert [a.initiator for a in actions] == [4, 5]
    # once trial 3 has ended and initiated, generation 1 is full and trial 4 goes first
    trials[3] = tv(3, 0.2, gen=0)
    actions = policy.get_new_suggestions(view(trials, slots=2), 2, RNG)
    assert [a.initiator for a in actions] == [3, 4]


def test_without_a_checkpoint_to_fork_from_the_child_starts_afresh_once() -> None:
    failed = [
        dataclasses.replace(tv(i, None, gen=0, status=TrialStatus.FAILED), checkpoint_step=None)
        for i in range(4)
    ]
    actions = pbt().get_new_suggestions(view(failed), 2, RNG)
    assert [(a.kind, a.initiator, a.generation, a.end_step) for a in actions] == [
        (ActionKind.START, 0, 1, 2),
        (ActionKind.START, 1, 1, 2),
    ]
    assert actions[0].params is not None
    assert "afresh" in actions[0].reason
    child = tv(4, None, gen=1, status=TrialStatus.RUNNING, initiator=0)
    again = pbt().get_new_suggestions(view([*failed, child]), 1, RNG)
    assert [a.initiator for a in again] == [1]  # trial 0 initiated already


def test_budget_mode_counts_a_generation_complete_when_it_can_grow_no_more() -> None:
    # trial 2 (generation 1) forked from an older parent and trained to max_steps, so it has no
    # child: generation 2 stays at one trial, and trial 4 must still initiate
    trials = [tv(0, 0.1, gen=0), tv(1, 0.2, gen=0)]
    trials += [
        tv(2, 0.5, gen=1, initiator=0, parent=0, end=20),
        tv(3, 0.4, gen=1, initiator=1, parent=1, end=4),
        tv(4, 0.6, gen=2, initiator=3, parent=3, end=6),
    ]
    v = view(trials, slots=1)
    policy = pbt(population_size=2)
    assert policy.budget_mode(v)
    assert policy.generation_complete(v, 2)
    assert [a.initiator for a in policy.get_new_suggestions(v, 1, RNG)] == [4]
    running = [*trials[:4], tv(4, None, gen=2, status=TrialStatus.RUNNING, initiator=3)]
    assert not policy.generation_complete(view(running, slots=1), 3)


def test_trials_ending_at_max_steps_do_not_initiate() -> None:
    trials = [tv(i, 0.1 * i, gen=0, end=20) for i in range(4)]
    policy = pbt()
    assert policy.get_new_suggestions(view(trials), 4, RNG) == []
    assert not policy.holds_idle_workers(view(trials))


# -- simulated studies: the controller's own PBT on a synthetic trace ----------------------

LRS = np.logspace(-4, 0, 81)  # 20 a decade: a x0.8 or x1.2 mutation moves to another row
Value = Callable[[float, int], float]  # (lr, step) -> the metric after that step


def lr_value(lr: float, step: int) -> float:
    """Grows with training, plus at most 1 for an lr near 0.1 / (1 + step / 10): the best lr
    decays."""
    target = 0.1 / (1 + step / 10)
    return step + 1.0 / (1.0 + abs(math.log(lr / target)))


def small_lr_value(lr: float, step: int) -> float:
    """Does not grow with training: older parents often win, and lineages reach max_steps in
    different generations."""
    return -lr


def lr_trace(max_steps: int, value: Value, seed: int) -> Trace:
    """Every configuration of SPACE with an lr of LRS, valued by ``value``; seeded step times
    in [0.5, 1.5) s set the order in which trials end."""
    rows = [
        (float(lr), size, act) for lr in LRS for size in (16, 32, 64) for act in ("relu", "tanh")
    ]
    hparams = [{"lr": lr, "batch_size": size, "act": act, "width": 64} for lr, size, act in rows]
    curves = [[value(lr, s) for s in range(1, max_steps + 1)] for lr, _, _ in rows]
    seconds = np.random.default_rng(seed).uniform(0.5, 1.5, (len(hparams), max_steps))
    return Trace(
        np.array(curves),
        seconds,
        tuple(hparams),
        metric="score",
        mode="max",
        random_level=0.0,
        search_space=SPACE_TABLE,
    )


@dataclasses.dataclass
class PbtRun:
    """A finished simulated study: the controller's record, its journal log and the forks the
    controller had to ignore (their parent's checkpoint was gone)."""

    record: StudyRecord
    log: list[tuple[str, int, float, dict[str, Any]]]  # (kind, trial, time, data)
    checkpoints: list[dict[str, Any]]  # the journal's checkpoints table
    ignored_forks: list[str]

    @property
    def trials(self) -> list[TrialRecord]:
        return list(self.record.trials.values())

    def value(self, trial: TrialRecord) -> float:
        """The trial's last value (-inf before its first report)."""
        return trial.curve_values[-1] if trial.curve_values else -math.inf


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def simulate_pbt(policy: Policy, trace: Trace, *, slots: int, seed: int = 0) -> PbtRun:
    """Run ``policy``'s class with its options (generation 0: ``population_size`` trials of the
    trace in a seeded order) with the controller on simulated workers, as ``hpctune simulate``
    does; the policy run is built for the trace's study."""
    options = policy.options  # type: ignore[attr-defined]
    policy = type(policy)(simulation_context(trace), options)  # type: ignore[call-arg]
    population = options.population_size
    # a study trains at most population x max_steps steps of at most 1.5 s, on >= 1 slot: a
    # policy that never ends (e.g. starting children afresh forever) is cut off, unfinished
    limit = 2 * 1.5 * population * trace.num_epochs
    config = SimulatorConfig(num_trials=population, max_time=limit)
    sim = Simulator(trace, policy, slots=slots, seed=seed, config=config)
    controller_logger = logging.getLogger("hpctune.controller")
    warnings = _Warnings()
    controller_logger.addHandler(warnings)
    try:
        sim.run()
    finally:
        controller_logger.removeHandler(warnings)
    log = [
        (row["kind"], int(row["trial"]), float(row["time"]), json.loads(row["data"]))
        for row in sim.journal.rows["log"]
    ]
    ignored = [m for m in warnings.messages if m.startswith("cannot fork")]
    return PbtRun(sim.record, log, list(sim.journal.rows["checkpoints"]), ignored)


def forks_from_deleted(run: PbtRun) -> list[int]:
    """The segments assigned to start from a checkpoint deleted before them (journal order),
    and the children whose checkpoint to fork from is not their parent's at the fork step."""
    bad = []
    deleted: set[int] = set()
    for kind, _, _, data in run.log:
        if kind == CHECKPOINT_DELETED:
            deleted.update(data["rows"])
        elif kind == SEGMENT_ASSIGNED and data.get("checkpoint_row") in deleted:
            bad.append(data["checkpoint_row"])
    for trial in run.trials:
        if trial.parent_trial is not None:
            ref = run.record.checkpoints[trial.parent_checkpoint_row]  # type: ignore[index]
            if (ref.trial_id, ref.step) != (trial.parent_trial, trial.parent_step):
                bad.append(ref.row)
    return bad


def initiator_generation_sizes(run: PbtRun) -> list[tuple[int, int]]:
    """At each reproduction (a trial created with an initiator, in journal order): the
    initiator's generation and how many trials it had then."""
    generation: dict[int, int] = {}
    sizes = []
    for kind, trial, _, data in run.log:
        if kind != TRIAL_CREATED:
            continue
        if data.get("initiator") is not None:
            g = generation[data["initiator"]]
            sizes.append((g, sum(n == g for n in generation.values())))
        generation[trial] = int(data.get("generation") or 0)
    return sizes


def peak_trials_with_checkpoints(run: PbtRun) -> int:
    """The most trials holding a live checkpoint at once (after each instant's checkpoints and
    deletions)."""
    changes: dict[float, list[tuple[int, bool]]] = {}  # time -> (checkpoint row, written)
    for row, ref in enumerate(run.checkpoints):
        changes.setdefault(float(ref["time"]), []).append((row, True))
    for kind, _, t, data in run.log:
        if kind == CHECKPOINT_DELETED:
            changes.setdefault(t, []).extend((row, False) for row in data["rows"])
    live: set[int] = set()
    peak = 0
    for t in sorted(changes):
        for row, written in changes[t]:
            if written:
                live.add(row)
            else:
                live.discard(row)
        peak = max(peak, len({run.checkpoints[row]["trial"] for row in live}))
    return peak


def lineage(run: PbtRun, trial: TrialRecord) -> list[TrialRecord]:
    """``trial`` and its ancestors, the oldest first."""
    line = [trial]
    while line[-1].parent_trial is not None:
        line.append(run.record.trials[line[-1].parent_trial])
    return line[::-1]


@pytest.mark.parametrize(("slots", "budget"), [(2, True), (4, False), (1, True), (8, False)])
def test_every_trial_initiates_once_and_generations_hold_the_population(
    slots: int, budget: bool
) -> None:
    policy = pbt(population_size=6 if budget else 4, steps_per_generation=2)
    pop = policy.options.population_size
    run = simulate_pbt(policy, lr_trace(12, lr_value, seed=slots), slots=slots, seed=slots)
    trials = run.trials
    assert policy.budget_mode(view([], slots=slots)) is budget
    assert all(t.status is DONE for t in trials)
    initiators = Counter(t.initiator for t in trials if t.initiator is not None)
    assert max(initiators.values()) == 1  # once and only once
    # every trial that ended before max_steps initiated
    assert {t.trial_id for t in trials if (t.end_step or 12) < 12} == set(initiators)
    sizes = Counter(t.generation or 0 for t in trials)
    assert sizes[0] == pop  # each trial has at most one child: generations never grow
    assert all(sizes[g + 1] <= sizes[g] for g in range(max(sizes)))
    assert len(sizes) >= 6  # 12 steps, 2 per generation (more when an older parent won)
    for t in trials:
        if t.initiator is not None:
            initiator = run.record.trials[t.initiator]
            assert t.generation == (initiator.generation or 0) + 1
            parent = run.record.trials[t.parent_trial]  # type: ignore[index]
            assert t.parent_step == parent.end_step
            # the child went on from its parent's checkpoint at the fork, and trained on
            first = run.record.segments[t.segments[0]]
            assert (first.start_step, first.checkpoint_row) == (
                t.parent_step,
                t.parent_checkpoint_row,
            )
            assert t.curve_steps == list(range(first.start_step + 1, t.step + 1))
    if budget:  # oldest first: initiators in creation order
        order = [t.initiator for t in trials if t.initiator is not None]
        assert order == sorted(order)
    assert forks_from_deleted(run) == []
    assert run.ignored_forks == []


def test_pbt_finds_a_decaying_learning_rate() -> None:
    policy = pbt(population_size=8, steps_per_generation=2, exclude=["batch_size", "act"])
    run = simulate_pbt(policy, lr_trace(20, lr_value, seed=0), slots=2, seed=0)
    best = max(run.trials, key=run.value)
    lrs = [float(t.params["lr"]) for t in lineage(run, best)]
    assert len(lrs) == 10
    assert np.mean(lrs[-3:]) < np.mean(lrs[:3])  # the target lr decays from 0.1 to 0.033
    # and the lineage tracks it: at step 20 its lr is within 1.3x of 0.033 (a tournament
    # won by the weaker trial ends near 20.2 on this trace)
    assert run.value(best) > 20 + 1 / (1 + math.log(1.3))
    for t in run.trials:  # excluded parameters never change along a lineage
        if t.parent_trial is not None:
            parent = run.record.trials[t.parent_trial]
            assert (t.params["batch_size"], t.params["act"]) == (
                parent.params["batch_size"],
                parent.params["act"],
            )


def test_gc_keeps_what_a_possible_child_needs_and_releases_the_rest() -> None:
    trace = lr_trace(16, lr_value, seed=1)
    run = simulate_pbt(pbt(population_size=4, steps_per_generation=2), trace, slots=2, seed=1)
    assert forks_from_deleted(run) == []
    assert run.ignored_forks == []
    kept = [t for t in run.trials if run.record.live_checkpoints(t.trial_id)]
    best = max(run.trials, key=run.value)
    assert [t.trial_id for t in kept] == [best.trial_id]  # at the end only the fittest
    # keep_last_checkpoints: the policy names no checkpoint to delete, and none is
    keep_all = pbt(population_size=4, steps_per_generation=2, keep_last_checkpoints=True)
    run = simulate_pbt(keep_all, trace, slots=2, seed=1)
    assert len(run.trials) > 4
    assert [kind for kind, *_ in run.log if kind == CHECKPOINT_DELETED] == []
    assert all(not ref.deleted for ref in run.record.checkpoints.values())


def test_gc_bound_during_a_run() -> None:
    policy = pbt(population_size=6, steps_per_generation=1)
    run = simulate_pbt(policy, lr_trace(12, lr_value, seed=2), slots=2, seed=2)
    assert forks_from_deleted(run) == []
    assert peak_trials_with_checkpoints(run) <= (2 + 1) * 6 + 1
    deleted = {
        row for kind, _, _, data in run.log if kind == CHECKPOINT_DELETED for row in data["rows"]
    }
    assert len(deleted) >= len(run.trials) - 1


def test_pbt_is_stateless_so_a_restarted_controller_decides_the_same() -> None:
    trials = [tv(i, 0.1 * i, gen=0) for i in range(4)]
    a = pbt().get_new_suggestions(view(trials), 4, np.random.default_rng(5))
    policy = pbt()
    assert policy.state_dict() == {}
    policy.load_state_dict(json.loads(json.dumps(policy.state_dict())))
    assert policy.get_new_suggestions(view(trials), 4, np.random.default_rng(5)) == a


def test_waiting_trials_resume_before_new_suggestions() -> None:
    trials = [tv(i, 0.1 * i, gen=0) for i in range(4)]
    trials.append(tv(4, None, gen=1, status=TrialStatus.QUEUED, initiator=0, parent=3))
    actions = list(pbt().decide(view(trials), Event.slot_free(2), RNG).actions)
    assert next((a.kind, a.trial_id) for a in actions) == (ActionKind.RESUME, 4)
    assert actions[1].kind is ActionKind.FORK
    assert actions[1].initiator == 1


def test_options_are_checked_with_their_names() -> None:
    for options, key in [
        ({"population_size": 1}, "population_size"),
        ({"steps_per_generation": 0}, "steps_per_generation"),
        ({"opponent_generations": 0}, "opponent_generations"),
        ({"comparison": "best"}, "comparison"),
        ({"factors": [0.8, -1]}, "factors"),
        ({"exclude": "lr"}, "exclude"),
        ({"objectives": ["acc:up"]}, "objectives"),
        ({"generations": 3}, "generations"),
    ]:
        with pytest.raises(OptionError) as info:
            make_policy("pbt", options, context())
        assert info.value.key == key
    for options, key in [
        ({"quantile_fraction": 0.6}, "quantile_fraction"),
        ({"resample_probability": 2.0}, "resample_probability"),
        ({"perturbation_interval": 0}, "perturbation_interval"),
    ]:
        with pytest.raises(OptionError) as info:
            make_policy("pbt-truncation", options, context())
        assert info.value.key == key
    with pytest.raises(OptionError, match="not in the search space"):
        pbt(exclude=["momentum"]).check_space(SPACE)


def test_the_spec_rejects_an_excluded_parameter_not_in_the_space(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = write_study(
        tmp_path,
        train="def train(ctx):\n    pass\n",
        space={"lr": {"type": "float", "low": 0.01, "high": 0.1}},
        policy={"name": "pbt", "exclude": ["momentum"]},
    )
    with pytest.raises(StudySpecError, match=r"policy\.exclude"):
        load_spec(path)


def test_pareto_and_lexicographic_objectives() -> None:
    a = tv(0, 0.9, gen=0)
    b = tv(1, 0.8, gen=0)
    a = TrialView(**{**a.__dict__, "last_metrics": {"score": 0.9, "loss": 0.5}})
    b = TrialView(**{**b.__dict__, "last_metrics": {"score": 0.8, "loss": 0.4}})
    v = view([a, b])
    lex = pbt(objectives=["score", "loss:min"])
    assert lex.tournament(v, b, a)[0].trial_id == 0  # score decides first
    pareto = pbt(objectives=["score", "loss:min"], comparison="pareto")
    assert pareto.tournament(v, b, a)[0].trial_id == 1  # neither dominates: the initiator
    assert pareto.tournament(v, a, b)[0].trial_id == 0


# -- pbt-truncation -------------------------------------------------------------------------


def running(tid: int, value: float, step: int) -> TrialView:
    return TrialView(
        trial_id=tid,
        status=TrialStatus.RUNNING,
        params={"lr": 0.01, "batch_size": 32, "act": "relu", "width": 64},
        step=step,
        steps=np.array([step]),
        values=np.array([value]),
        times=np.array([0.0]),
        checkpoint_step=step,
        generation=0,
    )


def test_truncation_bottom_quantile_clones_a_top_trial_every_interval() -> None:
    policy = make_policy(
        "pbt-truncation", {"population_size": 8, "perturbation_interval": 4}, context()
    )
    assert isinstance(policy, TruncationPbtPolicy)
    trials = [running(i, 0.1 * i, 4) for i in range(8)]
    v = view(trials, max_steps=20)
    assert policy.quantiles(v) == ([0, 1], [6, 7])
    assert policy.decide(v, Event.boundary(0, 3), RNG).actions[0].kind is ActionKind.CONTINUE
    assert policy.decide(v, Event.boundary(5, 4), RNG).actions[0].kind is ActionKind.CONTINUE
    stop = list(policy.decide(v, Event.boundary(0, 4), np.random.default_rng(2)).actions)
    assert stop[0].kind is ActionKind.TERMINATE
    assert stop[0].trial_id == 0
    state = json.loads(json.dumps(policy.state_dict()))
    restored = TruncationPbtPolicy(context(), policy.options)
    restored.load_state_dict(state)
    assert restored.state_dict() == policy.state_dict()
    assert policy.needed_checkpoints(v) == {policy.pending[0][1]}
    ended = {**v.trials, 0: TrialView(**{**trials[0].__dict__, "status": TrialStatus.TERMINATED})}
    v2 = view(list(ended.values()), max_steps=20)
    fork = list(restored.decide(v2, Event.slot_free(1), RNG).actions)
    assert len(fork) == 1
    assert fork[0].kind is ActionKind.FORK
    assert fork[0].trial_id in (6, 7)
    assert fork[0].step == 4
    assert fork[0].initiator == 0
    assert fork[0].generation == 1
    assert fork[0].end_step is None
    assert restored.pending == []
    # a trial checked at 4 waits a full interval
    assert policy.decide(v, Event.boundary(1, 6), RNG).actions[0].kind is ActionKind.TERMINATE
    assert policy.decide(v, Event.boundary(2, 4), RNG).actions[0].kind is ActionKind.CONTINUE
    assert policy.last_check[2] == 4
    assert policy.decide(v, Event.boundary(2, 7), RNG).actions[0].kind is ActionKind.CONTINUE
    assert policy.last_check[2] == 4


def test_truncation_starts_the_population_then_only_clones() -> None:
    policy = make_policy("pbt-truncation", {"population_size": 3}, context())
    assert len(list(policy.decide(view([], remaining=10), Event.slot_free(5), RNG).actions)) == 3
    full = view([running(i, 0.1, 1) for i in range(3)], remaining=10)
    assert list(policy.decide(full, Event.slot_free(2), RNG).actions) == []


def test_truncation_in_a_study_replaces_each_stopped_trial_with_a_clone_of_a_better_one() -> None:
    policy = make_policy(
        "pbt-truncation", {"population_size": 8, "perturbation_interval": 2}, context()
    )
    run = simulate_pbt(policy, lr_trace(12, small_lr_value, seed=4), slots=8, seed=4)
    assert forks_from_deleted(run) == []
    assert run.ignored_forks == []
    stopped = [t for t in run.trials if t.status is TrialStatus.TERMINATED]
    assert len(stopped) >= 8
    clones = [t for t in run.trials if t.initiator is not None]
    by_initiator = {t.initiator: t for t in clones}
    assert len(by_initiator) == len(clones)  # one clone per stopped trial
    assert set(by_initiator) == {t.trial_id for t in stopped}
    for trial in stopped:
        clone = by_initiator[trial.trial_id]
        parent = run.record.trials[clone.parent_trial]  # type: ignore[index]
        assert f"cloning trial {parent.trial_id}" in trial.reason
        at_fork = parent.curve_values[parent.curve_steps.index(clone.parent_step)]
        assert at_fork >= run.value(trial)  # from the top quantile into the bottom one's place
    # the population stays 8: at the end, 8 trials have trained to max_steps
    assert sorted(t.step for t in run.trials if t.status is DONE) == [12] * 8


@settings(max_examples=80, deadline=None)
@given(
    population=st.integers(2, 6),
    slots=st.integers(1, 4),
    k=st.integers(1, 3),
    spg=st.integers(1, 3),
    generations=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    budget=st.sampled_from([None, True, False]),
    cumulative=st.booleans(),
)
def test_property_gc_never_removes_what_a_child_forks_from(
    population: int,
    slots: int,
    k: int,
    spg: int,
    generations: int,
    seed: int,
    budget: bool | None,
    cumulative: bool,
) -> None:
    policy = pbt(
        population_size=population,
        steps_per_generation=spg,
        opponent_generations=k,
        budget=budget,
    )
    max_steps = spg * generations
    trace = lr_trace(max_steps, lr_value if cumulative else small_lr_value, seed)
    run = simulate_pbt(policy, trace, slots=slots, seed=seed)
    assert forks_from_deleted(run) == []  # every fork found its parent's checkpoint
    assert run.ignored_forks == []
    trials = run.trials
    assert all(t.status is DONE for t in trials)
    initiators = Counter(t.initiator for t in trials if t.initiator is not None)
    assert all(n == 1 for n in initiators.values())
    assert set(initiators) == {t.trial_id for t in trials if (t.end_step or max_steps) < max_steps}
    assert Counter(t.generation for t in trials)[0] == population
    sizes = initiator_generation_sizes(run)
    assert len(sizes) == len(initiators)
    if budget or (budget is None and population > slots):
        # budget mode: a reproduction starts only once the initiator's generation is full: the
        # population, or every child generation g - 1 could have (members at max_steps have none)
        def final_size(g: int) -> int:
            if g == 0:
                return population
            return sum(
                (t.generation or 0) == g - 1 and (t.end_step or max_steps) < max_steps
                for t in trials
            )

        assert all(n == final_size(g) for g, n in sizes)
