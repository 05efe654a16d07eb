"""Which stages a free worker runs next: Hippo's critical path and the thesis's baselines.

All are pure functions of a :class:`~hpctune.stagetree.tree.StageTree`, the set of stages a
worker may start now (``ready``: their source checkpoint exists) and a cost estimate.

- :func:`pick_critical_path` (Hippo §4.3): the path from a ready stage down to a leaf with the
  longest estimated time (steps x seconds per step), given whole to one worker, so consecutive
  stages run without a checkpoint reload.
- :func:`pick_bfs` (TreeML §6.3 "BFS"): one stage, the first ready one in breadth-first order.
- :func:`pick_most_children` (TreeML §6.3 "THR"): one stage, the ready one with the most child
  stages (ties: breadth-first order).

:func:`critical_path_batches` gives the whole static plan of Hippo's scheduler: the longest
root-to-leaf path, then the longest path among the stages left, and so on.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Collection, Iterable

from hpctune.stagetree.pieces import ConfigPiece
from hpctune.stagetree.tree import Stage, StageTree

StepCost = Callable[[ConfigPiece], float]
"""Estimated seconds per step under a configuration piece (a cost estimate from profiling)."""


def unit_cost(config: ConfigPiece) -> float:
    """One second per step for every configuration."""
    return 1.0


def stage_seconds(stage: Stage, cost: StepCost) -> float:
    """Estimated time of a stage: its steps x the cost estimate's seconds per step."""
    return stage.steps * cost(stage.config)


class Scheduler(enum.Enum):
    """The scheduling policies over stage trees."""

    CRITICAL_PATH = "critical-path"
    BFS = "bfs"
    MOST_CHILDREN = "most-children"


def bfs_order(tree: StageTree) -> list[int]:
    """Stage ids in breadth-first order from the roots (children in tree order)."""
    order: list[int] = []
    queue = deque(tree.roots)
    while queue:
        sid = queue.popleft()
        order.append(sid)
        queue.extend(tree.stages[sid].children)
    return order


def _longest_to_leaf(
    tree: StageTree, cost: StepCost, skip: Collection[int]
) -> dict[int, tuple[float, int | None]]:
    """For every stage not in ``skip``: (longest estimated time down to a leaf, next stage)."""
    best: dict[int, tuple[float, int | None]] = {}
    for stage in reversed(tree.stages):  # children come after parents
        if stage.id in skip:
            continue
        tail, nxt = 0.0, None
        for c in stage.children:
            if c in skip:
                continue
            t = best[c][0]
            if nxt is None or t > tail:
                tail, nxt = t, c
        best[stage.id] = (stage_seconds(stage, cost) + tail, nxt)
    return best


def pick_critical_path(
    tree: StageTree, ready: Iterable[int], cost: StepCost, taken: Collection[int] = ()
) -> list[int]:
    """Return the longest path (estimated time) from a ready stage to a leaf, or ``[]``.

    Args:
        tree: The stage tree.
        ready: Stages a worker may start now.
        cost: Seconds per step by configuration piece.
        taken: Stages already given to a worker (excluded from paths).

    Ties go to the lower stage id.
    """
    best = _longest_to_leaf(tree, cost, set(taken))
    heads = [s for s in ready if s not in taken]
    if not heads:
        return []
    head = max(sorted(heads), key=lambda s: best[s][0])
    path = [head]
    while (nxt := best[path[-1]][1]) is not None:
        path.append(nxt)
    return path


def pick_bfs(tree: StageTree, ready: Iterable[int], taken: Collection[int] = ()) -> list[int]:
    """Return ``[the first ready stage in breadth-first order]``, or ``[]``."""
    rank = {sid: i for i, sid in enumerate(bfs_order(tree))}
    heads = [s for s in ready if s not in taken]
    return [min(heads, key=rank.__getitem__)] if heads else []


def pick_most_children(
    tree: StageTree, ready: Iterable[int], taken: Collection[int] = ()
) -> list[int]:
    """Return ``[the ready stage with the most child stages]`` (ties: BFS order), or ``[]``."""
    rank = {sid: i for i, sid in enumerate(bfs_order(tree))}
    heads = [s for s in ready if s not in taken]
    if not heads:
        return []
    return [min(heads, key=lambda s: (-len(tree.stages[s].children), rank[s]))]


def pick(
    scheduler: Scheduler,
    tree: StageTree,
    ready: Iterable[int],
    cost: StepCost = unit_cost,
    taken: Collection[int] = (),
) -> list[int]:
    """Return the stages one free worker runs next under ``scheduler`` (``[]``: nothing)."""
    if scheduler is Scheduler.CRITICAL_PATH:
        return pick_critical_path(tree, ready, cost, taken)
    if scheduler is Scheduler.BFS:
        return pick_bfs(tree, ready, taken)
    return pick_most_children(tree, ready, taken)


def critical_path_batches(tree: StageTree, cost: StepCost = unit_cost) -> list[list[int]]:
    """Hippo's scheduler on a whole tree: longest root-to-leaf path first, then the next.

    Each batch is a path of stages for one worker; a batch's first stage starts from its
    parent stage's end (in an earlier batch) or from the tree's checkpoint or a fresh model.
    Every stage is in exactly one batch.
    """
    taken: set[int] = set()
    batches: list[list[int]] = []
    while len(taken) < len(tree.stages):
        heads = [
            s.id
            for s in tree.stages
            if s.id not in taken and (s.parent is None or s.parent in taken)
        ]
        path = pick_critical_path(tree, heads, cost, taken)
        batches.append(path)
        taken.update(path)
    return batches


__all__ = [
    "Scheduler",
    "StepCost",
    "bfs_order",
    "critical_path_batches",
    "pick",
    "pick_bfs",
    "pick_critical_path",
    "pick_most_children",
    "stage_seconds",
    "unit_cost",
]
