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
from collections.abc import Callable
from dataclasses import dataclass

from hpctune.stagetree.plan import RequestStatus, SearchPlan
from hpctune.stagetree.schedulers import Scheduler, StepCost, pick, stage_seconds, unit_cost
from hpctune.stagetree.tree import StageTree, build_stage_tree


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


_FOREVER = 2**62  # the end of a claim on a whole node


def simulate_plan(
    plan: SearchPlan,
    scheduler: Scheduler,
    workers: int,
    cost: StepCost = unit_cost,
    *,
    transition_seconds: float = 0.0,
    batch: bool = True,
    checkpoint_every: int | None = None,
    claim_whole_nodes: bool = False,
    on_answer: Callable[[list[int], float], None] | None = None,
) -> tuple[Simulation, dict[int, float]]:
    """Run a search plan to the end as Hippo's stateless scheduler would, on a simulated clock.

    At every decision a free worker gets work from a stage tree generated afresh from the plan
    (only its top-level stages are ready); the stages given out claim their step ranges of their
    nodes (requests that need those steps wait, Algorithm 1; with ``claim_whole_nodes`` a stage
    claims its whole node, Hippo's rule) and mark the requests they end ``scheduled``. A
    finished stage adds its end checkpoint to the plan and, with ``checkpoint_every = k``, one at
    every multiple of k steps inside it (the thesis's peripheral checkpoints). ``on_answer(trials,
    time)`` is called when requests become done and may add or extend trials (a tuner: SHA's
    promotions). The plan is changed in place (checkpoints ``sim-<node>-<step>``).

    Without in-stage checkpoints a request that arrives later and branches inside a stretch
    already trained retrains from the checkpoint before it, as Hippo notes (§3.2); with
    ``checkpoint_every = 1`` no step is ever trained twice.

    Returns:
        The simulation figures and the time each trial's (last) request was answered.

    Raises:
        ValueError: ``workers`` < 1, ``transition_seconds`` < 0 or ``checkpoint_every`` < 1.
        RuntimeError: Requests remain that no stage tree can serve.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, but got {workers}")
    if transition_seconds < 0:
        raise ValueError(f"transition_seconds must be >= 0, but got {transition_seconds}")
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, but got {checkpoint_every}")
    events: list[tuple[float, int, str, int, int, int]] = []  # time, seq, kind, node, start, end
    claims: dict[int, tuple[int, int]] = {}  # event seq -> the claim its stage made
    answered: dict[int, float] = {}
    seq = 0
    idle = workers
    now = busy = train = 0.0
    assignments = loads = 0
    while True:
        while idle > 0:
            tree = build_stage_tree(plan)
            if tree.answered:
                for trial in tree.answered:
                    answered[trial] = now
                for node in plan.nodes:  # their checkpoints exist: mark them done
                    for end, request in node.requests.items():
                        if end in node.checkpoints:
                            request.status = RequestStatus.DONE
                if on_answer is not None:
                    on_answer(list(tree.answered), now)
                continue
            path = pick(scheduler, tree, tree.roots, cost)
            if not path:
                break
            idle -= 1
            assignments += 1
            t = now
            for i, sid in enumerate(path):
                stage = tree.stages[sid]
                if i == 0 or not batch:
                    t += transition_seconds
                    loads += 1
                seconds = stage_seconds(stage, cost)
                train += seconds
                t += seconds
                if claim_whole_nodes:
                    claim = (plan.nodes[stage.node].start, _FOREVER)
                else:
                    claim = (stage.start, stage.end)
                plan.claim(stage.node, *claim)
                if stage.end in plan.nodes[stage.node].requests:
                    plan.set_status(stage.node, stage.end, RequestStatus.SCHEDULED)
                heapq.heappush(events, (t, seq, "stage", stage.node, stage.start, stage.end))
                claims[seq] = claim
                seq += 1
            busy += t - now
            heapq.heappush(events, (t, seq, "worker", -1, -1, -1))
            seq += 1
        if not events:
            break
        now = events[0][0]
        done: list[int] = []
        while events and events[0][0] == now:
            _, event, kind, node_id, start, end = heapq.heappop(events)
            if kind == "worker":
                idle += 1
                continue
            inside = range(start + 1, end)
            steps = [s for s in inside if checkpoint_every and s % checkpoint_every == 0]
            for step in [*steps, end]:
                done += plan.add_checkpoint(node_id, step, f"sim-{node_id}-{step}")
            plan.release(node_id, *claims.pop(event))
        for trial in done:
            answered[trial] = now
        if done and on_answer is not None:
            on_answer(done, now)
    left = [
        (n.id, end)
        for n in plan.nodes
        for end, r in n.requests.items()
        if r.status is not RequestStatus.DONE
    ]
    if left:
        raise RuntimeError(f"requests (node, end) left unserved: {left[:5]}")
    return Simulation(now, busy, train, assignments, loads), answered


def trial_makespan(seconds: list[float], workers: int) -> float:
    """Makespan of independent trials (trial-based: no sharing), in order, on free workers."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, but got {workers}")
    free = [0.0] * workers
    for s in seconds:
        t = heapq.heappop(free)
        heapq.heappush(free, t + s)
    return max(free)


__all__ = ["Simulation", "simulate", "simulate_plan", "trial_makespan"]
