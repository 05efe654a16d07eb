"""The scheduling core's state and its journal helpers: every change goes through
:meth:`CoreBase.log`."""

from __future__ import annotations

import json
import logging
import marshal
import math
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from hpctune.backends.base import Executor
from hpctune.core.curves import CurveFits, ServiceFactory
from hpctune.core.ingest import Ingest
from hpctune.core.wire import Wire
from hpctune.curves.fitter import FitOptions
from hpctune.curves.service import CurveService
from hpctune.errors import StorageError
from hpctune.files import dumps
from hpctune.journal import records as rec
from hpctune.journal.delta import state_delta
from hpctune.journal.entities import SegmentRecord, TrialRecord, WorkerRecord
from hpctune.journal.memory import MemoryJournal
from hpctune.journal.state import StudyRecord
from hpctune.journal.store import JournalWriter
from hpctune.policies import Event, Policy, StudyView, TrialView, make_policy
from hpctune.policies.generators import Generator, Proposal, make_generator
from hpctune.spec import StudySpec, study_context
from hpctune.study.seeding import component_seed
from hpctune.study.states import Decision, StudyState, TrialStatus
from hpctune.wire.clock import Clock
from hpctune.wire.layout import StudyPaths
from hpctune.wire.lease import Fenced, Lease
from hpctune.wire.protocol import DecisionMessage
from hpctune.wire.storage import describe, format_bytes, storage_error

logger = logging.getLogger(__name__)

CONTROLLER_BEAT = 2.0
STARTUP_FAILURES_LIMIT = 3
ASSIGNMENT_TIMEOUT = float(os.environ.get("HPCTUNE_ASSIGNMENT_TIMEOUT", 30))
ASSIGNMENT_RESENDS = 3  # re-sends of an assignment not taken before it goes to another worker
STORAGE_RETRY = 2.0  # seconds between checks while writes fail (full disk, I/O errors)
STORAGE_PATIENCE = float(os.environ.get("HPCTUNE_STORAGE_PATIENCE", 600))
STORAGE_MARGIN = 1 << 20  # bytes the journal and event files need besides checkpoints
EXIT_GRACE = 30.0
POLICY_SNAPSHOT_EVERY = 200  # policy_delta records between two whole policy states
REQUEUE_SILENCE = 10.0  # a queued worker whose heartbeat is older than this was requeued
DECISION_WAIT = 2.0  # seconds a worker waits at a boundary for its step's decision


def env_setting(name: str, default: float, *, allow_inf: bool = False) -> float:
    """A number of the environment variable ``name``: ``default`` when it is unset, not a
    number, negative or NaN, or infinite without ``allow_inf``."""
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value >= 0 and (allow_inf or math.isfinite(value)) else default


def decision_wait_from_env() -> float:
    """``HPCTUNE_DECISION_WAIT`` (seconds a worker waits at a boundary for its step's decision,
    after which it goes on and the decision applies at its next report), else
    :data:`DECISION_WAIT`."""
    return env_setting("HPCTUNE_DECISION_WAIT", DECISION_WAIT)


@dataclass
class StorageFault:
    """Writes failing since ``since`` (controller time); new assignments wait."""

    since: float
    detail: str
    checked: float = 0.0


