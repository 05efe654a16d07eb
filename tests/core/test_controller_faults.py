"""The controller's handling of bad luck and slow answers, tested on the scheduling core with a
simulated clock.

The simulator runs the real :class:`~hpctune.controller.Controller` (its ingest, worker pool,
retries, curve fits and policy calls) on simulated workers and a simulated clock, so faults
injected there (:class:`~hpctune.simulator.Faults`: a crashing training function, a lost node, a
hung worker) and curve fits that take time (``fit_seconds``) exercise the controller's own rules,
with no process, no sleep and no wall-clock bound. Each test states what the controller must do
and checks it in the study record it journaled.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from hpctune.journal.reader import load_state
from hpctune.journal.state import StudyRecord
from hpctune.policies import make_policy
from hpctune.simulator import (
    Faults,
    PredictionCache,
    Simulator,
    SimulatorConfig,
    SimulatorError,
    simulation_context,
)
from hpctune.simulator.traces import Trace
from hpctune.study.states import SegmentStatus, StudyState, TrialStatus, WorkerLife
from tests.conftest import REPO

STEPS = 6


def _trace(configs: int = 3, steps: int = STEPS) -> Trace:
    """``configs`` configurations, one second a step; configuration ``c`` is ``c`` hundredths
    better at every step (so the ranking is known and fixed)."""
    curves = [[0.1 * s + 0.01 * c for s in range(1, steps + 1)] for c in range(configs)]
    return Trace(
        np.array(curves, dtype=float),
        np.ones((configs, steps)),
        tuple({"c": i} for i in range(configs)),
        metric="acc",
        mode="max",
        random_level=0.1,
    )


def _run(
    faults: Faults,
    *,
    policy: str = "default",
    options: dict[str, Any] | None = None,
    configs: int = 3,
    slots: int = 1,
    restart_at: tuple[float, ...] = (),
) -> Simulator:
    trace, config = _trace(configs), SimulatorConfig(faults=faults)
    sim = Simulator(
        trace,
        make_policy(policy, options or {}, simulation_context(trace, config)),
        slots=slots,
        order=list(range(configs)),
        config=config,
    )
    sim.run(restart_at=restart_at)
    return sim


def _segments(record: StudyRecord, trial_id: int) -> list[tuple[int, int | None, str]]:
    return [
        (s.start_step, s.end_step, s.status.value)
        for s in sorted(record.segments.values(), key=lambda s: s.segment_id)
        if s.trial_id == trial_id
    ]


def _steps_reported(sim: Simulator, trial_id: int) -> list[int]:
    """Every step the trial's segments reported, in order (a step retrained shows twice)."""
    steps: list[int] = []
    for seg in sorted(sim.record.segments.values(), key=lambda s: s.segment_id):
        if seg.trial_id == trial_id:
            lines = sim.workers.events.get(seg.segment_id, [])
            steps += [line["step"] for line in lines if line["kind"] == "report"]
    return steps


def test_a_lost_node_s_trial_resumes_from_its_last_checkpoint_on_a_new_worker() -> None:
    sim = _run(Faults(lost={1: 3.5}))  # worker 1 dies half-way through step 4 of trial 0
    record = sim.record
    assert _segments(record, 0) == [(0, None, "lost"), (3, STEPS, "completed")]
    trial = record.trials[0]
    assert trial.status is TrialStatus.COMPLETED
    assert trial.retries == 1
    lost = record.workers["w0000"]
    assert lost.state is WorkerLife.LOST
    assert "node failed" in lost.reason
    # detected at the controller's next look at a busy worker (its check period, 1 s)
    assert lost.ended_time is not None
    assert 3.5 < lost.ended_time <= 4.5
    # steps 1-3 were checkpointed and are not trained again; step 4 was lost with the node
    assert _steps_reported(sim, 0) == [1, 2, 3, 4, 5, 6]
    assert record.state is StudyState.FINISHED
    assert all(t.status is TrialStatus.COMPLETED for t in record.trials.values())


