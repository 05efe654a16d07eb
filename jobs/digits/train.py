"""A real PyTorch workload for hpctune: an MLP on scikit-learn's bundled digits data.

Deterministic for a given trial seed, also across interruptions: the model starts from
``ctx.seed``, each epoch shuffles and drops out from a seed derived from (trial seed, epoch), and
the checkpoint holds the model and optimizer state, so a trial resumed from any epoch's checkpoint
produces the same curve as an uninterrupted run (with one thread per worker).
"""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from torch import nn


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The digits images (scaled to [0, 1]) split 80/20 with a fixed permutation."""
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    split = int(0.8 * len(y))
    train, val = order[:split], order[split:]
    return x[train], y[train], x[val], y[val]


def make_model(hidden: int, layers: int, dropout: float, activation: str) -> nn.Module:
    """An MLP 64 -> hidden x layers -> 10."""
    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}[activation]
    blocks: list[nn.Module] = []
    width = 64
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), act(), nn.Dropout(dropout)]
        width = hidden
    blocks.append(nn.Linear(width, 10))
    return nn.Sequential(*blocks)


def train(ctx) -> None:
    """Train for ctx.max_steps epochs, checkpointing and reporting after each one."""
    torch.set_num_threads(1)
    p = ctx.params
    x_train, y_train, x_val, y_val = load_data()
    torch.manual_seed(ctx.seed)
    model = make_model(p["hidden"], p["layers"], p["dropout"], p["activation"])
    optimizer = torch.optim.SGD(
        model.parameters(), lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"]
    )
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(ctx.start_step, ctx.max_steps):
        for group in optimizer.param_groups:
            group["lr"] = ctx.value("lr", epoch)  # the schedule's value in this epoch
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
            logits = model(x_val)
            val_loss = float(loss_fn(logits, y_val))
            val_accuracy = float((logits.argmax(1) == y_val).float().mean())
        result = ctx.report(
            step=epoch + 1,
            train_loss=total / len(y_train),
            val_loss=val_loss,
            val_accuracy=val_accuracy,
            num_params=float(sum(q.numel() for q in model.parameters())),
        )
        ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if result.should_stop:  # the policy suspended or stopped the trial
            break
    print(f"trial {ctx.trial_id}: val_accuracy {val_accuracy:.4f} at step {ctx.step}")
