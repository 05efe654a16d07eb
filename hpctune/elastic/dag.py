"""The execution DAG of a plan (RubberBand §4.2, Figure 7) and its longest paths (Algorithm 1).

Nodes, in topological order (every node's predecessors come before it):

* **SCALE**: a new worker waits in the Slurm queue (a static plan: its one pool allocation).
  Pending jobs are not billed, so the hold of a worker starts when its SCALE ends.
* **INIT**: the worker process starts up until it can run its first segment, and its first
  segment's one-off warm-up; its latency depends on how many workers start at once (``together``:
  the stage's new workers, which share the nodes' CPUs and file system while they start).
* **TRAIN**: one trial's segment of a stage: the gap since the worker's previous segment of
  the stage (not after its INIT, nor after a SYNC: SYNC is measured to the next stage's first
  segment start, so it holds that gap), its beginning (checkpoint load) and its steps at the
  stage's devices per trial, slowed by the crowding of the stage's workers training at once
  (``together``). A worker runs its trials one after another.
* **SYNC**: the rung is judged; the next stage starts after it.

How stages join (the rules the executor is to follow): an elastic plan's workers are Slurm jobs
of one size. A stage whose trials get the same devices as the stage before keeps as many of the
previous workers as it needs (the last to finish; they wait for the SYNC, held) and the others
leave as soon as their last segment ends; a stage with another size, or more workers, submits
new ones after the SYNC (SCALE, then INIT). A static plan holds one pool from its start to the
end; a stage that changes the trials' size restarts the workers inside the pool (INIT, no
SCALE). Low-latency events with no cost (cancelling a worker) are not nodes, as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from hpctune.elastic.allocation import Allocation, StageShape
from hpctune.elastic.experiment import ExperimentSpec, PlanningError, Progress


class NodeKind(Enum):
    """The four node types of the paper's execution model."""

    SCALE = "SCALE"
    INIT = "INIT"
    TRAIN = "TRAIN"
    SYNC = "SYNC"


@dataclass(frozen=True)
class Node:
    """One task of the DAG.

    Attributes:
        kind: Its type.
        stage: The stage it belongs to.
        preds: Indices of the nodes it waits for.
        worker: The worker (within the stage) it runs on; -1 for SYNC and a pool's SCALE.
        devices: Devices of the worker (SCALE, INIT) or the trial (TRAIN).
        steps: TRAIN: steps it trains.
        begins: TRAIN: the segment begins here (pays the segment start); False for one already
            running when a re-plan starts.
        together: INIT: workers starting at once; TRAIN: workers of its stage training at once.
        gap: TRAIN: it follows an earlier segment of its stage on its worker (pays the gap
            between two segments); False after the worker's INIT or a rung's SYNC (which is
            measured to the next segment's start: the gap is in it).
    """

    kind: NodeKind
    stage: int
    preds: tuple[int, ...]
    worker: int = -1
    devices: int = 0
    steps: int = 0
    begins: bool = True
    together: int = 1
    gap: bool = False

    def label(self) -> str:
        """A short text: ``TRAIN s1 w3 (2 devices, 3 steps)``."""
        where = f"s{self.stage}" + (f" w{self.worker}" if self.worker >= 0 else "")
        if self.kind is NodeKind.TRAIN:
            return f"TRAIN {where} ({self.devices} devices, {self.steps} steps)"
        if self.kind is NodeKind.SYNC:
            return f"SYNC {where}"
        return f"{self.kind.value} {where} ({self.devices} devices)"


@dataclass(frozen=True)
class Hold:
    """The workers of one stage of an elastic plan, for the held cost.

    Attributes:
        stage: The stage.
        devices: Devices of each worker.
        begins: Per worker, the node whose end starts its hold in this stage (its SCALE, or the
            previous SYNC for a worker kept from the stage before); ``None``: time 0.
        ends: Per worker, its last TRAIN node (``None``: it trains nothing, it ends where it
            begins).
        sync: The stage's SYNC node.
        kept: How many workers go on into the next stage: the last to finish, held to the SYNC.
    """

    stage: int
    devices: int
    begins: tuple[int | None, ...]
    ends: tuple[int | None, ...]
    sync: int
    kept: int = 0


