"""The amortised curve model's prior: synthetic learning curves, many at once (LC-PFN's method).

LC-PFN (Adriaensen et al., NeurIPS 2023; REFERENCE.md §6.2) trains a network on curves drawn from
Domhan et al.'s parametric prior. This prior starts from the same families and priors
(:mod:`.families`, the LC-PFN "peaked" priors) and adds what real curves do and Domhan's model
excludes, on the normalised scale (``[0, 1]``, larger is better):

* **shape and level apart**: one to three families with Dirichlet weights give a shape ``g``
  rising from 0 at epoch 1 to 1 at ``x_max`` (each family's curve scaled by its own rise); the
  curve is ``start + (end - start) g``, with ``start ~ U(0, 0.95)`` and the rise a Beta share of
  the room above it (a fifth of the curves barely learn: a share below 2 %);
* **a late start** (25 %): flat at ``start`` for up to half the horizon, then the shape;
* **turning back** (30 %, over-fitting): after a peak at 5-90 % of the horizon the curve falls by
  up to its whole rise, ``drop * ((x - peak) / (x_max - peak))^gamma``;
* **divergence** (2 %): from a random epoch on, the curve sits at ``start``;
* **noise**: standard deviation log-uniform in [1e-4, 0.1] (a fixed share relative to the rise
  in 40 % of curves), Gaussian or Student-t (3 degrees of freedom, 30 %), AR(1) correlated in half
  of the curves (coefficient up to 0.9);
* **bounds**: observed values are clipped to ``[0, 1]`` (a bounded metric never leaves them).

Each family's draw must satisfy the model's constraints of :mod:`.model` (finite, ``f(1) <=
f(x_max)``, ``f(x_max)`` in [0, 1]) and rise by at least 1e-3; invalid draws are redrawn in
batches (exact rejection sampling of the constrained family prior).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpctune.curves.families import FAMILIES, FloatArray, Grid

#: Families the prior mixes (all 11 of Domhan et al.).
PRIOR_FAMILIES: tuple[str, ...] = tuple(FAMILIES)


@dataclass(frozen=True)
class PriorBatch:
    """Synthetic curves on epochs 1..x_max (normalised scale).

    Attributes:
        f: Noise-free curves (count, x_max).
        y: Observed curves: ``f`` plus noise, clipped to [0, 1] (count, x_max).
        sigma: Noise standard deviation of each curve (count,).
    """

    f: FloatArray
    y: FloatArray
    sigma: FloatArray


def _family_shapes(name: str, count: int, x: FloatArray, rng: np.random.Generator) -> FloatArray:
    """``count`` valid draws of one family on epochs ``x``, each scaled to rise from 0 to 1."""
    family = FAMILIES[name]
    grid = Grid.of(x)
    out = np.empty((count, x.size))
    filled = 0
    for _ in range(1000):
        need = count - filled
        theta = family.sample_prior(rng, max(2 * need, 64))
        f = family.evaluate_grid(grid, theta)
        first, last = f[:, 0], f[:, -1]
        ok = np.all(np.isfinite(f), axis=1) & (last >= 0) & (last <= 1) & (last - first >= 1e-3)
        good = f[ok][:need]
        out[filled : filled + len(good)] = (good - good[:, :1]) / (good[:, -1:] - good[:, :1])
        filled += len(good)
        if filled == count:
            return out
    raise RuntimeError(f"the prior of family {name!r} gave too few valid curves")


def sample_curves(rng: np.random.Generator, count: int, x_max: int) -> PriorBatch:
    """Draw ``count`` curves of ``x_max`` epochs from the prior (see the module)."""
    x = np.arange(1, x_max + 1, dtype=float)
    # a late start: the shape is evaluated at max(1, x - delay)
    delay = np.where(rng.random(count) < 0.25, rng.uniform(0, 0.5, count) * x_max, 0.0)
    shifted = np.maximum(1.0, x[None, :] - delay[:, None])
    names = PRIOR_FAMILIES
    members = rng.integers(1, 4, count)
    weights = np.zeros((count, len(names)))
    for i, k in enumerate(members):
        chosen = rng.choice(len(names), size=k, replace=False)
        weights[i, chosen] = rng.dirichlet(np.ones(k))
    g = np.zeros((count, x_max))
    for j, name in enumerate(names):
        rows = np.flatnonzero(weights[:, j] > 0)
        if rows.size == 0:
            continue
        shapes = _family_shapes(name, rows.size, x, rng)
        # the late start: interpolate each shape at its shifted epochs
        for r, row in enumerate(rows):
            if delay[row] > 0:
                shapes[r] = np.interp(shifted[row], x, shapes[r])
        g[rows] += weights[rows, j : j + 1] * shapes
    start = rng.uniform(0.0, 0.95, count)
    share = np.where(
        rng.random(count) < 0.2, rng.uniform(0, 0.02, count), rng.beta(1.2, 1.0, count)
    )
    rise = share * (1.0 - start)
    f = start[:, None] + rise[:, None] * g
    # turning back (over-fitting): a fall after the peak
    turn = rng.random(count) < 0.3
    peak = rng.uniform(0.05, 0.9, count) * x_max
    drop = rise * rng.uniform(0.02, 1.0, count) ** 2
    gamma = rng.uniform(0.5, 2.0, count)
    after = np.clip((x[None, :] - peak[:, None]) / (x_max - peak[:, None]), 0.0, 1.0)
    f = f - np.where(turn[:, None], drop[:, None] * after ** gamma[:, None], 0.0)
    # divergence: the curve falls back to its start and stays there
    diverge = rng.random(count) < 0.02
    at = rng.uniform(0.1, 1.0, count) * x_max
    f = np.where(diverge[:, None] & (x[None, :] >= at[:, None]), start[:, None], f)
    f = np.clip(f, 0.0, 1.0)
    # noise
    sigma = np.exp(rng.uniform(np.log(1e-4), np.log(0.1), count))
    relative = rng.random(count) < 0.4
    sigma = np.where(relative, np.maximum(rise, 1e-3) * rng.uniform(0.002, 0.1, count), sigma)
    heavy = rng.random(count) < 0.3
    e = np.where(
        heavy[:, None],
        rng.standard_t(3, (count, x_max)) / np.sqrt(3.0),
        rng.standard_normal((count, x_max)),
    )
    rho = np.where(rng.random(count) < 0.5, rng.uniform(0.0, 0.9, count), 0.0)
    scale = np.sqrt(1.0 - rho**2)
    for t in range(1, x_max):
        e[:, t] = rho * e[:, t - 1] + scale * e[:, t]
    y = np.clip(f + sigma[:, None] * e, 0.0, 1.0)
    return PriorBatch(f=f, y=y, sigma=sigma)
