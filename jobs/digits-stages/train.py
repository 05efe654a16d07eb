"""The digits MLP with hyperparameter sequences: learning rate and batch size change by epoch.

Written so that trials whose sequences share a prefix train that prefix identically (what a
stage tree shares): the initial model comes from ``ctx.seed`` (the same for every trial of a
stage-tree study), each epoch's data order and dropout masks from ``ctx.step_seed(epoch)`` (the
epoch only), and the checkpoint holds the model and the optimizer state (momentum buffers). So
the state after epoch e is a function of the hyperparameters in force during epochs 0..e-1 only,
and a trial resumed from another trial's checkpoint at a shared epoch continues exactly as if it
had trained that prefix itself. Checkpoints are saved when ``ctx.checkpoint_due`` says so
(boundaries, the segment's end, and the ends of stages, where other trials branch off).
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
    """Train epochs ctx.start_step..ctx.max_steps-1 with the lr and batch size of each epoch."""
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
            group["lr"] = ctx.value("lr", epoch)  # the sequences' values in this epoch
        batch_size = int(ctx.value("batch_size", epoch))
        generator = torch.Generator().manual_seed(ctx.step_seed(epoch))
        torch.manual_seed(ctx.step_seed(epoch))  # dropout masks
        model.train()
        order = torch.randperm(len(y_train), generator=generator)
        total = 0.0
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
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
        )
        if ctx.checkpoint_due(epoch + 1):
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            ctx.save_checkpoint(state)
        if result.should_stop:
            break
    print(f"trial {ctx.trial_id}: val_accuracy {val_accuracy:.4f} at step {ctx.step}")