@dataclass(frozen=True)
class Dag:
    """A plan's DAG.

    Attributes:
        nodes: In topological order.
        holds: Elastic plans: the workers of each stage.
        pool: Static plans: ``(devices, begin node or None, end node)`` of the pool.
        end: The last node (the last SYNC).
    """

    nodes: tuple[Node, ...]
    holds: tuple[Hold, ...] = ()
    pool: tuple[int, int | None, int] | None = None

    @property
    def end(self) -> int:
        """The last node (the last stage's SYNC)."""
        return len(self.nodes) - 1

    def count(self, kind: NodeKind) -> int:
        """How many nodes of ``kind`` it has."""
        return sum(1 for n in self.nodes if n.kind is kind)


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def add(self, node: Node) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1


def to_dag(spec: ExperimentSpec, allocation: Allocation, progress: Progress | None = None) -> Dag:
    """Build the DAG of ``spec`` run with ``allocation`` (from ``progress`` on, if given).

    Trials of a stage go to its workers in turn (trial ``j`` to worker ``j mod workers``); a
    worker's trials run one after another.

    Raises:
        PlanningError: The allocation does not have one shape per stage, or ``progress`` does
            not fit.
    """
    if len(allocation.shapes) != spec.num_stages():
        raise PlanningError(
            f"the allocation has {len(allocation.shapes)} stages, the experiment "
            f"{spec.num_stages()}"
        )
    first = 0
    if progress is not None:
        progress.check(spec)
        first = progress.stage
    b = _Builder()
    static = allocation.static_pool
    pool_scale: int | None = None
    if static is not None and progress is None:
        pool_scale = b.add(Node(NodeKind.SCALE, first, (), devices=static))
    holds: list[Hold] = []
    prev_sync: int | None = None
    prev: StageShape | None = None
    for i in range(first, spec.num_stages()):
        stage, shape = spec.stages[i], allocation.shapes[i]
        if progress is not None and i == progress.stage:
            shape = StageShape(progress.devices, progress.workers)
            steps = [s for s in progress.steps_left if s > 0]
            begins_list = [s == stage.steps for s in progress.steps_left if s > 0]
            ready: list[int | None] = [None] * shape.workers
            begin: list[int | None] = [None] * shape.workers
        else:
            steps = [stage.steps] * stage.trials
            begins_list = [True] * stage.trials
            if static is not None:
                ready = _static_ready(b, i, shape, prev, prev_sync, pool_scale)
                begin = list(ready)
            else:
                ready, begin = _elastic_ready(b, i, shape, prev, prev_sync, holds)
        last = _train_nodes(b, i, shape, steps, begins_list, ready)
        ends = [t if t is not None else r for t, r in zip(last, ready, strict=True)]
        preds = tuple(sorted({e for e in ends if e is not None}))
        sync = b.add(Node(NodeKind.SYNC, i, preds))
        if static is None:
            holds.append(Hold(i, shape.devices, tuple(begin), tuple(last), sync))
        prev_sync, prev = sync, shape
    pool = None if static is None else (static, pool_scale, len(b.nodes) - 1)
    return Dag(tuple(b.nodes), tuple(holds), pool)


def _elastic_ready(
    b: _Builder,
    stage: int,
    shape: StageShape,
    prev: StageShape | None,
    prev_sync: int | None,
    holds: list[Hold],
) -> tuple[list[int | None], list[int | None]]:
    """The workers of an elastic stage: those of the stage before kept where the device count
    is the same (the last hold keeps them), the others scaled up and initialised; each worker's
    node it is ready after, and the node its hold begins at."""
    reuse = min(prev.workers, shape.workers) if prev and prev.devices == shape.devices else 0
    if holds:
        holds[-1] = _with_kept(holds[-1], reuse)
    ready: list[int | None] = []
    begin: list[int | None] = []
    new = shape.workers - reuse
    for k in range(shape.workers):
        if k < reuse:
            ready.append(prev_sync)
            begin.append(prev_sync)
            continue
        after = () if prev_sync is None else (prev_sync,)
        scale = b.add(Node(NodeKind.SCALE, stage, after, k, shape.devices))
        init = Node(NodeKind.INIT, stage, (scale,), k, shape.devices, together=new)
        ready.append(b.add(init))
        begin.append(scale)
    return ready, begin


