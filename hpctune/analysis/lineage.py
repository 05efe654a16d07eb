"""Lineage of a study's trials (PBT forks): trees, hyperparameter schedules, replay plans, plots.

Everything here reads a :class:`~hpctune.journal.state.StudyRecord` (the journal's fold); nothing
writes. ``hpctune lineage`` and ``hpctune replay`` are thin wrappers around it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpctune.errors import UsageError
from hpctune.journal.entities import TrialRecord
from hpctune.journal.reader import read_study
from hpctune.journal.state import StudyRecord
from hpctune.policies import make_policy
from hpctune.spec import ComponentSpec, StudySpec, study_context
from hpctune.study.formatting import format_params, format_value
from hpctune.wire.layout import StudyPaths


def _trial(record: StudyRecord, trial_id: int) -> TrialRecord:
    if trial_id not in record.trials:
        raise UsageError(
            f"no trial {trial_id} in the study; trials are 0..{len(record.trials) - 1}"
        )
    return record.trials[trial_id]


def ancestors(record: StudyRecord, trial_ids: Iterable[int]) -> list[int]:
    """The trials in ``trial_ids`` and all their ancestors, topologically sorted (§3.9.2).

    Parents come before children (Kahn's algorithm over the parent edges, ties by id).

    Raises:
        UsageError: A trial id does not exist.
    """
    wanted: set[int] = set()
    stack = list(trial_ids)
    while stack:
        tid = stack.pop()
        if tid in wanted:
            continue
        wanted.add(tid)
        parent = _trial(record, tid).parent_trial
        if parent is not None:
            stack.append(parent)
    children: dict[int, list[int]] = {t: [] for t in wanted}
    indegree = dict.fromkeys(wanted, 0)
    for tid in wanted:
        parent = record.trials[tid].parent_trial
        if parent is not None:
            children[parent].append(tid)
            indegree[tid] += 1
    ready = sorted(t for t, d in indegree.items() if d == 0)
    order: list[int] = []
    while ready:
        tid = ready.pop(0)
        order.append(tid)
        for child in sorted(children[tid]):
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
        ready.sort()
    return order


def end_step(record: StudyRecord, trial: TrialRecord) -> int:
    """The step a trial completes at (its last reported step if it ended earlier)."""
    max_steps = int(record.spec.get("max_steps", trial.step))
    planned = min(trial.end_step or max_steps, max_steps)
    return min(planned, trial.step) if trial.status.is_final else planned


@dataclass(frozen=True)
class Session:
    """One stretch of a lineage: a trial's steps and the hyperparameters it trained them with."""

    trial_id: int
    start_step: int
    end_step: int
    params: dict[str, Any]


def schedule(record: StudyRecord, trial_id: int) -> list[Session]:
    """The hyperparameter schedule that produced ``trial_id``: its chain of sessions from the
    root, each trial's steps from its parent's fork step."""
    chain: list[TrialRecord] = []
    trial: TrialRecord | None = _trial(record, trial_id)
    while trial is not None:
        chain.append(trial)
        trial = record.trials.get(trial.parent_trial) if trial.parent_trial is not None else None
    chain.reverse()
    sessions = []
    for i, t in enumerate(chain):
        end = chain[i + 1].parent_step if i + 1 < len(chain) else end_step(record, t)
        sessions.append(Session(t.trial_id, t.parent_step or 0, int(end or 0), dict(t.params)))
    return sessions


def replay_plan(record: StudyRecord, targets: Sequence[int]) -> list[dict[str, Any]]:
    """The ``replay`` policy's plan for ``targets`` and their ancestors, in topological order.

    An ancestor is replayed up to the step its child forks at; a target to its own end.

    Raises:
        UsageError: A trial does not exist, or one ancestor is forked at several steps within
            the subset (replay those targets one at a time).
    """
    order = ancestors(record, targets)
    index = {tid: i for i, tid in enumerate(order)}
    fork_steps: dict[int, set[int]] = {}
    for tid in order:
        trial = record.trials[tid]
        if trial.parent_trial is not None:
            fork_steps.setdefault(trial.parent_trial, set()).add(int(trial.parent_step or 0))
    plan = []
    for tid in order:
        trial = record.trials[tid]
        steps = fork_steps.get(tid, set())
        if len(steps) > 1:
            raise UsageError(
                f"trial {tid} is forked at steps {sorted(steps)} within the lineage of trials "
                f"{list(targets)}; replay them one at a time"
            )
        end = end_step(record, trial) if tid in targets or not steps else steps.pop()
        plan.append(
            {
                "trial": tid,
                "params": dict(trial.params),
                "seed": trial.seed,
                "end_step": end,
                "parent": None if trial.parent_trial is None else index[trial.parent_trial],
                "parent_step": trial.parent_step,
                "generation": trial.generation,
                "target": tid in targets,
            }
        )
    return plan


def _last_value(trial: TrialRecord) -> float:
    return trial.curve_values[-1] if trial.curve_values else math.nan


def tree_text(record: StudyRecord, trial_ids: Iterable[int] | None = None) -> str:
    """The population tree: each trial under its parent, with generation, steps, its last
    value of the study metric and its hyperparameters (only ``trial_ids``' lineages if given)."""
    shown = set(ancestors(record, trial_ids)) if trial_ids is not None else set(record.trials)
    children: dict[int | None, list[int]] = {}
    for tid in sorted(shown):
        children.setdefault(record.trials[tid].parent_trial, []).append(tid)
    metric = record.metric
    lines: list[str] = []

    def walk(tid: int, depth: int) -> None:
        t = record.trials[tid]
        gen = "-" if t.generation is None else str(t.generation)
        extra = f" initiator {t.initiator}" if t.initiator not in (None, t.parent_trial) else ""
        lines.append(
            f"{'  ' * depth}trial {tid} gen {gen} steps {t.parent_step or 0}-"
            f"{end_step(record, t)} {metric} {format_value(_last_value(t))} "
            f"{format_params(t.params)}{extra}"
        )
        for child in children.get(tid, []):
            walk(child, depth + 1)

    for root in children.get(None, []):
        walk(root, 0)
    return "\n".join(lines)


def plot_lineage(
    record: StudyRecord, out: str | Path, *, highlight: int | None = None, param: str = "lr"
) -> Path:
    """Plot the population tree (metric by step, each trial joined to its parent) and the
    ``param`` schedule of the lineage of ``highlight`` (default: the best last value)."""
    from hpctune.plotting import metric_scale, pyplot

    plt = pyplot()

    sign = 1.0 if record.spec.get("mode", "max") == "max" else -1.0
    finished = [t for t in record.trials.values() if t.curve_values]
    if highlight is None and finished:
        highlight = max(finished, key=lambda t: (sign * _last_value(t), -t.trial_id)).trial_id
    best_chain = set(ancestors(record, [highlight])) if highlight is not None else set()
    show_param = any(param in t.params for t in record.trials.values())
    fig, axes = plt.subplots(
        2 if show_param else 1,
        1,
        figsize=(9, 7 if show_param else 4.5),
        sharex=True,
        height_ratios=[2, 1] if show_param else None,
    )
    ax = axes[0] if show_param else axes
    values = [v for t in record.trials.values() for v in t.curve_values]
    metric_scale(ax, values, str(record.spec.get("mode", "max")))
    ax.set_xlim(0, int(record.spec.get("max_steps", 1) or 1))
    for t in record.trials.values():
        xs, ys = list(t.curve_steps), list(t.curve_values)
        parent = record.trials.get(t.parent_trial) if t.parent_trial is not None else None
        if parent is not None and t.parent_step in parent.curve_steps:
            xs.insert(0, int(t.parent_step or 0))
            ys.insert(0, parent.curve_values[parent.curve_steps.index(int(t.parent_step or 0))])
        on = t.trial_id in best_chain
        ax.plot(
            xs,
            ys,
            color="black" if on else "tab:blue",
            lw=2 if on else 0.8,
            alpha=1.0 if on else 0.4,
        )
    if not show_param:
        ax.set_xlabel(str(record.spec.get("step_unit", "step")))
    ax.set_ylabel(record.metric)
    ax.set_title(f"population (black: lineage of trial {highlight})")
    if show_param and highlight is not None:
        sessions = schedule(record, highlight)
        ax2 = axes[1]
        for s in sessions:
            value = s.params.get(param)
            if isinstance(value, int | float):
                ax2.hlines(value, s.start_step, s.end_step, color="black", lw=2)
        ax2.set_xlabel(str(record.spec.get("step_unit", "step")))
        ax2.set_ylabel(param)
        if all(
            isinstance(s.params.get(param), int | float) and s.params[param] > 0 for s in sessions
        ):
            ax2.set_yscale("log")
        ax2.set_title(f"{param} schedule found (trial {highlight})")
    fig.tight_layout()
    path = Path(out)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def replay_spec(
    study_dir: str | Path, targets: Sequence[int], directory: str | Path | None = None
) -> tuple[StudySpec, list[dict[str, Any]]]:
    """The spec of a replay of ``targets`` (and its plan); the study is not created.

    Raises:
        UsageError: No target, an unknown trial, or an ancestor forked at several steps.
    """
    if not targets:
        raise UsageError("give at least one trial to replay: --trial ID")
    study = read_study(study_dir)
    record = study.record
    plan = replay_plan(record, list(targets))
    spec = StudySpec.from_dict(record.spec)
    name = f"{spec.name}-replay-{'-'.join(str(t) for t in targets)}"
    target = Path(directory) if directory is not None else study.directory.with_name(name)
    policy = ComponentSpec("replay", {"trials": plan})
    make_policy(policy.name, policy.options, study_context(spec)).check_space(spec.space)
    roots = sum(entry["parent"] is None for entry in plan)
    new = dataclasses.replace(
        spec,
        name=name,
        directory=target.resolve(),
        source=StudyPaths.of(study.directory).spec_copy,
        policy=policy,
        num_trials=max(roots, 1),
    )
    return new, plan