def test_a_hung_worker_is_ended_by_its_heartbeat_timeout_and_cancelled() -> None:
    sim = _run(Faults(hung={1: 2.5}, worker_timeout=30.0))
    record = sim.record
    hung = record.workers["w0000"]
    assert hung.state is WorkerLife.LOST
    assert "no heartbeat for" in hung.reason
    # not before the timeout, and at the first check of a busy worker after it
    assert hung.ended_time is not None
    assert 2.5 + 30.0 < hung.ended_time <= 2.5 + 30.0 + 2.0
    assert sim.workers.workers["w0000"].exited is not None, "the hung worker was not cancelled"
    assert _segments(record, 0) == [(0, None, "lost"), (2, STEPS, "completed")]
    assert record.trials[0].retries == 1
    assert record.state is StudyState.FINISHED


def test_without_a_timeout_a_hung_worker_is_waited_for_and_the_simulation_says_so() -> None:
    with pytest.raises(SimulatorError, match="does not end"):
        _run(Faults(hung={1: 2.5}))


def test_a_trial_lost_more_often_than_max_retries_fails_and_the_others_run() -> None:
    # the simulated study allows 3 retries: the fourth loss fails the trial
    sim = _run(Faults(lost={1: 1.5, 2: 3.2, 3: 4.9, 4: 6.6}))
    record = sim.record
    segments = _segments(record, 0)
    assert [status for _, _, status in segments] == ["lost"] * 4
    starts = [start for start, _, _ in segments]
    assert starts == sorted(starts)
    assert starts[0] == 0
    assert starts[-1] > 0
    trial = record.trials[0]
    assert trial.status is TrialStatus.FAILED
    assert trial.retries == 4
    assert "lost 4 times (max_retries 3)" in trial.reason
    assert [record.trials[t].status for t in (1, 2)] == [TrialStatus.COMPLETED] * 2


def test_a_crashing_trial_fails_with_its_error_and_the_study_goes_on() -> None:
    sim = _run(Faults(crashes={1: 2}))
    record = sim.record
    trial = record.trials[1]
    assert trial.status is TrialStatus.FAILED
    assert "simulated crash at step 2" in trial.reason
    assert "Traceback" in trial.error
    assert _segments(record, 1) == [(0, 1, "failed")]
    assert trial.retries == 0, "a failure of the user's code is not retried"
    assert [record.trials[t].status for t in (0, 2)] == [TrialStatus.COMPLETED] * 2
    assert record.state is StudyState.FINISHED


def test_a_function_that_returns_early_ends_its_trial_ended_early_and_a_retry_runs_it() -> None:
    """A training loop that stops short (``Faults.ends_early``) ends its segment and trial
    ``ended_early``, with a warning naming ``hpctune retry``; a user's ``retry`` (an inbox
    command) queues it again from its checkpoint, and it ends early at the same step again."""
    trace, config = _trace(2), SimulatorConfig(faults=Faults(ends_early={0: 3}))
    inbox: list[dict[str, Any]] = []
    sim = Simulator(
        trace,
        make_policy("default", {}, simulation_context(trace, config)),
        slots=1,
        order=[0, 1],
        config=config,
        inbox=inbox,
    )
    inbox.append({"command": "retry", "trials": [0]})  # refused: trial 0 does not exist yet
    sim.run()
    record = sim.record
    assert record.trials[0].status is TrialStatus.ENDED_EARLY
    assert _segments(record, 0) == [(0, 3, "ended_early")]
    assert "the function returned at step 3 (step 3 of 6)" in record.trials[0].reason
    assert any("hpctune retry" in w.message for w in record.warnings)
    (rejected,) = record.rejected_commands
    assert "0" in rejected.reason
    inbox.append({"command": "retry", "trials": [0]})
    sim.restart_controller()  # `hpctune retry` of the ended study, then `hpctune resume`
    sim.run()
    # from its checkpoint at step 2 (the function returned before saving step 3's)
    assert _segments(sim.record, 0) == [(0, 3, "ended_early"), (2, 3, "ended_early")]


