"""Train the joint curve model's network on synthetic studies (FT-PFN's method).

    python -m hpctune.curves.joint_training --out hpctune/curves/data/joint.npz  # ~30 min, 2 cores

Every step draws fresh studies from :func:`~.joint_prior.sample_study` (``N`` configurations,
log-uniform in [1, 64], horizons log-uniform in [8, 120]), cuts each trial's curve at its own
``n`` (a quarter untried, ``n = 0``; the others mostly early, as a freeze-thaw study sees them),
and asks for the quantiles of ``y(m)`` at query steps after ``n`` (always ``x_max`` among them).
The loss is the pinball (quantile) loss at every level of :data:`~.predict.LEVELS`. Features
are computed by the same NumPy code as at inference (:func:`~.joint.trial_features`), and the
PyTorch network mirrors :func:`~.joint.encode` and :func:`~.joint.head` (the tests check that
both give the same numbers). The result is an ``.npz`` of float32 arrays that
:func:`~.joint.load_weights` reads without PyTorch.
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

from hpctune.curves.families import FloatArray
from hpctune.curves.joint import MAX_COORDS, MID, N_QUERY, N_TRIAL, query_features, trial_features
from hpctune.curves.joint_prior import sample_study
from hpctune.curves.predict import LEVELS

HIDDEN = 64
ATTENTION = 32
HEADS = 2
QUERIES = 6
ROWS = 384  # trials per batch (studies x configurations)
HORIZONS = (8, 120)


class Net(nn.Module):
    """The PyTorch twin of :func:`hpctune.curves.joint.encode` and :func:`~.joint.head`."""

    def __init__(self, x_mean: FloatArray, x_sd: FloatArray) -> None:
        super().__init__()
        self.register_buffer("x_mean", torch.tensor(x_mean, dtype=torch.float32))
        self.register_buffer("x_sd", torch.tensor(x_sd, dtype=torch.float32))
        self.register_buffer("heads", torch.tensor([HEADS], dtype=torch.float32))
        self.enc1 = nn.Linear(N_TRIAL, HIDDEN)
        self.enc2 = nn.Linear(HIDDEN, HIDDEN)
        self.query = nn.Linear(3 * MAX_COORDS, ATTENTION)
        self.key = nn.Linear(3 * MAX_COORDS, ATTENTION)
        self.value = nn.Linear(HIDDEN, ATTENTION)
        self.null_logit = nn.Parameter(torch.zeros(HEADS))
        self.null_value = nn.Parameter(torch.zeros(ATTENTION))
        self.mix = nn.Linear(2 * HIDDEN + ATTENTION, HIDDEN)
        self.head1 = nn.Linear(HIDDEN + N_QUERY, HIDDEN)
        self.head2 = nn.Linear(HIDDEN, HIDDEN)
        self.out = nn.Linear(HIDDEN, 2 + len(LEVELS) - 1)

    def forward(self, feats: torch.Tensor, qf: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """Quantiles (G, N, Q, L) for studies ``feats`` (G, N, F), queries ``qf`` (G, N, Q, 3)."""
        g, n, _ = feats.shape
        x = (feats - self.get_buffer("x_mean")) / self.get_buffer("x_sd")
        e = torch.relu(self.enc2(torch.relu(self.enc1(x))))
        hp = feats[..., -2 * MAX_COORDS :]
        keys_in = torch.cat([hp, hp[..., :MAX_COORDS] ** 2], dim=-1)
        q, k, v = self.query(keys_in), self.key(keys_in), self.value(e)
        dim = ATTENTION // HEADS
        eye = torch.eye(n, dtype=torch.bool)
        parts = []
        for h in range(HEADS):
            sl = slice(h * dim, (h + 1) * dim)
            logits = q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(dim)
            logits = logits.masked_fill(eye, float("-inf"))
            null = self.null_logit[h].expand(g, n, 1)
            p = torch.softmax(torch.cat([logits, null], dim=-1), dim=-1)
            parts.append(p[..., :-1] @ v[..., sl] + p[..., -1:] * self.null_value[sl])
        att = torch.cat(parts, dim=-1)
        pooled = e.mean(dim=1, keepdim=True).expand(g, n, HIDDEN)
        rep = torch.relu(self.mix(torch.cat([e, att, pooled], dim=-1)))
        nq = qf.shape[2]
        z_in = torch.cat([rep[:, :, None, :].expand(g, n, nq, HIDDEN), qf], dim=-1)
        hidden = torch.relu(self.head2(torch.relu(self.head1(z_in))))
        raw = self.out(hidden)
        mu = raw[..., 0]
        scale = torch.exp(torch.clamp(raw[..., 1], -9.0, 2.0))
        steps = nn.functional.softplus(raw[..., 2:])
        up = torch.cumsum(steps[..., MID:], dim=-1)
        down = torch.flip(torch.cumsum(torch.flip(steps[..., :MID], [-1]), dim=-1), [-1])
        z = torch.cat([-down, torch.zeros_like(mu)[..., None], up], dim=-1)
        out: torch.Tensor = base[..., None, None] + mu[..., None] + scale[..., None] * z
        return out


def batch(
    rng: np.random.Generator,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Features (G, N, F), query features (G, N, Q, 3), targets (G, N, Q) and bases (G, N)."""
    size = int(np.exp(rng.uniform(0.0, np.log(64.0))))
    studies = min(48, max(2, ROWS // size))
    x_max = int(np.exp(rng.uniform(np.log(HORIZONS[0]), np.log(HORIZONS[1]))))
    feats, qfs, ys, bases = [], [], [], []
    for _ in range(studies):
        study = sample_study(rng, size, x_max)
        coords = np.full((size, MAX_COORDS), np.nan)
        coords[:, : study.x.shape[1]] = study.x
        if rng.random() < 0.1:  # a few coordinates unknown (conditional parameters)
            coords[rng.random(coords.shape) < 0.1] = np.nan
        early = rng.integers(1, max(2, x_max // 4) + 1, size)
        anywhere = rng.integers(1, x_max, size)
        n = np.where(rng.random(size) < 0.5, early, anywhere)
        n = np.where(rng.random(size) < 0.25, 0, np.minimum(n, x_max - 1))
        feats.append(trial_features(study.y, n, x_max, coords))
        m = rng.integers(n[:, None] + 1, x_max + 1, (size, QUERIES))
        m[:, 0] = x_max
        qfs.append(query_features(n, x_max, m))
        ys.append(np.take_along_axis(study.y, m - 1, axis=1))
        bases.append(np.where(n > 0, study.y[np.arange(size), np.maximum(n - 1, 0)], 0.0))
    return np.stack(feats), np.stack(qfs), np.stack(ys), np.stack(bases)


def pinball(q: torch.Tensor, y: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Mean pinball loss of quantiles ``q`` (..., L) for targets ``y`` (...)."""
    r = y[..., None] - q
    return torch.maximum(levels * r, (levels - 1.0) * r).mean()


def train(
    steps: int, seed: int = 0, lr: float = 2e-3, threads: int = 1, log_every: int = 250
) -> dict[str, FloatArray]:
    """Train a network for ``steps`` steps; return its weights as float32 arrays."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    probe = np.concatenate([batch(rng)[0].reshape(-1, N_TRIAL) for _ in range(8)])
    x_mean, x_sd = probe.mean(axis=0), probe.std(axis=0) + 1e-3
    net = Net(x_mean, x_sd)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    levels = torch.tensor(LEVELS, dtype=torch.float32)
    started = time.monotonic()
    running = 0.0
    for step in range(1, steps + 1):
        f, qf, y, base = (torch.tensor(a, dtype=torch.float32) for a in batch(rng))
        loss = pinball(net(f, qf, base), y, levels)
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
    parser.add_argument("--steps", type=int, default=8_000)
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
