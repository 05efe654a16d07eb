"""The hybrid policy (issue 17): ASHA's first rung, rungs scored by the curve model with a noise
guard, and EarlyTerm's rule, on hand-made views with known predictions."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.curves.predict import LEVELS, CurvePrediction
from hpctune.policies import ActionKind, Event, OptionError, make_policy
from hpctune.policies.hybrid import HybridOptions, HybridPolicy, noise, rank_correlation
from hpctune.simulator import simulate
from hpctune.simulator.traces import Trace
from hpctune.study.states import TrialStatus
from tests.policies._views import RNG, context, trial, view


def certain(n: int, x_max: int, value: float) -> CurvePrediction:
    """A prediction certain that every future epoch scores ``value``."""
    q = np.full((x_max - n, len(LEVELS)), value)
    return CurvePrediction(n=n, x_max=x_max, bounds=(0.0, 1.0), mode="max", u_quantiles=q)


def uniform(n: int, x_max: int) -> CurvePrediction:
    """A prediction uniform on [0, 1] at every future epoch: P(y >= t) = 1 - t."""
    q = np.tile(np.asarray(LEVELS), (x_max - n, 1))
    return CurvePrediction(n=n, x_max=x_max, bounds=(0.0, 1.0), mode="max", u_quantiles=q)


def kinds(actions: list) -> list[ActionKind]:
    return [a.kind for a in actions]


def test_defaults_are_the_measured_ones() -> None:
    assert HybridOptions() == HybridOptions(
        grace_period=1,
        reduction_factor=4,
        rungs=0,
        model_from=3,
        check_every=5,
        delta=0.05,
        optimism=0.99,
        noise_guard=2.0,
        noise_share=0.1,
        noise_steps=4,
        adaptive=False,
        probes=12,
        min_pairs=8,
        reliable=0.8,
    )
    assert isinstance(make_policy("hybrid", {}, context()), HybridPolicy)


@pytest.mark.parametrize(
    "options",
    [
        {"grace_period": 0},
        {"reduction_factor": 1},
        {"rungs": -1},
        {"model_from": 2},
        {"check_every": 0},
        {"delta": 0.0},
        {"delta": 1.0},
        {"optimism": 1.0},
        {"noise_guard": -1.0},
        {"noise_guard": math.inf},
        {"noise_share": -0.1},
        {"noise_share": math.nan},
        {"noise_steps": 3},
        {"probes": -1},
        {"min_pairs": 2},
        {"reliable": 1.5},
    ],
)
def test_invalid_options_name_the_option(options: dict) -> None:
    with pytest.raises(OptionError) as err:
        make_policy("hybrid", options, context())
    assert err.value.key == next(iter(options))


def test_first_rung_drops_what_is_below_the_quantile_as_asha() -> None:
    policy = HybridPolicy(context())
    trials = [trial(i, [v]) for i, v in enumerate([0.5, 0.6, 0.7, 0.8])]
    v = view(trials, max_steps=20)
    decided = [list(policy.decide(v, Event.boundary(i, 1), RNG).actions) for i in range(4)]
    # each is above the 75th percentile of those recorded before it
    assert all(kinds(d) == [ActionKind.CONTINUE] for d in decided)
    late = trial(4, [0.55])
    v = view([*trials, late], max_steps=20)
    assert kinds(list(policy.decide(v, Event.boundary(4, 1), RNG).actions)) == [
        ActionKind.TERMINATE
    ]
    # judged once: the same step again does not judge it twice
    assert policy.recorded[1][4] == pytest.approx(0.55)
    assert kinds(list(policy.decide(v, Event.boundary(4, 2), RNG).actions)) == [
        ActionKind.CONTINUE
    ]


def test_first_rung_in_min_mode_ranks_lower_as_better() -> None:
    policy = HybridPolicy(context())
    trials = [trial(i, [v]) for i, v in enumerate([2.0, 1.9, 1.8, 1.7, 2.5])]
    v = view(trials, max_steps=20, mode="min")
    out = [kinds(list(policy.decide(v, Event.boundary(i, 1), RNG).actions)) for i in range(5)]
    assert out[:4] == [[ActionKind.CONTINUE]] * 4
    assert out[4] == [ActionKind.TERMINATE]


def _rung4(policy: HybridPolicy, curves: dict[int, list[float]], predictions: dict) -> dict:
    """Judge every trial of ``curves`` at rung 4 (its prediction arriving), in id order."""
    trials = [trial(i, c) for i, c in curves.items()]
    v = dataclasses.replace(view(trials, max_steps=40), predictions=predictions)
    return {i: kinds(list(policy.decide(v, Event.prediction(i, 4), RNG).actions)) for i in curves}


def test_noise_guard_keeps_a_noisy_trial_a_smooth_one_at_the_same_level_loses() -> None:
    leaders = {i: [0.7, 0.8, 0.85, 0.9] for i in range(4)}
    smooth = [0.6, 0.65, 0.68, 0.7]
    noisy = [0.5, 0.8, 0.4, 0.7]  # the same value at the rung, much noise
    assert noise(trial(0, noisy), 4) > 0.1 > noise(trial(0, smooth), 4)
    guarded = _rung4(HybridPolicy(context()), {**leaders, 4: smooth, 5: noisy}, {})
    assert guarded[4] == [ActionKind.TERMINATE]
    assert guarded[5] == []
    plain = _rung4(
        HybridPolicy(context(), HybridOptions(noise_guard=0.0)), {**leaders, 5: noisy}, {}
    )
    assert plain[5] == [ActionKind.TERMINATE]


def test_study_noise_is_the_median_noise_past_the_second_rung_once_three_trials_have_it() -> None:
    policy = HybridPolicy(context())
    assert policy.noise_window() == (4, 8)
    steep = [0.1, 0.5, 0.7, 0.8]  # the first steps: their second differences are the fall
    smooth = [0.81, 0.82, 0.83, 0.84]
    jitter = [0.80, 0.84, 0.80, 0.84]  # |second differences| 0.08: noise 0.08 / sqrt(6)
    short = trial(9, steep + smooth[:3])  # not yet past step 8
    ended = trial(8, steep, TrialStatus.TERMINATED)
    two = [trial(0, steep + smooth), trial(1, steep + jitter)]
    assert math.isnan(policy.study_noise(view([*two, short, ended], max_steps=40)))
    three = [*two, trial(2, steep + jitter + [0.9]), short, ended]
    assert policy.study_noise(view(three, max_steps=40)) == pytest.approx(0.08 / math.sqrt(6))
    assert policy._window_noise[8] is None
    assert 9 not in policy._window_noise


def test_the_guard_is_dropped_where_the_study_noise_is_small_against_the_rung_s_spread() -> None:
    leaders = {i: [0.5 + 0.1 * i, 0.6 + 0.1 * i, 0.65 + 0.1 * i, 0.7 + 0.1 * i] for i in range(4)}
    long = {i: leaders[i] + [leaders[i][-1] + 0.001 * k for k in range(1, 5)] for i in range(3)}
    curves = {**leaders, **long, 5: [0.5, 0.8, 0.4, 0.7]}  # noisy, just below the cutoff
    # smooth curves past step 4 (noise ~0) and a spread of 0.1 at the rung: no guard
    assert _rung4(HybridPolicy(context()), curves, {})[5] == [ActionKind.TERMINATE]
    # without the study's noise (noise_share 0) the trial's own noise keeps it
    always = HybridPolicy(context(), HybridOptions(noise_share=0.0))
    assert _rung4(always, curves, {})[5] == []
    # a noisy metric past step 4 (noise 0.2 / sqrt 6 > 10 % of 0.1) keeps the guard
    noisy = {i: leaders[i] + [0.7 + 0.1 * i + d for d in (0.1, 0.0, 0.1, 0.0)] for i in range(3)}
    assert _rung4(HybridPolicy(context()), {**curves, **noisy}, {})[5] == []


def test_a_rung_from_model_from_on_scores_the_optimistic_prediction() -> None:
    leaders = {i: [0.7, 0.8, 0.85, 0.9] for i in range(4)}
    flat = [0.6, 0.6, 0.6, 0.6]
    # the same curve: predicted to stay at 0.6, it is stopped; predicted to rise to 0.95, kept
    stays = _rung4(HybridPolicy(context()), {**leaders, 4: flat}, {4: certain(4, 40, 0.6)})
    rises = _rung4(HybridPolicy(context()), {**leaders, 4: flat}, {4: certain(4, 40, 0.95)})
    assert stays[4] == [ActionKind.TERMINATE]
    assert rises[4] == []


def test_a_rung_from_model_from_on_waits_for_the_prediction() -> None:
    policy = HybridPolicy(context())
    trials = [trial(i, [0.9, 0.9, 0.9, 0.9]) for i in range(4)] + [trial(4, [0.1] * 4)]
    v = view(trials, max_steps=40)
    for i in range(5):  # at the BOUNDARY of rung 4 nobody is judged
        assert kinds(list(policy.decide(v, Event.boundary(i, 4), RNG).actions)) == [
            ActionKind.CONTINUE
        ]
    assert 4 not in policy.recorded
    assert [step for step in range(1, 21) if policy.wants_fit(step)] == [4, 5, 10, 15, 16, 20]


def test_curve_rule_stops_what_cannot_beat_the_best() -> None:
    policy = HybridPolicy(context(), HybridOptions(rungs=1))
    best = trial(0, [0.5, 0.7, 0.8, 0.85, 0.9])
    hopeless, hopeful = trial(1, [0.3, 0.4, 0.45, 0.5, 0.5]), trial(2, [0.3, 0.4, 0.45, 0.5, 0.5])
    v = dataclasses.replace(
        view([best, hopeless, hopeful], max_steps=20),
        predictions={1: certain(5, 20, 0.6), 2: uniform(5, 20)},
    )
    assert kinds(list(policy.decide(v, Event.prediction(1, 5), RNG).actions)) == [
        ActionKind.TERMINATE
    ]
    assert list(policy.decide(v, Event.prediction(2, 5), RNG).actions) == []  # P = 0.1 >= 0.05
    # only at multiples of check_every
    assert list(policy.decide(v, Event.prediction(1, 6), RNG).actions) == []


def test_unknown_predictions_stop_nothing() -> None:
    policy = HybridPolicy(context(), HybridOptions(rungs=1))
    unknown = CurvePrediction.unknown_result(5, 20, (0.0, 1.0), "max", "test")
    v = dataclasses.replace(
        view([trial(0, [0.9] * 5), trial(1, [0.1] * 5)], max_steps=20), predictions={1: unknown}
    )
    assert list(policy.decide(v, Event.prediction(1, 5), RNG).actions) == []


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30),
    guard=st.sampled_from([0.0, 2.0]),
)
def test_first_rung_never_stops_a_trial_at_least_as_good_as_every_one_before(
    values: list[float], guard: float
) -> None:
    policy = HybridPolicy(context(), HybridOptions(noise_guard=guard))
    trials = [trial(i, [v]) for i, v in enumerate(values)]
    v = view(trials, max_steps=16)
    for i, value in enumerate(values):
        stopped = kinds(list(policy.decide(v, Event.boundary(i, 1), RNG).actions)) == [
            ActionKind.TERMINATE
        ]
        if value >= max(values[:i], default=-math.inf):
            assert not stopped
    assert set(policy.recorded[1]) == set(range(len(values)))  # stopped or not, recorded


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=20),
    cut=st.integers(0, 20),
)
def test_a_restored_state_decides_as_the_original(values: list[float], cut: int) -> None:
    """Restarting the controller (state_dict through JSON) changes no decision."""
    import json

    cut = min(cut, len(values))
    trials = [trial(i, [v]) for i, v in enumerate(values)]
    v = view(trials, max_steps=16)
    original = HybridPolicy(context())
    for i in range(cut):
        list(original.decide(v, Event.boundary(i, 1), RNG).actions)
    restored = HybridPolicy(context())
    restored.load_state_dict(json.loads(json.dumps(original.state_dict())))
    for i in range(cut, len(values)):
        a = list(original.decide(v, Event.boundary(i, 1), RNG).actions)
        b = list(restored.decide(v, Event.boundary(i, 1), RNG).actions)
        assert a == b


DIABETES = Path(__file__).resolve().parents[2] / "benchmarks" / "traces" / "diabetes.h5"


def test_simulated_noisy_trace_reaches_the_target_where_asha_misses_it() -> None:
    """diabetes (89 validation patients): ASHA's later rungs rank differences below the
    curves' noise and drop every configuration that reaches the target in these orders."""
    trace = Trace.load(DIABETES)
    for seed in (0, 2):
        asha = simulate(trace, "asha", {}, slots=8, seed=seed)
        hybrid = simulate(trace, "hybrid", {}, slots=8, seed=seed)
        assert asha.time_to_target is None
        assert hybrid.time_to_target is not None
        assert any("hybrid:" in d.reason for d in hybrid.decisions)


