"""The wire: every file the controller exchanges with its workers and its users, behind one
interface.

The controller reads workers' event lines and heartbeats and users' inbox commands, and writes
assignments, decisions, ask/tell answers and checkpoint deletions, only through a :class:`Wire`.
:class:`FileWire` is the study directory on the shared filesystem (what runs on a cluster); the
simulator gives the same controller an in-memory wire (:mod:`hpctune.simulator._wire`) whose
workers replay a trace, so what is simulated is the controller's own code.
"""

from __future__ import annotations

import abc
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from hpctune.wire.eventlog import read_events
from hpctune.wire.files import sha256_file, write_json_atomic
from hpctune.wire.inbox import read_command, reject_file
from hpctune.wire.layout import StudyPaths
from hpctune.wire.protocol import Assignment, DecisionMessage, Heartbeat, write_assignment


@dataclass
class EventLines:
    """New event lines of one segment.

    Attributes:
        records: The valid records, in order.
        offset: Where the next read starts.
        corrupt_lines: Each corrupt line as (how many valid records came before it, its bytes).
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    offset: int = 0
    corrupt_lines: list[tuple[int, bytes]] = field(default_factory=list)


class Wire(abc.ABC):
    """What the controller reads from and writes to its workers and users."""

    @abc.abstractmethod
    def event_name(self, segment_id: int) -> str:
        """The name of a segment's event file (its key in the journal's read cursors)."""

    @abc.abstractmethod
    def read_events(self, segment_id: int, offset: int) -> EventLines | None:
        """The segment's event lines after byte ``offset``; ``None`` when nothing is new."""

    @abc.abstractmethod
    def heartbeat(self, worker_id: str) -> Heartbeat | None:
        """The worker's latest heartbeat, or ``None``."""

    @abc.abstractmethod
    def write_assignment(
        self, worker_id: str, assignment: Assignment | None, reason: str = "", *, epoch: int = 0
    ) -> None:
        """Give a worker its next segment (``None``: it must exit, for ``reason``)."""

    @abc.abstractmethod
    def write_decision(self, message: DecisionMessage, *, fsync: bool = False) -> None:
        """Tell a running segment the controller's decision."""

    @abc.abstractmethod
    def delete_checkpoint(self, path: str) -> None:
        """Delete a checkpoint file (``path``: relative to the study directory)."""

    def sweep_checkpoints(self, trial_id: int, keep: set[str]) -> None:  # noqa: B027
        """Delete a finished trial's checkpoint files other than ``keep`` (relative paths)."""

    def checkpoint_folders(self) -> list[int]:
        """The trials that have a checkpoint folder."""
        return []

    def checkpoint_problem(self, path: str, sha256: str) -> str:
        """Why a checkpoint file cannot be resumed from (``""`` if it can)."""
        return ""

    def inbox(self) -> list[str]:
        """The names of the inbox's command files, sorted."""
        return []

    def read_command(self, name: str) -> tuple[Any, str] | None:
        """An inbox command as :func:`hpctune.wire.inbox.read_command` reads it."""
        return None

    def reject_command(self, name: str, reason: str) -> None:  # noqa: B027
        """Set a bad inbox file aside with its reason."""

    def remove_command(self, name: str) -> None:  # noqa: B027
        """Remove an inbox file the controller has carried out (journaled)."""

    def write_answer(self, request: str, answer: dict[str, Any]) -> None:  # noqa: B027
        """Write the answer to an ``ask`` command."""

    def identity(self) -> dict[str, Any]:
        """Where the controller runs, for its journal: ``pid``, ``host``, Slurm ``job``
        (a controller in memory runs nowhere in particular)."""
        return {"pid": 0, "host": "in-memory", "job": None}


