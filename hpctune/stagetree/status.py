"""A study's whole stage tree with each stage's status (``hpctune stagetree``).

The tree is the one every trial of the study would need from scratch (as ``hpctune plan``
prints it); each stage's status comes from the journal state:

- ``done``: its steps were trained (a trial through its node has reported past its end);
- ``running``: a worker trains it now (an active segment's trial is at a step inside it; only
  while the study runs: the segments of a stopped or killed study train nothing);
- ``pending``: not trained yet (waiting for a worker or for the stage before it);
- ``released``: every trial through it ended (terminated or failed) before it was trained.
"""

from __future__ import annotations

from collections import Counter

from hpctune.journal.state import StudyRecord
from hpctune.stagetree.from_study import path_ranges, plan_from_study
from hpctune.stagetree.plan import SearchPlan
from hpctune.stagetree.tree import StageTree, build_stage_tree
from hpctune.study.states import StudyState

STATUSES = ("done", "running", "pending", "released")


def study_stage_tree(record: StudyRecord, max_steps: int) -> tuple[StageTree, list[str]]:
    """Return the study's whole stage tree and the status of each of its stages."""
    live = plan_from_study(record, max_steps)
    fresh = SearchPlan.from_dict({**live.to_dict(), "nodes": _bare_nodes(live)})
    tree = build_stage_tree(fresh)
    reached: dict[int, int] = {}
    for trial_id in live.trials:
        step = record.trials[trial_id].step
        for node_id, _, end in path_ranges(live, trial_id):
            reached[node_id] = max(reached.get(node_id, 0), min(step, end))
    training: list[tuple[int, int]] = []  # (node, step) an active segment is at now
    if record.state in (StudyState.RUNNING, StudyState.STOPPING):
        for seg in record.active_segments():
            if seg.trial_id not in live.trials:
                continue
            step = record.trials[seg.trial_id].step
            training.extend(
                (node_id, step)
                for node_id, start, end in path_ranges(live, seg.trial_id)
                if start <= step < end
            )
    statuses = []
    for stage in tree.stages:
        through = [record.trials[t] for t in live.trials_through(stage.node)]
        if reached.get(stage.node, 0) >= stage.end:
            status = "done"
        elif any(n == stage.node and stage.start <= x < stage.end for n, x in training):
            status = "running"
        elif through and all(t.status.is_final for t in through):
            status = "released"
        else:
            status = "pending"
        statuses.append(status)
    return tree, statuses


def _bare_nodes(plan: SearchPlan) -> list[dict[str, object]]:
    """The plan's nodes without checkpoints, claims and done marks (the tree from scratch)."""
    nodes = plan.to_dict()["nodes"]
    for node in nodes:
        node["checkpoints"], node["claims"] = [], []
        for request in node["requests"]:
            request["status"] = "pending"
    return nodes


def status_counts(statuses: list[str]) -> dict[str, int]:
    """How many stages are in each status (every status listed)."""
    counts = Counter(statuses)
    return {s: counts.get(s, 0) for s in STATUSES}


def stage_tree_json(tree: StageTree, statuses: list[str]) -> dict[str, object]:
    """``hpctune stagetree --json`` (docs/cli.md): the counts by status and every stage with
    its steps, parent, trials and status."""
    stages = [
        {
            "id": s.id,
            "node": s.node,
            "start": s.start,
            "end": s.end,
            "parent": s.parent,
            "trials": list(s.trials),
            "status": statuses[s.id],
        }
        for s in tree.stages
    ]
    return {"version": 1, "counts": status_counts(statuses), "stages": stages}


__all__ = ["STATUSES", "stage_tree_json", "status_counts", "study_stage_tree"]