# -- adaptive ----------------------------------------------------------------------------------


def test_rank_correlation_by_hand() -> None:
    assert rank_correlation(np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 40])) == 1.0
    assert rank_correlation(np.array([1.0, 2, 3, 4]), np.array([4.0, 3, 2, 1])) == -1.0
    # ties share their mean rank: ranks (1.5, 1.5, 3, 4) against (1, 2, 3, 4)
    assert rank_correlation(np.array([1.0, 1, 2, 3]), np.array([1.0, 2, 3, 4])) == pytest.approx(
        4.5 / math.sqrt(4.5 * 5)
    )
    assert math.isnan(rank_correlation(np.array([1.0, 1, 1]), np.array([1.0, 2, 3])))
    assert math.isnan(rank_correlation(np.array([1.0]), np.array([2.0])))


@settings(max_examples=60, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.integers(0, 5).map(float), st.integers(0, 5).map(float)),
        min_size=2,
        max_size=15,
    )
)
def test_rank_correlation_is_spearmans(pairs: list[tuple[float, float]]) -> None:
    import warnings

    from scipy.stats import spearmanr

    x, y = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = float(spearmanr(x, y).statistic)
    got = rank_correlation(x, y)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


ADAPTIVE = HybridOptions(adaptive=True, probes=4, min_pairs=4, reliable=0.8)


