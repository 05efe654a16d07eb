"""A deterministic PBT workload for tests: the best learning rate decays with the step.

The state ``x`` goes through real checkpoints; each step adds a gain that is largest when
``lr`` is near ``0.1 / (1 + step / 4)``. ``start_x`` reports the value the segment started from,
so tests can check that a child continued from its parent's checkpoint. Trials 3, 7, 11, ...
take ``slow_factor`` (default thirty) times longer per step (``sleep`` seconds for the others),
so younger generations overtake them.
"""

from __future__ import annotations

import math
import time


def gain(lr: float, step: int, sharpness: float = 1.0) -> float:
    """The step's gain: 1 at the best learning rate, less the further ``lr`` is from it."""
    best = 0.1 / (1 + step / 4)
    return math.exp(-sharpness * abs(math.log(lr / best)))


def train(ctx) -> None:
    state = ctx.load_checkpoint() or {"x": 0.0}
    start_x = state["x"]
    for step in range(ctx.start_step + 1, ctx.max_steps + 1):
        slow = ctx.params.get("slow_factor", 30) if ctx.trial_id % 4 == 3 else 1
        time.sleep(ctx.params.get("sleep", 0.0) * slow)
        state["x"] += gain(float(ctx.params["lr"]), step, ctx.params.get("sharpness", 1.0))
        result = ctx.report(step=step, score=state["x"], start_x=start_x)
        ctx.save_checkpoint(state)
        if result.should_stop:
            return
