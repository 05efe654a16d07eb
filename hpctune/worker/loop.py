"""The worker: runs assignments (segments of trials) back to back in one process or Slurm job.

The loop: read ``workers/<W>/assignment.json``; when it names a segment not run yet, look the
segment up in the journal and run the user's function on it (events to the segment's own file,
stdout/stderr to the trial's log files); when it is an exit order, exit. What runs comes from the
journal, never from the file (:mod:`hpctune.worker.assignments`), and files of a controller
epoch below the highest one are ignored (:mod:`hpctune.wire.lease`). A background thread keeps
``heartbeat.json`` fresh. A worker never waits on the controller for long: decisions are read at
boundaries with a bounded wait, and a worker whose controller has been silent for
``controller_timeout`` seconds exits once idle.

Run it as ``python -m hpctune.worker.loop <study-dir> <worker-id>``; the local executor does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from hpctune.errors import HpctuneError
from hpctune.files import read_json, write_json_atomic
from hpctune.study.states import Decision, SegmentStatus
from hpctune.wire.clock import Clock, RealClock
from hpctune.wire.eventlog import EventWriter, read_events
from hpctune.wire.layout import StudyPaths
from hpctune.wire.lease import highest_epoch
from hpctune.wire.permissions import check_loadable, check_study_dir, use_umask_of
from hpctune.wire.protocol import (
    EV_END,
    EV_START,
    Assignment,
    ExitOrder,
    Heartbeat,
    read_assignment,
)
from hpctune.wire.storage import describe, storage_error
from hpctune.worker.assignments import AssignmentRefused, trusted_assignment
from hpctune.worker.context import TrialContext, TrialStop, devices_from_environment
from hpctune.worker.process import own_job_id, process_start_time

logger = logging.getLogger("hpctune.worker.loop")  # also when run as __main__

HEARTBEAT_INTERVAL = 2.0
VERIFY_WAIT = 10.0  # seconds an assignment may wait for its commit to be visible here
STORAGE_WAIT = 1.0  # seconds before writing again after a full disk
END_ATTEMPTS = 30


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class _HeartbeatThread(threading.Thread):
    """Rewrite the heartbeat file every ``interval`` seconds and on every state change."""

    def __init__(self, path: Path, beat: Heartbeat, interval: float, clock: Clock) -> None:
        super().__init__(name="hpctune-heartbeat", daemon=True)
        self.path = path
        self.beat = beat
        self.interval = interval
        self.clock = clock
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self.write()

    def update(self, **changes: Any) -> None:
        with self._lock:
            for key, value in changes.items():
                setattr(self.beat, key, value)
        self.write()

    def write(self) -> None:
        # the file is written under the lock too: a periodic beat taken before a state change
        # must not land after it (a stale "idle" over the final "exited")
        with self._lock:
            self.beat.time = self.clock.now()
            with contextlib.suppress(OSError):
                write_json_atomic(self.path, self.beat.to_dict())

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.write()

    def stop(self) -> None:
        """Stop beating; return once no beat is being written (the process may then exit)."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=max(self.interval, 1.0) + 1.0)


