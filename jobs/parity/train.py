"""A late learner for hpctune: an MLP learns a sparse parity, the product of 3 of 24 bits.

Inputs are 24 random +-1 bits; the label is whether the product of the first 3 is positive.
One hidden ReLU layer of ``hidden`` units, cross-entropy, SGD with momentum on fresh samples
(``batch_size`` per update, 100 updates per step). The held-out accuracy (2,000 fixed inputs)
sits at chance while SGD searches for the 3 relevant bits, then rises within a few steps to
exactly 1.0, or never does (Barak et al., "Hidden progress in deep learning: SGD learns parities
near the computational limit", NeurIPS 2022). Deterministic for a given trial seed, also across
interruptions (the samples of step s come from a generator seeded by (trial seed, s); the
checkpoint holds the model and optimizer state; one thread per worker).
"""

from __future__ import annotations

import torch
from torch import nn

BITS = 24
RELEVANT = 3
UPDATES_PER_STEP = 100


def sample(generator: torch.Generator, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` random inputs and their parity labels."""
    x = torch.randint(0, 2, (count, BITS), generator=generator).float() * 2 - 1
    y = (x[:, :RELEVANT].prod(1) > 0).long()
    return x, y


def train(ctx) -> None:
    """Train for ctx.max_steps steps, reporting the held-out accuracy after each one."""
    torch.set_num_threads(1)
    p = ctx.params
    x_val, y_val = sample(torch.Generator().manual_seed(12345), 2000)
    torch.manual_seed(ctx.seed)
    model = nn.Sequential(nn.Linear(BITS, p["hidden"]), nn.ReLU(), nn.Linear(p["hidden"], 2))
    optimizer = torch.optim.SGD(
        model.parameters(), lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"]
    )
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = nn.CrossEntropyLoss()
    for step in range(ctx.start_step, ctx.max_steps):
        generator = torch.Generator().manual_seed(ctx.seed * 1000 + step)
        total = 0.0
        for _ in range(UPDATES_PER_STEP):
            x, y = sample(generator, p["batch_size"])
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += float(loss)
        with torch.no_grad():
            val_acc = float((model(x_val).argmax(1) == y_val).float().mean())
        result = ctx.report(
            step=step + 1, train_loss=total / UPDATES_PER_STEP, val_accuracy=val_acc
        )
        if (step + 1) % 5 == 0 or step + 1 == ctx.max_steps or result.should_stop:
            ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if result.should_stop:  # the policy suspended or stopped the trial
            break
    print(f"trial {ctx.trial_id}: val_accuracy {val_acc:.4f} at step {ctx.step}")
