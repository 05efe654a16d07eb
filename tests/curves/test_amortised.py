"""The amortised curve model: bounds, degenerate input, calibration on its prior, real curves,
the CurvePrediction queries, and a short retraining run."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.curves import CurvePrediction, CurveRequest, FitOptions, fit_many
from hpctune.curves.amortised import load_weights, predict_curves
from hpctune.curves.prior import sample_curves
from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "benchmarks" / "traces"

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@st.composite
def bounded_curves(draw: st.DrawFn) -> tuple[list[float], int, tuple[float, float], str]:
    """A curve of 3..40 values inside random bounds, its horizon and mode."""
    low = draw(st.floats(-100, 100))
    span = draw(st.floats(1e-3, 1e3))
    n = draw(st.integers(3, 40))
    shares = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    x_max = draw(st.integers(n + 1, 3 * n + 60))
    mode = draw(st.sampled_from(["max", "min"]))
    return [low + span * v for v in shares], x_max, (low, low + span), mode


@settings(max_examples=60, deadline=None)
@given(bounded_curves())
def test_every_quantile_lies_inside_the_metric_bounds(
    case: tuple[list[float], int, tuple[float, float], str],
) -> None:
    y, x_max, bounds, mode = case
    (pred,) = predict_curves([y], x_max, bounds=bounds, mode=mode)  # type: ignore[arg-type]
    assert not pred.unknown
    q = pred.quantiles((0.001, 0.05, 0.5, 0.95, 0.999))
    assert q.shape == (x_max - len(y), 5)
    tol = 1e-9 * (bounds[1] - bounds[0]) + 1e-9 * abs(bounds[0])
    assert np.all(q >= bounds[0] - tol - (bounds[1] - bounds[0]) * 1e-5)
    assert np.all(q <= bounds[1] + tol + (bounds[1] - bounds[0]) * 1e-5)
    # quantiles of the raw value increase with the level, whatever the mode
    assert np.all(np.diff(q, axis=1) >= -tol)
    # P(y(m) at least as good as t) falls as t gets better, and is a probability
    lo, hi = (bounds[0], bounds[1]) if mode == "max" else (bounds[1], bounds[0])
    probs = np.array([pred.prob_at_least(t) for t in np.linspace(lo, hi, 7)])
    assert np.all((probs >= 0) & (probs <= 1))
    assert np.all(np.diff(probs, axis=0) <= 1e-12)


def test_a_saturated_accuracy_never_gets_a_quantile_above_one() -> None:
    # issue 17: a fit of a metric bounded by 1 gave a 95 % quantile of 1.18
    y = [0.6, 0.9, 0.97, 0.985, 0.99, 0.995, 0.997, 0.998]
    (pred,) = predict_curves([y], 30, bounds=(0.0, 1.0), mode="max")
    q95 = pred.quantiles((0.95,))[:, 0]
    assert np.all(q95 <= 1.0)
    assert pred.median[-1] > 0.98
    assert pred.prob_final_at_least(1.0 + 1e-9) == 0.0


@settings(max_examples=40, deadline=None)
@given(
    y=st.one_of(
        st.lists(finite, min_size=0, max_size=2),  # too few points
        st.lists(finite, min_size=3, max_size=10).map(lambda v: [*v[:-1], math.nan]),
        st.lists(finite, min_size=3, max_size=10).map(lambda v: [math.inf, *v]),
    ),
    mode=st.sampled_from(["max", "min"]),
)
def test_degenerate_input_gives_an_unknown_prediction_answering_nan(
    y: list[float], mode: str
) -> None:
    (pred,) = predict_curves([y], 40, bounds=(-2e6, 2e6), mode=mode)  # type: ignore[arg-type]
    assert pred.unknown
    assert pred.reason
    assert np.all(np.isnan(pred.prob_at_least(0.0)))
    assert math.isnan(pred.confidence(0.0, 1.0, 100.0))
    assert math.isnan(pred.expected_remaining_time(0.0, 1.0, 100.0))
    assert math.isnan(pred.prob_final_at_least(0.0))


def test_a_flat_curve_is_predicted_flat_with_a_chance_to_start_learning() -> None:
    # Domhan's model cannot fit a constant curve (unknown); the amortised one predicts it
    (flat,) = predict_curves([[0.0967] * 8], 60, bounds=(0.0, 1.0), mode="max")
    assert not flat.unknown
    q05, q50, q95 = flat.quantiles((0.05, 0.5, 0.95))[-1]
    assert q05 >= 0.0
    assert abs(q50 - 0.0967) < 0.05  # most likely it stays near chance
    assert q95 > 0.2  # but it may start to learn


def test_no_epoch_left_is_unknown_and_bad_arguments_raise() -> None:
    (pred,) = predict_curves([[0.1, 0.2, 0.3]], 3)
    assert pred.unknown
    assert "no epoch left" in pred.reason
    with pytest.raises(ValueError, match="bounds"):
        predict_curves([[0.1, 0.2, 0.3]], 10, bounds=(1.0, 0.0))
    with pytest.raises(ValueError, match="mode"):
        predict_curves([[0.1, 0.2, 0.3]], 10, mode="up")  # type: ignore[arg-type]
    # through fit_many a bad request becomes an unknown prediction, the others are kept
    good = CurveRequest(key="good", y=(0.1, 0.3, 0.4, 0.45), x_max=10)
    bad = CurveRequest(key="bad", y=(0.1, 0.3, 0.4, 0.45), x_max=10, bounds=(1.0, 1.0))
    results = fit_many([good, bad], FitOptions())
    assert not results[0].unknown
    assert results[1].unknown
    assert "bounds" in results[1].reason


def test_a_batch_predicts_each_curve_as_alone_in_input_order() -> None:
    rng = np.random.default_rng(3)
    curves = sample_curves(rng, 6, 50).y
    ys = [list(curves[i, : 5 + 7 * i]) for i in range(6)]
    horizons = [50, 50, 60, 50, 80, 60]
    batch = predict_curves(ys, horizons, mode="max")
    for y, x_max, pred in zip(ys, horizons, batch, strict=True):
        (alone,) = predict_curves([y], x_max)
        assert (pred.n, pred.x_max) == (len(y), x_max)
        assert np.allclose(pred.u_quantiles, alone.u_quantiles, atol=2e-5)


def test_ninety_percent_intervals_cover_prior_curves_about_ninety_percent_of_the_time() -> None:
    # curves from the prior the network was trained on (other seeds): 600 curves, 3 cuts each
    rng = np.random.default_rng(2026)
    covered50, covered90, total = 0, 0, 0
    for x_max in (20, 60, 150):
        y = sample_curves(rng, 200, x_max).y
        for fraction in (0.1, 0.3, 0.6):
            n = max(3, round(fraction * x_max))
            preds = predict_curves([row[:n] for row in y], x_max)
            for row, pred in zip(y, preds, strict=True):
                if pred.unknown:
                    continue
                q05, q25, q75, q95 = pred.quantiles((0.05, 0.25, 0.75, 0.95))[-1]
                covered90 += int(q05 <= row[-1] <= q95)
                covered50 += int(q25 <= row[-1] <= q75)
                total += 1
    assert total > 1700
    assert 0.86 <= covered90 / total <= 0.94, covered90 / total
    assert 0.45 <= covered50 / total <= 0.55, covered50 / total


def test_real_curves_over_fitting_and_still_improving() -> None:
    diabetes = Trace.load(TRACES / "diabetes.h5")  # validation MSE, mode min, bounds [0, 2]
    done = np.flatnonzero(diabetes.lengths() == diabetes.num_epochs)
    curves = diabetes.curves[done]
    # curves that passed their minimum by epoch 20 and rose by at least 0.05 since
    n = 20
    turned = [c for c in curves if np.argmin(c[:n]) < n - 5 and c[n - 1] - c[:n].min() > 0.05]
    assert len(turned) >= 5
    preds = predict_curves(
        [c[:n] for c in turned], diabetes.num_epochs, bounds=(0.0, 2.0), mode="min"
    )
    for c, pred in zip(turned, preds, strict=True):
        # the model does not send an over-fitting curve back to its minimum
        assert pred.median[-1] > c[:n].min() + 0.02
    charlm = Trace.load(TRACES / "charlm.h5")  # still improving at the last step
    best = np.argsort(charlm.curves[:, -1])[:10]
    preds = predict_curves(
        [charlm.curves[i, :30] for i in best], 60, bounds=(0.0, 5.0), mode="min"
    )
    for i, pred in zip(best, preds, strict=True):
        assert pred.median[-1] < charlm.curves[i, 29]  # it keeps improving
        lo, hi = pred.quantiles((0.05, 0.95))[-1]
        assert (
            lo <= charlm.curves[i, -1] <= hi or abs(pred.median[-1] - charlm.curves[i, -1]) < 0.05
        )


def test_the_queries_pop_and_earlyterm_use_are_consistent_and_round_trip() -> None:
    y = [0.30, 0.45, 0.55, 0.61, 0.65, 0.68, 0.70, 0.715]
    (pred,) = predict_curves([y], 40)
    target = 0.75
    probs = pred.prob_at_least(target)
    assert probs.shape == (32,)
    assert pred.prob_final_at_least(target) == pytest.approx(probs[-1])
    mass = pred.first_reach_mass(target)
    assert pred.confidence(target, 2.0, 1e9) == pytest.approx(mass.sum())
    assert pred.confidence(target, 2.0, 10.0) == pytest.approx(mass[:5].sum())
    x = pred.expected_remaining_epochs(target)
    assert x == pytest.approx(float(np.dot(np.arange(1, 33), mass)))
    assert pred.expected_remaining_time(target, 2.0, 1e9) == pytest.approx(2.0 * x)
    # an easy target is likely reached, a hard one is not
    assert pred.prob_final_at_least(0.70) > 0.8 > 0.05 > pred.prob_final_at_least(0.95)
    again = CurvePrediction.from_dict(pred.to_dict())
    assert np.array_equal(again.u_quantiles, pred.u_quantiles)
    assert again.prob_final_at_least(target) == pred.prob_final_at_least(target)


def test_the_shipped_weights_are_small_and_a_short_retraining_run_gives_a_usable_network(
    tmp_path: Path,
) -> None:
    torch = pytest.importorskip("torch")
    from hpctune.curves import training
    from hpctune.curves.amortised import forward

    shipped = REPO / "hpctune" / "curves" / "data" / "amortised.npz"
    assert shipped.stat().st_size < 1_000_000
    # the NumPy network is the PyTorch one
    rng = np.random.default_rng(0)
    x, q, *_ = training.batch(rng, groups=2, per_group=4)
    net = training.Net(x.mean(axis=0), x.std(axis=0) + 1e-3)
    weights = {k: v.detach().numpy().astype(np.float64) for k, v in net.state_dict().items()}
    expected = net(torch.tensor(x, dtype=torch.float32), torch.tensor(q, dtype=torch.float32))
    assert np.allclose(forward(weights, x, q), expected.detach().numpy(), atol=1e-4)
    # a few steps of training write weights that load and predict
    out = tmp_path / "net.npz"
    assert training.main(["--out", str(out), "--steps", "3"]) == 0
    (pred,) = predict_curves([[0.2, 0.4, 0.5, 0.55]], 20, weights=load_weights(str(out)))
    assert not pred.unknown
    assert pred.u_quantiles.shape == (16, 27)