def test_a_controller_that_polls_carries_out_the_same_study_in_fewer_iterations() -> None:
    """``poll_interval``: the controller iterates every few seconds instead of at every event;
    the workers' events in between happen at their own times, so a study that waits for no
    decision ends the same."""
    runs = {}
    for poll in (0.0, 2.5):
        trace, config = _trace(3), SimulatorConfig(poll_interval=poll)
        sim = Simulator(
            trace,
            make_policy("default", {}, simulation_context(trace, config)),
            slots=2,
            order=[0, 1, 2],
            config=config,
        )
        runs[poll] = (sim, sim.run())
    (fast, at_once), (slow, polled) = runs[0.0], runs[2.5]
    assert polled.trials_completed == at_once.trials_completed == 3
    for trial in range(3):
        assert slow.record.trials[trial].curve_values == fast.record.trials[trial].curve_values
    # each report at its own second, not at the controller's iteration
    assert slow.record.trials[0].curve_times == fast.record.trials[0].curve_times
    assert slow.controller.iterations < fast.controller.iterations / 2
    assert polled.end_time >= at_once.end_time  # a free slot is seen at the next iteration


def test_trials_that_all_fail_the_same_way_at_once_stop_the_study_as_failed() -> None:
    sim = _run(Faults(crashes={0: 1, 1: 1, 2: 1}), configs=5)
    record = sim.record
    assert record.state is StudyState.FAILED
    assert "3 trials failed the same way before their first report" in record.reason
    assert "hpctune retry" in record.reason
    assert "--failed" in record.reason
    assert 3 not in record.trials or record.trials[3].status is not TrialStatus.COMPLETED


FAULTS = {
    "lost": Faults(lost={1: 3.5, 2: 9.2}),
    "hung": Faults(hung={1: 5.5}, worker_timeout=20.0, startup_timeout=30.0),
    "crash": Faults(crashes={2: 3}, lost={2: 12.5}),
}


def _decisions(record: StudyRecord) -> list[tuple[int, int, int | None, str]]:
    return [
        (s.trial_id, s.start_step, s.end_step, s.status.value)
        for s in sorted(record.segments.values(), key=lambda s: s.segment_id)
    ]


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("policy", ["default", "sha", "asha"])
def test_a_controller_restarted_around_the_faults_decides_as_one_that_ran_on(
    fault: str, policy: str
) -> None:
    options = {} if policy == "default" else {"reduction_factor": 2}
    kwargs: dict[str, Any] = {"policy": policy, "options": options, "configs": 4, "slots": 2}
    ran_on = _run(FAULTS[fault], **kwargs)
    restarts = tuple(float(t) for t in np.arange(0.25, 90.0, 0.7))
    restarted = _run(FAULTS[fault], restart_at=restarts, **kwargs)
    assert restarted.restarts >= 10
    assert _decisions(restarted.record) == _decisions(ran_on.record)
    assert {t: r.status for t, r in restarted.record.trials.items()} == {
        t: r.status for t, r in ran_on.record.trials.items()
    }
    # what the restarted controller holds is what its journal says
    assert _decisions(load_state(restarted.journal)) == _decisions(restarted.record)


@pytest.mark.parametrize("policy", ["sha", "hyperband", "asha"])
def test_a_lost_node_changes_when_trials_end_not_what_the_policy_decides(policy: str) -> None:
    """Losing a worker delays its trial; the policy's promotions and stops stay the same."""
    kwargs: dict[str, Any] = {"policy": policy, "options": {"reduction_factor": 2}, "configs": 4}
    clean = _run(Faults(), **kwargs)
    faulty = _run(Faults(lost={1: 2.5, 2: 8.5}), **kwargs)
    lost = [s for s in faulty.record.segments.values() if s.status is SegmentStatus.LOST]
    assert len(lost) == 2

    def outcome(sim: Simulator) -> dict[int, tuple[str, int]]:
        return {t: (r.status.value, r.step) for t, r in sim.record.trials.items()}

    assert outcome(faulty) == outcome(clean)
    assert faulty.record.state is StudyState.FINISHED
    assert faulty.clock.now() > clean.clock.now()


