"""Calibration on curves drawn from the model's own prior (statistical tests, fixed seeds).

Each curve: families, weights, noise drawn from the prior (:func:`sample_prior_curve`), n observed
epochs, the noisy value at x_max hidden. The fit's 90 % predictive interval at x_max should cover
it in about 90 % of curves. Tolerance: 80-98 % (the brief's range; with 40 curves a perfectly
calibrated model lands in it with probability ~0.97). The fits use the exact likelihood of the
generator (``recency_weighting=False``) and the shipped "hyperdrive" budget (100 x 700).

Measured (x_max 50, n 10-30; coverage of the 90 % interval): 11 families 86 % on seeds 0-99
(84 % with recency weighting, which the generator does not follow); pow3 alone 94 % on seeds
0-99, 91.5 % on 2000-2199, 82 % on 1000-1099; ilog2 alone 88.5 % on 2000-2199 (with a flat PIT
histogram). The 11-family shortfall is the sampler's, not the model's: 700 steps of the stretch
move in 48 dimensions under-explore mixtures whose members only fit the data jointly (started at
the true parameters, coverage is 97 %), and 3600 steps do not change it. The posterior noise sd
is within 2x of the true one for ~77 % of 11-family curves and ~100 % of one-family curves.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpctune.curves import CurveFitter, CurveRequest, FitOptions, get_families, sample_prior_curve

X_MAX = 50


def _coverage(names: tuple[str, ...] | None, seeds: range) -> tuple[float, float, int]:
    """(coverage of the 90 % interval, share of sigma recovered within 2x, known curves)."""
    fams = get_families(None if names is None else list(names))
    requests, hidden, sigmas = [], {}, {}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        curve = sample_prior_curve(fams, X_MAX, rng)
        n = int(rng.integers(10, 31))
        requests.append(CurveRequest(key=seed, y=tuple(curve.y[:n]), x_max=X_MAX, seed=seed))
        hidden[seed] = curve.y[-1]
        sigmas[seed] = curve.sigma
    options = FitOptions(model="domhan", recency_weighting=False, families=names)
    results = CurveFitter(workers=2, options=options).fit(requests)
    covered, sigma_ok, known = 0, 0, 0
    for seed, pred in results.items():
        if pred.unknown:
            continue
        known += 1
        lo, hi = pred.quantiles((0.05, 0.95))[-1]
        covered += int(lo <= hidden[seed] <= hi)  # type: ignore[index]
        sigma_ok += int(0.5 <= pred.sigma / sigmas[seed] <= 2.0)  # type: ignore[index]
    return covered / known, sigma_ok / known, known


@pytest.mark.slow
def test_ninety_percent_interval_covers_the_hidden_final_value_all_families() -> None:
    coverage, sigma_ok, known = _coverage(None, range(40))
    assert known >= 38
    assert 0.80 <= coverage <= 0.98, coverage
    assert sigma_ok >= 0.6, sigma_ok


@pytest.mark.slow
def test_ninety_percent_interval_covers_the_hidden_final_value_one_family() -> None:
    coverage, sigma_ok, known = _coverage(("pow3",), range(40))
    assert known >= 38
    assert 0.80 <= coverage <= 0.98, coverage
    assert sigma_ok >= 0.85, sigma_ok
