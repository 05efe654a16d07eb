"""The wire: every file the scheduling core exchanges with its workers and its users, behind
one interface.

The core reads workers' event lines and heartbeats and users' inbox commands, and writes
assignments, decisions, ask/tell answers and checkpoint deletions, only through a :class:`Wire`.
:class:`hpctune.controller.wire.FileWire` is the study directory on the shared filesystem (what
runs on a cluster); the simulator gives the same core an in-memory wire
(:class:`hpctune.simulator._workers.MemoryWire`) whose workers replay a trace, so what is
simulated is the controller's own code.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpctune.wire.protocol import Assignment, DecisionMessage, Heartbeat


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

    def storage_room(self, needed: int) -> tuple[bool, int]:
        """Whether writes succeed again and ``needed`` bytes are free, and the free bytes
        (``-1``: unknown). Memory always has room."""
        return True, -1

    def filesystem(self) -> tuple[str, str]:
        """The study's filesystem: its mount point and type (for error messages)."""
        return "memory", "memory"

    def output_tail(self, path: Path, lines: int = 5) -> str:
        """The last ``lines`` lines of a worker's output file, joined by `` | ``."""
        return "(no output)"