def test_bad_faults_are_refused_naming_the_field() -> None:
    for faults, field in [
        (Faults(crashes={0: 0}), "faults.crashes"),
        (Faults(lost={0: 1.0}), "faults.lost"),
        (Faults(hung={1: float("nan")}), "faults.hung"),
        (Faults(worker_timeout=0.0), "faults.worker_timeout"),
    ]:
        with pytest.raises(SimulatorError, match=field):
            _run(faults)


# -- curve fits that take time --------------------------------------------------------------


@pytest.fixture(scope="module")
def digits() -> tuple[Trace, PredictionCache]:
    trace = Trace.load(REPO / "benchmarks" / "traces" / "digits.h5").subset(list(range(6)))
    return trace, PredictionCache(trace)


def _pop(
    digits: tuple[Trace, PredictionCache], restart_at: tuple[float, ...] = ()
) -> tuple[Simulator, list[tuple[int, int, float]]]:
    """POP (boundary 10) on six digits configurations, each fit answered 0.3 s after it was
    asked for; the journaled predictions as (trial, points, time)."""
    trace, cache = digits
    config = SimulatorConfig(fit_seconds=0.3)
    sim = Simulator(
        trace,
        make_policy("pop", {"boundary": 10, "target": 0.97}, simulation_context(trace, config)),
        slots=2,
        order=list(range(trace.num_configs)),
        predictions=cache,
        config=config,
    )
    sim.run(restart_at=restart_at)
    rows = [r for r in sim.journal.rows["log"] if r["kind"] == "prediction"]
    return sim, [(r["trial"], json.loads(r["data"])["n"], r["time"]) for r in rows]


def _boundary_report_time(sim: Simulator, trial_id: int, step: int) -> float:
    for seg in sim.record.segments.values():
        if seg.trial_id == trial_id:
            for line in sim.workers.events.get(seg.segment_id, []):
                if line["kind"] == "report" and line["step"] == step:
                    return float(line["t"])
    raise AssertionError(f"trial {trial_id} reported no step {step}")


def test_late_fits_reach_the_journal_after_their_delay_and_the_study_does_not_wait(
    digits: tuple[Trace, PredictionCache],
) -> None:
    sim, predictions = _pop(digits)
    assert sim.curves is not None
    assert len(predictions) == sim.curves.requested == 12  # six trials, boundaries 10 and 20
    for trial_id, n, t in predictions:
        asked = _boundary_report_time(sim, trial_id, n)
        assert t >= asked + 0.3 - 1e-9, f"trial {trial_id}'s fit at {n} came before its delay"
    # nobody waited for them: training went on between the first fit's ask and its answer
    trial_id, n, t = predictions[0]
    asked = _boundary_report_time(sim, trial_id, n)
    reports = [
        line["t"]
        for lines in sim.workers.events.values()
        for line in lines
        if line["kind"] == "report"
    ]
    assert any(asked < r < t for r in reports)


def test_fits_in_flight_when_the_controller_dies_are_asked_for_again(
    digits: tuple[Trace, PredictionCache],
) -> None:
    _, ran_on = _pop(digits)
    first = ran_on[0][2]  # the first answer; the two trials' first fits are in flight before it
    restart = first - 0.1
    sim, restarted = _pop(digits, restart_at=(restart,))
    assert sim.restarts == 1
    assert sim.curves is not None
    in_flight = [(t, n) for t, n, at in ran_on if at - 0.3 < restart < at]
    assert len(in_flight) == 2
    # the killed controller's fits were lost with it; the new one asked for them again
    assert sim.curves.requested == len(ran_on) + len(in_flight)
    assert sorted((t, n) for t, n, _ in restarted) == sorted((t, n) for t, n, _ in ran_on)
    for trial_id, n, t in restarted:
        if (trial_id, n) in in_flight:
            assert t >= restart + 0.3 - 1e-9  # asked again at the restart, not before
