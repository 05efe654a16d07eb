"""Critical path, BFS and most-children-first on small stage trees with known answers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.stagetree.makespan import simulate, trial_makespan
from hpctune.stagetree.pieces import ConfigPiece, Piece
from hpctune.stagetree.schedulers import (
    Scheduler,
    bfs_order,
    critical_path_batches,
    pick_bfs,
    pick_critical_path,
    pick_most_children,
    unit_cost,
)
from hpctune.stagetree.tree import Stage, StageTree


def tree_of(spec: list[tuple[str, int, str | None]]) -> tuple[StageTree, dict[str, int]]:
    """A stage tree from (name, steps, parent name), parents listed first."""
    ids: dict[str, int] = {}
    stages: list[Stage] = []
    for name, steps, parent in spec:
        pid = None if parent is None else ids[parent]
        start = 0 if pid is None else stages[pid].end
        stage = Stage(len(stages), 0, start, start + steps, (), parent=pid)
        if pid is not None:
            stages[pid].children.append(stage.id)
        ids[name] = stage.id
        stages.append(stage)
    return StageTree(stages, [s.id for s in stages if s.parent is None], [], []), ids


SLOW: ConfigPiece = (("batch_size", Piece("value", ("8",))),)

# R(1) -> A(1) -> A1(10); R -> B(1), C(1), D(1): the long chain hides behind a short stage.
DEEP = [
    ("R", 1, None),
    ("B", 1, "R"),
    ("A", 1, "R"),
    ("C", 1, "R"),
    ("D", 1, "R"),
    ("A1", 10, "A"),
]


def test_critical_path_takes_the_longest_path_to_a_leaf() -> None:
    tree, ids = tree_of(DEEP)
    assert pick_critical_path(tree, tree.roots, unit_cost) == [ids["R"], ids["A"], ids["A1"]]
    ready = [ids["B"], ids["A"], ids["C"]]
    assert pick_critical_path(tree, ready, unit_cost) == [ids["A"], ids["A1"]]
    assert pick_critical_path(tree, ready, unit_cost, taken={ids["A"]}) == [ids["B"]]
    assert pick_critical_path(tree, [], unit_cost) == []

    # the cost estimate decides: B's configuration is 20x slower per step than the others
    def cost(config: ConfigPiece) -> float:
        return 20.0 if config == SLOW else 1.0

    tree.stages[ids["B"]].config = SLOW
    assert pick_critical_path(tree, ready, cost) == [ids["B"]]


def test_critical_path_batches_cover_every_stage_once_longest_first() -> None:
    tree, ids = tree_of(DEEP)
    batches = critical_path_batches(tree)
    assert batches[0] == [ids["R"], ids["A"], ids["A1"]]
    assert sorted(s for b in batches for s in b) == list(range(len(DEEP)))
    assert batches[1:] == [[ids["B"]], [ids["C"]], [ids["D"]]]


def test_bfs_and_most_children_pick_one_stage() -> None:
    tree, ids = tree_of(DEEP)
    assert bfs_order(tree) == [ids[n] for n in ("R", "B", "A", "C", "D", "A1")]
    ready = [ids["C"], ids["A"], ids["B"]]
    assert pick_bfs(tree, ready) == [ids["B"]]
    assert pick_most_children(tree, ready) == [ids["A"]]  # A has a child, B and C none
    assert pick_most_children(tree, [ids["C"], ids["D"]]) == [ids["C"]]
    assert pick_bfs(tree, ready, taken=set(ready)) == []


def test_makespans_on_two_workers_match_the_hand_schedule() -> None:
    tree, _ = tree_of(DEEP)
    # critical path: worker 1 runs R A A1 (0-12); worker 2 runs B, C, D after R (1-4)
    assert simulate(tree, Scheduler.CRITICAL_PATH, 2).makespan == 12
    # BFS: R; then B, A; then C, D (before A1, one level deeper); then A1 from 3 to 13
    assert simulate(tree, Scheduler.BFS, 2).makespan == 13
    # most children: R; A (one child) and B; then A1 has no more children than C, D: 13
    assert simulate(tree, Scheduler.MOST_CHILDREN, 2).makespan == 13
    one = simulate(tree, Scheduler.BFS, 1)
    assert one.makespan == one.train_seconds == 15

    # most-children-first prefers X (two short children) to Y (one long child): 13 vs 12
    branchy, _ = tree_of(
        [
            ("R", 1, None),
            ("X", 1, "R"),
            ("Y", 1, "R"),
            ("Z", 1, "R"),
            ("X1", 1, "X"),
            ("X2", 1, "X"),
            ("Y1", 10, "Y"),
        ]
    )
    assert simulate(branchy, Scheduler.MOST_CHILDREN, 2).makespan == 13
    assert simulate(branchy, Scheduler.BFS, 2).makespan == 13
    assert simulate(branchy, Scheduler.CRITICAL_PATH, 2).makespan == 12


def test_batching_saves_transitions() -> None:
    tree, _ = tree_of(DEEP)
    batched = simulate(tree, Scheduler.CRITICAL_PATH, 2, transition_seconds=2.0)
    unbatched = simulate(tree, Scheduler.CRITICAL_PATH, 2, transition_seconds=2.0, batch=False)
    bfs = simulate(tree, Scheduler.BFS, 2, transition_seconds=2.0)
    assert batched.loads == batched.assignments == 4  # R-A-A1, B, C, D
    assert unbatched.loads == bfs.loads == 6
    assert batched.makespan == 2 + 12  # one load, then R A A1
    assert batched.busy_seconds == batched.train_seconds + 2.0 * batched.loads
    assert unbatched.makespan > batched.makespan


def test_trial_makespan() -> None:
    assert trial_makespan([3, 3, 3], 2) == 6
    assert trial_makespan([5, 1, 1, 1], 2) == 5
    with pytest.raises(ValueError, match="workers"):
        trial_makespan([1.0], 0)


@st.composite
def random_trees(draw: st.DrawFn) -> list[tuple[str, int, str | None]]:
    n = draw(st.integers(min_value=1, max_value=25))
    spec: list[tuple[str, int, str | None]] = []
    for i in range(n):
        parent = None if i == 0 else draw(st.sampled_from([None, *[s[0] for s in spec]]))
        spec.append((f"s{i}", draw(st.integers(min_value=1, max_value=9)), parent))
    return spec


@settings(max_examples=200, deadline=None)
@given(
    random_trees(),
    st.integers(min_value=1, max_value=5),
    st.sampled_from(list(Scheduler)),
    st.sampled_from([0.0, 1.5]),
)
def test_every_schedule_runs_each_stage_once_within_the_bounds(
    spec: list[tuple[str, int, str | None]], workers: int, scheduler: Scheduler, load: float
) -> None:
    tree, _ = tree_of(spec)
    sim = simulate(tree, scheduler, workers, transition_seconds=load)
    work = sum(s.steps for s in tree.stages)
    longest = max(s.end for s in tree.stages)
    assert sim.train_seconds == work
    assert sim.busy_seconds == pytest.approx(work + load * sim.loads)
    assert sim.makespan >= max(longest, (work + load * sim.loads) / workers) - 1e-9
    assert sim.makespan <= work + load * len(tree.stages)
    if scheduler is Scheduler.CRITICAL_PATH and workers == 1:
        # one worker never waits, so it runs the static batches, one load each
        assert sim.loads == len(critical_path_batches(tree))
