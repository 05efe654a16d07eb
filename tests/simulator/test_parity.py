"""Parity: the simulator is the controller, so a real study and its simulation decide alike.

For each policy family a deterministic workload (each step sleeps a fixed time and reports a
value that depends only on the configuration and the step) runs as a real local study on one
worker, is exported with ``Trace.from_study`` and simulated with the same seed and the trials'
order: the same trials are created (the same configurations, the same forks from the same
parents at the same steps), each trial goes through the same states and the same segments
(from, until, how and where each ended), and the time to the target agrees once the overheads
the trace does not hold (the worker's start-up, the time from a segment's end to the next one's
first step) are measured on the real study and given to the simulator (``startup``,
``segment_start``). One worker keeps the order of events free of timing races between two
processes, and the worker waits at each boundary until the controller's decision of that step
has come (``HPCTUNE_DECISION_WAIT``), so a loaded machine changes when things happen, not what.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.journal.state import StudyRecord
from hpctune.policies import make_policy
from hpctune.simulator import simulate, simulation_context
from hpctune.simulator._config import SimulatorConfig
from hpctune.simulator._engine import Simulator
from hpctune.simulator.traces import Trace
from hpctune.study.states import StudyState
from tests.conftest import run_hpctune, write_study

TRAIN = """
import time

import torch  # imported with the module, before a segment starts (its first save would)

SLEEP = 0.25


def train(ctx):
    state = ctx.load_checkpoint()
    total = state["total"] if state else 0.0
    for step in range(ctx.start_step + 1, ctx.until_step + 1):
        time.sleep(SLEEP)
        total += ctx.params_at(step)["lr"] if "lr" in ctx.params else 0.0
        x = ctx.params.get("x", 0.0)
        value = x * step / ctx.max_steps + 0.1 * total
        result = ctx.report(step=step, score=value)
        ctx.save_checkpoint({"total": total})
        if result.should_stop:
            return
