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

import json
import logging
from collections.abc import Callable
from functools import partial

import numpy as np

from hpctune.backends.base import Executor, WorkerState
from hpctune.core.actions import TrialActions
from hpctune.core.commands import TrialCommands
from hpctune.core.curves import CurveFits, ServiceFactory
from hpctune.core.elastic import ElasticFollower
from hpctune.core.inbox import Inbox
from hpctune.core.ingest import Ingest
from hpctune.core.policy_state import PolicyStateJournal
from hpctune.core.pool import WorkerPool
from hpctune.core.scheduling import Scheduling, TrialScheduling
from hpctune.core.settings import CoreSettings
from hpctune.core.stages import StageTreeScheduling
from hpctune.core.storage import StorageWatch
from hpctune.core.views import Views
from hpctune.core.wire import Wire
from hpctune.curves.fitter import FitOptions
from hpctune.files import dumps
from hpctune.journal import records as rec
from hpctune.journal.entities import TrialRecord, WorkerRecord
from hpctune.journal.memory import MemoryJournal
from hpctune.journal.state import StudyRecord
from hpctune.journal.store import JournalWriter
from hpctune.policies import Event, EventKind, Policy, StudyView, make_policy
from hpctune.policies.generators import Generator, Proposal, make_generator
from hpctune.spec import StudySpec, study_context
from hpctune.study.seeding import component_seed
from hpctune.study.states import Decision, SegmentStatus, StudyState, TrialStatus, WorkerLife
from hpctune.wire.clock import Clock
from hpctune.wire.layout import StudyPaths
from hpctune.wire.lease import Fenced, Lease
from hpctune.wire.storage import describe, storage_error

logger = logging.getLogger(__name__)

CONTROLLER_BEAT = 2.0  # seconds between two writes of the controller's heartbeat
EXIT_GRACE = 30.0  # seconds a worker told to exit at the study's end has before it is cancelled

#: Writes the controller's heartbeat (``controller.json``): the time (0 once the controller
#: ended: idle workers exit at once), the state shown (``detached`` for a controller that left
#: its study running) and whether it is the last write.
BeatWriter = Callable[[float, str, bool], None]


