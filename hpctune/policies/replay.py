"""Training replay (Li et al. 2019, §3.9): re-run a recorded lineage's hyperparameter schedule.

The plan (``trials``, written by ``hpctune replay``, :func:`hpctune.analysis.lineage.replay_plan`)
lists the
trials of a lineage in topological order: each with its hyperparameters, seed and end step, and
its parent's index in the plan with the step it forks at. Trial ``i`` of the replay study is
plan entry ``i``: entries are created in order, a root as soon as a worker is free, a child once
its parent has completed with the checkpoint it forks from. Nothing is mutated or chosen, so a
deterministic training function reproduces the recorded curves exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hpctune.policies._base import (
    Action,
    Event,
    EventKind,
    OptionError,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
)
from hpctune.policies.pbt import WAITING
from hpctune.study.space import SearchSpace
from hpctune.study.states import TrialStatus


@dataclass(frozen=True)
class ReplayOptions:
    """Options of :class:`ReplayPolicy`.

    Attributes:
        trials: The plan: a list of tables with ``params``, ``seed``, ``end_step``,
            ``parent`` (index of an earlier entry, or null), ``parent_step``, and optionally
            ``trial`` (the original id), ``generation`` and ``target`` (keep its checkpoint).
    """

    trials: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class PlanEntry:
    """One trial of a replay plan."""

    params: Mapping[str, Any]
    seed: int
    end_step: int
    parent: int | None = None
    parent_step: int | None = None
    trial: int | None = None
    generation: int | None = None
    target: bool = False


def parse_plan(entries: Sequence[Mapping[str, Any]] | None) -> list[PlanEntry]:
    """Check and build the plan; raise :class:`OptionError` (key ``trials``) if malformed."""
    if entries is None:
        return []
    if isinstance(entries, str | Mapping):
        raise OptionError("trials", "must be a list of trial tables (hpctune replay)")
    plan: list[PlanEntry] = []
    for index, entry in enumerate(entries):
        where = f"entry {index}"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("params"), Mapping):
            raise OptionError("trials", f"{where} must be a table with `params`")
        parent = entry.get("parent")
        if parent is not None and not (isinstance(parent, int) and 0 <= parent < index):
            raise OptionError(
                "trials", f"{where}: parent must be the index of an earlier entry, got {parent!r}"
            )
        parent_step = entry.get("parent_step")
        if parent is not None and not isinstance(parent_step, int):
            raise OptionError("trials", f"{where}: a forked entry needs an int parent_step")
        for key in ("seed", "end_step"):
            if not isinstance(entry.get(key), int) or isinstance(entry.get(key), bool):
                raise OptionError("trials", f"{where} needs an int `{key}`")
        plan.append(
            PlanEntry(
                params=dict(entry["params"]),
                seed=int(entry["seed"]),
                end_step=int(entry["end_step"]),
                parent=parent,
                parent_step=parent_step if parent is not None else None,
                trial=entry.get("trial"),
                generation=entry.get("generation"),
                target=bool(entry.get("target", False)),
            )
        )
    return plan


class ReplayPolicy(Policy):
    """Replay a recorded PBT lineage (§3.9): the same trials, hyperparameters and warm starts.

    Use it through ``hpctune replay STUDY --trial ID`` to retrain the best model of a PBT study
    (on new data, or to check reproducibility) without a population.
    """

    name: ClassVar[str] = "replay"
    traits: ClassVar[PolicyTraits] = PolicyTraits(
        boundary_decisions=False, makes_configurations=True
    )
    Options = ReplayOptions

    def __init__(self, context: StudyContext, options: ReplayOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or ReplayOptions()
        self.plan = parse_plan(self.options.trials)

    def check_space(self, space: SearchSpace) -> None:
        """A study needs a plan (``hpctune replay`` writes it)."""
        if not self.plan:
            raise OptionError(
                "trials", "the replay plan is empty; create replays with `hpctune replay`"
            )

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill free slots with waiting trials, then the next plan entries whose parent is done."""
        if event.kind is not EventKind.SLOT_FREE:
            return PolicyDecision()
        actions = [
            Action.resume(t.trial_id) for t in view.with_status(*WAITING)[: event.free_slots]
        ]
        index = len(view.trials)
        while len(actions) < event.free_slots and index < len(self.plan):
            entry = self.plan[index]
            reason = f"replay of trial {entry.trial}"
            if entry.parent is None:
                action = Action.start(
                    params=entry.params,
                    end_step=entry.end_step,
                    generation=entry.generation,
                    seed=entry.seed,
                    reason=reason,
                )
            else:
                parent = view.trials.get(entry.parent)
                ready = (
                    parent is not None
                    and parent.status is TrialStatus.COMPLETED
                    and parent.checkpoint_step == entry.parent_step
                )
                if not ready:
                    break  # entries are created in plan order: wait for the parent
                action = Action.fork(
                    entry.parent,
                    int(entry.parent_step or 0),
                    entry.params,
                    end_step=entry.end_step,
                    generation=entry.generation,
                    seed=entry.seed,
                    reason=reason,
                )
            actions.append(action)
            index += 1
        return PolicyDecision.of(actions, hold_idle_workers=self.holds_idle_workers(view))

    def holds_idle_workers(self, view: StudyView) -> bool:
        """True while plan entries wait for a parent that is still running."""
        return len(view.trials) < len(self.plan)

    def needed_checkpoints(self, view: StudyView) -> set[int] | None:
        """Parents of entries not created yet, and the targets."""
        created = len(view.trials)
        needed = {e.parent for e in self.plan[created:] if e.parent is not None}
        needed |= {i for i, e in enumerate(self.plan) if e.target}
        return needed
