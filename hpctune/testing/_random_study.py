"""Random but valid studies for the conformance kit, run by the real scheduling core.

A :class:`RandomStudy` is drawn from a seed: the study's settings (mode, metric range, steps,
boundary, slots, trials), a made-up trace of learning curves and step times over the search
space, the simulator's costs and faults (trials that crash or end early, workers lost) and
made-up learning-curve predictions. :meth:`RandomStudy.simulator` runs a policy on it with the
simulator (:class:`~hpctune.simulator.Simulator`): the real
:class:`~hpctune.core.SchedulingCore` in memory with simulated workers, so every event the
policy gets and every action it returns goes through the controller's own code.

Most studies are taken over in mid-course (:class:`MidCourse`): until a random time a prelude of
random actions runs the study (trials started, forked, resumed, suspended, terminated, with
priorities), then the policy decides, as a new controller would, with trials in every status,
curves, checkpoints, forks with generations and initiators and predictions already there. The
study's users act throughout: they stop running trials and retry failed ones (inbox commands).
Everything follows from the seed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np
from scipy.special import ndtri

from hpctune.curves.predict import DECIMALS, LEVELS, CurvePrediction
from hpctune.files import dumps
from hpctune.policies import (
    Action,
    Event,
    EventKind,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
)
from hpctune.simulator import Faults, Simulator, SimulatorConfig, simulation_context
from hpctune.simulator.traces import Trace
from hpctune.study.space import SearchSpace, parse_space
from hpctune.study.states import Mode, TrialStatus
from hpctune.wire.inbox import RETRYABLE

# metric, bounds and random level of the two kinds of study
_SCALES = {"max": ("accuracy", (0.0, 1.0), 0.1), "min": ("loss", (0.0, 2.5), 2.3)}
_NODES = ndtri(np.asarray(LEVELS))
_P = TypeVar("_P", bound=Policy)


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


def json_data(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as the journal gives it back (JSON: numpy scalars become numbers)."""
    data: dict[str, Any] = json.loads(dumps(dict(obj)))
    return data


def wrapper_type(base: type[_P], policy: Policy) -> type[_P]:
    """A subclass of ``base`` (a policy that wraps ``policy``) with ``policy``'s name and
    traits, which the core reads from the policy's class."""
    attributes = {"name": type(policy).name, "traits": type(policy).traits}
    return type(f"{base.__name__}[{type(policy).__name__}]", (base,), attributes)


@dataclass
class SyntheticPredictions:
    """Made-up learning-curve predictions of a trace's configurations: plausible quantiles
    around the last value, drawn from the seed and (configuration, points) alone, so a fit
    asked for twice gives the same answer (the simulator's :class:`Predictions`)."""

    trace: Trace
    bounds: tuple[float, float]
    seed: int

    def get(self, config: int, n: int, x_max: int) -> CurvePrediction:
        """The prediction of configuration ``config`` from its first ``n`` values."""
        rng = np.random.default_rng([self.seed, config, n])
        mode: Any = self.trace.mode
        values = self.trace.curves[config, :n]
        values = values[np.isfinite(values)]
        if not len(values) or rng.random() < 0.15:
            return CurvePrediction.unknown_result(n, x_max, self.bounds, mode, "too few points")
        low, high = self.bounds
        u_last = (float(values[-1]) - low) / (high - low)
        if mode == "min":
            u_last = 1.0 - u_last
        ahead = np.arange(1, max(x_max - n, 0) + 1)
        gain = float(rng.uniform(-0.1, 0.5)) * (1.0 - np.exp(-ahead / float(rng.uniform(1, 20))))
        centre = np.clip(u_last + gain, 0.0, 1.0)
        spread = float(rng.uniform(0.005, 0.3))
        q = np.round(centre[:, None] + spread * _NODES[None, :], DECIMALS)
        q = np.maximum.accumulate(q, axis=1)
        return CurvePrediction(
            n=n, x_max=x_max, bounds=self.bounds, mode=mode, u_quantiles=q, sigma=round(spread, 7)
        )


