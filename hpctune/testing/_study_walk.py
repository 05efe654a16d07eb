"""Random but valid studies for the conformance kit: a small stand-in for the controller.

A :class:`StudyWalk` starts from a random study in mid-course (trials in every status, curves,
checkpoints, forks with generations and initiators, learning-curve predictions) and moves on in
rounds as the controller does: running trials report and reach boundaries (REPORT, BOUNDARY),
fits arrive (PREDICTION), some trials fail, end early, lose their worker (queued again) or are
stopped or retried by the user. The policy's actions are carried out as
``hpctune.core.loop`` carries them out (``apply_action``, ``trial_for``, ``assign``): a running
trial told to suspend or terminate stays running until its worker hears it (at once, mostly, or
at its next boundary), and holds its slot till then. Checkpoints the policy no longer needs are
deleted. Everything is drawn from one generator.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
from scipy.special import ndtri

from hpctune.curves.predict import DECIMALS, LEVELS, CurvePrediction
from hpctune.files import dumps
from hpctune.policies._base import (
    Action,
    ActionKind,
    Event,
    EventKind,
    StudyContext,
    StudyView,
    TrialView,
)
from hpctune.study.space import SearchSpace, parse_space
from hpctune.study.states import Mode, TrialStatus

PLACING = (ActionKind.START, ActionKind.RESUME, ActionKind.FORK)
WAITING = (TrialStatus.QUEUED, TrialStatus.SUSPENDED)
# metric, bounds and random level of the two kinds of study
_SCALES = {"max": ("accuracy", (0.0, 1.0), 0.1), "min": ("loss", (0.0, 2.5), 2.3)}
_STATUS_WEIGHTS = {
    TrialStatus.QUEUED: 2,
    TrialStatus.RUNNING: 4,
    TrialStatus.SUSPENDED: 2,
    TrialStatus.COMPLETED: 3,
    TrialStatus.TERMINATED: 2,
    TrialStatus.ENDED_EARLY: 1,
    TrialStatus.FAILED: 1,
}
_NODES = ndtri(np.asarray(LEVELS))


def default_space() -> SearchSpace:
    """The search space of the kit's studies: every kind of parameter, a schedule included."""
    return parse_space(
        {
            "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
            "momentum": {"type": "float", "low": 0.5, "high": 0.99},
            "hidden": {"type": "int", "low": 8, "high": 512, "log": True},
            "batch_size": [16, 32, 64],
            "act": ["relu", "tanh"],
            "width": 64,
            "sched": {
                "schedule": "cosine",
                "base": {"type": "float", "low": 0.01, "high": 0.1},
                "total_steps": 10,
            },
        },
        path=None,
    )


