"""The engine: the controller itself, run on a trace in simulated time.

A simulated study is a real :class:`~hpctune.core.SchedulingCore` built in memory
(:func:`memory_core`): its journal is a
:class:`~hpctune.journal.memory.MemoryJournal`, its clock a :class:`SimClock`, its workers the
simulated ones of :mod:`._workers` (a wire and an executor in memory) and its curve fits come
from the trace (:class:`SimCurveService`). Every rule that turns events into assignments and
decisions — the policy's calls, slots, suspend and resume, retries, PBT forks, stage trees,
checkpoint collection — is therefore the controller's own code: what is simulated is what runs.

The loop, in the spirit of Syne Tune's simulator backend: the workers' events wait on a heap
keyed ``(time, counter)``; at each instant every event due is carried out (workers write their
event lines), then the controller runs one iteration, again while an iteration changes something
at that instant (the real controller polls every 0.1 s: it answers at once, as far as the
trace's seconds can tell), and the clock moves to the next event.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from hpctune.core import CoreSettings, SchedulingCore
from hpctune.core.wire import Wire
from hpctune.curves.fitter import FitOptions
from hpctune.curves.predict import CurvePrediction
from hpctune.curves.service import FitJob, FitResult
from hpctune.files import dumps
from hpctune.journal import state as st
from hpctune.journal.delta import policy_states
from hpctune.journal.memory import MemoryJournal
from hpctune.journal.reader import load_state
from hpctune.journal.state import StudyRecord
from hpctune.policies import ActionKind, Policy, StudyContext, StudyView
from hpctune.policies.generators import Generator, Proposal
from hpctune.simulator._config import SimClock, SimulatorConfig, SimulatorError
from hpctune.simulator._predictions import PredictionCache, Predictions
from hpctune.simulator._results import (
    DecisionRecord,
    SegmentSpan,
    SimulationResult,
    TrialOutcome,
    WorkerSpan,
)
from hpctune.simulator._workers import TraceRows, Workers
from hpctune.simulator.nearest import NearestConfigurations, trace_space
from hpctune.simulator.traces import Trace
from hpctune.spec import StudySpec, study_context
from hpctune.stagetree.options import stage_policies
from hpctune.study.seeding import component_seed, index_rng
from hpctune.study.states import SegmentStatus, StudyState, TrialStatus
from hpctune.wire.layout import StudyPaths

if TYPE_CHECKING:
    from hpctune.backends.base import Executor

MAX_ITERATIONS_PER_INSTANT = 50  # iterations at one instant before the clock must move
# records after which another iteration at the same instant has nothing new to do
_BOOKKEEPING = frozenset({st.CHECKPOINT_DELETED, st.POLICY_STATE, st.POLICY_DELTA})


class TraceOrder(Generator):
    """Proposes the trace's configurations in a given order (random search over the trace)."""

    name: ClassVar[str] = "trace-order"

    def __init__(self, trace: Trace, order: list[int]) -> None:
        super().__init__(trace_space(trace), 0)
        self.trace = trace
        self.order = order

    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        return dict(self.trace.hparams[self.order[index]])

    def propose(self, index: int, view: StudyView | None = None) -> Proposal:
        row = self.order[index]
        return Proposal(dict(self.trace.hparams[row]), {"trace_row": row})


class NearestInTrace(Generator):
    """A generator's proposals answered with the nearest configuration of the trace not used
    yet (:mod:`hpctune.simulator.nearest`)."""

    name: ClassVar[str] = "nearest-in-trace"
    predictable: ClassVar[bool] = False

    def __init__(self, trace: Trace, inner: Generator, nearest: NearestConfigurations) -> None:
        super().__init__(inner.space, inner.seed)
        self.trace = trace
        self.inner = inner
        self.nearest = nearest
        self.proposals: list[dict[str, Any]] = []  # the inner generator's, by trial

    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        return self.propose(index, view).params

    def propose(self, index: int, view: StudyView | None = None) -> Proposal:
        proposal = self.inner.propose(index, view)
        row = self.nearest.take(proposal.params)
        if row is None:
            raise SimulatorError("the generator asked for more configurations than the trace has")
        self.proposals.append(proposal.params)
        return Proposal(dict(self.trace.hparams[row]), {**proposal.info, "trace_row": row})


