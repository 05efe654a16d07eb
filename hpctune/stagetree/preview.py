"""What a study's stage tree looks like before anything runs (``hpctune plan``).

:func:`plan_configs` merges configurations into a search plan; :func:`plan_summary` gives the
figures (trials, total and unique steps, merge rate, stages, the critical-path batches) as a
JSON-able dict and :func:`format_stage_tree` the tree as indented text; :func:`preview_plan`
plans the trials of one or more studies together (:class:`PlanPreview`: ``plan``'s JSON and
text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpctune.stagetree.makespan import simulate, trial_makespan
from hpctune.stagetree.pieces import describe_config, trial_stages
from hpctune.stagetree.plan import SearchPlan
from hpctune.stagetree.schedulers import (
    Scheduler,
    critical_path_batches,
    stage_seconds,
    unit_cost,
)
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


@dataclass(frozen=True)
class PlannedStudy:
    """A study's trials, as :func:`preview_plan` takes them.

    Attributes:
        name: The study's name.
        generator: The name of the generator that proposed :attr:`configs`.
        max_steps: The steps of every trial.
        step_unit: What a step is (``"epoch"``).
        configs: The trials' configurations, in trial order.
    """

    name: str
    generator: str
    max_steps: int
    step_unit: str
    configs: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class PlanPreview:
    """The trials of one or more studies merged into one search plan and its stage tree.

    Attributes:
        studies: Per study (in order): ``name``, ``generator``, ``max_steps``,
            ``step_unit``, ``first_trial``, ``trials``, and ``total_steps``,
            ``unique_steps``, ``merge_rate`` of the study alone.
        tree: The stage tree of all their trials.
        summary: :func:`plan_summary` of the whole plan (with several studies ``merge_rate``
            is the k-wise merge rate).
        makespan: ``slots`` and the makespan estimates at equal time per step,
            ``trial_based_steps`` and ``critical_path_steps``.
    """

    studies: list[dict[str, Any]]
    tree: StageTree
    summary: dict[str, Any]
    makespan: dict[str, Any]

    @property
    def title(self) -> str:
        """A title for the plot: the studies, the stages and the merge rate."""
        names = ", ".join(st["name"] for st in self.studies)
        rate = self.summary["merge_rate"]
        return f"{names}: {len(self.tree.stages)} stages, merge rate {rate:.2f}"

    def to_dict(self) -> dict[str, Any]:
        """``hpctune plan --json`` (docs/cli.md)."""
        keys = ("name", "generator", "max_steps", "step_unit")
        first = {k: self.studies[0][k] for k in keys}
        return {
            "version": 1,
            "study": first,
            "studies": self.studies,
            **self.summary,
            "makespan": self.makespan,
        }

    def lines(self, max_lines: int = 60) -> list[str]:
        """``hpctune plan`` as text: each study, the plan's figures and the stage tree (at
        most ``max_lines`` stage lines; ``0``: all)."""
        lines = [_study_line(st, several=len(self.studies) > 1) for st in self.studies]
        summary, tree, unit = self.summary, self.tree, self.studies[0]["step_unit"]
        k = len(self.studies)
        rate = f"{k}-wise merge rate m_{k}" if k > 1 else "merge rate p"
        lines.append(
            f"training {unit}s: total {summary['total_steps']} (trial-based), unique "
            f"{summary['unique_steps']} (stage-based), {rate} = {summary['merge_rate']:.2f}"
        )
        trees = len(tree.roots)
        lines.append(
            f"search plan: {summary['nodes']} nodes; stage tree: {len(tree.stages)} stages in "
            f"{trees} tree{'s' if trees != 1 else ''}, longest path "
            f"{summary['critical_path_steps']} {unit}s"
        )
        slots = self.makespan["slots"]
        lines.append(
            f"on {slots} slot{'s' if slots != 1 else ''} at equal time per {unit}: trial-based "
            f"{self.makespan['trial_based_steps']:g} {unit}s, stage-based (critical path) "
            f"{self.makespan['critical_path_steps']:g} {unit}s"
        )
        lines.append("stage tree ([stage] steps (trials served below): pieces that change):")
        return [*lines, format_stage_tree(tree, max_lines)]


def _study_line(st: Mapping[str, Any], *, several: bool) -> str:
    line = (
        f"study {st['name']}: {st['trials']} trials ({st['generator']} generator), "
        f"max_steps {st['max_steps']} ({st['step_unit']}s)"
    )
    if several:
        last = st["first_trial"] + st["trials"] - 1
        line += (
            f"; trials {st['first_trial']}-{last} below\n  alone: total {st['total_steps']}, "
            f"unique {st['unique_steps']}, merge rate p = {st['merge_rate']:.2f}"
        )
    return line


def preview_plan(studies: Sequence[PlannedStudy], slots: int) -> PlanPreview:
    """Merge the studies' trials into one search plan, numbered study after study, and
    estimate the makespan on ``slots`` slots at equal time per step.

    Raises:
        ValueError: A configuration has an invalid schedule (the message names the study and
            the trial).
    """
    plan = SearchPlan()
    figures = []
    for study in studies:
        first = len(plan.trials)
        try:
            alone = plan_configs(study.configs, study.max_steps)
            plan_configs(study.configs, study.max_steps, plan, first_id=first)
        except ValueError as exc:
            raise ValueError(f"{study.name}: {exc}") from None
        figures.append(
            {
                "name": study.name,
                "generator": study.generator,
                "max_steps": study.max_steps,
                "step_unit": study.step_unit,
                "first_trial": first,
                "trials": len(study.configs),
                "total_steps": alone.total_steps(),
                "unique_steps": alone.unique_steps(),
                "merge_rate": alone.merge_rate(),
            }
        )
    tree = build_stage_tree(plan)
    steps = [float(st.max_steps) for st in studies for _ in st.configs]
    makespan = {
        "slots": slots,
        "trial_based_steps": trial_makespan(steps, slots),
        "critical_path_steps": simulate(tree, Scheduler.CRITICAL_PATH, slots).makespan,
    }
    return PlanPreview(figures, tree, plan_summary(plan, tree), makespan)


__all__ = [
    "PlanPreview",
    "PlannedStudy",
    "format_stage_tree",
    "plan_configs",
    "plan_summary",
    "preview_plan",
]
