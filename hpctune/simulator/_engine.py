"""The discrete-event engine: a trace replayed on S slots under one policy, in simulated time.

It plays the controller's part with the controller's rules (``hpctune/controller/_loop.py``) and
the workers' part with the worker's (``hpctune/worker.py``, ``hpctune/context.py``), on an event
heap keyed ``(time, counter)`` (first in, first out at equal times) as Syne Tune's simulator
backend does. All events of one instant form a batch, as one iteration of the controller
ingests everything that arrived: first the workers' events are applied (reports, segment ends,
workers ready), then the policy sees REPORT and BOUNDARY events of trials still running (one
view for the batch), then, if anything changed, SLOT_FREE with the free slots.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from hpctune.curves import CurvePrediction
from hpctune.nearest import NearestConfigurations, trace_space
from hpctune.policies import Action, ActionKind, Event, Policy, StudyView, TrialView
from hpctune.policies.generators import Generator
from hpctune.seeding import component_seed, index_rng
from hpctune.simulator._config import SimClock, SimulatorConfig, SimulatorError
from hpctune.simulator._predictions import PredictionCache
from hpctune.simulator._results import (
    DecisionRecord,
    SegmentSpan,
    SimulationResult,
    TrialOutcome,
    WorkerSpan,
)
from hpctune.states import Decision, SegmentStatus, TrialStatus
from hpctune.traces import Trace


class _Kind(Enum):
    WORKER_READY = "worker_ready"
    STEP_DONE = "step_done"
    SEGMENT_END = "segment_end"


@dataclass
class _Trial:
    trial_id: int
    config: int
    status: TrialStatus = TrialStatus.QUEUED
    step: int = 0
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    priority: float = 0.0
    checkpoint_step: int | None = None
    segment: int | None = None  # its latest segment
    suspensions: int = 0
    reason: str = ""
    view: TrialView | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the generator's, as journaled


@dataclass
class _Worker:
    worker_id: int
    slot: int
    submitted: float
    started: float
    ready: float
    exited: float | None = None
    segment: int | None = None


@dataclass
class _Segment:
    segment_id: int
    trial_id: int
    worker_id: int
    start_step: int
    until_step: int
    assigned: float
    began: float | None = None
    ended: float | None = None
    end_step: int | None = None
    outcome: SegmentStatus = SegmentStatus.RUNNING
    decision: Decision | None = None  # the last non-continue decision sent to it
    reason: str = ""
    waiting: bool = False  # at a boundary, waiting for the policy's decision
    ending: bool = False  # its end is scheduled


class Simulator:
    """Replay ``trace`` on ``slots`` slots under ``policy``.

    Args:
        trace: The workload.
        policy: The policy object (fresh, or restored with ``load_state_dict``).
        slots: How many workers may run at once.
        seed: Seeds the configuration order and the policy's random numbers.
        config: Costs and study settings.
        order: The configuration order (indices into the trace); ``None``: a permutation drawn
            from ``seed``, standing for the generator.
        predictions: Learning-curve predictions for policies that want them (POP, EarlyTerm);
            ``None``: fitted on demand, in this process.
        generator: A generator that proposes each new trial's configuration from the view (TPE,
            GP, ...; built on the trace's search space); each proposal is answered with the
            nearest configuration of the trace not used yet (:mod:`._nearest`). ``None``: the
            configuration order ``order``.
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
        predictions: PredictionCache | None = None,
        generator: Generator | None = None,
    ) -> None:
        self.config = config or SimulatorConfig()
        self.config.check(trace)
        if slots < 1:
            raise SimulatorError(f"slots must be >= 1, but got {slots}")
        if policy.makes_configurations:
            raise SimulatorError(
                f"policy {policy.name!r} creates configurations of its own (forks from "
                "checkpoints), which a trace cannot replay; measure it on real runs "
                "(benchmarks/pbt.py)"
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
        self.generator = generator
        self.nearest: NearestConfigurations | None = None
        self.proposals: list[dict[str, Any]] = []  # the generator's, by trial
        if generator is not None:
            self.nearest = NearestConfigurations(trace_space(trace), trace.hparams)
        limit = self.config.num_trials or len(self.order)
        self.num_trials = min(limit, len(self.order))
        self.target = (
            self.config.target if self.config.target is not None else trace.default_target()
        )
        self._policy_seed = component_seed(seed, "policy")
        self._decide_calls = 0
        self.prediction_source = predictions
        if policy.wants_predictions and predictions is None:
            bounds = self.config.metric_bounds(trace)
            self.prediction_source = PredictionCache(trace, bounds=bounds)
        self.predictions: dict[int, CurvePrediction] = {}
        self._policy_states: list[tuple[float, dict[str, Any]]] = []
        self._heap: list[tuple[float, int, _Kind, int, int]] = []
        self._counter = 0
        self.trials: dict[int, _Trial] = {}
        self.workers: dict[int, _Worker] = {}
        self.segments: dict[int, _Segment] = {}
        self._active: dict[int, _Segment] = {}  # segments not ended, by id
        self._waiting: list[_Segment] = []  # at a boundary, waiting for the decision
        self.decisions: list[DecisionRecord] = []
        self._dirty = True
        self._finished = False
        self._reached: tuple[float, int] | None = None  # (time, trial) of the first target hit
        self._incumbent: list[tuple[float, float, int]] = []
        self._training_s = 0.0
        self._ignored = 0
        self._end_time = 0.0

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> SimulationResult:
        """Run to the end of the study (or the target, or ``max_time``); return the result."""
        self._offer_slots()
        while self._heap and not self._finished:
            t = self._heap[0][0]
            if t > self.config.max_time:
                self.clock.advance_to(self.config.max_time)
                break
            self.clock.advance_to(t)
            events: list[Event] = []
            while self._heap and self._heap[0][0] <= t:
                _, _, kind, a, b = heapq.heappop(self._heap)
                self._handle(kind, a, b, events)
            if events:
                self._deliver(events)
            waiting, self._waiting = self._waiting, []
            for seg in waiting:
                self._proceed(seg)
            if (
                self.config.stop_at_target
                and self._reached is not None
                and self.clock.now() >= self.config.min_time
            ):
                break
            self._offer_slots()
            self._record_policy_state()
        self._end_time = self.clock.now()
        for worker in self.workers.values():
            if worker.exited is None:
                worker.exited = max(self._end_time, worker.started)
        return self._result()

    def _record_policy_state(self) -> None:
        state = self.policy.state_dict()
        if state and (not self._policy_states or self._policy_states[-1][1] != state):
            self._policy_states.append((self.clock.now(), state))

    def _push(self, t: float, kind: _Kind, a: int, b: int = 0) -> None:
        heapq.heappush(self._heap, (t, self._counter, kind, a, b))
        self._counter += 1

    def _rng(self) -> np.random.Generator:
        self._decide_calls += 1
        return index_rng(self._policy_seed, self._decide_calls)

    # -- worker side --------------------------------------------------------------------------

    def _handle(self, kind: _Kind, a: int, b: int, events: list[Event]) -> None:
        now = self.clock.now()
        if kind is _Kind.WORKER_READY:
            worker = self.workers[a]
            if worker.segment is not None:
                self._begin(self.segments[worker.segment], now)
        elif kind is _Kind.STEP_DONE:
            self._step_done(self.segments[a], b, now, events)
        else:
            self._segment_end(self.segments[a], now)

    def _begin(self, seg: _Segment, now: float) -> None:
        """The worker starts a segment: load the checkpoint, train the first step."""
        seg.began = now
        if seg.start_step > 0:
            now += self.config.resume_cost
        self._schedule_step(seg, seg.start_step + 1, now)

    def _schedule_step(self, seg: _Segment, step: int, now: float) -> None:
        config = self.trials[seg.trial_id].config
        seconds = float(self.trace.epoch_seconds[config, step - 1])
        if math.isnan(seconds):
            seg.reason = f"the trace has no step {step} of configuration {config}"
            self._end(seg, step - 1, SegmentStatus.FAILED, now)
            return
        self._push(now + seconds, _Kind.STEP_DONE, seg.segment_id, step)

    def _step_done(self, seg: _Segment, step: int, now: float, events: list[Event]) -> None:
        trial = self.trials[seg.trial_id]
        config = trial.config
        self._training_s += float(self.trace.epoch_seconds[config, step - 1])
        value = float(self.trace.curves[config, step - 1])
        trial.step = step
        if not math.isnan(value):
            trial.steps.append(step)
            trial.values.append(value)
            trial.times.append(now)
            self._on_value(trial, value, now)
        trial.view = None
        events.append(Event.report(trial.trial_id, step))
        last = step >= seg.until_step
        boundary = step % self.config.boundary == 0 or last
        if boundary:
            events.append(Event.boundary(trial.trial_id, step))
            self._predict(trial, step, events)
        checkpoint = self.config.checkpoint_cost if boundary else 0.0
        if last:
            done = step >= self.max_steps
            outcome = SegmentStatus.COMPLETED if done else SegmentStatus.SUSPENDED
            self._end(seg, step, outcome, now + checkpoint)
        elif seg.decision is not None:  # read at this report
            self._end_by_decision(seg, step, now + checkpoint)
        elif boundary and self.policy.boundary_decisions:
            seg.waiting = True  # the worker waits for the decision at the boundary
            self._waiting.append(seg)
        else:  # it goes on; a decision taken now is read at the next report
            self._schedule_step(seg, step + 1, now + checkpoint)

    def _predict(self, trial: _Trial, step: int, events: list[Event]) -> None:
        """Give a policy that wants predictions the trial's fit at ``step`` (no delay)."""
        source = self.prediction_source
        if source is None or not self.policy.wants_fit(step) or step >= self.max_steps:
            return
        self.predictions[trial.trial_id] = source.get(trial.config, step, self.max_steps)
        trial.view = None
        events.append(Event.prediction(trial.trial_id, step))

    def _proceed(self, seg: _Segment) -> None:
        """After the decision at a boundary: go on, or end the segment."""
        seg.waiting = False
        now = self.clock.now() + self.config.checkpoint_cost
        step = self.trials[seg.trial_id].step
        if seg.decision is not None:
            self._end_by_decision(seg, step, now)
        else:
            self._schedule_step(seg, step + 1, now)

    def _end_by_decision(self, seg: _Segment, step: int, now: float) -> None:
        stop = seg.decision is Decision.STOP
        self._end(seg, step, SegmentStatus.TERMINATED if stop else SegmentStatus.SUSPENDED, now)

    def _end(self, seg: _Segment, step: int, outcome: SegmentStatus, at: float) -> None:
        if seg.ending:
            return
        seg.ending = True
        seg.end_step = step
        seg.outcome = outcome
        if outcome is SegmentStatus.SUSPENDED:
            at += self.config.suspend_cost
        self._push(at, _Kind.SEGMENT_END, seg.segment_id)

    def _segment_end(self, seg: _Segment, now: float) -> None:
        seg.ended = now
        del self._active[seg.segment_id]
        if seg.outcome is SegmentStatus.SUSPENDED and seg.decision is Decision.STOP:
            seg.outcome = SegmentStatus.TERMINATED  # it reached its end before it read the stop
        trial = self.trials[seg.trial_id]
        worker = self.workers[seg.worker_id]
        worker.segment = None
        status = {
            SegmentStatus.COMPLETED: TrialStatus.COMPLETED,
            SegmentStatus.SUSPENDED: TrialStatus.SUSPENDED,
            SegmentStatus.TERMINATED: TrialStatus.TERMINATED,
            SegmentStatus.FAILED: TrialStatus.FAILED,  # out of trace
        }[seg.outcome]
        self._set_status(trial, status, seg.reason)
        if status is TrialStatus.SUSPENDED:
            trial.suspensions += 1
            trial.checkpoint_step = self._checkpoint_at(seg)

    def _checkpoint_at(self, seg: _Segment) -> int:
        """The last checkpoint of a segment: its end if that is a boundary or its last step,
        else the last boundary before (or where it started)."""
        end = seg.end_step if seg.end_step is not None else seg.start_step
        if end % self.config.boundary == 0 or end >= seg.until_step:
            return end
        return max(end - end % self.config.boundary, seg.start_step)

    # -- controller side ----------------------------------------------------------------------

    def _set_status(self, trial: _Trial, status: TrialStatus, reason: str = "") -> None:
        trial.status = status
        trial.reason = reason
        trial.view = None
        self._dirty = True

    def _on_value(self, trial: _Trial, value: float, now: float) -> None:
        sign = self.trace.sign
        if not self._incumbent or sign * value > sign * self._incumbent[-1][1]:
            self._incumbent.append((now, value, trial.trial_id))
        if self._reached is None and sign * value >= sign * self.target:
            self._reached = (now, trial.trial_id)

    def _view(self, free_slots: int) -> StudyView:
        views = {}
        for tid, trial in self.trials.items():
            if trial.view is None:
                trial.view = TrialView(
                    trial_id=tid,
                    status=trial.status,
                    params=self.trace.hparams[trial.config],
                    step=trial.step,
                    steps=np.asarray(trial.steps, dtype=np.int64),
                    values=np.asarray(trial.values, dtype=float),
                    times=np.asarray(trial.times, dtype=float),
                    checkpoint_step=trial.checkpoint_step,
                    priority=trial.priority,
                    info=trial.info,
                )
            views[tid] = trial.view
        return StudyView(
            metric=self.trace.metric,
            mode=self.trace.mode,
            max_steps=self.max_steps,
            boundary=self.config.boundary,
            now=self.clock.now(),
            trials=views,
            free_slots=free_slots,
            total_slots=self.slots,
            trials_remaining=max(self.num_trials - self._generated, 0),
            predictions={t: p for t, p in self.predictions.items() if t in views},
            bounds=self.config.metric_bounds(self.trace),
            random_level=None if math.isnan(self.trace.random_level) else self.trace.random_level,
        )

    @property
    def _generated(self) -> int:
        return len(self.trials)

    def _deliver(self, events: list[Event]) -> None:
        """Give REPORT and BOUNDARY events of running trials to the policy, with one view."""
        view = self._view(0)
        for event in events:
            trial = self.trials[event.trial_id]  # type: ignore[index]
            if trial.status is not TrialStatus.RUNNING:
                continue
            for action in self.policy.decide(view, event, self._rng()):
                self._apply(action, event)

    def _running_segment(self, trial: _Trial) -> _Segment | None:
        """Its segment not ended yet (also one whose end is on its way), as the journal has it."""
        seg = self.segments.get(trial.segment) if trial.segment is not None else None
        return seg if seg is not None and seg.ended is None else None

    def _apply(self, action: Action, event: Event | None) -> None:
        """Carry out CONTINUE, SUSPEND or TERMINATE as the controller's ``_apply`` does."""
        trial = self.trials.get(action.trial_id)  # type: ignore[arg-type]
        if trial is None:
            self._ignored += 1
            return
        now = self.clock.now()
        if action.kind is ActionKind.CONTINUE:
            if action.priority != trial.priority:
                trial.priority = action.priority
                trial.view = None
                self._dirty = True
        elif action.kind is ActionKind.SUSPEND:
            seg = self._running_segment(trial)
            if seg is not None:
                self._decide_segment(seg, Decision.SUSPEND, action, now)
                trial.priority = action.priority
                trial.view = None
            elif trial.status is TrialStatus.QUEUED:
                self._set_status(trial, TrialStatus.SUSPENDED, action.reason)
        elif action.kind is ActionKind.TERMINATE:
            seg = self._running_segment(trial)
            if seg is not None:
                self._decide_segment(seg, Decision.STOP, action, now)
            elif not trial.status.is_final:
                self._set_status(trial, TrialStatus.TERMINATED, action.reason)
                self._record(now, trial, ActionKind.TERMINATE, action.reason)
        else:
            self._ignored += 1

    def _decide_segment(
        self, seg: _Segment, decision: Decision, action: Action, now: float
    ) -> None:
        trial = self.trials[seg.trial_id]
        seg.decision = decision
        seg.reason = action.reason
        self._dirty = True
        self._record(now, trial, action.kind, action.reason)

    def _record(self, now: float, trial: _Trial, kind: ActionKind, reason: str) -> None:
        self.decisions.append(
            DecisionRecord(now, trial.trial_id, trial.config, trial.step, kind, reason)
        )

    def _offer_slots(self) -> None:
        """SLOT_FREE when something changed and slots are free; end the study if idle."""
        if not self._dirty or self._finished:
            return
        self._dirty = False
        now = self.clock.now()
        active = list(self._active.values())
        busy = {s.worker_id for s in active}
        idle = [
            w
            for w in self.workers.values()
            if w.exited is None and w.worker_id not in busy and w.ready <= now
        ]
        free = self.slots - len(busy)
        if free <= 0:
            return
        view = self._view(free)
        placed = 0
        for action in self.policy.decide(view, Event.slot_free(free), self._rng()):
            if action.kind not in (ActionKind.START, ActionKind.RESUME, ActionKind.FORK):
                self._apply(action, None)
                continue
            if placed >= free:
                self._ignored += 1
                continue
            trial = self._trial_for(action)
            if trial is None:
                continue
            if self._assign(trial, idle, action.until_step, now):
                placed += 1
        for worker in idle:  # the policy has nothing for them: they exit
            if worker.segment is None and worker.exited is None:
                worker.exited = now
        if not placed and not active:
            self._finished = True

    def _trial_for(self, action: Action) -> _Trial | None:
        if action.kind is ActionKind.RESUME:
            trial = self.trials.get(action.trial_id)  # type: ignore[arg-type]
            if trial is None or trial.status not in (TrialStatus.QUEUED, TrialStatus.SUSPENDED):
                self._ignored += 1
                return None
            return trial
        if action.kind is ActionKind.FORK or action.params is not None:
            self._ignored += 1  # a trace holds only its own configurations
            return None
        if self._generated >= self.num_trials:
            return None
        tid = self._generated
        if self.generator is not None and self.nearest is not None:
            proposal = self.generator.propose(tid, self._view(0))
            row = self.nearest.take(proposal.params)
            if row is None:
                return None
            self.proposals.append(proposal.params)
            trial = _Trial(tid, row, priority=action.priority, info=proposal.info)
        else:
            trial = _Trial(tid, self.order[tid], priority=action.priority)
        self.trials[tid] = trial
        self._dirty = True
        return trial

    def _assign(
        self, trial: _Trial, idle: list[_Worker], until_step: int | None, now: float
    ) -> bool:
        start = trial.checkpoint_step or 0
        if start >= self.max_steps:
            self._set_status(trial, TrialStatus.COMPLETED, "its checkpoint is at the last step")
            return False
        until = min(until_step or self.max_steps, self.max_steps)
        fresh = not idle
        worker = idle.pop(0) if idle else self._new_worker(now)
        seg = _Segment(
            segment_id=len(self.segments),
            trial_id=trial.trial_id,
            worker_id=worker.worker_id,
            start_step=start,
            until_step=max(until, start + 1),
            assigned=now,
        )
        self.segments[seg.segment_id] = seg
        self._active[seg.segment_id] = seg
        worker.segment = seg.segment_id
        trial.segment = seg.segment_id
        trial.step = start
        keep = sum(1 for x in trial.steps if x <= start)  # redone from the checkpoint
        del trial.steps[keep:], trial.values[keep:], trial.times[keep:]
        self._set_status(trial, TrialStatus.RUNNING)
        if not fresh:  # an idle worker starts at once; a new one when it is ready
            self._begin(seg, now)
        return True

    def _new_worker(self, now: float) -> _Worker:
        taken = {w.slot for w in self.workers.values() if w.exited is None}
        slot = min(set(range(self.slots + len(taken) + 1)) - taken)
        started = now + self.config.queue_wait
        worker = _Worker(
            worker_id=len(self.workers),
            slot=slot,
            submitted=now,
            started=started,
            ready=started + self.config.startup,
        )
        self.workers[worker.worker_id] = worker
        self._push(worker.ready, _Kind.WORKER_READY, worker.worker_id)
        return worker

    # -- the result ---------------------------------------------------------------------------

    def _result(self) -> SimulationResult:
        end = self._end_time
        reached = self._reached
        gpu_s = sum(max(min(w.exited or end, end) - w.started, 0.0) for w in self.workers.values())
        to_target = None
        if reached is not None:
            t_hit = reached[0]
            to_target = (
                sum(
                    max(min(w.exited or end, t_hit) - w.started, 0.0)
                    for w in self.workers.values()
                )
                / 3600.0
            )
        statuses = [t.status for t in self.trials.values()]
        spans = [
            SegmentSpan(
                slot=self.workers[s.worker_id].slot,
                worker=s.worker_id,
                trial=s.trial_id,
                config=self.trials[s.trial_id].config,
                start=s.began if s.began is not None else s.assigned,
                end=s.ended if s.ended is not None else end,
                start_step=s.start_step,
                end_step=s.end_step if s.end_step is not None else self.trials[s.trial_id].step,
                outcome=s.outcome,
            )
            for s in self.segments.values()
        ]
        workers = [
            WorkerSpan(
                slot=w.slot,
                worker=w.worker_id,
                submitted=w.submitted,
                started=w.started,
                ready=w.ready,
                exited=w.exited if w.exited is not None else end,
            )
            for w in self.workers.values()
        ]
        trials = [
            TrialOutcome(t.trial_id, t.config, t.status, t.step, t.suspensions, t.reason)
            for t in self.trials.values()
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
            gpu_hours=gpu_s / 3600.0,
            gpu_hours_to_target=to_target,
            training_hours=self._training_s / 3600.0,
            trials_started=len(self.trials),
            trials_completed=statuses.count(TrialStatus.COMPLETED),
            trials_terminated=statuses.count(TrialStatus.TERMINATED),
            trials_suspended=sum(t.suspensions > 0 for t in self.trials.values()),
            suspensions=sum(t.suspensions for t in self.trials.values()),
            trials_out_of_trace=statuses.count(TrialStatus.FAILED),
            ignored_actions=self._ignored,
            incumbent=tuple(self._incumbent),
            decisions=tuple(self.decisions),
            segments=tuple(spans),
            workers=tuple(workers),
            trials=tuple(trials),
            policy_states=tuple(self._policy_states),
        )


def _options_dict(policy: Policy) -> dict[str, Any]:
    options = getattr(policy, "options", None)
    if options is None or not hasattr(options, "__dataclass_fields__"):
        return {}
    return {name: getattr(options, name) for name in options.__dataclass_fields__}


__all__ = ["SimClock", "Simulator", "SimulatorConfig", "SimulatorError"]
