"""Workers without processes, for scale tests and benchmarks: many workers in one loop.

:class:`FakeExecutor` starts nothing and reports every worker running (given the study's paths:
until its heartbeat says it exited, as a real worker's process ends once it wrote that);
:class:`FakeFleet` does what those workers would do through the study's files, as
:mod:`hpctune.worker.loop` does: it reads each worker's assignment file, ignores files of a
controller epoch that was taken over, and writes the heartbeat (on a change of state or segment,
and every ``HEARTBEAT_INTERVAL`` seconds) and the segment's event lines (start, then a report
and a checkpoint line per step, then the end). A controller in another process, killed and
restarted while the fleet goes on, sees workers that outlive it, as real ones do. The training
is a formula of the trial's parameters (the metric ``score``, from the parameter ``x``); no
checkpoint file is written (the controller only deletes them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpctune.backends.base import Executor, WorkerState
from hpctune.files import write_json_atomic
from hpctune.study.states import SegmentStatus
from hpctune.wire.eventlog import EventWriter
from hpctune.wire.layout import StudyPaths, checkpoint_path
from hpctune.wire.lease import highest_epoch
from hpctune.wire.protocol import (
    EV_CHECKPOINT,
    EV_END,
    EV_REPORT,
    EV_START,
    Assignment,
    ExitOrder,
    Heartbeat,
    read_assignment,
)
from hpctune.worker.loop import HEARTBEAT_INTERVAL


class FakeExecutor(Executor):
    """Workers that exist as far as the controller can tell: their files are written by
    someone else (:class:`FakeFleet`, or a benchmark's own loop).

    Args:
        paths: The study's paths, to tell a worker whose heartbeat says it exited gone; without
            them every worker is always running.
    """

    def __init__(self, paths: StudyPaths | None = None) -> None:
        self.paths = paths

    def start(
        self, worker_ids: list[str], devices: int | None = None
    ) -> dict[str, dict[str, Any]]:
        """Start nothing: the workers' files are written by someone else."""
        return {w: {"fake": True} for w in worker_ids}

    def state(self, worker_id: str, info: Mapping[str, Any]) -> WorkerState:
        """Gone once its heartbeat says it exited (with the study's paths), else running (a fake
        worker is lost only by its heartbeat)."""
        if self.paths is not None:
            beat = Heartbeat.read(self.paths.heartbeat(worker_id))
            if beat is not None and beat.state == "exited":
                return WorkerState.GONE
        return WorkerState.RUNNING

    def cancel(self, worker_id: str, info: Mapping[str, Any]) -> None:
        """Nothing to cancel."""
        pass

    def end_reason(self, worker_id: str, info: Mapping[str, Any]) -> str:
        """No reason: fake workers do not end on their own."""
        return ""


@dataclass
class _Running:
    """A segment a fake worker trains: its event file and the last step written."""

    assignment: Assignment
    events: EventWriter
    step: int


def score(params: Mapping[str, Any], step: int) -> float:
    """The fake training's metric: rises with ``step``, ends at ``x``."""
    return float(params.get("x", 0.5)) * (1.0 - 0.5**step)


class FakeFleet:
    """Every worker of a study, one step each per :meth:`tick`.

    Args:
        root: The study directory.
    """

    def __init__(self, root: Path) -> None:
        self.paths = StudyPaths.of(root)
        self.started = time.time()
        self.done: set[int] = set()  # segments run (never run twice, as a worker's ``_done``)
        self.running: dict[str, _Running] = {}
        self.exited: set[str] = set()
        self.steps = 0  # report lines written
        self.beats: dict[str, tuple[str, int | None, float]] = {}  # last heartbeat written

    def tick(self) -> int:
        """Each worker takes its assignment or trains one step of it; return the number of
        workers not exited."""
        epoch = highest_epoch(self.paths.root)
        workers = sorted(p.name for p in self.paths.workers.iterdir() if p.is_dir())
        for worker in workers:
            if worker in self.exited:
                continue
            if worker not in self.running:
                order = read_assignment(self.paths.assignment(worker))
                if isinstance(order, ExitOrder) and order.epoch >= epoch:
                    self.exited.add(worker)
                    self._beat(worker, "exited")
                    continue
                if (
                    isinstance(order, Assignment)
                    and order.segment_id not in self.done
                    and order.epoch >= epoch
                ):
                    self._take(worker, order)
            if worker in self.running:
                self._step(worker)
            self._beat(worker, "running" if worker in self.running else "idle")
        return len(workers) - len(self.exited)

    def _take(self, worker: str, a: Assignment) -> None:
        self.done.add(a.segment_id)
        events = EventWriter(self.paths.event_file(a.segment_id))
        events.write({"kind": EV_START, "t": time.time(), "host": "fleet", "pid": 0})
        self.running[worker] = _Running(a, events, a.start_step)

    def _step(self, worker: str) -> None:
        run = self.running[worker]
        a, now = run.assignment, time.time()
        run.step += 1
        metrics = {a.metric: score(a.params, run.step)}
        run.events.write({"kind": EV_REPORT, "t": now, "step": run.step, "metrics": metrics})
        self.steps += 1
        path = checkpoint_path(a.trial_id, run.step, a.segment_id)
        run.events.write({"kind": EV_CHECKPOINT, "t": now, "step": run.step, "path": path,
                          "sha256": "", "nbytes": 1000})  # fmt: skip
        if run.step >= a.until_step:
            status = (
                SegmentStatus.COMPLETED if run.step >= a.max_steps else SegmentStatus.SUSPENDED
            )
            run.events.write({"kind": EV_END, "t": now, "status": status.value,
                              "step": run.step, "reason": "", "error": ""})  # fmt: skip
            run.events.close()
            del self.running[worker]

    def _beat(self, worker: str, state: str) -> None:
        """Write the heartbeat when the state or segment changed, or after
        ``HEARTBEAT_INTERVAL`` seconds."""
        run = self.running.get(worker)
        segment = None if run is None else run.assignment.segment_id
        now = time.time()
        last = self.beats.get(worker)
        if (
            last is not None
            and last[:2] == (state, segment)
            and now - last[2] < HEARTBEAT_INTERVAL
        ):
            return
        self.beats[worker] = (state, segment, now)
        beat = Heartbeat(
            worker, state, segment, None if run is None else run.step, started=self.started
        )
        write_json_atomic(self.paths.heartbeat(worker), beat.to_dict())