def _adaptive_after_probes(probe_rung4: list[float]) -> tuple[HybridPolicy, list]:
    """An adaptive policy whose 4 probes scored 0.1-0.4 at step 1 and ``probe_rung4`` at
    step 4 (judged as the hybrid's there: no prediction, so by their value), and the probes."""
    policy = HybridPolicy(context(40), ADAPTIVE)
    probes = [
        trial(i, [first, first, first, last])
        for i, (first, last) in enumerate(zip([0.1, 0.2, 0.3, 0.4], probe_rung4, strict=True))
    ]
    v = view(probes, max_steps=40)
    for i in range(4):
        assert kinds(list(policy.decide(v, Event.boundary(i, 1), RNG).actions)) == [
            ActionKind.CONTINUE
        ]
    for i in range(4):  # reliability unknown: the hybrid's rung, judged at the prediction
        assert kinds(list(policy.decide(v, Event.boundary(i, 4), RNG).actions)) == [
            ActionKind.CONTINUE
        ]
        list(policy.decide(v, Event.prediction(i, 4), RNG).actions)
    return policy, probes


def test_adaptive_correlated_probes_judge_the_next_rungs_as_asha() -> None:
    policy, probes = _adaptive_after_probes([0.5, 0.6, 0.7, 0.8])
    assert policy.reliability() == 1.0
    # above the first rung's cutoff (0.325), below the second's (0.725): ASHA stops it when it
    # reaches the rung, without waiting for a prediction, whatever its prediction
    late = trial(4, [0.45, 0.46, 0.47, 0.48])
    v = dataclasses.replace(
        view([*probes, late], max_steps=40), predictions={4: certain(4, 40, 0.95)}
    )
    assert kinds(list(policy.decide(v, Event.boundary(4, 1), RNG).actions)) == [
        ActionKind.CONTINUE
    ]
    decided = list(policy.decide(v, Event.boundary(4, 4), RNG).actions)
    assert kinds(decided) == [ActionKind.TERMINATE]
    assert "as ASHA, rank correlation 1.00" in decided[0].reason
    assert policy.values[4][4] == pytest.approx(0.48)


