"""Worker management: liveness (heartbeat first, executor second), runs, grace, the pool."""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import TYPE_CHECKING, Any

from hpctune.backends.base import SUBMIT_TRIES, WorkerState
from hpctune.errors import SubmissionError
from hpctune.journal import records as rec
from hpctune.journal.entities import SegmentRecord, WorkerRecord
from hpctune.study.states import Decision, SegmentStatus, StudyState, WorkerLife
from hpctune.wire.protocol import Heartbeat

if TYPE_CHECKING:
    from hpctune.core.hosts import PoolHost

logger = logging.getLogger(__name__)

#: Workers in a row that die before their first heartbeat stop the study (failed).
STARTUP_FAILURES_LIMIT = 3
#: Re-sends of an assignment not taken before it goes to another worker.
ASSIGNMENT_RESENDS = 3
#: Seconds: a queued worker whose heartbeat is older than this was requeued.
REQUEUE_SILENCE = 10.0
#: Seconds between two reads of the heartbeat of a worker whose segment runs (its events say
#: it is alive; an idle, stopping or queued worker is checked at every iteration).
BUSY_CHECK_PERIOD = 1.0
#: Seconds between two passes of the segment watchdogs (whose delays are 30 s and more).
WATCH_PERIOD = 1.0


def submit_retry_delay(failures: int, first: float = 10.0) -> float:
    """Seconds before the next try after ``failures`` failed submissions in a row: ``first``,
    then twice as long after each further failure (10, 20, 40, 80 s by default;
    :attr:`~hpctune.core.settings.CoreSettings.submit_retry`)."""
    return float(first * 2 ** max(failures - 1, 0))


