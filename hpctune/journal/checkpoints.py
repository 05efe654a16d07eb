"""The study's checkpoints by journal row: :class:`CheckpointRef` and the :class:`CheckpointTable`.

A study with a checkpoint per step holds a million checkpoint rows at 10,000 trials x 100 steps,
nearly all of them deleted. Opening it must not build a million objects: the rows read from a
journal snapshot stay in their columns (:meth:`CheckpointTable.load`: the ``trial`` column at
once, the others when first needed) and a row becomes a :class:`CheckpointRef` when something
asks for it; rows added later (the controller's) are references from the start. The table is a
mapping like the ``dict`` it replaces; what touches every row (which rows are live, each trial's
latest live row, the largest size) is answered from the columns without building references.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# the checkpoints table's columns, as a journal snapshot holds them
COLUMNS = ("trial", "segment", "step", "time", "nbytes", "sha256", "path")
# rows read together when one row of a column not yet read is asked for (the journal's chunk)
BLOCK = 2048
# blocks of a column read one by one before the whole column is read instead (a controller's
# first pass asks for every trial's latest checkpoint: rows spread over the whole table)
BLOCKS_BEFORE_WHOLE = 8
# reads rows ``start:end`` of a column of the snapshot: ``read(column, start, end)``
ReadRows = Callable[[str, int, int], np.ndarray]


@dataclass
class CheckpointRef:
    """A checkpoint known to the journal (a row of the ``checkpoints`` table)."""

    row: int
    trial_id: int
    segment_id: int
    step: int
    time: float
    nbytes: int
    sha256: str
    path: str  # relative to the study directory
    deleted: bool = False


class CheckpointTable(MutableMapping[int, CheckpointRef]):
    """Checkpoint references by row; rows ``0 .. loaded-1`` come from a snapshot's columns.

    Deleting a checkpoint goes through :meth:`mark_deleted` (the one place ``deleted`` is set),
    so the columns' deletion marks and the references made from them agree.
    """

    def __init__(self) -> None:
        self._refs: dict[int, CheckpointRef] = {}  # rows made references, and rows added
        self._columns: dict[str, np.ndarray] = {name: np.zeros(0, np.int64) for name in COLUMNS}
        self._blocks: dict[tuple[str, int], np.ndarray] = {}  # (column, block) -> its rows
        self._block_reads: dict[str, int] = {}  # blocks read of each column
        self._read: ReadRows | None = None
        self._loaded = 0  # rows held in the columns
        self._deleted = np.zeros(0, dtype=bool)  # the columns' rows deleted

    def load(self, trial: np.ndarray, read: ReadRows) -> None:
        """Hold a snapshot's rows ``0 .. n-1``, before any other row: their ``trial`` column,
        and how to read rows ``start:end`` of another column (:data:`COLUMNS`) when needed."""
        if self._refs or self._loaded:
            raise RuntimeError("a checkpoint table loads its snapshot rows before any other")
        self._columns = {"trial": np.asarray(trial)}
        self._read = read
        self._loaded = len(trial)
        self._deleted = np.zeros(self._loaded, dtype=bool)

    def _rows(self, name: str, start: int, end: int) -> np.ndarray:
        assert self._read is not None
        rows = np.asarray(self._read(name, start, end))
        if len(rows) != end - start:
            raise ValueError(f"checkpoints column {name!r}: rows {start}:{end} not all there")
        return rows

    def _column(self, name: str) -> np.ndarray:
        """A whole column (for answers about every row; its blocks are then dropped)."""
        if name not in self._columns:
            self._columns[name] = self._rows(name, 0, self._loaded)
            self._blocks = {key: rows for key, rows in self._blocks.items() if key[0] != name}
        return self._columns[name]

    def _value(self, name: str, row: int) -> Any:
        """One row's value: from the whole column if read, else from its block of rows."""
        column = self._columns.get(name)
        if column is None and self._block_reads.get(name, 0) >= BLOCKS_BEFORE_WHOLE:
            column = self._column(name)
        if column is not None:
            return column[row]
        block = row // BLOCK
        rows = self._blocks.get((name, block))
        if rows is None:
            start = block * BLOCK
            rows = self._blocks[name, block] = self._rows(
                name, start, min(start + BLOCK, self._loaded)
            )
            self._block_reads[name] = self._block_reads.get(name, 0) + 1
        return rows[row - block * BLOCK]

    def _is_loaded(self, row: object) -> bool:
        return isinstance(row, (int, np.integer)) and 0 <= int(row) < self._loaded

    def _make(self, row: int) -> CheckpointRef:
        v = self._value
        ref = CheckpointRef(
            row, int(v("trial", row)), int(v("segment", row)), int(v("step", row)),
            float(v("time", row)), int(v("nbytes", row)), str(v("sha256", row)),
            str(v("path", row)), bool(self._deleted[row]),
        )  # fmt: skip
        self._refs[row] = ref
        return ref

    # -- the mapping -------------------------------------------------------------------------

    def __getitem__(self, row: int) -> CheckpointRef:
        ref = self._refs.get(row)
        if ref is not None:
            return ref
        if self._is_loaded(row):
            return self._make(int(row))
        raise KeyError(row)

    def __setitem__(self, row: int, ref: CheckpointRef) -> None:
        if self._is_loaded(row):
            self._deleted[row] = ref.deleted
        self._refs[row] = ref

    def __delitem__(self, row: int) -> None:
        raise TypeError("journal checkpoint rows are never removed; mark them deleted")

    def __contains__(self, row: object) -> bool:
        return row in self._refs or self._is_loaded(row)

    def __iter__(self) -> Iterator[int]:
        yield from range(self._loaded)
        yield from (ref.row for ref in self._added())

    def __len__(self) -> int:
        return self._loaded + len(self._added())

    def _added(self) -> list[CheckpointRef]:
        """The rows added after the snapshot (the controller's), by row."""
        return [self._refs[row] for row in sorted(self._refs) if row >= self._loaded]

    def __repr__(self) -> str:
        return f"CheckpointTable({len(self)} rows)"

    # -- what touches every row, from the columns --------------------------------------------

    def mark_deleted(self, rows: Sequence[int]) -> dict[int, int]:
        """Mark rows deleted (rows unknown are skipped); return the trial of each row marked.
        Rows still in the columns are marked there, without becoming references."""
        wanted = np.asarray(rows, dtype=np.int64).reshape(-1)
        loaded = wanted[(wanted >= 0) & (wanted < self._loaded)]
        self._deleted[loaded] = True
        loaded_rows = loaded.tolist()
        marked = dict(zip(loaded_rows, self._columns["trial"][loaded].tolist(), strict=True))
        for row in self._refs.keys() & loaded_rows:  # references made of the columns' rows
            self._refs[row].deleted = True
        for row in wanted[wanted >= self._loaded].tolist():
            ref = self._refs.get(row)
            if ref is not None:
                ref.deleted = True
                marked[row] = ref.trial_id
        return marked

    def live(self) -> Iterator[CheckpointRef]:
        """The checkpoints not deleted, by row (only these become references)."""
        for row in np.flatnonzero(~self._deleted).tolist():
            yield self[row]  # (its mark and its reference's agree: mark_deleted sets both)
        yield from (ref for ref in self._added() if not ref.deleted)

    def step(self, row: int) -> int:
        """A known row's step, reading only the ``step`` column (views ask it of every trial)."""
        ref = self._refs.get(row)
        if ref is not None:
            return ref.step
        if not self._is_loaded(row):
            raise KeyError(row)
        return int(self._value("step", int(row)))

    def is_deleted(self, row: int) -> bool:
        """Whether a known row is deleted."""
        ref = self._refs.get(row)
        return ref.deleted if ref is not None else bool(self._deleted[row])

    def live_rows_by_trial(self) -> dict[int, set[int]]:
        """The rows not deleted, by trial."""
        live: dict[int, set[int]] = {}
        rows = np.flatnonzero(~self._deleted)
        for row, trial in zip(rows.tolist(), self._columns["trial"][rows].tolist(), strict=True):
            live.setdefault(trial, set()).add(row)
        for ref in self._added():
            if not ref.deleted:
                live.setdefault(ref.trial_id, set()).add(ref.row)
        return live

    def latest_live(self) -> dict[int, int]:
        """Each trial's last row that is not deleted (trials with none left out)."""
        return {trial: max(rows) for trial, rows in self.live_rows_by_trial().items()}

    def max_nbytes(self) -> int:
        """The largest checkpoint's size in bytes (0 for none)."""
        loaded = int(self._column("nbytes").max()) if self._loaded else 0
        return max(loaded, max((ref.nbytes for ref in self._added()), default=0))
