"""Train the amortised curve model's network on curves from its prior (LC-PFN's method).

    python -m hpctune.curves.training --out hpctune/curves/data/amortised.npz   # ~25 min, 2 cores

Every step draws fresh curves from :func:`~.prior.sample_curves` (horizons log-uniform in
[10, 200]), cuts each at several points ``n`` (uniform in [3, x_max - 1]) and asks for the
quantiles of ``y(m)`` at query epochs (``x_max`` and two uniform in ``n+1..x_max``). The loss is
the pinball (quantile) loss at every level of :data:`~.predict.LEVELS`, divided by
``max(s, 0.01)`` (the curve's scale, :func:`~.amortised.scales`): a weight that depends on the
input only, so the minimiser is still the conditional quantile, while curves of every scale count.
Features are computed by the same NumPy code as at inference (:func:`~.amortised.features`).
Needs PyTorch (a dependency of hpctune); the result is an ``.npz`` of float32 arrays that
:func:`~.amortised.load_weights` reads without PyTorch.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from hpctune.curves.amortised import (
    MID,
    N_FEATURES,
    N_QUERY,
    features,
    query_features,
    scales,
)
from hpctune.curves.families import FloatArray
from hpctune.curves.predict import LEVELS
from hpctune.curves.prior import sample_curves

HIDDEN = 128
HORIZONS = (10, 200)


class Net(nn.Module):
    """Encoder of the curve features, head per query epoch; the layout of ``forward``."""

    def __init__(self, x_mean: FloatArray, x_sd: FloatArray, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.x_mean: torch.Tensor
        self.x_sd: torch.Tensor
        self.register_buffer("x_mean", torch.tensor(x_mean, dtype=torch.float32))
        self.register_buffer("x_sd", torch.tensor(x_sd, dtype=torch.float32))
        self.e1 = nn.Linear(N_FEATURES, hidden)
        self.e2 = nn.Linear(hidden, hidden)
        self.h1 = nn.Linear(hidden + N_QUERY, hidden)
        self.h2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, len(LEVELS))

    def forward(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Increasing ``z`` quantiles (B, Q, L)."""
        h = (x - self.x_mean) / self.x_sd
        h = torch.relu(self.e2(torch.relu(self.e1(h))))
        hq = torch.cat([h[:, None, :].expand(-1, q.shape[1], -1), q], dim=-1)
        raw = self.out(torch.relu(self.h2(torch.relu(self.h1(hq)))))
        soft = nn.functional.softplus
        mid = raw[..., MID : MID + 1]
        up = torch.cumsum(soft(raw[..., MID + 1 :]), dim=-1)
        down = torch.flip(torch.cumsum(soft(torch.flip(raw[..., :MID], [-1])), dim=-1), [-1])
        return torch.cat([mid - down, mid, mid + up], dim=-1)


def batch(
    rng: np.random.Generator, groups: int = 8, per_group: int = 32, cuts: int = 4, queries: int = 3
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Training rows: features (B, F), query features (B, Q, 4), targets (B, Q), c, s (B,)."""
    xs, qs, ys, cs, ss = [], [], [], [], []
    lo, hi = math.log(HORIZONS[0]), math.log(HORIZONS[1])
    for _ in range(groups):
        x_max = round(math.exp(rng.uniform(lo, hi)))
        curves = sample_curves(rng, per_group, x_max).y
        y = np.repeat(curves, cuts, axis=0)
        rows = y.shape[0]
        n = np.clip(np.round(rng.uniform(0, 1, rows) * x_max), 3, x_max - 1).astype(int)
        u = np.where(np.arange(x_max)[None, :] < n[:, None], y, np.nan)
        m = np.empty((rows, queries), dtype=int)
        m[:, 0] = x_max
        m[:, 1:] = rng.integers(n[:, None] + 1, x_max + 1, (rows, queries - 1))
        xm = np.full(rows, x_max)
        xs.append(features(u, n, xm))
        qs.append(query_features(n, xm, m))
        ys.append(np.take_along_axis(y, m - 1, axis=1))
        c, s = scales(u, n)
        cs.append(c)
        ss.append(s)
    return (
        np.concatenate(xs),
        np.concatenate(qs),
        np.concatenate(ys),
        np.concatenate(cs),
        np.concatenate(ss),
    )


def pinball(
    z: torch.Tensor, y: torch.Tensor, c: torch.Tensor, s: torch.Tensor, levels: torch.Tensor
) -> torch.Tensor:
    """Mean pinball loss of quantiles ``c + s z`` (B, Q, L) for targets ``y`` (B, Q)."""
    q = c[:, None, None] + s[:, None, None] * z
    r = y[..., None] - q
    loss = torch.maximum(levels * r, (levels - 1.0) * r)
    weight = 1.0 / torch.clamp(s, min=0.01)
    return (loss.mean(dim=(1, 2)) * weight).mean()


def train(
    steps: int, seed: int = 0, lr: float = 2e-3, threads: int = 1, log_every: int = 500
) -> dict[str, FloatArray]:
    """Train a network for ``steps`` steps; return its weights as float32 arrays."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    probe = np.concatenate([batch(rng)[0] for _ in range(4)])
    x_mean, x_sd = probe.mean(axis=0), probe.std(axis=0) + 1e-3
    net = Net(x_mean, x_sd)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    levels = torch.tensor(LEVELS, dtype=torch.float32)
    started = time.monotonic()
    running = 0.0
    for step in range(1, steps + 1):
        x, q, y, c, s = (torch.tensor(a, dtype=torch.float32) for a in batch(rng))
        loss = pinball(net(x, q), y, c, s, levels)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        nn.utils.clip_grad_norm_(net.parameters(), 5.0)
        optimizer.step()
        schedule.step()
        running += float(loss.detach())
        if log_every and step % log_every == 0:
            print(
                f"step {step}/{steps}: loss {running / log_every:.5f} "
                f"({time.monotonic() - started:.0f} s)",
                flush=True,
            )
            running = 0.0
    return {k: v.detach().numpy().astype(np.float32) for k, v in net.state_dict().items()}


def main(argv: list[str] | None = None) -> int:
    """Train and write the weights."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the .npz file to write")
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    weights = train(args.steps, args.seed, args.lr, args.threads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **weights)  # type: ignore[arg-type]
    tmp.replace(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
