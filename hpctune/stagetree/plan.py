"""The search plan (Hippo §3.2): every trial's stages merged into a forest of nodes.

A node is a configuration piece from a start step on (the paper's ``hp_config`` with its
``init_step``); it has no fixed end. An edge from a parent to a child is annotated by the child's
start step: the child trains on from the parent's state at that step. A trial is a path from a
root: it trains in each node of its path from the node's start to the next node's start, and in
the last node up to its request's end step.

Adding a trial never restructures the plan: a trial that shares a node's piece but diverges in
the middle of what earlier trials train there (the paper's "split a stage", Figure 5) adds a
child at that step; the stage tree generated from the plan (:mod:`hpctune.stagetree.tree`) splits
the stage there. Nodes are never deleted (append-only edges), so checkpoints and metrics stay
attached to the node and step that produced them.

Per node the plan keeps the requests ending there (end step -> trials, status), the reference
count (live trials whose path passes through or ends in the node), checkpoints by step (ids
only), metrics by step, and the step ranges workers are training in the node now (``claims``).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hpctune.errors import HpctuneError
from hpctune.stagetree.pieces import (
    ConfigPiece,
    TrialStage,
    config_piece_from_json,
    config_piece_to_json,
)

FORMAT_VERSION = 1


class RequestStatus(enum.Enum):
    """Where a request stands (the thesis's NOT_SCHED / SCHED, plus done)."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    DONE = "done"


@dataclass
class Request:
    """Train a node's configuration up to ``end`` (total steps from step 0) for ``trials``."""

    end: int
    trials: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.PENDING


@dataclass
class PlanNode:
    """A configuration piece trained from ``start`` on, after its parent's first ``start`` steps.

    Attributes:
        id: The node's index in the plan.
        config: The configuration piece of every parameter.
        start: The step where training under this piece starts.
        parent: The parent node's id, ``None`` for a root (training from a fresh model).
        children: Child ids, in the order they were added.
        requests: End step -> request.
        refs: Live trials whose path passes through or ends in this node.
        checkpoints: Step -> checkpoint id (the state after that many steps, the last ones
            trained under this node's piece).
        metrics: Step -> metric name -> value.
        claims: Step ranges ``(start, end)`` workers train in this node now; a request that
            needs steps in a claimed range waits for it (Algorithm 1's "running").
    """

    id: int
    config: ConfigPiece
    start: int
    parent: int | None
    children: list[int] = field(default_factory=list)
    requests: dict[int, Request] = field(default_factory=dict)
    refs: int = 0
    checkpoints: dict[int, str] = field(default_factory=dict)
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    claims: list[tuple[int, int]] = field(default_factory=list)

    @property
    def running(self) -> bool:
        """A worker trains in this node now."""
        return bool(self.claims)

    @property
    def status(self) -> str:
        """``running`` (claimed), else of its own requests: ``pending`` if one is, else
        ``scheduled`` if one is, else ``done``; ``idle`` without requests."""
        if self.claims:
            return "running"
        states = {r.status for r in self.requests.values()}
        for state in (RequestStatus.PENDING, RequestStatus.SCHEDULED, RequestStatus.DONE):
            if state in states:
                return state.value
        return "idle"


@dataclass(frozen=True)
class TrialPath:
    """Where a trial lives in the plan: its nodes from the root, and its request's end step."""

    nodes: tuple[int, ...]
    end: int


class PlanError(HpctuneError, ValueError):
    """A search plan operation cannot be done (unknown trial, bad stages, bad JSON)."""

    exit_code = 2


class SearchPlan:
    """Nodes, trials' paths and requests; the source of every stage tree.

    Methods change the plan in place; :meth:`to_dict`/:meth:`from_dict` give a JSON-able form
    (for the journal, later).
    """

    def __init__(self) -> None:
        self.nodes: list[PlanNode] = []
        self.roots: list[int] = []
        self.trials: dict[int, TrialPath] = {}
        self._index: dict[tuple[int | None, int, ConfigPiece], int] = {}

    # -- building ------------------------------------------------------------------------

    def _child(self, parent: int | None, start: int, config: ConfigPiece) -> int:
        key = (parent, start, config)
        found = self._index.get(key)
        if found is not None:
            return found
        node = PlanNode(len(self.nodes), config, start, parent)
        self.nodes.append(node)
        self._index[key] = node.id
        if parent is None:
            self.roots.append(node.id)
        else:
            self.nodes[parent].children.append(node.id)
        return node.id

    def add_trial(
        self, trial_id: int, stages: Iterable[TrialStage], end: int | None = None
    ) -> bool:
        """Merge a trial into the plan and add its request.

        Args:
            trial_id: The trial's id (unique in the plan).
            stages: The trial's stages (:func:`~hpctune.stagetree.pieces.trial_stages`), from
                step 0, contiguous.
            end: Train up to this step (default: the last stage's end), e.g. a rung of SHA.

        Returns:
            True if the request is already answered (a checkpoint exists at its end step).

        Raises:
            PlanError: The trial is already in the plan, the stages are not contiguous from 0,
                or ``end`` is outside them.
        """
        if trial_id in self.trials:
            raise PlanError(f"trial {trial_id} is already in the search plan")
        stages = list(stages)
        if not stages or stages[0].start != 0:
            raise PlanError(f"trial {trial_id}: stages must start at step 0, got {stages[:1]}")
        for a, b in itertools.pairwise(stages):
            if a.end != b.start:
                raise PlanError(f"trial {trial_id}: stages must be contiguous, got {a} then {b}")
        stop = stages[-1].end if end is None else end
        if not 0 < stop <= stages[-1].end:
            raise PlanError(
                f"trial {trial_id}: end must be in [1, {stages[-1].end}], but got {stop}"
            )
        path: list[int] = []
        parent: int | None = None
        for stage in stages:
            if stage.start >= stop:
                break
            parent = self._child(parent, stage.start, stage.config)
            path.append(parent)
        for node_id in path:
            self.nodes[node_id].refs += 1
        leaf = self.nodes[path[-1]]
        request = leaf.requests.setdefault(stop, Request(stop))
        request.trials.append(trial_id)
        if stop in leaf.checkpoints:
            request.status = RequestStatus.DONE
        self.trials[trial_id] = TrialPath(tuple(path), stop)
        return request.status is RequestStatus.DONE

    def remove_trial(self, trial_id: int) -> list[int]:
        """Release a trial (killed or finished with): drop its request, decrement references.

        Returns:
            The ids of nodes whose reference count fell to 0 (their checkpoints are needed by
            no live trial).

        Raises:
            PlanError: The trial is not in the plan.
        """
        path = self.trials.pop(trial_id, None)
        if path is None:
            raise PlanError(f"trial {trial_id} is not in the search plan")
        leaf = self.nodes[path.nodes[-1]]
        request = leaf.requests[path.end]
        request.trials.remove(trial_id)
        if not request.trials:
            del leaf.requests[path.end]
        released = []
        for node_id in path.nodes:
            node = self.nodes[node_id]
            node.refs -= 1
            if node.refs == 0:
                released.append(node_id)
        return released

    def extend_trial(self, trial_id: int, stages: Iterable[TrialStage], end: int) -> bool:
        """Move a trial's request to a later end step (e.g. promoted to the next rung).

        The trial is released and merged again (reference counts stay right); its stages are
        the same as when it was added, so its path only grows.

        Returns:
            True if the new request is already answered.

        Raises:
            PlanError: The trial is not in the plan, or ``end`` is not after its current end.
        """
        path = self.trials.get(trial_id)
        if path is None:
            raise PlanError(f"trial {trial_id} is not in the search plan")
        if end <= path.end:
            raise PlanError(
                f"trial {trial_id}: a new end must be after the current one ({path.end}), "
                f"but got {end}"
            )
        self.remove_trial(trial_id)
        return self.add_trial(trial_id, stages, end)

    def add_checkpoint(self, node_id: int, step: int, checkpoint_id: str) -> list[int]:
        """Record a checkpoint; requests of the node ending at ``step`` become done.

        Returns:
            The trials whose requests became done.

        Raises:
            PlanError: The node is unknown or ``step`` is before the node's start.
        """
        node = self._node(node_id)
        if step < node.start:
            raise PlanError(f"node {node_id} starts at step {node.start}, not before ({step})")
        node.checkpoints[step] = checkpoint_id
        request = node.requests.get(step)
        if request is None or request.status is RequestStatus.DONE:
            return []
        request.status = RequestStatus.DONE
        return list(request.trials)

    def set_status(self, node_id: int, end: int, status: RequestStatus) -> None:
        """Set the status of the request ending at ``end`` in a node."""
        node = self._node(node_id)
        if end not in node.requests:
            raise PlanError(f"node {node_id} has no request ending at step {end}")
        node.requests[end].status = status

    def claim(self, node_id: int, start: int, end: int) -> None:
        """Record that a worker trains a node from ``start`` to ``end`` (until released)."""
        node = self._node(node_id)
        if not node.start <= start < end:
            raise PlanError(
                f"node {node_id}: a claim must be a step range from the node's start "
                f"({node.start}) on, but got ({start}, {end})"
            )
        node.claims.append((start, end))

    def release(self, node_id: int, start: int, end: int) -> None:
        """Drop a claim made by :meth:`claim` (the stage ended, or its worker was lost)."""
        node = self._node(node_id)
        if (start, end) not in node.claims:
            raise PlanError(f"node {node_id} has no claim ({start}, {end}); claims: {node.claims}")
        node.claims.remove((start, end))

    def find_node(self, path: Iterable[tuple[int, ConfigPiece]]) -> int | None:
        """The node reached from a root by ``(start, configuration piece)`` steps, or
        ``None`` if the plan has no such path."""
        node: int | None = None
        for start, config in path:
            node = self._index.get((node, start, config))
            if node is None:
                return None
        return node

    def node_path(self, node_id: int) -> list[tuple[int, ConfigPiece]]:
        """``(start, configuration piece)`` of each node from the root to ``node_id``."""
        out = []
        current: int | None = node_id
        while current is not None:
            node = self.nodes[current]
            out.append((node.start, node.config))
            current = node.parent
        return out[::-1]

    def trials_through(self, node_id: int) -> list[int]:
        """The live trials whose path passes through or ends in a node (``refs`` of them)."""
        return sorted(t for t, p in self.trials.items() if node_id in p.nodes)

    def _node(self, node_id: int) -> PlanNode:
        if not 0 <= node_id < len(self.nodes):
            raise PlanError(f"no node {node_id}; the plan has {len(self.nodes)} nodes")
        return self.nodes[node_id]

    # -- figures -------------------------------------------------------------------------

    def node_end(self, node_id: int) -> int:
        """The furthest step live trials need in a node (requests and children's starts)."""
        node = self.nodes[node_id]
        ends = [e for e in node.requests]
        ends += [self.nodes[c].start for c in node.children if self.nodes[c].refs > 0]
        return max(ends, default=node.start)

    def total_steps(self) -> int:
        """Steps the live trials would train on their own (trial-based)."""
        return sum(p.end for p in self.trials.values())

    def unique_steps(self) -> int:
        """Steps the plan trains once each (stage-based, from scratch)."""
        return sum(self.node_end(n.id) - n.start for n in self.nodes if n.refs > 0)

    def merge_rate(self) -> float:
        """Hippo's merge rate p = total steps / unique steps (1.0 for an empty plan)."""
        unique = self.unique_steps()
        return self.total_steps() / unique if unique else 1.0

    # -- persistence ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-able form (``version``, ``nodes``, ``trials``)."""
        return {
            "version": FORMAT_VERSION,
            "nodes": [
                {
                    "id": n.id,
                    "config": config_piece_to_json(n.config),
                    "start": n.start,
                    "parent": n.parent,
                    "children": list(n.children),
                    "requests": [
                        {"end": r.end, "trials": list(r.trials), "status": r.status.value}
                        for r in n.requests.values()
                    ],
                    "refs": n.refs,
                    "checkpoints": [[s, c] for s, c in sorted(n.checkpoints.items())],
                    "metrics": [[s, dict(m)] for s, m in sorted(n.metrics.items())],
                    "claims": [list(c) for c in n.claims],
                }
                for n in self.nodes
            ],
            "trials": [[t, list(p.nodes), p.end] for t, p in self.trials.items()],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SearchPlan:
        """Rebuild a plan from :meth:`to_dict`.

        Raises:
            PlanError: The version is unknown or a field is missing or malformed.
        """
        if d.get("version") != FORMAT_VERSION:
            raise PlanError(
                f"search plan format version must be {FORMAT_VERSION}, but got "
                f"{d.get('version')!r}; written by a newer hpctune?"
            )
        plan = cls()
        try:
            for i, nd in enumerate(d["nodes"]):
                if nd["id"] != i:
                    raise PlanError(
                        f"node ids must be 0, 1, ... in order; node {i} has {nd['id']}"
                    )
                node = PlanNode(
                    i,
                    config_piece_from_json(nd["config"]),
                    int(nd["start"]),
                    None if nd["parent"] is None else int(nd["parent"]),
                    [int(c) for c in nd["children"]],
                    {
                        int(r["end"]): Request(
                            int(r["end"]),
                            [int(t) for t in r["trials"]],
                            RequestStatus(r["status"]),
                        )
                        for r in nd["requests"]
                    },
                    int(nd["refs"]),
                    {int(s): str(c) for s, c in nd["checkpoints"]},
                    {int(s): {str(k): float(v) for k, v in m.items()} for s, m in nd["metrics"]},
                    [(int(a), int(b)) for a, b in nd["claims"]],
                )
                plan.nodes.append(node)
                plan._index[(node.parent, node.start, node.config)] = i
                if node.parent is None:
                    plan.roots.append(i)
            for t, nodes, end in d["trials"]:
                plan.trials[int(t)] = TrialPath(tuple(int(n) for n in nodes), int(end))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, PlanError):
                raise
            raise PlanError(f"malformed search plan JSON: {type(exc).__name__}: {exc}") from None
        return plan


__all__ = [
    "FORMAT_VERSION",
    "PlanError",
    "PlanNode",
    "Request",
    "RequestStatus",
    "SearchPlan",
    "TrialPath",
]
