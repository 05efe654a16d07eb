"""Algorithm 1 (BuildStageTree) on the paper's search plan example (thesis Fig. 4.2 / 4.3).

The figure, as its text describes it: the root HA trains a linear learning rate with a constant
batch size from a fresh model; HB follows HA's first 100 steps and HC follows HB at step 200
(100 more steps under HB); HE follows HA at step 200 and has a request of 300 steps. HA has a
request of 150 steps and a checkpoint at step 200; HE has a checkpoint at step 250, so HE's
request trains only HE2 = steps 250-300, resuming from that checkpoint, and none of HA.
"""

from __future__ import annotations

import pytest

from hpctune.stagetree.pieces import ConfigPiece, Piece, TrialStage, trial_stages
from hpctune.stagetree.plan import PlanError, RequestStatus, SearchPlan
from hpctune.stagetree.preview import format_stage_tree, plan_summary
from hpctune.stagetree.tree import (
    Link,
    LinkKind,
    Point,
    StageTree,
    build_stage_tree,
    find_latest_checkpoint,
    needed_checkpoints,
)


def cfg(lr: Piece, bs: int = 128) -> ConfigPiece:
    return (("batch_size", Piece("value", (str(bs),))), ("lr", lr))


HA = cfg(Piece("linear", (0.1, 0.0, 1000)))
HB = cfg(Piece("constant", (0.05,)))
HC = cfg(Piece("constant", (0.01,)))
HE = cfg(Piece("exponential", (0.1, 0.99), offset=200))
IDS = {"HA": 0, "HB": 1, "HC": 2, "HE": 3}


def figure_4_2() -> SearchPlan:
    plan = SearchPlan()
    plan.add_trial(1, [TrialStage(0, 150, HA)])  # HA's request 150
    plan.add_trial(2, [TrialStage(0, 100, HA), TrialStage(100, 200, HB), TrialStage(200, 300, HC)])
    plan.add_trial(3, [TrialStage(0, 200, HA), TrialStage(200, 300, HE)])  # HE's request 300
    assert [n.config for n in plan.nodes] == [HA, HB, HC, HE]
    plan.add_checkpoint(IDS["HA"], 200, "ha-200")
    plan.add_checkpoint(IDS["HE"], 250, "he-250")
    return plan


def stages(tree: StageTree) -> set[tuple[str, int, int, tuple[str, int, int] | str | None]]:
    """(node, start, end, parent stage or 'ckpt:<node>@<step>' or None for fresh)."""
    name = {v: k for k, v in IDS.items()}
    out = set()
    for s in tree.stages:
        if s.parent is not None:
            p = tree.stages[s.parent]
            origin: tuple[str, int, int] | str | None = (name[p.node], p.start, p.end)
        elif s.source is not None:
            origin = f"ckpt:{name[s.source.node]}@{s.source.step}"
        else:
            origin = None
        out.add((name[s.node], s.start, s.end, origin))
    return out


def test_figure_4_3_stage_tree() -> None:
    tree = build_stage_tree(figure_4_2())
    assert stages(tree) == {
        ("HA", 0, 100, None),  # fresh model
        ("HA", 100, 150, ("HA", 0, 100)),  # request 150 of HA
        ("HB", 100, 200, ("HA", 0, 100)),
        ("HC", 200, 300, ("HB", 100, 200)),  # request 300 of HC
        ("HE", 250, 300, "ckpt:HE@250"),  # HE2, resumed from HE1's checkpoint
    }
    by_end = {(tree.stages[s].node, tree.stages[s].end): tree.stages[s].trials for s in tree.roots}
    assert by_end == {(0, 100): [], (3, 300): [3]}
    assert sorted(tree.stages[s].end for s in tree.roots) == [100, 300]
    assert tree.answered == []
    assert tree.waiting == []