@dataclass
class SimCurveService:
    """The controller's curve-fit service in simulation: each fit is answered from the trace's
    predictions (:class:`PredictionCache`, fitted once per configuration and number of points),
    ``fit_seconds`` of simulated time after it was asked for (at once by default).

    A fit in flight when the controller is replaced (:meth:`Simulator.restart_controller`) is
    lost, as a killed controller's fits are; the new controller asks for it again.
    """

    cache: Predictions
    rows: TraceRows
    record: StudyRecord
    x_max: int
    folder: Path
    options: FitOptions
    clock: SimClock = field(default_factory=SimClock)
    fit_seconds: float = 0.0
    requested: int = 0  # fits asked for, over the whole simulation
    _pending: list[tuple[float, int, FitResult]] = field(default_factory=list)

    def request(self, job: FitJob) -> None:
        """Answer the fit of ``job`` once ``fit_seconds`` have passed."""
        row = self.rows.row(self.record, job.trial_id)
        prediction = self.cache.get(row, job.n, self.x_max)
        result = FitResult(job, prediction, self.fit_seconds, "simulated")
        heapq.heappush(
            self._pending, (self.clock.now() + self.fit_seconds, self.requested, result)
        )
        self.requested += 1

    def load(self, trial_id: int, n: int) -> CurvePrediction:
        """A prediction journaled before (as a controller reads it back from its result
        file, when it restarts)."""
        return self.cache.get(self.rows.row(self.record, trial_id), n, self.x_max)

    def poll(self) -> list[FitResult]:
        """The answers due by now, in the order they were asked for."""
        done: list[FitResult] = []
        while self._pending and self._pending[0][0] <= self.clock.now():
            done.append(heapq.heappop(self._pending)[2])
        return done

    def next_time(self) -> float | None:
        """When the next fit in flight is answered, ``None`` when none is."""
        return self._pending[0][0] if self._pending else None

    def close(self) -> None:
        """Drop the fits in flight (the controller that asked for them is gone)."""
        self._pending.clear()


def memory_core(
    record: StudyRecord,
    journal: MemoryJournal,
    wire: Wire,
    executor: Executor,
    clock: SimClock,
    *,
    policy: Policy | None = None,
    generator: Generator | None = None,
    curve_service: SimCurveService | None = None,
    settings: CoreSettings | None = None,
) -> SchedulingCore:
    """The scheduling core of a study that exists only in memory: no study directory, no lease,
    no files; ``wire`` and ``executor`` stand for the workers.

    ``policy`` and ``generator`` replace the ones the spec names (e.g. a policy object that is
    not registered, or a generator answered from a trace); ``curve_service`` answers the curve
    fits; ``settings``: :meth:`CoreSettings.in_memory` by default (simulated workers do not
    hang unless told).
    """
    service = curve_service
    return SchedulingCore(
        record,
        writer=journal,
        wire=wire,
        executor=executor,
        clock=clock,
        paths=StudyPaths.of(record.spec.get("directory") or "simulated-study"),
        settings=settings or CoreSettings.in_memory(),
        curve_service=None if service is None else lambda options: service,
        policy=policy,
        generator=generator,
    )


