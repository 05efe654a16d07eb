"""Asynchronous successive halving (ASHA), stop-based as Ray Tune's ``AsyncHyperBandScheduler``.

Li et al., "A System for Massively Parallel Hyperparameter Tuning" (MLSys 2020), Algorithm 2,
in the form Ray implements (``python/ray/tune/schedulers/async_hyperband.py``, ``_Bracket``):
trials start on every free slot and train towards ``max_t``; the first time a trial reaches a
rung (``grace_period * reduction_factor**k`` steps) its value is compared with the values
recorded at that rung so far and the trial is stopped if it is below their
``(1 - 1/reduction_factor)`` percentile; either way its value is recorded there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sortedcontainers import SortedList

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
from hpctune.policies._common import geometric_rungs, require
from hpctune.policies._order import percentile_of_sorted
from hpctune.study.states import Decision


@dataclass(frozen=True)
class AshaOptions:
    """Options of :class:`AshaPolicy`; defaults of Ray's ``ASHAScheduler`` (REFERENCE.md §2.1).

    Attributes:
        grace_period: Steps before the first rung (Ray ``grace_period=1``).
        reduction_factor: η: rungs are η times apart and keep the top 1/η (Ray: 4).
        max_t: Steps a trial may train; ``None``: the study's ``max_steps`` (Ray: 100).
        brackets: Brackets; a trial joins one by a softmax over their rung counts (Ray: 1).
    """

    grace_period: int = 1
    reduction_factor: int = 4
    max_t: int | None = None
    brackets: int = 1


class AshaBracket:
    """One ASHA bracket: rungs and the values recorded at each (Ray's ``_Bracket``).

    Args:
        grace_period: The first rung of bracket 0.
        reduction_factor: η.
        max_t: Rungs lie below it.
        s: The bracket's index: its first rung is ``grace_period * η**s``.
    """

    def __init__(self, grace_period: int, reduction_factor: int, max_t: int, s: int = 0) -> None:
        self.reduction_factor = reduction_factor
        milestones = geometric_rungs(grace_period, reduction_factor, max_t)[s:]
        # highest first, as Ray keeps them, so that a result finds its rung by scanning down
        self.rungs: list[tuple[int, dict[int, float]]] = [(m, {}) for m in reversed(milestones)]
        self.stopped: dict[int, tuple[int, float]] = {}  # trial -> (milestone, cutoff)
        # what :meth:`take_changes` has not yet given: values recorded per rung, trials stopped
        self._new_values: list[list[list[Any]]] = [[] for _ in self.rungs]
        self._new_stopped: list[list[Any]] = []
        # the values recorded at each rung, sorted (NaN left out), beside ``rungs``: the cutoff
        # costs O(log n) instead of a percentile over every value at every decision
        self._sorted: dict[int, SortedList] = {}

    @property
    def quantile(self) -> float:
        """The cutoff's percentile, ``(1 - 1/η) * 100``."""
        return (1 - 1 / self.reduction_factor) * 100

    def cutoff(self, recorded: Mapping[int, float]) -> float | None:
        """The ``(1 - 1/η)`` percentile of ``recorded`` values (``np.nanpercentile``'s),
        ``None`` if there are none."""
        if not recorded:
            return None
        values = sorted(v for v in map(float, recorded.values()) if not math.isnan(v))
        return percentile_of_sorted(values, self.quantile)

    def _sorted_values(self, milestone: int, recorded: Mapping[int, float]) -> SortedList:
        """The values recorded at ``milestone`` without NaN, sorted; rebuilt when their number
        differs from ``recorded``'s (a restored state, or values recorded from outside)."""
        values = self._sorted.get(milestone)
        if values is None or len(values) != len(recorded):
            values = SortedList(v for v in map(float, recorded.values()) if not math.isnan(v))
            self._sorted[milestone] = values
        return values

    def _cutoff_at(self, milestone: int, recorded: Mapping[int, float]) -> float | None:
        """:meth:`cutoff` of the values at ``milestone``, from the sorted values: O(log n)."""
        if not recorded:
            return None
        return percentile_of_sorted(self._sorted_values(milestone, recorded), self.quantile)

    def on_result(self, trial_id: int, step: int, value: float | None) -> Decision:
        """Decide for ``trial_id`` at ``step`` with ``value`` (larger is better).

        Scanning the rungs from the highest, the first one at or below ``step`` decides: if the
        trial is recorded there already, it continues (it was judged at that rung before);
        otherwise it is stopped when ``value`` is below the rung's cutoff, and ``value`` is
        recorded there (unless ``None`` or NaN). A stopped trial stays stopped.
        """
        if trial_id in self.stopped:
            return Decision.STOP
        for index, (milestone, recorded) in enumerate(self.rungs):
            if step < milestone:
                continue
            if trial_id in recorded:
                return Decision.CONTINUE
            cutoff = self._cutoff_at(milestone, recorded)
            decision = Decision.CONTINUE
            if cutoff is not None and value is not None and value < cutoff:
                decision = Decision.STOP
                self.stopped[trial_id] = (milestone, cutoff)
                self._new_stopped.append([trial_id, milestone, cutoff])
            if value is not None and not math.isnan(value):
                values = self._sorted_values(milestone, recorded)
                recorded[trial_id] = value
                values.add(float(value))
                self._new_values[index].append([trial_id, value])
            return decision
        return Decision.CONTINUE

    def state_dict(self) -> dict[str, Any]:
        """The recorded values (lists, JSON-able) and the stopped trials."""
        return {
            "rungs": [[m, [[t, v] for t, v in rec.items()]] for m, rec in self.rungs],
            "stopped": [[t, m, c] for t, (m, c) in self.stopped.items()],
        }

    def take_changes(self) -> dict[str, Any]:
        """The patch of :meth:`state_dict` since the last call (values and stops are only
        added, in the order the state lists them); empty if none."""
        rungs = {
            str(i): {"sub": {"1": {"ext": new}}} for i, new in enumerate(self._new_values) if new
        }
        patch: dict[str, Any] = {}
        if rungs:
            patch["rungs"] = {"sub": rungs}
        if self._new_stopped:
            patch["stopped"] = {"ext": self._new_stopped}
        self._new_values = [[] for _ in self.rungs]
        self._new_stopped = []
        return {"sub": patch} if patch else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (the milestones must match)."""
        milestones = [m for m, _ in self.rungs]
        stored = [int(m) for m, _ in state["rungs"]]
        if stored != milestones:
            raise ValueError(f"ASHA bracket rungs {stored} in the state, but {milestones} now")
        self.rungs = [(int(m), {int(t): float(v) for t, v in rec}) for m, rec in state["rungs"]]
        self._sorted = {}
        self.stopped = {int(t): (int(m), float(c)) for t, m, c in state["stopped"]}
        self._new_values = [[] for _ in self.rungs]
        self._new_stopped = []


class AshaPolicy(Policy):
    """Asynchronous successive halving (Li et al. 2020; Ray's ``AsyncHyperBandScheduler``).

    SLOT_FREE: fill every free slot (queued, then suspended, then new trials). BOUNDARY: the
    bracket's rule (:meth:`AshaBracket.on_result`) continues or terminates the trial; at
    ``max_t`` below the study's ``max_steps`` the trial is terminated (Ray's
    ``stop_last_trials``). Use it for large random searches where most configurations can be
    judged after a few steps and slots must never wait for stragglers.
    """

    name: ClassVar[str] = "asha"
    traits: ClassVar[PolicyTraits] = PolicyTraits(
        tracks_state_changes=True, runs_on_stage_trees=True, rungs_known=True
    )
    Options = AshaOptions

    def __init__(self, context: StudyContext, options: AshaOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or AshaOptions()
        o = self.options
        require("grace_period", o.grace_period, 1)
        require("reduction_factor", o.reduction_factor, 2)
        require("brackets", o.brackets, 1)
        if o.max_t is not None and o.max_t < o.grace_period:
            raise OptionError(
                "max_t", f"must be >= grace_period ({o.grace_period}), but got {o.max_t}"
            )
        self._max_t = min(o.max_t or context.max_steps, context.max_steps)
        self.brackets = self._make_brackets(self._max_t)
        self.assigned: dict[int, int] = {}
        self._new_assigned: list[list[int]] = []  # bracket assignments not yet in a patch
        self._whole_next = True  # no patch given yet: the first gives the whole state

    def _make_brackets(self, max_t: int) -> list[AshaBracket]:
        """The brackets for ``max_t`` (the study's ``max_steps`` unless the option is lower)."""
        o = self.options
        return [
            AshaBracket(o.grace_period, o.reduction_factor, max_t, s) for s in range(o.brackets)
        ]

    def _bracket_of(self, trial_id: int, rng: np.random.Generator) -> AshaBracket:
        if trial_id not in self.assigned:
            if len(self.brackets) == 1:
                self.assigned[trial_id] = 0
            else:  # Ray: softmax over the brackets' rung counts
                sizes = np.array([len(b.rungs) for b in self.brackets], dtype=float)
                probs = np.exp(sizes - sizes.max())
                self.assigned[trial_id] = int(rng.choice(len(sizes), p=probs / probs.sum()))
            self._new_assigned.append([trial_id, self.assigned[trial_id]])
        return self.brackets[self.assigned[trial_id]]

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill slots on SLOT_FREE; continue or terminate at a BOUNDARY."""
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self.fill_slots(view, event.free_slots))
        if event.kind is not EventKind.BOUNDARY or event.trial_id is None:
            return PolicyDecision()
        trial = view.trials.get(event.trial_id)
        if trial is None:
            return PolicyDecision()
        max_t = self._max_t
        step = int(event.step if event.step is not None else trial.step)
        tid = trial.trial_id
        if step >= max_t:
            if max_t < view.max_steps:
                return PolicyDecision.of(
                    [Action.terminate(tid, reason=f"ASHA: reached max_t={max_t}")]
                )
            return PolicyDecision.of([Action.continue_(tid)])
        bracket = self._bracket_of(tid, rng)
        exact = trial.steps == step
        value = float(view.sign * trial.values[exact][-1]) if exact.any() else None
        if bracket.on_result(tid, step, value) is Decision.STOP:
            milestone, cutoff = bracket.stopped[tid]
            shown = "no value" if value is None else f"{view.sign * value:.6g}"
            return PolicyDecision.of(
                [
                    Action.terminate(
                        tid,
                        reason=f"ASHA: {view.metric} {shown} at rung {milestone} below the cutoff "
                        f"{view.sign * cutoff:.6g}",
                    )
                ]
            )
        return PolicyDecision.of([Action.continue_(tid)])

    def stage_milestones(
        self, view: StudyView, trial_id: int | None, rng: np.random.Generator
    ) -> list[int] | None:
        """The rungs of the trial's bracket (of every bracket for ``None``), then ``max_t``."""
        max_t = self._max_t
        brackets = self.brackets if trial_id is None else [self._bracket_of(trial_id, rng)]
        rungs = sorted({m for b in brackets for m, _ in b.rungs} | {max_t})
        return rungs

    def state_dict(self) -> dict[str, Any]:
        """Brackets, recorded values and bracket assignments (JSON-able)."""
        return {
            "max_t": self._max_t,
            "brackets": [b.state_dict() for b in self.brackets],
            "assigned": [[t, b] for t, b in self.assigned.items()],  # in assignment order
        }

    def state_changes(self) -> dict[str, Any]:
        """The patch of :meth:`state_dict` since the last call: the whole state first (unless
        restored from a journaled one), then the values, stops and bracket assignments added
        (O(changes))."""
        if self._whole_next:
            state = self.state_dict()
            self._take_all()
            self._whole_next = False
            return {"set": state}
        brackets = {str(i): p for i, b in enumerate(self.brackets) if (p := b.take_changes())}
        patch: dict[str, Any] = {}
        if brackets:
            patch["brackets"] = {"sub": brackets}
        if self._new_assigned:
            patch["assigned"] = {"ext": self._new_assigned}
        self._new_assigned = []
        return {"sub": patch} if patch else {}

    def _take_all(self) -> None:
        """Forget the changes not yet patched (the whole state is the new baseline)."""
        for bracket in self.brackets:
            bracket.take_changes()
        self._new_assigned = []

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (``{}``, a study that has none yet, leaves the policy as
        built; the state's ``max_t`` is the one the journal's study was run with)."""
        if not state:
            return
        self._max_t = int(state["max_t"])
        self.brackets = self._make_brackets(self._max_t)
        for bracket, data in zip(self.brackets, state["brackets"], strict=True):
            bracket.load_state_dict(data)
        self.assigned = {int(t): int(b) for t, b in state["assigned"]}
        self._new_assigned = []
        self._whole_next = False  # the restored state is the baseline of the next patch
