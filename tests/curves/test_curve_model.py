"""The combination model: log-probability, constraints, ML start, initial ensemble, prior draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from hpctune.curves import FAMILIES, build_model, get_families, sample_prior_curve
from hpctune.curves.model import (
    LOG_SIGMA_PRIOR,
    CombinationModel,
    fit_family_ml,
    initial_walkers,
    ml_start,
    recency_weights,
)

X_MAX = 60


def _data(n: int = 20, seed: int = 0) -> np.ndarray:
    x = np.arange(1, n + 1)
    return 0.85 - 0.6 * x**-0.7 + np.random.default_rng(seed).normal(0.0, 0.01, n)


def _model(names: tuple[str, ...] = ("pow3", "ilog2"), **kwargs: object) -> CombinationModel:
    return build_model(get_families(list(names)), _data(), X_MAX, **kwargs)  # type: ignore[arg-type]


def _theta(
    model: CombinationModel, parts: list[list[float]], log_sigma: float, w: list[float]
) -> np.ndarray:
    flat = [v for part in parts for v in part]
    assert len(flat) == model.offsets[-1]
    return np.array([*flat, log_sigma, *w])


def _independent_valid(model: CombinationModel, theta: np.ndarray, mode: str = "soft") -> bool:
    """The documented constraints, checked family by family without the vectorised code."""
    if not np.all((theta >= model.prior_lower) & (theta <= model.prior_upper)):
        return False
    w = theta[model.sigma_index + 1 :]
    if w.sum() <= 0:
        return False
    for k, fam in enumerate(model.families):
        th = theta[model.offsets[k] : model.offsets[k + 1]]
        f = fam.evaluate(np.arange(1, X_MAX + 1), th)
        if not np.all(np.isfinite(f)):
            return False
        if not 0.0 <= f[-1] <= 1.0:
            return False
        if mode == "soft" and f[0] > f[-1]:
            return False
        if mode == "hard" and np.any(np.diff(f) < -1e-12):
            return False
    return True


def test_layout_and_names() -> None:
    model = _model()
    assert model.ndim == 3 + 2 + 1 + 2
    assert model.param_names() == [
        "pow3.c",
        "pow3.a",
        "pow3.log_alpha",
        "ilog2.c",
        "ilog2.a",
        "log_sigma",
        "w.pow3",
        "w.ilog2",
    ]


@pytest.mark.parametrize("recency", [True, False])
def test_log_prob_equals_prior_plus_weighted_gaussian_likelihood(recency: bool) -> None:
    model = _model(recency_weighting=recency)
    theta = _theta(model, [[0.85, 0.6, math.log(0.7)], [0.9, 0.3]], math.log(0.02), [0.7, 0.2])
    y = model.y
    x = np.arange(1, y.size + 1)
    f1 = 0.85 - 0.6 * x**-0.7
    f2 = 0.9 - 0.3 / np.log(x + 1)
    comb = (0.7 * f1 + 0.2 * f2) / 0.9
    omega = 10.0 ** (np.arange(y.size) / y.size) if recency else np.ones(y.size)
    omega = omega / omega.mean()
    loglik = float(np.sum(omega * stats.norm(comb, 0.02).logpdf(y)))
    prior = (
        FAMILIES["pow3"].log_prior(theta[:3])[0]
        + FAMILIES["ilog2"].log_prior(theta[3:5])[0]
        + stats.norm(*LOG_SIGMA_PRIOR).logpdf(math.log(0.02))
    )  # weights ~ U(0, 1): log density 0
    assert model.log_prob(theta[None, :])[0] == pytest.approx(prior + loglik, rel=1e-10)


def test_recency_weights() -> None:
    w = recency_weights(10)
    assert w.mean() == pytest.approx(1.0)
    assert w[-1] / w[0] == pytest.approx(10.0**0.9)
    np.testing.assert_array_equal(recency_weights(4, enabled=False), np.ones(4))


def test_log_prob_minus_inf_exactly_on_violations() -> None:
    model = _model()
    base = [[0.85, 0.6, math.log(0.7)], [0.9, 0.3]]
    good = _theta(model, base, -4.0, [0.5, 0.5])
    cases = {
        "valid": (good, True),
        "negative weight": (_theta(model, base, -4.0, [-0.01, 0.5]), False),
        "weight above 1": (_theta(model, base, -4.0, [1.01, 0.5]), False),
        "zero weights": (_theta(model, base, -4.0, [0.0, 0.0]), False),
        "zero weight, other positive": (_theta(model, base, -4.0, [0.0, 0.5]), True),
        "uniform param out of support": (
            _theta(model, [[0.85, 0.61, math.log(0.7)], [0.9, 0.3]], -4.0, [0.5, 0.5]),
            False,
        ),
        "decreasing family (f(1) > f(x_max))": (
            _theta(model, [[0.85, -0.3, math.log(0.7)], [0.9, 0.3]], -4.0, [0.5, 0.5]),
            False,
        ),
        "f(x_max) above 1": (
            _theta(model, [[1.2, 0.1, math.log(0.7)], [0.9, 0.3]], -4.0, [0.5, 0.5]),
            False,
        ),
        "f(x_max) below 0": (
            _theta(model, [[0.85, 0.6, math.log(0.7)], [0.0, 0.4]], -4.0, [0.5, 0.5]),
            False,
        ),
        "log_sigma beyond its range": (_theta(model, base, 3.5, [0.5, 0.5]), False),
    }
    thetas = np.stack([c[0] for c in cases.values()])
    lp = model.log_prob(thetas)
    for (name, (theta, valid)), value in zip(cases.items(), lp, strict=True):
        assert np.isfinite(value) == valid, name
        assert _independent_valid(model, theta) == valid, name
        assert value == pytest.approx(model.log_prob(theta[None, :])[0], rel=1e-12), name


def test_monotonicity_none_allows_decreasing_families() -> None:
    theta = np.array([0.85, -0.3, math.log(0.7), 0.9, 0.3, -4.0, 0.5, 0.5])
    assert _model().log_prob(theta[None, :])[0] == -np.inf
    assert np.isfinite(_model(monotonicity="none").log_prob(theta[None, :])[0])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), names=st.sampled_from([("pow3", "ilog2"), tuple(FAMILIES)]))
def test_log_prob_is_minus_inf_iff_a_constraint_fails(seed: int, names: tuple[str, ...]) -> None:
    model = _model(names)
    rng = np.random.default_rng(seed)
    parts = [fam.sample_prior(rng, 64) for fam in model.families]
    sigma = rng.normal(-4.0, 1.0, (64, 1))
    weights = rng.uniform(-0.1, 1.1, (64, model.k))
    theta = np.hstack([*parts, sigma, weights])
    lp = model.log_prob(theta)
    for row, value in zip(theta, lp, strict=True):
        assert np.isfinite(value) == _independent_valid(model, row)
        assert not np.isnan(value)
    # soft and hard monotonicity agree: every family is monotone in x for any parameters
    hard = _model(names, monotonicity="hard").log_prob(theta)
    np.testing.assert_array_equal(np.isfinite(hard), np.isfinite(lp))
    # vectorised == one walker at a time (up to summation order)
    loop = np.array([model.log_prob(row[None, :])[0] for row in theta[:16]])
    np.testing.assert_allclose(loop, lp[:16], rtol=1e-12)


def test_ml_start_keeps_families_that_fit_and_starts_valid() -> None:
    model = build_model(get_families(), _data(30), 100)
    started = ml_start(model)
    assert started is not None
    sub, start = started
    assert "pow3" in [f.name for f in sub.families]
    assert np.isfinite(sub.log_prob(start.theta[None, :])[0])
    assert start.cov.shape == (sub.ndim, sub.ndim)
    assert np.all(np.linalg.eigvalsh(start.cov) >= 0)
    comb = sub.f_comb(start.theta[None, :], np.arange(1, 31))[0]
    assert np.sqrt(np.mean((comb - sub.y) ** 2)) < 0.03  # noise sd is 0.01


def test_ml_start_drops_failed_families_and_returns_none_if_all_fail() -> None:
    # data plateau near 0.85 but every family must end in [1.2, 2]: only some can
    model = build_model(get_families(), _data(30), 100, sanity=(1.2, 2.0))
    fitted = [f.name for f in model.families if fit_family_ml(model, f) is not None]
    assert 0 < len(fitted) < 11
    started = ml_start(model)
    assert started is not None
    assert [f.name for f in started[0].families] == fitted
    # pow3 and ilog2 cannot end in [2, 3] (their priors bound f(x_max) below 1.85)
    model = build_model(get_families(["pow3", "ilog2"]), _data(30), 100, sanity=(2.0, 3.0))
    assert ml_start(model) is None


def test_initial_walkers_are_valid_distinct_and_seeded() -> None:
    model = build_model(get_families(), _data(25), 100)
    started = ml_start(model)
    assert started is not None
    sub, start = started
    for cov in (start.cov, None):
        a = initial_walkers(sub, start.theta, 100, np.random.default_rng(4), cov=cov)
        b = initial_walkers(sub, start.theta, 100, np.random.default_rng(4), cov=cov)
        np.testing.assert_array_equal(a, b)
        assert a.shape == (100, sub.ndim)
        assert np.all(np.isfinite(sub.log_prob(a)))
        assert np.all((a >= sub.prior_lower) & (a <= sub.prior_upper))
        assert len({tuple(row) for row in a}) > 90


def test_prior_curves_satisfy_the_constraints() -> None:
    fams = get_families()
    rng = np.random.default_rng(8)
    for _ in range(20):
        curve = sample_prior_curve(fams, X_MAX, rng)
        model = build_model(fams, curve.y[:10], X_MAX)
        assert np.isfinite(model.log_prob(curve.theta[None, :])[0])
        np.testing.assert_allclose(
            model.f_comb(curve.theta[None, :], np.arange(1, X_MAX + 1))[0], curve.f
        )
        assert 0.0 <= curve.f[-1] <= 1.0
    a = sample_prior_curve(fams, X_MAX, np.random.default_rng(1))
    b = sample_prior_curve(fams, X_MAX, np.random.default_rng(1))
    np.testing.assert_array_equal(a.y, b.y)
