"""A small deterministic training function whose behaviour is a hyperparameter (for tests).

``score`` at step s is ``x * s / max_steps`` (so trials differ by ``x``); the state (a running
sum) goes through real checkpoints (torch serialization), so a resumed trial continues exactly.
Behaviours: ``ok``; ``raise`` (ValueError at step 2); ``nan`` (score NaN at step 3); ``exit``
(the process dies at step 2, like an OOM kill); ``ignore`` (never reads decisions);
``hang`` (step 3 never ends).
``sleep`` seconds are spent per step. ``gate`` (a file path): step ``gate_step`` (default 3)
waits until that file exists, so a test can act while a trial is known to be mid-training.
``boost`` multiplies the scores of trials that will fail
or diverge (``raise``, ``nan``), so that a test can check they are never the best trial.
``checkpoint_every`` (default 1) saves a checkpoint only every that many steps (and when told to
stop or suspend); ``checkpoint = false`` never does.
"""

from __future__ import annotations

import os
import time


def train(ctx) -> None:
    p = ctx.params
    behaviour = p.get("behaviour", "ok")
    state = ctx.load_checkpoint() or {"total": 0.0}
    print(f"trial {ctx.trial_id} starts at step {ctx.start_step}")
    gpus, job = os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("SLURM_JOB_ID")
    module = os.environ.get("SITE_MODULE")  # set by a module a [slurm] setup line loads
    print(f"env CUDA_VISIBLE_DEVICES={gpus} SLURM_JOB_ID={job} SITE_MODULE={module}", flush=True)
    every = int(p.get("checkpoint_every", 1))
    for step in range(ctx.start_step + 1, ctx.max_steps + 1):
        time.sleep(p.get("sleep", 0.0))
        if p.get("gate") and step == p.get("gate_step", 3):
            while not os.path.exists(p["gate"]):
                time.sleep(0.05)
        if behaviour == "raise" and step == 2:
            raise ValueError(f"bad value in trial {ctx.trial_id}")
        if behaviour == "hang" and step == 3:
            time.sleep(3600)  # stuck in a step: never reads a decision
        if behaviour == "exit" and step == 2 and not os.environ.get("HPCTUNE_TEST_NO_EXIT"):
            os._exit(3)
        score = p["x"] * step / ctx.max_steps
        if behaviour in ("raise", "nan"):
            score *= p.get("boost", 1.0)
        if behaviour == "nan" and step == 3:
            score = float("nan")
        state["total"] += score
        result = ctx.report(step=step, score=score, total=state["total"])
        if p.get("checkpoint", True) and (step % every == 0 or result.should_stop):
            ctx.save_checkpoint(state)
        if behaviour != "ignore" and result.should_stop:
            return