"""

XS = [0.3, 0.8, 0.45, 0.9, 0.2, 0.7]
STAGE_LRS: list[Any] = [
    {"schedule": "piecewise", "values": [0.5, 0.1], "milestones": [3]},
    {"schedule": "piecewise", "values": [0.5, 0.3], "milestones": [3]},
    {"schedule": "multistep", "base": 0.5, "milestones": [5], "gamma": 0.1},
]

CASES: dict[str, dict[str, Any]] = {
    "default": {"policy": {"name": "default"}, "space": {"x": XS[:4]}, "max_steps": 3},
    "asha": {
        "policy": {"name": "asha", "reduction_factor": 2},
        "space": {"x": XS},
        "max_steps": 4,
    },
    "hyperband": {
        "policy": {"name": "hyperband", "reduction_factor": 2},
        "space": {"x": XS},
        "max_steps": 4,
    },
    "median": {
        "policy": {"name": "median", "grace_period": 1, "min_samples_required": 2},
        "space": {"x": XS},
        "max_steps": 4,
    },
    "pbt": {
        "policy": {"name": "pbt", "population_size": 4, "steps_per_generation": 2},
        "space": {"x": {"type": "float", "low": 0.1, "high": 1.0}},
        "generator": {"name": "random"},
        "max_steps": 6,
        "num_trials": 16,
    },
    "stages": {
        "policy": {"name": "default"},
        "space": {"lr": STAGE_LRS, "x": 0.0},
        "max_steps": 6,
        "stages": True,
    },
}


def _history(record: StudyRecord) -> dict[int, Any]:
    """Each trial: its configuration, its parent and fork step, the states it went through, and
    its segments (from which step, up to which, how each ended, at which step)."""
    return {
        t.trial_id: (
            t.params,
            t.parent_trial,
            t.parent_step,
            [c.status.value for c in t.history],
            [
                (seg.start_step, seg.until_step, seg.status.value, seg.end_step)
                for seg in (record.segments[s] for s in t.segments)
            ],
        )
        for t in record.trials.values()
    }


def _overheads(record: StudyRecord, trace: Trace) -> tuple[float, float]:
    """What the trace does not hold, measured on the real study: the worker's start-up (to its
    first segment's start), and the median time from a segment's end to the next segment's
    first report on the same worker, less that step's seconds (the controller notices the end
    and assigns, the worker starts the function and loads the checkpoint)."""
    t0 = record.started_time
    assert t0 is not None
    segments = sorted(record.segments.values(), key=lambda s: s.segment_id)
    assert segments[0].started_time is not None
    startup = segments[0].started_time - t0
    rows = {t.trial_id: i for i, t in enumerate(sorted(record.trials.values(), key=_id))}
    gaps = []
    for before, seg in itertools.pairwise(segments):
        trial = record.trials[seg.trial_id]
        if seg.start_step + 1 not in trial.curve_steps or before.ended_time is None:
            continue
        reported = trial.curve_times[trial.curve_steps.index(seg.start_step + 1)]
        step_s = float(trace.epoch_seconds[rows[trial.trial_id], seg.start_step])
        gaps.append(reported - before.ended_time - step_s)
    return startup, max(float(np.median(gaps)), 0.0) if gaps else 0.0


def _id(trial: Any) -> int:
    return int(trial.trial_id)


def _time_to_target(record: StudyRecord, target: float) -> float | None:
    t0 = record.started_time or record.created_time
    hits = [
        time
        for t in record.trials.values()
        for value, time in zip(t.curve_values, t.curve_times, strict=True)
        if value >= target
    ]
    return min(hits) - t0 if hits else None


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_real_study_and_its_simulation_decide_alike(
    case: str, tmp_path: Path, cleanup_studies: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real worker waits at every boundary for its step's decision, as the simulated one
    # does (answered at the same instant there): with the default 2 s wait, a loaded machine's
    # controller answered an ASHA rung after the worker had trained the next step, which the
    # simulator, whose decisions take no time, never does.
    monkeypatch.setenv("HPCTUNE_DECISION_WAIT", "600")
    setup = dict(CASES[case])
    stages = setup.pop("stages", False)
    space = setup.pop("space")
    policy = setup.pop("policy")
    generator = setup.pop("generator", {"name": "grid"})
    num_trials = setup.pop("num_trials", len(next(iter(space.values()))))
    spec = write_study(
        tmp_path,
        train=TRAIN,
        space=space,
        policy=policy,
        generator=generator,
        resources={"slots": 1},
        num_trials=num_trials,
        seed=7,
        **setup,
    )
    if stages:
        with spec.open("a") as f:
            f.write("\n[stages]\nenabled = true\n")
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(study_dir)
    real = study.record
    assert real.state is StudyState.FINISHED

    trace = Trace.from_study(study_dir)
    target = max(v for t in real.trials.values() for v in t.curve_values) - 1e-9
    startup, segment_start = _overheads(real, trace)
    options = {k: v for k, v in policy.items() if k != "name"}
    generated = sorted(
        (t for t in real.trials.values() if t.generator_index is not None),
        key=lambda t: t.generator_index or 0,
    )
    generation0 = [t.trial_id for t in generated]  # their rows of the trace
    config = SimulatorConfig(
        startup=startup,
        segment_start=segment_start,
        target=target,
        stages=stages,
        num_trials=len(generation0),
    )
    sim = Simulator(
        trace,
        make_policy(policy["name"], options, simulation_context(trace, config)),
        slots=1,
        seed=7,
        config=config,
        order=generation0,
    )
    result = sim.run()
    assert _history(sim.record) == _history(real)
    real_time = _time_to_target(real, target)
    assert real_time is not None
    assert result.time_to_target is not None
    print(
        f"parity {case}: time to target real {real_time:.2f} s, simulated "
        f"{result.time_to_target:.2f} s ({result.time_to_target / real_time - 1:+.1%})"
    )
    # the goal is 10 % (measured on an idle machine: the closing note of issue 14); the test
    # allows 30 %, as the real run's overheads grow on a loaded machine
    assert result.time_to_target == pytest.approx(real_time, rel=0.30)


def test_simulate_of_an_exported_study_is_the_same_function_as_simulator() -> None:
    """``simulate`` is :class:`Simulator` with a built policy (what the parity test uses)."""
    trace = Trace.load(Path(__file__).parents[2] / "benchmarks" / "traces" / "digits.h5")
    a = simulate(trace, "asha", {"reduction_factor": 3}, slots=4, seed=2)
    policy = make_policy("asha", {"reduction_factor": 3}, simulation_context(trace))
    b = Simulator(trace, policy, slots=4, seed=2).run()
    assert a.decisions == b.decisions
    assert a.time_to_target == b.time_to_target
