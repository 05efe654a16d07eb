"""The median stopping rule (Golovin et al., "Google Vizier", KDD 2017, §3.2.2), as Ray Tune's.

Ray Tune's ``MedianStoppingRule`` (``median_stopping_rule.py``): once past ``grace_period``, a
trial at step ``t`` is stopped if its best value so far is strictly worse than the median, over
the other trials that reached ``t``, of their running means between ``grace_period`` and ``t``.
With fewer than ``min_samples_required`` such trials it goes on (Vizier's rule); with
``yield_slots`` (Ray's behaviour when trials are pending) it yields its slot (suspends) when
others are waiting and it ran ``min_time_slice`` steps since it last yielded. The free slots go
to waiting trials first-in first-out (queued, new, then suspended: Ray's ``FIFOScheduler``).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sortedcontainers import SortedList

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
from hpctune.policies._common import best_until, last_step, require
from hpctune.policies._order import median_skipping
from hpctune.study.states import TrialStatus


@dataclass(frozen=True)
class MedianOptions:
    """Options of :class:`MedianStoppingPolicy` (Ray's ``MedianStoppingRule`` defaults).

    Attributes:
        grace_period: Steps before a trial may be stopped; running means start here. Ray counts
            60 s of ``time_total_s``; hpctune counts steps (1: from the first step on).
        min_samples_required: Other trials needed at a step to compute the median (Ray: 3).
        min_time_slice: Steps a trial trains between two yields (Ray: 0).
        hard_stop: Terminate a stopped trial (Ray: True); False suspends it, to be resumed
            once nothing else waits.
        yield_slots: With fewer than ``min_samples_required`` other trials at its step, a
            trial gives its slot to a waiting one (suspends), as Ray's rule does when its
            controller has pending trials. False (the default, Vizier's rule): it goes on.
            Yielding delays the trials that report first, which are often the fast good
            ones: it made the time to target longer in 17 of 20 trace x slot cases, up to
            2.3x (docs/policies.md, "Median stopping: why it does not yield").
    """

    grace_period: int = 1
    min_samples_required: int = 3
    min_time_slice: int = 0
    hard_stop: bool = True
    yield_slots: bool = False


def running_mean(trial: TrialView, start: int, step: int, sign: float) -> float:
    """Mean of ``sign * value`` over the steps in ``[start, step]``; NaN if none."""
    mask = (trial.steps >= start) & (trial.steps <= step)
    values = sign * np.asarray(trial.values[mask], dtype=float)
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else math.nan


def median_of_running_means(others: list[TrialView], start: int, step: int, sign: float) -> float:
    """The median of the others' running means (NaN means are left out)."""
    means = [running_mean(t, start, step, sign) for t in others]
    means = [m for m in means if not math.isnan(m)]
    return float(np.median(means)) if means else math.nan


_WAITING = (TrialStatus.QUEUED, TrialStatus.SUSPENDED)


def _row_means(rows: list[np.ndarray]) -> list[float]:
    """The mean of each of ``rows`` (all of one length) at once: a row mean of a 2-D array is
    the 1-D mean of the row, bit for bit (numpy sums each row with the same pairwise sum)."""
    means: list[float] = np.array(rows).mean(axis=1).tolist()
    return means


class _Curve:
    """One trial's curve as the rule reads it: ``sign * value`` from ``start`` on, NaN dropped.

    The filtered arrays are made on first use; :meth:`mean` is :func:`running_mean`, bit for bit
    (the same values summed in the same order), from a prefix of them when the steps ascend.
    """

    __slots__ = ("_steps", "_values", "first", "last", "ordered", "sign", "start", "trial")

    def __init__(self, trial: TrialView, start: int, sign: float) -> None:
        self.trial = trial
        self.start = start
        self.sign = sign
        self.last = last_step(trial)
        self._values: np.ndarray | None = None
        # the filtered steps: ``first, first + 1, ...`` when they are consecutive (``first``
        # set, ``_steps`` None), else kept (an array: not one more object for the GC to walk)
        self._steps: array[float] | None = None
        self.first: int | None = None
        self.ordered = True  # the trial's steps ascend

    def values(self) -> np.ndarray:
        """``sign * value`` at the steps from ``start`` on, NaN left out (made once)."""
        if self._values is None:
            steps = np.asarray(self.trial.steps)
            keep = steps >= self.start
            values = self.sign * np.asarray(self.trial.values[keep], dtype=float)
            valid = ~np.isnan(values)
            self._values = values[valid]
            kept = steps[keep][valid]
            self.ordered = bool(np.all(steps[1:] >= steps[:-1]))
            consecutive = (
                len(kept) > 0
                and self.ordered
                and float(kept[0]).is_integer()
                and kept[-1] - kept[0] == len(kept) - 1
            )
            if consecutive:  # whole steps, ascending one by one
                self.first = int(kept[0])
            else:
                self._steps = array("d", kept.tolist())
        return self._values

    def prefix(self, step: int) -> int:
        """How many filtered values lie at steps ``<= step`` (for ``ordered`` curves)."""
        values = self.values()
        if self.first is not None:
            return min(max(step - self.first + 1, 0), len(values))
        return bisect_right(self._steps or (), step)

    def mean(self, step: int) -> float:
        """The running mean over ``[start, step]`` (:func:`running_mean`); NaN if none."""
        k = self.prefix(step)
        if not self.ordered:
            return running_mean(self.trial, self.start, step, self.sign)
        return _row_means([self.values()[:k]])[0] if k else math.nan

    def appended_from(self, old: _Curve) -> float:
        """If this curve is ``old``'s with points appended, the least step appended (``inf``
        for none): running means at earlier steps are ``old``'s. ``-inf`` otherwise."""
        a, b = old.trial, self.trial
        n = len(a.steps)
        if len(b.steps) < n or len(b.values) != len(b.steps) or len(a.values) != n:
            return -math.inf
        same = (
            np.asarray(b.steps[:n]).tobytes() == np.asarray(a.steps).tobytes()
            and np.asarray(b.values[:n]).tobytes() == np.asarray(a.values).tobytes()
        )
        if not same:
            return -math.inf
        return float(np.min(b.steps[n:])) if len(b.steps) > n else math.inf


_NO_STEP = np.iinfo(np.int64).min


class _Table:
    """The filtered values of every trial whose steps are consecutive, one row each, with the
    row's first step, number of values and the trial's last step: the running means at a step
    of all of them are the row means of a few blocks (one per prefix length), no Python loop
    over the trials. The other trials (steps repeated or not whole) are listed in ``others``.
    """

    def __init__(self) -> None:
        self.row: dict[int, int] = {}
        self.values = np.zeros((0, 0))
        self.first = np.zeros(0, dtype=np.int64)
        self.count = np.zeros(0, dtype=np.int64)
        self.last = np.zeros(0, dtype=np.int64)
        self.others: set[int] = set()

    def put(self, trial_id: int, curve: _Curve) -> None:
        """Enter (or replace) ``curve``, the curve of ``trial_id``."""
        values = curve.values()
        i = self.row.get(trial_id)
        if i is None:
            i = self.row[trial_id] = len(self.row)
        rows, cols = self.values.shape
        if i >= rows or len(values) > cols:
            grown = np.zeros((max(rows, 2 * (i + 1)), max(cols, len(values))))
            grown[:rows, :cols] = self.values
            self.values = grown
            for name in ("first", "count", "last"):
                column = np.full(grown.shape[0], _NO_STEP, dtype=np.int64)
                column[:rows] = getattr(self, name)
                setattr(self, name, column)
        self.others.discard(trial_id)
        self.last[i] = _NO_STEP  # not in any block
        if curve.first is None:
            if len(values):
                self.others.add(trial_id)
            return
        self.values[i, : len(values)] = values
        self.first[i], self.count[i], self.last[i] = curve.first, len(values), curve.last

    def remove(self, trial_id: int) -> None:
        """Forget ``trial_id`` (its row stays, unused)."""
        i = self.row.get(trial_id)
        if i is not None:
            self.last[i] = _NO_STEP
        self.others.discard(trial_id)

    def means(self, step: int) -> list[float]:
        """The running means at ``step`` of the rows whose trial reached it (NaN left out)."""
        used = len(self.row)
        rows = np.flatnonzero(self.last[:used] >= step)
        prefix = np.clip(step - self.first[rows] + 1, 0, self.count[rows])
        found: list[float] = []
        for k in np.unique(prefix):
            if k > 0:
                block = self.values[rows[prefix == k], : int(k)]  # a new C-ordered array
                found.extend(block.mean(axis=1).tolist())
        return found


class _MedianIndex:
    """The running means of every trial at the steps the rule was asked about, sorted per step.

    Derived from the views alone (never journaled): :meth:`sync` brings it up to a view by
    looking again only at trials whose :class:`TrialView` object changed (the controller keeps
    the object of an unchanged trial), and recomputes only the means a change can move.
    """

    def __init__(self, start: int, sign: float) -> None:
        self.start = start
        self.sign = sign
        self.view: StudyView | None = None
        self.curves: dict[int, _Curve] = {}
        self.lasts: SortedList = SortedList()  # last step of every trial
        self.means: dict[int, SortedList] = {}  # step -> running means of those that reached it
        self.steps: list[int] = []  # the keys of ``means``, ascending
        self._waiting: int | None = None  # queued or suspended trials in ``view``
        self.table: _Table | None = None  # made when a step's means are first asked for

    def sync(self, view: StudyView) -> None:
        """Take the changes of ``view`` in (nothing if it is the view of the last call)."""
        if view is self.view:
            return
        trials = view.trials
        curves = self.curves
        added: list[int] = []
        for tid, trial in trials.items():
            old = curves.get(tid)
            if old is None or old.trial is not trial:
                new = _Curve(trial, self.start, self.sign)
                self._replace(old, new)
                curves[tid] = new
                added.append(new.last)
                if self.table is not None:
                    self.table.put(tid, new)
        if len(curves) > len(trials):  # trials that left the view
            for tid in [t for t in curves if t not in trials]:
                self._replace(curves.pop(tid), None)
                if self.table is not None:
                    self.table.remove(tid)
        self.lasts.update(added)
        self.view = view
        self._waiting = None

    def _replace(self, old: _Curve | None, new: _Curve | None) -> None:
        """Move the means of a trial from ``old`` to ``new`` at every step kept."""
        if old is not None:
            self.lasts.remove(old.last)
        if not self.steps:
            return
        lasts = [c.last for c in (old, new) if c is not None]
        low = -math.inf
        if old is not None and new is not None:
            low = min(new.appended_from(old), min(lasts) + 1)
        steps, high = self.steps, max(lasts)
        for step in steps[bisect_left(steps, low) if low > -math.inf else 0 :]:
            if step > high:
                break
            means = self.means[step]
            if old is not None and old.last >= step:
                mean = old.mean(step)
                if not math.isnan(mean):
                    means.remove(mean)
            if new is not None and new.last >= step:
                mean = new.mean(step)
                if not math.isnan(mean):
                    means.add(mean)

    def reached(self, step: int) -> int:
        """How many trials have a value at ``step`` or later (their last step)."""
        return len(self.lasts) - int(self.lasts.bisect_left(step))

    def waiting(self) -> int:
        """How many trials of the view are queued or suspended."""
        if self._waiting is None:
            assert self.view is not None
            self._waiting = sum(t.status in _WAITING for t in self.view.trials.values())
        return self._waiting

    def means_at(self, step: int) -> SortedList:
        """The running means at ``step`` of the trials that reached it, sorted (NaN left out).

        Made on first use from every trial's curve (:class:`_Table`: the trials whose values up
        to ``step`` are as many are averaged at once; a row mean of a 2-D array is the 1-D mean,
        bit for bit); then kept up to date by :meth:`sync`.
        """
        means = self.means.get(step)
        if means is not None:
            return means
        if self.table is None:
            self.table = _Table()
            for tid, curve in self.curves.items():
                self.table.put(tid, curve)
        found = self.table.means(step)
        for tid in self.table.others:  # steps repeated or not whole: one by one
            curve = self.curves[tid]
            if curve.last >= step:
                mean = curve.mean(step)
                if not math.isnan(mean):
                    found.append(mean)
        means = SortedList(found)
        self.means[step] = means
        insort(self.steps, step)
        return means

    def median_of_others(self, trial_id: int, step: int) -> float:
        """:func:`median_of_running_means` of the trials other than ``trial_id`` that reached
        ``step``: O(log n)."""
        means = self.means_at(step)
        own = self.curves[trial_id]
        skip = None
        if own.last >= step:
            mean = own.mean(step)
            if not math.isnan(mean):
                skip = means.bisect_left(mean)
        return median_skipping(means.__getitem__, len(means), skip)


class MedianStoppingPolicy(Policy):
    """The median stopping rule (Vizier; Ray's ``MedianStoppingRule``) at every boundary.

    Use it as a cheap, model-free early stopper when trials are started in large numbers and
    curves of different configurations are comparable step by step. With ``yield_slots`` it
    suspends a trial that is ahead of all but a few others while new trials wait, which makes it
    breadth-first, as Ray's.
    """

    name: ClassVar[str] = "median"
    traits: ClassVar[PolicyTraits] = PolicyTraits(runs_on_stage_trees=True)
    Options = MedianOptions

    def __init__(self, context: StudyContext, options: MedianOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or MedianOptions()
        o = self.options
        require("grace_period", o.grace_period, 0)
        require("min_samples_required", o.min_samples_required, 1)
        require("min_time_slice", o.min_time_slice, 0)
        self.paused_at: dict[int, int] = {}  # trial -> step of its last yield
        self.stopped_at: dict[int, int] = {}  # trial -> step it was stopped at (soft stop)
        self._index: _MedianIndex | None = None  # derived from the views, not journaled

    def stage_tree_problem(self) -> tuple[str, str]:
        """Over a stage tree a stopped trial holds no worker to yield: it is terminated."""
        if self.options.hard_stop:
            return "", ""
        return "hard_stop", (
            "over a stage tree (`stages.enabled = true`) the median rule terminates the trials "
            "it stops (a trial holds no worker to yield); remove `policy.hard_stop = false` or "
            "set stages.enabled = false"
        )

    def _index_of(self, view: StudyView) -> _MedianIndex:
        """The running-mean index, brought up to ``view``."""
        index = self._index
        if index is None or index.sign != view.sign:
            index = self._index = _MedianIndex(self.options.grace_period, view.sign)
        index.sync(view)
        return index

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill slots FIFO on SLOT_FREE; apply the rule at a BOUNDARY."""
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self._fifo(view, event.free_slots))
        if event.kind is not EventKind.BOUNDARY or event.trial_id is None:
            return PolicyDecision()
        trial = view.trials.get(event.trial_id)
        if trial is None:
            return PolicyDecision()
        return PolicyDecision.of([self._rule(view, trial, int(event.step or trial.step))])

    def _rule(self, view: StudyView, trial: TrialView, step: int) -> Action:
        o = self.options
        tid = trial.trial_id
        if tid in self.stopped_at:  # a soft-stopped trial resumed: Ray falls back to FIFO
            if self.stopped_at[tid] == step:
                return Action.suspend(tid, reason="median: stopped (hard_stop = false)")
            return Action.continue_(tid)
        if step < o.grace_period:
            return Action.continue_(tid)
        index = self._index_of(view)
        others = index.reached(step) - (last_step(trial) >= step)  # trials other than tid
        if others < o.min_samples_required:
            if not o.yield_slots:
                return Action.continue_(tid)
            yield_ = Action.suspend(
                tid,
                reason=f"median: yields its slot, {others} other trials reached step "
                f"{step} (< {o.min_samples_required})",
            )
            if self.paused_at.get(tid) == step:  # decided already (the same event again)
                return yield_
            waiting = (view.trials_remaining is None or view.trials_remaining > 0) or (
                index.waiting() - (trial.status in _WAITING) > 0
            )
            if waiting and step - self.paused_at.get(tid, -math.inf) > o.min_time_slice:
                self.paused_at[tid] = step
                return yield_
            return Action.continue_(tid)
        median = index.median_of_others(tid, step)
        best = best_until(trial, step, view.sign)
        if not math.isnan(median) and not math.isnan(best) and best < median:
            reason = (
                f"median: best {view.metric} {view.sign * best:.6g} by step {step} is worse "
                f"than the median {view.sign * median:.6g} of {others} trials' running means"
            )
            if o.hard_stop:
                return Action.terminate(tid, reason=reason)
            self.stopped_at[tid] = step
            return Action.suspend(tid, reason=reason)
        return Action.continue_(tid)

    def stage_milestones(
        self, view: StudyView, trial_id: int | None, rng: np.random.Generator
    ) -> list[int] | None:
        """Over a stage tree: every evaluation boundary from ``grace_period`` on, then
        ``max_steps`` (Hippo's milestones). A trial is trained from one to the next and judged
        there; the yield of the rule does not apply (trials hold no slot between requests)."""
        start = max(self.options.grace_period, 1)
        first = -(-start // view.boundary) * view.boundary  # the first boundary >= start
        return [*range(first, view.max_steps, view.boundary), view.max_steps]

    def _fifo(self, view: StudyView, free_slots: int) -> list[Action]:
        """Queued trials, then new ones, then suspended ones, each by id (Ray's FIFO order)."""
        actions = [
            Action.resume(t.trial_id) for t in view.with_status(TrialStatus.QUEUED)[:free_slots]
        ]
        new = free_slots - len(actions)
        if view.trials_remaining is not None:
            new = min(new, view.trials_remaining)
        actions.extend(Action.start() for _ in range(max(new, 0)))
        left = free_slots - len(actions)
        for trial in view.with_status(TrialStatus.SUSPENDED)[: max(left, 0)]:
            actions.append(Action.resume(trial.trial_id))
        return actions

    def state_dict(self) -> dict[str, Any]:
        """Steps of the last yield and of soft stops, per trial (JSON-able)."""
        if not self.paused_at and not self.stopped_at:
            return {}
        return {
            "paused_at": [[t, s] for t, s in self.paused_at.items()],
            "stopped_at": [[t, s] for t, s in self.stopped_at.items()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.paused_at = {int(t): int(s) for t, s in state.get("paused_at", [])}
        self.stopped_at = {int(t): int(s) for t, s in state.get("stopped_at", [])}
