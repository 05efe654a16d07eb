"""A small CNN on scikit-learn's digits with noisy training labels (no download).

The 1,797 8x8 digit images are split once (fixed permutation): 1,000 train, 797 validate. A share
``label_noise`` of the training labels is replaced by a wrong class drawn at random (fixed per
share, the same for every trial); validation labels are clean. A network that learns fast first
generalises, then memorises the wrong labels and its validation accuracy falls back; a slow or
well regularised one is still improving at the last epoch. So the curves are long, some turn
back (over-fitting), and the ranking of configurations changes late.

Model: two 3x3 convolutions (``channels``, then twice as many; padding 1; ReLU), 2x2 max pooling,
a hidden layer (``hidden`` units, dropout) and 10 logits. Plain SGD with momentum and a constant
learning rate; each epoch shifts every training image by up to one pixel (random crop of the
zero-padded image). One step is one epoch; it reports ``val_accuracy`` (the study metric) and
``val_loss``.

Deterministic for a given trial seed, also across interruptions: the model starts from
``ctx.seed``, each epoch's order, shifts and dropout masks come from a seed of (trial seed, epoch),
and the checkpoint holds the model and optimizer state (one thread per worker).
"""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from torch import nn

TRAIN = 1000


def load_data(label_noise: float) -> tuple[torch.Tensor, ...]:
    """Images (N, 1, 8, 8) in [0, 1]; training labels with ``label_noise`` of them wrong."""
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, val = order[:TRAIN], order[TRAIN:]
    y_train = y[train].clone()
    noise = torch.Generator().manual_seed(1)
    flip = torch.rand(TRAIN, generator=noise) < label_noise
    shift = torch.randint(1, 10, (TRAIN,), generator=noise)  # a wrong class, uniformly
    y_train[flip] = (y_train[flip] + shift[flip]) % 10
    return x[train], y_train, x[val], y[val]


class SmallCNN(nn.Module):
    """conv(channels) -> conv(2 channels) -> 2x2 max pool -> hidden -> 10 logits."""

    def __init__(self, channels: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(2 * channels * 16, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def shifted(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Each image moved by -1, 0 or +1 pixel in each direction (zero padding)."""
    padded = nn.functional.pad(x, (1, 1, 1, 1))
    dx = torch.randint(0, 3, (len(x),), generator=generator)
    dy = torch.randint(0, 3, (len(x),), generator=generator)
    rows = (dy.view(-1, 1) + torch.arange(8)).view(-1, 1, 8, 1).expand(-1, 1, 8, 10)
    cropped = torch.gather(padded, 2, rows)
    cols = (dx.view(-1, 1) + torch.arange(8)).view(-1, 1, 1, 8).expand(-1, 1, 8, 8)
    return torch.gather(cropped, 3, cols)


def train(ctx) -> None:
    """Train for ctx.max_steps epochs, checkpointing and reporting after each one."""
    torch.set_num_threads(1)
    p = ctx.params
    x_train, y_train, x_val, y_val = load_data(p["label_noise"])
    torch.manual_seed(ctx.seed)
    model = SmallCNN(p["channels"], p["hidden"], p["dropout"])
    optimizer = torch.optim.SGD(
        model.parameters(), lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"]
    )
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = nn.CrossEntropyLoss()
    batch = p["batch_size"]
    for epoch in range(ctx.start_step, ctx.max_steps):
        for group in optimizer.param_groups:
            group["lr"] = ctx.value("lr", epoch)
        generator = torch.Generator().manual_seed(ctx.seed * 1000 + epoch)
        torch.manual_seed(ctx.seed * 1000 + epoch)  # dropout masks
        model.train()
        order = torch.randperm(TRAIN, generator=generator)
        images = shifted(x_train, generator)
        for start in range(0, TRAIN, batch):
            index = order[start : start + batch]
            optimizer.zero_grad()
            loss = loss_fn(model(images[index]), y_train[index])
            if not torch.isfinite(loss):
                break
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x_val)
            val_loss = float(loss_fn(logits, y_val))  # NaN once diverged: reported as 10
            accuracy = float((logits.argmax(1) == y_val).float().mean())
        val_loss = val_loss if val_loss < 10 else 10.0
        result = ctx.report(step=epoch + 1, val_accuracy=accuracy, val_loss=val_loss)
        ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if result.should_stop:  # the policy suspended or stopped the trial
            break
