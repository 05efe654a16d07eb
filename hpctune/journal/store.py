"""The zarr journal: append-only columnar tables with an atomic commit record.

Contract (see ``docs/journal.md``):

* The controller is the only writer (:class:`JournalWriter`); any number of readers
  (:class:`JournalReader`) may read at any time, also from other nodes, without locks.
* Every table only grows. Rows are buffered in memory and written by :meth:`JournalWriter.commit`,
  which writes the column chunks first and then the group's attributes (one small file, replaced
  atomically) with the committed length of every table. Readers read those lengths first and
  never look past them, so they see either the previous commit or the new one.
* A writer killed in the middle of a commit leaves rows beyond the committed lengths; they are
  invisible and the next commit overwrites them. Together with the event-file cursors stored in
  the same attributes, this makes ingestion exactly-once across controller restarts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from hpctune.errors import JournalError
from hpctune.study.metric_names import metric_key, metric_name_problem

FORMAT_VERSION = 2  # 2: metric_keys, ended_early, warning and corrupt_lines records
#: The oldest format this hpctune reads (journals of format 1 stored metrics under their names,
#: unchecked; tests/assets/journals holds a journal of every format and change still read).
OLDEST_FORMAT = 2
# Additions within a format (new record kinds) raise the minor version: a reader refuses a log
# record of a kind it does not know (journal/records.py RECORD_TYPES) unless the journal's minor
# version is newer than its own (then the record is from a newer hpctune and is skipped).
FORMAT_MINOR = 3  # 1: every kind written is registered; 2: deadline_changed; 3: settings_changed
ATTR = "hpctune"
NO_ID = -1

# Columns of each table: name -> (numpy dtype or "str", fill value, chunk length).
TABLES: dict[str, dict[str, tuple[str, Any]]] = {
    "log": {
        "kind": ("str", ""),
        "trial": ("i8", NO_ID),
        "segment": ("i8", NO_ID),
        "time": ("f8", math.nan),
        "data": ("str", ""),
    },
    "metrics": {
        "trial": ("i8", NO_ID),
        "segment": ("i8", NO_ID),
        "step": ("i8", NO_ID),
        "time": ("f8", math.nan),
    },
    "checkpoints": {
        "trial": ("i8", NO_ID),
        "segment": ("i8", NO_ID),
        "step": ("i8", NO_ID),
        "time": ("f8", math.nan),
        "nbytes": ("i8", 0),
        "sha256": ("str", ""),
        "path": ("str", ""),
    },
}
CHUNKS = {"log": 2048, "metrics": 8192, "checkpoints": 2048}
VALUES = "metrics/values"
# Columns whose committed chunks always exist: no row of them holds the fill value. In a journal
# whose commit record says ``dense`` (every chunk is written, fill or not), every column's do.
NEVER_FILL = {
    ("log", "kind"),
    ("log", "time"),
    ("log", "data"),
    ("metrics", "trial"),
    ("metrics", "step"),
    ("checkpoints", "trial"),
    ("checkpoints", "step"),
    ("checkpoints", "path"),
}
# zarr decodes a read's chunks in batches of this many, with as many requests in flight: a
# column of a long journal has hundreds of small chunks, and zarr's default (one at a time, 10
# in flight) spends more time per chunk than decoding it (measured: a 10,000-trial journal
# opens ~1.5x faster).
READ_CONFIG = {"codec_pipeline.batch_size": 128, "async.concurrency": 128}

DAMAGED_HINT = (
    "the journal is damaged (a file of it was truncated, edited or deleted) and hpctune cannot "
    "read it; restore the study directory from a backup or filesystem snapshot"
)


def _array_dtype(kind: str) -> Any:
    return str if kind == "str" else kind


class JournalWriter:
    """The controller's handle on the journal: buffer rows, then commit them atomically.

    Args:
        path: The journal's zarr directory (a symbolic link is resolved once, here).
        create: Create a new, empty journal (the path must not exist).
        epoch: The controller epoch recorded in every commit (:mod:`hpctune.wire.lease`).

    Raises:
        JournalError: The journal is missing or damaged.
    """

    def __init__(self, path: Path, *, create: bool = False, epoch: int | None = None) -> None:
        self.path = Path(path).resolve()
        self.epoch = epoch
        # called just before a commit record is published; raises to abandon the commit (the
        # controller's lease check: a fenced controller never publishes a commit)
        self.before_publish: Callable[[], None] | None = None
        if create:
            self.group = zarr.open_group(str(self.path), mode="w-", zarr_format=3)
            for table, columns in TABLES.items():
                for column, (kind, fill) in columns.items():
                    self.group.create_array(
                        f"{table}/{column}",
                        shape=(0,),
                        chunks=(CHUNKS[table],),
                        dtype=_array_dtype(kind),
                        fill_value=fill,
                    )
            self.state: dict[str, Any] = {
                "format": FORMAT_VERSION,
                "minor": FORMAT_MINOR,
                "lengths": dict.fromkeys(TABLES, 0),
                "metric_names": [],
                "metric_keys": {},
                "cursors": {},
                "commit": 0,
                "time": time.time(),
                "dense": True,
            }
            self.group.attrs[ATTR] = self.state
        else:
            self.group = open_group(self.path, "r+")
            self.state = read_state(self.group, self.path)
        self._pending: dict[str, list[dict[str, Any]]] = {table: [] for table in TABLES}
        self._pending_values: dict[str, list[float]] = {}
        self._keys: dict[str, str] = dict(self.state.get("metric_keys", {}))

    @property
    def lengths(self) -> dict[str, int]:
        """Committed row count of each table."""
        return dict(self.state["lengths"])

    @property
    def metric_names(self) -> list[str]:
        """Names of the metric columns (committed and pending)."""
        names = list(self.state["metric_names"])
        names.extend(n for n in self._pending_values if n not in names)
        return names

    @property
    def cursors(self) -> dict[str, int]:
        """Byte offsets of the event files read so far, as of the last commit."""
        return dict(self.state["cursors"])

    def next_index(self, table: str) -> int:
        """Return the row index the next appended row of ``table`` will get."""
        return int(self.state["lengths"][table]) + len(self._pending[table])

    def append(self, table: str, **row: Any) -> int:
        """Buffer one row of ``table``; return its row index. Missing columns take their fill."""
        if table == "metrics":
            raise ValueError("use append_metrics for the metrics table")
        unknown = set(row) - set(TABLES[table])
        if unknown:
            raise ValueError(f"unknown columns for table {table!r}: {sorted(unknown)}")
        index = self.next_index(table)
        self._pending[table].append(row)
        return index

    def append_metrics(
        self, trial: int, segment: int, step: int, time_: float, values: Mapping[str, float]
    ) -> int:
        """Buffer one metrics row (one report of one trial); return its row index.

        Raises:
            ValueError: A metric name is invalid (:func:`metric_name_problem`).
        """
        index = self.next_index("metrics")
        n_pending = len(self._pending["metrics"])
        for name in values:
            if name not in self._pending_values:
                problem = metric_name_problem(name)
                if problem:
                    raise ValueError(problem)
                self._pending_values[name] = [math.nan] * n_pending
        for name, column in self._pending_values.items():
            value = values.get(name, math.nan)
            column.append(float(value) if value is not None else math.nan)
        self._pending["metrics"].append(
            {"trial": trial, "segment": segment, "step": step, "time": time_}
        )
        return index

    @property
    def has_pending(self) -> bool:
        """True when rows wait for a commit."""
        return any(self._pending.values())

    def commit(self, cursors: Mapping[str, int] | None = None) -> None:
        """Write the buffered rows, then publish the new lengths (and ``cursors``) atomically."""
        lengths = dict(self.state["lengths"])
        for table, rows in self._pending.items():
            if not rows:
                continue
            start = lengths[table]
            end = start + len(rows)
            for column, (kind, fill) in TABLES[table].items():
                values = [row.get(column, fill) for row in rows]
                self._write(f"{table}/{column}", kind, start, end, values, CHUNKS[table], fill)
            if table == "metrics":
                self._write_values(start, end)
            lengths[table] = end
        state = dict(self.state)
        state["lengths"] = lengths
        state["metric_names"] = self.metric_names
        state["metric_keys"] = dict(self._keys)
        if cursors is not None:
            state["cursors"] = dict(cursors)
        if self.epoch is not None:
            state["epoch"] = self.epoch
        state["commit"] = int(state["commit"]) + 1
        state["minor"] = max(int(state.get("minor", 0)), FORMAT_MINOR)  # what this writer may add
        if self.before_publish is not None:
            self.before_publish()
        state["time"] = time.time()
        self.group.attrs[ATTR] = state
        self.state = state
        self._pending = {table: [] for table in TABLES}
        self._pending_values = {}

    def _write_values(self, start: int, end: int) -> None:
        n = end - start
        committed = set(self.state["metric_names"])
        for name in self.metric_names:
            if name not in self._keys:
                legacy = name in committed  # a journal from before metric keys
                self._keys[name] = name if legacy else metric_key(name, set(self._keys.values()))
            column = self._pending_values.get(name, [math.nan] * n)
            self._write(
                f"{VALUES}/{self._keys[name]}",
                "f8",
                start,
                end,
                column,
                CHUNKS["metrics"],
                math.nan,
                fresh=name not in committed,
            )

    def _write(
        self,
        name: str,
        kind: str,
        start: int,
        end: int,
        values: Sequence[Any],
        chunk: int,
        fill: Any,
        *,
        fresh: bool = False,
    ) -> None:
        """Write rows ``start:end`` of one column, growing it by whole chunks.

        ``fresh``: the column is new in this commit; an array left by a commit that was killed
        before it was published is emptied first, so its rows cannot leak into this one. Every
        chunk is stored, also one of fill values only, so a missing chunk is damage; a new
        column gets its rows before ``start`` as fill values.
        """
        try:
            array = self.group[name]
            if fresh:
                assert isinstance(array, zarr.Array)
                array.resize((0,))
        except KeyError:
            array = self.group.create_array(
                name, shape=(0,), chunks=(chunk,), dtype=_array_dtype(kind), fill_value=fill
            )
            fresh = True
        assert isinstance(array, zarr.Array)
        array = array.with_config({"write_empty_chunks": True})
        if array.shape[0] < end:
            capacity = -(-end // chunk) * chunk
            array.resize((capacity,))
        if fresh and start > 0:
            values = [fill] * start + list(values)
            start = 0
        data = np.array(values, dtype=object if kind == "str" else kind)
        array[start:end] = data


def open_group(path: Path, mode: str) -> zarr.Group:
    """Open a journal's zarr group; a missing or unreadable one is a :class:`JournalError`."""
    meta = path / "zarr.json"
    if not meta.exists():
        raise JournalError(f"no journal at {path} (no zarr.json in it)")
    try:
        return zarr.open_group(str(path), mode=mode)  # type: ignore[arg-type]
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise JournalError(
            f"{meta} cannot be read ({type(exc).__name__}: {exc}): {DAMAGED_HINT}"
        ) from exc