def _train_nodes(
    b: _Builder,
    stage: int,
    shape: StageShape,
    steps: list[int],
    begins: list[bool],
    ready: list[int | None],
) -> list[int | None]:
    """A stage's trials as TRAIN nodes, trial ``j`` on worker ``j mod workers`` after the
    worker's trial before it; return each worker's last node (``None``: it trained none)."""
    last: list[int | None] = [None] * shape.workers
    for j, (n_steps, fresh) in enumerate(zip(steps, begins, strict=True)):
        k = j % shape.workers
        before = last[k] if last[k] is not None else ready[k]
        after_train = before is not None and b.nodes[before].kind is NodeKind.TRAIN
        node = Node(
            NodeKind.TRAIN,
            stage,
            () if before is None else (before,),
            k,
            shape.devices,
            n_steps,
            fresh,
            together=min(shape.workers, len(steps)),
            gap=fresh and after_train,
        )
        last[k] = b.add(node)
    return last


def _static_ready(
    b: _Builder,
    stage: int,
    shape: StageShape,
    prev: StageShape | None,
    prev_sync: int | None,
    pool_scale: int | None,
) -> list[int | None]:
    """Where each worker of a static pool's stage is ready: after its INIT when the pool starts
    or the trials' size changes, else at the previous SYNC."""
    if prev is not None and prev.devices == shape.devices and prev.workers >= shape.workers:
        return [prev_sync] * shape.workers
    after = prev_sync if prev is not None else pool_scale
    preds = () if after is None else (after,)
    return [
        b.add(Node(NodeKind.INIT, stage, preds, k, shape.devices, together=shape.workers))
        for k in range(shape.workers)
    ]


def _with_kept(hold: Hold, kept: int) -> Hold:
    return Hold(hold.stage, hold.devices, hold.begins, hold.ends, hold.sync, kept)


def finish_times(dag: Dag, latencies: np.ndarray) -> np.ndarray:
    """When every node ends, for each row of ``latencies`` ([samples, nodes] seconds).

    Algorithm 1's ``sample_duration``: nodes in topological order, each ending its latency after
    the latest of its predecessors (time 0 for a node without any).
    """
    lat = np.atleast_2d(np.asarray(latencies, dtype=float))
    if lat.shape[1] != len(dag.nodes):
        raise ValueError(f"latencies have {lat.shape[1]} columns for {len(dag.nodes)} nodes")
    finish = np.empty_like(lat)
    for v, node in enumerate(dag.nodes):
        preds = node.preds
        if not preds:
            finish[:, v] = lat[:, v]
        elif len(preds) == 1:
            finish[:, v] = finish[:, preds[0]] + lat[:, v]
        else:
            finish[:, v] = finish[:, list(preds)].max(axis=1) + lat[:, v]
    return finish


def critical_path(dag: Dag, latencies: np.ndarray) -> list[int]:
    """The nodes of the longest path to the end, first to last, for one row of latencies (ties
    go to the earliest predecessor)."""
    lat = np.asarray(latencies, dtype=float).reshape(1, -1)
    finish = finish_times(dag, lat)[0]
    path = [dag.end]
    while dag.nodes[path[-1]].preds:
        preds = dag.nodes[path[-1]].preds
        path.append(max(preds, key=lambda p: (finish[p], -p)))
    return path[::-1]


__all__ = ["Dag", "Hold", "Node", "NodeKind", "critical_path", "finish_times", "to_dag"]