class WorkerPool:
    """The controller's workers: liveness (heartbeat first, executor second), their runs, the
    grace of a segment told to stop, the watchdogs, and the pool's size.

    Args:
        controller: The controller whose workers these are.

    Attributes:
        states: Each worker's state as the executor last told it.
        beats: Each worker's heartbeat as last read.
        startup_failures: Workers in a row that died before their first heartbeat.
    """

    def __init__(self, controller: PoolHost) -> None:
        self.c = controller
        self.states: dict[str, WorkerState] = {}
        self.beats: dict[str, Heartbeat | None] = {}  # last heartbeat read of each worker
        self.startup_failures = 0
        self._start_retry_at = 0.0
        self._running_since: dict[str, float] = {}
        self._idle_since: dict[int, float] = {}  # segment -> first seen with its worker idle
        self._resends: dict[int, int] = {}  # segment -> assignment re-sends
        self._checked: dict[str, float] = {}  # worker -> when its heartbeat was last read
        self._watched_at = -math.inf  # when the segment watchdogs last ran

    def check(self) -> None:
        """Turn workers that are gone into lost or exited ones, and their segments into lost ones.

        The heartbeat file is the first opinion, the executor (pid, squeue) the second. A worker
        waiting in the queue (also after a requeue) is never timed out; a running one is timed out
        when its heartbeat is older than ``worker_timeout``, or when none newer than its start
        came within ``startup_timeout``.
        """
        now = self.c.clock.now()
        settings = self.c.settings
        for worker in self.c.live_workers():
            if not worker.info:
                continue  # not started yet (see manage)
            wid = worker.worker_id
            seg = self.c.state.segments.get(worker.segment_id)  # type: ignore[arg-type]
            busy = seg is not None and seg.status is SegmentStatus.RUNNING
            if busy and now - self._checked.get(wid, -math.inf) < BUSY_CHECK_PERIOD:
                continue  # a busy worker's heartbeat is read at its own period
            self._checked[wid] = now
            # the executor first: a worker writes its "exited" heartbeat before its process
            # ends, so a heartbeat read after the executor saw it gone tells a clean exit
            state = self.c.executor.state(wid, worker.info)
            beat = self.c.wire.heartbeat(wid)
            self.beats[wid] = beat
            if self.states.get(wid) is not state:
                self.states[wid] = state
                self.c.dirty = True  # e.g. a queued job started: slots may be offered again
            self._track_runs(worker, beat, state)
            exited = beat is not None and beat.state == "exited"
            if state is WorkerState.GONE or (exited and state is not WorkerState.RUNNING):
                if exited:
                    self.worker_gone(worker, WorkerLife.EXITED, "exited", beat)
                else:
                    how = self.c.executor.end_reason(wid, worker.info)
                    self.worker_gone(
                        worker, WorkerLife.LOST, how or "its process or job is gone", beat
                    )
                continue
            if state is WorkerState.PENDING:
                self._running_since.pop(wid, None)
                seg = self.c.state.segments.get(worker.segment_id)  # type: ignore[arg-type]
                beating = beat is not None and now - beat.time < REQUEUE_SILENCE
                if seg is not None and seg.status is SegmentStatus.RUNNING and not beating:
                    self.c.ingest.ingest_segment(seg)
                    if not seg.status.is_final:  # the job was requeued under it
                        self.c.ingest.end_segment(
                            seg,
                            SegmentStatus.LOST,
                            f"worker {wid} was requeued",
                            "",
                            None,
                            count_retry=False,
                        )
                continue
            since = self._running_since.setdefault(wid, now)
            fresh = beat is not None and beat.time >= since - settings.worker_timeout
            if fresh:
                self.startup_failures = 0
            age = now - (beat.time if fresh and beat is not None else since)
            limit = settings.worker_timeout if fresh else settings.startup_timeout
            if age > limit:
                self.c.executor.cancel(wid, worker.info)
                what = "heartbeat" if fresh else "heartbeat since its start"
                self.worker_gone(worker, WorkerLife.LOST, f"no {what} for {age:.0f} s", beat)

    def _track_runs(
        self, worker: WorkerRecord, beat: Heartbeat | None, state: WorkerState
    ) -> None:
        """Journal when each process of a worker ran (``running``/``down``), for accounting."""
        wid = worker.worker_id
        if beat is not None and worker.open_run != beat.started:
            known = {run.since for run in worker.runs}
            if worker.open_run is not None:  # an earlier process ended unseen
                self.c.log(rec.WorkerEntry(worker=wid, event="down", at=_run_end(worker, beat)))
            prev, prev_end = beat.previous_started, beat.previous_time
            if prev is not None and prev_end is not None and prev not in known | {beat.started}:
                # a process the controller never saw (it was away while the job was requeued)
                self.c.log(
                    rec.WorkerEntry(worker=wid, event="running", since=prev, job=beat.slurm_job_id)
                )
                self.c.log(rec.WorkerEntry(worker=wid, event="down", at=prev_end))
            if beat.started not in known:
                entry = rec.WorkerEntry(
                    worker=wid,
                    event="running",
                    since=beat.started,
                    job=beat.slurm_job_id,
                    pid=beat.pid,
                    host=beat.host,
                )
                self.c.log(entry)
        since = worker.open_run
        if since is None:
            return
        own = beat if beat is not None and beat.started == since else None  # this run's beat
        ended = own is not None and own.state in ("exited", "requeued")
        # a Slurm job holds its allocation after its worker's last beat (the interpreter's exit,
        # srun's, the batch script's, the epilog: seconds on a loaded node), and sacct counts
        # it: such a run ends once the executor no longer sees the job running, at the end the
        # backend accounts (sacct's), else when that was seen
        job_exit = own is not None and own.state == "exited" and bool(own.slurm_job_id)
        if job_exit and state is WorkerState.RUNNING:
            return
        beating = beat is not None and self.c.clock.now() - beat.time < REQUEUE_SILENCE
        queued = state is WorkerState.PENDING and not beating  # squeue may lag behind
        if ended or queued or state is WorkerState.GONE:
            if job_exit and own is not None:  # sacct's end is in whole seconds
                end = self.c.executor.end_time(wid, worker.info)
                at = self.c.clock.now() if end is None else max(end, own.time)
            else:
                at = own.time if own is not None else self.c.clock.now()
            self.c.log(rec.WorkerEntry(worker=wid, event="down", at=at))

    def watch_segments(self) -> None:
        """Watchdogs over active segments whose worker is alive.

        * An assignment the worker has not taken while it sits idle (its file was not
          written, e.g. a full disk) is re-sent every ``assignment_timeout`` seconds; after
          ``ASSIGNMENT_RESENDS`` re-sends its segment ends lost (no retry counted) and the trial
          goes to another worker.
        * A running segment whose worker went idle without its end line (a corrupt or unwritten
          line) ends lost after ``assignment_timeout`` seconds (no retry counted).
        * A running segment that has not reported for ``[study] report_timeout`` seconds (a
          hung training function) ends lost: its worker is cancelled, the trial resumes from its
          last checkpoint and a retry is counted.
        * A stop or suspend decision still in force is written again every
          ``assignment_timeout`` seconds (its file may not have been written).
        """
        now = self.c.clock.now()
        if now - self._watched_at < WATCH_PERIOD:
            return  # the watchdogs' delays are tens of seconds
        self._watched_at = now
        active = {seg.segment_id for seg in self.c.state.active_segments()}
        decision_sent = self.c.actions.decision_sent
        timeout = self.c.settings.assignment_timeout
        for table in (self._idle_since, decision_sent):
            for key in [k for k in table if k not in active]:
                del table[key]
        for seg in self.c.state.active_segments():
            worker = self.c.state.workers.get(seg.worker_id)
            if worker is None or worker.state is not WorkerLife.STARTED or not worker.info:
                continue
            beat = self.beats.get(worker.worker_id)
            fresh = beat is not None and now - beat.time < self.c.settings.worker_timeout
            idle = fresh and beat is not None and beat.state == "idle"
            if not idle:
                self._idle_since.pop(seg.segment_id, None)
            elif now - self._idle_since.setdefault(seg.segment_id, now) > timeout:
                self._idle_since[seg.segment_id] = now
                self._idle_worker(seg, worker)
                continue
            if seg.status is SegmentStatus.RUNNING:
                self._check_report_timeout(seg, worker, now)
            if seg.decision and now - decision_sent.get(seg.segment_id, now) > timeout:
                # its file may not have been written (a full disk): again, idempotent
                self.c.actions.send_decision(
                    seg, Decision(seg.decision), seg.decision_reason, log=False
                )
            if seg.decision:
                decision_sent.setdefault(seg.segment_id, now)

    def _idle_worker(self, seg: SegmentRecord, worker: WorkerRecord) -> None:
        """The worker of ``seg`` sits idle: re-send the assignment, or give the segment up."""
        wid = worker.worker_id
        if seg.status is SegmentStatus.ASSIGNED:
            sent = self._resends.get(seg.segment_id, 0)
            if sent < ASSIGNMENT_RESENDS:
                self._resends[seg.segment_id] = sent + 1
                logger.warning(
                    "segment %d: worker %s has not taken its assignment; re-sending it",
                    seg.segment_id,
                    wid,
                )
                self.c.after_commit(self.c.actions.assignment_writer(seg))
                return
            reason = f"worker {wid} did not take the assignment ({sent} re-sends)"
            self.c.ingest.end_segment(seg, SegmentStatus.LOST, reason, "", None, count_retry=False)
            self.order_exit(worker, reason)
            return
        self.c.ingest.ingest_segment(seg)  # its end line may have come just now
        if not seg.status.is_final:
            reason = (
                f"worker {wid} is idle but the segment's end line is missing (corrupt or "
                "not written)"
            )
            self.c.ingest.end_segment(seg, SegmentStatus.LOST, reason, "", None, count_retry=False)

    def _check_report_timeout(self, seg: SegmentRecord, worker: WorkerRecord, now: float) -> None:
        """End a running segment whose function has not reported for ``report_timeout`` s."""
        limit = self.c.spec.report_timeout
        last = self.c.last_event.setdefault(seg.segment_id, now)
        if limit <= 0 or now - last <= limit or seg.decision:
            return
        self.c.executor.cancel(worker.worker_id, worker.info)
        self.c.ingest.ingest_segment(seg)
        if seg.status.is_final:
            return
        reason = f"no report for {limit:.0f} s (report_timeout); worker {worker.worker_id} killed"
        self.c.ingest.end_segment(seg, SegmentStatus.LOST, reason, "", None)
        beat = self.beats.get(worker.worker_id)
        self.worker_gone(worker, WorkerLife.LOST, reason, beat, failed_start=False)

    def enforce_grace(self) -> None:
        """Cancel the worker of a segment that ignored a stop or suspend beyond ``stop_grace``."""
        now = self.c.clock.now()
        grace = self.c.settings.stop_grace
        for seg in self.c.state.active_segments():
            if not seg.decision or seg.decision_time is None:
                continue
            if now - seg.decision_time <= grace:
                continue
            worker = self.c.state.workers.get(seg.worker_id)
            if worker is None or not worker.state.is_alive:
                continue
            reason = (
                f"did not {seg.decision} within {grace:.0f} s; worker {worker.worker_id} cancelled"
            )
            self.c.executor.cancel(worker.worker_id, worker.info)
            self.c.ingest.ingest_segment(seg)
            if not seg.status.is_final:
                if seg.decision == Decision.STOP.value:
                    self.c.ingest.end_segment(seg, SegmentStatus.TERMINATED, reason, "", None)
                else:
                    self.c.ingest.end_segment(
                        seg, SegmentStatus.LOST, reason, "", None, count_retry=False
                    )
            self.worker_gone(
                worker, WorkerLife.LOST, reason, self.c.wire.heartbeat(worker.worker_id)
            )

    def worker_gone(
        self,
        worker: WorkerRecord,
        event: WorkerLife,
        reason: str,
        beat: Heartbeat | None,
        *,
        failed_start: bool = True,
    ) -> None:
        """Journal that a worker is gone (and its segment lost). Without a heartbeat it counts
        as a worker that failed to start unless ``failed_start`` is false: the controller killed
        it on purpose, or it was never submitted."""
        segment_id = worker.segment_id
        if segment_id is not None:
            seg = self.c.state.segments[segment_id]
            self.c.ingest.ingest_segment(seg)  # it may have ended just before its worker went
            if not seg.status.is_final:
                self.c.ingest.end_segment(
                    seg, SegmentStatus.LOST, f"worker {worker.worker_id} {reason}", "", None
                )
        logger.info("worker %s %s: %s", worker.worker_id, event, reason)
        since = worker.open_run
        if since is not None:
            last = beat.time if beat is not None and beat.started == since else self.c.clock.now()
            self.c.log(rec.WorkerEntry(worker=worker.worker_id, event="down", at=last))
        self.c.log(rec.WorkerEntry(worker=worker.worker_id, event=event.value, reason=reason))
        if event is WorkerLife.LOST and beat is None and failed_start:
            self.startup_failures += 1  # it never wrote a heartbeat
            if self.startup_failures >= STARTUP_FAILURES_LIMIT:
                output = self.c.executor.output_path(worker.worker_id, worker.info)
                where = (
                    f"see {output}: {self.c.wire.output_tail(output)}"
                    if output is not None
                    else ""
                )
                self.c.set_study(
                    StudyState.STOPPING,
                    f"{self.startup_failures} workers died before their first heartbeat; "
                    + (where or "see the controller log"),
                    fail=True,
                )

    def manage(self) -> None:
        """Start the workers the scheduler created, once the journal holds them (write-ahead).

        A failed submission is journaled (``status`` shows Slurm's message) and tried again
        after :func:`submit_retry_delay`; :data:`SUBMIT_TRIES` failures in a row stop the study
        as failed. A stopping study submits nothing and lets go of workers that never started.
        """
        if self.c.state.state is StudyState.STOPPING:
            self._release_unstarted()
            return
        pending = [
            w for w in self.c.live_workers() if w.state is WorkerLife.STARTED and not w.info
        ]
        if not pending or self.c.clock.now() < self._start_retry_at:
            return
        self.c.commit()
        self.c.check_lease()  # never start a process for a journal no one reads any more
        by_size: dict[int | None, list[str]] = {}
        for worker in pending:  # one batch (a Slurm job array) per size
            by_size.setdefault(worker.devices, []).append(worker.worker_id)
        infos: dict[str, dict[str, Any]] = {}
        try:
            for devices, ids in by_size.items():
                infos.update(self.c.executor.start(ids, devices=devices))
        except SubmissionError as exc:
            self._log_submitted(infos)  # the sizes submitted before the one that failed
            workers = [w.worker_id for w in pending if w.worker_id not in infos]
            self.c.log(rec.SubmissionEntry(error=str(exc), workers=workers))
            failures = self.c.state.submit_failures
            if failures >= SUBMIT_TRIES:
                self.c.set_study(
                    StudyState.STOPPING,
                    f"worker jobs could not be submitted ({failures} tries): {exc}; "
                    "change the settings with `hpctune resume <study> --slurm KEY=VALUE`",
                    fail=True,
                )
                return
            delay = submit_retry_delay(failures, self.c.settings.submit_retry)
            logger.error("%s; try %d of %d in %.0f s", exc, failures + 1, SUBMIT_TRIES, delay)
            self._start_retry_at = self.c.clock.now() + delay
            return
        self._log_submitted(infos)

    def _log_submitted(self, infos: dict[str, dict[str, Any]]) -> None:
        """Journal the executor's info of each worker started."""
        for worker_id, info in infos.items():
            self.c.log(rec.WorkerEntry(worker=worker_id, event="submitted", info=info))

    def order_exit(self, worker: WorkerRecord, reason: str) -> None:
        """Journal that ``worker`` is told to exit; the order is written after the commit."""
        self.c.log(rec.WorkerEntry(worker=worker.worker_id, event="stopping", reason=reason))
        order = partial(self.c.wire.write_assignment, worker.worker_id, None, reason)
        self.c.after_commit(partial(order, epoch=self.c.epoch))

    def _release_unstarted(self) -> None:
        """Let go of workers whose jobs never ran (never submitted, or still queued): their
        segments end lost (not counted) at once, so a stop need not wait for them."""
        for worker in self.c.live_workers():
            seg = self.c.state.segments.get(worker.segment_id)  # type: ignore[arg-type]
            if worker.runs or (seg is not None and seg.status.is_final):
                continue
            queued = self.states.get(worker.worker_id) is WorkerState.PENDING
            if worker.info and not queued:
                continue
            if seg is not None:
                self.c.ingest.ingest_segment(seg)
                if seg.started_time is not None or seg.status.is_final:
                    continue  # it started after all: it suspends like the others
            if worker.info:
                self.c.executor.cancel(worker.worker_id, worker.info)
            if seg is not None:
                self.c.ingest.end_segment(
                    seg,
                    SegmentStatus.LOST,
                    f"worker {worker.worker_id} never started ({self.c.state.reason})",
                    "",
                    None,
                    count_retry=False,
                )
            self.c.log(
                rec.WorkerEntry(worker=worker.worker_id, event="exited", reason="never started")
            )

    def change_settings(self, command: dict[str, Any]) -> None:
        """Use the backend settings of an inbox ``settings`` command from now on (journaled);
        settings the executor refuses are ignored with a warning."""
        section, settings = str(command["section"]), dict(command["settings"])
        spec = self.c.spec.with_backend_options(section, settings)
        try:
            self.c.executor.use_spec(spec)
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("the [%s] settings of an inbox command: %s; ignored", section, exc)
            return
        self.c.log(
            rec.SettingsChangedEntry(
                section=section,
                settings=settings,
                changes=command.get("changes", {}),
                source=str(command.get("source", "")),
            )
        )
        self.c.spec = spec
        self._start_retry_at = 0.0
        logger.info("[%s] settings changed: %s", section, command.get("changes", {}))

    def new_worker(self, devices: int | None = None) -> str:
        """Journal a new worker (not yet started) and return its id; ``devices``: its size
        when the elastic plan gives one (``None``: the spec's ``[resources]``)."""
        worker_id = f"w{len(self.c.state.workers):04d}"
        self.c.log(rec.WorkerEntry(worker=worker_id, event="started", info={}, devices=devices))
        return worker_id


def _run_end(worker: WorkerRecord, beat: Heartbeat) -> float:
    """When the worker's open run ended, as told by the heartbeat of a later process: the last
    beat of the process before it (the journal's run, or one it never saw), else its start."""
    since = worker.open_run
    if since is not None and beat.previous_started is not None:
        if beat.previous_started == since and beat.previous_time is not None:
            return beat.previous_time
        if beat.previous_started > since:
            return beat.previous_started
    return beat.started
