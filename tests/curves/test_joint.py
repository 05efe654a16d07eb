"""The joint curve model: the shipped network, its NumPy inference and its invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.curves.joint import (
    MAX_COORDS,
    StudyCurves,
    coordinates,
    encode,
    head,
    load_weights,
    predict_study,
    prediction_of,
)
from hpctune.curves.joint_prior import sample_study
from hpctune.curves.joint_training import Net, batch
from hpctune.curves.predict import BOUND_TOLERANCE, LEVELS, CurvePrediction
from hpctune.study.space import SearchSpace


def _study(rng: np.random.Generator, trials: int, x_max: int = 20) -> StudyCurves:
    curves = [
        0.2 + 0.7 * (1 - np.exp(-np.arange(1, int(n) + 1) / rng.uniform(1, 8)))
        for n in rng.integers(0, x_max, trials)
    ]
    return StudyCurves(curves, rng.random((trials, MAX_COORDS)), x_max, (0.0, 1.0), "max")


def test_numpy_inference_equals_the_pytorch_network_it_was_trained_as() -> None:
    rng = np.random.default_rng(3)
    feats, qf, _, base = batch(rng)
    flat = feats.reshape(-1, feats.shape[-1])
    net = Net(flat.mean(axis=0), flat.std(axis=0) + 1e-3)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        expected = net(*(torch.tensor(a, dtype=torch.float32) for a in (feats, qf, base)))
    weights = {k: v.numpy().astype(np.float64) for k, v in net.state_dict().items()}
    g, n, _ = feats.shape
    rep = encode(weights, flat, np.repeat(np.arange(g), n))
    got = head(weights, rep, qf.reshape(g * n, qf.shape[2], -1), base.reshape(-1))
    np.testing.assert_allclose(got.reshape(expected.shape), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_a_study_prediction_keeps_the_observed_points_and_is_ordered() -> None:
    rng = np.random.default_rng(0)
    study = _study(rng, 12)
    trials, cands = predict_study(study, rng.random((3, MAX_COORDS)))
    assert trials.shape == (12, 20, len(LEVELS))
    assert cands is not None
    assert cands.shape == (3, 20, len(LEVELS))
    for curve, q in zip(study.curves, trials, strict=True):
        np.testing.assert_allclose(q[: len(curve)], np.repeat(curve[:, None], len(LEVELS), 1))
    both = np.concatenate([trials, cands])
    assert np.all(np.diff(both, axis=-1) >= 0)
    assert both.min() >= 0.0
    assert both.max() <= 1.0


def test_a_curve_with_a_non_finite_value_is_unknown_and_does_not_spoil_the_others() -> None:
    rng = np.random.default_rng(1)
    study = _study(rng, 5)
    curves = list(study.curves)
    curves[2] = np.array([0.3, np.nan, 0.5])
    trials, _ = predict_study(
        StudyCurves(curves, study.coords, study.x_max, study.bounds, study.mode)
    )
    assert np.isnan(trials[2]).all()
    assert np.isfinite(np.delete(trials, 2, axis=0)).all()
    assert prediction_of(trials[2], 3, 20, (0.0, 1.0), "max").unknown


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 12), st.integers(0, 2**31 - 1))
def test_the_prediction_of_a_trial_does_not_depend_on_the_order_of_the_others(
    trials: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    study = _study(rng, trials)
    order = rng.permutation(trials)
    shuffled = StudyCurves(
        [study.curves[i] for i in order], study.coords[order], 20, (0.0, 1.0), "max"
    )
    a, _ = predict_study(study)
    b, _ = predict_study(shuffled)
    np.testing.assert_allclose(a[order], b, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_neighbours_change_an_untried_configurations_prediction(seed: int) -> None:
    """In context: a new configuration next to trials that reached the top is predicted higher
    than the same configuration next to trials that stayed at the bottom."""
    rng = np.random.default_rng(seed)
    x = rng.random(MAX_COORDS)
    x[4:] = np.nan  # four hyperparameters (the prior's studies have at most 8)
    near = np.clip(x + rng.normal(0, 0.02, (8, MAX_COORDS)), 0, 1)
    good = [np.full(15, 0.95) for _ in range(8)]
    bad = [np.full(15, 0.1) for _ in range(8)]
    _, high = predict_study(StudyCurves(good, near, 30, (0.0, 1.0), "max"), x[None, :])
    _, low = predict_study(StudyCurves(bad, near, 30, (0.0, 1.0), "max"), x[None, :])
    assert high is not None
    assert low is not None
    assert high[0, -1, LEVELS.index(0.5)] > low[0, -1, LEVELS.index(0.5)] + 0.2


def test_a_target_at_the_bound_is_reachable_not_impossible_for_every_trial() -> None:
    """Issue 32: a curve sitting at the metric's bound must give P(y >= bound) > 0."""
    rng = np.random.default_rng(2)
    curves = [np.r_[np.full(5, 0.5), np.full(10, 1.0)], np.full(15, 0.5)]
    coords = np.full((2, MAX_COORDS), np.nan)
    coords[:, :3] = rng.random((2, 3))
    trials, _ = predict_study(StudyCurves(curves, coords, 30, (0, 1), "max"))
    at_bound = prediction_of(trials[0], 15, 30, (0.0, 1.0), "max")
    assert at_bound.prob_final_at_least(1.0) > 0.2
    assert at_bound.prob_final_at_least(1.0) <= at_bound.prob_final_at_least(0.99)
    # the same for a loss whose bound is 0 (mode min), and for the amortised model's form
    q = np.full((5, len(LEVELS)), 1.0)
    for mode, target in (("max", 500.0), ("min", 0.0)):
        bounds = (0.0, 500.0)
        pred = CurvePrediction(n=5, x_max=10, bounds=bounds, mode=mode, u_quantiles=q)
        assert pred.prob_final_at_least(target) == 1.0
    below = CurvePrediction(
        n=5, x_max=10, bounds=(0.0, 1.0), mode="max", u_quantiles=np.full((5, len(LEVELS)), 0.9)
    )
    assert below.prob_final_at_least(1.0) == 0.0  # far below the bound stays impossible
    assert BOUND_TOLERANCE < 0.01


