"""The scheduling core's loop: the controller's, the only writer of the journal and the only one
that decides (on a study directory's files, or in the simulator's memory).

Each iteration of its loop:

1. reads user commands from the inbox;
2. ingests the event files of active segments (reports, checkpoints, ends) into the journal;
3. checks the workers (heartbeat files first, the executor's answer second) and turns the segments
   of dead workers into lost ones, whose trials resume from their last checkpoint;
4. asks for learning-curve fits at boundaries and journals finished ones (policies that want
   predictions; :mod:`.curves`), never waiting for a fit;
5. asks the policy (boundaries, reports and predictions, then free slots) and carries out its
   actions;
6. grows or shrinks the worker pool;
7. commits the journal, and only then writes the assignment and decision files that follow from
   it (so a file never announces something the journal does not hold).

It keeps no state the journal does not have: kill it at any instant and a new one rebuilds the
same state from the journal, re-sends what may not have been sent, and adopts the live workers.
Only one controller acts at a time: each holds a lease epoch (:mod:`hpctune.wire.lease`),
checked at every iteration and around every commit; a fenced one raises
:class:`~hpctune.wire.lease.Fenced` from :meth:`SchedulingCore.run` without committing or writing
anything more.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.backends.base import Executor, WorkerState
from hpctune.core.base import EXIT_GRACE, CoreBase
from hpctune.core.commands import TrialCommands
from hpctune.core.elastic import ElasticFollower
from hpctune.core.pool import WorkerPool
from hpctune.core.scheduling import Scheduling, TrialScheduling
from hpctune.core.stages import StageTreeScheduling
from hpctune.core.wire import Wire
from hpctune.curves.service import CurveService
from hpctune.journal import records as rec
from hpctune.journal.entities import SegmentRecord, TrialRecord, WorkerRecord
from hpctune.journal.memory import MemoryJournal
from hpctune.journal.state import StudyRecord
from hpctune.policies import (
    Action,
    ActionKind,
    Event,
    EventKind,
    Policy,
    StudyView,
    TrialView,
)
from hpctune.policies.generators import Generator
from hpctune.study.seeding import trial_seed
from hpctune.study.states import Decision, SegmentStatus, StudyState, TrialStatus, WorkerLife
from hpctune.wire.asktell import VALIDATORS as TRIAL_COMMANDS
from hpctune.wire.clock import Clock
from hpctune.wire.inbox import RETRYABLE, VALIDATORS, check_command
from hpctune.wire.layout import StudyPaths
from hpctune.wire.lease import Fenced
from hpctune.wire.protocol import Assignment, DecisionMessage

logger = logging.getLogger(__name__)

COMMANDS = {**VALIDATORS, **TRIAL_COMMANDS}  # every inbox command kind and its validator


class SchedulingCore(CoreBase):
    """Run a study to its end (or until stopped) from its journal: the scheduling core.

    See :class:`~hpctune.core.base.CoreBase` for the arguments. The controller of a study
    directory is this core on files (:class:`hpctune.controller.Controller`); the simulator's is
    this core in memory (:meth:`in_memory`).
    """

    scheduling: Scheduling
    """How free workers get work, chosen from the spec (``[stages] enabled``: a stage tree)."""

    pool: WorkerPool
    """The study's workers: liveness, runs, grace, watchdogs, the pool's size."""
    commands: TrialCommands
    """The ``add_trials``, ``ask`` and ``tell`` commands' side of the controller."""
    elastic: ElasticFollower
    """Follows the elastic plan of a study with a deadline (a fixed pool without one)."""

    def _compose(self) -> None:
        """Build the parts that need the whole core (called at the end of ``__init__``)."""
        self.pool = WorkerPool(self)
        self.commands = TrialCommands(self)
        self.elastic = ElasticFollower(self)
        self.scheduling = (
            StageTreeScheduling(self) if self.spec.stages.enabled else TrialScheduling(self)
        )

    @staticmethod
    def in_memory(
        state: StudyRecord,
        writer: MemoryJournal,
        wire: Wire,
        executor: Executor,
        clock: Clock,
        *,
        policy: Policy | None = None,
        generator: Generator | None = None,
        curve_service: CurveService | None = None,
        decision_wait: float = 2.0,
        worker_timeout: float = math.inf,
        startup_timeout: float = math.inf,
    ) -> SchedulingCore:
        """The core of a study that exists only in memory (the simulator's): no study
        directory, no lease, no files; ``wire`` and ``executor`` stand for the workers.

        ``policy`` and ``generator`` replace the ones the spec names (e.g. a policy object
        that is not registered, or a generator answered from a trace); ``curve_service``
        answers the curve fits; ``worker_timeout`` and ``startup_timeout``: as the controller's
        (never, by default: simulated workers do not hang unless told).
        """
        core = SchedulingCore(
            paths=StudyPaths.of(Path(state.spec.get("directory") or "simulated-study")),
            wire=wire,
            writer=writer,
            lease=None,
            state=state,
            executor=executor,
            clock=clock,
            poll_interval=0.0,
            worker_timeout=worker_timeout,
            startup_timeout=startup_timeout,
            decision_wait=decision_wait,
            stop_grace=math.inf,
            on_progress=None,
            curve_options=None,
            curve_service=curve_service,
            policy=policy,
            generator=generator,
        )
        core.storage_patience = math.inf
        core.assignment_timeout = math.inf
        return core

    def run(self) -> StudyState:
        """Run until the study ends or is stopped; return the study's state.

        Raises:
            Fenced: Another controller took the study over; this one stopped without
                committing, and left the workers and ``controller.json`` to the new one.
        """
        try:
            self.start()
            while not self.step():
                self.clock.sleep(self.poll_interval)
        except Fenced as exc:
            self.fenced = exc
            logger.error("%s", exc)
            raise
        finally:
            self.curves.close()
            if self.fenced is None:
                self._beat(final=True)
            self.executor.close()
        return self.state.state

    def start(self) -> None:
        """Record this controller's start and re-send what a killed one may not have sent."""
        identity = self.wire.identity()
        self.log(rec.ControllerEntry(event="started", epoch=self.epoch, **identity))
        if self.state.state is not StudyState.FINISHED:
            self.set_study(StudyState.RUNNING, "controller started")
        self.elastic.start()
        rejected = {c.file: c.reason for c in self.state.rejected_commands}
        for name in self.state.commands_done:  # files a killed controller left behind
            if name in rejected:
                self.after_commit(partial(self.wire.reject_command, name, rejected[name]))
            else:
                self.after_commit(partial(self.wire.remove_command, name))
        for worker in self.live_workers():
            if not worker.info:  # created, never confirmed started: it may not exist
                # (a controller killed while submitting: no sign of workers failing to start)
                self.pool.worker_gone(
                    worker, WorkerLife.LOST, "never confirmed started", None, failed_start=False
                )
                self.after_commit(
                    partial(
                        self.wire.write_assignment,
                        worker.worker_id,
                        None,
                        "unknown to controller",
                        epoch=self.epoch,
                    )
                )
        self.pool.startup_failures = 0
        for trial_id in self.wire.checkpoint_folders():  # files a killed one did not delete
            trial = self.state.trials.get(trial_id)
            if trial is not None and trial.status.is_final:
                self.after_commit(partial(self._sweep_checkpoints, trial_id))
        for seg in self.state.active_segments():
            owner = self.state.workers.get(seg.worker_id)
            if owner is not None and owner.state is WorkerLife.STARTED:
                self.after_commit(self.assignment_writer(seg))
            if seg.decision:
                self.send_decision(seg, Decision(seg.decision), seg.decision_reason, log=False)
        self.curves.start()
        self.commit()

    def step(self) -> bool:
        """Run one iteration; return True when the controller should exit.

        Raises:
            Fenced: Another controller took a higher epoch.
        """
        self.check_lease()
        self.iterations += 1
        if self._stop_request:
            self.request_stop(self._stop_request)
            self._stop_request = ""
        writable = self._check_storage()
        self._read_inbox()
        self.ingest.ingest()
        self.pool.check()
        if self._abort_request and not self._abort:
            self._kill_workers()
        self.pool.enforce_grace()
        self.pool.watch_segments()
        self.curves.update()
        self.elastic.follow()
        self._schedule(writable)
        changes = self.state.checkpoint_changes
        if changes != self._collected_at:
            self._collected_at = changes
            self.scheduling.collect_checkpoints()
        if writable:
            self.elastic.shrink_pool()
            self.pool.manage()
        self.commit()
        self._beat()
        if self.on_progress is not None:
            self.on_progress(self)
        return self._can_exit()

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop the study cooperatively: running trials suspend at their next report."""
        if self.state.state is StudyState.RUNNING:
            self.set_study(StudyState.STOPPING, reason)

    def signal_stop(self, reason: str) -> None:
        """Ask for a cooperative stop from a signal handler (applied at the next iteration)."""
        self._stop_request = reason

    @property
    def aborted(self) -> bool:
        """True after :meth:`abort`."""
        return self._abort

    @property
    def detached(self) -> bool:
        """True after :meth:`detach`."""
        return self._detach

    def detach(self) -> None:
        """Leave the loop after the current iteration; the study and its workers go on.

        For a controller job near its time limit or preempted: the next controller (requeued or
        resumed) adopts the workers, which wait ``controller_timeout`` for it.
        """
        self._detach = True

    def abort(self) -> None:
        """Kill every worker at the next iteration (safe in a signal handler); their trials
        resume from their checkpoints on `resume`, and no retry is counted."""
        self._abort_request = True

    def _kill_workers(self) -> None:
        """Cancel every worker; their segments end lost, not counted as retries."""
        reason = "killed on request (a second Ctrl-C)"
        for worker in self.live_workers():
            self.executor.cancel(worker.worker_id, worker.info)
            if worker.segment_id is not None:
                seg = self.state.segments[worker.segment_id]
                self.ingest.ingest_segment(seg)  # what it wrote before it died
                if not seg.status.is_final:
                    self.ingest.end_segment(
                        seg, SegmentStatus.LOST, reason, "", None, count_retry=False
                    )
            beat = self.pool.beats.get(worker.worker_id)
            self.pool.worker_gone(worker, WorkerLife.LOST, reason, beat, failed_start=False)
        self._abort = True

    def _read_inbox(self) -> None:
        """Carry out new inbox files; journal and set aside (``inbox/rejected/``) bad ones."""
        for name in self.wire.inbox():
            if name in self.state.commands_done:
                continue
            read = self.wire.read_command(name)
            if read is None:
                continue  # unparsable but young: it may still be being written
            command, problem = read
            problem = problem or check_command(command, self.state, COMMANDS)
            if problem:
                logger.warning("inbox file %s rejected: %s", name, problem)
                shown = command if isinstance(command, dict | list | str | int | float) else None
                self.log(rec.CommandEntry(file=name, command=shown, rejected=problem))
                self.after_commit(partial(self.wire.reject_command, name, problem))
                continue
            self.log(rec.CommandEntry(file=name, command=command))
            self.after_commit(partial(self.wire.remove_command, name))
            self._apply_command(command, name)

    def _apply_command(self, command: dict[str, Any], name: str = "") -> None:
        """Carry out a command its validator accepted (:mod:`hpctune.wire.inbox`)."""
        kind = command["command"]
        if kind in TRIAL_COMMANDS:
            self.commands.carry_out(command)
        elif kind == "stop":
            self.request_stop(str(command.get("reason") or "stopped by the user"))
        elif kind == "stop_trial":
            self._terminate(self.state.trials[command["trial"]], "stopped by the user")
        elif kind == "retry":
            ids = list(command.get("trials", []))
            if command.get("failed"):
                trials = self.state.trials.values()
                ids += [t.trial_id for t in trials if t.status is TrialStatus.FAILED]
            self._retry(sorted(set(ids)))
        elif kind == "settings":  # `hpctune resume --set`: settings for the next jobs
            self.pool.change_settings(command)
        elif kind == "deadline":  # `hpctune resume --deadline`: re-plan to the new one
            self.elastic.change_deadline(command)

    def _retry(self, trial_ids: list[int]) -> None:
        """Queue failed (or ended early) trials again from their last good checkpoint.

        A checkpoint whose file is missing or whose SHA-256 differs from the journal's is
        deleted (journaled) and the trial falls back to its previous one, or to its start.
        """
        for trial_id in trial_ids:
            trial = self.state.trials[trial_id]
            if trial.status not in RETRYABLE:
                continue
            while trial.checkpoint_row is not None:
                ref = self.state.checkpoints[trial.checkpoint_row]
                problem = self.wire.checkpoint_problem(ref.path, ref.sha256)
                if not problem:
                    break
                logger.warning("trial %d: checkpoint %s %s; skipped", trial_id, ref.path, problem)
                self.ingest.delete_checkpoints([ref.row])
            self.set_trial(trial, TrialStatus.QUEUED, "retried by the user", retries=0, error="")
        if trial_ids and self.state.state in (StudyState.FINISHED, StudyState.FAILED):
            self.set_study(StudyState.RUNNING, f"trials {trial_ids} retried")

    def _trial_view(self, t: TrialRecord, t0: float) -> TrialView:
        """The policy's view of one trial, rebuilt only when the trial changed."""
        key = (
            t.status,
            t.step,
            len(t.curve_steps),
            id(t.curve_values),
            t.checkpoint_row,
            t.priority,
            t.retries,
            t.end_step,
            t.parent_trial,
            id(t.info),
            t0,
        )
        cached = self._trial_views.get(t.trial_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        view = TrialView(
            trial_id=t.trial_id,
            status=t.status,
            params=t.params,
            step=t.step,
            steps=np.asarray(t.curve_steps, dtype=np.int64),
            values=np.asarray(t.curve_values, dtype=float),
            times=np.asarray(t.curve_times, dtype=float) - t0,
            checkpoint_step=self.state.checkpoint_step(t.trial_id),
            parent_trial=t.parent_trial,
            parent_step=t.parent_step,
            priority=t.priority,
            retries=t.retries,
            info=t.info,
            end_step=t.end_step,
            generation=t.generation,
            initiator=t.initiator,
            last_metrics=dict(t.last_metrics),
        )
        self._trial_views[t.trial_id] = (key, view)
        return view

    def view(self, free_slots: int = 0) -> StudyView:
        """The policy's view; trials are looked at again only when the study record says they
        changed or they have not ended (a study of many ended trials costs little)."""
        t0 = self.state.started_time or self.state.created_time
        if t0 != self._views_t0:
            self._views_t0, self._views = t0, {}
            self._open_views = set(self.state.trials)
        changed, self.state.changed = self.state.changed, set()
        for tid in sorted(changed | self._open_views):  # new trials come last: id order
            view = self._trial_view(self.state.trials[tid], t0)
            self._views[tid] = view
            if view.status.is_final:
                self._open_views.discard(tid)
            else:
                self._open_views.add(tid)
        trials = dict(self._views)
        return StudyView(
            metric=self.spec.metric,
            mode=self.spec.mode,
            max_steps=self.spec.max_steps,
            boundary=self.spec.boundary,
            now=self.clock.now() - t0,
            trials=trials,
            free_slots=free_slots,
            total_slots=self.elastic.pool_size(),
            trials_remaining=max(self.spec.num_trials - self.state.generated, 0),
            bounds=self.spec.metric_bounds,
            random_level=self.spec.random_level,
            predictions=dict(self.curves.predictions),
            space=self.spec.space,
            objectives=self.spec.objectives,
        )

    def rng_for(self, event: Event) -> np.random.Generator:
        """A fresh generator per decision, seeded by the policy seed and the event: a trial's
        boundary or report (its id and step), or free slots (the trials created so far and the
        slots). The same event gets the same numbers in every run of the study, after a
        restart and in the simulator (whatever the timing of the controller's iterations)."""
        self._consulted = True
        kind = list(EventKind).index(event.kind)
        if event.kind is EventKind.SLOT_FREE:
            key = (kind, len(self.state.trials), event.free_slots)
        else:
            key = (kind, int(event.trial_id or 0), int(event.step or 0))
        return np.random.default_rng(np.random.SeedSequence(self._policy_seed, spawn_key=key))

    def _schedule(self, writable: bool = True) -> None:
        """Give the policy its events, then free slots (not while writes fail: ``writable``)."""
        events, self.pending_events = self.pending_events, []
        if not self.policy.traits.wants_reports:
            events = [e for e in events if e.kind is not EventKind.REPORT]
        if not (self.policy.traits.wants_boundaries or self.policy.traits.boundary_decisions):
            events = [e for e in events if e.kind is not EventKind.BOUNDARY]
        if events:
            view = self.view()
            for event in events:
                trial = self.state.trials[event.trial_id]  # type: ignore[index]
                prediction = event.kind is EventKind.PREDICTION and not trial.status.is_final
                if trial.status is not TrialStatus.RUNNING and not prediction:
                    continue
                actions = self.policy.decide(view, event, self.rng_for(event)).actions
                for action in actions:
                    self.apply_action(action, event)
                if event.kind is EventKind.BOUNDARY and not any(
                    a.trial_id == event.trial_id for a in actions
                ):
                    self._answer_boundary(trial, int(event.step or 0))
        if self.state.state is StudyState.RUNNING and self.dirty and writable:
            self.dirty = False
            self._fill_slots()
        if self.state.state is StudyState.STOPPING and not self.state.active_segments():
            final = StudyState.FAILED if self.state.failing else StudyState.STOPPED
            self.set_study(final, self.state.reason)

    def _answer_boundary(self, trial: TrialRecord, step: int) -> None:
        """Tell a worker waiting at a boundary to go on when the policy said nothing of its
        trial (a policy that decides at boundaries answers every one; the worker would
        otherwise wait ``decision_wait``)."""
        seg = self._running_segment(trial)
        if seg is None or not self.policy.traits.boundary_decisions or seg.decision:
            return
        message = DecisionMessage(seg.segment_id, step, Decision.CONTINUE, epoch=self.epoch)
        self.after_commit(partial(self.wire.write_decision, message))

    def idle_workers(self) -> tuple[list[WorkerRecord], int]:
        """The started workers without a segment (running ones first) and the free slots."""
        active = self.state.active_segments()
        busy = {s.worker_id for s in active}
        live = self.live_workers()
        rank = {WorkerState.RUNNING: 0, WorkerState.UNKNOWN: 1, WorkerState.PENDING: 2}
        idle = sorted(
            (
                w
                for w in live
                if w.state is WorkerLife.STARTED
                and w.worker_id not in busy
                and self.elastic.fits(w)  # a sized plan's stage runs on workers of its size
            ),
            key=lambda w: rank.get(self.pool.states.get(w.worker_id, WorkerState.PENDING), 2),
        )
        pending = sum(
            not w.info or self.pool.states.get(w.worker_id) is WorkerState.PENDING for w in live
        )
        can_submit = max(self.executor.max_pending - pending, 0)
        free_slots = min(self.elastic.pool_size() - len(busy), len(idle) + can_submit)
        return idle, free_slots

    def _fill_slots(self) -> None:
        """Give free workers work, as the study's scheduling does (:attr:`scheduling`)."""
        self.scheduling.fill_slots()

    def trial_for(self, action: Action, view: StudyView) -> TrialRecord | None:
        """Return the trial an action starts or resumes (creating it for START and FORK)."""
        if action.kind is ActionKind.RESUME:
            trial = self.state.trials.get(action.trial_id)  # type: ignore[arg-type]
            if trial is None or trial.status not in (TrialStatus.QUEUED, TrialStatus.SUSPENDED):
                logger.warning("cannot resume trial %s; ignored", action.trial_id)
                return None
            return trial
        trial_id = len(self.state.trials)
        seed = action.seed if action.seed is not None else trial_seed(self.spec.seed, trial_id)
        entry = rec.TrialCreatedEntry(
            params={},
            seed=seed,
            priority=action.priority,
            end_step=action.end_step,
            generation=action.generation,
            initiator=action.initiator,
        )
        if action.kind is ActionKind.FORK:
            parent = self.state.trials.get(action.trial_id)  # type: ignore[arg-type]
            row = self._checkpoint_row(action.trial_id, action.step)
            own = None if parent is None else parent.checkpoint_row
            if row is None and own is not None and self.state.checkpoints[own].step == action.step:
                row = own  # stage trees: another trial's checkpoint answered the parent
            if parent is None or row is None:
                logger.warning(
                    "cannot fork trial %s at step %s; ignored", action.trial_id, action.step
                )
                return None
            entry = dataclasses.replace(
                entry,
                params=dict(action.params or {}),
                parent_trial=parent.trial_id,
                parent_step=action.step,
                parent_checkpoint_row=row,
            )
        elif action.params is not None:
            entry = dataclasses.replace(entry, params=dict(action.params))
        else:
            if self.state.generated >= self.spec.num_trials:
                return None
            index = self.state.generated
            proposal = self.propose(index, view)
            entry = dataclasses.replace(
                entry, params=proposal.params, generator_index=index, info=proposal.info or None
            )
        self.log(entry, trial=trial_id)
        logger.info("trial %d created: %s", trial_id, entry.params)
        return self.state.trials[trial_id]

    def _checkpoint_row(self, trial_id: int | None, step: int | None) -> int | None:
        """The row of ``trial_id``'s live checkpoint at ``step`` (the first), or ``None``."""
        if trial_id is None:
            return None
        for ref in self.state.live_checkpoints(trial_id):
            if ref.step == step:
                return ref.row
        return None

    def assign(self, trial: TrialRecord, worker_id: str, until_step: int | None) -> None:
        """Start a segment of ``trial`` on worker ``worker_id`` from its checkpoint (or its
        parent's), to ``until_step``; its assignment file is written after the commit."""
        row = trial.checkpoint_row
        if row is None:  # a forked trial restarts from its parent's checkpoint until it has one
            row = trial.parent_checkpoint_row
        ref = self.state.checkpoints.get(row) if row is not None else None
        start = ref.step if ref is not None else 0
        end = min(trial.end_step or self.spec.max_steps, self.spec.max_steps)
        until = min(until_step or end, end)
        if start >= end:
            self.set_trial(trial, TrialStatus.COMPLETED, "its checkpoint is at its last step")
            return
        seg = self.new_segment(trial, worker_id, start, max(until, start + 1), row)
        logger.info(
            "segment %d: trial %d on worker %s from step %d",
            seg.segment_id,
            trial.trial_id,
            worker_id,
            start,
        )

    def new_segment(
        self,
        trial: TrialRecord,
        worker_id: str,
        start: int,
        until: int,
        row: int | None,
        *,
        checkpoint_steps: list[int] | None = None,
        stages: list[int] | None = None,
    ) -> SegmentRecord:
        """Journal a segment of ``trial`` on ``worker_id`` and queue its assignment file."""
        segment_id = len(self.state.segments)
        entry = rec.SegmentAssignedEntry(
            worker=worker_id,
            start_step=start,
            until_step=until,
            checkpoint_row=row,
            checkpoint_steps=checkpoint_steps,
            stages=stages,
        )
        self.log(entry, trial=trial.trial_id, segment=segment_id)
        seg = self.state.segments[segment_id]
        self.after_commit(self.assignment_writer(seg))
        return seg

    def assignment_writer(self, seg: SegmentRecord) -> Callable[[], None]:
        """A function that writes the assignment of ``seg`` to its worker."""
        trial = self.state.trials[seg.trial_id]
        ref = (
            self.state.checkpoints.get(seg.checkpoint_row)
            if seg.checkpoint_row is not None
            else None
        )
        entry = self.spec.entry
        assignment = Assignment(
            segment_id=seg.segment_id,
            trial_id=seg.trial_id,
            params=trial.params,
            seed=self.scheduling.segment_seed(trial),
            start_step=seg.start_step,
            until_step=seg.until_step,
            max_steps=self.spec.max_steps,
            boundary=self.spec.boundary,
            metric=self.spec.metric,
            mode=self.spec.mode,
            entry={
                "file": str(entry.file) if entry.file else None,
                "module": entry.module,
                "function": entry.function,
            },
            checkpoint=ref.path if ref is not None else None,
            checkpoint_sha256=ref.sha256 if ref is not None else None,
            decision_wait=self.scheduling.decision_wait(),
            checkpoint_steps=seg.checkpoint_steps,
            epoch=self.epoch,
        )
        return partial(self.wire.write_assignment, seg.worker_id, assignment)

    def apply_action(self, action: Action, event: Event | None) -> None:
        """Carry out one policy action (``event``: the event it answers, if any)."""
        trial = self.state.trials.get(action.trial_id)  # type: ignore[arg-type]
        if trial is None:
            logger.warning("action %s names no trial; ignored", action)
            return
        if action.kind is ActionKind.CONTINUE:
            if action.priority != trial.priority:
                entry = rec.DecisionEntry(
                    decision="continue", priority=action.priority, reason=action.reason
                )
                self.log(entry, trial=trial.trial_id)
            if event is not None and event.kind is EventKind.BOUNDARY:
                self._answer_boundary(trial, int(event.step or 0))
        elif action.kind is ActionKind.SUSPEND:
            seg = self._running_segment(trial)
            if seg is not None:
                self.send_decision(seg, Decision.SUSPEND, action.reason, priority=action.priority)
            elif trial.status is TrialStatus.QUEUED:
                self.set_trial(trial, TrialStatus.SUSPENDED, action.reason)
        elif action.kind is ActionKind.TERMINATE:
            self._terminate(trial, action.reason or "terminated by the policy")
        else:
            logger.warning("action %s cannot be carried out here; ignored", action)

    def _terminate(self, trial: TrialRecord, reason: str) -> None:
        seg = self._running_segment(trial)
        if seg is not None:
            self.send_decision(seg, Decision.STOP, reason)
        elif not trial.status.is_final:
            self.set_trial(trial, TrialStatus.TERMINATED, reason)

    def _running_segment(self, trial: TrialRecord) -> SegmentRecord | None:
        if trial.segments:
            seg = self.state.segments[trial.segments[-1]]
            if not seg.status.is_final:
                return seg
        return None

    def _can_exit(self) -> bool:
        """True once the study has ended and every worker has gone (or was cancelled)."""
        if self._abort or self._detach:
            return True
        if self.storage_fault is not None:
            return False  # what the journal must record is not committed yet
        if self.state.state not in (StudyState.FINISHED, StudyState.STOPPED, StudyState.FAILED):
            return False
        now = self.clock.now()
        if self._exit_ordered_at is None:
            self._exit_ordered_at = now
        for worker in self.live_workers():
            if not worker.info:
                self.log(
                    rec.WorkerEntry(
                        worker=worker.worker_id, event="exited", reason="never started"
                    )
                )
            elif worker.state is WorkerLife.STARTED:
                self.pool.order_exit(worker, f"study {self.state.state.value}")
            elif now - self._exit_ordered_at > EXIT_GRACE:
                self.executor.cancel(worker.worker_id, worker.info)
                self.log(
                    rec.WorkerEntry(
                        worker=worker.worker_id,
                        event="lost",
                        reason=f"did not exit within {EXIT_GRACE:.0f} s; cancelled",
                    )
                )
        self.commit()
        return not self.live_workers()