@dataclass
class Prelude:
    """Random actions that run a study before the policy takes it over: trials started (with
    parameters and forks for a policy that makes configurations), resumed with an end, left
    queued, suspended, terminated, and given priorities. Only actions the core carries out."""

    rng: np.random.Generator
    space: SearchSpace
    makes_configurations: bool

    def decide(self, view: StudyView, event: Event) -> PolicyDecision:
        """The prelude's decision on ``event``."""
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self._place(view, event.free_slots) + self._stir(view))
        trial = view.trials.get(event.trial_id) if event.trial_id is not None else None
        if trial is None or trial.status.is_final:
            return PolicyDecision()
        u = self.rng.random()
        if u < 0.1:
            return PolicyDecision.of([Action.suspend(trial.trial_id, priority=self._priority())])
        if u < 0.15 and event.kind is not EventKind.PREDICTION:
            return PolicyDecision.of([Action.terminate(trial.trial_id, reason="prelude")])
        if event.kind is EventKind.BOUNDARY:
            return PolicyDecision.of([Action.continue_(trial.trial_id, priority=self._priority())])
        return PolicyDecision()

    def _priority(self) -> float:
        return float(self.rng.choice([0.0, 0.0, 0.5, np.round(self.rng.random(), 3)]))

    def _place(self, view: StudyView, free: int) -> list[Action]:
        rng = self.rng
        remaining = view.trials_remaining or 0
        waiting = [t for t in view.trials.values() if t.status in _WAITING]
        parents = [t for t in view.trials.values() if t.checkpoint_step is not None]
        ended = [t.trial_id for t in view.trials.values() if t.status.is_final]
        actions: list[Action] = []
        for _ in range(free):
            u = rng.random()
            if waiting and u < 0.3:
                trial = waiting.pop(int(rng.integers(len(waiting))))
                start = trial.checkpoint_step or trial.parent_step or 0
                until = None
                if start + 1 < view.max_steps and rng.random() < 0.3:
                    until = int(rng.integers(start + 1, view.max_steps + 1))
                actions.append(Action.resume(trial.trial_id, until_step=until))
            elif self.makes_configurations and parents and u < 0.6:
                parent = parents[int(rng.integers(len(parents)))]
                step = int(parent.checkpoint_step or 0)
                actions.append(
                    Action.fork(
                        parent.trial_id,
                        step,
                        json_data(self.space.sample(rng)),
                        end_step=min(step + int(rng.integers(1, 6)), view.max_steps),
                        generation=(parent.generation or 0) + 1,
                        initiator=ended[int(rng.integers(len(ended)))] if ended else None,
                    )
                )
            elif remaining > 0:
                remaining -= 1
                end = None
                if self.makes_configurations and rng.random() < 0.5:
                    end = int(rng.integers(1, view.max_steps + 1))
                actions.append(
                    Action.start(
                        priority=self._priority(),
                        end_step=end,
                        generation=0 if self.makes_configurations else None,
                    )
                )
        return actions

    def _stir(self, view: StudyView) -> list[Action]:
        """Suspend, terminate or reprioritise some trials that have not ended."""
        actions: list[Action] = []
        for trial in view.trials.values():
            if trial.status.is_final:
                continue
            u = self.rng.random()
            if u < 0.06:
                actions.append(Action.suspend(trial.trial_id, priority=self._priority()))
            elif u < 0.09:
                actions.append(Action.terminate(trial.trial_id, reason="prelude"))
            elif u < 0.15 and trial.status is TrialStatus.RUNNING:
                actions.append(Action.continue_(trial.trial_id, priority=self._priority()))
        return actions


_WAITING = (TrialStatus.QUEUED, TrialStatus.SUSPENDED)


@dataclass
class Users:
    """The study's users: now and then one stops a running trial (``hpctune stop --trial``) or
    retries a failed one (``hpctune retry``), through the inbox (``posted``)."""

    rng: np.random.Generator
    posted: list[dict[str, Any]] = field(default_factory=list)
    rate: float = 0.03

    def act(self, view: StudyView) -> None:
        """Maybe leave a command in the inbox, seeing the study as ``view`` shows it."""
        u = self.rng.random()
        if u >= 2 * self.rate:
            return
        if u < self.rate:
            running = [t.trial_id for t in view.trials.values() if t.status is TrialStatus.RUNNING]
            if running:
                trial = running[int(self.rng.integers(len(running)))]
                self.posted.append({"command": "stop_trial", "trial": trial})
            return
        failed = [t.trial_id for t in view.trials.values() if t.status in RETRYABLE]
        if failed:
            trial = failed[int(self.rng.integers(len(failed)))]
            self.posted.append({"command": "retry", "trials": [trial]})


