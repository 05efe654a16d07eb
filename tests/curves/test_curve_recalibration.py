"""In-study recalibration (hpctune.curves.calibration): the PIT convention, the level map's
properties (identity on uniform PITs, widening on PITs at the ends, narrowing on PITs in the
middle, monotone quantiles, unknown predictions untouched), coverage on held-out synthetic
curves, and the study's recalibration from its trials' later values (StudyCalibration)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from hpctune.curves import LEVELS, CurvePrediction
from hpctune.curves.calibration import Recalibration, StudyCalibration, pit

LEV = np.asarray(LEVELS)
Z = stats.norm.ppf(LEV)


def _prediction(
    centres: np.ndarray | list[float],
    scale: float,
    mode: str = "max",
    bounds: tuple[float, float] = (0.0, 1.0),
    n: int = 5,
) -> CurvePrediction:
    """A prediction of normal quantiles (normalised), one row per future epoch."""
    centres = np.asarray(centres, dtype=float)
    q = np.round(np.clip(centres[:, None] + scale * Z[None, :], 0.0, 1.0), 5)
    return CurvePrediction(
        n=n,
        x_max=n + len(centres),
        bounds=bounds,
        mode=mode,  # type: ignore[arg-type]
        u_quantiles=q,
        sigma=scale,
    )


def _interval(pred: CurvePrediction, low: float = 0.05, high: float = 0.95) -> np.ndarray:
    """Width of the central interval at every future epoch (normalised)."""
    q = pred.u_quantiles
    return np.array([np.interp(high, pred.levels, r) - np.interp(low, pred.levels, r) for r in q])


predictions = st.builds(
    _prediction,
    st.lists(st.floats(0.3, 0.7), min_size=1, max_size=4),
    st.floats(0.005, 0.05),
    st.sampled_from(["max", "min"]),
)


# -- pit ---------------------------------------------------------------------------------------


def test_pit_is_the_predictive_cdf_at_the_value_in_the_callers_units() -> None:
    pred = _prediction([0.6, 0.5], 0.05)  # max, bounds [0, 1]
    assert pit(pred, 7, 0.5) == pytest.approx(0.5)
    assert pit(pred, 6, 0.6) == pytest.approx(0.5)
    assert pit(pred, 7, 0.5 + 0.05 * stats.norm.ppf(0.9)) == pytest.approx(0.9, abs=1e-4)
    # beyond the outermost stored quantiles: exponential tails, still inside (0, 1)
    assert 0 < pit(pred, 7, 0.3) < 0.001 < 0.999 < pit(pred, 7, 0.7) < 1
    assert pit(pred, 7, 0.2) < pit(pred, 7, 0.3)
    # mode "min" on raw loss bounds [0, 2]: u = 1 - y / 2, so y = 1 is the median of u = 0.5 and
    # a smaller loss (better) has a larger PIT
    loss = _prediction([0.5], 0.05, mode="min", bounds=(0.0, 2.0))
    assert pit(loss, 6, 1.0) == pytest.approx(0.5)
    assert pit(loss, 6, 0.9) == pytest.approx(stats.norm.cdf(1.0), abs=1e-3)  # u = 0.55
    assert pit(loss, 6, 0.8) > 0.95 > 0.05 > pit(loss, 6, 1.2)
    with pytest.raises(ValueError, match="epoch"):
        pit(pred, 5, 0.5)
    with pytest.raises(ValueError, match="epoch"):
        pit(pred, 8, 0.5)
    assert math.isnan(pit(pred, 7, math.nan))


def test_a_value_on_an_atom_gets_the_middle_of_its_levels() -> None:
    # a saturated accuracy: every quantile from 85 % up is 1.0, an atom of 15 %
    pred = _prediction([0.99], 0.01)
    top = LEV[pred.u_quantiles[0] >= 1.0]
    assert 1 < top.size < LEV.size - 1
    assert pit(pred, 6, 1.0) == pytest.approx(0.5 * (top[0] + top[-1]))


def test_unknown_predictions_have_no_pit_and_pass_through() -> None:
    unknown = CurvePrediction.unknown_result(2, 10, (0.0, 1.0), "max", "too short")
    assert math.isnan(pit(unknown, 10, 0.5))
    recal = Recalibration.from_pits([0.0, 1.0, 0.01, 0.99])
    assert recal.apply(unknown) is unknown
    assert Recalibration.from_pits([math.nan, 0.5]).pits == (0.5,)


# -- the level map -----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.floats(0, 50), st.randoms(use_true_random=False))
def test_uniform_pits_at_their_expected_order_statistics_give_the_identity(
    k: int, prior_count: float, rnd: object
) -> None:
    pits = [i / (k + 1) for i in range(1, k + 1)]
    rnd.shuffle(pits)  # type: ignore[attr-defined]
    recal = Recalibration.from_pits(pits, prior_count)
    p = np.linspace(0, 1, 101)
    np.testing.assert_allclose(recal.level(p), p, atol=1e-12)
    pred = _prediction([0.5, 0.4], 0.03)
    np.testing.assert_allclose(recal.apply(pred).u_quantiles, pred.u_quantiles, atol=1e-5)


@pytest.mark.parametrize("seed", range(5))
def test_a_uniform_sample_gives_nearly_the_identity(seed: int) -> None:
    pits = np.random.default_rng(seed).uniform(size=2000)
    recal = Recalibration.from_pits(pits)
    p = np.linspace(0, 1, 201)
    assert np.max(np.abs(recal.level(p) - p)) < 0.05  # Kolmogorov-Smirnov: 1.36 / sqrt(2000)
    pred = _prediction([0.5], 0.03)
    assert _interval(recal.apply(pred))[0] == pytest.approx(_interval(pred)[0], rel=0.1)


def test_no_pits_is_the_identity_and_bad_input_is_refused() -> None:
    recal = Recalibration()
    assert recal.count == 0
    assert recal.level(0.3) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="prior_count"):
        Recalibration(prior_count=-1)
    with pytest.raises(ValueError, match="PITs or a positive"):
        Recalibration(prior_count=0)
    with pytest.raises(ValueError, match="sorted"):
        Recalibration((0.6, 0.2))
    with pytest.raises(ValueError, match="sorted"):
        Recalibration((0.2, 1.5))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(st.floats(0, 1), st.just(math.nan)), max_size=60),
    st.floats(0, 20),
    st.booleans(),
    predictions,
)
def test_recalibrated_quantiles_stay_non_decreasing_and_the_rest_unchanged(
    pits: list[float], prior_count: float, symmetric: bool, pred: CurvePrediction
) -> None:
    known = [z for z in pits if not math.isnan(z)]
    if not known and prior_count == 0:
        prior_count = 1.0
    recal = Recalibration.from_pits(pits, prior_count, symmetric=symmetric)
    p = np.linspace(0, 1, 57)
    levels = recal.level(p)
    assert np.all(np.diff(levels) >= -1e-12)
    assert np.all((levels >= 0) & (levels <= 1))
    # level is R's inverse (unless equal or nearly equal PITs make R jump)
    if np.min(np.diff([0.0, *recal.pits, 1.0])) > 1e-6:
        np.testing.assert_allclose(recal.cdf(levels), p, atol=1e-9)
    out = recal.apply(pred)
    assert out.u_quantiles.shape == pred.u_quantiles.shape
    assert np.all(np.diff(out.u_quantiles, axis=1) >= 0)
    assert np.all((out.u_quantiles >= 0) & (out.u_quantiles <= 1))
    raw = out.quantiles((0.001, 0.05, 0.5, 0.95, 0.999))  # in the caller's units, any mode
    assert np.all(np.diff(raw, axis=1) >= -1e-12)
    for name in ("n", "x_max", "bounds", "mode", "levels", "sigma", "families", "unknown"):
        assert getattr(out, name) == getattr(pred, name)
    if symmetric:  # the median stays
        np.testing.assert_allclose(out.median, pred.median, atol=1e-5 * 2)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(st.floats(0, 0.04), st.just(0.0)), min_size=1, max_size=8),
    st.lists(st.one_of(st.floats(0.96, 1), st.just(1.0)), min_size=1, max_size=8),
    st.floats(0, 20),
    st.booleans(),
    predictions,
)
def test_pits_at_the_ends_widen_the_90_percent_interval(
    low: list[float], high: list[float], prior_count: float, symmetric: bool, pred: CurvePrediction
) -> None:
    recal = Recalibration.from_pits(low + high, prior_count, symmetric=symmetric)
    assert recal.level(0.05) < 0.05 < 0.95 < recal.level(0.95)
    assert np.all(_interval(recal.apply(pred)) > _interval(pred) + 1e-4)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.4, 0.6), min_size=2, max_size=60),
    st.floats(0, 20),
    st.booleans(),
    predictions,
)
def test_pits_near_the_middle_narrow_the_90_percent_interval(
    pits: list[float], prior_count: float, symmetric: bool, pred: CurvePrediction
) -> None:
    recal = Recalibration.from_pits(pits, prior_count, symmetric=symmetric)
    assert 0.05 < recal.level(0.05) < recal.level(0.95) < 0.95
    assert np.all(_interval(recal.apply(pred)) < _interval(pred) - 1e-5)  # beyond the rounding


def test_pits_beyond_the_stored_quantiles_extend_into_the_tails_within_the_bounds() -> None:
    far = np.geomspace(1e-8, 5e-4, 20)  # beyond the stored 0.1 % and 99.9 % quantiles
    recal = Recalibration.from_pits([*far, *(1 - far), *np.linspace(0.1, 0.9, 40)])
    assert recal.level(0.05) < 0.001
    pred = _prediction([0.5, 0.02], 0.05)
    out = recal.apply(pred)
    assert out.u_quantiles[0, 0] < pred.u_quantiles[0, 0]  # beyond the old 0.1 % quantile
    assert out.u_quantiles[0, -1] > pred.u_quantiles[0, -1]
    assert np.all(np.diff(out.u_quantiles[0]) > 0)  # no levels piled onto one value
    assert out.u_quantiles[1, 0] == 0.0  # not below the metric's lower bound


# -- coverage on held-out data -----------------------------------------------------------------


def _synthetic(rng: np.random.Generator, count: int, spread: float) -> tuple[list, np.ndarray]:
    """Predictions N(m, 0.03) of curves whose true final value is N(m, spread x 0.03)."""
    centres = rng.uniform(0.3, 0.7, size=count)
    preds = [_prediction([c], 0.03, n=9) for c in centres]
    finals = centres + spread * 0.03 * rng.standard_normal(count)
    return preds, finals


def _coverage(preds: list[CurvePrediction], finals: np.ndarray, level: float) -> float:
    tail = (1 - level) / 2
    bounds = np.array([p.quantiles((tail, 1 - tail))[-1] for p in preds])
    return float(np.mean((bounds[:, 0] <= finals) & (finals <= bounds[:, 1])))


@pytest.mark.parametrize("symmetric", [False, True])
def test_recalibrating_on_over_dispersed_curves_raises_held_out_coverage(symmetric: bool) -> None:
    rng = np.random.default_rng(17)
    seen, seen_finals = _synthetic(rng, 1000, spread=2.0)  # intervals half as wide as needed
    held, held_finals = _synthetic(rng, 2000, spread=2.0)
    recal = Recalibration.from_pits(
        [pit(p, p.x_max, y) for p, y in zip(seen, seen_finals, strict=True)], symmetric=symmetric
    )
    fixed = [recal.apply(p) for p in held]
    assert _coverage(held, held_finals, 0.9) < 0.65  # N(0, 2^2) inside +-1.645: 59 %
    assert 0.86 <= _coverage(fixed, held_finals, 0.9) <= 0.94
    assert 0.44 <= _coverage(fixed, held_finals, 0.5) <= 0.56


def test_recalibrating_on_under_dispersed_curves_lowers_held_out_coverage() -> None:
    rng = np.random.default_rng(18)
    seen, seen_finals = _synthetic(rng, 1000, spread=0.4)  # intervals 2.5 times too wide
    held, held_finals = _synthetic(rng, 2000, spread=0.4)
    recal = Recalibration.from_pits(
        [pit(p, p.x_max, y) for p, y in zip(seen, seen_finals, strict=True)]
    )
    fixed = [recal.apply(p) for p in held]
    assert _coverage(held, held_finals, 0.5) > 0.85
    assert 0.44 <= _coverage(fixed, held_finals, 0.5) <= 0.56
    assert 0.86 <= _coverage(fixed, held_finals, 0.9) <= 0.94


# -- the study's recalibration -----------------------------------------------------------------


def _too_narrow_study(symmetric: bool, trials: int = 40) -> StudyCalibration:
    """Trials 0..trials-1, each predicted after 5 points as N(0.5, 0.03) (normalised) over epochs
    6..9, whose values at epoch 9 are N(0.56, 0.09): intervals a third as wide as needed, and
    the medians low."""
    rng = np.random.default_rng(5)
    study = StudyCalibration(symmetric=symmetric)
    for trial in range(trials):
        study.add(trial, _prediction([0.5] * 4, 0.03, n=5))
        study.observe(trial, 9, 0.56 + 0.09 * float(rng.standard_normal()))
    return study


def test_study_recalibration_is_named_by_the_curves_option() -> None:
    assert StudyCalibration.named("none") is None
    spread, full = StudyCalibration.named("spread"), StudyCalibration.named("full")
    assert spread is not None
    assert spread.symmetric
    assert full is not None
    assert not full.symmetric
    with pytest.raises(ValueError, match="recalibrate must be one of"):
        StudyCalibration.named("on")


def test_a_new_prediction_is_left_as_it_is_until_predictions_after_as_many_points_have_pits() -> (
    None
):
    study = StudyCalibration()
    first = _prediction([0.5] * 4, 0.03, n=5)
    assert study.add(0, first) is first  # no PIT yet
    study.observe(0, 5, 0.9)  # not after the prediction's points: no PIT
    assert study.pit_count() == 0
    study.observe(0, 9, 0.9)
    assert study.pit_count(5) == 1
    other_n = _prediction([0.5] * 3, 0.03, n=6)
    assert study.add(1, other_n) is other_n  # made after 6 points: no PIT there


@pytest.mark.parametrize("symmetric", [False, True])
def test_pits_of_later_values_widen_the_intervals_of_too_narrow_predictions(
    symmetric: bool,
) -> None:
    study = _too_narrow_study(symmetric)
    assert study.pit_count() == study.pit_count(5) == 40
    new = _prediction([0.5] * 4, 0.03, n=5)
    out = study.add(99, new)
    assert np.all(_interval(out) > 2 * _interval(new))
    median = LEVELS.index(0.5)
    moved = abs(out.u_quantiles[-1, median] - new.u_quantiles[-1, median])
    if symmetric:  # the spread only: the median stays
        assert moved == 0.0
    else:  # the later values lie above the predicted median: the full map moves it up
        assert out.u_quantiles[-1, median] > new.u_quantiles[-1, median]


def test_a_later_observation_replaces_a_trials_pits_and_an_ended_trial_keeps_them() -> None:
    study = StudyCalibration(symmetric=False)
    study.add(0, _prediction([0.5] * 4, 0.03, n=5))
    study.observe(0, 7, 0.99)
    high = study.mapping(5).pits
    study.observe(0, 9, 0.5)  # the latest value replaces the earlier one's PIT
    assert study.pit_count(5) == 1
    assert study.mapping(5).pits != high
    assert study.open_trials == [0]
    study.close(0)
    assert study.open_trials == []
    kept = study.mapping(5).pits
    assert len(kept) == 1
    study.observe(0, 9, 0.1)  # a closed trial has no predictions left to lend PITs
    assert study.mapping(5).pits == kept


def test_unknown_predictions_lend_no_pit() -> None:
    study = StudyCalibration()
    study.add(0, CurvePrediction.unknown_result(5, 9, (0.0, 1.0), "max", "constant curve"))
    study.observe(0, 9, 0.5)
    assert study.pit_count() == 0
