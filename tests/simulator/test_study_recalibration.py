"""``[curves] recalibrate`` in a study (the controller's own code in the simulator, real
amortised predictions of a real trace): the policy gets recalibrated predictions, the journal
keeps the model's own, and a new controller rebuilds the recalibration from the journal."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.study_calibration import record_predictions
from hpctune.curves.predict import CurvePrediction
from hpctune.policies import make_policy
from hpctune.simulator import (
    PredictionCache,
    Simulator,
    SimulatorConfig,
    SimulatorError,
    simulate,
    simulation_context,
)
from hpctune.simulator.traces import Trace
from tests.conftest import REPO

CONFIGS = list(range(16))


@pytest.fixture(scope="module")
def digits() -> tuple[Trace, PredictionCache]:
    trace = Trace.load(REPO / "benchmarks" / "traces" / "digits.h5").subset(CONFIGS)
    return trace, PredictionCache(trace)


def _run(
    digits: tuple[Trace, PredictionCache], recalibrate: str, restart_at: tuple[float, ...] = ()
) -> tuple[Simulator, list[tuple[int, CurvePrediction]]]:
    """POP (boundary 5) on 16 digits configurations, 4 slots, to the end (the controller
    replaced at ``restart_at``); the predictions the policy was handed at its prediction
    events."""
    trace, cache = digits
    config = SimulatorConfig(recalibrate=recalibrate)
    policy = make_policy("pop", {"boundary": 5, "target": 0.99}, simulation_context(trace, config))
    seen = record_predictions(policy)
    sim = Simulator(
        trace, policy, slots=4, order=CONFIGS, predictions=cache, config=config, seed=3
    )
    sim.run(restart_at=restart_at)
    return sim, seen


def _median(prediction: CurvePrediction) -> np.ndarray:
    return np.asarray(prediction.u_quantiles)[:, list(prediction.levels).index(0.5)]


def test_the_policy_gets_recalibrated_predictions_and_the_journal_the_models_own(
    digits: tuple[Trace, PredictionCache],
) -> None:
    trace, cache = digits
    sim, seen = _run(digits, "spread")
    calibration = sim.controller.curves.calibration
    assert calibration is not None
    assert calibration.pit_count() > 0
    changed = 0
    for trial_id, given in seen:
        own = cache.get(sim.rows.row(sim.record, trial_id), given.n, trace.num_epochs)
        if given.unknown:
            continue
        np.testing.assert_array_equal(_median(given), _median(own))  # spread only
        if not np.array_equal(given.u_quantiles, own.u_quantiles):
            changed += 1
    assert changed > 0  # the later predictions were recalibrated
    # the journal's records are the model's predictions (their medians at max_steps)
    for row in sim.journal.rows["log"]:
        if row["kind"] != "prediction":
            continue
        entry = json.loads(row["data"])
        own = cache.get(sim.rows.row(sim.record, row["trial"]), entry["n"], trace.num_epochs)
        if entry["median"] is not None:
            assert entry["median"] == pytest.approx(float(own.median[-1]))


def test_without_recalibration_the_policy_gets_the_models_predictions(
    digits: tuple[Trace, PredictionCache],
) -> None:
    trace, cache = digits
    sim, seen = _run(digits, "none")
    assert sim.controller.curves.calibration is None
    assert seen
    for trial_id, given in seen:
        own = cache.get(sim.rows.row(sim.record, trial_id), given.n, trace.num_epochs)
        assert given is own


def test_a_new_controller_rebuilds_the_recalibration_from_the_journal(
    digits: tuple[Trace, PredictionCache],
) -> None:
    sim, _ = _run(digits, "full")
    before = sim.controller.curves.calibration
    assert before is not None
    ns = range(1, digits[0].num_epochs + 1)
    pits = {n: before.mapping(n).pits for n in ns}
    assert sum(len(p) for p in pits.values()) == before.pit_count() > 0
    sim.restart_controller()
    after = sim.controller.curves.calibration
    assert after is not None
    assert after is not before
    assert {n: after.mapping(n).pits for n in ns} == pits


def test_a_study_restarted_midway_goes_on_recalibrating(
    digits: tuple[Trace, PredictionCache],
) -> None:
    reference, _ = _run(digits, "spread")
    end = reference.clock.now()
    sim, _ = _run(digits, "spread", restart_at=(0.3 * end, 0.6 * end))
    assert sim.restarts == 2
    calibration = sim.controller.curves.calibration
    assert calibration is not None
    assert calibration.pit_count() > 0
    assert calibration.open_trials == []  # every trial ended and lent its PITs


def test_an_unknown_recalibration_is_refused() -> None:
    trace = Trace.load(REPO / "benchmarks" / "traces" / "digits.h5").subset([0, 1])
    with pytest.raises(SimulatorError, match="recalibrate must be one of none, spread, full"):
        simulate(trace, "pop", {"target": 0.9}, 2, 0, recalibrate="yes")
