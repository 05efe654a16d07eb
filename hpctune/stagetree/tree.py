"""Stage trees from a search plan (Hippo Algorithm 1; the thesis's BuildStageTree).

For every pending request, :func:`find_latest_checkpoint` finds where training can resume: the
latest checkpoint of the request's node at or before its end step, else (recursively) the
request's branch point in the parent node, else a fresh model at a root. The lookup table maps
each point ``(node, step)`` to its source and memoises the walk, so a branch point shared by many
requests is looked up once. Each looked-up point that has no checkpoint of its own becomes a
*stage*: train the point's node from its source's step to the point's step. Stages of one node
that start from the same source are chained in step order (the paper's "connect consecutive
stages"), which splits a node's stretch at every branch point and request end.

A request whose walk needs steps of a node that a worker is training now (a *claim* of the
node overlaps the steps from the resume point to the request's step) waits: it and every point
behind it make no stage until the next tree is generated, so no step is trained twice at once.
Hippo waits whenever the node is running at all; claims on step ranges refine that (a request
whose steps lie before a claimed range, resuming from a checkpoint, need not wait; claiming
``(node.start, infinity)`` gives Hippo's rule). Stage trees are transient: generate a new one
from the plan at every decision.
"""

from __future__ import annotations

import enum
import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from hpctune.stagetree.pieces import ConfigPiece
from hpctune.stagetree.plan import RequestStatus, SearchPlan


@dataclass(frozen=True, order=True)
class Point:
    """The model state after ``step`` steps, the last ones trained under ``node``'s piece."""

    node: int
    step: int


class LinkKind(enum.Enum):
    """How a point is reached."""

    CHECKPOINT = "checkpoint"  # load the checkpoint at ``point``
    FRESH = "fresh"  # start from a freshly initialised model (a root node, step 0)
    AFTER = "after"  # first reach ``point`` (the branch point in the parent node)
    WAIT = "wait"  # a worker trains the steps needed in this node now; do not schedule


@dataclass(frozen=True)
class Link:
    """The source of a point in the lookup table."""

    kind: LinkKind
    point: Point | None = None


def find_latest_checkpoint(
    plan: SearchPlan, request: Point, table: dict[Point, Link], *, claims: bool = True
) -> None:
    """Fill ``table`` with the source of ``request`` and, recursively, of its branch points.

    Memoised: a point already in ``table`` is not looked up again. (Written as a loop over the
    recursion of Algorithm 1, so deep plans do not reach Python's recursion limit.) With
    ``claims = False`` claimed ranges are ignored (no point waits).
    """
    point = request
    while point not in table:
        node = plan.nodes[point.node]
        latest = next(
            (s for s in range(point.step, node.start - 1, -1) if s in node.checkpoints), None
        )
        base = node.start if latest is None else latest
        if claims and any(a < point.step and b > base for a, b in node.claims):
            table[point] = Link(LinkKind.WAIT)
            return
        if latest is not None:
            table[point] = Link(LinkKind.CHECKPOINT, Point(node.id, latest))
            return
        if node.parent is None:
            table[point] = Link(LinkKind.FRESH)
            return
        branch = Point(node.parent, node.start)
        table[point] = Link(LinkKind.AFTER, branch)
        point = branch


@dataclass
class Stage:
    """A schedulable unit: train ``node``'s piece from step ``start`` to ``end``.

    Attributes:
        id: The stage's index in the tree.
        node: The search plan node.
        start: The first step trained (the step of the state it starts from).
        end: The step reached (the state saved at its end).
        config: The node's configuration piece.
        parent: The stage that must run first, ``None`` for a top-level stage.
        children: Stages that start from this stage's end.
        source: For a top-level stage: the checkpoint to load, ``None`` for a fresh model.
        trials: Trials whose pending request ends here (answered when the stage is done).
    """

    id: int
    node: int
    start: int
    end: int
    config: ConfigPiece
    parent: int | None = None
    children: list[int] = field(default_factory=list)
    source: Point | None = None
    trials: list[int] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Steps trained in this stage."""
        return self.end - self.start


@dataclass
class StageTree:
    """A forest of stages generated from a search plan.

    Attributes:
        stages: All stages; ``stages[i].id == i``, parents before children.
        roots: Top-level stages (they load a checkpoint or start fresh).
        answered: Trials whose requests a checkpoint already answers (no training needed).
        waiting: Requests not served now because a worker trains in a node on their way.
    """

    stages: list[Stage]
    roots: list[int]
    answered: list[int]
    waiting: list[Point]

    def depth(self, stage_id: int) -> int:
        """The number of ancestors of a stage."""
        d, parent = 0, self.stages[stage_id].parent
        while parent is not None:
            d, parent = d + 1, self.stages[parent].parent
        return d


def build_stage_tree(plan: SearchPlan) -> StageTree:
    """Generate the stage tree that serves every pending request of the plan (Algorithm 1)."""
    table, requests, answered = _link_table(plan)
    blocked = _Blocked(table)
    after, load = _chain_stage_points(table, blocked)
    stages = _stages(plan, after, load, set(requests))
    for stage in stages:
        if stage.parent is not None:
            stages[stage.parent].children.append(stage.id)
    roots = [s.id for s in stages if s.parent is None]
    waiting = [p for p in requests if blocked(p)]
    return StageTree(stages, roots, answered, waiting)


def _link_table(plan: SearchPlan) -> tuple[dict[Point, Link], list[Point], list[int]]:
    """Every pending request's chain of links back to a checkpoint (or a wait, or step 0):
    the table of links, the requests' points, and the trials already answered."""
    table: dict[Point, Link] = {}
    requests: list[Point] = []
    answered: list[int] = []
    for node in plan.nodes:
        for end, request in sorted(node.requests.items()):
            if request.status is not RequestStatus.PENDING:
                continue
            if end in node.checkpoints:
                answered.extend(request.trials)
                continue
            point = Point(node.id, end)
            requests.append(point)
            find_latest_checkpoint(plan, point, table)
    return table, requests, answered


