"""Simulated workers: the worker's and the training function's side of the wire, from a trace.

The controller under simulation is the real one (:class:`~hpctune.core.SchedulingCore`); it
talks to these workers through an in-memory :class:`MemoryWire` and starts them through a
:class:`SimExecutor`. Each worker does what :mod:`hpctune.worker.loop` and
:class:`~hpctune.worker.context.TrialContext` do, with a training function that reports the trace's
value at every step and saves a checkpoint at every boundary:

- a new worker waits ``queue_wait`` in the queue, then ``startup`` before it can train; a worker
  that ended a segment takes its next assignment at once;
- a segment writes its ``start`` line, loads its checkpoint (``resume_cost``) if it has one, then
  trains the trial's steps, each taking the trace's seconds, and writes a ``report`` line per step
  (the study metric's value, if the trace has one);
- at a boundary (:func:`~hpctune.study.boundaries.checkpoint_due`: a multiple of ``boundary``,
  the segment's last step, or a stage end of ``checkpoint_steps``) it waits for the
  controller's decision of that step when the assignment says so (``decision_wait``; the
  controller answers at the same instant), saves a checkpoint (``checkpoint_cost``) and writes
  its ``checkpoint`` line; elsewhere it reads the decision in force without waiting (a decision
  taken at this report is read at the next one);
- a stop or suspend decision, or the segment's last step, ends it: the function returns, the
  ``end`` line says how (:func:`hpctune.worker.loop._from_decision`'s rule), a suspended segment
  costs
  ``suspend_cost`` more;
- a step the trace does not hold (NaN seconds) fails the segment ("out of trace").

Faults (:class:`~hpctune.simulator._config.Faults`, none by default): a trial's crash step fails
each of its segments that trains it (the end line carries the error); a trial's early end step
ends each of its segments that reports it (``ended_early``: the function returned without being
told to stop); a lost worker's process
dies at its time (no end line, no more heartbeats, the executor finds it gone); a hung worker
stops at its time but still runs as far as the executor can tell, its heartbeat frozen, so only
the controller's heartbeat timeout ends it.

Trial rows: each trial's values come from one configuration (row) of the trace, found by
:class:`TraceRows` (see there).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from hpctune.backends.base import Executor, WorkerState
from hpctune.core.wire import EventLines, Wire
from hpctune.journal.state import StudyRecord
from hpctune.simulator._config import SimClock, SimulatorConfig
from hpctune.simulator.nearest import NearestConfigurations
from hpctune.simulator.traces import Trace
from hpctune.study.boundaries import at_boundary, checkpoint_due
from hpctune.study.states import Decision, SegmentStatus
from hpctune.wire.layout import checkpoint_path
from hpctune.wire.protocol import (
    EV_CHECKPOINT,
    EV_END,
    EV_REPORT,
    EV_START,
    Assignment,
    DecisionMessage,
    Heartbeat,
)


class TraceRows:
    """Which trace row (configuration) gives each trial its values.

    A trial the generator proposed carries its row in ``info["trace_row"]``. A trial started
    with given parameters and no parent (a policy's own proposal, as freeze-thaw makes them; a
    user's) takes the nearest row no other trial uses, as a generator's proposal does (the
    nearest row when every row is used). A forked trial (a PBT child, a replayed fork) takes the
    row nearest to its parameters (:class:`~hpctune.simulator.nearest.NearestConfigurations`'
    distance, used rows included) among the rows that recorded the first step it trains (a
    child forked at step s: step s + 1), else the nearest row: a forked child therefore
    continues, from its parent's checkpoint step, on the curve of the recorded configuration
    nearest to its mutated hyperparameters (in a trace exported from a PBT study, its own row).
    """

    def __init__(self, trace: Trace, nearest: NearestConfigurations) -> None:
        self.trace = trace
        self.nearest = nearest
        self._rows: dict[int, int] = {}

    def row(self, record: StudyRecord, trial_id: int) -> int:
        """The row of ``trial_id``."""
        if trial_id not in self._rows:
            trial = record.trials[trial_id]
            given = trial.info.get("trace_row") if isinstance(trial.info, Mapping) else None
            if isinstance(given, int):
                self._rows[trial_id] = given
            elif trial.parent_trial is None:
                # a configuration given with the trial (a policy's own proposal, freeze-thaw;
                # a user's): the nearest row no other trial uses, as a generator's proposal
                # is answered (the tabular protocol), else the nearest row
                used = set(self._rows.values())
                for other in record.trials.values():
                    row = other.info.get("trace_row") if isinstance(other.info, Mapping) else None
                    if isinstance(row, int):
                        used.add(row)
                distances = self.nearest.distances(trial.params)
                distances[list(used)] = np.inf
                if not np.isfinite(distances).any():
                    distances = self.nearest.distances(trial.params)
                self._rows[trial_id] = int(distances.argmin())
            else:
                distances = self.nearest.distances(trial.params)
                first = min(int(trial.parent_step or 0), self.trace.num_epochs - 1)
                recorded = ~np.isnan(self.trace.epoch_seconds[:, first])
                if recorded.any():
                    distances = np.where(recorded, distances, np.inf)
                self._rows[trial_id] = int(distances.argmin())
        return self._rows[trial_id]


class _Kind(Enum):
    READY = 0  # a new worker can train
    STEP = 1  # a step is trained
    SAVED = 2  # a checkpoint is written
    END = 3  # the segment's end line is written
    PROCEED = 4  # a decision arrived at a waiting boundary
    WAIT_OVER = 5  # the decision wait at a boundary ran out
    BEGIN = 6  # a segment's function starts
    LOSE = 7  # the worker's process dies (a fault)
    HANG = 8  # the worker stops, its process alive (a fault)
    TICK = 9  # nothing happens: time passes while a fault is still to be noticed


@dataclass
class Run:
    """A segment as its simulated worker runs it."""

    assignment: Assignment
    row: int
    began: float
    step: int = 0
    decision: Decision = Decision.CONTINUE
    reason: str = ""
    waiting: int | None = None  # the step whose decision it waits for at a boundary
    message: DecisionMessage | None = None  # the latest decision file
    ended: float | None = None
    status: SegmentStatus | None = None
    error: str = ""


@dataclass
class SimWorker:
    """One simulated worker (a Slurm job or a local process)."""

    worker_id: str
    slot: int
    submitted: float
    started: float
    ready: float
    exited: float | None = None
    run: Run | None = None
    runs: list[Run] = field(default_factory=list)
    number: int = 0  # the n-th worker of the study, from 1
    hung: float | None = None  # when it stopped (a fault)
    lost: bool = False  # its process died (a fault)


class Workers:
    """The simulated workers, their event queue, and the wire and executor the controller sees.

    Args:
        trace: The workload.
        config: Costs.
        clock: The simulated clock the controller reads too.
        slots: The study's slots (worker slots are numbered for the results).
        rows: Each trial's trace row.
        record: The controller's study record (read only: to find trials' rows).
        on_report: Called with (time, trial, row, step, value) for every value reported.
        inbox: The list the study's users append their commands to (:class:`MemoryWire`).
    """

    def __init__(
        self,
        trace: Trace,
        config: SimulatorConfig,
        clock: SimClock,
        slots: int,
        rows: TraceRows,
        record: StudyRecord,
        on_report: Callable[[float, int, int, int, float], None],
        inbox: list[dict[str, Any]] | None = None,
    ) -> None:
        self.trace = trace
        self.config = config
        self.clock = clock
        self.slots = slots
        self.rows = rows
        self.record = record
        self.on_report = on_report
        self.workers: dict[str, SimWorker] = {}
        self.events: dict[int, list[dict[str, Any]]] = {}  # event lines by segment
        self.assignments: dict[str, Assignment | None] = {}  # assignment "files" by worker
        self.writes = 0  # assignments and decisions the controller wrote
        self.training_s = 0.0
        self.checkpoints_deleted = 0
        self._heap: list[tuple[float, int, _Kind, str, int]] = []
        self._counter = 0
        self.wire = MemoryWire(self, inbox)
        self.executor = SimExecutor(self)

    # -- the event queue ----------------------------------------------------------------------

    def push(self, t: float, kind: _Kind, worker_id: str, step: int = 0) -> None:
        """Queue an event of a worker at time ``t``."""
        heapq.heappush(self._heap, (t, self._counter, kind, worker_id, step))
        self._counter += 1

    def next_time(self) -> float | None:
        """The time of the next event, ``None`` when nothing is queued."""
        return self._heap[0][0] if self._heap else None

    def run_until(self, t: float) -> None:
        """Carry out every event queued up to time ``t`` (the clock is at ``t``)."""
        while self._heap and self._heap[0][0] <= t:
            _, _, kind, worker_id, step = heapq.heappop(self._heap)
            self._handle(kind, self.workers[worker_id], step)

    def _schedule_faults(self, worker: SimWorker) -> None:
        """Queue the faults of a new worker: its death or its hang (then ticks, so that the
        controller's heartbeat timeout is checked while nothing else happens)."""
        faults = self.config.faults
        lost_at = faults.lost.get(worker.number)
        if lost_at is not None:
            self.push(max(lost_at, worker.submitted), _Kind.LOSE, worker.worker_id)
        hung_at = faults.hung.get(worker.number)
        if hung_at is not None:
            self.push(max(hung_at, worker.started), _Kind.HANG, worker.worker_id)

    def tick(self) -> bool:
        """When nothing else is due: queue a tick a second from now (the controller's check
        period of a busy worker) if a worker that died or hung is still to be noticed by the
        controller (a hung one only if a timeout can notice it); ``False`` if none is."""
        faults = self.config.faults
        timed = math.isfinite(faults.worker_timeout) or math.isfinite(faults.startup_timeout)
        for worker in self.workers.values():
            known = self.record.workers.get(worker.worker_id)
            unnoticed = known is not None and known.state.is_alive
            if unnoticed and (worker.lost or (worker.hung is not None and timed)):
                self.push(self.clock.now() + 1.0, _Kind.TICK, worker.worker_id)
                return True
        return False

    # -- the executor's side ------------------------------------------------------------------

    def submit(self, worker_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Start workers: each waits in the queue, then starts up."""
        now = self.clock.now()
        infos: dict[str, dict[str, Any]] = {}
        for worker_id in worker_ids:
            taken = {w.slot for w in self.workers.values() if w.exited is None}
            slot = min(set(range(self.slots + len(taken) + 1)) - taken)
            started = now + self.config.queue_wait
            worker = SimWorker(worker_id, slot, now, started, started + self.config.startup)
            worker.number = len(self.workers) + 1
            self.workers[worker_id] = worker
            self.push(worker.ready, _Kind.READY, worker_id)
            self._schedule_faults(worker)
            infos[worker_id] = {"simulated": slot}
        return infos

    def state(self, worker_id: str) -> WorkerState:
        """The worker's state as an executor sees it."""
        worker = self.workers.get(worker_id)
        if worker is None or worker.exited is not None:
            return WorkerState.GONE
        if self.clock.now() < worker.started:
            return WorkerState.PENDING
        return WorkerState.RUNNING

    def heartbeat(self, worker_id: str) -> Heartbeat | None:
        """The worker's heartbeat now (none before its process starts)."""
        worker = self.workers.get(worker_id)
        now = self.clock.now()
        if worker is None or now < worker.started:
            return None
        run = worker.run
        if worker.lost or worker.hung is not None:  # its last beat before it died or stopped
            stopped = worker.hung if worker.hung is not None else worker.exited
            state, at = ("running" if run is not None else "idle"), float(stopped or now)
        elif worker.exited is not None:
            state, at = "exited", worker.exited
        else:
            state, at = ("running" if run is not None else "idle"), now
        return Heartbeat(
            worker_id=worker_id,
            state=state,
            segment_id=None if run is None else run.assignment.segment_id,
            step=None if run is None else run.step,
            pid=0,
            host="simulated",
            time=at,
            started=worker.started,
        )

    def cancel(self, worker_id: str) -> None:
        """Kill a worker now (its segment, if any, writes nothing more)."""
        worker = self.workers.get(worker_id)
        if worker is not None and worker.exited is None:
            if worker.run is not None and worker.run.ended is None:
                worker.run.ended = self.clock.now()
            worker.run = None
            worker.exited = self.clock.now()

    # -- the wire: what the controller writes -------------------------------------------------

    def assignment(self, worker_id: str, assignment: Assignment | None) -> None:
        """The controller wrote a worker's assignment file: an idle worker takes it at once."""
        self.assignments[worker_id] = assignment
        self.writes += 1
        worker = self.workers.get(worker_id)
        if worker is not None:
            self._take(worker)

    def _take(self, worker: SimWorker, *, fresh: bool = False) -> None:
        """An idle, ready worker reads its assignment file: a new segment, or exit.

        A worker that was idle starts the segment ``segment_start`` seconds later (it notices
        the assignment, calls the function); a new one at once (``startup`` counted that).
        """
        now = self.clock.now()
        if worker.exited is not None or worker.run is not None:
            return
        if now < worker.ready or worker.worker_id not in self.assignments:
            return
        assignment = self.assignments[worker.worker_id]
        if assignment is None:
            worker.exited = now
        elif not any(r.assignment.segment_id == assignment.segment_id for r in worker.runs):
            delay = 0.0 if fresh else self.config.segment_start
            run = Run(assignment, self.rows.row(self.record, assignment.trial_id), now + delay)
            run.step = assignment.start_step
            worker.run = run
            worker.runs.append(run)
            self.push(run.began, _Kind.BEGIN, worker.worker_id)

    def decision(self, message: DecisionMessage) -> None:
        """The controller wrote a segment's decision file."""
        self.writes += 1
        for worker in self.workers.values():
            run = worker.run
            if run is not None and run.assignment.segment_id == message.segment_id:
                run.message = message
                if run.waiting is not None and (
                    message.decision is not Decision.CONTINUE or message.step >= run.waiting
                ):
                    self.push(self.clock.now(), _Kind.PROCEED, worker.worker_id, run.waiting)
                return

    # -- the worker loop ----------------------------------------------------------------------

    def _handle(self, kind: _Kind, worker: SimWorker, step: int) -> None:
        now = self.clock.now()
        if kind is _Kind.TICK or worker.hung is not None or worker.exited is not None:
            return  # a tick, or a worker that stopped, died or was cancelled meanwhile
        if kind is _Kind.LOSE:
            if worker.run is not None:
                worker.run.ended = now  # no end line: the process died
            worker.run = None
            worker.exited, worker.lost = now, True
            return
        if kind is _Kind.HANG:
            worker.hung = now
            return
        if kind is _Kind.READY:
            self._take(worker, fresh=True)
            return
        run = worker.run
        if run is None or worker.exited is not None or run.ended is not None:
            return  # killed meanwhile
        if kind is _Kind.BEGIN:
            self._begin(worker, run, now)
        elif kind is _Kind.STEP:
            self._step(worker, run, step, now)
        elif kind is _Kind.SAVED:
            self._write(run, EV_CHECKPOINT, now, step=step, **self._checkpoint(run, step))
            self._go_on(worker, run, now)
        elif kind is _Kind.END:
            self._end(worker, run, now)
        elif run.waiting == step:  # PROCEED or WAIT_OVER of the step it waits at
            run.waiting = None
            self._read_decision(run, step)
            self._after_report(worker, run, step, now)

    def _begin(self, worker: SimWorker, run: Run, now: float) -> None:
        """The function starts: the ``start`` line, the checkpoint loaded, the first step."""
        a = run.assignment
        self._write(run, EV_START, now, host="simulated", pid=0)
        if a.checkpoint is not None:
            now += self.config.resume_cost
        self._train(worker, run, a.start_step + 1, now)

    def _train(self, worker: SimWorker, run: Run, step: int, now: float) -> None:
        """Train ``step``: done after the trace's seconds (a step the trace lacks fails, and
        so does a trial's crash step, once its seconds have passed)."""
        seconds = float(self.trace.epoch_seconds[run.row, step - 1])
        if math.isnan(seconds):
            run.status = SegmentStatus.FAILED
            run.reason = f"the trace has no step {step} of configuration {run.row}"
            self.push(now, _Kind.END, worker.worker_id)
            return
        if self.config.faults.crashes.get(run.assignment.trial_id) == step:
            run.status = SegmentStatus.FAILED
            run.reason = f"RuntimeError: simulated crash at step {step}"
            run.error = (
                "Traceback (most recent call last):\n  (simulated training function)\n"
                f"{run.reason}"
            )
            self.push(now + seconds, _Kind.END, worker.worker_id)
            return
        self.push(now + seconds, _Kind.STEP, worker.worker_id, step)

    def _step(self, worker: SimWorker, run: Run, step: int, now: float) -> None:
        """A step is trained: report it, then wait for the decision, save, or go on."""
        a = run.assignment
        self.training_s += float(self.trace.epoch_seconds[run.row, step - 1])
        value = float(self.trace.curves[run.row, step - 1])
        metrics = {} if math.isnan(value) else {a.metric: value}
        self._write(run, EV_REPORT, now, step=step, metrics=metrics)
        run.step = step
        if not math.isnan(value):
            self.on_report(now, a.trial_id, run.row, step, value)
        if step < a.until_step and self.config.faults.ends_early.get(a.trial_id) == step:
            run.status = SegmentStatus.ENDED_EARLY  # the function returns (a fault)
            run.reason = f"the function returned at step {step}"
            self.push(now, _Kind.END, worker.worker_id)
            return
        if step >= a.until_step:  # the function's last step: it returns
            stop = step >= a.max_steps
            run.decision = Decision.STOP if stop else Decision.SUSPEND
            run.reason = "last step" if stop else f"end of segment at {step}"
            self._after_report(worker, run, step, now)
            return
        boundary = at_boundary(step, a.boundary)
        self._read_decision(run, step)
        if boundary and a.decision_wait > 0 and not self._answered(run, step):
            run.waiting = step  # the controller answers at this instant, or the wait runs out
            self.push(now + a.decision_wait, _Kind.WAIT_OVER, worker.worker_id, step)
            return
        self._after_report(worker, run, step, now)

    def _answered(self, run: Run, step: int) -> bool:
        message = run.message
        return message is not None and (
            message.decision is not Decision.CONTINUE or message.step >= step
        )

    def _read_decision(self, run: Run, step: int) -> None:
        message = run.message
        if (
            run.decision is Decision.CONTINUE
            and message is not None
            and message.decision is not Decision.CONTINUE
        ):
            run.decision, run.reason = message.decision, message.reason

    def _after_report(self, worker: SimWorker, run: Run, step: int, now: float) -> None:
        """Save a checkpoint at a boundary, then go on or end."""
        a = run.assignment
        if checkpoint_due(step, a.boundary, a.until_step, a.checkpoint_steps):
            self.push(now + self.config.checkpoint_cost, _Kind.SAVED, worker.worker_id, step)
        else:
            self._go_on(worker, run, now)

    def _go_on(self, worker: SimWorker, run: Run, now: float) -> None:
        if run.decision is Decision.CONTINUE:
            self._train(worker, run, run.step + 1, now)
            return
        run.status = _status(run)
        if run.status is SegmentStatus.SUSPENDED:
            now += self.config.suspend_cost
        self.push(now, _Kind.END, worker.worker_id)

    def _end(self, worker: SimWorker, run: Run, now: float) -> None:
        status = run.status or SegmentStatus.FAILED
        self._write(
            run,
            EV_END,
            now,
            status=status.value,
            step=run.step,
            reason=run.reason,
            error=run.error,
        )
        run.ended = now
        worker.run = None
        self._take(worker)

    def _write(self, run: Run, kind: str, t: float, **data: Any) -> None:
        lines = self.events.setdefault(run.assignment.segment_id, [])
        lines.append({"kind": kind, "t": t, **data})

    def _checkpoint(self, run: Run, step: int) -> dict[str, Any]:
        a = run.assignment
        path = checkpoint_path(a.trial_id, step, a.segment_id)
        return {"path": path, "sha256": "", "nbytes": 0}


def _status(run: Run) -> SegmentStatus:
    """The segment's end as the worker tells it (:func:`hpctune.worker.loop._from_decision`)."""
    a = run.assignment
    if run.step >= a.max_steps:
        return SegmentStatus.COMPLETED
    if run.decision is Decision.STOP:
        return SegmentStatus.TERMINATED
    return SegmentStatus.SUSPENDED


class MemoryWire(Wire):
    """The controller's wire to the simulated workers: event lines and heartbeats are read from
    them, assignments and decisions handed to them at once; the users' commands are read from
    the list they append them to (``inbox``), each a file of the inbox once the controller
    lists it."""

    def __init__(self, workers: Workers, inbox: list[dict[str, Any]] | None = None) -> None:
        self.workers = workers
        self.posted = inbox if inbox is not None else []
        self._listed = 0  # commands of ``posted`` named as inbox files so far
        self._files: dict[str, dict[str, Any]] = {}

    def inbox(self) -> list[str]:
        """The names of the commands not yet carried out, in the order they were posted."""
        for command in self.posted[self._listed :]:
            self._listed += 1
            self._files[f"{self._listed:08d}-user.json"] = command
        return sorted(self._files)

    def read_command(self, name: str) -> tuple[Any, str] | None:
        """A command as the users posted it."""
        return self._files[name], ""

    def remove_command(self, name: str) -> None:
        """The controller carried the command out."""
        self._files.pop(name, None)

    def reject_command(self, name: str, reason: str) -> None:
        """The controller refused the command (journaled with ``reason``)."""
        self._files.pop(name, None)

    def event_name(self, segment_id: int) -> str:
        return f"segment-{segment_id:06d}.jsonl"

    def read_events(self, segment_id: int, offset: int) -> EventLines | None:
        lines = self.workers.events.get(segment_id, [])
        if len(lines) <= offset:
            return None
        return EventLines(lines[offset:], len(lines))

    def heartbeat(self, worker_id: str) -> Heartbeat | None:
        return self.workers.heartbeat(worker_id)

    def write_assignment(
        self, worker_id: str, assignment: Assignment | None, reason: str = "", *, epoch: int = 0
    ) -> None:
        self.workers.assignment(worker_id, assignment)

    def write_decision(self, message: DecisionMessage, *, fsync: bool = False) -> None:
        self.workers.decision(message)

    def delete_checkpoint(self, path: str) -> None:
        self.workers.checkpoints_deleted += 1


class SimExecutor(Executor):
    """Starts, watches and cancels the simulated workers."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self.max_pending = workers.slots  # every slot's worker may start at once

    def start(
        self, worker_ids: list[str], devices: int | None = None
    ) -> dict[str, dict[str, Any]]:
        return self.workers.submit(worker_ids)

    def state(self, worker_id: str, info: Mapping[str, Any]) -> WorkerState:
        return self.workers.state(worker_id)

    def cancel(self, worker_id: str, info: Mapping[str, Any]) -> None:
        self.workers.cancel(worker_id)

    def end_reason(self, worker_id: str, info: Mapping[str, Any]) -> str:
        """Why a worker ended as the executor tells it: a lost one's node failed."""
        worker = self.workers.workers.get(worker_id)
        return "its node failed (simulated)" if worker is not None and worker.lost else ""


__all__ = ["MemoryWire", "Run", "SimExecutor", "SimWorker", "TraceRows", "Workers"]