def simulation_spec(
    trace: Trace,
    policy: Policy,
    *,
    slots: int,
    seed: int,
    config: SimulatorConfig,
    num_trials: int,
) -> StudySpec:
    """The spec of a simulated study of ``trace`` (what ``hpctune export-trace`` recorded)."""
    bounds = config.metric_bounds(trace)
    data: dict[str, Any] = {
        "source": "",
        "name": "simulation",
        "directory": "simulated-study",
        "entry": {"file": None, "module": "simulated", "function": "train"},
        "metric": trace.metric,
        "mode": trace.mode,
        "max_steps": config.max_steps or trace.num_epochs,
        "step_unit": "step",
        "boundary": config.boundary,
        "num_trials": num_trials,
        "seed": seed,
        "fail_fast": False,
        "max_retries": 3,
        "space": trace_space(trace).to_dict(),
        "generator": {"name": "random", "options": {}},
        "policy": {"name": policy.name, "options": _options_dict(policy)},
        "resources": {"slots": slots, "cpus_per_worker": 1, "gpus_per_worker": 0},
        "metric_bounds": list(bounds),
        "random_level": None if math.isnan(trace.random_level) else trace.random_level,
        "report_timeout": 0.0,
        "stages": {"enabled": config.stages, "scheduler": config.stage_scheduler},
        "best": "last" if policy.traits.makes_configurations else "peak",
        "keep_checkpoints": "last",
        "curves": {"recalibrate": config.recalibrate},
    }
    return StudySpec.from_dict(data)


def simulation_context(trace: Trace, config: SimulatorConfig | None = None) -> StudyContext:
    """The study context a policy simulated on ``trace`` with ``config`` is built with (that
    of :func:`simulation_spec`'s study: :func:`~hpctune.spec.study_context`)."""
    config = config or SimulatorConfig()
    return StudyContext(
        max_steps=config.max_steps or trace.num_epochs, mode=trace.mode, boundary=config.boundary
    )


