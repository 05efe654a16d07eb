"""The simulator: hand-computed schedules, costs, restart safety of every policy, the CLI, and
parity with the local executor."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.policies import (
    POLICIES,
    Action,
    ActionKind,
    DefaultPolicy,
    Event,
    EventKind,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
    make_policy,
)
from hpctune.simulator import (
    PredictionCache,
    SimClock,
    SimulationOptions,
    SimulatorConfig,
    SimulatorError,
    quantiles,
    run_many,
    simulate,
    simulation_context,
)
from hpctune.simulator.traces import Trace
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import run_hpctune, write_study

REPO = Path(__file__).resolve().parents[2]
DIGITS_TRACE = REPO / "benchmarks" / "traces" / "digits.h5"


def _trace(curves: list[list[float]], seconds: list[list[float]], mode: str = "max") -> Trace:
    return Trace(
        np.array(curves, dtype=float),
        np.array(seconds, dtype=float),
        tuple({"c": i} for i in range(len(curves))),
        metric="acc",
        mode=mode,
        random_level=0.1,
    )


THREE = _trace(
    [[0.1, 0.2, 0.3], [0.5, 0.6, 0.7], [0.2, 0.8, 0.9]],
    [[1, 1, 1], [2, 2, 2], [1, 2, 3]],
)


def _spans(result: Any) -> list[tuple[int, int, float, float, int, int, str]]:
    return [
        (s.slot, s.trial, s.start, s.end, s.start_step, s.end_step, s.outcome)
        for s in result.segments
    ]


def test_default_policy_schedule_is_exactly_the_hand_computed_one() -> None:
    result = simulate(THREE, "default", slots=2, order=[0, 1, 2], target=0.8)
    # t=0: trials 0 and 1 start; trial 0 ends at 3, trial 2 takes its slot (steps at 4, 6, 9)
    assert _spans(result) == [
        (0, 0, 0.0, 3.0, 0, 3, "completed"),
        (1, 1, 0.0, 6.0, 0, 3, "completed"),
        (0, 2, 3.0, 9.0, 0, 3, "completed"),
    ]
    assert result.time_to_target == 6.0  # trial 2 reports 0.8 at step 2, t = 3 + 1 + 2
    assert result.target_trial == 2
    assert result.end_time == 9.0
    # the idle worker of slot 1 exits at 6 (nothing left to start): 9 + 6 slot-seconds
    assert [(w.slot, w.started, w.exited) for w in result.workers] == [(0, 0, 9), (1, 0, 6)]
    assert result.gpu_hours == pytest.approx(15 / 3600)
    assert result.gpu_hours_to_target == pytest.approx(12 / 3600)
    assert result.training_hours == pytest.approx(15 / 3600)
    assert (result.trials_started, result.trials_completed, result.trials_terminated) == (3, 3, 0)
    assert result.best_value == 0.9
    assert result.best_value_at(5.0) == 0.6  # trial 1 at t = 4
    assert math.isnan(result.best_value_at(0.5))


def test_queue_wait_and_startup_delay_new_workers_only() -> None:
    result = simulate(
        THREE, "default", slots=2, order=[0, 1, 2], target=0.8, queue_wait=10, startup=5
    )
    assert _spans(result) == [
        (0, 0, 15.0, 18.0, 0, 3, "completed"),
        (1, 1, 15.0, 21.0, 0, 3, "completed"),
        (0, 2, 18.0, 24.0, 0, 3, "completed"),  # an idle worker: no queue, no start-up
    ]
    assert result.time_to_target == 21.0
    assert result.gpu_hours == pytest.approx(((24 - 10) + (21 - 10)) / 3600)


def test_suspend_resume_and_checkpoint_costs_under_sha() -> None:
    trace = _trace(
        [[0.1, 0.2, 0.3], [0.5, 0.6, 0.7], [0.3, 0.4, 0.5]],
        [[1, 1, 1], [1, 1, 1], [1, 1, 1]],
    )
    result = simulate(
        trace,
        "sha",
        {"reduction_factor": 3},  # max_steps 3: rungs at 1 and 3, brackets of 3
        slots=1,
        order=[0, 1, 2],
        target=0.6,
        checkpoint_cost=0.5,
        suspend_cost=0.25,
        resume_cost=2.0,
    )
    # each first segment: 1 s step + 0.5 s checkpoint + 0.25 s suspend; then trial 1 resumes:
    # 2 s loading, step 2 done at 8.25, 0.5 s checkpoint, step 3 at 9.75, checkpoint, end
    assert _spans(result) == [
        (0, 0, 0.0, 1.75, 0, 1, "suspended"),
        (0, 1, 1.75, 3.5, 0, 1, "suspended"),
        (0, 2, 3.5, 5.25, 0, 1, "suspended"),
        (0, 1, 5.25, 10.25, 1, 3, "completed"),
    ]
    assert result.time_to_target == 8.25
    assert [(d.time, d.trial, d.step, d.kind) for d in result.decisions] == [
        (5.25, 2, 1, ActionKind.TERMINATE),  # dropped in rank order
        (5.25, 0, 1, ActionKind.TERMINATE),
    ]
    assert (result.trials_suspended, result.suspensions, result.trials_terminated) == (3, 3, 2)
    assert result.gpu_hours == pytest.approx(10.25 / 3600)


def test_a_stop_decided_at_a_boundary_ends_the_segment_there() -> None:
    trace = _trace([[0.9, 0.9, 0.9], [0.1, 0.1, 0.1]], [[1, 1, 1], [1, 1, 1]])
    result = simulate(trace, "bandit", {"boundary": 2}, slots=2, order=[0, 1], checkpoint_cost=0.5)
    # step 1 at 1, checkpoint to 1.5, step 2 at 2.5: trial 1 is eliminated, ends at 3.0
    assert _spans(result)[1] == (1, 1, 0.0, 3.0, 0, 2, "terminated")
    assert [(d.trial, d.step, d.time) for d in result.decisions] == [(1, 2, 2.5)]


class _SuspendFirstAtReport(Policy):
    """Suspends trial 0 on its first REPORT (not a boundary), then fills slots as Default."""

    name: ClassVar[str] = "suspend-first"
    traits: ClassVar[PolicyTraits] = PolicyTraits(wants_reports=True)

    def __init__(self, context: StudyContext) -> None:
        super().__init__(context)
        self.done = False

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self.fill_slots(view, event.free_slots))
        if event.kind is EventKind.REPORT and event.trial_id == 0 and not self.done:
            self.done = True
            return PolicyDecision.of([Action.suspend(0)])
        return PolicyDecision()


class _StopAtBoundaryWithoutWaiting(Policy):
    """Terminates trial 0 at its first boundary but tells workers not to wait there."""

    name: ClassVar[str] = "no-wait"
    traits: ClassVar[PolicyTraits] = PolicyTraits(boundary_decisions=False)

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self.fill_slots(view, event.free_slots))
        if event.kind is EventKind.BOUNDARY and event.trial_id == 0:
            return PolicyDecision.of([Action.terminate(0)])
        return PolicyDecision()


def test_decisions_off_a_waiting_boundary_are_read_at_the_next_report() -> None:
    trace = _trace([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]], [[1.0] * 6])
    # boundary 3: suspended at report 1, read at report 2; the last checkpoint is the
    # segment's start (step 0), so the trial redoes steps 1 and 2 when it resumes
    context = simulation_context(trace, SimulatorConfig(boundary=3))
    result = simulate(trace, _SuspendFirstAtReport(context), slots=1, boundary=3, order=[0])
    assert _spans(result) == [
        (0, 0, 0.0, 2.0, 0, 2, "suspended"),
        (0, 0, 2.0, 8.0, 0, 6, "completed"),
    ]
    assert result.training_hours == pytest.approx(8 / 3600)
    # a policy that does not decide at boundaries: the worker goes on, reads it one step later
    no_wait = _StopAtBoundaryWithoutWaiting(context)
    result = simulate(trace, no_wait, slots=1, boundary=3, order=[0])
    assert _spans(result) == [(0, 0, 0.0, 4.0, 0, 4, "terminated")]


def test_a_trial_beyond_its_recorded_steps_fails_as_out_of_trace() -> None:
    trace = _trace([[0.5, 0.6], [0.4, math.nan]], [[1, 1], [1, math.nan]])
    result = simulate(trace, "default", slots=2, order=[0, 1])
    assert result.trials_out_of_trace == 1
    failed = [t for t in result.trials if t.status is TrialStatus.FAILED]
    assert [(t.config, t.step) for t in failed] == [(1, 1)]
    assert "no step 2" in failed[0].reason


def test_stop_at_target_and_max_time_cut_the_run() -> None:
    result = simulate(THREE, "default", slots=2, order=[0, 1, 2], target=0.8, stop_at_target=True)
    assert result.end_time == 6.0
    assert result.gpu_hours == pytest.approx(12 / 3600)
    cut = simulate(THREE, "default", slots=2, order=[0, 1, 2], target=0.8, max_time=4.5)
    assert cut.end_time == 4.5
    assert cut.time_to_target is None
    assert cut.gpu_hours == pytest.approx(9 / 3600)


def test_orders_are_seeded_and_shared_by_policies() -> None:
    trace = Trace.load(DIGITS_TRACE).subset(range(20))
    a = simulate(trace, "default", slots=2, seed=3)
    b = simulate(trace, "default", slots=2, seed=3)
    c = simulate(trace, "asha", slots=2, seed=3)
    d = simulate(trace, "default", slots=2, seed=4)
    assert a == b
    assert [t.config for t in a.trials][:2] == [t.config for t in c.trials][:2]
    assert [t.config for t in a.trials] != [t.config for t in d.trials]
    assert sorted(t.config for t in a.trials) == list(range(20))


def test_bad_settings_raise_with_the_name_of_the_setting() -> None:
    with pytest.raises(SimulatorError, match="slots must be >= 1"):
        simulate(THREE, "default", slots=0)
    with pytest.raises(SimulatorError, match="queue_wait"):
        simulate(THREE, "default", queue_wait=-1)
    with pytest.raises(SimulatorError, match="unknown simulator setting"):
        simulate(THREE, "default", queue=1)
    with pytest.raises(SimulatorError, match="policy asha: option eta: unknown option"):
        simulate(THREE, "asha", {"eta": 3})
    with pytest.raises(SimulatorError, match="known policies"):
        simulate(THREE, "pop2")
    clock = SimClock()
    clock.sleep(2.0)
    clock.advance_to(3.0)
    assert clock.now() == 3.0
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance_to(1.0)


class _Restarting(Policy):
    """Builds the policy afresh from its JSON state before every decision: a controller
    restarted between any two decisions."""

    name: ClassVar[str] = "restarting"

    def __init__(self, context: StudyContext, name: str, options: Mapping[str, Any]) -> None:
        super().__init__(context)
        self.inner_name, self.inner_options = name, dict(options)
        self.state: dict[str, Any] = {}
        self.restarts = 0
        inner = make_policy(name, options, context)
        # every event reaches it; its state is the inner policy's whole state (no patches)
        self.traits = PolicyTraits(  # type: ignore[misc]
            boundary_decisions=inner.traits.boundary_decisions,
            wants_predictions=inner.traits.wants_predictions,
        )
        self.wants_fit = inner.wants_fit  # type: ignore[method-assign]

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        policy = make_policy(self.inner_name, self.inner_options, self.context)
        policy.load_state_dict(json.loads(json.dumps(self.state, allow_nan=False)))
        self.restarts += 1
        decision = policy.decide(view, event, rng)
        self.state = policy.state_dict()
        return decision


# Policies that make configurations (PBT, replay) cannot run on a trace (the simulator refuses
# them, see test_policies_that_make_configurations_are_refused); tests/policies/test_pbt.py,
# tests/report/test_lineage.py and tests/test_pbt_*.py cover them.
@pytest.mark.parametrize(
    "name", sorted(n for n, cls in POLICIES.items() if not cls.traits.makes_configurations)
)
def test_a_policy_restored_from_its_state_decides_exactly_as_the_one_that_ran(name: str) -> None:
    fits = name in ("pop", "earlyterm")  # learning-curve fits: fewer configurations
    small = fits or name == "freeze-thaw"  # a model call per decision: fewer configurations
    trace = Trace.load(DIGITS_TRACE).subset(range(12 if small else 60))
    options: dict[str, Any] = {"reduction_factor": 2} if name in ("asha",) else {}
    if name == "asha":
        options["brackets"] = 2  # exercises the generator-drawn bracket assignment too
    if fits:
        options["boundary"] = 10
    cache = PredictionCache(trace)
    plain = simulate(trace, name, options, slots=3, seed=1, predictions=cache)
    proxy = _Restarting(simulation_context(trace), name, options)
    restarted = simulate(trace, proxy, slots=3, seed=1, predictions=cache)
    assert proxy.restarts > (20 if small else 100)
    assert restarted.decisions == plain.decisions
    assert _spans(restarted) == _spans(plain)
    assert restarted.time_to_target == plain.time_to_target


def test_run_many_gives_medians_and_quartiles_per_policy() -> None:
    trace = Trace.load(DIGITS_TRACE).subset(range(30))
    many = run_many(trace, ["default", ("asha", {"reduction_factor": 3})], slots=2, seeds=3)
    assert list(many.summary) == ["default", "asha(reduction_factor=3)"]
    for key, runs in many.runs.items():
        assert [r.seed for r in runs] == [0, 1, 2]
        times = sorted(r.time_to_target or math.inf for r in runs)
        summary = many.summary[key]
        assert summary["runs"] == 3
        assert summary["time_to_target"]["median"] == (None if math.isinf(times[1]) else times[1])
    assert quantiles([1.0, 2.0, 3.0, math.inf]) == {"q25": 1.75, "median": 2.5, "q75": None}
    assert quantiles([math.inf, math.inf, 1.0]) == {"q25": None, "median": None, "q75": None}


def test_cli_simulate_prints_a_table_and_documented_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["simulate", "--trace", str(DIGITS_TRACE), "--slots", "2", "--seeds", "2"]
    assert main([*args, "--policy", "default", "--policy", "asha", "--budget", "1"]) == 0
    out = capsys.readouterr().out
    assert "target 0.983333" in out
    lines = out.splitlines()
    assert any(line.startswith("default ") for line in lines)
    assert any(line.startswith("asha ") for line in lines)
    code = main(
        [*args, "--policy", "sha", "--option", "reduction_factor=2", "--json", "--timeline"]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "hpctune.simulate/1"
    assert doc["trace"]["configs"] == 128
    (entry,) = doc["policies"]
    assert entry["label"] == "sha(reduction_factor=2)"
    assert entry["options"]["reduction_factor"] == 2
    assert [r["seed"] for r in entry["runs"]] == [0, 1]
    assert set(entry["summary"]["time_to_target"]) == {"q25", "median", "q75"}
    assert entry["runs"][0]["trials_started"] == 128
    segments = entry["runs"][0]["segments"]
    assert {s["outcome"] for s in segments} == {"suspended", "completed"}  # dropped at rungs
    assert len(segments) > 128  # promoted trials run several segments
    assert entry["runs"][0]["decisions"][0]["kind"] == "terminate"
    assert doc["config"]["recalibrate"] == "none"


def test_the_python_api_takes_the_options_simulate_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hpctune simulate` fills a SimulationOptions from its options; hpctune.api.simulate
    with the same options gives the same comparison."""
    from hpctune import api

    trace_path = tmp_path / "small.h5"
    Trace.load(DIGITS_TRACE).subset(range(24)).save(trace_path)
    args = ["simulate", "--trace", str(trace_path), "--slots", "2", "--seeds", "2"]
    args += ["--policy", "default", "--policy", "asha", "--option", "asha.reduction_factor=3"]
    args += ["--queue-wait", "5", "--boundary", "2", "--budget", "50", "--json"]
    assert main(args) == 0
    from_cli = json.loads(capsys.readouterr().out)
    options = SimulationOptions(
        trace=trace_path,
        policies=(("default", {}), ("asha", {"reduction_factor": 3})),
        slots=2,
        seeds=2,
        budget=50.0,
        config=SimulatorConfig(queue_wait=5.0, boundary=2),
    )
    runs: list[tuple[str, int]] = []
    comparison = api.simulate(options, on_run=lambda label, seed: runs.append((label, seed)))
    asha = "asha(reduction_factor=3)"
    assert runs == [("default", 0), ("default", 1), (asha, 0), (asha, 1)]
    assert from_cli["config"]["queue_wait"] == 5.0
    assert from_cli["config"]["boundary"] == 2
    assert json.dumps(comparison.to_dict(), sort_keys=True) == json.dumps(from_cli, sort_keys=True)
    assert comparison.lines()[0].startswith(f"trace {trace_path}: 24 configurations x 30 epochs")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"policies": ()}, "policies must name at least one policy"),
        ({"slots": 0}, "slots must be >= 1, but got 0"),
        ({"seeds": 0}, "seeds must be >= 1, but got 0"),
        ({"generator_options": {"n_startup": 3}}, "generator_options are given without"),
        ({"fit_workers": -1}, "fit_workers must be >= 0"),
    ],
)
def test_simulation_options_refuse_what_cannot_run(changes: dict[str, Any], message: str) -> None:
    from hpctune import api

    fields: dict[str, Any] = {"trace": DIGITS_TRACE, "policies": (("default", {}),), **changes}
    with pytest.raises(SimulatorError, match=message):
        api.simulate(SimulationOptions(**fields))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--trace", "missing.h5", "--policy", "default"], "does not exist"),
        (["--trace", str(DIGITS_TRACE), "--policy", "pop2"], "unknown policy 'pop2'"),
        (["--trace", str(DIGITS_TRACE), "--policy", "asha", "--option", "eta=2"], "eta"),
        (["--trace", str(DIGITS_TRACE), "--policy", "sha", "--option", "x.y=2"], "names policy"),
        (["--trace", str(DIGITS_TRACE), "--policy", "sha", "--slots", "0"], "--slots"),
        (["--trace", str(DIGITS_TRACE), "--policy", "sha", "--queue-wait", "-1"], "queue_wait"),
        (["--trace", str(DIGITS_TRACE), "--policy", "pop", "--recalibrate", "on"], "'on'"),
        (["--policy", "sha"], "--trace"),
    ],
)
def test_cli_simulate_bad_input_exits_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *extra]) == 2
    captured = capsys.readouterr()
    assert message in captured.err + captured.out


