"""The simulator's settings and its clock."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpctune.curves.options import RECALIBRATIONS
from hpctune.errors import HpctuneError
from hpctune.simulator.traces import Trace
from hpctune.stagetree.options import SCHEDULERS


class SimulatorError(HpctuneError):
    """A simulation was asked for with settings that cannot work."""

    exit_code = 2


@dataclass(frozen=True)
class Faults:
    """Bad luck in a simulated study: what the controller meets on a real cluster.

    Workers are numbered 1, 2, ... in the order the controller starts them (a number is the
    n-th worker of the study; a restarted controller's new workers go on counting).

    Attributes:
        crashes: Trial id -> the step whose training raises (the user's code fails there, in
            every segment of the trial that trains it): the segment ends ``failed`` with the
            error, as a real worker's end line tells a traceback.
        ends_early: Trial id -> the step after whose report its function returns without
            being told to (a training loop that stops short): the segment ends ``ended_early``
            (each segment of the trial that reports that step, before its last).
        lost: Worker number -> the time its process dies (a lost node, an OOM kill): no end
            line, no more heartbeats, and the executor finds it gone.
        hung: Worker number -> the time it stops (a stuck collective, a frozen file system):
            its process still runs as far as the executor can tell, but it trains no more and
            its heartbeat stays at that time, so only the heartbeat timeout can tell.
        worker_timeout: Seconds of silent heartbeat after which the controller declares a
            running worker lost (``HPCTUNE_WORKER_TIMEOUT`` of the real controller); the
            simulator's default never times a worker out.
        startup_timeout: Seconds a running worker may go without a heartbeat newer than the
            controller's first sight of it (a worker just started, or one a restarted
            controller finds silent) before it is lost; never, by default.
    """

    crashes: Mapping[int, int] = field(default_factory=dict)
    ends_early: Mapping[int, int] = field(default_factory=dict)
    lost: Mapping[int, float] = field(default_factory=dict)
    hung: Mapping[int, float] = field(default_factory=dict)
    worker_timeout: float = math.inf
    startup_timeout: float = math.inf

    def check(self) -> None:
        """Raise :class:`SimulatorError` naming the first fault that cannot happen."""
        for name in ("crashes", "ends_early"):
            for trial, step in getattr(self, name).items():
                if trial < 0 or step < 1:
                    raise SimulatorError(
                        f"faults.{name}: trial {trial} at step {step}: trials are >= 0 and "
                        "steps >= 1"
                    )
        for name in ("lost", "hung"):
            for number, t in getattr(self, name).items():
                if number < 1 or not (t >= 0 and math.isfinite(t)):
                    raise SimulatorError(
                        f"faults.{name}: worker {number} at {t!r}: workers are numbered "
                        "from 1 and times are finite seconds >= 0"
                    )
        for name in ("worker_timeout", "startup_timeout"):
            if not getattr(self, name) > 0:
                raise SimulatorError(f"faults.{name} must be > 0, but got {getattr(self, name)!r}")


@dataclass(frozen=True)
class SimulatorConfig:
    """What a simulated study costs besides training, and its study settings.

    Attributes:
        queue_wait: Seconds a new worker waits in the Slurm queue before it runs.
        startup: Seconds from a worker's start to its first step (imports, data loading).
        suspend_cost: Seconds a worker spends when a segment ends suspended (beyond the
            boundary's checkpoint).
        resume_cost: Seconds a segment that starts from a checkpoint spends loading it.
        segment_start: Seconds from an assignment to its segment's start on a worker that was
            idle (noticing the assignment, calling the training function).
        checkpoint_cost: Seconds of the checkpoint a worker writes at each boundary.
        fit_seconds: Seconds from the controller asking for a learning-curve fit (POP, EarlyTerm,
            hybrid) to its answer (the fit runs beside the study: nothing waits for it).
        poll_interval: Seconds between two iterations of the controller; 0 (the default): an
            iteration at every instant something happens, again while it changes something (a
            controller that answers at once). Above 0, the workers' events in between are
            carried out at their times and a worker waiting at a boundary may go on before the
            decision comes (a busy controller).
        boundary: The study's evaluation boundary in steps (``[study].boundary``).
        max_steps: The last step of a trial; ``None``: the trace's epochs.
        num_trials: How many configurations the generator offers; ``None``: all.
        target: The target value; ``None``: :meth:`Trace.default_target`.
        stop_at_target: End the simulation once the target is reached (and ``min_time`` has
            passed).
        min_time: With ``stop_at_target``, run at least until this time (so that the best
            value by a budget is known too).
        max_time: End the simulation at this time (seconds since the start).
        bounds: ``(low, high)``: the metric's range (``[study].metric_bounds``); ``None``: the
            trace's ``metric_bounds``, else (0, 1).
        stages: Run the study over a stage tree (``[stages] enabled``): trials whose
            hyperparameter sequences share a prefix train it once.
        stage_scheduler: With ``stages``, which ready stages a free worker gets
            (``[stages] scheduler``: ``"critical-path"``, ``"bfs"`` or ``"most-children"``).
        recalibrate: How the policy's learning-curve predictions are recalibrated with the
            study's own curves (``[curves] recalibrate``: ``"none"``, ``"spread"``, ``"full"``).
    """

    queue_wait: float = 0.0
    startup: float = 0.0
    suspend_cost: float = 0.0
    resume_cost: float = 0.0
    segment_start: float = 0.0
    checkpoint_cost: float = 0.0
    fit_seconds: float = 0.0
    poll_interval: float = 0.0
    boundary: int = 1
    max_steps: int | None = None
    num_trials: int | None = None
    target: float | None = None
    stop_at_target: bool = False
    min_time: float = 0.0
    max_time: float = math.inf
    bounds: tuple[float, float] | None = None
    stages: bool = False
    stage_scheduler: str = "critical-path"
    recalibrate: str = "none"
    faults: Faults = field(default_factory=Faults)

    def metric_bounds(self, trace: Trace) -> tuple[float, float]:
        """The metric's range: :attr:`bounds`, else the trace's, else (0, 1)."""
        return self.bounds or trace.metric_bounds or (0.0, 1.0)

    def check(self, trace: Trace) -> None:
        """Raise :class:`SimulatorError` naming the first setting that cannot work."""
        costs = ("queue_wait", "startup", "suspend_cost", "resume_cost", "checkpoint_cost")
        for name in (*costs, "fit_seconds", "segment_start", "poll_interval"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise SimulatorError(f"{name} must be a finite number >= 0, but got {value!r}")
        if self.boundary < 1:
            raise SimulatorError(f"boundary must be >= 1, but got {self.boundary}")
        if self.max_steps is not None and not 1 <= self.max_steps <= trace.num_epochs:
            raise SimulatorError(
                f"max_steps must be between 1 and the trace's {trace.num_epochs} epochs, "
                f"but got {self.max_steps}"
            )
        if self.num_trials is not None and not 1 <= self.num_trials <= trace.num_configs:
            raise SimulatorError(
                f"num_trials must be between 1 and the trace's {trace.num_configs} "
                f"configurations, but got {self.num_trials}"
            )
        if self.stage_scheduler not in SCHEDULERS:
            raise SimulatorError(
                f"stage_scheduler must be one of {', '.join(SCHEDULERS)}, but got "
                f"{self.stage_scheduler!r}"
            )
        if not self.max_time > 0:
            raise SimulatorError(f"max_time must be > 0, but got {self.max_time!r}")
        if self.recalibrate not in RECALIBRATIONS:
            raise SimulatorError(
                f"recalibrate must be one of {', '.join(RECALIBRATIONS)}, but got "
                f"{self.recalibrate!r}"
            )
        self.faults.check()


@dataclass(frozen=True)
class SimulationOptions:
    """A comparison of policies on a trace: what ``hpctune simulate`` runs (its options) and
    :func:`hpctune.api.simulate` takes; each simulated study's costs and settings are
    :attr:`config`.

    Attributes:
        trace: The trace file (HDF5, ``docs/traces.md``).
        policies: ``(name, options)`` of each policy to compare (options as under
            ``[policy]``); each runs once per seed.
        slots: Workers at once.
        seeds: Configuration orders: every policy runs with seeds ``0 .. seeds - 1``.
        budget: Also summarise the best value found by this time (seconds).
        generator: A generator proposing configurations (``"tpe"``, ``"gp"``, ...), each
            answered with the nearest unused configuration of the trace; ``None``: each
            seed's random order.
        generator_options: Its options (as under ``[generator]``).
        config: The simulated study's costs and settings.
        curve_model: The learning-curve model of POP and EarlyTerm (``[curves] model``).
        predictions: A JSON-lines file keeping learning-curve fits between runs; ``None``:
            kept for this comparison only.
        fit_workers: Processes fitting learning curves before the runs (``domhan``).
    """

    trace: Path
    policies: tuple[tuple[str, Mapping[str, Any]], ...]
    slots: int = 4
    seeds: int = 8
    budget: float | None = None
    generator: str | None = None
    generator_options: Mapping[str, Any] = field(default_factory=dict)
    config: SimulatorConfig = field(default_factory=SimulatorConfig)
    curve_model: str = "amortised"
    predictions: Path | None = None
    fit_workers: int = 2

    def check(self) -> None:
        """Raise :class:`SimulatorError` naming the first option that cannot work (the
        trace-dependent settings of :attr:`config` are checked with the trace)."""
        if not self.policies:
            raise SimulatorError("policies must name at least one policy")
        for name in ("slots", "seeds"):
            if getattr(self, name) < 1:
                raise SimulatorError(f"{name} must be >= 1, but got {getattr(self, name)}")
        if self.generator_options and self.generator is None:
            raise SimulatorError("generator_options are given without a generator")
        if self.fit_workers < 0:
            raise SimulatorError(f"fit_workers must be >= 0, but got {self.fit_workers}")


class SimClock:
    """Simulated time (the :class:`~hpctune.wire.clock.Clock` protocol): starts at 0."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        """Seconds since the simulated study started."""
        return self._now

    def sleep(self, seconds: float) -> None:
        """Advance the time by ``seconds``."""
        self._now += max(seconds, 0.0)

    def advance_to(self, t: float) -> None:
        """Move the time to ``t`` (never backwards)."""
        if t < self._now:
            raise ValueError(f"simulated time cannot go back from {self._now} to {t}")
        self._now = t


__all__ = ["Faults", "SimClock", "SimulationOptions", "SimulatorConfig", "SimulatorError"]
