"""A data-parallel training function whose time per step depends on ``ctx.devices``.

A wide MLP on scikit-learn's digits data. The trial is given ``ctx.devices`` devices (CPUs here,
standing in for GPUs: ``torch.set_num_threads(ctx.devices)``) and keeps the **global** batch size
fixed, whatever it gets: each of the ``g`` devices computes ``GLOBAL_BATCH / g`` examples of every
batch (here the threads of one process share each matrix product), so an epoch is the same
sequence of updates at every size and only its duration changes. The learning curve does not
depend on the allocation, which is what the elastic planner assumes when it gives a trial more
devices in a later rung (docs/elastic.md). With GPUs the same rule holds: one process per GPU
(torch.distributed), each with ``GLOBAL_BATCH // ctx.devices`` examples of each batch.
"""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from torch import nn

GLOBAL_BATCH = 256  # examples per update, at every number of devices
HIDDEN = 1024


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The digits images (scaled to [0, 1]) split 80/20 with a fixed permutation."""
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    split = int(0.8 * len(y))
    train, val = order[:split], order[split:]
    return x[train], y[train], x[val], y[val]


def make_model(dropout: float) -> nn.Module:
    """An MLP 64 -> 1024 -> 1024 -> 10."""
    return nn.Sequential(
        nn.Linear(64, HIDDEN),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(HIDDEN, 10),
    )


def train(ctx) -> None:
    """Train from ctx.start_step to ctx.max_steps epochs on ctx.devices CPU threads."""
    torch.set_num_threads(ctx.devices)  # the devices this trial holds; the batch stays global
    p = ctx.params
    x_train, y_train, x_val, y_val = load_data()
    torch.manual_seed(ctx.seed)
    model = make_model(p["dropout"])
    optimizer = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=p["momentum"])
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(ctx.start_step, ctx.max_steps):
        generator = torch.Generator().manual_seed(ctx.step_seed(epoch))
        torch.manual_seed(ctx.step_seed(epoch))  # dropout masks
        model.train()
        order = torch.randperm(len(y_train), generator=generator)
        for start in range(0, len(order), GLOBAL_BATCH):
            batch = order[start : start + GLOBAL_BATCH]
            optimizer.zero_grad()
            loss_fn(model(x_train[batch]), y_train[batch]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x_val)
            val_accuracy = float((logits.argmax(1) == y_val).float().mean())
        result = ctx.report(step=epoch + 1, val_accuracy=val_accuracy, devices=ctx.devices)
        ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if result.should_stop:  # the policy suspended or stopped the trial
            break