class SchedulingCore:
    """Run a study to its end (or until stopped) from its journal: the scheduling core.

    It is given everything outside it and builds its parts on what it is given (each part sees
    the core through its narrow interface, :mod:`hpctune.core.hosts`). The controller of a study
    directory (:class:`hpctune.controller.Controller`) builds one on the study's files, its
    lease and the real clock; the simulator (:class:`hpctune.simulator.Simulator`) builds one in
    memory, on simulated workers and a simulated clock.

    Args:
        state: The study record folded from the journal so far.
        writer: The journal it appends to and commits.
        wire: Reads workers' event lines, heartbeats and users' commands; writes assignments,
            decisions and answers.
        executor: Starts, watches and cancels the workers.
        clock: The time source.
        paths: The study directory's paths (names only: the core opens no file).
        lease: The lease its commits are fenced by (``None``: a study in memory).
        settings: Its timings (default: :class:`~hpctune.core.settings.CoreSettings`'s).
        curve_service: Builds the fit service when the policy wants predictions (the
            controller's on the study directory, the simulator's answering from a trace).
        curve_options: Learning-curve fit options (default: from ``[curves]``; for tests).
        policy: Replaces the policy the spec names (e.g. one that is not registered).
        generator: Replaces the generator the spec names (e.g. one answered from a trace).
        on_progress: Called with the core after every iteration.
        write_beat: Writes the controller's heartbeat file (``None``: a study in memory has
            none).
        after_start: Called once :meth:`start` committed (the controller then prunes the
            journals of earlier epochs).
    """

    def __init__(
        self,
        state: StudyRecord,
        *,
        writer: JournalWriter | MemoryJournal,
        wire: Wire,
        executor: Executor,
        clock: Clock,
        paths: StudyPaths,
        lease: Lease | None = None,
        settings: CoreSettings | None = None,
        curve_service: ServiceFactory | None = None,
        curve_options: FitOptions | None = None,
        policy: Policy | None = None,
        generator: Generator | None = None,
        on_progress: Callable[[SchedulingCore], None] | None = None,
        write_beat: BeatWriter | None = None,
        after_start: Callable[[], None] | None = None,
    ) -> None:
        self.state = state
        self.writer = writer
        self.wire = wire
        self.executor = executor
        self.clock = clock
        self.paths = paths
        self.lease = lease
        self.settings = settings or CoreSettings()
        self.on_progress = on_progress
        self._write_beat = write_beat
        self._after_start = after_start
        self.spec = StudySpec.from_dict(state.spec)
        self.policy = policy or make_policy(
            self.spec.policy.name, self.spec.policy.options, study_context(self.spec)
        )
        self.policy.load_state_dict(state.policy_state)
        self.generator = generator or make_generator(
            self.spec.generator.name,
            self.spec.generator.options,
            self.spec.space,
            component_seed(self.spec.seed, "generator"),
        )
        self._policy_seed = component_seed(self.spec.seed, "policy")
        self.cursors: dict[str, int] = writer.cursors
        self.pending_events: list[Event] = []
        self.last_event: dict[int, float] = {}  # segment -> controller time of its last event
        self.dirty = True
        self.fenced: Fenced | None = None
        self.iterations = 0
        self._outbox: list[Callable[[], None]] = []
        self._last_beat = -np.inf
        self._abort = False
        self._abort_request = False
        self._detach = False
        self._stop_request = ""
        self._exit_ordered_at: float | None = None
        self._collected_at = -1  # state.checkpoint_changes at the last checkpoint collection
        self._consulted = True  # the policy was asked since its state was last journaled
        # the parts, each given the core through its narrow interface (hosts.py)
        self.storage = StorageWatch(self)
        self.policy_state = PolicyStateJournal(self)
        self.curves = CurveFits(self, curve_options, curve_service)
        self.ingest = Ingest(self)
        self.actions = TrialActions(self)
        self.pool = WorkerPool(self)
        self.commands = TrialCommands(self)
        self.inbox = Inbox(self)
        self.elastic = ElasticFollower(self)
        self.views = Views(self)
        self.scheduling: Scheduling = (
            StageTreeScheduling(self) if self.spec.stages.enabled else TrialScheduling(self)
        )

    # -- the journal -----------------------------------------------------------------------

    def log(self, entry: rec.LogEntry, *, trial: int = -1, segment: int = -1) -> None:
        """Append a log record and apply it to the in-memory state, exactly as a reader would
        (read back first: a record a reader would refuse is not written)."""
        kind = entry.kind
        if rec.RECORD_TYPES.get(kind) is not type(entry):
            raise ValueError(
                f"journal record kind {kind!r} ({type(entry).__name__}) is not registered: add "
                "its type to RECORD_TYPES in hpctune/journal/records.py and raise FORMAT_MINOR "
                "in hpctune/journal/store.py"
            )
        now = self.clock.now()
        text = dumps(entry.to_data())
        read = type(entry).from_data(json.loads(text))
        self.writer.append("log", kind=kind, trial=trial, segment=segment, time=now, data=text)
        self.state.apply_entry(read, trial, segment, now)
        self.dirty = True

    @property
    def epoch(self) -> int:
        """This controller's epoch (written into its commits, assignments and decisions)."""
        return self.lease.epoch if self.lease is not None else 0

    def check_lease(self) -> None:
        """Raise :class:`Fenced` if another controller took a higher epoch."""
        if self.lease is not None:
            self.lease.check()

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` (a file write that follows from the journal) after the next commit."""
        self._outbox.append(action)

    def commit(self) -> None:
        """Commit the journal, then write the files that follow from it (the outbox).

        The lease is checked before the commit, again just before its record is published, and
        after it: a fenced controller stops without committing, and never writes the files of a
        commit the new controller may not have. A write that fails for want of space or with an
        I/O error does not stop the controller: the rows stay pending (a commit is idempotent),
        the outbox waits for the next successful commit, and new assignments pause
        (:class:`~hpctune.core.storage.StorageWatch`).
        """
        try:
            if self.writer.has_pending or self.cursors != self.writer.cursors:
                if self._consulted:  # a policy's state changes only when it decides
                    self._consulted = False
                    self.policy_state.journal()
                self.check_lease()
                self.writer.commit(self.cursors)
        except OSError as exc:
            if storage_error(exc) is None:
                raise
            self.storage.failed(describe(exc, "the journal"), "journal commit")
            return
        self.check_lease()
        outbox, self._outbox = self._outbox, []
        for action in outbox:
            try:
                action()
            except OSError as exc:
                logger.warning("could not write a file after commit: %s", exc)
                if storage_error(exc) is not None:
                    self.storage.failed(describe(exc), "a file after commit")

    def warn(self, code: str, message: str, trial: int = -1) -> None:
        """Journal a warning (shown by `hpctune status` and the progress lines) and log it."""
        logger.warning("%s", message)
        self.log(rec.WarningEntry(code=code, message=message), trial=trial)

    def set_study(self, state: StudyState, reason: str, *, fail: bool = False) -> None:
        """Journal the study's new state (a study that ends with no metric reported fails);
        entering STOPPING tells every running segment to suspend."""
        trials = self.state.trials.values()
        if state is StudyState.FINISHED and trials and not any(t.curve_values for t in trials):
            state, reason, fail = StudyState.FAILED, self._no_metric_reason(), True
        if self.state.state is not state:
            logger.info("study %s: %s", state.value, reason)
            self.log(rec.StudyEntry(state=state, reason=reason, fail=fail))
            if state is StudyState.STOPPING:
                for seg in self.state.active_segments():
                    self.actions.send_decision(seg, Decision.SUSPEND, reason)

    def _no_metric_reason(self) -> str:
        """Why a study in which no trial reported its metric failed."""
        trials = self.state.trials.values()
        names = sorted({name for t in trials for name in t.last_metrics})
        text = f"no trial reported the study metric {self.spec.metric!r} ([study] metric)"
        if names:
            return f"{text}; the trials reported: {', '.join(names[:20])}"
        failed = [t for t in trials if t.status is TrialStatus.FAILED]
        if failed:
            return f"{text}; {len(failed)} trials failed, the first: {failed[0].reason}"
        return f"{text}; no trial reported anything"

    def set_trial(
        self,
        trial: TrialRecord,
        status: TrialStatus,
        reason: str = "",
        *,
        error: str | None = None,
        retries: int | None = None,
    ) -> None:
        """Journal the trial's new status; a final one sweeps its checkpoint files after the
        commit."""
        logger.info("trial %d %s %s", trial.trial_id, status.value, reason)
        entry = rec.TrialStatusEntry(status=status, reason=reason, error=error, retries=retries)
        self.log(entry, trial=trial.trial_id)
        if status.is_final:
            self.after_commit(partial(self._sweep_checkpoints, trial.trial_id))

    def _sweep_checkpoints(self, trial_id: int) -> None:
        """Delete a finished trial's checkpoint files the journal does not reference.

        They are left by a controller killed between a commit and its deletions, or by a worker
        killed while writing; nothing can use them.
        """
        keep = {ref.path for ref in self.state.live_checkpoints(trial_id)}
        self.wire.sweep_checkpoints(trial_id, keep)

    def live_workers(self) -> list[WorkerRecord]:
        """The workers not known to have ended."""
        return [w for w in self.state.workers.values() if w.state.is_alive]

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> StudyState:
        """Run until the study ends or is stopped; return the study's state.

        Raises:
            Fenced: Another controller took the study over; this one stopped without
                committing, and left the workers and ``controller.json`` to the new one.
        """
        try:
            self.start()
            while not self.step():
                self.clock.sleep(self.settings.poll_interval)
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
        self._release_unconfirmed()
        self.pool.startup_failures = 0
        for trial_id in self.wire.checkpoint_folders():  # files a killed one did not delete
            trial = self.state.trials.get(trial_id)
            if trial is not None and trial.status.is_final:
                self.after_commit(partial(self._sweep_checkpoints, trial_id))
        for seg in self.state.active_segments():
            owner = self.state.workers.get(seg.worker_id)
            if owner is not None and owner.state is WorkerLife.STARTED:
                self.after_commit(self.actions.assignment_writer(seg))
            if seg.decision:
                self.actions.send_decision(
                    seg, Decision(seg.decision), seg.decision_reason, log=False
                )
        self.curves.start()
        self.commit()
        if self._after_start is not None:
            self._after_start()

    def _release_unconfirmed(self) -> None:
        """Workers journaled but never confirmed started may not exist (a controller killed
        while submitting): they are lost, with no sign of workers failing to start, and told
        to exit should they run after all."""
        for worker in self.live_workers():
            if worker.info:
                continue
            self.pool.worker_gone(
                worker, WorkerLife.LOST, "never confirmed started", None, failed_start=False
            )
            order = partial(
                self.wire.write_assignment, worker.worker_id, None, "unknown to controller"
            )
            self.after_commit(partial(order, epoch=self.epoch))

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
        writable = self.storage.writable()
        self.inbox.read()
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

    def _beat(self, final: bool = False) -> None:
        """Write the controller's heartbeat (``controller.json``: see :data:`BeatWriter`) every
        ``CONTROLLER_BEAT`` seconds, and at the end.

        A controller that ends writes time 0 (idle workers then exit at once); one that detaches
        keeps the time fresh, so its workers wait ``controller_timeout`` for the next one.
        """
        now = self.clock.now()
        if self._write_beat is None or not (final or now - self._last_beat >= CONTROLLER_BEAT):
            return
        self._last_beat = now
        ended = final and not self._detach
        shown = "detached" if final and self._detach else self.state.state.value
        try:
            self._write_beat(0.0 if ended else now, shown, final)
        except OSError as exc:
            if storage_error(exc) is None:
                raise
            logger.warning("could not write %s: %s", self.paths.controller_file, exc)

    # -- the policy ------------------------------------------------------------------------

    def view(self, free_slots: int = 0) -> StudyView:
        """The policy's view of the study (:class:`~hpctune.core.views.Views`)."""
        return self.views.view(free_slots)

    def propose(self, index: int, view: StudyView) -> Proposal:
        """The generator's proposal for trial ``index``.

        A model-based generator (not :attr:`~Generator.predictable`) gets a view of the journal
        as it is now, with the trials created since ``view`` was built (several slots filled at
        once), so its proposal is a function of the journal's trials at the trial's creation.
        """
        if not self.generator.predictable:
            view = self.view()
        return self.generator.propose(index, view)

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
        traits = self.policy.traits
        if not traits.wants_reports:
            events = [e for e in events if e.kind is not EventKind.REPORT]
        if not (traits.wants_boundaries or traits.boundary_decisions):
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
                    self.actions.apply(action, event)
                if event.kind is EventKind.BOUNDARY and not any(
                    a.trial_id == event.trial_id for a in actions
                ):
                    self.actions.answer_boundary(trial, int(event.step or 0))
        if self.state.state is StudyState.RUNNING and self.dirty and writable:
            self.dirty = False
            self.scheduling.fill_slots()
        if self.state.state is StudyState.STOPPING and not self.state.active_segments():
            final = StudyState.FAILED if self.state.failing else StudyState.STOPPED
            self.set_study(final, self.state.reason)

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

    def _can_exit(self) -> bool:
        """True once the study has ended and every worker has gone (or was cancelled)."""
        if self._abort or self._detach:
            return True
        if self.storage.fault is not None:
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


__all__ = ["BeatWriter", "SchedulingCore"]
