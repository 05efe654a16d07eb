"""Population based training of an MLP on scikit-learn's bundled digits data (real PyTorch).

The function knows nothing of PBT: it builds the model from its hyperparameters, warm-starts
from the checkpoint it is given (its parent's, for a PBT trial), sets the optimizer's learning
rate and momentum from *its own* hyperparameters (they change from generation to generation),
trains from ``ctx.start_step`` until the controller's end of segment, and checkpoints the model
and the optimizer after every epoch. Deterministic for a trial seed (one thread per worker).
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


def make_model(hidden: int, dropout: float) -> nn.Module:
    """An MLP 64 -> hidden -> hidden -> 10 (its shape must not change between generations)."""
    return nn.Sequential(
        nn.Linear(64, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, 10),
    )


def train(ctx) -> None:
    """Train from ctx.start_step, one report and one checkpoint per epoch."""
    torch.set_num_threads(1)
    p = ctx.params
    x_train, y_train, x_val, y_val = load_data()
    torch.manual_seed(ctx.seed)
    model = make_model(p["hidden"], p["dropout"])
    optimizer = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=p["momentum"])
    state = ctx.load_checkpoint()
    if state is not None:  # the parent's weights and optimizer state (momentum buffers)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(ctx.start_step, ctx.max_steps):
        for group in optimizer.param_groups:  # this trial's hyperparameters, not the parent's
            group["lr"] = ctx.value("lr", epoch)
            group["momentum"] = p["momentum"]
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
            lr=float(ctx.value("lr", epoch)),
        )
        ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if result.should_stop:  # the end of this PBT session, or a stop
            break
