"""Synchronous successive halving: the bracket, and the policy SHA and Hyperband share.

A bracket (Li et al., "Hyperband", JMLR 2018, Algorithm 1, the inner ``for i`` loop) holds up to
``capacity`` trials and a list of milestones ``r_0 < ... < r_s = max_t``. Every live trial
trains to the current milestone (an assignment with ``until_step``: the segment ends there and
the trial is suspended with its checkpoint); once all have arrived, the top
``floor(n_i / eta)`` by their value at the milestone are promoted (resumed towards the next
milestone) and the others terminated. This is Ray Tune's ``HyperBandScheduler`` procedure
(``hyperband.py``: pause at the milestone, halve when every live trial of the bracket reached
it), carried out with suspend and resume instead of Ray's PAUSE.

All decisions are taken on SLOT_FREE from the view, so they do not depend on which boundary
events the policy saw; the state (bracket membership, current rung, survivors) is data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hpctune.policies._base import (
    Action,
    Event,
    EventKind,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
    TrialView,
)
from hpctune.policies._common import value_at
from hpctune.study.states import TrialStatus

_WAITING = (TrialStatus.QUEUED, TrialStatus.SUSPENDED)
_GONE = (TrialStatus.TERMINATED, TrialStatus.FAILED)


@dataclass(frozen=True)
class BracketShape:
    """The plan of a bracket: its index ``s``, its size and its milestones (ascending)."""

    s: int
    capacity: int
    milestones: tuple[int, ...]


def max_bracket(grace_period: int, eta: int, max_t: int) -> int:
    """Li et al.'s ``s_max``: the largest ``s`` with ``grace_period * eta**s <= max_t``."""
    s = 0
    while grace_period * eta ** (s + 1) <= max_t:
        s += 1
    return s


