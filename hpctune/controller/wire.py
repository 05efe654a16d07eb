"""The wire as files of a study directory: what the controller of a real study reads and
writes (:class:`FileWire`; the interface is :class:`hpctune.core.wire.Wire`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from hpctune.core.wire import EventLines, Wire
from hpctune.files import sha256_file, write_json_atomic
from hpctune.wire.asktell import ANSWERS_DIR
from hpctune.wire.eventlog import read_events
from hpctune.wire.inbox import read_command, reject_file
from hpctune.wire.layout import StudyPaths
from hpctune.wire.protocol import Assignment, DecisionMessage, Heartbeat, write_assignment
from hpctune.wire.storage import filesystem_of, free_bytes, storage_error


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
        path = self.paths.root / ANSWERS_DIR / f"{request}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, answer, fsync=True)

    def storage_room(self, needed: int) -> tuple[bool, int]:
        """Write and delete a 4 KiB probe file in the study directory; writes work and there is
        room when it succeeds and ``needed`` bytes are free (or the free space is unknown)."""
        free = free_bytes(self.paths.root)
        probe = self.paths.root / f".hpctune-space-probe-{os.getpid()}"
        try:
            probe.write_bytes(b"\0" * 4096)
            probe.unlink()
        except OSError as exc:
            probe.unlink(missing_ok=True)
            if storage_error(exc) is None:
                raise
            return False, free
        return free < 0 or free >= needed, free

    def filesystem(self) -> tuple[str, str]:
        """The study directory's filesystem: mount point and type."""
        return filesystem_of(self.paths.root)

    def output_tail(self, path: Path, lines: int = 5) -> str:
        """The last ``lines`` lines of a worker's output file, joined by `` | ``."""
        try:
            text = path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no output)"
        return " | ".join(text[-lines:]) or "(no output)"
