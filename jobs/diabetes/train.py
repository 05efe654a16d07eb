"""A second real PyTorch workload for hpctune: an MLP regressor on scikit-learn's bundled
diabetes data (442 patients, 10 features), whose validation loss is minimised (mode "min").

Inputs and target are standardised with the training split's statistics, so the validation
loss (mean squared error) is in units of the target's variance: predicting the mean scores about
1.0, the best models about 0.5. Deterministic for a given trial seed, also across interruptions
(the model starts from ``ctx.seed``, each epoch shuffles from a seed derived from (trial seed,
epoch), the checkpoint holds model and optimizer state; one thread per worker).
"""

from __future__ import annotations

import torch
from sklearn.datasets import load_diabetes
from torch import nn


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The diabetes data split 80/20 with a fixed permutation, standardised by the train split."""
    data = load_diabetes()
    x = torch.tensor(data.data, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.float32).unsqueeze(1)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    split = int(0.8 * len(y))
    train, val = order[:split], order[split:]
    x_mean, x_std = x[train].mean(0), x[train].std(0)
    y_mean, y_std = y[train].mean(), y[train].std()
    x = (x - x_mean) / x_std
    y = (y - y_mean) / y_std
    return x[train], y[train], x[val], y[val]


def make_model(hidden: int, layers: int, dropout: float, activation: str) -> nn.Module:
    """An MLP 10 -> hidden x layers -> 1."""
    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}[activation]
    blocks: list[nn.Module] = []
    width = 10
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), act(), nn.Dropout(dropout)]
        width = hidden
    blocks.append(nn.Linear(width, 1))
    return nn.Sequential(*blocks)


def train(ctx) -> None:
    """Train for ctx.max_steps epochs, reporting the validation loss after each one."""
    torch.set_num_threads(1)
    p = ctx.params
    x_train, y_train, x_val, y_val = load_data()
    torch.manual_seed(ctx.seed)
    model = make_model(p["hidden"], p["layers"], p["dropout"], p["activation"])
    if p["optimizer"] == "adam":
        optimizer: torch.optim.Optimizer = torch.optim.Adam(
            model.parameters(), lr=p["lr"], weight_decay=p["weight_decay"]
        )
    else:
        optimizer = torch.optim.SGD(
            model.parameters(), lr=p["lr"], momentum=0.9, weight_decay=p["weight_decay"]
        )
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = nn.MSELoss()
    for epoch in range(ctx.start_step, ctx.max_steps):
        generator = torch.Generator().manual_seed(ctx.seed * 1000 + epoch)
        torch.manual_seed(ctx.seed * 1000 + epoch)  # dropout masks
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
        result = ctx.report(step=epoch + 1, train_loss=total / len(y_train), val_loss=val_loss)
        if (epoch + 1) % 10 == 0 or epoch + 1 == ctx.max_steps:
            ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if result.should_stop:  # the policy suspended or stopped the trial
            break
    print(f"trial {ctx.trial_id}: val_loss {val_loss:.4f} at step {ctx.step}")