def test_lookup_table_is_memoised_and_links_requests_to_their_sources() -> None:
    plan = figure_4_2()
    table: dict[Point, Link] = {}
    find_latest_checkpoint(plan, Point(IDS["HC"], 300), table)
    assert table == {
        Point(2, 300): Link(LinkKind.AFTER, Point(1, 200)),
        Point(1, 200): Link(LinkKind.AFTER, Point(0, 100)),
        Point(0, 100): Link(LinkKind.FRESH),
    }
    # a point already in the table is not looked up again (line 10 of the thesis's version)
    table = {Point(0, 100): Link(LinkKind.CHECKPOINT, Point(0, 100))}
    find_latest_checkpoint(plan, Point(IDS["HC"], 300), table)
    assert table[Point(0, 100)] == Link(LinkKind.CHECKPOINT, Point(0, 100))
    find_latest_checkpoint(plan, Point(IDS["HE"], 300), table)
    assert table[Point(3, 300)] == Link(LinkKind.CHECKPOINT, Point(3, 250))


def test_a_checkpoint_at_a_branch_point_makes_its_children_top_level() -> None:
    plan = figure_4_2()
    plan.add_checkpoint(IDS["HA"], 100, "ha-100")
    assert stages(build_stage_tree(plan)) == {
        ("HA", 100, 150, "ckpt:HA@100"),
        ("HB", 100, 200, "ckpt:HA@100"),
        ("HC", 200, 300, ("HB", 100, 200)),
        ("HE", 250, 300, "ckpt:HE@250"),
    }


def test_requests_in_one_node_chain_and_split_it() -> None:
    plan = figure_4_2()
    plan.add_trial(4, [TrialStage(0, 100, HA), TrialStage(100, 300, HB)], end=250)
    tree = build_stage_tree(plan)
    assert ("HB", 200, 250, ("HB", 100, 200)) in stages(tree)
    hb = next(s for s in tree.stages if s.node == IDS["HB"] and s.start == 100)
    assert sorted((tree.stages[c].node, tree.stages[c].end) for c in hb.children) == [
        (1, 250),
        (2, 300),
    ]


def test_claimed_steps_make_requests_wait_and_done_requests_are_skipped() -> None:
    plan = figure_4_2()
    plan.claim(IDS["HB"], 100, 200)  # a worker trains HB's steps 100-200 now
    tree = build_stage_tree(plan)
    assert stages(tree) == {("HA", 0, 150, None), ("HE", 250, 300, "ckpt:HE@250")}
    assert tree.waiting == [Point(IDS["HC"], 300)]
    assert plan.nodes[IDS["HB"]].running
    plan.release(IDS["HB"], 100, 200)
    assert not plan.nodes[IDS["HB"]].running
    plan.set_status(IDS["HC"], 300, RequestStatus.SCHEDULED)
    plan.add_trial(5, [TrialStage(0, 200, HA)])  # answered by HA's checkpoint at 200
    tree = build_stage_tree(plan)
    assert stages(tree) == {("HA", 0, 150, None), ("HE", 250, 300, "ckpt:HE@250")}
    plan.nodes[IDS["HA"]].requests[200].status = RequestStatus.PENDING
    assert build_stage_tree(plan).answered == [5]


def test_only_requests_that_need_claimed_steps_wait() -> None:
    plan = figure_4_2()
    # HE is trained from its checkpoint at 250 to 300 by a worker; a request for HE at 240
    # needs steps 200-240, before the claim: it need not wait (Hippo's node rule would wait)
    plan.claim(IDS["HE"], 250, 300)
    plan.set_status(IDS["HE"], 300, RequestStatus.SCHEDULED)
    plan.add_trial(6, [TrialStage(0, 200, HA), TrialStage(200, 300, HE)], end=240)
    assert ("HE", 200, 240, "ckpt:HA@200") in stages(build_stage_tree(plan))
    # a request for HE at 280 needs steps 250-280, inside the claim: it waits
    plan.add_trial(7, [TrialStage(0, 200, HA), TrialStage(200, 300, HE)], end=280)
    tree = build_stage_tree(plan)
    assert tree.waiting == [Point(IDS["HE"], 280)]
    # a claim on the whole node (Hippo's rule) makes both wait
    plan.release(IDS["HE"], 250, 300)
    plan.claim(IDS["HE"], 200, 2**62)
    assert build_stage_tree(plan).waiting == [Point(IDS["HE"], 240), Point(IDS["HE"], 280)]
    with pytest.raises(PlanError, match="no claim"):
        plan.release(IDS["HE"], 250, 300)
    with pytest.raises(PlanError, match="step range"):
        plan.claim(IDS["HE"], 100, 300)