PARITY_TRAIN = """
import time

X = [0.3, 0.8, 0.4, 0.9, 0.2, 0.7]
SLEEP = [10.0, 0.2, 0.2, 0.2, 0.2, 0.2]


def train(ctx):
    k = ctx.params["k"]
    for step in range(ctx.start_step + 1, ctx.max_steps + 1):
        time.sleep(SLEEP[k])
        if ctx.report(step=step, score=X[k] * step / ctx.max_steps).should_stop:
            return
"""


@pytest.mark.slow
def test_simulator_and_local_executor_take_the_same_asha_decisions(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    """ASHA (eta 2: rungs at 1 and 2 of 4 steps) on 2 slots: a slow trial holds one slot while
    five fast ones pass the rungs on the other; the rung arrivals are far apart, so the
    decisions do not depend on the machine's timing."""
    spec = write_study(
        tmp_path,
        train=PARITY_TRAIN,
        max_steps=4,
        num_trials=6,
        generator={"name": "grid"},
        space={"k": [0, 1, 2, 3, 4, 5]},
        policy={"name": "asha", "reduction_factor": 2},
        resources={"slots": 2},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    real = {(t.trial_id, t.status, t.step) for t in study.trials}
    assert real == {
        (0, TrialStatus.TERMINATED, 1),
        (1, TrialStatus.COMPLETED, 4),
        (2, TrialStatus.TERMINATED, 1),
        (3, TrialStatus.COMPLETED, 4),
        (4, TrialStatus.TERMINATED, 1),
        (5, TrialStatus.TERMINATED, 2),
    }
    trace = Trace.from_study(study_dir)
    assert [h["k"] for h in trace.hparams] == [0, 1, 2, 3, 4, 5]
    result = simulate(
        trace, "asha", {"reduction_factor": 2}, slots=2, order=list(range(6)), target=1.0
    )
    assert {(o.trial, o.status, o.step) for o in result.trials} == real
    assert result.trials_out_of_trace == 0
    reasons = {t.trial_id: t.reason for t in study.trials if t.status is TrialStatus.TERMINATED}
    simulated = {d.trial: d.reason for d in result.decisions}
    assert simulated == reasons  # same rung, same value, same cutoff


LRS = (0.001, 0.01, 0.1, 1.0)
PBT_TRACE = Trace(
    np.array([[0.1 * (1 + i) * s for s in range(1, 7)] for i in range(4)]) / 2.4,
    np.ones((4, 6)),
    tuple({"lr": lr} for lr in LRS),
    metric="acc",
    mode="max",
    random_level=0.0,
    search_space={"lr": {"type": "float", "low": 0.001, "high": 1.0, "log": True}},
)


@pytest.mark.parametrize("name", ["pbt", "pbt-truncation"])
def test_pbt_runs_in_simulation_and_forks_onto_the_nearest_recorded_configuration(
    name: str,
) -> None:
    """PBT is the controller's own: generations of forks from checkpoints, each child going on
    along the trace's configuration nearest to its mutated hyperparameters."""
    options: dict[str, Any] = {"population_size": 4}
    options["steps_per_generation" if name == "pbt" else "perturbation_interval"] = 2
    result = simulate(PBT_TRACE, name, options, slots=2, seed=3)
    sim_trials = {t.trial: t for t in result.trials}
    assert result.trials_out_of_trace == 0
    ended = (TrialStatus.COMPLETED, TrialStatus.TERMINATED)  # truncation stops the cloned
    assert all(t.status in ended for t in result.trials)
    assert sum(t.status is TrialStatus.COMPLETED and t.step == 6 for t in result.trials) == 4
    assert result.trials_started > 4  # children were forked
    for span in result.segments:  # every segment trains its trial's own configuration
        assert span.config == sim_trials[span.trial].config
    assert result.best_value == pytest.approx(PBT_TRACE.curves[3, -1])


def test_forked_trials_continue_from_the_parents_step_on_the_nearest_configuration() -> None:
    from hpctune.policies import make_policy
    from hpctune.simulator import Simulator

    sim = Simulator(
        PBT_TRACE,
        make_policy(
            "pbt",
            {"population_size": 4, "steps_per_generation": 2},
            simulation_context(PBT_TRACE),
        ),
        slots=2,
        seed=3,
    )
    result = sim.run()
    record = sim.record
    forked = [t for t in record.trials.values() if t.parent_trial is not None]
    assert forked
    for trial in forked:
        lr = trial.params["lr"]
        nearest = min(range(4), key=lambda i: abs(math.log(LRS[i]) - math.log(lr)))
        assert sim.rows.row(record, trial.trial_id) == nearest
        first = record.segments[trial.segments[0]]
        assert first.start_step == trial.parent_step  # from the parent's checkpoint
        # its own steps report its row's values
        pairs = zip(trial.curve_steps, trial.curve_values, strict=True)
        own = [(s, v) for s, v in pairs if s > first.start_step]
        assert own
        assert all(v == PBT_TRACE.curves[nearest, s - 1] for s, v in own)
    trained = sum(t.step - (t.parent_step or 0) for t in record.trials.values())
    assert result.training_hours * 3600 == pytest.approx(trained)


STAGE_LRS: list[Any] = [
    {"schedule": "piecewise", "values": [0.1, 0.02], "milestones": [4]},
    {"schedule": "piecewise", "values": [0.1, 0.05], "milestones": [4]},
    {"schedule": "multistep", "base": 0.1, "milestones": [6], "gamma": 0.1},
]
STAGE_TRACE = Trace(
    np.array([[0.1 * s + 0.01 * i for s in range(1, 9)] for i in range(3)]),
    np.ones((3, 8)),
    tuple({"lr": lr} for lr in STAGE_LRS),
    metric="acc",
    mode="max",
    random_level=0.0,
    search_space={"lr": STAGE_LRS},
)


@pytest.mark.parametrize("stages", [False, True])
def test_a_stage_tree_simulation_trains_each_shared_prefix_once(stages: bool) -> None:
    """Three learning-rate sequences equal up to step 4 (and two of them to step 6 in value,
    not in sequence): over a stage tree the shared 4 steps are trained once."""
    result = simulate(STAGE_TRACE, "default", slots=2, seed=0, stages=stages, target=10.0)
    assert all(t.status is TrialStatus.COMPLETED and t.step == 8 for t in result.trials)
    assert result.trials_started == 3
    assert result.training_hours * 3600 == pytest.approx(4 + 3 * 4 if stages else 3 * 8)


@pytest.mark.parametrize("policy", ["default", "asha"])
def test_every_stage_scheduler_runs_the_stage_tree_to_its_end(policy: str) -> None:
    """BFS and most-children give a worker one stage at a time, often one that ends at a branch
    point (step 4 here) rather than at a trial's request: a trial whose path goes on through it
    trains it, and every scheduler ends the study with the same outcomes."""
    options = {"grace_period": 2, "reduction_factor": 2} if policy == "asha" else {}
    outcomes = {}
    for scheduler in ("critical-path", "bfs", "most-children"):
        result = simulate(
            STAGE_TRACE, policy, options, slots=2, seed=0, stages=True, stage_scheduler=scheduler
        )
        assert all(t.status.is_final for t in result.trials), scheduler
        outcomes[scheduler] = {(t.trial, t.status, t.step) for t in result.trials}
        assert result.training_hours * 3600 <= 4 + 3 * 4  # shared steps trained once
    assert outcomes["bfs"] == outcomes["most-children"] == outcomes["critical-path"]
    assert len(outcomes["bfs"]) == 3


class _CountingDefault(DefaultPolicy):
    """Default under another name, counting its decisions; its traits are given per test."""

    name: ClassVar[str] = "counting-default"

    def __init__(self, context: StudyContext) -> None:
        super().__init__(context)
        self.decisions = 0

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        self.decisions += 1
        return super().decide(view, event, rng)


@pytest.mark.parametrize("admits", [True, False])
def test_the_stage_tree_controller_admits_every_trial_by_the_trait_not_the_name(
    admits: bool,
) -> None:
    """A policy not named "default" with the trait ``admits_every_trial`` runs over a stage
    tree as Default does: the controller admits every trial and never asks it; without the
    trait the controller asks it for trials."""
    policy = _CountingDefault(simulation_context(STAGE_TRACE))
    policy.traits = PolicyTraits(  # type: ignore[misc]
        boundary_decisions=False,
        wants_boundaries=False,
        admits_every_trial=admits,
        runs_on_stage_trees=True,
    )
    result = simulate(STAGE_TRACE, policy, slots=2, seed=0, stages=True)
    default = simulate(STAGE_TRACE, "default", slots=2, seed=0, stages=True)
    assert {(t.trial, t.status, t.step) for t in result.trials} == {
        (t.trial, t.status, t.step) for t in default.trials
    }
    assert (policy.decisions == 0) is admits


class _Rounds(Policy):
    """Starts trials in rounds: a new round when no trial runs; its decisions hold idle workers
    as ``hold`` says (PBT's wait for the running trials' ends, as data of the decision)."""

    name: ClassVar[str] = "rounds"
    hold: ClassVar[bool] = False

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is not EventKind.SLOT_FREE:
            return PolicyDecision()
        if view.with_status(TrialStatus.RUNNING):
            return PolicyDecision(hold_idle_workers=self.hold)
        return PolicyDecision.of(
            self.fill_slots(view, event.free_slots), hold_idle_workers=self.hold
        )


@pytest.mark.parametrize(("hold", "workers"), [(True, 2), (False, 3)])
def test_idle_workers_wait_when_the_decision_holds_them(hold: bool, workers: int) -> None:
    """Two rounds of two trials on two slots: the worker whose trial ends first waits for the
    next round when the decision holds it (two workers in all), else it exits and the next
    round needs a new one."""
    trace = _trace([[0.1, 0.2]] * 4, [[1, 1], [3, 3], [1, 1], [1, 1]])
    policy = type("Rounds", (_Rounds,), {"hold": hold})(simulation_context(trace))
    result = simulate(trace, policy, slots=2, seed=0, order=[0, 1, 2, 3])
    assert [t.status for t in result.trials] == [TrialStatus.COMPLETED] * 4
    assert len(result.workers) == workers


def test_stage_trees_refuse_policies_that_cannot_run_over_them() -> None:
    with pytest.raises(SimulatorError, match="stage trees run with the policies"):
        simulate(THREE, "pop", slots=2, stages=True)


class _BoundsRecorder(Policy):
    """Default-like: fills slots and records the bounds its views carry."""

    name: ClassVar[str] = "bounds-recorder"

    def __init__(self, context: StudyContext) -> None:
        super().__init__(context)
        self.bounds: set[tuple[float, float]] = set()

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        self.bounds.add(view.bounds)
        if event.kind is EventKind.SLOT_FREE:
            n = min(event.free_slots, view.trials_remaining or 0)
            return PolicyDecision.of([Action.start() for _ in range(n)])
        return PolicyDecision()


def test_the_metric_range_comes_from_the_trace_unless_given() -> None:
    loss = Trace(
        np.array([[2.0, 1.0, 0.5], [2.2, 1.5, 1.2]]),
        np.ones((2, 3)),
        ({"c": 0}, {"c": 1}),
        metric="loss",
        mode="min",
        random_level=2.3,
        metric_bounds=(0.0, 2.5),
    )
    recorder = _BoundsRecorder(simulation_context(loss))
    simulate(loss, recorder, slots=1)
    assert recorder.bounds == {(0.0, 2.5)}
    assert PredictionCache(loss).bounds == (0.0, 2.5)
    given = _BoundsRecorder(simulation_context(loss))
    simulate(loss, given, slots=1, bounds=(0.0, 3.0))
    assert given.bounds == {(0.0, 3.0)}
    assert PredictionCache(THREE).bounds == (0.0, 1.0)  # a trace without a range
