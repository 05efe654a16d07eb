"""The files through which the controller and the workers talk, and their formats.

Controller to worker: an :class:`Assignment` (or an :class:`ExitOrder`) in
``workers/<W>/assignment.json``, and the latest decision for a segment in
``decisions/segment-<S>.json``. Worker to controller: the segment's event file
(:mod:`hpctune.wire.eventlog`) and ``workers/<W>/heartbeat.json``. Every one of these small files
is
replaced atomically by its single writer. The controller's files carry its epoch
(:mod:`hpctune.wire.lease`): a worker ignores those of an epoch below the highest it knows of, and
takes what it runs from the journal, not from these files (:mod:`hpctune.worker.loop`).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpctune.files import read_json, write_json_atomic
from hpctune.study.states import Decision, Mode

# Event kinds in a segment's event file.
EV_START = "start"
EV_REPORT = "report"
EV_CHECKPOINT = "checkpoint"
EV_END = "end"


@dataclass(frozen=True)
class Assignment:
    """What a worker must run next: one segment of one trial.

    Attributes:
        segment_id: The segment's id (unique in the study, increasing).
        trial_id: The trial.
        params: The trial's hyperparameters (schedules as dicts).
        seed: A seed for the user's code, fixed per trial.
        start_step: The step training starts from (the checkpoint's step, 0 if none).
        until_step: The last step of this segment.
        max_steps: The trial's last step.
        boundary: The evaluation boundary, in steps.
        metric: The study metric (a non-finite value of it stops the trial).
        mode: ``"max"`` or ``"min"``.
        entry: The entry point as a dict (``file``, ``module``, ``function``).
        checkpoint: The checkpoint to start from (path relative to the study directory), or None.
        checkpoint_sha256: Its checksum.
        decision_wait: Seconds to wait for the controller's decision at a boundary (0: never).
        checkpoint_steps: Steps at which a checkpoint must be saved besides boundaries (stage
            trees: the ends of the stages, where other trials branch off).
        epoch: The epoch of the controller that wrote it.
        written: The controller's time when it wrote the file, after the commit that holds
            the segment (set by :func:`write_assignment`): a journal committed later that does
            not hold the segment proves the file false.
    """

    segment_id: int
    trial_id: int
    params: dict[str, Any]
    seed: int
    start_step: int
    until_step: int
    max_steps: int
    boundary: int
    metric: str
    mode: Mode
    entry: dict[str, Any]
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    decision_wait: float = 0.0
    checkpoint_steps: tuple[int, ...] = ()
    epoch: int = 0
    written: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {"kind": "segment", **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Assignment:
        """Build from the JSON form."""
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        fields["checkpoint_steps"] = tuple(int(s) for s in fields.get("checkpoint_steps", ()))
        return cls(**fields)


@dataclass(frozen=True)
class ExitOrder:
    """The controller tells a worker to exit."""

    reason: str
    epoch: int = 0


def write_assignment(
    path: Path, assignment: Assignment | None, reason: str = "", *, epoch: int = 0
) -> None:
    """Write a worker's assignment file: a segment, or an exit order when ``None``.

    Renamed into place, not synced: the journal (committed before) is the record, and a file a
    crash lost is written again (the controller re-sends assignments it has not seen taken and,
    when it starts, every active one), so the decision path waits for no disk.
    """
    body = (
        {"kind": "exit", "reason": reason, "epoch": epoch}
        if assignment is None
        else {**assignment.to_dict(), "written": time.time()}
    )
    write_json_atomic(path, body)


def read_assignment(path: Path) -> Assignment | ExitOrder | None:
    """Return the assignment, the exit order, or ``None`` if there is none (or it is garbled)."""
    data = read_json(path)
    if not isinstance(data, dict):
        return None
    try:
        if data.get("kind") == "exit":
            return ExitOrder(str(data.get("reason") or "told to exit"), int(data.get("epoch", 0)))
        return Assignment.from_dict(data)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class DecisionMessage:
    """The controller's latest word on a running segment."""

    segment_id: int
    step: int
    decision: Decision
    reason: str = ""
    epoch: int = 0  # of the controller that wrote it

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "segment": self.segment_id,
            "step": self.step,
            "decision": self.decision.value,
            "reason": self.reason,
            "time": time.time(),
            "epoch": self.epoch,
        }

    @classmethod
    def read(cls, path: Path) -> DecisionMessage | None:
        """Read a decision file, ``None`` if there is none (yet)."""
        data = read_json(path)
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                int(data["segment"]),
                int(data["step"]),
                Decision(data["decision"]),
                str(data.get("reason", "")),
                int(data.get("epoch", 0)),
            )
        except (KeyError, TypeError, ValueError):
            return None


_now = time.time


@dataclass
class Heartbeat:
    """A worker's heartbeat file content."""

    worker_id: str
    state: str = "idle"  # idle | running | exited | requeued
    segment_id: int | None = None
    step: int | None = None
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    time: float = field(default_factory=time.time)
    slurm_job_id: str | None = None
    started: float = field(default_factory=lambda: _now())  # when this process started
    # the worker's previous process (a requeued job's earlier run): its start and last beat
    previous_started: float | None = None
    previous_time: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return dataclasses.asdict(self)

    @classmethod
    def read(cls, path: Path) -> Heartbeat | None:
        """Read a heartbeat file, ``None`` if there is none."""
        data = read_json(path)
        if not isinstance(data, dict):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        return cls(**fields)