class MidCourse(Policy):
    """``policy`` in a random study: before ``switch_at`` (seconds of the study) the prelude
    decides instead of it; at every decision the users may act. Everything else is the
    policy's (its state, its fits, the checkpoints it needs).

    Build it with :func:`mid_course` (it takes the policy's name and traits).
    """

    name: ClassVar[str] = "mid-course"

    def __init__(
        self, policy: Policy, prelude: Prelude | None, users: Users | None, switch_at: float
    ) -> None:
        super().__init__(policy.context)
        self.policy = policy
        self.prelude = prelude
        self.users = users
        self.switch_at = switch_at

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """The prelude's decision before ``switch_at``, the policy's after."""
        if self.users is not None:
            self.users.act(view)
        if self.prelude is not None and view.now < self.switch_at:
            return self.prelude.decide(view, event)
        return self.policy.decide(view, event, rng)

    def wants_fit(self, step: int) -> bool:
        """The policy's."""
        return self.policy.wants_fit(step)

    def state_dict(self) -> dict[str, Any]:
        """The policy's."""
        return self.policy.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The policy's."""
        self.policy.load_state_dict(state)

    def state_changes(self) -> dict[str, Any]:
        """The policy's."""
        return self.policy.state_changes()

    def needed_checkpoints(self, view: StudyView) -> set[int] | None:
        """The policy's."""
        return self.policy.needed_checkpoints(view)

    def stage_milestones(
        self, view: StudyView, trial_id: int | None, rng: np.random.Generator
    ) -> list[int] | None:
        """The policy's."""
        return self.policy.stage_milestones(view, trial_id, rng)


def mid_course(
    policy: Policy, prelude: Prelude | None, users: Users | None, switch_at: float
) -> MidCourse:
    """``policy`` taking over a study in mid-course (:class:`MidCourse`)."""
    return wrapper_type(MidCourse, policy)(policy, prelude, users, switch_at)


@dataclass(frozen=True)
class RandomStudy:
    """A random, valid study (see the module docstring), drawn by :meth:`draw`.

    Attributes:
        seed: The seed it was drawn from.
        trace: Its configurations' learning curves and step times.
        config: The simulator's costs, faults and study settings.
        slots: Its slots.
        switch_at: When the policy takes over (0: it runs the study from the start).
        users: The users' rate of commands per decision (0: none).
        predictions: Its learning-curve predictions.
        space: Its search space.
    """

    seed: int
    trace: Trace
    config: SimulatorConfig
    slots: int
    switch_at: float
    users: float
    predictions: SyntheticPredictions
    space: SearchSpace

    @classmethod
    def draw(cls, seed: int, space: SearchSpace, *, fresh: bool = False) -> RandomStudy:
        """The study of ``seed``; ``fresh``: a small study run from its start by the policy
        alone, with no fault and no user (how the kit tells that a policy is live)."""
        rng = np.random.default_rng([seed, int(fresh)])
        mode: Mode = "max" if rng.random() < 0.5 else "min"
        metric, bounds, level = _SCALES[mode]
        if fresh:
            max_steps, slots, num_trials = (int(rng.integers(2, n)) for n in (13, 4, 7))
        else:
            long = rng.random() >= 0.6
            max_steps = int(rng.integers(13, 41) if long else rng.integers(4, 13))
            slots, num_trials = int(rng.integers(1, 7)), int(rng.integers(2, 16))
        boundary = int(rng.choice([1, 1, 2, 3, 5]))
        boundary = boundary if boundary <= max_steps else 1
        trace = _trace(rng, space, mode, metric, bounds, level, max_steps, num_trials + 4)
        step_s = float(np.nanmean(trace.epoch_seconds))
        duration = num_trials * max_steps * step_s / slots  # about, with no policy stopping
        config = SimulatorConfig(
            boundary=boundary,
            num_trials=num_trials,
            bounds=bounds,
            max_time=20.0 * duration + 200.0,
        )
        if not fresh:
            faults = _faults(rng, num_trials, max_steps, slots, duration)
            config = dataclasses.replace(_with_costs(config, rng), faults=faults)
        mid = not fresh and rng.random() < 0.75
        return cls(
            seed=seed,
            trace=trace,
            config=config,
            slots=slots,
            switch_at=float(rng.uniform(0.02, 0.3)) * duration if mid else 0.0,
            users=0.0 if fresh else 0.03,
            predictions=SyntheticPredictions(trace, bounds, seed),
            space=space,
        )

    @property
    def context(self) -> StudyContext:
        """The study's context: the policy under check is built with it."""
        return simulation_context(self.trace, self.config)

    @property
    def max_time(self) -> float:
        """Seconds of simulated time after which a study that has not ended is cut."""
        return self.config.max_time

    def simulator(self, policy: Policy, traits: PolicyTraits | None = None) -> Simulator:
        """The simulator of this study with ``policy`` (taking it over in mid-course, with the
        users acting, as the study says); ``traits``: the policy's, for the prelude (forks for
        a policy that makes configurations)."""
        rng = np.random.default_rng([self.seed, 2])
        traits = traits or policy.traits
        posted: list[dict[str, Any]] = []
        users = Users(rng, posted, self.users) if self.users else None
        prelude = Prelude(rng, self.space, traits.makes_configurations)
        wrapped = mid_course(policy, prelude if self.switch_at else None, users, self.switch_at)
        return Simulator(
            self.trace,
            wrapped,
            slots=self.slots,
            seed=self.seed,
            config=self.config,
            predictions=self.predictions,
            inbox=posted,
        )