class Simulator:
    """Replay ``trace`` on ``slots`` slots under ``policy``, with the controller's own code.

    Args:
        trace: The workload.
        policy: The policy object (fresh, or restored with ``load_state_dict``), built with
            :func:`simulation_context` of ``trace`` and ``config``.
        slots: How many workers may run at once.
        seed: The study's seed: the configuration order and the policy's random numbers.
        config: Costs and study settings.
        order: The configuration order (indices into the trace); ``None``: a permutation drawn
            from ``seed``, standing for the generator.
        predictions: Learning-curve predictions for policies that want them (POP, EarlyTerm);
            ``None``: fitted on demand, in this process.
        generator: A generator that proposes each new trial's configuration from the view (TPE,
            GP, ...; built on the trace's search space); each proposal is answered with the
            nearest configuration of the trace not used yet (:mod:`hpctune.simulator.nearest`).
            ``None``:
            the configuration order ``order``.
        inbox: A list the study's users append inbox commands to while it runs (``stop_trial``,
            ``retry``, ...: :mod:`hpctune.wire.inbox`); the controller reads them at its next
            iteration, as it reads its inbox.
    """

    def __init__(
        self,
        trace: Trace,
        policy: Policy,
        *,
        slots: int,
        seed: int = 0,
        config: SimulatorConfig | None = None,
        order: list[int] | None = None,
        predictions: Predictions | None = None,
        generator: Generator | None = None,
        inbox: list[dict[str, Any]] | None = None,
    ) -> None:
        self.config = config or SimulatorConfig()
        self.config.check(trace)
        if slots < 1:
            raise SimulatorError(f"slots must be >= 1, but got {slots}")
        if self.config.stages and not policy.traits.runs_on_stage_trees:
            raise SimulatorError(
                f"stages: stage trees run with the policies {', '.join(stage_policies())}, not "
                f"{policy.name!r}"
            )
        self.trace = trace
        self.policy = policy
        self.slots = slots
        self.seed = seed
        self.clock = SimClock()
        self.max_steps = self.config.max_steps or trace.num_epochs
        if order is None:
            order = [
                int(i)
                for i in index_rng(component_seed(seed, "order"), 0).permutation(trace.num_configs)
            ]
        bad = [i for i in order if not 0 <= i < trace.num_configs]
        if bad:
            raise SimulatorError(f"order names configurations {bad} not in the trace")
        self.order = list(order)
        limit = self.config.num_trials or len(self.order)
        self.num_trials = min(limit, len(self.order))
        self.target = (
            self.config.target if self.config.target is not None else trace.default_target()
        )
        nearest = NearestConfigurations(trace_space(trace), trace.hparams)
        self.generator: Generator = TraceOrder(trace, self.order)
        self.nearest_generator: NearestInTrace | None = None
        if generator is not None:
            used = NearestConfigurations(trace_space(trace), trace.hparams)
            self.nearest_generator = NearestInTrace(trace, generator, used)
            self.generator = self.nearest_generator
        spec = simulation_spec(
            trace,
            policy,
            slots=slots,
            seed=seed,
            config=self.config,
            num_trials=self.num_trials,
        )
        context = study_context(spec)
        if policy.context != context:
            raise SimulatorError(
                f"the policy {policy.name!r} was built for the study {policy.context}, but the "
                f"simulated study is {context}; build it with simulation_context(trace, config)"
            )
        self.record = StudyRecord()
        created = {
            "state": StudyState.CREATED.value,
            "spec": spec.to_dict(),
            "reason": "simulated",
        }
        self.record.apply(st.STUDY, -1, -1, 0.0, created)
        self.journal = MemoryJournal()
        self.journal.append(
            "log", kind=st.STUDY, trial=-1, segment=-1, time=0.0, data=dumps(created)
        )
        self.journal.commit({})
        self.rows = TraceRows(trace, nearest)
        self.workers = Workers(
            trace, self.config, self.clock, slots, self.rows, self.record, self._on_report, inbox
        )
        self.curves: SimCurveService | None = None
        if policy.traits.wants_predictions:
            source = predictions or PredictionCache(trace, bounds=self.config.metric_bounds(trace))
            self.curves = SimCurveService(
                source,
                self.rows,
                self.record,
                self.max_steps,
                StudyPaths.of(spec.directory).curves,
                FitOptions(model=spec.curves.model, budget=spec.curves.budget),
                clock=self.clock,
                fit_seconds=self.config.fit_seconds,
            )
        self.controller = self._core(self.record, policy)
        self.restarts = 0
        self._reached: tuple[float, int] | None = None  # (time, trial) of the first target hit
        self._incumbent: list[tuple[float, float, int]] = []
        self._end_time = 0.0

    def _core(self, record: StudyRecord, policy: Policy) -> SchedulingCore:
        """A scheduling core of this simulation's study, on ``record`` (the journal's fold)."""
        faults = self.config.faults
        return memory_core(
            record,
            self.journal,
            self.workers.wire,
            self.workers.executor,
            self.clock,
            policy=policy,
            generator=self.generator,
            curve_service=self.curves,
            settings=CoreSettings.in_memory(
                worker_timeout=faults.worker_timeout, startup_timeout=faults.startup_timeout
            ),
        )

    @property
    def proposals(self) -> list[dict[str, Any]]:
        """The model-based generator's own proposals, by trial (before the nearest rule)."""
        return [] if self.nearest_generator is None else self.nearest_generator.proposals

    def _on_report(self, t: float, trial: int, row: int, step: int, value: float) -> None:
        sign = self.trace.sign
        if not self._incumbent or sign * value > sign * self._incumbent[-1][1]:
            self._incumbent.append((t, value, trial))
        if self._reached is None and sign * value >= sign * self.target:
            self._reached = (t, trial)

    def restart_controller(self) -> None:
        """Replace the controller with a new one built from what the journal holds, as a killed
        controller resumed: its state, the policy's, the read positions of the workers' event
        lines; the workers go on and are adopted. The new policy is built as the old one was
        (its class, options and study)."""
        self.controller.curves.close()
        record = load_state(self.journal)
        self.record = self.workers.record = record
        if self.curves is not None:
            self.curves.record = record
        self.controller = self._core(
            record,
            type(self.policy).from_options(self.policy.context, _options_dict(self.policy)),
        )
        self.controller.start()  # reloads the journaled predictions, asks again for the fits
        # the killed controller had in flight
        self.restarts += 1

    def run(self, restart_at: Sequence[float] = ()) -> SimulationResult:
        """Run to the end of the study (or the target, or ``max_time``); return the result.

        ``restart_at``: simulated times at which the controller is replaced by a new one built
        from the journal (:meth:`restart_controller`), before its first iteration at or after
        each (a controller killed between two iterations and resumed).
        """
        restarts = sorted(restart_at)
        self.controller.start()
        quiet = 0  # iterations in a row at one instant with nothing due
        while True:
            while restarts and self.clock.now() >= restarts[0]:
                restarts.pop(0)
                self.restart_controller()
            controller = self.controller
            logged, writes = len(self.journal.rows["log"]), self.workers.writes
            if controller.step():
                break
            if (
                self.config.stop_at_target
                and self._reached is not None
                and self.clock.now() >= self.config.min_time
            ):
                break
            now = self.clock.now()
            due = self._next_time()
            poll = self.config.poll_interval
            if not poll and due is not None and due <= now:  # the workers act at this instant
                self.workers.run_until(now)
                continue
            changed = writes != self.workers.writes or any(
                row["kind"] not in _BOOKKEEPING for row in self.journal.rows["log"][logged:]
            )
            if not poll and changed and quiet < MAX_ITERATIONS_PER_INSTANT:
                quiet += 1
                continue  # the controller goes on at this instant (e.g. workers exiting)
            quiet = 0
            if due is None and self.workers.tick():
                due = self._next_time()
            if due is None and poll and changed:
                due = now  # nothing is due, but the controller polls again (workers exiting)
            if due is None:
                raise SimulatorError(
                    "the simulated study does not end: nothing runs and the controller keeps "
                    f"waiting (study {controller.state.state.value}: {controller.state.reason})"
                )
            if max(due, now + poll) > self.config.max_time:
                self.clock.advance_to(self.config.max_time)
                break
            if poll:
                self._advance(max(due, now + poll))
            else:
                self.clock.advance_to(due)
                self.workers.run_until(due)
        self._end_time = self.clock.now()
        self.controller.curves.close()
        return self._result()

    def _advance(self, until: float) -> None:
        """Carry out every worker event up to ``until``, each at its own time, then move the
        clock there (the controller's next iteration, ``poll_interval`` after its last)."""
        while (due := self.workers.next_time()) is not None and due <= until:
            self.clock.advance_to(due)
            self.workers.run_until(due)
        self.clock.advance_to(until)

    def _next_time(self) -> float | None:
        """When the next worker event or curve fit is due, ``None`` when none is."""
        times = [self.workers.next_time(), self.curves.next_time() if self.curves else None]
        due = [t for t in times if t is not None]
        return min(due) if due else None

    # -- the result ---------------------------------------------------------------------------

    def _result(self) -> SimulationResult:
        end = self._end_time
        record = self.record
        reached = self._reached
        workers = list(self.workers.workers.values())

        def held(until: float) -> float:
            return sum(
                max(min(w.exited if w.exited is not None else until, until) - w.started, 0.0)
                for w in workers
            )

        to_target = None if reached is None else held(reached[0]) / 3600.0
        suspensions = {
            t.trial_id: sum(c.status is TrialStatus.SUSPENDED for c in t.history)
            for t in record.trials.values()
        }
        suspensions = {tid: n for tid, n in suspensions.items() if n}
        spans = []
        for worker in workers:
            for run in worker.runs:
                a = run.assignment
                seg = record.segments.get(a.segment_id)
                outcome = seg.status if seg is not None else SegmentStatus.RUNNING
                spans.append(
                    SegmentSpan(
                        slot=worker.slot,
                        worker=_number(worker.worker_id),
                        trial=a.trial_id,
                        config=run.row,
                        start=run.began,
                        end=run.ended if run.ended is not None else end,
                        start_step=a.start_step,
                        end_step=run.step,
                        outcome=outcome if run.ended is not None else SegmentStatus.RUNNING,
                    )
                )
        spans.sort(key=lambda s: (s.start, s.slot))
        statuses = [t.status for t in record.trials.values()]
        trials = [
            TrialOutcome(
                t.trial_id,
                self.rows.row(record, t.trial_id),
                t.status,
                t.step,
                suspensions.get(t.trial_id, 0),
                t.reason,
            )
            for t in record.trials.values()
        ]
        return SimulationResult(
            policy=self.policy.name,
            options=_options_dict(self.policy),
            slots=self.slots,
            seed=self.seed,
            target=self.target,
            mode=self.trace.mode,
            time_to_target=None if reached is None else reached[0],
            target_trial=None if reached is None else reached[1],
            end_time=end,
            gpu_hours=held(end) / 3600.0,
            gpu_hours_to_target=to_target,
            training_hours=self.workers.training_s / 3600.0,
            trials_started=len(record.trials),
            trials_completed=statuses.count(TrialStatus.COMPLETED),
            trials_terminated=statuses.count(TrialStatus.TERMINATED),
            trials_suspended=len(suspensions),
            suspensions=sum(suspensions.values()),
            trials_out_of_trace=sum(
                t.status is TrialStatus.FAILED and "the trace has no step" in t.reason
                for t in record.trials.values()
            ),
            ignored_actions=0,
            incumbent=tuple(self._incumbent),
            decisions=tuple(self._decisions()),
            segments=tuple(spans),
            workers=tuple(
                WorkerSpan(
                    slot=w.slot,
                    worker=_number(w.worker_id),
                    submitted=w.submitted,
                    started=w.started,
                    ready=w.ready,
                    exited=w.exited if w.exited is not None else end,
                )
                for w in workers
            ),
            trials=tuple(trials),
            policy_states=tuple(self._policy_states()),
        )

    def _decisions(self) -> list[DecisionRecord]:
        """Every suspend and terminate the controller carried out, from its journal: decisions
        sent to running segments, and terminations of trials not running."""
        out = []
        ending: dict[int, bool] = {}  # trial -> its last row was its segment's end
        for row in self.journal.rows["log"]:
            kind, trial = row["kind"], int(row["trial"])
            wanted = kind in (st.DECISION, st.TRIAL_STATUS)
            data = _data(row["data"]) if wanted else {}
            if kind == st.DECISION and data.get("decision") in ("stop", "suspend"):
                what = ActionKind.TERMINATE if data["decision"] == "stop" else ActionKind.SUSPEND
                out.append(self._decision(row, trial, int(data.get("step") or 0), what, data))
            elif (
                kind == st.TRIAL_STATUS
                and data.get("status") == TrialStatus.TERMINATED.value
                and not ending.get(trial, False)
            ):
                step = self._step_at(trial, float(row["time"]))
                out.append(self._decision(row, trial, step, ActionKind.TERMINATE, data))
            if trial >= 0:
                ending[trial] = kind == st.SEGMENT_ENDED
        return out

    def _decision(
        self, row: dict[str, Any], trial: int, step: int, kind: ActionKind, data: dict[str, Any]
    ) -> DecisionRecord:
        config = self.rows.row(self.record, trial)
        return DecisionRecord(
            float(row["time"]), trial, config, step, kind, str(data.get("reason", ""))
        )

    def _step_at(self, trial_id: int, t: float) -> int:
        trial = self.record.trials[trial_id]
        steps = [s for s, tt in zip(trial.curve_steps, trial.curve_times, strict=True) if tt <= t]
        return steps[-1] if steps else 0

    def _policy_states(self) -> list[tuple[float, dict[str, Any]]]:
        return policy_states(
            (float(row["time"]), row["kind"], _data(row["data"]))
            for row in self.journal.rows["log"]
            if row["kind"] in (st.POLICY_STATE, st.POLICY_DELTA)
        )


def _data(text: Any) -> dict[str, Any]:
    data = json.loads(text) if isinstance(text, str) else text
    return data if isinstance(data, dict) else {}


def _number(worker_id: str) -> int:
    return int(worker_id.lstrip("w") or 0)


def _options_dict(policy: Policy) -> dict[str, Any]:
    options = getattr(policy, "options", None)
    if options is None or not hasattr(options, "__dataclass_fields__"):
        return {}
    return {name: getattr(options, name) for name in options.__dataclass_fields__}


__all__ = [
    "SimClock",
    "Simulator",
    "SimulatorConfig",
    "SimulatorError",
    "simulation_context",
    "simulation_spec",
]
