"""Append-only event files with self-checking lines: one writer per file, torn lines detected.

A worker writes the events of a segment (start, reports, checkpoints, end) to its own file; only
the controller reads them. Each line is ``<crc32 of the JSON, 8 hex digits> <JSON>\\n`` and is
written with a single ``write`` on a file opened with ``O_APPEND``. A reader consumes only
complete lines (ending in a newline) whose checksum matches; a last line without a newline is
left for the next read (the writer may still be writing it), and a line whose checksum fails is
skipped and counted. When a writer reopens a file whose last line is torn (its previous process
died mid-write), it first ends that line, so the fragment becomes one bad line and the new
records stay intact.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpctune.files import dumps


def encode_line(record: dict[str, Any]) -> bytes:
    """Return the bytes of one self-checking line for ``record``."""
    payload = dumps(record).encode()
    return b"%08x " % zlib.crc32(payload) + payload + b"\n"


def decode_line(line: bytes) -> dict[str, Any] | None:
    """Return the record of one line (without its newline), or ``None`` if it is corrupt."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    payload = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(payload):
            return None
        record = json.loads(payload)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


class EventWriter:
    """Append records to one event file; the only writer of that file.

    Args:
        path: The event file; created if missing.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size > 0:
            with open(self.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    self._write(b"\n")  # end the torn line of a dead writer

    def write(self, record: dict[str, Any], *, fsync: bool = False) -> None:
        """Append ``record`` as one line; with ``fsync``, force it to stable storage."""
        self._write(encode_line(record))
        if fsync:
            os.fsync(self._fd)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class ReadResult:
    """What one read of an event file gave.

    Attributes:
        records: The valid records, in file order.
        offset: The byte offset just after the last complete line read.
        corrupt: How many complete lines failed their checksum (skipped).
        pending: Bytes of an incomplete last line left for a later read.
        corrupt_lines: Each corrupt line as (how many valid records came before it, its bytes).
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    offset: int = 0
    corrupt: int = 0
    pending: int = 0
    corrupt_lines: list[tuple[int, bytes]] = field(default_factory=list)


def read_events(path: Path, offset: int = 0) -> ReadResult:
    """Read the complete lines of ``path`` from byte ``offset``.

    A missing file reads as empty. The returned ``offset`` is where the next read starts.
    """
    result = ReadResult(offset=offset)
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return result
    end = data.rfind(b"\n")
    if end < 0:
        result.pending = len(data)
        return result
    for line in data[:end].split(b"\n"):
        record = decode_line(line)
        if record is None:
            if line:
                result.corrupt += 1
                result.corrupt_lines.append((len(result.records), line))
            continue
        result.records.append(record)
    result.offset = offset + end + 1
    result.pending = len(data) - end - 1
    return result