def read_state(group: zarr.Group, path: Path) -> dict[str, Any]:
    """Return the commit record of a journal group, checking its format version."""
    state = group.attrs.get(ATTR)
    if not isinstance(state, dict) or not isinstance(state.get("lengths"), dict):
        raise JournalError(
            f"{path} is not an hpctune journal (no '{ATTR}' commit record in "
            f"{path / 'zarr.json'}); if it was one: {DAMAGED_HINT}"
        )
    if int(state.get("format", 0)) > FORMAT_VERSION:
        raise JournalError(
            f"{path} has journal format {state['format']}, newer than this hpctune "
            f"({FORMAT_VERSION}); upgrade hpctune to read it"
        )
    if int(state.get("format", 0)) < OLDEST_FORMAT:
        raise JournalError(
            f"{path} has journal format {state.get('format', 0)}, older than this hpctune reads "
            f"({OLDEST_FORMAT} to {FORMAT_VERSION}: hpctune from 2026-11-25 on); read it with "
            "the hpctune that wrote it (`hpctune export --format hdf5` keeps it), or run the "
            "study again"
        )
    return dict(state)


class JournalReader:
    """A read-only snapshot of the journal as of one commit; safe while the controller writes.

    Args:
        path: The journal's zarr directory (a symbolic link is resolved once, here).

    Raises:
        JournalError: The journal is missing or damaged (also from the reading methods).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path).resolve()
        if not (self.path / "zarr.json").exists():
            raise JournalError(f"no journal at {self.path} (expected a zarr group there)")
        self.group = open_group(self.path, "r")
        self.state = read_state(self.group, self.path)

    @property
    def lengths(self) -> dict[str, int]:
        """Committed row count of each table in this snapshot."""
        return dict(self.state["lengths"])

    @property
    def metric_names(self) -> list[str]:
        """Names of the metric columns in this snapshot."""
        return list(self.state["metric_names"])

    @property
    def cursors(self) -> dict[str, int]:
        """Event-file offsets as of this snapshot."""
        return dict(self.state["cursors"])

    @property
    def format_minor(self) -> int:
        """The journal's minor format version (0: written before kinds were registered)."""
        return int(self.state.get("minor", 0))

    def column(
        self, table: str, column: str, start: int = 0, end: int | None = None
    ) -> np.ndarray:
        """Return rows ``start:end`` (default: to the committed end) of one column (strings as
        an object array)."""
        n = int(self.state["lengths"][table])
        n = n if end is None else min(end, n)
        if start >= n:
            kind = TABLES[table][column][0] if column in TABLES[table] else "f8"
            return np.zeros(0, dtype=object if kind == "str" else kind)
        data = self._read(f"{table}/{column}", start, n, (table, column) in NEVER_FILL)
        if data.dtype.kind in "TUO":
            return data.astype(object)
        return data

    def _read(self, name: str, start: int, end: int, always_stored: bool) -> np.ndarray:
        """Rows ``start:end`` of array ``name``, checking that their chunks exist.

        Raises:
            JournalError: The array or one of its committed chunks is missing or unreadable.
        """
        try:
            with zarr.config.set(READ_CONFIG):  # (an array takes its pipeline's when opened)
                array = self.group[name]
            assert isinstance(array, zarr.Array)
            if always_stored or self.state.get("dense"):
                chunk = int(array.chunks[0])
                for index in range(start // chunk, -(-end // chunk)):
                    key = array.metadata.encode_chunk_key((index,))
                    if not (self.path / name / key).is_file():
                        raise JournalError(
                            f"{self.path / name / key} is missing (rows {index * chunk}-"
                            f"{(index + 1) * chunk - 1} of {name}): {DAMAGED_HINT}"
                        )
            with zarr.config.set(READ_CONFIG):
                return np.asarray(array[start:end])
        except JournalError:
            raise
        except (KeyError, ValueError, TypeError, OSError, RuntimeError) as exc:
            raise JournalError(
                f"{self.path / name} cannot be read ({type(exc).__name__}: {exc}): {DAMAGED_HINT}"
            ) from exc

    def table(self, table: str, start: int = 0) -> dict[str, np.ndarray]:
        """Return every column of ``table`` from row ``start`` on."""
        return {column: self.column(table, column, start) for column in TABLES[table]}

    def metric_values(self, name: str, start: int = 0) -> np.ndarray:
        """Return the values of metric ``name`` (NaN where a row did not report it)."""
        n = int(self.state["lengths"]["metrics"])
        if name not in self.state["metric_names"] or start >= n:
            return np.full(max(n - start, 0), math.nan)
        key = self.state["metric_keys"][name]
        return np.asarray(self._read(f"{VALUES}/{key}", start, n, False), dtype="f8")
