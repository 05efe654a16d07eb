"""What a study's stage tree looks like before anything runs (``hpctune plan``).

:func:`plan_configs` merges configurations into a search plan; :func:`plan_summary` gives the
figures (trials, total and unique steps, merge rate, stages, the critical-path batches) as a
JSON-able dict and :func:`format_stage_tree` the tree as indented text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hpctune.stagetree.pieces import describe_config, trial_stages
from hpctune.stagetree.plan import SearchPlan
from hpctune.stagetree.schedulers import critical_path_batches, stage_seconds, unit_cost
from hpctune.stagetree.tree import StageTree, build_stage_tree


def plan_configs(
    configs: Sequence[Mapping[str, Any]],
    max_steps: int,
    plan: SearchPlan | None = None,
    first_id: int = 0,
) -> SearchPlan:
    """Merge trials ``first_id, first_id + 1, ...`` (each trained to ``max_steps``) into a plan.

    Args:
        configs: The trials' configurations.
        max_steps: The steps of every trial.
        plan: The plan to merge into (another study's trials, for the k-wise merge rate);
            default a new one.
        first_id: The first trial's id.

    Raises:
        ValueError: A configuration has an invalid schedule (the message names the trial).
    """
    plan = SearchPlan() if plan is None else plan
    for trial_id, config in enumerate(configs, start=first_id):
        try:
            stages = trial_stages(config, max_steps)
        except ValueError as exc:
            raise ValueError(f"trial {trial_id}: {exc}") from None
        plan.add_trial(trial_id, stages)
    return plan


def plan_summary(plan: SearchPlan, tree: StageTree | None = None) -> dict[str, Any]:
    """Return the plan's figures and its stage tree as a JSON-able dict.

    Keys: ``trials``, ``total_steps``, ``unique_steps``, ``merge_rate``, ``nodes``,
    ``stages`` (id, node, start, end, parent, children, trials, config), ``roots``,
    ``critical_path_steps`` (the longest root-to-leaf path, in steps) and ``batches`` (the
    critical-path scheduler's paths, in order).
    """
    tree = tree if tree is not None else build_stage_tree(plan)
    batches = critical_path_batches(tree)
    longest = sum(stage_seconds(tree.stages[s], unit_cost) for s in batches[0]) if batches else 0
    return {
        "trials": len(plan.trials),
        "total_steps": plan.total_steps(),
        "unique_steps": plan.unique_steps(),
        "merge_rate": plan.merge_rate(),
        "nodes": len(plan.nodes),
        "critical_path_steps": int(longest),
        "roots": list(tree.roots),
        "stages": [
            {
                "id": s.id,
                "node": s.node,
                "start": s.start,
                "end": s.end,
                "parent": s.parent,
                "children": list(s.children),
                "trials": list(s.trials),
                "config": {name: piece.to_dict() for name, piece in s.config},
            }
            for s in tree.stages
        ],
        "batches": batches,
    }


def _subtree_trials(tree: StageTree) -> list[int]:
    """Trials served at or below each stage (children have larger ids than parents)."""
    counts = [len(s.trials) for s in tree.stages]
    for stage in reversed(tree.stages):
        if stage.parent is not None:
            counts[stage.parent] += counts[stage.id]
    return counts


def format_stage_tree(
    tree: StageTree, max_lines: int = 60, labels: list[str] | None = None
) -> str:
    """Return the tree as indented lines: steps, trials served, the pieces that change.

    A root shows every parameter; a child only the parameters whose piece differs from its
    parent's. ``labels`` (e.g. statuses) go after each stage's steps. At most ``max_lines``
    stage lines are shown (``0``: all), then a count of the rest.
    """
    lines: list[str] = []
    served = _subtree_trials(tree)
    stack = [(sid, 0) for sid in reversed(tree.roots)]
    shown = 0
    while stack:
        sid, depth = stack.pop()
        stage = tree.stages[sid]
        if max_lines and shown >= max_lines:
            break
        parent = None if stage.parent is None else tree.stages[stage.parent]
        if parent is None:
            changed = None
        else:
            before = dict(parent.config)
            changed = {n for n, p in stage.config if before.get(n) != p}
        what = describe_config(stage.config, changed) if changed != set() else "(continued)"
        n = served[sid]
        label = f" {labels[sid]}" if labels is not None else ""
        lines.append(
            f"{'  ' * depth}[{stage.id}] steps {stage.start}-{stage.end}{label} "
            f"({n} trial{'s' if n != 1 else ''}): {what}"
        )
        shown += 1
        stack.extend((c, depth + 1) for c in reversed(stage.children))
    rest = len(tree.stages) - shown
    if rest > 0:
        lines.append(f"... {rest} more stages (--max-lines 0 shows all)")
    return "\n".join(lines)


__all__ = ["format_stage_tree", "plan_configs", "plan_summary"]
