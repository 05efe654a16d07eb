"""The joint curve model's prior: whole studies whose curve shapes depend on the hyperparameters.

FT-PFN's idea (Rakotoarison et al., "In-context freeze-thaw Bayesian optimization", ICML 2024):
train an in-context network on synthetic *studies* rather than single curves, so that it learns
how the curves of one study relate through their hyperparameters. A study here is drawn as:

* ``d`` hyperparameter coordinates in ``[0, 1]`` (1 to 8), each relevant or not, and ``count``
  configurations drawn uniformly;
* seven **latent functions** of the coordinates, each a smooth random function (random Fourier
  features of a squared-exponential kernel with a length scale per coordinate) plus a small
  independent jitter per configuration: the final quality, the speed, the shape, a late start,
  over-fitting, divergence and the noise level. Nearby configurations therefore have similar
  curves, far ones need not;
* a curve ``start + (ceiling - start) q g(t)``: ``start`` the study's floor (what a model that
  learnt nothing scores) plus a little, ``q`` the quality in ``(0, 1)``, ``g`` a saturating shape
  ``1 - exp(-(t / tau)^alpha)`` (normalised to 1 at infinity, so slow configurations are still
  rising at the horizon), shifted by a **late start** in a third of the studies (sparse parity,
  grokking), bent back by **over-fitting** in a third (a fall after a peak), cut by
  **divergence** (the curve drops to the floor from a random step) where the divergence
  function is high;
* the ceiling may exceed 1 (30 % of studies): the curve is clipped there, so good configurations
  **sit at the metric's bound** (an accuracy of exactly 1.0, the maximum return);
* **noise**: Gaussian or Student-t, AR(1)-correlated in half of the studies, its level a latent
  function too; in a quarter of the studies the values are rounded to a grid (a validation
  set's resolution); observed values are clipped to ``[0, 1]``.

Everything is on the normalised scale (larger is better), as :func:`~.fit.normalise` gives it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpctune.curves.families import FloatArray

#: Most hyperparameter coordinates a study of the prior has.
MAX_DIMS = 8
#: Random Fourier features per latent function.
FEATURES = 24
#: Latent functions: quality, speed, shape, delay, over-fitting, divergence, noise.
LATENTS = 7


@dataclass(frozen=True)
class PriorStudy:
    """One synthetic study.

    Attributes:
        x: Hyperparameter coordinates (count, d), in [0, 1].
        f: Noise-free curves (count, x_max).
        y: Observed curves (count, x_max), in [0, 1].
    """

    x: FloatArray
    f: FloatArray
    y: FloatArray


def _latents(rng: np.random.Generator, x: FloatArray) -> FloatArray:
    """:data:`LATENTS` smooth random functions of ``x`` (count, d), each about N(0, 1)."""
    count, d = x.shape
    relevant = rng.random((LATENTS, d)) < 0.7
    relevant[:, rng.integers(d)] = True  # at least one coordinate matters
    length = np.exp(rng.uniform(np.log(0.15), np.log(1.0), (LATENTS, d)))
    omega = rng.standard_normal((LATENTS, FEATURES, d)) / length[:, None, :]
    omega = np.where(relevant[:, None, :], omega, 0.0)
    phase = rng.uniform(0, 2 * np.pi, (LATENTS, FEATURES))
    weights = rng.standard_normal((LATENTS, FEATURES)) * np.sqrt(2.0 / FEATURES)
    smooth = np.einsum("lf,lfc->lc", weights, np.cos(omega @ x.T + phase[:, :, None]))
    jitter = rng.uniform(0.0, 0.6, (LATENTS, 1)) * rng.standard_normal((LATENTS, count))
    out: FloatArray = (smooth + jitter).T
    return out


def _sigmoid(z: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 / (1.0 + np.exp(-z))
    return out


def sample_study(
    rng: np.random.Generator, count: int, x_max: int, dims: int | None = None
) -> PriorStudy:
    """Draw one study of ``count`` configurations with curves of ``x_max`` steps."""
    d = int(dims if dims is not None else rng.integers(1, MAX_DIMS + 1))
    x = rng.random((count, d))
    z = _latents(rng, x)
    t = np.arange(1, x_max + 1, dtype=float)[None, :]
    floor = rng.uniform(0.0, 0.7) if rng.random() < 0.8 else rng.uniform(0.0, 0.2)
    start = floor + rng.uniform(0.0, 0.05) * _sigmoid(z[:, 1:2])
    ceiling = rng.uniform(1.0, 1.25) if rng.random() < 0.3 else rng.uniform(0.6, 1.0)
    spread = rng.uniform(1.0, 3.0)  # how much the quality varies over the space
    quality = _sigmoid(spread * z[:, 0:1] + rng.normal(0.5, 1.0))
    tau = x_max * np.exp(rng.uniform(-3.0, 0.5) + 0.8 * z[:, 1:2])
    alpha = np.exp(0.5 * z[:, 2:3] + rng.normal(0.0, 0.3))
    if rng.random() < 0.33:  # late learners: a delay that depends on the configuration
        delay = x_max * rng.uniform(0.1, 0.8) * _sigmoid(2.0 * z[:, 3:4])
        tau = np.minimum(tau, x_max * rng.uniform(0.02, 0.2))  # then a quick rise
    else:
        delay = np.zeros((count, 1))
    shifted = np.maximum(t - delay, 0.0)
    g = 1.0 - np.exp(-((shifted / tau) ** alpha))
    f = start + (ceiling - start) * quality * g
    if rng.random() < 0.33:  # over-fitting: a fall after a peak
        peak = x_max * rng.uniform(0.1, 0.9) * _sigmoid(z[:, 4:5])
        drop = (
            (f.max(axis=1, keepdims=True) - start)
            * rng.uniform(0.0, 0.6)
            * _sigmoid(z[:, 4:5] + 1.0)
        )
        after = np.clip((t - peak) / np.maximum(x_max - peak, 1.0), 0.0, 1.0)
        f = f - drop * after ** rng.uniform(0.5, 2.0)
    p_div = _sigmoid(2.5 * z[:, 5] - rng.uniform(2.0, 6.0))
    diverged = rng.random(count) < p_div
    at = rng.integers(0, x_max, count)
    f = np.where(diverged[:, None] & (t - 1 >= at[:, None]), floor, f)
    f = np.clip(f, 0.0, 1.0)
    level = np.exp(rng.uniform(np.log(5e-4), np.log(0.06)) + 0.7 * z[:, 6:7])
    e = (
        rng.standard_t(3, (count, x_max)) / np.sqrt(3.0)
        if rng.random() < 0.3
        else rng.standard_normal((count, x_max))
    )
    if rng.random() < 0.5:
        rho = rng.uniform(0.0, 0.9)
        scale = np.sqrt(1.0 - rho**2)
        for j in range(1, x_max):
            e[:, j] = rho * e[:, j - 1] + scale * e[:, j]
    y = np.clip(f + level * e, 0.0, 1.0)
    if rng.random() < 0.25:  # a discrete metric (a validation set's resolution)
        grid = float(rng.choice([20, 50, 100, 300, 1000]))
        y = np.round(y * grid) / grid
    return PriorStudy(x=x, f=f, y=y)