@pytest.mark.parametrize("with_checkpoint", [False, True])
def test_every_pending_request_has_a_path_from_its_source(with_checkpoint: bool) -> None:
    plan = figure_4_2()
    if with_checkpoint:
        plan.add_checkpoint(IDS["HB"], 150, "hb-150")
    tree = build_stage_tree(plan)
    for s in tree.stages:
        if s.parent is not None:
            parent = tree.stages[s.parent]
            assert parent.end == s.start
            assert parent.id < s.id
        elif s.source is not None:
            assert s.source.step == s.start
            assert s.start in plan.nodes[s.source.node].checkpoints
        else:
            assert s.start == 0
            assert plan.nodes[s.node].parent is None
    served = sorted(t for s in tree.stages for t in s.trials)
    assert served == [1, 2, 3]


def test_a_deep_plan_needs_no_recursion() -> None:
    decay = {"schedule": "step", "base": 0.1, "step_size": 1, "gamma": 0.999}
    plan = SearchPlan()
    plan.add_trial(0, trial_stages({"lr": decay}, 3000))
    plan.add_trial(1, trial_stages({"lr": decay, "momentum": 0.9}, 3000))
    tree = build_stage_tree(plan)
    assert len(tree.stages) == 6000
    assert tree.depth(tree.stages[-1].id) == 2999
    assert plan_summary(plan, tree)["critical_path_steps"] == 3000
    assert format_stage_tree(tree, 0).count("\n") == 5999


def test_hippo_figure_6_7_as_its_text_describes_it() -> None:
    """Hippo §3.2 (the paper's version of the figure; its node names are lost in the text).

    The root trains an exponential learning rate with a constant batch size from a fresh model
    and has checkpoints at steps 10 and 20 and a request of 15 steps; a linear-rate node starts
    from the root's checkpoint at step 10; a node starting at step 20 has a request of 35 steps,
    which "can be resumed from" the root's checkpoint at 20: only steps 20-35 are trained.
    """
    root = cfg(Piece("exponential", (0.1, 0.95)))
    linear = cfg(Piece("linear", (0.1, 0.0, 50), offset=10))
    after = cfg(Piece("constant", (0.01,)))
    plan = SearchPlan()
    plan.add_trial(1, [TrialStage(0, 15, root)])
    plan.add_trial(2, [TrialStage(0, 10, root), TrialStage(10, 40, linear)])
    plan.add_trial(3, [TrialStage(0, 20, root), TrialStage(20, 40, after)], end=35)
    plan.add_checkpoint(0, 10, "a-10")
    plan.add_checkpoint(0, 20, "a-20")
    tree = build_stage_tree(plan)
    got = {(s.node, s.start, s.end, s.source, tuple(s.trials)) for s in tree.stages}
    assert got == {
        (0, 10, 15, Point(0, 10), (1,)),  # the root's request 15 from its checkpoint at 10
        (1, 10, 40, Point(0, 10), (2,)),  # the linear node from the root's checkpoint at 10
        (2, 20, 35, Point(0, 20), (3,)),  # request 35: no training under the root at all
    }
    assert all(s.parent is None for s in tree.stages)


def test_checkpoints_no_live_trial_needs_can_be_collected() -> None:
    plan = figure_4_2()
    # HE's request resumes from HE@250; nothing needs HA@200 (HE has a later checkpoint)
    assert needed_checkpoints(plan) == {Point(IDS["HE"], 250)}
    plan.add_checkpoint(IDS["HA"], 100, "ha-100")  # now HB's chain and HA's request use it
    assert needed_checkpoints(plan) == {Point(IDS["HA"], 100), Point(IDS["HE"], 250)}
    # a claim makes HC's request wait, but its checkpoint stays needed
    plan.claim(IDS["HB"], 100, 200)
    assert Point(IDS["HA"], 100) in needed_checkpoints(plan)
    plan.release(IDS["HB"], 100, 200)
    # HE's request is done: its result is needed (a promotion continues from it), HE@250 not
    plan.add_checkpoint(IDS["HE"], 300, "he-300")
    assert Point(IDS["HE"], 300) in needed_checkpoints(plan)
    assert Point(IDS["HE"], 250) not in needed_checkpoints(plan)
    # the trial is released: its result goes too
    plan.remove_trial(3)
    assert needed_checkpoints(plan) == {Point(IDS["HA"], 100)}
