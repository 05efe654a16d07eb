"""The controller: the only writer of the journal, and the only one that decides.

Each iteration of its loop:

1. reads user commands from the inbox;
2. ingests the event files of active segments (reports, checkpoints, ends) into the journal;
3. checks the workers (heartbeat files first, the executor's answer second) and turns the segments
   of dead workers into lost ones, whose trials resume from their last checkpoint;
4. asks the policy (boundaries and reports, then free slots) and carries out its actions;
5. grows or shrinks the worker pool;
6. commits the journal, and only then writes the assignment and decision files that follow from
   it (so a file never announces something the journal does not hold).

It keeps no state the journal does not have: kill it at any instant and a new one rebuilds the
same state from the journal, re-sends what may not have been sent, and adopts the live workers.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.clock import Clock, RealClock
from hpctune.errors import SubmissionError
from hpctune.eventlog import read_events
from hpctune.executors._base import Executor, WorkerState
from hpctune.files import dumps, read_json, write_json_atomic
from hpctune.journal import state as st
from hpctune.journal.reader import load_state
from hpctune.journal.state import CheckpointRef, SegmentRecord, StudyRecord, TrialRecord
from hpctune.journal.store import JournalReader, JournalWriter
from hpctune.layout import StudyPaths
from hpctune.policies import (
    Action,
    ActionKind,
    Event,
    EventKind,
    StudyView,
    TrialView,
    make_policy,
)
from hpctune.policies.generators import make_generator
from hpctune.protocol import (
    EV_CHECKPOINT,
    EV_END,
    EV_REPORT,
    EV_START,
    Assignment,
    DecisionMessage,
    Heartbeat,
    write_assignment,
)
from hpctune.seeding import component_seed, index_rng, trial_seed
from hpctune.spec import StudySpec
from hpctune.states import Decision, SegmentStatus, StudyState, TrialStatus

logger = logging.getLogger(__name__)

CONTROLLER_BEAT = 2.0
STARTUP_FAILURES_LIMIT = 3
EXIT_GRACE = 30.0
REQUEUE_SILENCE = 10.0  # a queued worker whose heartbeat is older than this was requeued

_SEGMENT_TO_TRIAL = {
    SegmentStatus.COMPLETED: TrialStatus.COMPLETED,
    SegmentStatus.SUSPENDED: TrialStatus.SUSPENDED,
    SegmentStatus.TERMINATED: TrialStatus.TERMINATED,
    SegmentStatus.FAILED: TrialStatus.FAILED,
}


class Controller:
    """Run a study to its end (or until stopped) from its journal.

    Args:
        study_dir: The study directory (created by ``hpctune launch``).
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
    """

    def __init__(
        self,
        study_dir: str | Path,
        executor: Executor | Callable[[StudySpec], Executor],
        *,
        clock: Clock | None = None,
        poll_interval: float = 0.1,
        worker_timeout: float = 60.0,
        startup_timeout: float = 300.0,
        decision_wait: float = 2.0,
        stop_grace: float | None = None,
        on_progress: Callable[[Controller], None] | None = None,
    ) -> None:
        self.paths = StudyPaths.of(study_dir)
        self.clock = clock or RealClock()
        self.poll_interval = poll_interval
        self.worker_timeout = worker_timeout
        self.startup_timeout = startup_timeout
        self.decision_wait = decision_wait
        self.stop_grace = stop_grace or float(os.environ.get("HPCTUNE_STOP_GRACE", 300))
        self.on_progress = on_progress
        self.writer = JournalWriter(self.paths.journal)
        self.state: StudyRecord = load_state(JournalReader(self.paths.journal))
        self.spec = StudySpec.from_dict(self.state.spec)
        self.executor = executor if isinstance(executor, Executor) else executor(self.spec)
        self.policy = make_policy(self.spec.policy.name, self.spec.policy.options)
        self.policy.load_state_dict(self.state.policy_state)
        self.generator = make_generator(
            self.spec.generator.name,
            self.spec.generator.options,
            self.spec.space,
            component_seed(self.spec.seed, "generator"),
        )
        self._policy_seed = component_seed(self.spec.seed, "policy")
        self.cursors: dict[str, int] = self.writer.cursors
        self._outbox: list[Callable[[], None]] = []
        self._events: list[Event] = []
        self._dirty = True
        self._last_beat = -np.inf
        self._startup_failures = 0
        self._start_retry_at = 0.0
        self._abort = False
        self._detach = False
        self._stop_request = ""
        self._exit_ordered_at: float | None = None
        self._worker_states: dict[str, WorkerState] = {}
        self._running_since: dict[str, float] = {}
        self.iterations = 0

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> StudyState:
        """Run until the study ends or is stopped; return the study's state."""
        self.start()
        try:
            while not self.step():
                self.clock.sleep(self.poll_interval)
        finally:
            self._beat(final=True)
            self.executor.close()
        return self.state.state

    def start(self) -> None:
        """Record this controller's start and re-send what a killed one may not have sent."""
        self._log(st.CONTROLLER, event="started", pid=os.getpid(), host=socket.gethostname())
        if self.state.state is not StudyState.FINISHED:
            self._set_study(StudyState.RUNNING, "controller started")
        for name in self.state.commands_done:
            self._outbox.append(partial(Path.unlink, self.paths.inbox / name, missing_ok=True))
        for worker in self._live_workers():
            if not worker.info:  # created, never confirmed started: it may not exist
                self._worker_gone(worker, "lost", "never confirmed started", None)
                path = self.paths.assignment(worker.worker_id)
                self._outbox.append(partial(write_assignment, path, None, "unknown to controller"))
        self._startup_failures = 0
        for seg in self.state.active_segments():
            owner = self.state.workers.get(seg.worker_id)
            if owner is not None and owner.state == "started":
                self._outbox.append(self._assignment_writer(seg))
            if seg.decision:
                self._send_decision(seg, Decision(seg.decision), seg.decision_reason, log=False)
        self._commit()

    def step(self) -> bool:
        """Run one iteration; return True when the controller should exit."""
        self.iterations += 1
        if self._stop_request:
            self.request_stop(self._stop_request)
            self._stop_request = ""
        self._read_inbox()
        self._ingest()
        self._check_workers()
        self._enforce_grace()
        self._schedule()
        self._manage_pool()
        self._commit()
        self._beat()
        if self.on_progress is not None:
            self.on_progress(self)
        return self._can_exit()

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop the study cooperatively: running trials suspend at their next report."""
        if self.state.state is StudyState.RUNNING:
            self._set_study(StudyState.STOPPING, reason)

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
        """Kill every worker now; their trials resume from their checkpoints on `resume`."""
        for worker in self._live_workers():
            self.executor.cancel(worker.worker_id, worker.info)
        self._abort = True

    # -- journal helpers ------------------------------------------------------------------------

    def _log(self, kind: str, *, trial: int = -1, segment: int = -1, **data: Any) -> None:
        """Append a log record and apply it to the in-memory state, exactly as a reader would."""
        now = self.clock.now()
        text = dumps(data)
        self.writer.append("log", kind=kind, trial=trial, segment=segment, time=now, data=text)
        self.state.apply(kind, trial, segment, now, json.loads(text))
        self._dirty = True

    def _commit(self) -> None:
        if self.writer.has_pending or self.cursors != self.writer.cursors:
            state = self.policy.state_dict()
            if state != self.state.policy_state:
                self._log(st.POLICY_STATE, state=state)
            self.writer.commit(self.cursors)
        outbox, self._outbox = self._outbox, []
        for action in outbox:
            try:
                action()
            except OSError as exc:
                logger.warning("could not write a file after commit: %s", exc)

    def _set_study(self, state: StudyState, reason: str, *, fail: bool = False) -> None:
        if self.state.state is not state:
            logger.info("study %s: %s", state.value, reason)
            self._log(st.STUDY, state=state.value, reason=reason, fail=fail)
            if state is StudyState.STOPPING:
                for seg in self.state.active_segments():
                    self._send_decision(seg, Decision.SUSPEND, reason)

    def _set_trial(
        self, trial: TrialRecord, status: TrialStatus, reason: str = "", **extra: Any
    ) -> None:
        logger.info("trial %d %s %s", trial.trial_id, status.value, reason)
        self._log(
            st.TRIAL_STATUS, trial=trial.trial_id, status=status.value, reason=reason, **extra
        )
        if status.is_final:
            self._outbox.append(partial(self._sweep_checkpoints, trial.trial_id))

    def _sweep_checkpoints(self, trial_id: int) -> None:
        """Delete a finished trial's checkpoint files the journal does not reference.

        They are left by a controller killed between a commit and its deletions, or by a worker
        killed while writing; nothing can use them.
        """
        folder = self.paths.trial_checkpoints(trial_id)
        keep = {
            ref.path
            for ref in self.state.checkpoints.values()
            if ref.trial_id == trial_id and not ref.deleted
        }
        for path in folder.glob("*") if folder.is_dir() else []:
            if self.paths.relative(path) not in keep:
                path.unlink(missing_ok=True)

    def _beat(self, final: bool = False) -> None:
        """Write ``controller.json``: pid, host, Slurm job, time, state.

        A controller that ends writes time 0 (idle workers then exit at once); one that detaches
        keeps the time fresh, so its workers wait ``controller_timeout`` for the next one.
        """
        now = self.clock.now()
        if final or now - self._last_beat >= CONTROLLER_BEAT:
            self._last_beat = now
            ended = final and not self._detach
            write_json_atomic(
                self.paths.controller_file,
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "job": os.environ.get("SLURM_JOB_ID"),
                    "time": 0.0 if ended else now,
                    "state": "detached" if final and self._detach else self.state.state.value,
                },
            )

    # -- inbox ----------------------------------------------------------------------------------

    def _read_inbox(self) -> None:
        try:
            names = sorted(p.name for p in self.paths.inbox.glob("*.json"))
        except OSError:
            return
        for name in names:
            if name in self.state.commands_done:
                continue
            command = read_json(self.paths.inbox / name)
            if not isinstance(command, dict):
                continue  # not fully written yet (or garbage): look again next time
            self._log(st.COMMAND, file=name, command=command)
            self._outbox.append(partial(Path.unlink, self.paths.inbox / name, missing_ok=True))
            self._apply_command(command)

    def _apply_command(self, command: dict[str, Any]) -> None:
        kind = command.get("command")
        if kind == "stop":
            self.request_stop(str(command.get("reason") or "stopped by the user"))
        elif kind == "stop_trial":
            trial = self.state.trials.get(int(command.get("trial", -1)))
            if trial is not None and not trial.status.is_final:
                self._terminate(trial, "stopped by the user")
        else:
            logger.warning("unknown inbox command %r ignored", command)

    # -- ingestion ------------------------------------------------------------------------------

    def _ingest(self) -> None:
        for seg in self.state.active_segments():
            self._ingest_segment(seg)

    def _ingest_segment(self, seg: SegmentRecord) -> None:
        path = self.paths.event_file(seg.segment_id)
        key = path.name
        offset = self.cursors.get(key, 0)
        try:
            if path.stat().st_size <= offset:
                return
        except FileNotFoundError:
            return
        result = read_events(path, offset)
        if result.corrupt:
            logger.warning("%s: %d corrupt line(s) skipped", path, result.corrupt)
        self.cursors[key] = result.offset
        for record in result.records:
            if seg.status.is_final:
                break
            self._on_event(seg, record)
        if seg.status.is_final:
            self.cursors.pop(key, None)

    def _on_event(self, seg: SegmentRecord, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        t = float(record.get("t", self.clock.now()))
        trial = self.state.trials[seg.trial_id]
        if kind == EV_START:
            self._log(
                st.SEGMENT_STARTED,
                trial=seg.trial_id,
                segment=seg.segment_id,
                host=record.get("host", ""),
                pid=record.get("pid"),
                slurm_job_id=record.get("slurm_job_id"),
                at=t,
            )
        elif kind == EV_REPORT:
            step = int(record["step"])
            if step <= trial.step:
                logger.warning(
                    "trial %d: report for step %d ignored (not after %d)",
                    trial.trial_id,
                    step,
                    trial.step,
                )
                return
            metrics = {k: float(v) for k, v in record.get("metrics", {}).items()}
            self.writer.append_metrics(seg.trial_id, seg.segment_id, step, t, metrics)
            value = metrics.get(self.spec.metric)
            self.state.add_report(
                seg.trial_id, step, t, None if value is None or np.isnan(value) else value
            )
            self._events.append(Event.report(seg.trial_id, step))
            if step % self.spec.boundary == 0 or step >= seg.until_step:
                self._events.append(Event.boundary(seg.trial_id, step))
        elif kind == EV_CHECKPOINT:
            self._on_checkpoint(seg, record, t)
        elif kind == EV_END:
            status = SegmentStatus(record["status"])
            if status is SegmentStatus.LOST:  # a requeued worker found it half done
                self._end_segment(
                    seg,
                    status,
                    str(record.get("reason", "")),
                    "",
                    None,
                    count_retry=not record.get("requeued", False),
                )
                return
            self._end_segment(
                seg,
                status,
                str(record.get("reason", "")),
                str(record.get("error", "")),
                record.get("step"),
                at=t,
            )

    def _on_checkpoint(self, seg: SegmentRecord, record: dict[str, Any], t: float) -> None:
        previous = self.state.trials[seg.trial_id].checkpoint_row
        ref = CheckpointRef(
            row=self.writer.next_index("checkpoints"),
            trial_id=seg.trial_id,
            segment_id=seg.segment_id,
            step=int(record["step"]),
            time=t,
            nbytes=int(record.get("nbytes", 0)),
            sha256=str(record.get("sha256", "")),
            path=str(record["path"]),
        )
        self.writer.append(
            "checkpoints",
            trial=ref.trial_id,
            segment=ref.segment_id,
            step=ref.step,
            time=ref.time,
            nbytes=ref.nbytes,
            sha256=ref.sha256,
            path=ref.path,
        )
        self.state.add_checkpoint(ref)
        if previous is not None and not self._pinned(previous):
            self._delete_checkpoints([previous])

    def _pinned(self, row: int) -> bool:
        """True if a trial still needs checkpoint ``row`` (it was forked from it)."""
        return any(t.parent_checkpoint_row == row for t in self.state.trials.values())

    def _delete_checkpoints(self, rows: list[int]) -> None:
        refs = [self.state.checkpoints[r] for r in rows if not self.state.checkpoints[r].deleted]
        if not refs:
            return
        self._log(st.CHECKPOINT_DELETED, rows=[r.row for r in refs])
        for ref in refs:
            self._outbox.append(partial(Path.unlink, self.paths.root / ref.path, missing_ok=True))

    def _end_segment(
        self,
        seg: SegmentRecord,
        status: SegmentStatus,
        reason: str,
        error: str,
        step: Any,
        *,
        count_retry: bool = True,
        at: float | None = None,
    ) -> None:
        """Record a segment's end (``at``: the worker's time of it) and what follows for its trial.

        A lost segment (dead worker) queues its trial again, from its last checkpoint; that
        counts against ``max_retries`` unless the worker's job was requeued or preempted
        (``count_retry=False``), which Slurm does on purpose.
        """
        trial = self.state.trials[seg.trial_id]
        if status is SegmentStatus.SUSPENDED and seg.decision == Decision.STOP.value:
            # it reached the end of its assignment before it read the stop
            status, reason = SegmentStatus.TERMINATED, seg.decision_reason or reason
        self._log(
            st.SEGMENT_ENDED,
            trial=seg.trial_id,
            segment=seg.segment_id,
            status=status.value,
            step=step if step is None else int(step),
            reason=reason,
            at=self.clock.now() if at is None else at,
        )
        if status is SegmentStatus.LOST:
            retries = trial.retries + int(count_retry)
            if retries > self.spec.max_retries:
                self._set_trial(
                    trial,
                    TrialStatus.FAILED,
                    f"its worker was lost {retries} times (max_retries "
                    f"{self.spec.max_retries}): {reason}",
                    retries=retries,
                )
            else:
                self._set_trial(trial, TrialStatus.QUEUED, reason, retries=retries)
            return
        self._set_trial(trial, _SEGMENT_TO_TRIAL[status], reason, error=error)
        if status is SegmentStatus.FAILED and self.spec.fail_fast:
            self._set_study(
                StudyState.STOPPING, f"trial {trial.trial_id} failed (fail_fast)", fail=True
            )

    # -- workers ----------------------------------------------------------------------------

    def _live_workers(self) -> list[st.WorkerRecord]:
        return [w for w in self.state.workers.values() if w.state in ("started", "stopping")]

    def _check_workers(self) -> None:
        """Turn workers that are gone into lost or exited ones, and their segments into lost ones.

        The heartbeat file is the first opinion, the executor (pid, squeue) the second. A worker
        waiting in the queue (also after a requeue) is never timed out; a running one is timed out
        when its heartbeat is older than ``worker_timeout``, or when none newer than its start
        came within ``startup_timeout``.
        """
        now = self.clock.now()
        for worker in self._live_workers():
            if not worker.info:
                continue  # not started yet (see _manage_pool)
            wid = worker.worker_id
            beat = Heartbeat.read(self.paths.heartbeat(wid))
            state = self.executor.state(wid, worker.info)
            if self._worker_states.get(wid) is not state:
                self._worker_states[wid] = state
                self._dirty = True  # e.g. a queued job started: slots may be offered again
            self._track_runs(worker, beat, state)
            exited = beat is not None and beat.state == "exited"
            if state is WorkerState.GONE or (exited and state is not WorkerState.RUNNING):
                if exited:
                    self._worker_gone(worker, "exited", "exited", beat)
                else:
                    self._worker_gone(worker, "lost", "its process or job is gone", beat)
                continue
            if state is WorkerState.PENDING:
                self._running_since.pop(wid, None)
                seg = self.state.segments.get(worker.segment_id)  # type: ignore[arg-type]
                beating = beat is not None and now - beat.time < REQUEUE_SILENCE
                if seg is not None and seg.status is SegmentStatus.RUNNING and not beating:
                    self._ingest_segment(seg)
                    if not seg.status.is_final:  # the job was requeued under it
                        self._end_segment(
                            seg,
                            SegmentStatus.LOST,
                            f"worker {wid} was requeued",
                            "",
                            None,
                            count_retry=False,
                        )
                continue
            since = self._running_since.setdefault(wid, now)
            fresh = beat is not None and beat.time >= since - self.worker_timeout
            if fresh:
                self._startup_failures = 0
            age = now - (beat.time if fresh and beat is not None else since)
            limit = self.worker_timeout if fresh else self.startup_timeout
            if age > limit:
                self.executor.cancel(wid, worker.info)
                what = "heartbeat" if fresh else "heartbeat since its start"
                self._worker_gone(worker, "lost", f"no {what} for {age:.0f} s", beat)

    def _track_runs(
        self, worker: st.WorkerRecord, beat: Heartbeat | None, state: WorkerState
    ) -> None:
        """Journal when each process of a worker ran (``running``/``down``), for accounting."""
        wid = worker.worker_id
        if beat is not None and worker.open_run != beat.started:
            known = any(run.since == beat.started for run in worker.runs)
            if worker.open_run is not None:  # an earlier process ended unseen
                self._log(st.WORKER, worker=wid, event="down", at=beat.started)
            if not known:
                self._log(
                    st.WORKER,
                    worker=wid,
                    event="running",
                    since=beat.started,
                    job=beat.slurm_job_id,
                    pid=beat.pid,
                    host=beat.host,
                )
        since = worker.open_run
        if since is None:
            return
        ended = beat is not None and beat.started == since and beat.state in ("exited", "requeued")
        beating = beat is not None and self.clock.now() - beat.time < REQUEUE_SILENCE
        queued = state is WorkerState.PENDING and not beating  # squeue may lag behind
        if ended or queued or state is WorkerState.GONE:
            at = beat.time if beat is not None and beat.started == since else self.clock.now()
            self._log(st.WORKER, worker=wid, event="down", at=at)

    def _enforce_grace(self) -> None:
        """Cancel the worker of a segment that ignored a stop or suspend beyond ``stop_grace``."""
        now = self.clock.now()
        for seg in self.state.active_segments():
            if not seg.decision or seg.decision_time is None:
                continue
            if now - seg.decision_time <= self.stop_grace:
                continue
            worker = self.state.workers.get(seg.worker_id)
            if worker is None or worker.state not in ("started", "stopping"):
                continue
            reason = (
                f"did not {seg.decision} within {self.stop_grace:.0f} s; "
                f"worker {worker.worker_id} cancelled"
            )
            self.executor.cancel(worker.worker_id, worker.info)
            self._ingest_segment(seg)
            if not seg.status.is_final:
                if seg.decision == Decision.STOP.value:
                    self._end_segment(seg, SegmentStatus.TERMINATED, reason, "", None)
                else:
                    self._end_segment(seg, SegmentStatus.LOST, reason, "", None, count_retry=False)
            self._worker_gone(
                worker, "lost", reason, Heartbeat.read(self.paths.heartbeat(worker.worker_id))
            )

    def _worker_gone(
        self, worker: st.WorkerRecord, event: str, reason: str, beat: Heartbeat | None
    ) -> None:
        segment_id = worker.segment_id
        if segment_id is not None:
            seg = self.state.segments[segment_id]
            self._ingest_segment(seg)  # it may have ended just before its worker went
            if not seg.status.is_final:
                self._end_segment(
                    seg, SegmentStatus.LOST, f"worker {worker.worker_id} {reason}", "", None
                )
        logger.info("worker %s %s: %s", worker.worker_id, event, reason)
        since = worker.open_run
        if since is not None:
            last = beat.time if beat is not None and beat.started == since else self.clock.now()
            self._log(st.WORKER, worker=worker.worker_id, event="down", at=last)
        self._log(st.WORKER, worker=worker.worker_id, event=event, reason=reason)
        if event == "lost" and beat is None:
            self._startup_failures += 1  # it never wrote a heartbeat
            if self._startup_failures >= STARTUP_FAILURES_LIMIT:
                log = self.paths.worker_log(worker.worker_id).with_suffix(".stdio")
                self._set_study(
                    StudyState.STOPPING,
                    f"{self._startup_failures} workers died before their first heartbeat; "
                    f"see {log}: {_tail(log)}",
                    fail=True,
                )

    def _manage_pool(self) -> None:
        """Start the workers the scheduler created, once the journal holds them (write-ahead)."""
        pending = [w for w in self._live_workers() if w.state == "started" and not w.info]
        if not pending or self.clock.now() < self._start_retry_at:
            return
        self._commit()
        try:
            infos = self.executor.start([w.worker_id for w in pending])
        except SubmissionError as exc:
            logger.error("%s; retrying in 10 s", exc)
            self._start_retry_at = self.clock.now() + 10.0
            return
        for worker_id, info in infos.items():
            self._log(st.WORKER, worker=worker_id, event="submitted", info=info)

    # -- scheduling -----------------------------------------------------------------------------

    def _view(self, free_slots: int = 0) -> StudyView:
        t0 = self.state.started_time or self.state.created_time
        trials = {
            tid: TrialView(
                trial_id=tid,
                status=t.status,
                params=t.params,
                step=t.step,
                steps=np.asarray(t.curve_steps, dtype=np.int64),
                values=np.asarray(t.curve_values, dtype=float),
                times=np.asarray(t.curve_times, dtype=float) - t0,
                checkpoint_step=self.state.checkpoint_step(tid),
                parent_trial=t.parent_trial,
                parent_step=t.parent_step,
                priority=t.priority,
                retries=t.retries,
                info=t.info,
            )
            for tid, t in self.state.trials.items()
        }
        return StudyView(
            metric=self.spec.metric,
            mode=self.spec.mode,
            max_steps=self.spec.max_steps,
            boundary=self.spec.boundary,
            now=self.clock.now() - t0,
            trials=trials,
            free_slots=free_slots,
            total_slots=self.spec.resources.slots,
            trials_remaining=max(self.spec.num_trials - self.state.generated, 0),
        )

    def _rng(self) -> np.random.Generator:
        return index_rng(self._policy_seed, int(self.writer.state["commit"]))

    def _schedule(self) -> None:
        events, self._events = self._events, []
        if events:
            view = self._view()
            for event in events:
                trial = self.state.trials[event.trial_id]  # type: ignore[index]
                if trial.status is not TrialStatus.RUNNING:
                    continue
                for action in self.policy.decide(view, event, self._rng()):
                    self._apply(action, event)
        if self.state.state is StudyState.RUNNING and self._dirty:
            self._dirty = False
            self._fill_slots()
        if self.state.state is StudyState.STOPPING and not self.state.active_segments():
            final = StudyState.FAILED if self.state.failing else StudyState.STOPPED
            self._set_study(final, self.state.reason)

    def _fill_slots(self) -> None:
        """Offer free slots to the policy; end the study if it has nothing and nothing runs."""
        active = self.state.active_segments()
        busy = {s.worker_id for s in active}
        live = self._live_workers()
        rank = {WorkerState.RUNNING: 0, WorkerState.UNKNOWN: 1, WorkerState.PENDING: 2}
        idle = sorted(
            (w for w in live if w.state == "started" and w.worker_id not in busy),
            key=lambda w: rank.get(self._worker_states.get(w.worker_id, WorkerState.PENDING), 2),
        )
        pending = sum(
            not w.info or self._worker_states.get(w.worker_id) is WorkerState.PENDING for w in live
        )
        can_submit = max(self.spec.slurm.max_pending - pending, 0)
        free_slots = min(self.spec.resources.slots - len(busy), len(idle) + can_submit)
        if free_slots <= 0:
            return
        view = self._view(free_slots)
        placed = 0
        for action in self.policy.decide(view, Event.slot_free(free_slots), self._rng()):
            if action.kind not in (ActionKind.START, ActionKind.RESUME, ActionKind.FORK):
                self._apply(action, None)
                continue
            if placed >= free_slots:
                logger.warning("policy asked for more trials than free slots; %s ignored", action)
                continue
            trial = self._trial_for(action, view)
            if trial is None:
                continue
            worker_id = idle.pop(0).worker_id if idle else self._new_worker()
            self._assign(trial, worker_id, action.until_step)
            placed += 1
        for worker in idle:  # the policy has nothing for them
            self._order_exit(worker, "no work for it")
        if not placed and not active:
            self._set_study(StudyState.FINISHED, "no trial left to run")

    def _order_exit(self, worker: st.WorkerRecord, reason: str) -> None:
        self._log(st.WORKER, worker=worker.worker_id, event="stopping", reason=reason)
        path = self.paths.assignment(worker.worker_id)
        self._outbox.append(lambda: write_assignment(path, None, reason))

    def _trial_for(self, action: Action, view: StudyView) -> TrialRecord | None:
        """Return the trial an action starts or resumes (creating it for START and FORK)."""
        if action.kind is ActionKind.RESUME:
            trial = self.state.trials.get(action.trial_id)  # type: ignore[arg-type]
            if trial is None or trial.status not in (TrialStatus.QUEUED, TrialStatus.SUSPENDED):
                logger.warning("cannot resume trial %s; ignored", action.trial_id)
                return None
            return trial
        trial_id = len(self.state.trials)
        data: dict[str, Any] = {
            "seed": trial_seed(self.spec.seed, trial_id),
            "priority": action.priority,
        }
        if action.kind is ActionKind.FORK:
            parent = self.state.trials.get(action.trial_id)  # type: ignore[arg-type]
            row = self._checkpoint_row(action.trial_id, action.step)
            if parent is None or row is None:
                logger.warning(
                    "cannot fork trial %s at step %s; ignored", action.trial_id, action.step
                )
                return None
            data.update(
                params=dict(action.params or {}),
                parent_trial=parent.trial_id,
                parent_step=action.step,
                parent_checkpoint_row=row,
            )
        elif action.params is not None:
            data["params"] = dict(action.params)
        else:
            if self.state.generated >= self.spec.num_trials:
                return None
            index = self.state.generated
            data.update(params=self.generator.suggest(index, view), generator_index=index)
        self._log(st.TRIAL_CREATED, trial=trial_id, **data)
        logger.info("trial %d created: %s", trial_id, data["params"])
        return self.state.trials[trial_id]

    def _checkpoint_row(self, trial_id: int | None, step: int | None) -> int | None:
        for ref in self.state.checkpoints.values():
            if ref.trial_id == trial_id and ref.step == step and not ref.deleted:
                return ref.row
        return None

    def _new_worker(self) -> str:
        worker_id = f"w{len(self.state.workers):04d}"
        self._log(st.WORKER, worker=worker_id, event="started", info={})
        return worker_id

    def _assign(self, trial: TrialRecord, worker_id: str, until_step: int | None) -> None:
        row = trial.checkpoint_row
        if row is None and not trial.segments:
            row = trial.parent_checkpoint_row
        ref = self.state.checkpoints.get(row) if row is not None else None
        start = ref.step if ref is not None else 0
        until = min(until_step or self.spec.max_steps, self.spec.max_steps)
        if start >= self.spec.max_steps:
            self._set_trial(trial, TrialStatus.COMPLETED, "its checkpoint is at the last step")
            return
        segment_id = len(self.state.segments)
        self._log(
            st.SEGMENT_ASSIGNED,
            trial=trial.trial_id,
            segment=segment_id,
            worker=worker_id,
            start_step=start,
            until_step=max(until, start + 1),
            checkpoint_row=row,
        )
        seg = self.state.segments[segment_id]
        logger.info(
            "segment %d: trial %d on worker %s from step %d",
            segment_id,
            trial.trial_id,
            worker_id,
            start,
        )
        self._outbox.append(self._assignment_writer(seg))

    def _assignment_writer(self, seg: SegmentRecord) -> Callable[[], None]:
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
            seed=trial.seed,
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
            decision_wait=self.decision_wait if self.policy.boundary_decisions else 0.0,
        )
        path = self.paths.assignment(seg.worker_id)

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_assignment(path, assignment)

        return write

    def _apply(self, action: Action, event: Event | None) -> None:
        trial = self.state.trials.get(action.trial_id)  # type: ignore[arg-type]
        if trial is None:
            logger.warning("action %s names no trial; ignored", action)
            return
        if action.kind is ActionKind.CONTINUE:
            if action.priority != trial.priority:
                self._log(
                    st.DECISION,
                    trial=trial.trial_id,
                    decision="continue",
                    priority=action.priority,
                    reason=action.reason,
                )
            seg = self._running_segment(trial)
            if (
                seg is not None
                and event is not None
                and event.kind is EventKind.BOUNDARY
                and self.policy.boundary_decisions
            ):
                message = DecisionMessage(seg.segment_id, int(event.step or 0), Decision.CONTINUE)
                path = self.paths.decision(seg.segment_id)
                self._outbox.append(lambda: write_json_atomic(path, message.to_dict()))
        elif action.kind is ActionKind.SUSPEND:
            seg = self._running_segment(trial)
            if seg is not None:
                self._send_decision(seg, Decision.SUSPEND, action.reason, priority=action.priority)
            elif trial.status is TrialStatus.QUEUED:
                self._set_trial(trial, TrialStatus.SUSPENDED, action.reason)
        elif action.kind is ActionKind.TERMINATE:
            self._terminate(trial, action.reason or "terminated by the policy")
        else:
            logger.warning("action %s cannot be carried out here; ignored", action)

    def _terminate(self, trial: TrialRecord, reason: str) -> None:
        seg = self._running_segment(trial)
        if seg is not None:
            self._send_decision(seg, Decision.STOP, reason)
        elif not trial.status.is_final:
            self._set_trial(trial, TrialStatus.TERMINATED, reason)

    def _running_segment(self, trial: TrialRecord) -> SegmentRecord | None:
        if trial.segments:
            seg = self.state.segments[trial.segments[-1]]
            if not seg.status.is_final:
                return seg
        return None

    def _send_decision(
        self,
        seg: SegmentRecord,
        decision: Decision,
        reason: str,
        *,
        log: bool = True,
        priority: float | None = None,
    ) -> None:
        if log:
            data: dict[str, Any] = {"decision": decision.value, "reason": reason}
            if priority is not None:
                data["priority"] = priority
            self._log(
                st.DECISION,
                trial=seg.trial_id,
                segment=seg.segment_id,
                step=self.state.trials[seg.trial_id].step,
                **data,
            )
        message = DecisionMessage(
            seg.segment_id, self.state.trials[seg.trial_id].step, decision, reason
        )
        path = self.paths.decision(seg.segment_id)
        self._outbox.append(lambda: write_json_atomic(path, message.to_dict(), fsync=True))

    # -- the end ------------------------------------------------------------------------------

    def _can_exit(self) -> bool:
        """True once the study has ended and every worker has gone (or was cancelled)."""
        if self._abort or self._detach:
            return True
        if self.state.state not in (StudyState.FINISHED, StudyState.STOPPED, StudyState.FAILED):
            return False
        now = self.clock.now()
        if self._exit_ordered_at is None:
            self._exit_ordered_at = now
        for worker in self._live_workers():
            if not worker.info:
                self._log(
                    st.WORKER, worker=worker.worker_id, event="exited", reason="never started"
                )
            elif worker.state == "started":
                self._order_exit(worker, f"study {self.state.state.value}")
            elif now - self._exit_ordered_at > EXIT_GRACE:
                self.executor.cancel(worker.worker_id, worker.info)
                self._log(
                    st.WORKER,
                    worker=worker.worker_id,
                    event="lost",
                    reason=f"did not exit within {EXIT_GRACE:.0f} s; cancelled",
                )
        self._commit()
        return not self._live_workers()


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no output)"
    return " | ".join(text[-lines:]) or "(no output)"


def controller_alive(paths: StudyPaths, timeout: float = 30.0) -> dict[str, Any] | None:
    """Return the controller file if another controller looks alive, else ``None``."""
    data = read_json(paths.controller_file)
    if not isinstance(data, dict) or not data.get("time") or data.get("state") == "detached":
        return None
    if data.get("job") and data.get("job") == os.environ.get("SLURM_JOB_ID"):
        return None  # an earlier run of this very (requeued) job
    if time.time() - float(data["time"]) > timeout:
        return None
    if data.get("host") == socket.gethostname():
        try:
            os.kill(int(data["pid"]), 0)
        except (ProcessLookupError, ValueError):
            return None
        except PermissionError:
            return data
    return data