class FileWire(Wire):
    """The wire as files of the study directory (see :mod:`hpctune.wire.layout`)."""

    def __init__(self, paths: StudyPaths) -> None:
        self.paths = paths
        self._worker_dirs: set[str] = set()  # worker folders known to exist

    def identity(self) -> dict[str, Any]:
        """This process: its pid, host and Slurm job."""
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "job": os.environ.get("SLURM_JOB_ID"),
        }

    def event_name(self, segment_id: int) -> str:
        """The event file's name of segment ``segment_id``."""
        return self.paths.event_file(segment_id).name

    def read_events(self, segment_id: int, offset: int) -> EventLines | None:
        """A segment's complete event lines from byte ``offset`` on (``None``: nothing new)."""
        path = self.paths.event_file(segment_id)
        try:
            if path.stat().st_size <= offset:
                return None
        except FileNotFoundError:
            return None
        result = read_events(path, offset)
        return EventLines(result.records, result.offset, result.corrupt_lines)

    def heartbeat(self, worker_id: str) -> Heartbeat | None:
        """A worker's last heartbeat (``None``: none yet, or unreadable)."""
        return Heartbeat.read(self.paths.heartbeat(worker_id))

    def write_assignment(
        self, worker_id: str, assignment: Assignment | None, reason: str = "", *, epoch: int = 0
    ) -> None:
        """Write a worker's assignment file (``None``: no work; ``reason`` says why)."""
        path = self.paths.assignment(worker_id)
        if worker_id not in self._worker_dirs:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._worker_dirs.add(worker_id)
        write_assignment(path, assignment, reason, epoch=epoch)

    def write_decision(self, message: DecisionMessage, *, fsync: bool = False) -> None:
        """Write the decision file of a running segment."""
        write_json_atomic(self.paths.decision(message.segment_id), message.to_dict(), fsync=fsync)

    def delete_checkpoint(self, path: str) -> None:
        """Delete a checkpoint file (relative to the study directory)."""
        (self.paths.root / path).unlink(missing_ok=True)

    def sweep_checkpoints(self, trial_id: int, keep: set[str]) -> None:
        """Delete a finished trial's checkpoint files other than ``keep``."""
        folder = self.paths.trial_checkpoints(trial_id)
        for path in folder.glob("*") if folder.is_dir() else []:
            if self.paths.relative(path) not in keep:
                path.unlink(missing_ok=True)

    def checkpoint_folders(self) -> list[int]:
        """The trials that have a checkpoint folder."""
        return self.paths.checkpoint_trials()

    def checkpoint_problem(self, path: str, sha256: str) -> str:
        """Why a checkpoint file cannot be resumed from (``""`` if it can)."""
        try:
            digest = sha256_file(self.paths.root / path)
        except FileNotFoundError:
            return "is missing"
        except OSError as exc:
            return f"cannot be read ({exc})"
        if sha256 and digest != sha256:
            return f"has SHA-256 {digest[:12]}..., not the journal's {sha256[:12]}..."
        return ""

    def inbox(self) -> list[str]:
        """The names of the inbox's command files, sorted (none if unreadable)."""
        try:
            return sorted(p.name for p in self.paths.inbox.glob("*.json"))
        except OSError:
            return []

    def read_command(self, name: str) -> tuple[Any, str] | None:
        """An inbox command as :func:`hpctune.wire.inbox.read_command` reads it."""
        return read_command(self.paths.inbox / name)

    def reject_command(self, name: str, reason: str) -> None:
        """Move a bad inbox file to ``inbox/rejected/`` with its reason."""
        reject_file(self.paths.inbox, name, reason)

    def remove_command(self, name: str) -> None:
        """Remove an inbox file the controller has carried out."""
        (self.paths.inbox / name).unlink(missing_ok=True)

    def write_answer(self, request: str, answer: dict[str, Any]) -> None:
        """Write the answer to an ``ask`` command (``asked/<request>.json``)."""
        from hpctune.wire.asktell import ANSWERS_DIR

        path = self.paths.root / ANSWERS_DIR / f"{request}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, answer, fsync=True)
