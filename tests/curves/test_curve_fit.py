"""fit_curve: degenerate input, strict mode, normalisation, determinism, a sanity recovery."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpctune.curves import (
    BUDGETS,
    Budget,
    CurvePosterior,
    CurvePrediction,
    denormalise,
    fit_curve,
    normalise,
)
from hpctune.errors import CurveFitError

SMALL = Budget(nwalkers=40, nsamples=160, burn_in=80)  # a quick budget for plumbing tests


def _acc(n: int, seed: int = 0) -> np.ndarray:
    """A pow3 accuracy curve with noise, rounded to multiples of 2^-12 (exact arithmetic)."""
    x = np.arange(1, n + 1)
    y = 0.85 - 0.6 * x**-0.7 + np.random.default_rng(seed).normal(0.0, 0.01, n)
    return np.round(y * 4096) / 4096


DEGENERATE = {
    "no points": ([], 50, "0 observed points"),
    "one point": ([0.5], 50, "at least 3"),
    "two points": ([0.2, 0.4], 50, "at least 3"),
    "nan": ([0.1, 0.2, math.nan, 0.4], 50, "non-finite"),
    "inf": ([0.1, 0.2, math.inf, 0.4], 50, "non-finite"),
    "constant": ([0.5] * 12, 50, "constant"),
    "no horizon left": (list(_acc(20)), 20, "no epoch left"),
}


@pytest.mark.parametrize("case", list(DEGENERATE))
def test_degenerate_input_gives_unknown(case: str) -> None:
    y, x_max, reason = DEGENERATE[case]
    post = fit_curve(y, x_max=x_max, rng=np.random.default_rng(0), budget=SMALL)
    assert post.unknown
    assert reason in post.reason
    assert post.n_samples == 0
    pred = CurvePrediction.from_posterior(post)
    assert pred.unknown
    assert pred.reason == post.reason
    with pytest.raises(CurveFitError, match="cannot fit"):
        fit_curve(y, x_max=x_max, rng=np.random.default_rng(0), budget=SMALL, strict=True)


def test_all_fits_failing_gives_unknown() -> None:
    # pow3 and ilog2 cannot end in [2, 3] (their priors bound f(x_max) below 1.85)
    kwargs = {"families": ["pow3", "ilog2"], "sanity": (2.0, 3.0), "budget": SMALL}
    post = fit_curve(_acc(15), x_max=50, rng=np.random.default_rng(0), **kwargs)  # type: ignore[arg-type]
    assert post.unknown
    assert "ML fit failed" in post.reason
    with pytest.raises(CurveFitError):
        fit_curve(_acc(15), x_max=50, rng=np.random.default_rng(0), strict=True, **kwargs)  # type: ignore[arg-type]


def test_fits_that_overshoot_the_scale_are_kept_on_its_boundary() -> None:
    # a curve at the top of its scale: unconstrained fits end above 1.0 (the reference drops
    # them); the hinge penalty keeps them, ending at 1.0
    x = np.arange(1, 21)
    y = np.minimum(1.0, 1.02 - 0.3 * x**-1.0)
    post = fit_curve(y, x_max=60, rng=np.random.default_rng(0), budget=SMALL)
    assert not post.unknown
    assert len(post.families) >= 6
    assert float(np.max(post.f[:, -1])) <= 1.0 + 1e-6


def test_min_points_is_configurable() -> None:
    y = _acc(4)
    assert fit_curve(y, x_max=30, rng=np.random.default_rng(0), budget=SMALL, min_points=5).unknown
    assert not fit_curve(y, x_max=30, rng=np.random.default_rng(0), budget=SMALL).unknown


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bounds": (1.0, 0.0)}, "bounds"),
        ({"bounds": (0.0, math.inf)}, "bounds"),
        ({"mode": "up"}, "mode"),
        ({"budget": "fast"}, "valid names"),
        ({"families": ["pow5"]}, "valid names"),
        ({"min_points": 2}, "min_points"),
        ({"x_max": 0}, "x_max"),
    ],
)
def test_invalid_arguments_raise_value_error(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"x_max": 50, "rng": np.random.default_rng(0), "budget": SMALL}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        fit_curve(_acc(10), **args)  # type: ignore[arg-type]


def test_budget_validation_and_names() -> None:
    assert BUDGETS["hyperdrive"] == Budget(100, 700, 300)
    assert BUDGETS["domhan"] == Budget(100, 3600, 600)
    with pytest.raises(ValueError, match="burn_in"):
        Budget(100, 700, 700)
    with pytest.raises(ValueError, match="nwalkers"):
        Budget(1, 700, 10)


def test_normalise_round_trip() -> None:
    y = np.array([1.0, 1.5, 2.5, 3.0])
    np.testing.assert_allclose(normalise(y, (1.0, 3.0), "max"), [0.0, 0.25, 0.75, 1.0])
    np.testing.assert_allclose(normalise(y, (1.0, 3.0), "min"), [1.0, 0.75, 0.25, 0.0])
    for mode in ("max", "min"):
        np.testing.assert_allclose(
            denormalise(normalise(y, (1.0, 3.0), mode), (1.0, 3.0), mode), y
        )


def test_mode_min_is_the_flipped_max_fit() -> None:
    acc = _acc(20)
    loss = 3.0 - 2.0 * acc  # bounds (1, 3): normalised "min" loss == accuracy, exactly
    a = fit_curve(acc, x_max=60, rng=np.random.default_rng(5), budget=SMALL)
    b = fit_curve(
        loss, x_max=60, rng=np.random.default_rng(5), budget=SMALL, bounds=(1, 3), mode="min"
    )
    np.testing.assert_array_equal(a.f, b.f)
    np.testing.assert_array_equal(a.sigma, b.sigma)
    pa, pb = CurvePrediction.from_posterior(a), CurvePrediction.from_posterior(b)
    np.testing.assert_allclose(pb.quantiles(), 3.0 - 2.0 * pa.quantiles()[:, ::-1], atol=1e-9)
    np.testing.assert_allclose(pb.median, 3.0 - 2.0 * pa.median, atol=1e-9)
    # "at least as good as": loss <= 1.4  <=>  accuracy >= 0.8
    np.testing.assert_allclose(pb.prob_at_least(1.4), pa.prob_at_least(0.8), atol=1e-9)
    assert pb.prob_final_at_least(1.4) == pytest.approx(pa.prob_final_at_least(0.8), abs=1e-9)
    # the loss curve's median is decreasing in epochs, the accuracy's increasing
    assert pb.median[-1] < pb.median[0]
    assert pa.median[-1] > pa.median[0]


def test_fit_is_deterministic_and_leaves_global_numpy_state_alone() -> None:
    y = _acc(15)
    np.random.seed(123)  # noqa: NPY002 - the test checks the legacy global state is untouched
    before = np.random.get_state()  # noqa: NPY002
    a = fit_curve(y, x_max=40, rng=np.random.default_rng(9), budget=SMALL)
    after = np.random.get_state()  # noqa: NPY002
    assert before[0] == after[0]
    np.testing.assert_array_equal(before[1], after[1])
    assert before[2:] == after[2:]
    np.random.seed(999)  # noqa: NPY002 - a different global state must not change the result
    b = fit_curve(y, x_max=40, rng=np.random.default_rng(9), budget=SMALL)
    c = fit_curve(y, x_max=40, rng=np.random.default_rng(10), budget=SMALL)
    np.testing.assert_array_equal(a.f, b.f)
    assert not np.array_equal(a.f, c.f)


def test_posterior_is_small_float32_on_the_full_grid() -> None:
    post = fit_curve(_acc(12), x_max=80, rng=np.random.default_rng(1), budget=SMALL, n_keep=200)
    assert isinstance(post, CurvePosterior)
    assert post.f.dtype == np.float32
    assert post.f.shape[1] == 80
    # whole snapshots of the ensemble (raised to 2 x dimension <= 96 walkers)
    assert 200 <= post.n_samples < 200 + 96
    assert post.sigma.shape == (post.n_samples,)
    assert np.all(post.sigma > 0)
    assert post.budget == SMALL
    assert 0.0 < post.acceptance <= 1.0
    assert len(post.weights) == len(post.families)
    assert sum(post.weights) == pytest.approx(1.0, abs=1e-4)


def test_walkers_are_raised_to_twice_the_dimension() -> None:
    tiny = Budget(nwalkers=4, nsamples=40, burn_in=20)
    post = fit_curve(_acc(12), x_max=30, rng=np.random.default_rng(1), budget=tiny, n_keep=10)
    # 11 families: dimension 36 + 1 + 11 = 48 at most, so at least 2 x 48 walkers per snapshot
    dim = 1 + len(post.families) + sum(
        {"vap": 3, "pow3": 3, "loglog_linear": 2, "hill3": 3, "log_power": 3, "pow4": 4,
         "mmf": 4, "exp4": 4, "janoschek": 4, "weibull": 4, "ilog2": 2}[f] for f in post.families
    )  # fmt: skip
    assert post.n_samples % (2 * dim) == 0


def test_known_curve_is_recovered_with_the_hyperdrive_budget() -> None:
    x = np.arange(1, 101)
    truth = 0.85 - 0.6 * x**-0.7
    y = truth + np.random.default_rng(1).normal(0.0, 0.01, 100)
    post = fit_curve(y[:40], x_max=100, rng=np.random.default_rng(0))
    lo, hi = np.percentile(post.f[:, -1], [5, 95])
    assert lo <= truth[-1] <= hi
    assert hi - lo < 0.1
    assert 0.005 < float(np.median(post.sigma)) < 0.02
    fitted = np.median(post.f[:, :40], axis=0)
    # epoch 1 (0.25, far below the rest) is fitted loosely: recency weighting favours late points
    assert np.sqrt(np.mean((fitted[4:] - truth[4:40]) ** 2)) < 0.01


@pytest.mark.parametrize(
    "kwargs",
    [
        {"init": "ball"},
        {"init_weights": "nnls"},
        {"monotonicity": "hard"},
        {"monotonicity": "none", "recency_weighting": False},
        {"families": ["pow3", "weibull"], "budget": "domhan", "n_keep": 100},
    ],
)
def test_options_give_valid_posteriors(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"x_max": 50, "rng": np.random.default_rng(4), "budget": SMALL}
    args.update(kwargs)
    post = fit_curve(_acc(15), **args)  # type: ignore[arg-type]
    assert not post.unknown
    assert np.all(np.isfinite(post.f))
    assert np.all((post.f[:, -1] >= 0.0) & (post.f[:, -1] <= 1.0))
    if kwargs.get("monotonicity") == "hard":
        assert np.all(np.diff(post.f, axis=1) >= -1e-6)  # a mix of monotone curves
    pred = CurvePrediction.from_posterior(post)
    assert np.all(np.diff(pred.quantiles(), axis=1) >= 0)