class CoreBase:
    """The scheduling core's state and journal helpers (:class:`~hpctune.core.loop.SchedulingCore`
    adds the loop and composes the parts).

    Everything outside reaches it through what it is given: the journal ``writer``, the
    ``wire`` (workers' and users' files, or the simulator's memory), the ``executor``, the
    ``clock``, an optional ``lease``. :class:`hpctune.controller.Controller` builds it on a study
    directory; :meth:`~hpctune.core.loop.SchedulingCore.in_memory` on memory (the simulator).

    Args:
        paths: The study directory's paths (names only: the core opens no file).
        wire: Reads workers' event lines, heartbeats and users' commands; writes assignments,
            decisions and answers.
        writer: The journal it appends to and commits.
        lease: The lease its commits are fenced by (``None``: a study in memory).
        state: The study record folded from the journal so far.
        executor: Starts and watches the workers, or a function of the spec that returns one.
        clock: The time source.
        poll_interval: Seconds between iterations.
        worker_timeout: A worker whose heartbeat is older than this is lost.
        startup_timeout: A worker with no heartbeat this long after its start is lost.
        decision_wait: Seconds a worker waits for a decision at a boundary (policies that decide
            at boundaries only).
        stop_grace: Seconds a segment told to stop or suspend has to comply before its worker
            is cancelled (default ``HPCTUNE_STOP_GRACE`` or 300).
        on_progress: Called after every iteration with the controller.
        curve_options: Learning-curve fit options (default: from ``[curves]``; for tests).
        curve_service: The fit service, or what builds it when the policy wants predictions
            (:class:`~hpctune.core.curves.CurveFits`: the controller's on the study directory,
            the simulator's answering from a trace).
        policy: Replaces the policy the spec names (e.g. one that is not registered).
        generator: Replaces the generator the spec names (e.g. one answered from a trace).
    """

    def __init__(
        self,
        *,
        paths: StudyPaths,
        wire: Wire,
        writer: JournalWriter | MemoryJournal,
        lease: Lease | None,
        state: StudyRecord,
        executor: Executor | Callable[[StudySpec], Executor],
        clock: Clock,
        poll_interval: float,
        worker_timeout: float,
        startup_timeout: float,
        decision_wait: float,
        stop_grace: float | None,
        on_progress: Callable[[Any], None] | None,
        curve_options: FitOptions | None,
        curve_service: CurveService | ServiceFactory | None = None,
        policy: Policy | None = None,
        generator: Generator | None = None,
    ) -> None:
        self.paths = paths
        self.wire = wire
        self.lease = lease
        self.fenced: Fenced | None = None
        self.clock = clock
        self.poll_interval = poll_interval
        self.worker_timeout = worker_timeout
        self.startup_timeout = startup_timeout
        self.decision_wait = decision_wait
        self.stop_grace = stop_grace or float(os.environ.get("HPCTUNE_STOP_GRACE", 300))
        self.on_progress = on_progress
        self.writer = writer
        self.state = state
        self.spec = StudySpec.from_dict(self.state.spec)
        self.executor = executor if isinstance(executor, Executor) else executor(self.spec)
        self.policy = policy or make_policy(
            self.spec.policy.name, self.spec.policy.options, study_context(self.spec)
        )
        self.policy.load_state_dict(self.state.policy_state)
        self.generator = generator or make_generator(
            self.spec.generator.name,
            self.spec.generator.options,
            self.spec.space,
            component_seed(self.spec.seed, "generator"),
        )
        self._policy_seed = component_seed(self.spec.seed, "policy")
        self.cursors: dict[str, int] = self.writer.cursors
        self._outbox: list[Callable[[], None]] = []
        self.pending_events: list[Event] = []
        self.dirty = True
        self._last_beat = -np.inf
        self._abort = False
        self._abort_request = False
        self._detach = False
        self._stop_request = ""
        self._exit_ordered_at: float | None = None
        self.iterations = 0
        # learning-curve fits and predictions
        self.curves = CurveFits(self, curve_options, curve_service)
        self.ingest = Ingest(self)  # the workers' event lines into the journal
        self.storage_fault: StorageFault | None = None  # writes failing: no new assignments
        self.storage_patience = STORAGE_PATIENCE
        self.assignment_timeout = ASSIGNMENT_TIMEOUT
        self.last_event: dict[int, float] = {}  # segment -> controller time of its last event
        self.decision_sent: dict[int, float] = {}  # segment -> when its decision was last sent
        self._trial_views: dict[int, tuple[tuple[Any, ...], TrialView]] = {}  # see _trial_view
        self._views: dict[int, TrialView] = {}  # the trials' views, kept up to date by view
        self._open_views: set[int] = set()  # trials whose views are looked at every time
        self._views_t0: float | None = None
        self._collected_at = -1  # state.checkpoint_changes at the last checkpoint collection
        self._policy_raw: dict[str, Any] | None = None  # a copy of the state last journaled
        self._policy_baseline = False  # a policy that tracks its changes had a whole state
        self._policy_patches = 0  # policy_delta records since the last whole state
        self._consulted = True  # the policy was asked since its state was last journaled
        self._compose()

    def _compose(self) -> None:
        """Build the parts that need the whole core (done by
        :class:`~hpctune.core.loop.SchedulingCore`)."""

    def view(self, free_slots: int = 0) -> StudyView:
        """The policy's view of the study (built by the controller class)."""
        raise NotImplementedError

    def propose(self, index: int, view: StudyView) -> Proposal:
        """The generator's proposal for trial ``index``.

        A model-based generator (not :attr:`~Generator.predictable`) gets a view of the journal
        as it is now, with the trials created since ``view`` was built (several slots filled at
        once), so its proposal is a function of the journal's trials at the trial's creation.
        """
        if not self.generator.predictable:
            view = self.view()
        return self.generator.propose(index, view)

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
        (:meth:`_storage_fault`).
        """
        try:
            if self.writer.has_pending or self.cursors != self.writer.cursors:
                if self._consulted:  # a policy's state changes only when it decides
                    self._consulted = False
                    self._journal_policy_state()
                self.check_lease()
                self.writer.commit(self.cursors)
        except OSError as exc:
            if storage_error(exc) is None:
                raise
            self.storage_failed(describe(exc, "the journal"), "journal commit")
            return
        self.check_lease()
        outbox, self._outbox = self._outbox, []
        for action in outbox:
            try:
                action()
            except OSError as exc:
                logger.warning("could not write a file after commit: %s", exc)
                if storage_error(exc) is not None:
                    self.storage_failed(describe(exc), "a file after commit")

    def _journal_policy_state(self) -> None:
        """Journal the policy's state when it changed: a patch of the one journaled before
        (``policy_delta``), the whole state once per controller and every
        ``POLICY_SNAPSHOT_EVERY`` patches (a reader's replay stays short).

        The state is compared and patched as the policy gives it, against a copy of the last
        one journaled (pickled: the policy may change its own objects later); only the patch is
        serialised, so a state that grows with the study costs a commit what changed. A policy
        that tracks its changes (``tracks_state_changes``: ASHA) gives the patch itself, and a
        commit costs the change alone, neither the state's building nor its comparison.
        """
        if self.policy.traits.tracks_state_changes:
            self._journal_tracked_state()
            return
        raw = self.policy.state_dict()
        previous = self._policy_raw
        if previous is not None and raw == previous:
            return
        if previous is None:
            text = dumps(raw)
            if json.loads(text) == self.state.policy_state:
                self._policy_raw = _copy_state(raw)
                return
        self._policy_raw = _copy_state(raw)
        if previous is None or self._policy_patches >= POLICY_SNAPSHOT_EVERY:
            self._policy_patches = 0
            self.log(rec.PolicyStateEntry(state=raw))
        else:
            self._policy_patches += 1
            self.log(rec.PolicyDeltaEntry(delta=state_delta(previous, raw)))

    def _journal_tracked_state(self) -> None:
        """The policy's own patch since the last commit (``policy_delta``); the whole state
        (``policy_state``) once per controller, unless the journal holds it already, and every
        ``POLICY_SNAPSHOT_EVERY`` patches."""
        changes = self.policy.state_changes()
        if self._policy_baseline and self._policy_patches < POLICY_SNAPSHOT_EVERY:
            if changes:
                self._policy_patches += 1
                self.log(rec.PolicyDeltaEntry(delta=changes))
            return
        self._policy_baseline = True
        raw = self.policy.state_dict()
        if json.loads(dumps(raw)) != self.state.policy_state:
            self._policy_patches = 0
            self.log(rec.PolicyStateEntry(state=raw))

    def warn(self, code: str, message: str, trial: int = -1) -> None:
        """Journal a warning (shown by `hpctune status` and the progress lines) and log it."""
        logger.warning("%s", message)
        self.log(rec.WarningEntry(code=code, message=message), trial=trial)

    def storage_failed(self, what: str, where: str) -> None:
        """Writes fail (a full disk, a quota, I/O errors): pause new assignments until a check
        finds room again (:meth:`_check_storage`)."""
        if self.storage_fault is None:
            logger.error("%s (%s): new assignments wait until writes succeed", what, where)
            self.storage_fault = StorageFault(self.clock.now(), what, self.clock.now())

    def _space_needed(self) -> int:
        """Bytes the study needs free to go on: a checkpoint per running segment and one more
        (the largest so far), and a margin for the journal and event files."""
        largest = self.state.checkpoints.max_nbytes()
        return largest * (len(self.state.active_segments()) + 1) + STORAGE_MARGIN

    def _check_storage(self) -> bool:
        """While writes fail, retry every ``STORAGE_RETRY`` s; return True once they work.

        Raises:
            StorageError: They kept failing for ``storage_patience`` seconds.
        """
        fault = self.storage_fault
        if fault is None:
            return True
        now = self.clock.now()
        if now - fault.checked < STORAGE_RETRY:
            return False
        fault.checked = now
        needed = self._space_needed()
        ok, free = self.wire.storage_room(needed)
        if ok:
            self.storage_fault = None
            self.commit()  # the rows kept pending
            if self.storage_fault is None:
                self.warn(
                    "storage",
                    f"writes failed for {now - fault.since:.0f} s ({fault.detail}); "
                    "assignments were paused, no trial was failed",
                )
                self.dirty = True
                return True
            self.storage_fault.since = fault.since  # still failing: patience runs from the first
        if now - fault.since > self.storage_patience:
            mount, kind = self.wire.filesystem()
            raise StorageError(
                f"writes to {self.paths.root} kept failing for {now - fault.since:.0f} s "
                f"({fault.detail}); its filesystem {mount} ({kind}) has "
                f"{format_bytes(max(free, 0))} free and the study needs at least "
                f"{format_bytes(needed)}; free some space, then `hpctune resume "
                f"{self.paths.root}` (no trial was failed)"
            )
        return False

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
                    self.send_decision(seg, Decision.SUSPEND, reason)

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

    def _beat(self, final: bool = False) -> None:
        """Write ``controller.json``: pid, host, Slurm job, time, state.

        A controller that ends writes time 0 (idle workers then exit at once); one that detaches
        keeps the time fresh, so its workers wait ``controller_timeout`` for the next one.
        """
        now = self.clock.now()
        if final or now - self._last_beat >= CONTROLLER_BEAT:
            self._last_beat = now
            ended = final and not self._detach
            try:
                self._write_beat(now, ended, final)
            except OSError as exc:
                if storage_error(exc) is None:
                    raise
                logger.warning("could not write %s: %s", self.paths.controller_file, exc)

    def _write_beat(self, now: float, ended: bool, final: bool) -> None:
        """Write ``controller.json`` (a controller of a study directory; the core in memory has
        none: :class:`hpctune.controller.Controller` overrides it)."""

    def assignment_writer(self, seg: SegmentRecord) -> Callable[[], None]:
        """A function that writes the assignment file of ``seg`` (the controller's)."""
        raise NotImplementedError

    def live_workers(self) -> list[WorkerRecord]:
        """The workers not known to have ended."""
        return [w for w in self.state.workers.values() if w.state.is_alive]

    def send_decision(
        self,
        seg: SegmentRecord,
        decision: Decision,
        reason: str,
        *,
        log: bool = True,
        priority: float | None = None,
    ) -> None:
        """Journal a decision for a running segment (unless ``log`` is false: a re-send) and
        write it to the segment after the commit."""
        if log:
            entry = rec.DecisionEntry(
                step=self.state.trials[seg.trial_id].step,
                decision=decision.value,
                reason=reason,
                priority=priority,
            )
            self.log(entry, trial=seg.trial_id, segment=seg.segment_id)
        message = DecisionMessage(
            seg.segment_id, self.state.trials[seg.trial_id].step, decision, reason, self.epoch
        )
        self.after_commit(partial(self.wire.write_decision, message))  # see write_assignment
        self.decision_sent[seg.segment_id] = self.clock.now()


def _copy_state(state: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a policy's state (marshal: the fastest for plain data; pickle when the
    state holds other types, e.g. numpy scalars)."""
    try:
        copied = marshal.loads(marshal.dumps(state))
    except ValueError:
        copied = pickle.loads(pickle.dumps(state))
    return dict(copied)