class _Blocked:
    """Whether a point is blocked: its chain of branch points meets a claimed range."""

    def __init__(self, table: dict[Point, Link]) -> None:
        self.table = table
        self.blocked: dict[Point, bool] = {}

    def __call__(self, p: Point) -> bool:
        """Whether ``p`` is blocked (remembered for every point of its chain)."""
        table, blocked = self.table, self.blocked
        chain = []
        while p not in blocked and table[p].kind is LinkKind.AFTER:
            chain.append(p)
            p = table[p].point  # type: ignore[assignment]
        if p not in blocked:
            blocked[p] = table[p].kind is LinkKind.WAIT
        for q in chain:
            blocked[q] = blocked[p]
        return blocked[chain[0]] if chain else blocked[p]


def _available(table: dict[Point, Link], p: Point) -> bool:
    """A point whose own checkpoint exists is a source, not a stage."""
    link = table.get(p)
    return link is not None and link.kind is LinkKind.CHECKPOINT and link.point == p


def _chain_stage_points(
    table: dict[Point, Link], blocked: _Blocked
) -> tuple[dict[Point, Point | None], dict[Point, Point | None]]:
    """Group stage points by (node, link) and chain each group in step order: each stage point
    gets the stage point before it (``after``) or the checkpoint it loads (``load``), or neither
    (a fresh model at step 0)."""
    groups: dict[tuple[int, Link], list[Point]] = defaultdict(list)
    for p, link in table.items():
        if not _available(table, p) and not blocked(p):
            groups[(p.node, link)].append(p)
    after: dict[Point, Point | None] = {}
    load: dict[Point, Point | None] = {}
    for (_, link), points in groups.items():
        points.sort()
        first = points[0]
        after[first], load[first] = None, None
        if link.kind is LinkKind.CHECKPOINT:
            load[first] = link.point
        elif link.kind is LinkKind.AFTER:
            assert link.point is not None
            if _available(table, link.point):
                load[first] = link.point
            else:
                after[first] = link.point
        for prev, p in itertools.pairwise(points):
            after[p], load[p] = prev, None
    return after, load


def _stages(
    plan: SearchPlan,
    after: dict[Point, Point | None],
    load: dict[Point, Point | None],
    pending: set[Point],
) -> list[Stage]:
    """The stages of the chained points, numbered so that a parent starts before its children."""

    def start_of(p: Point) -> int:
        origin = after[p] or load[p]
        return 0 if origin is None else origin.step

    order = sorted(after, key=lambda p: (start_of(p), p))
    ids = {p: i for i, p in enumerate(order)}
    stages: list[Stage] = []
    for p in order:
        node = plan.nodes[p.node]
        origin = after[p]
        stages.append(
            Stage(
                ids[p],
                p.node,
                start_of(p),
                p.step,
                node.config,
                parent=None if origin is None else ids[origin],
                source=load[p],
                trials=list(node.requests[p.step].trials) if p in pending else [],
            )
        )
    return stages


def needed_checkpoints(plan: SearchPlan) -> set[Point]:
    """The checkpoints a live trial may still need; the others can be deleted.

    Needed: the checkpoint at the end of every live trial's request that is done (its result,
    from which a promotion continues), and every checkpoint Algorithm 1 would resume from for a
    request not done yet (claims ignored: a stage that waits now will need it later).
    """
    table: dict[Point, Link] = {}
    needed: set[Point] = set()
    for node in plan.nodes:
        for end, request in node.requests.items():
            point = Point(node.id, end)
            if end in node.checkpoints:
                needed.add(point)
            elif request.status is not RequestStatus.DONE:
                find_latest_checkpoint(plan, point, table, claims=False)
    needed.update(
        link.point
        for link in table.values()
        if link.kind is LinkKind.CHECKPOINT and link.point is not None
    )
    return needed


__all__ = [
    "Link",
    "LinkKind",
    "Point",
    "Stage",
    "StageTree",
    "build_stage_tree",
    "find_latest_checkpoint",
    "needed_checkpoints",
]
