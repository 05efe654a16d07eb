"""``benchmarks/study_calibration.py`` on a real trace: the PITs it scores are of the predictions
the policy was handed, recalibrated where ``recalibrate`` asks, and ``benchmarks/policies.py``
passes a policy spec's ``recalibrate=`` to the simulated study."""

from __future__ import annotations

import math

from benchmarks.policies import STUDY_OPTIONS, policy_options
from benchmarks.study_calibration import _coverage, measure
from hpctune.simulator.traces import Trace
from tests.conftest import REPO


def test_without_recalibration_the_policy_sees_the_models_predictions_and_with_it_others() -> None:
    trace = Trace.load(REPO / "benchmarks" / "traces" / "digits.h5").subset(list(range(24)))
    given, own, time_to_target = measure(trace, "pop", 4, 0, "none", 5)
    assert given
    assert given == own  # the same predictions, so the same PITs
    assert all(0.0 <= z <= 1.0 for z in given)
    recal_given, recal_own, _ = measure(trace, "pop", 4, 0, "spread", 5)
    assert len(recal_given) == len(recal_own) > 0
    assert recal_given != recal_own  # some predictions the policy saw were recalibrated
    assert time_to_target is None or math.isfinite(time_to_target)
    cov = _coverage([0.5, 0.3, 0.01, 0.99, math.nan])
    assert cov == {"count": 4, "cov50": 0.5, "cov90": 0.5}


def test_a_policy_spec_carries_the_studys_recalibration_as_a_string() -> None:
    name, options = policy_options("pop:recalibrate=spread,p_poor=0.1", 5, 0.9)
    assert name == "pop"
    assert options == {"recalibrate": "spread", "p_poor": 0.1, "boundary": 5, "target": 0.9}
    assert "recalibrate" in STUDY_OPTIONS