def test_coordinates_scale_numbers_and_spread_choices() -> None:
    space = SearchSpace.from_dict(
        {
            "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
            "width": {"type": "int", "low": 10, "high": 20},
            "act": {"type": "categorical", "choices": ["relu", "tanh", "gelu"]},
            "fixed": {"type": "fixed", "value": 3},
        }
    )
    coords = coordinates(space, [{"lr": 1e-4, "width": 15, "act": "gelu", "fixed": 3}])
    np.testing.assert_allclose(coords[0, :3], [0.0, 0.5, 1.0])
    assert np.isnan(coords[0, 3:]).all()


def test_the_prior_draws_curves_in_bounds_that_depend_on_the_hyperparameters() -> None:
    rng = np.random.default_rng(0)
    study = sample_study(rng, 64, 30, dims=2)
    assert study.y.shape == (64, 30)
    assert study.x.shape == (64, 2)
    assert study.y.min() >= 0.0
    assert study.y.max() <= 1.0
    # smooth in the hyperparameters: close pairs have closer final values than random pairs
    finals = study.f[:, -1]
    dist = np.linalg.norm(study.x[:, None] - study.x[None, :], axis=-1)
    gaps = np.abs(finals[:, None] - finals[None, :])
    close = dist < np.quantile(dist[dist > 0], 0.1)
    np.fill_diagonal(close, False)
    assert gaps[close].mean() < gaps[~close].mean()


def test_the_shipped_weights_load() -> None:
    weights = load_weights()
    assert int(weights["heads"][0]) >= 1
    assert weights["out.weight"].shape[0] == 2 + len(LEVELS) - 1


@pytest.mark.parametrize("trials", [1, 200])
def test_predict_study_scales_to_many_trials(trials: int) -> None:
    trials_q, _ = predict_study(_study(np.random.default_rng(trials), trials, x_max=40))
    assert trials_q.shape == (trials, 40, len(LEVELS))