def test_adaptive_uncorrelated_probes_keep_the_hybrid_rungs() -> None:
    policy, probes = _adaptive_after_probes([0.8, 0.7, 0.6, 0.5])
    assert policy.reliability() == -1.0
    late = trial(4, [0.45, 0.46, 0.47, 0.48])
    v = dataclasses.replace(
        view([*probes, late], max_steps=40), predictions={4: certain(4, 40, 0.95)}
    )
    list(policy.decide(v, Event.boundary(4, 1), RNG).actions)
    # the hybrid's rung: nothing at the boundary, the optimistic prediction (0.95) keeps it
    assert kinds(list(policy.decide(v, Event.boundary(4, 4), RNG).actions)) == [
        ActionKind.CONTINUE
    ]
    assert list(policy.decide(v, Event.prediction(4, 4), RNG).actions) == []


def test_adaptive_probe_below_the_first_cutoff_is_measured_then_stopped() -> None:
    policy = HybridPolicy(context(40), ADAPTIVE)
    trials = [trial(0, [0.4, 0.4, 0.4, 0.9]), trial(1, [0.3, 0.3, 0.3, 0.2])]
    v = view(trials, max_steps=40)
    for i in range(2):  # trial 1 is below the cutoff 0.4, but a probe: it goes on
        assert kinds(list(policy.decide(v, Event.boundary(i, 1), RNG).actions)) == [
            ActionKind.CONTINUE
        ]
    assert policy.held == {1}
    decided = list(policy.decide(v, Event.boundary(1, 4), RNG).actions)
    assert kinds(decided) == [ActionKind.TERMINATE]
    assert "probe" in decided[0].reason
    assert policy.values[4] == {1: pytest.approx(0.3)}  # its best so far, for the correlation
    assert 4 not in policy._sorted_values  # not in the rung's cutoff
    # without ``adaptive`` it stops at the first rung, and the state is the hybrid's as before
    plain = HybridPolicy(context(40))
    assert [kinds(list(plain.decide(v, Event.boundary(i, 1), RNG).actions)) for i in range(2)] == [
        [ActionKind.CONTINUE],
        [ActionKind.TERMINATE],
    ]
    assert set(plain.state_dict()) == {"milestones", "recorded"}


def test_adaptive_state_round_trips() -> None:
    import json

    policy, probes = _adaptive_after_probes([0.5, 0.6, 0.7, 0.8])
    policy.held.add(7)
    restored = HybridPolicy(context(40), ADAPTIVE)
    restored.load_state_dict(json.loads(json.dumps(policy.state_dict())))
    assert restored.values == policy.values
    assert restored.held == {7}
    assert restored.reliability() == policy.reliability() == 1.0
    late = trial(4, [0.45, 0.46, 0.47, 0.48])
    v = view([*probes, late], max_steps=40)
    for p in (policy, restored):
        list(p.decide(v, Event.boundary(4, 1), RNG).actions)
    assert list(policy.decide(v, Event.boundary(4, 4), RNG).actions) == list(
        restored.decide(v, Event.boundary(4, 4), RNG).actions
    )
