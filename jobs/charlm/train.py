"""A character-level language model on Python's standard library sources (no download).

The text is the standard library's top-level modules (``*.py`` next to ``os.py``) in name order,
concatenated (so the text depends on the Python version): the first 1 MiB trains, the next 64 KiB
validates. Characters outside printable ASCII map to one "other" symbol (97 symbols). The model is
Bengio et al.'s neural language model (2003): the previous ``context`` characters are embedded,
concatenated, passed through one hidden layer and a softmax over the next character. Plain SGD with
momentum and a constant learning rate (``lr`` may also be a schedule in study.toml), as a user
would start: too small a rate barely leaves the character frequencies in 60 steps, too large a one
diverges or stalls on a plateau, and the best models still improve at the last step.

One step ("chunk") trains on 16,384 windows drawn from the training text and then reports the
validation cross-entropy (nats per character) on 16,384 fixed validation positions. A model
that diverged (non-finite or worse than uniform guessing) reports ``ln 97``, uniform guessing.

Deterministic for a given trial seed, also across interruptions: the model starts from
``ctx.seed``, each step draws its windows from a seed derived from (trial seed, step), and the
checkpoint holds the model and optimizer state (one thread per worker).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from torch import nn

VOCAB = 97  # newline, the 95 printable ASCII characters, "other"
TRAIN_CHARS = 1 << 20
VAL_CHARS = 1 << 16
CHUNK = 16384  # training windows per step
VAL_POSITIONS = 16384
UNIFORM = math.log(VOCAB)  # the loss of uniform guessing


def load_text() -> torch.Tensor:
    """The standard library's top-level modules, concatenated in name order, as symbol ids."""
    stdlib = Path(os.__file__).parent
    parts: list[str] = []
    size = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text)
        if size >= TRAIN_CHARS + VAL_CHARS:
            break
    data = bytearray("".join(parts).encode("ascii", "replace"))
    codes = torch.frombuffer(data, dtype=torch.uint8)
    codes = codes[: TRAIN_CHARS + VAL_CHARS].long()
    ids = torch.full_like(codes, VOCAB - 1)  # "other"
    ids[codes == 10] = 0
    printable = (codes >= 32) & (codes <= 126)
    ids[printable] = codes[printable] - 31
    return ids


class CharModel(nn.Module):
    """Embed ``context`` characters, one hidden layer, logits over the next character."""

    def __init__(self, context: int, embedding: int, hidden: int, activation: str) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, embedding)
        act = {"tanh": nn.Tanh, "relu": nn.ReLU}[activation]
        self.mlp = nn.Sequential(
            nn.Linear(context * embedding, hidden), act(), nn.Linear(hidden, VOCAB)
        )

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.embed(windows).flatten(1))


def windows(ids: torch.Tensor, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, ...]:
    """The ``context`` characters from each start, and the character after them."""
    index = starts.unsqueeze(1) + torch.arange(context)
    return ids[index], ids[starts + context]


def train(ctx) -> None:
    """Train for ctx.max_steps chunks, reporting the validation loss after each one."""
    torch.set_num_threads(1)
    p = ctx.params
    context = p["context"]
    ids = load_text()
    train_ids, val_ids = ids[:TRAIN_CHARS], ids[TRAIN_CHARS:]
    val_starts = torch.linspace(0, len(val_ids) - context - 1, VAL_POSITIONS).long()
    x_val, y_val = windows(val_ids, val_starts, context)
    torch.manual_seed(ctx.seed)
    model = CharModel(context, p["embedding"], p["hidden"], p["activation"])
    optimizer = torch.optim.SGD(
        model.parameters(), lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"]
    )
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = nn.CrossEntropyLoss()
    batch_size = p["batch_size"]
    for step in range(ctx.start_step, ctx.max_steps):
        for group in optimizer.param_groups:
            group["lr"] = ctx.value("lr", step)  # the schedule's value in this step
        generator = torch.Generator().manual_seed(ctx.seed * 1000 + step)
        starts = torch.randint(len(train_ids) - context - 1, (CHUNK,), generator=generator)
        x_train, y_train = windows(train_ids, starts, context)
        model.train()
        total = 0.0
        for start in range(0, CHUNK, batch_size):
            batch = slice(start, start + batch_size)
            optimizer.zero_grad()
            loss = loss_fn(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * batch_size
        model.eval()
        with torch.no_grad():
            val_loss = float(loss_fn(model(x_val), y_val))
        if not val_loss <= UNIFORM:  # diverged (NaN, inf) or worse than guessing
            val_loss = UNIFORM
        result = ctx.report(step=step + 1, train_loss=total / CHUNK, val_loss=val_loss)
        ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if result.should_stop:  # the policy suspended or stopped the trial
            break
    print(f"trial {ctx.trial_id}: val_loss {val_loss:.4f} at step {ctx.step}")