@contextlib.contextmanager
def redirect_output(out: Path, err: Path) -> Iterator[None]:
    """Send file descriptors 1 and 2 (Python and C-level output) to ``out`` and ``err``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    targets = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) for p in (out, err)]
    try:
        os.dup2(targets[0], 1)
        os.dup2(targets[1], 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, *targets):
            os.close(fd)


def segment_progress(path: Path) -> str:
    """How far an earlier process got with a segment: ``"new"``, ``"started"`` or ``"ended"``."""
    kinds = {r.get("kind") for r in read_events(path).records}
    if EV_END in kinds:
        return "ended"
    return "started" if kinds else "new"


class Worker:
    """One worker of a study.

    Args:
        study_dir: The study directory.
        worker_id: This worker's id (as in the journal).
        poll_interval: Seconds between reads of the assignment file while idle.
        controller_timeout: Exit once idle if the controller's heartbeat is older than this.
        clock: Where the worker reads the time (heartbeats, event lines, the controller's
            silence) and waits, the controller's :class:`~hpctune.wire.clock.Clock`; the wall
            clock by default.

    Raises:
        AccessError: The study directory is writable by others or not yours.
        JournalError: The journal cannot be read.
    """

    def __init__(
        self,
        study_dir: str | Path,
        worker_id: str,
        *,
        poll_interval: float | None = None,
        controller_timeout: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock or RealClock()
        self.paths = StudyPaths.of(study_dir)
        check_study_dir(self.paths.root)
        use_umask_of(self.paths.root)
        self.worker_id = worker_id
        self.poll_interval = poll_interval or _env_float("HPCTUNE_POLL_INTERVAL", 0.1)
        self.controller_timeout = controller_timeout or _env_float(
            "HPCTUNE_CONTROLLER_TIMEOUT", 120.0
        )
        self._functions: dict[str, Callable[..., Any]] = {}
        self.interrupted = ""
        self._done: set[int] = set()
        self._ignored: set[tuple[int, int]] = set()  # (segment, epoch) of stale files
        self.epoch = 0  # the highest controller epoch seen
        self.paths.worker_dir(worker_id).mkdir(parents=True, exist_ok=True)
        beat = Heartbeat(
            worker_id, slurm_job_id=own_job_id(), started=process_start_time(self.clock)
        )
        previous = Heartbeat.read(self.paths.heartbeat(worker_id))
        if previous is not None and previous.started < beat.started:  # for the accounting
            beat.previous_started, beat.previous_time = previous.started, previous.time
        self.heartbeat = _HeartbeatThread(
            self.paths.heartbeat(worker_id), beat, HEARTBEAT_INTERVAL, self.clock
        )

    def run(self) -> int:
        """Run assignments until told to exit, orphaned or interrupted; return the exit code.

        SIGUSR2 (Slurm: preemption, or the time limit is near) makes the running segment
        suspend at its next report (with its checkpoint); then the worker asks Slurm to requeue
        its job and exits. The controller gives the trial to a free worker, maybe this one once
        it runs again.
        """
        previous = signal.signal(signal.SIGUSR2, self._on_usr2)
        self.heartbeat.start()
        logger.info("worker %s started (pid %d)", self.worker_id, os.getpid())
        reason, final_state = "orphaned", "exited"
        try:
            while not self.interrupted:
                assignment = read_assignment(self.paths.assignment(self.worker_id))
                if isinstance(assignment, ExitOrder) and self._current(assignment.epoch):
                    reason = assignment.reason
                    break
                if (
                    isinstance(assignment, Assignment)
                    and assignment.segment_id not in self._done
                    and (assignment.segment_id, assignment.epoch) not in self._ignored
                ):
                    trusted = self._verify(assignment)
                    if trusted is not None:
                        self._done.add(assignment.segment_id)
                        if not self._take(trusted):  # its files could not be written: later
                            self._done.discard(assignment.segment_id)
                            self.clock.sleep(STORAGE_WAIT)
                    continue
                if self._controller_silent():
                    logger.warning(
                        "controller silent for more than %.0f s; exiting", self.controller_timeout
                    )
                    break
                self.clock.sleep(self.poll_interval)
            if self.interrupted:
                reason, final_state = self.interrupted, self._requeue()
        finally:
            self.heartbeat.update(state=final_state, segment_id=None)
            self.heartbeat.stop()
            signal.signal(signal.SIGUSR2, previous)
            logger.info("worker %s exits (%s): %s", self.worker_id, final_state, reason)
        return 0

    def _current(self, epoch: int) -> bool:
        """True if a file of controller ``epoch`` is not stale: no higher epoch exists."""
        self.epoch = max(self.epoch, highest_epoch(self.paths.root))
        return epoch >= self.epoch

    def _verify(self, claimed: Assignment) -> Assignment | None:
        """The assignment to run, from the journal; None (and never again for this file) if
        the file is stale, or the journal does not hold it or disagrees with it."""
        key = (claimed.segment_id, claimed.epoch)
        if not self._current(claimed.epoch):
            logger.info(
                "assignment of segment %d from controller epoch %d ignored: epoch %d took over",
                claimed.segment_id,
                claimed.epoch,
                self.epoch,
            )
            self._ignored.add(key)
            return None
        deadline = self.clock.now() + VERIFY_WAIT
        problem = "the journal holds no such segment (the file was not written by the controller)"
        while True:
            try:
                trusted = trusted_assignment(self.paths.root, claimed, self.worker_id)
            except AssignmentRefused as exc:
                logger.error("assignment refused, not run: %s", exc)
                self._ignored.add(key)
                return None
            except HpctuneError as exc:  # the journal could not be read: try again
                trusted, problem = None, str(exc)
            if trusted is not None:
                return trusted
            if self.clock.now() > deadline or self.interrupted:
                logger.error(
                    "assignment of segment %d refused, not run: %s", claimed.segment_id, problem
                )
                self._ignored.add(key)
                return None
            self.clock.sleep(0.2)  # its commit may not be visible from this node yet

    def _on_usr2(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = "SIGUSR2: preempted, or the time limit is near"

    def _take(self, assignment: Assignment) -> bool:
        """Run a new assignment; close one that an earlier process of this worker left open.

        Returns False when the segment could not start because its event file could not be
        written (a full disk): the worker tries again later.
        """
        path = self.paths.event_file(assignment.segment_id)
        progress = segment_progress(path)
        if progress == "new":
            return self.run_segment(assignment)
        logger.info(
            "segment %d was %s by an earlier process; not run again",
            assignment.segment_id,
            progress,
        )
        if progress == "started":  # this worker's job was requeued in the middle of it
            with EventWriter(path) as events:
                events.write(
                    {
                        "kind": EV_END,
                        "t": self.clock.now(),
                        "status": SegmentStatus.LOST.value,
                        "reason": "the worker was requeued during the segment",
                        "requeued": True,
                    },
                    fsync=True,
                )
        return True

    def _requeue(self) -> str:
        """Ask Slurm to requeue this worker's job, exactly this task of an array (requeueing
        the array's own id would requeue every task); return the heartbeat's final state."""
        job = own_job_id()
        if not job:
            return "exited"
        try:
            subprocess.run(
                ["scontrol", "requeue", job], check=True, capture_output=True, timeout=60
            )
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning(
                "scontrol requeue %s failed (%s); Slurm may requeue it itself", job, exc
            )
        return "requeued"

    def _controller_silent(self) -> bool:
        """True when the controller has ended, or been silent for ``controller_timeout``."""
        data = read_json(self.paths.controller_file)
        if isinstance(data, dict) and "time" in data:
            last = float(data["time"])
            if last == 0.0:
                return True  # the controller ended (it writes time 0 when it does)
        else:
            last = self.heartbeat.beat.started  # no controller yet: count from our start
        return self.clock.now() - last > self.controller_timeout

    def _function(self, entry: dict[str, Any]) -> Callable[..., Any]:
        # imported here: the spec package loads the journal's readers (zarr), which a worker
        # otherwise loads later; its start-up time halves (0.5 s instead of 1 s)
        from hpctune.spec import EntryPoint

        point = EntryPoint(
            file=Path(entry["file"]) if entry.get("file") else None,
            module=entry.get("module"),
            function=entry["function"],
        )
        key = point.describe()
        if key not in self._functions:
            if point.file is not None:
                check_loadable(point.file, "the training file")
            elif point.module is not None:
                origin = _module_origin(point.module)
                if origin is not None:
                    check_loadable(origin, f"the training module {point.module}")
            self._functions[key] = point.load()
        return self._functions[key]

    def run_segment(self, a: Assignment) -> bool:
        """Run one segment: call the user's function, then write the end record.

        Returns False (nothing run) when the segment's start could not be written because
        storage failed (:mod:`hpctune.wire.storage`); the worker tries again later.
        """
        logger.info(
            "segment %d: trial %d from step %d to %d",
            a.segment_id,
            a.trial_id,
            a.start_step,
            a.until_step,
        )
        paths = self.paths
        with contextlib.suppress(Exception):  # import the user's module before the segment
            self._function(a.entry)  # starts (start-up, not training); errors show in _call
        events: EventWriter | None = None
        try:
            events = EventWriter(paths.event_file(a.segment_id))
            events.write(
                {
                    "kind": EV_START,
                    "t": self.clock.now(),
                    "worker": self.worker_id,
                    "pid": os.getpid(),
                    "host": self.heartbeat.beat.host,
                    "start_step": a.start_step,
                    "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                },
                fsync=True,
            )
        except OSError as exc:
            if storage_error(exc) is None:
                raise
            logger.error("segment %d cannot start: %s", a.segment_id, describe(exc))
            if events is not None:
                events.close()
            return False
        with events:
            self.heartbeat.update(state="running", segment_id=a.segment_id, step=a.start_step)
            ctx = TrialContext(
                a,
                study_dir=paths.root,
                events=events,
                checkpoint_path=lambda step: paths.checkpoint_file(a.trial_id, step, a.segment_id),
                decision_file=paths.decision(a.segment_id),
                interrupted=lambda: self.interrupted,
                highest_epoch=lambda: highest_epoch(paths.root),
                devices=devices_from_environment(),
                clock=self.clock,
            )
            status, reason, error = self._call(a, ctx)
            end = {
                "kind": EV_END,
                "t": self.clock.now(),
                "status": status.value,
                "step": ctx.step,
                "reason": reason,
                "error": error,
            }
            if ctx.storage_error:
                end["storage"] = ctx.storage_error
            self._write_end(events, end)
        self.heartbeat.update(state="idle", segment_id=None, step=None)
        logger.info(
            "segment %d ended: %s at step %d %s", a.segment_id, status.value, ctx.step, reason
        )
        return True

    def _write_end(self, events: EventWriter, end: dict[str, Any]) -> None:
        """Write a segment's end line, retrying while storage fails; give up after
        ``END_ATTEMPTS`` tries (the controller then ends the segment itself, no retry counted)."""
        for attempt in range(END_ATTEMPTS):
            try:
                events.write(end, fsync=True)
                return
            except OSError as exc:
                if storage_error(exc) is None:
                    raise
                logger.error("end line not written (%s); attempt %d", describe(exc), attempt + 1)
                self.clock.sleep(STORAGE_WAIT)

    def _call(self, a: Assignment, ctx: TrialContext) -> tuple[SegmentStatus, str, str]:
        """Call the user's function; return the segment's status, a reason and a traceback.

        A storage failure (a full disk; the user's own writes too) suspends the segment with
        ``ctx.storage_error`` set. ``KeyboardInterrupt`` raised in the function fails the trial
        with its traceback, as any other exception.
        """
        paths = self.paths
        try:
            with redirect_output(
                paths.trial_output(a.trial_id, "out"), paths.trial_output(a.trial_id, "err")
            ):
                function = self._function(a.entry)
                function(ctx)
        except TrialStop as stop:
            if ctx.storage_error:
                return SegmentStatus.SUSPENDED, ctx.storage_error, ""
            if ctx.diverged:
                return SegmentStatus.TERMINATED, f"diverged: {ctx.diverged}", ""
            return _from_decision(ctx, stop.decision, stop.reason)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the worker goes on
            failed = storage_error(exc)
            if failed is not None:  # the function's own write found the disk full
                ctx.storage_error = describe(failed)
                return SegmentStatus.SUSPENDED, ctx.storage_error, ""
            tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
            error = "".join(traceback.format_exception(type(exc), exc, tb))  # user frames only
            self._append_error(a.trial_id, error)
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return SegmentStatus.FAILED, text, error
        return _from_decision(ctx, ctx.decision, ctx.decision_reason)

    def _append_error(self, trial_id: int, error: str) -> None:
        with (
            contextlib.suppress(OSError),
            open(self.paths.trial_output(trial_id, "err"), "a") as f,
        ):
            f.write(error)


def _module_origin(module: str) -> Path | None:
    """The file a module would be imported from, if it is a file."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return Path(origin) if origin and os.path.isfile(origin) else None


def _from_decision(
    ctx: TrialContext, decision: Decision, reason: str
) -> tuple[SegmentStatus, str, str]:
    """Map the decision in force when the function returned to the segment's status."""
    if ctx.step >= ctx.max_steps:
        return SegmentStatus.COMPLETED, "", ""
    if decision is Decision.STOP:
        return SegmentStatus.TERMINATED, reason or "stopped", ""
    if decision is Decision.SUSPEND or ctx.step >= ctx.until_step:
        return SegmentStatus.SUSPENDED, reason or "suspended", ""
    return SegmentStatus.ENDED_EARLY, f"the function returned at step {ctx.step}", ""


def setup_logging(path: Path) -> None:
    """Log to ``path`` at the level of ``HPCTUNE_LOG_LEVEL`` (default INFO)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("hpctune")
    root.addHandler(handler)
    root.setLevel(os.environ.get("HPCTUNE_LOG_LEVEL", "INFO").upper())


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m hpctune.worker.loop <study-dir> <worker-id>``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m hpctune.worker.loop <study-dir> <worker-id>", file=sys.stderr)
        return 2
    study_dir, worker_id = args
    try:
        worker = Worker(study_dir, worker_id)  # checks the study directory, sets the umask
    except HpctuneError as exc:
        print(f"error: worker {worker_id} refuses to start: {exc}", file=sys.stderr)
        return exc.exit_code
    setup_logging(StudyPaths.of(study_dir).worker_log(worker_id))
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