@dataclass
class _Curve:
    """A configuration's learning curve, normalised (0 worst, 1 best)."""

    start: float
    limit: float
    rate: float
    noise: float

    def at(self, steps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The values at ``steps`` (with noise)."""
        u = self.limit - (self.limit - self.start) * np.exp(-self.rate * steps)
        return np.clip(u + self.noise * rng.standard_normal(len(steps)), 0.0, 1.0)


def _new_curve(rng: np.random.Generator) -> _Curve:
    if rng.random() < 0.1:  # flat: ties between trials
        return _Curve(0.5, 0.5, 0.0, 0.0)
    start = float(rng.uniform(0.0, 0.3))
    return _Curve(
        start,
        float(rng.uniform(start, 1.0)),
        float(rng.uniform(0.02, 0.5)),
        float(rng.choice([0.0, 0.01, 0.05])),
    )


def _trace(
    rng: np.random.Generator,
    space: SearchSpace,
    mode: Mode,
    metric: str,
    bounds: tuple[float, float],
    level: float,
    max_steps: int,
    configs: int,
) -> Trace:
    """Made-up curves (5 % of the reports without the metric) and step times of ``configs``
    configurations drawn from ``space``."""
    low, high = bounds
    steps = np.arange(1, max_steps + 1)
    curves = np.empty((configs, max_steps))
    for row in range(configs):
        u = _new_curve(rng).at(steps, rng)
        curves[row] = low + u * (high - low) if mode == "max" else high - u * (high - low)
    curves[rng.random(curves.shape) < 0.05] = math.nan
    per_step = rng.uniform(0.5, 5.0, size=(configs, 1))
    seconds = per_step * rng.uniform(0.9, 1.1, size=(configs, max_steps))
    hparams = tuple(json_data(space.sample(rng)) for _ in range(configs))
    return Trace(
        curves,
        seconds,
        hparams,
        metric,
        mode,
        random_level=level if rng.random() < 0.5 else math.nan,
        source="hpctune.testing (made up)",
        metric_bounds=bounds,
        search_space=space.to_dict(),
    )


def _with_costs(config: SimulatorConfig, rng: np.random.Generator) -> SimulatorConfig:
    """``config`` with random costs besides training (queue, start-up, checkpoints, fits)."""

    def pick(values: list[float]) -> float:
        return float(rng.choice(values))

    # the controller answers at once now and then; mostly it is busy for a few steps' time
    poll = float(rng.choice([0.0, 1.0, 5.0, 10.0, 20.0], p=[0.1, 0.2, 0.3, 0.2, 0.2]))
    return dataclasses.replace(
        config,
        poll_interval=poll,
        queue_wait=pick([0.0, 0.0, 1.0, 5.0]),
        startup=pick([0.0, 1.0, 3.0]),
        suspend_cost=pick([0.0, 0.5]),
        resume_cost=pick([0.0, 0.5]),
        segment_start=pick([0.0, 0.2]),
        checkpoint_cost=pick([0.0, 0.1]),
        fit_seconds=pick([0.0, 0.0, 1.0, 5.0]),
    )


def _faults(
    rng: np.random.Generator, trials: int, max_steps: int, slots: int, duration: float
) -> Faults:
    """Trials that crash or end early at a step, and workers lost at a time."""
    crashes = {t: int(rng.integers(1, max_steps + 1)) for t in range(trials) if rng.random() < 0.1}
    early = {t: int(rng.integers(1, max_steps)) for t in range(trials) if rng.random() < 0.08}
    lost = {
        int(rng.integers(1, slots + 4)): float(rng.uniform(0.0, duration))
        for _ in range(int(rng.integers(0, 3)))
    }
    return Faults(crashes=crashes, ends_early=early, lost=lost)


__all__ = [
    "MidCourse",
    "Prelude",
    "RandomStudy",
    "SyntheticPredictions",
    "Users",
    "default_space",
    "json_data",
    "mid_course",
    "wrapper_type",
]