def bracket_milestones(s: int, eta: int, max_t: int, grace_period: int) -> tuple[int, ...]:
    """Li et al.'s resources ``r_i = R * eta**(i - s)`` for ``i = 0..s``, as whole steps.

    Rounded down as Ray does (``int(max_t * eta**-s)``), kept >= ``grace_period`` and
    increasing; the last is ``max_t``.
    """
    out: list[int] = []
    for i in range(s + 1):
        r = max(max_t // eta ** (s - i), grace_period)
        if out and r <= out[-1]:
            r = out[-1] + 1
        out.append(min(r, max_t))
    out[-1] = max_t
    return tuple(out)


class SyncBracket:
    """One synchronous successive-halving bracket (Ray's ``hyperband._Bracket``).

    Args:
        shape: Its index, capacity and milestones.
        eta: The reduction factor: a rung keeps the top ``floor(n / eta)`` (at least one).
    """

    def __init__(self, shape: BracketShape, eta: int) -> None:
        self.shape = shape
        self.eta = eta
        self.trials: list[int] = []  # every member, in joining order
        self.live: list[int] = []  # members still in the race (ranked after each halving)
        self.rung = 0  # index of the milestone the live members train to
        self.closed = False  # no member will join any more

    @property
    def milestone(self) -> int:
        """The step the live members train to now."""
        return self.shape.milestones[min(self.rung, len(self.shape.milestones) - 1)]

    @property
    def finished(self) -> bool:
        """True once the last rung was evaluated."""
        return self.rung >= len(self.shape.milestones)

    @property
    def room(self) -> int:
        """How many more trials may join."""
        return 0 if self.closed else max(self.shape.capacity - len(self.trials), 0)

    def add(self, trial_id: int) -> None:
        """Add a member; the bracket closes when it is full."""
        self.trials.append(trial_id)
        self.live.append(trial_id)
        if len(self.trials) >= self.shape.capacity:
            self.closed = True

    def close(self) -> None:
        """Accept no more members (the generator is exhausted)."""
        self.closed = True

    def drop_gone(self, trials: Mapping[int, TrialView]) -> None:
        """Forget members that were terminated or failed (Ray's ``cleanup_trial``)."""
        self.live = [t for t in self.live if t in trials and trials[t].status not in _GONE]

    def _done(self, trial: TrialView) -> bool:
        if trial.status is TrialStatus.COMPLETED:
            return True
        return trial.status in _WAITING and trial.step >= self.milestone

    def waiting(self, trials: Mapping[int, TrialView]) -> list[int]:
        """Live members waiting for a slot to train to the current milestone."""
        if self.finished:
            return []
        return [
            t
            for t in self.live
            if trials[t].status in _WAITING and trials[t].step < self.milestone
        ]

    def rung_done(self, trials: Mapping[int, TrialView]) -> bool:
        """True when the bracket is closed and every live member reached the milestone."""
        if self.finished or not self.closed:
            return False
        return all(self._done(trials[t]) for t in self.live)

    def halve(self, trials: Mapping[int, TrialView], sign: float) -> tuple[list[int], list[int]]:
        """Evaluate the current rung: return (promoted, dropped) and move to the next rung.

        Members are ranked by ``sign * value`` at the milestone (NaN last, ties by id); the top
        ``max(1, floor(len(live) / eta))`` are promoted. At the last rung nobody is promoted and
        the members not completed are dropped (they reached ``max_t`` below ``max_steps``).
        """
        milestone = self.milestone
        if self.rung >= len(self.shape.milestones) - 1:
            self.rung = len(self.shape.milestones)
            dropped = [t for t in self.live if trials[t].status is not TrialStatus.COMPLETED]
            self.live = []
            return [], dropped

        def key(tid: int) -> tuple[float, int]:
            value = sign * value_at(trials[tid], milestone)
            return (-value if not np.isnan(value) else np.inf, tid)

        ranked = sorted(self.live, key=key)
        keep = max(1, len(ranked) // self.eta) if ranked else 0
        self.live = ranked[:keep]
        self.rung += 1
        return ranked[:keep], ranked[keep:]

    def state_dict(self) -> dict[str, Any]:
        """The bracket as JSON-able data."""
        return {
            "s": self.shape.s,
            "capacity": self.shape.capacity,
            "milestones": list(self.shape.milestones),
            "trials": list(self.trials),
            "live": list(self.live),
            "rung": self.rung,
            "closed": self.closed,
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], eta: int) -> SyncBracket:
        """Rebuild a bracket from :meth:`state_dict`."""
        shape = BracketShape(
            int(state["s"]), int(state["capacity"]), tuple(int(m) for m in state["milestones"])
        )
        bracket = cls(shape, eta)
        bracket.trials = [int(t) for t in state["trials"]]
        bracket.live = [int(t) for t in state["live"]]
        bracket.rung = int(state["rung"])
        bracket.closed = bool(state["closed"])
        return bracket


class SyncHalvingPolicy(Policy):
    """Base of the synchronous successive-halving policies (SHA, Hyperband).

    Subclasses give the cycle of bracket shapes (:meth:`shapes`). New trials join the newest
    open bracket, in trial-id order; a full bracket (or any open one once the generator is
    exhausted) is closed and the next shape of the cycle opens. On SLOT_FREE the policy
    evaluates every bracket whose rung is complete (terminating the dropped members), then
    fills the free slots: queued members first, then members waiting for a milestone (oldest
    bracket first, best first), then new trials, each with ``until_step`` at its milestone.
    Boundaries need no decision: segments end at milestones by themselves.
    """

    traits: ClassVar[PolicyTraits] = PolicyTraits(
        boundary_decisions=False, runs_on_stage_trees=True, rungs_known=True
    )
    eta: int = 3

    def __init__(self, context: StudyContext, max_t: int | None, eta: int) -> None:
        """Set up for ``context`` with the ``max_t`` option (``None``: the study's
        ``max_steps``); subclasses set their options first (:meth:`shapes` reads them)."""
        super().__init__(context)
        self.eta = eta
        self._max_t = min(max_t or context.max_steps, context.max_steps)
        self._cycle = self.shapes(self._max_t)
        self.next_shape = 0
        self.brackets: list[SyncBracket] = []
        self.dropped: dict[int, str] = {}  # trial -> why it was terminated
        self._members: set[int] | None = None  # every bracket's trials (derived from them)

    def shapes(self, max_t: int) -> list[BracketShape]:
        """The bracket shapes, in the order brackets open (then again from the first)."""
        raise NotImplementedError

    def _member_ids(self) -> set[int]:
        """The trials of every bracket (made again from the brackets after a restore)."""
        if self._members is None:
            self._members = {t for b in self.brackets for t in b.trials}
        return self._members

    def _open_bracket(self) -> SyncBracket:
        bracket = SyncBracket(self._cycle[self.next_shape % len(self._cycle)], self.eta)
        self.next_shape += 1
        self.brackets.append(bracket)
        return bracket

    def _absorb(self, view: StudyView) -> None:
        """Put trials the policy has not seen yet into brackets, in id order."""
        known = self._member_ids()
        for tid in sorted(view.trials.keys() - known):
            bracket = self.brackets[-1] if self.brackets else None
            if bracket is None or bracket.room == 0:
                bracket = self._open_bracket()
            bracket.add(tid)
            known.add(tid)

    def _start_milestones(self, count: int) -> list[int]:
        """The first milestone of the brackets the next ``count`` new trials will join."""
        out: list[int] = []
        room = self.brackets[-1].room if self.brackets else 0
        shape_index = self.next_shape
        milestone = self.brackets[-1].shape.milestones[0] if self.brackets else 0
        while len(out) < count:
            if room == 0:
                shape = self._cycle[shape_index % len(self._cycle)]
                shape_index += 1
                room, milestone = shape.capacity, shape.milestones[0]
            take = min(room, count - len(out))
            out.extend([milestone] * take)
            room -= take
        return out

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Halve complete rungs and fill free slots on SLOT_FREE; nothing else."""
        if event.kind is not EventKind.SLOT_FREE:
            return PolicyDecision()
        self._absorb(view)
        trials = view.trials
        if view.trials_remaining == 0 and self.brackets:
            self.brackets[-1].close()
        live = [b for b in self.brackets if b.live or not b.finished]  # others do nothing
        for bracket in live:
            bracket.drop_gone(trials)
            while bracket.rung_done(trials):
                milestone = bracket.milestone
                promoted, dropped = bracket.halve(trials, view.sign)
                for tid in dropped:
                    if promoted:
                        why = (
                            f"not among the top {len(promoted)} at step {milestone} of "
                            f"bracket s={bracket.shape.s}"
                        )
                    else:
                        why = f"reached max_t={milestone}"
                    self.dropped[tid] = f"{self.name}: {why}"
                bracket.drop_gone(trials)
        # (re)send the terminations the view does not show carried out yet: idempotent
        actions = [
            Action.terminate(tid, reason=reason)
            for tid, reason in self.dropped.items()
            if tid in trials and not trials[tid].status.is_final
        ]
        free = event.free_slots
        placing: list[Action] = []
        waiting = [(b, t) for b in live for t in b.waiting(trials)]
        queued = [(b, t) for b, t in waiting if trials[t].status is TrialStatus.QUEUED]
        suspended = [(b, t) for b, t in waiting if trials[t].status is TrialStatus.SUSPENDED]
        for bracket, tid in (queued + suspended)[:free]:
            placing.append(Action.resume(tid, until_step=bracket.milestone))
        new = free - len(placing)
        if view.trials_remaining is not None:
            new = min(new, view.trials_remaining)
        for milestone in self._start_milestones(max(new, 0)):
            placing.append(Action.start(until_step=milestone))
        return PolicyDecision.of(actions + placing)

    def stage_milestones(
        self, view: StudyView, trial_id: int | None, rng: np.random.Generator
    ) -> list[int] | None:
        """Every milestone of the brackets (the rungs trials are asked to reach)."""
        return sorted({m for shape in self._cycle for m in shape.milestones})

    def state_dict(self) -> dict[str, Any]:
        """``max_t``, the position in the cycle of shapes and every bracket (JSON-able)."""
        return {
            "max_t": self._max_t,
            "next_shape": self.next_shape,
            "brackets": [b.state_dict() for b in self.brackets],
            "dropped": [[t, why] for t, why in self.dropped.items()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        if not state:
            return
        self._max_t = int(state["max_t"])
        self._cycle = self.shapes(self._max_t)
        self.next_shape = int(state["next_shape"])
        self.brackets = [SyncBracket.from_state_dict(b, self.eta) for b in state["brackets"]]
        self._members = None
        self.dropped = {int(t): str(why) for t, why in state["dropped"]}
