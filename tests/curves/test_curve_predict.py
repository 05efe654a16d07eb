"""CurvePrediction: predictive probabilities, HyperDrive's p_m, confidence and ERT, JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from hpctune.curves import LEVELS, Budget, CurvePosterior, CurvePrediction, fit_curve

SMALL = Budget(nwalkers=40, nsamples=160, burn_in=80)


def _posterior(f: np.ndarray, sigma: np.ndarray, n: int, **kwargs: object) -> CurvePosterior:
    return CurvePosterior(
        n=n,
        x_max=f.shape[1],
        bounds=kwargs.pop("bounds", (0.0, 1.0)),  # type: ignore[arg-type]
        mode=kwargs.pop("mode", "max"),  # type: ignore[arg-type]
        f=f.astype(np.float32),
        sigma=sigma.astype(np.float32),
        families=("pow3",),
        weights=(1.0,),
    )


def _exact(f: np.ndarray, sigma: np.ndarray, target: float) -> np.ndarray:
    """P(y >= target) of the mixture of N(f_s, sigma_s^2) over samples s (per column)."""
    return np.mean(stats.norm.sf(target, loc=f, scale=sigma[:, None]), axis=0)


def _linear(offsets: list[float]) -> CurvePrediction:
    """A prediction whose quantile function at epoch n+j is u(level) = offsets[j] + level.

    Then P_j(target) = 1 - (target - offsets[j]) exactly (inside the stored levels).
    """
    q = np.array([[a + lv for lv in LEVELS] for a in offsets])
    return CurvePrediction(
        n=10, x_max=10 + len(offsets), bounds=(0.0, 1.0), mode="max", u_quantiles=q
    )


def test_predictive_probability_matches_the_gaussian_mixture() -> None:
    rng = np.random.default_rng(0)
    s, x_max, n = 2000, 30, 10
    mu = rng.normal(0.6, 0.05, s)
    grow = np.linspace(0.0, 0.1, x_max)
    f = (mu[:, None] + grow[None, :]).astype(np.float32).astype(float)
    sigma = np.exp(rng.normal(np.log(0.02), 0.3, s)).astype(np.float32).astype(float)
    pred = CurvePrediction.from_posterior(_posterior(f, sigma, n))
    assert pred.u_quantiles.shape == (x_max - n, len(LEVELS))
    np.testing.assert_array_equal(pred.epochs, np.arange(n + 1, x_max + 1))
    for target in (0.45, 0.55, 0.6, 0.65, 0.7, 0.8):
        got = pred.prob_at_least(target)
        want = _exact(f[:, n:], sigma, target)
        np.testing.assert_allclose(got, want, atol=0.006)
    # quantiles: the mixture's CDF at the reported quantile is the level
    q = pred.quantiles((0.05, 0.5, 0.95))
    for j, level in enumerate((0.05, 0.5, 0.95)):
        for m in (0, 9, 19):
            p = float(np.mean(stats.norm.cdf(q[m, j], loc=f[:, n + m], scale=sigma)))
            assert p == pytest.approx(level, abs=0.006)
    assert np.all(np.diff(pred.quantiles(), axis=1) >= 0)
    assert pred.median[-1] > pred.median[0]


def test_noise_is_part_of_the_predictive() -> None:
    f = np.full((400, 20), 0.5)
    sigma = np.full(400, 0.05)
    pred = CurvePrediction.from_posterior(_posterior(f, sigma, 5))
    # all samples agree on f = 0.5: the spread is the noise alone, N(0.5, 0.05^2)
    np.testing.assert_allclose(pred.prob_at_least(0.55), stats.norm.sf(1.0), atol=0.01)
    np.testing.assert_allclose(pred.quantiles((0.05,))[:, 0], 0.5 - 1.645 * 0.05, atol=0.004)


def test_first_reach_mass_confidence_and_ert_by_hand() -> None:
    pred = _linear([0.0, 0.1, 0.2, 0.3, 0.4])
    target = 0.75
    np.testing.assert_allclose(pred.prob_at_least(target), [0.25, 0.35, 0.45, 0.55, 0.65])
    np.testing.assert_allclose(pred.first_reach_mass(target), [0.25, 0.1, 0.1, 0.1, 0.1])
    # 35 s left, 10 s per epoch: M = 3, p = p_1 + p_2 + p_3 = P_3
    assert pred.max_epochs(10.0, 35.0) == 3
    assert pred.confidence(target, 10.0, 35.0) == pytest.approx(0.45)
    # x = 1(.25) + 2(.1) + 3(.1) = 0.75 epochs -> ERT = 7.5 s
    assert pred.expected_remaining_time(target, 10.0, 35.0) == pytest.approx(7.5)
    assert pred.expected_remaining_epochs(target, max_epochs=3) == pytest.approx(0.75)
    # all five epochs: 0.25 + 0.2 + 0.3 + 0.4 + 0.5
    assert pred.expected_remaining_epochs(target) == pytest.approx(1.65)
    assert pred.max_epochs(10.0, 1e9) == 5  # capped at the epochs left
    assert pred.confidence(target, 10.0, 1e9) == pytest.approx(0.65)
    assert pred.prob_final_at_least(target) == pytest.approx(0.65)
    # no full epoch fits in the time left: nothing can be reached
    assert pred.confidence(target, 10.0, 9.0) == 0.0
    assert pred.expected_remaining_time(target, 10.0, 9.0) == 0.0
    assert pred.confidence(target, 10.0, -5.0) == 0.0


def test_falling_probabilities_give_negative_masses_as_in_the_paper() -> None:
    pred = _linear([0.4, 0.3, 0.2, 0.1, 0.0])
    np.testing.assert_allclose(pred.first_reach_mass(0.75), [0.65, -0.1, -0.1, -0.1, -0.1])
    assert pred.confidence(0.75, 1.0, 100.0) == pytest.approx(0.25)  # telescopes to P_M
    assert pred.expected_remaining_epochs(0.75) == pytest.approx(0.65 - 0.2 - 0.3 - 0.4 - 0.5)
    assert pred.expected_remaining_time(0.75, 1.0, 100.0) == 0.0  # a negative sum reads as 0


def test_probabilities_outside_the_stored_levels_saturate() -> None:
    pred = _linear([0.2, 0.2])
    np.testing.assert_array_equal(pred.prob_at_least(0.1), [1.0, 1.0])
    np.testing.assert_array_equal(pred.prob_at_least(1.3), [0.0, 0.0])


@settings(max_examples=50, deadline=None)
@given(
    offsets=st.lists(st.floats(-0.5, 0.5), min_size=1, max_size=30),
    target=st.floats(-0.2, 1.2),
    epoch=st.floats(0.1, 100.0),
    left=st.floats(0.0, 5000.0),
)
def test_hyperdrive_quantities_are_consistent(
    offsets: list[float], target: float, epoch: float, left: float
) -> None:
    pred = _linear(offsets)
    probs = pred.prob_at_least(target)
    assert np.all((probs >= 0.0) & (probs <= 1.0))
    masses = pred.first_reach_mass(target)
    m = pred.max_epochs(epoch, left)
    assert 0 <= m <= len(offsets)
    conf = pred.confidence(target, epoch, left)
    assert conf == pytest.approx(float(np.sum(masses[:m])))
    assert conf == pytest.approx(float(probs[m - 1]) if m else 0.0, abs=1e-12)
    ert = pred.expected_remaining_time(target, epoch, left)
    assert 0.0 <= ert <= max(left, 0.0) + 1e-9
    x = pred.expected_remaining_epochs(target, max_epochs=m)
    assert ert == pytest.approx(max(x, 0.0) * epoch, rel=1e-9, abs=1e-9)


def test_unknown_prediction_is_nan_and_neutral() -> None:
    pred = CurvePrediction.unknown_result(5, 20, (0.0, 1.0), "max", "constant curve")
    assert pred.unknown
    assert pred.prob_at_least(0.5).shape == (15,)
    assert np.all(np.isnan(pred.prob_at_least(0.5)))
    assert np.all(np.isnan(pred.first_reach_mass(0.5)))
    assert np.all(np.isnan(pred.quantiles()))
    for value in (
        pred.confidence(0.5, 10.0, 100.0),
        pred.expected_remaining_epochs(0.5),
        pred.expected_remaining_time(0.5, 10.0, 100.0),
        pred.prob_final_at_least(0.5),
    ):
        assert math.isnan(value)
        assert not value >= 0.5  # neither promoted ...
        assert not value < 0.05  # ... nor terminated by a threshold rule


def test_invalid_queries_raise() -> None:
    pred = _linear([0.1, 0.2])
    with pytest.raises(ValueError, match="epoch_seconds"):
        pred.confidence(0.5, 0.0, 100.0)
    with pytest.raises(ValueError, match="levels"):
        pred.quantiles((0.0001,))


def test_json_round_trip_is_exact() -> None:
    x = np.arange(1, 16)
    y = 0.8 - 0.5 * x**-0.6 + np.random.default_rng(3).normal(0, 0.01, 15)
    post = fit_curve(y, x_max=100, rng=np.random.default_rng(2), budget=SMALL, bounds=(0, 1))
    pred = CurvePrediction.from_posterior(post)
    text = json.dumps(pred.to_dict())
    assert len(text) < 30_000
    back = CurvePrediction.from_dict(json.loads(text))
    assert back.to_dict() == pred.to_dict()
    np.testing.assert_array_equal(back.u_quantiles, pred.u_quantiles)
    np.testing.assert_array_equal(back.quantiles(), pred.quantiles())
    np.testing.assert_array_equal(back.prob_at_least(0.75), pred.prob_at_least(0.75))
    assert back.confidence(0.75, 60.0, 3600.0) == pred.confidence(0.75, 60.0, 3600.0)
    assert back.families == pred.families
    unknown = CurvePrediction.unknown_result(2, 50, (0.0, 5.0), "min", "2 observed points")
    again = CurvePrediction.from_dict(json.loads(json.dumps(unknown.to_dict())))
    assert again.unknown
    assert again.to_dict() == unknown.to_dict()


def test_from_dict_rejects_bad_content() -> None:
    good = _linear([0.1, 0.2]).to_dict()
    with pytest.raises(ValueError, match="version"):
        CurvePrediction.from_dict({**good, "version": 99})
    with pytest.raises(ValueError, match="rows"):
        CurvePrediction.from_dict({**good, "x_max": 20})
    with pytest.raises(ValueError, match="bounds"):
        CurvePrediction.from_dict({**good, "bounds": [1.0, 1.0]})
