"""A tiny pure driver for PBT policy tests: trials end one by one, values from a formula.

It plays the controller's part as far as PBT needs it: SLOT_FREE with the free slots, START and
FORK create trials (running at once), RESUME restarts waiting ones, one running trial ends per
round (the oldest, or a seeded random one), and checkpoints the policy no longer needs are
deleted as the controller's garbage collection does.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hpctune.policies import Action, ActionKind, Event, Policy, StudyView, TrialView
from hpctune.space import SearchSpace
from hpctune.states import TrialStatus

Score = Callable[[Mapping[str, Any], float, int], float]  # (params, parent value, end) -> value


def lr_score(params: Mapping[str, Any], parent: float, end: int) -> float:
    """Gain per session largest near lr = 0.1 / (1 + end / 10): the best lr decays."""
    target = 0.1 / (1 + end / 10)
    return parent + 1.0 / (1.0 + abs(math.log(float(params["lr"]) / target)))


class Driver:
    """Run ``policy`` on ``slots`` slots over ``space`` until nothing is left to do."""

    def __init__(
        self,
        policy: Policy,
        space: SearchSpace,
        *,
        slots: int,
        max_steps: int,
        num_trials: int,
        seed: int = 0,
        score: Score = lr_score,
        random_order: bool = False,
    ) -> None:
        self.policy = policy
        self.space = space
        self.slots = slots
        self.max_steps = max_steps
        self.num_trials = num_trials
        self.rng = np.random.default_rng(seed)
        self.score = score
        self.random_order = random_order
        self.trials: dict[int, TrialView] = {}
        self.generated = 0
        self.actions: list[Action] = []
        self.deleted: set[int] = set()  # trials whose last checkpoint was deleted
        self.forks_from_deleted: list[Action] = []
        self.initiator_generation_sizes: list[tuple[int, int]] = []  # (g, size) at reproductions
        self.rounds = 0

    def view(self, free: int) -> StudyView:
        return StudyView(
            metric="score",
            mode="max",
            max_steps=self.max_steps,
            boundary=1,
            now=float(self.rounds),
            trials=dict(self.trials),
            free_slots=free,
            total_slots=self.slots,
            trials_remaining=max(self.num_trials - self.generated, 0),
            space=self.space,
        )

    def running(self) -> list[TrialView]:
        return [t for _, t in sorted(self.trials.items()) if t.status is TrialStatus.RUNNING]

    def _create(self, action: Action) -> None:
        tid = len(self.trials)
        if action.initiator is not None:
            g = self.trials[action.initiator].generation or 0
            self.initiator_generation_sizes.append(
                (g, sum((t.generation or 0) == g for t in self.trials.values()))
            )
        if action.kind is ActionKind.FORK:
            parent = self.trials[action.trial_id]  # type: ignore[index]
            if action.trial_id in self.deleted or parent.checkpoint_step != action.step:
                self.forks_from_deleted.append(action)
            params = dict(action.params or {})
            start = int(action.step or 0)
            parent_value = parent.last_value
        else:
            if action.params is None:
                params = self.space.sample(np.random.default_rng([7, self.generated]))
                self.generated += 1
            else:
                params = dict(action.params)
            start, parent_value = 0, 0.0
        self.trials[tid] = TrialView(
            trial_id=tid,
            status=TrialStatus.RUNNING,
            params=params,
            step=start,
            parent_trial=action.trial_id if action.kind is ActionKind.FORK else None,
            parent_step=action.step if action.kind is ActionKind.FORK else None,
            end_step=action.end_step,
            generation=action.generation,
            initiator=action.initiator,
            info={"parent_value": parent_value},
        )

    def _end(self, trial: TrialView) -> None:
        end = min(trial.end_step or self.max_steps, self.max_steps)
        value = self.score(trial.params, float(trial.info["parent_value"]), end)
        self.trials[trial.trial_id] = dataclasses.replace(
            trial,
            status=TrialStatus.COMPLETED,
            step=end,
            steps=np.array([end]),
            values=np.array([value]),
            times=np.array([float(self.rounds)]),
            checkpoint_step=end,
            last_metrics={"score": value},
        )

    def _collect(self) -> None:
        needed = self.policy.needed_checkpoints(self.view(0))
        if needed is None:
            return
        pinned = {t.parent_trial for t in self.trials.values() if not t.status.is_final}
        for tid, trial in self.trials.items():
            ended = trial.status.is_final and trial.checkpoint_step is not None
            if ended and tid not in needed and tid not in pinned:
                self.trials[tid] = dataclasses.replace(trial, checkpoint_step=None)
                self.deleted.add(tid)

    def run(self, max_rounds: int = 10_000) -> Driver:
        """Run to the end; return self."""
        while self.rounds < max_rounds:
            self.rounds += 1
            free = self.slots - len(self.running())
            if free > 0:
                decision_rng = np.random.default_rng([11, self.rounds])
                for action in self.policy.decide(
                    self.view(free), Event.slot_free(free), decision_rng
                ):
                    self.actions.append(action)
                    if action.kind is ActionKind.RESUME:
                        trial = self.trials[action.trial_id]  # type: ignore[index]
                        self.trials[trial.trial_id] = dataclasses.replace(
                            trial, status=TrialStatus.RUNNING
                        )
                    elif action.kind in (ActionKind.START, ActionKind.FORK):
                        self._create(action)
            running = self.running()
            if not running:
                break
            pick = int(self.rng.integers(len(running))) if self.random_order else 0
            self._end(running[pick])
            self._collect()
        return self
