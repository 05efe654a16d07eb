"""Makespan of a stage tree on W workers under a scheduler, on a simulated clock.

A free worker asks the scheduler for work among the *ready* stages (their parent stage is done,
or they are top-level); it runs what it gets back to back. Each assignment costs
``transition_seconds`` once (checkpoint load and worker switch); with ``batch = False`` every
stage of a path pays it (the thesis's fair comparison in §6.3 runs critical path unbatched). A
stage's end checkpoint is saved as it ends (in the background), so its children become ready at
once. Deterministic: ties in time go in assignment order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from hpctune.stagetree.schedulers import Scheduler, StepCost, pick, stage_seconds, unit_cost
from hpctune.stagetree.tree import StageTree


@dataclass(frozen=True)
class Simulation:
    """The outcome of :func:`simulate`.

    Attributes:
        makespan: Seconds from the start until the last stage ends.
        busy_seconds: Worker-seconds spent training or in transitions.
        train_seconds: Worker-seconds spent training.
        assignments: How many assignments the workers got.
        loads: How many transitions were paid.
    """

    makespan: float
    busy_seconds: float
    train_seconds: float
    assignments: int
    loads: int


def simulate(
    tree: StageTree,
    scheduler: Scheduler,
    workers: int,
    cost: StepCost = unit_cost,
    *,
    transition_seconds: float = 0.0,
    batch: bool = True,
) -> Simulation:
    """Run every stage of ``tree`` on ``workers`` workers; return the makespan and work.

    Raises:
        ValueError: ``workers`` is below 1 or ``transition_seconds`` is negative.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, but got {workers}")
    if transition_seconds < 0:
        raise ValueError(f"transition_seconds must be >= 0, but got {transition_seconds}")
    done: set[int] = set()
    taken: set[int] = set()
    ready: set[int] = set(tree.roots)
    events: list[tuple[float, int, str, int]] = []  # (time, seq, kind, stage or worker)
    seq = 0
    idle = workers
    now = busy = train = 0.0
    assignments = loads = 0
    while len(done) < len(tree.stages):
        while idle > 0:
            path = pick(scheduler, tree, sorted(ready), cost, taken)
            if not path:
                break
            idle -= 1
            assignments += 1
            t = now
            for i, sid in enumerate(path):
                if i == 0 or not batch:
                    t += transition_seconds
                    loads += 1
                seconds = stage_seconds(tree.stages[sid], cost)
                train += seconds
                t += seconds
                heapq.heappush(events, (t, seq, "stage", sid))
                seq += 1
                taken.add(sid)
                ready.discard(sid)
            busy += t - now
            heapq.heappush(events, (t, seq, "worker", 0))
            seq += 1
        if not events:  # pragma: no cover - a tree's stages are always reachable
            raise RuntimeError("no stage is ready and no worker is busy")
        now = events[0][0]
        while events and events[0][0] == now:
            _, _, kind, sid = heapq.heappop(events)
            if kind == "worker":
                idle += 1
            else:
                done.add(sid)
                ready.update(c for c in tree.stages[sid].children if c not in taken)
    return Simulation(now, busy, train, assignments, loads)


def trial_makespan(seconds: list[float], workers: int) -> float:
    """Makespan of independent trials (trial-based: no sharing), in order, on free workers."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, but got {workers}")
    free = [0.0] * workers
    for s in seconds:
        t = heapq.heappop(free)
        heapq.heappush(free, t + s)
    return max(free)


__all__ = ["Simulation", "simulate", "trial_makespan"]