def _json_data(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as the journal gives it back (JSON: numpy scalars become numbers)."""
    data: dict[str, Any] = json.loads(dumps(dict(obj)))
    return data


@dataclass
class _Curve:
    """A trial's hidden learning curve, normalised (0 worst, 1 best)."""

    start: float
    limit: float
    rate: float
    noise: float

    def at(self, step: int, rng: np.random.Generator) -> float:
        u = self.limit - (self.limit - self.start) * math.exp(-self.rate * step)
        return float(np.clip(u + self.noise * rng.standard_normal(), 0.0, 1.0))


@dataclass
class _Trial:
    """A trial as the walk keeps it (mutable); :meth:`StudyWalk.view` freezes it."""

    trial_id: int
    status: TrialStatus
    params: dict[str, Any]
    curve: _Curve
    seconds_per_step: float
    step: int = 0
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    checkpoint_step: int | None = None
    parent_trial: int | None = None
    parent_step: int | None = None
    priority: float = 0.0
    retries: int = 0
    end_step: int | None = None
    generation: int | None = None
    initiator: int | None = None
    last_metrics: dict[str, float] = field(default_factory=dict)
    until_step: int | None = None  # the running assignment's last step
    stopping: TrialStatus | None = None  # suspended or terminated, once its worker hears it


class StudyWalk:
    """One random study, moved on round by round (see the module docstring).

    Args:
        rng: The walk's generator (the whole study follows from it).
        space: The search space configurations are drawn from.
        makes_configurations: The policy forks and gives parameters (PBT fields, always a space).
        wants_predictions: The policy gets learning-curve predictions in its views.
        wants_fit: The policy's :meth:`~hpctune.policies.Policy.wants_fit` (guarded by the kit).
    """

    def __init__(
        self,
        rng: np.random.Generator,
        space: SearchSpace,
        *,
        makes_configurations: bool,
        wants_predictions: bool,
        wants_fit: Callable[[int], bool],
    ) -> None:
        self.rng = rng
        self.makes_configurations = makes_configurations
        self.wants_predictions = wants_predictions
        self.wants_fit = wants_fit
        self.mode: Mode = "max" if rng.random() < 0.5 else "min"
        self.metric, self.bounds, level = _SCALES[self.mode]
        self.random_level = level if rng.random() < 0.5 else None
        self.max_steps = int(rng.integers(4, 13) if rng.random() < 0.6 else rng.integers(13, 41))
        self.boundary = int(rng.choice([1, 1, 2, 3, 5]))
        if self.boundary > self.max_steps:
            self.boundary = 1
        self.slots = int(rng.integers(1, 7))
        self.space: SearchSpace | None = space
        if not makes_configurations and rng.random() < 0.2:
            self.space = None  # the simulator's views have no space
        self.now = 0.0
        self.trials: dict[int, _Trial] = {}
        self.generated = 0
        self.predictions: dict[int, CurvePrediction] = {}
        self.pending_fits: list[tuple[int, int]] = []
        count = 0 if rng.random() < 0.3 else int(rng.integers(1, 13))
        for _ in range(count):
            self._add_initial_trial()
        self.now = max((t.times[-1] for t in self.trials.values() if t.times), default=0.0)
        self.now += float(rng.uniform(0.0, 5.0))
        self.num_trials: int | None = None
        if rng.random() < 0.8:
            self.num_trials = self.generated + int(rng.integers(0, 12))
        if wants_predictions:
            for trial in self.trials.values():
                n = len(trial.values)
                if 2 <= n < self.max_steps and rng.random() < 0.6:
                    self.predictions[trial.trial_id] = self._prediction(trial, n)

    @property
    def context(self) -> StudyContext:
        """The study's context, which the policy under check is built with."""
        return StudyContext(max_steps=self.max_steps, mode=self.mode, boundary=self.boundary)

    # -- the study's parts ---------------------------------------------------------------------

    def end_of(self, trial: _Trial) -> int:
        """The step at which ``trial`` is complete."""
        return min(trial.end_step or self.max_steps, self.max_steps)

    def value(self, u: float) -> float:
        """The metric for the normalised value ``u``."""
        low, high = self.bounds
        return low + u * (high - low) if self.mode == "max" else high - u * (high - low)

    def running(self) -> list[_Trial]:
        """The running trials, by id."""
        return [t for _, t in sorted(self.trials.items()) if t.status is TrialStatus.RUNNING]

    def _sample_params(self) -> dict[str, Any]:
        if self.space is None:
            return {"x": float(np.round(self.rng.random(), 6)), "config": len(self.trials)}
        return _json_data(self.space.sample(self.rng))

    def _new_curve(self) -> _Curve:
        rng = self.rng
        if rng.random() < 0.1:  # flat: ties between trials
            return _Curve(0.5, 0.5, 0.0, 0.0)
        start = float(rng.uniform(0.0, 0.3))
        return _Curve(
            start,
            float(rng.uniform(start, 1.0)),
            float(rng.uniform(0.02, 0.5)),
            float(rng.choice([0.0, 0.01, 0.05])),
        )

    def _report(self, trial: _Trial, step: int, time: float) -> None:
        """``trial`` reports ``step`` (with the metric, mostly)."""
        trial.step = step
        if self.rng.random() < 0.05:
            return  # a report without the study's metric
        value = self.value(trial.curve.at(step, self.rng))
        trial.steps.append(step)
        trial.values.append(value)
        trial.times.append(time)
        trial.last_metrics = {self.metric: value, "aux": float(np.round(self.rng.random(), 4))}

    def _add_initial_trial(self) -> None:
        rng = self.rng
        tid = len(self.trials)
        statuses = list(_STATUS_WEIGHTS)
        weights = np.asarray([_STATUS_WEIGHTS[s] for s in statuses], dtype=float)
        status = statuses[int(rng.choice(len(statuses), p=weights / weights.sum()))]
        if status is TrialStatus.RUNNING and len(self.running()) >= self.slots:
            status = TrialStatus.QUEUED
        parents = [t for t in self.trials.values() if t.checkpoint_step is not None]
        trial = _Trial(
            tid,
            status,
            {},
            self._new_curve(),
            float(rng.uniform(0.5, 5.0)),
            priority=float(rng.choice([0.0, 0.0, 0.5, np.round(rng.random(), 3)])),
            retries=int(rng.integers(0, 3)) if rng.random() < 0.2 else 0,
        )
        start = 0
        if self.makes_configurations and parents and rng.random() < 0.5:
            parent = parents[int(rng.integers(len(parents)))]
            start = int(parent.checkpoint_step or 0)
            ended = [t.trial_id for t in self.trials.values() if t.status.is_final]
            trial.params = _json_data(parent.params)
            trial.parent_trial, trial.parent_step = parent.trial_id, start
            trial.generation = (parent.generation or 0) + 1
            trial.initiator = ended[int(rng.integers(len(ended)))] if ended else parent.trial_id
            trial.end_step = min(start + int(rng.integers(1, 6)), self.max_steps)
            trial.curve = parent.curve
            trial.step = start
        else:
            trial.params = self._sample_params()
            self.generated += 1
            if self.makes_configurations:
                trial.generation = 0
                if rng.random() < 0.5:
                    trial.end_step = int(rng.integers(1, self.max_steps + 1))
        end = self.end_of(trial)
        if start >= end:
            status = trial.status = TrialStatus.COMPLETED
        if status is TrialStatus.COMPLETED:
            last = end
        elif status is TrialStatus.QUEUED and rng.random() < 0.6:
            last = start  # never ran
        else:
            last = int(rng.integers(start, end))
        t0 = float(rng.uniform(0.0, 50.0))
        for step in range(start + 1, last + 1):
            self._report(trial, step, t0 + (step - start) * trial.seconds_per_step)
        trial.step = last
        if last > start and rng.random() < 0.8:
            at_boundary = last - last % self.boundary
            trial.checkpoint_step = at_boundary if at_boundary > start else last
        ended_segment = status in (TrialStatus.SUSPENDED, TrialStatus.COMPLETED)
        if ended_segment and last > start and rng.random() < 0.9:
            trial.checkpoint_step = last
        self.trials[tid] = trial

    def _prediction(self, trial: _Trial, n: int) -> CurvePrediction:
        """A plausible prediction of ``trial``'s curve from its first ``n`` values."""
        rng = self.rng
        mode: Any = self.mode  # "max" or "min"
        if rng.random() < 0.15:
            return CurvePrediction.unknown_result(
                n, self.max_steps, self.bounds, mode, "too few points"
            )
        low, high = self.bounds
        u_last = (trial.values[n - 1] - low) / (high - low)
        if self.mode == "min":
            u_last = 1.0 - u_last
        horizon = self.max_steps - n
        ahead = np.arange(1, horizon + 1)
        gain = float(rng.uniform(-0.1, 0.5)) * (1.0 - np.exp(-ahead / float(rng.uniform(1, 20))))
        centre = np.clip(u_last + gain, 0.0, 1.0)
        spread = float(rng.uniform(0.005, 0.3))
        q = np.round(centre[:, None] + spread * _NODES[None, :], DECIMALS)
        q = np.maximum.accumulate(q, axis=1)
        return CurvePrediction(
            n=n,
            x_max=self.max_steps,
            bounds=self.bounds,
            mode=mode,
            u_quantiles=q,
            sigma=round(spread, 7),
        )

    # -- views ---------------------------------------------------------------------------------

    def view(self, free_slots: int) -> StudyView:
        """A new view of the study now: read-only arrays and mappings of trials and predictions;
        parameters and metrics are copies (the kit checks that ``decide`` leaves them alone)."""
        trials = {tid: _freeze(t) for tid, t in sorted(self.trials.items())}
        predictions = dict(self.predictions) if self.wants_predictions else {}
        return StudyView(
            metric=self.metric,
            mode=self.mode,
            max_steps=self.max_steps,
            boundary=self.boundary,
            now=self.now,
            trials=MappingProxyType(trials),
            free_slots=free_slots,
            total_slots=self.slots,
            trials_remaining=None
            if self.num_trials is None
            else max(self.num_trials - self.generated, 0),
            predictions=MappingProxyType(predictions),
            bounds=self.bounds,
            random_level=self.random_level,
            space=self.space,
        )

    def free_slots(self) -> int:
        """Idle workers: the slots not running a trial (fewer when some are still pending)."""
        free = self.slots - len(self.running())
        if free > 1 and self.rng.random() < 0.2:
            free = int(self.rng.integers(1, free + 1))
        return free

    # -- a round -------------------------------------------------------------------------------

    def advance(self) -> list[Event]:
        """Move time on: running trials train, fits arrive, fates strike; return the events."""
        rng = self.rng
        events: list[Event] = []
        elapsed = float(rng.uniform(0.1, 2.0))
        for trial in self.running():
            if trial.stopping is not None and rng.random() < 0.7:
                self._stop(trial)  # it was waiting at its boundary for the decision
                continue
            if rng.random() < 0.15:
                continue  # no report this round
            end = self.end_of(trial)
            target = min((trial.step // self.boundary + 1) * self.boundary, end)
            if trial.until_step is not None:
                target = min(target, max(trial.until_step, trial.step + 1))
            target = min(max(target, trial.step + 1), end)
            if target - trial.step > 1 and rng.random() < 0.3:
                target = int(rng.integers(trial.step + 1, target))
            first = trial.step
            for step in range(first + 1, target + 1):
                self._report(trial, step, self.now + (step - first) * trial.seconds_per_step)
            elapsed = max(elapsed, (target - first) * trial.seconds_per_step + 0.1)
            events.append(Event.report(trial.trial_id, target))
            until = trial.until_step if trial.until_step is not None else end
            at_boundary = target % self.boundary == 0 or target >= until
            if at_boundary:
                events.append(Event.boundary(trial.trial_id, target))
                if rng.random() < 0.8:
                    trial.checkpoint_step = target
                n = sum(1 for s in trial.steps if s <= target)
                if 2 <= n < self.max_steps and self.wants_fit(target):
                    self.pending_fits.append((trial.trial_id, n))
            if target >= end:
                self._set(trial, TrialStatus.COMPLETED)
                if rng.random() < 0.9:
                    trial.checkpoint_step = end
            elif target >= until:
                self._set(trial, TrialStatus.SUSPENDED)  # the assignment ended at until_step
                trial.checkpoint_step = target
            elif trial.stopping is not None and at_boundary:
                self._stop(trial)  # it went on before the decision came; stops here
        self.now += elapsed
        self._fates()
        events += self._fits()
        return events

    def _fates(self) -> None:
        rng = self.rng
        for trial in self.running():
            u = rng.random()
            if u < 0.02:
                self._set(trial, TrialStatus.FAILED)
            elif u < 0.03:
                self._set(trial, TrialStatus.ENDED_EARLY)
            elif u < 0.06:  # the worker was lost: resumes from its checkpoint
                self._set(trial, TrialStatus.QUEUED)
                trial.retries += 1
            elif u < 0.07:
                self._set(trial, TrialStatus.TERMINATED)  # hpctune stop --trial
        retryable = [
            t
            for t in self.trials.values()
            if t.status.is_final and t.status is not TrialStatus.COMPLETED
        ]
        if retryable and rng.random() < 0.03:  # hpctune retry
            trial = retryable[int(rng.integers(len(retryable)))]
            self._set(trial, TrialStatus.QUEUED)
            trial.retries = 0

    def _fits(self) -> list[Event]:
        """Learning-curve fits that finished: predictions and PREDICTION events."""
        rng = self.rng
        events: list[Event] = []
        waiting: list[tuple[int, int]] = []
        for tid, n in self.pending_fits:
            if rng.random() < 0.6:
                self.predictions[tid] = self._prediction(self.trials[tid], n)
                events.append(Event.prediction(tid, n))
            else:
                waiting.append((tid, n))
        self.pending_fits = waiting
        live = [t for t in self.trials.values() if not t.status.is_final]
        if not self.wants_predictions and live and rng.random() < 0.2:
            trial = live[int(rng.integers(len(live)))]  # a stray event: no prediction in view
            events.append(Event.prediction(trial.trial_id, max(len(trial.values), 1)))
        return events

    def deliverable(self, event: Event) -> bool:
        """Whether the controller gives ``event`` to the policy now (``_schedule``)."""
        trial = self.trials.get(event.trial_id) if event.trial_id is not None else None
        if trial is None:
            return False
        if event.kind is EventKind.PREDICTION:
            return not trial.status.is_final
        return trial.status is TrialStatus.RUNNING

    def _set(self, trial: _Trial, status: TrialStatus) -> None:
        trial.status = status
        trial.until_step = None
        trial.stopping = None

    # -- carrying out actions ------------------------------------------------------------------

    def apply(self, action: Action) -> None:
        """CONTINUE, SUSPEND, TERMINATE as the controller's ``_apply`` (others are ignored)."""
        trial = self.trials.get(action.trial_id) if action.trial_id is not None else None
        if trial is None:
            return
        if action.kind is ActionKind.CONTINUE:
            trial.priority = float(action.priority)
        elif action.kind is ActionKind.SUSPEND:
            if trial.status is TrialStatus.RUNNING:  # its worker is told; it stops later
                trial.stopping = trial.stopping or TrialStatus.SUSPENDED
                trial.priority = float(action.priority)
            elif trial.status is TrialStatus.QUEUED:
                self._set(trial, TrialStatus.SUSPENDED)
        elif action.kind is ActionKind.TERMINATE:
            if trial.status is TrialStatus.RUNNING:
                trial.stopping = TrialStatus.TERMINATED
            elif not trial.status.is_final:
                self._set(trial, TrialStatus.TERMINATED)

    def _stop(self, trial: _Trial) -> None:
        """A running trial's worker carries out the suspension or termination it was told."""
        status = trial.stopping or TrialStatus.SUSPENDED
        self._set(trial, status)
        trained = trial.step > (trial.parent_step or 0)
        if status is TrialStatus.SUSPENDED and trained and self.rng.random() < 0.9:
            trial.checkpoint_step = trial.step

    def place(self, actions: Sequence[Action], free_slots: int) -> None:
        """The actions of a SLOT_FREE decision, as the controller's ``_fill_slots``."""
        placed = 0
        for action in actions:
            if action.kind not in PLACING:
                self.apply(action)
            elif placed < free_slots and self._place(action):
                placed += 1

    def _place(self, action: Action) -> bool:
        """Start, fork or resume a trial (``trial_for`` and ``assign``); False if ignored."""
        if action.kind is ActionKind.RESUME:
            trial = self.trials.get(action.trial_id) if action.trial_id is not None else None
            if trial is None or trial.status not in WAITING:
                return False
            self._run(trial, action)
            return True
        parent: _Trial | None = None
        if action.kind is ActionKind.FORK:
            parent = self.trials.get(action.trial_id) if action.trial_id is not None else None
            if parent is None or action.step is None or parent.checkpoint_step != action.step:
                return False
            params = _json_data(action.params or {})
        elif action.params is not None:
            params = _json_data(action.params)
        else:
            if self.num_trials is not None and self.generated >= self.num_trials:
                return False
            params = self._sample_params()
            self.generated += 1
        tid = len(self.trials)
        trial = _Trial(
            tid,
            TrialStatus.QUEUED,
            params,
            self._new_curve() if parent is None else parent.curve,
            float(self.rng.uniform(0.5, 5.0)),
            end_step=_int_or_none(action.end_step),
            generation=_int_or_none(action.generation),
            initiator=_int_or_none(action.initiator),
        )
        if parent is not None:
            trial.parent_trial, trial.parent_step = parent.trial_id, int(action.step or 0)
            trial.step = trial.parent_step
        self.trials[tid] = trial
        self._run(trial, action)
        return True

    def _run(self, trial: _Trial, action: Action) -> None:
        start = trial.checkpoint_step
        if start is None:
            start = trial.parent_step or 0
        trial.priority = float(action.priority)
        if start >= self.end_of(trial):
            self._set(trial, TrialStatus.COMPLETED)  # its checkpoint is at its last step
            trial.step = max(trial.step, start)
            return
        self._set(trial, TrialStatus.RUNNING)
        trial.until_step = _int_or_none(action.until_step)

    def collect_checkpoints(self, needed: set[int] | None) -> None:
        """Delete the latest checkpoint of ended trials the policy no longer needs (PBT's GC)."""
        if needed is None:
            return
        pinned = {t.parent_trial for t in self.trials.values() if not t.status.is_final}
        for trial in self.trials.values():
            if trial.status.is_final and trial.trial_id not in needed | pinned:
                trial.checkpoint_step = None


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _readonly(values: Sequence[float], dtype: type) -> np.ndarray:
    array: np.ndarray = np.asarray(values, dtype=dtype)
    array.setflags(write=False)
    return array


def _freeze(trial: _Trial) -> TrialView:
    return TrialView(
        trial_id=trial.trial_id,
        status=trial.status,
        params=_json_data(trial.params),  # plain dicts, as the controller's; copies
        step=trial.step,
        steps=_readonly(trial.steps, np.int64),
        values=_readonly(trial.values, float),
        times=_readonly(trial.times, float),
        checkpoint_step=trial.checkpoint_step,
        parent_trial=trial.parent_trial,
        parent_step=trial.parent_step,
        priority=trial.priority,
        retries=trial.retries,
        info={},
        end_step=trial.end_step,
        generation=trial.generation,
        initiator=trial.initiator,
        last_metrics=dict(trial.last_metrics),
    )
