"""A regression workload for hpctune: an MLP on Friedman's first problem (scikit-learn's
``make_friedman1``: 2,000 rows, 10 uniform features of which 5 enter
``10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5``, Gaussian noise of standard deviation 1).

The data are generated with a fixed seed (they ship with scikit-learn as code, nothing is
downloaded), split 80/20, inputs and target standardised by the training split, so the
validation loss (mean squared error) is in units of the target's variance: predicting the mean
scores about 1.0, the noise floor is about 0.04; a loss above 2.0 (a diverged model, or NaN) is
reported as 2.0, the top of ``metric_bounds``. SGD with momentum. Deterministic for a given
trial seed, also across interruptions (each epoch shuffles from a seed derived from (trial
seed, epoch); the checkpoint holds model and optimizer state; one thread per worker).
"""

from __future__ import annotations

import torch
from sklearn.datasets import make_friedman1
from torch import nn


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Friedman #1 with 2,000 rows split 80/20, standardised by the training split."""
    features, target = make_friedman1(n_samples=2000, n_features=10, noise=1.0, random_state=0)
    x = torch.tensor(features, dtype=torch.float32)
    y = torch.tensor(target, dtype=torch.float32).unsqueeze(1)
    split = 1600
    x_mean, x_std = x[:split].mean(0), x[:split].std(0)
    y_mean, y_std = y[:split].mean(), y[:split].std()
    x = (x - x_mean) / x_std
    y = (y - y_mean) / y_std
    return x[:split], y[:split], x[split:], y[split:]


def make_model(hidden: int, layers: int, activation: str) -> nn.Module:
    """An MLP 10 -> hidden x layers -> 1."""
    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU}[activation]
    blocks: list[nn.Module] = []
    width = 10
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), act()]
        width = hidden
    blocks.append(nn.Linear(width, 1))
    return nn.Sequential(*blocks)


def train(ctx) -> None:
    """Train for ctx.max_steps epochs, reporting the validation loss after each one."""
    torch.set_num_threads(1)
    p = ctx.params
    x_train, y_train, x_val, y_val = load_data()
    torch.manual_seed(ctx.seed)
    model = make_model(p["hidden"], p["layers"], p["activation"])
    optimizer = torch.optim.SGD(
        model.parameters(), lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"]
    )
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = nn.MSELoss()
    for epoch in range(ctx.start_step, ctx.max_steps):
        generator = torch.Generator().manual_seed(ctx.seed * 1000 + epoch)
        model.train()
        order = torch.randperm(len(y_train), generator=generator)
        total = 0.0
        for start in range(0, len(order), p["batch_size"]):
            batch = order[start : start + p["batch_size"]]
            optimizer.zero_grad()
            loss = loss_fn(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
            total += float(loss) * len(batch)
        model.eval()
        with torch.no_grad():
            val_loss = float(loss_fn(model(x_val), y_val))
        if not val_loss <= 2.0:  # diverged (or NaN): worse than predicting the mean, capped
            val_loss = 2.0
        result = ctx.report(step=epoch + 1, train_loss=total / len(y_train), val_loss=val_loss)
        if (epoch + 1) % 10 == 0 or epoch + 1 == ctx.max_steps or result.should_stop:
            ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if result.should_stop:  # the policy suspended or stopped the trial
            break
    print(f"trial {ctx.trial_id}: val_loss {val_loss:.4f} at step {ctx.step}")
