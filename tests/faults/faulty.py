"""A training function whose faults (issue 13) are a hyperparameter ``behaviour``.

``score`` at step s is ``x * s / max_steps``; ``total`` sums it and goes through real checkpoints
when ``checkpoint`` is true, so a resumed trial continues exactly. Behaviours: ``ok``; ``names``
(also reports metrics named like TensorBoard tags, with dots, spaces, unicode, "." and 150
characters); ``empty_name`` and ``long_name`` (a metric named "" or with 300 characters at step
2); ``other_metric`` (never reports ``score``); ``early`` (returns after step 2);
``keyboard`` (raises KeyboardInterrupt at step 2); ``exit`` (the process dies with code 3 at
step 2); ``hang_once`` and ``fail_once`` (the first run of the trial hangs in step 3, or raises
there); ``sleep`` seconds per step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

NAMES = ("loss/val", "val.acc", "top 1", "précision", ".", "a" * 150)


def train(ctx) -> None:
    p = ctx.params
    behaviour = p.get("behaviour", "ok")
    state = (ctx.load_checkpoint() if p.get("checkpoint") else None) or {"total": 0.0}
    for step in range(ctx.start_step + 1, ctx.max_steps + 1):
        time.sleep(p.get("sleep", 0.0))
        if behaviour == "keyboard" and step == 2:
            raise KeyboardInterrupt
        if behaviour == "exit" and step == 2:
            os._exit(3)
        marker = Path(ctx.study_dir) / f"hung-{ctx.trial_id}"
        if behaviour in ("hang_once", "fail_once") and step == 3 and not marker.exists():
            marker.touch()
            if behaviour == "fail_once":
                raise ValueError("failed once")
            time.sleep(3600)  # never reports again
        score = p["x"] * step / ctx.max_steps
        state["total"] += score
        metrics = {"score": score, "total": state["total"]}
        if behaviour == "names":
            metrics.update({name: score + i for i, name in enumerate(NAMES)})
        if behaviour == "empty_name" and step == 2:
            metrics[""] = score
        if behaviour == "long_name" and step == 2:
            metrics["x" * 300] = score
        if behaviour == "other_metric":
            metrics = {"loss": 1.0 - score, "accuracy": score}
        result = ctx.report(step=step, **metrics)
        if p.get("checkpoint"):
            ctx.save_checkpoint(state)
        if behaviour == "early" and step == 2:
            return
        if result.should_stop:
            return
