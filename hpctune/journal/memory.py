"""A journal kept in memory, with the writer's interface: the simulator's controller writes it.

Rows are appended and committed as :class:`~hpctune.journal.store.JournalWriter` does, without
files; the committed rows stay readable (``log``, ``checkpoints``, ``metrics``) for the
simulator's results, and through :class:`~hpctune.journal.store.JournalReader`'s interface
(``table``, ``column``, ``metric_values``), so that :func:`hpctune.journal.reader.load_state`
rebuilds a study record from it exactly as a restarted controller does from the files.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.journal.store import TABLES


class MemoryJournal:
    """Buffer rows, then commit them (to lists) — :class:`JournalWriter`'s interface."""

    def __init__(self) -> None:
        self.path = Path("<memory>")
        self.before_publish: Callable[[], None] | None = None
        self.rows: dict[str, list[dict[str, Any]]] = {table: [] for table in TABLES}
        self.state: dict[str, Any] = {"commit": 0, "cursors": {}}
        self._pending: dict[str, list[dict[str, Any]]] = {table: [] for table in TABLES}

    @property
    def cursors(self) -> dict[str, int]:
        """Read positions of the event lines, as of the last commit."""
        return dict(self.state["cursors"])

    def next_index(self, table: str) -> int:
        """The row index the next appended row of ``table`` gets."""
        return len(self.rows[table]) + len(self._pending[table])

    def append(self, table: str, **row: Any) -> int:
        """Buffer one row of ``table``; return its index."""
        index = self.next_index(table)
        self._pending[table].append(row)
        return index

    def append_metrics(
        self, trial: int, segment: int, step: int, time_: float, values: Mapping[str, float]
    ) -> int:
        """Buffer one metrics row; return its index."""
        return self.append(
            "metrics", trial=trial, segment=segment, step=step, time=time_, values=dict(values)
        )

    @property
    def has_pending(self) -> bool:
        """True when rows wait for a commit."""
        return any(self._pending.values())

    def commit(self, cursors: Mapping[str, int] | None = None) -> None:
        """Move the buffered rows to the committed ones."""
        if self.before_publish is not None:
            self.before_publish()
        for table, rows in self._pending.items():
            self.rows[table].extend(rows)
            rows.clear()
        if cursors is not None:
            self.state["cursors"] = dict(cursors)
        self.state["commit"] = int(self.state["commit"]) + 1

    # -- JournalReader's interface, over the committed rows ---------------------------------

    @property
    def metric_names(self) -> list[str]:
        """Names of the metrics reported in committed rows, in first-seen order."""
        names: dict[str, None] = {}
        for row in self.rows["metrics"]:
            names.update(dict.fromkeys(row["values"]))
        return list(names)

    def column(self, table: str, column: str, start: int = 0) -> np.ndarray:
        """Rows ``start:`` of one column (strings as an object array)."""
        kind, fill = TABLES[table][column]
        values = [row.get(column, fill) for row in self.rows[table][start:]]
        if kind == "str":
            return np.array(values, dtype=object)
        return np.array(values, dtype=kind if values else "f8")

    def table(self, table: str, start: int = 0) -> dict[str, np.ndarray]:
        """Every column of ``table`` from row ``start`` on."""
        return {column: self.column(table, column, start) for column in TABLES[table]}

    def metric_values(self, name: str, start: int = 0) -> np.ndarray:
        """The values of metric ``name`` (NaN where a row did not report it)."""
        return np.array(
            [row["values"].get(name, math.nan) for row in self.rows["metrics"][start:]],
            dtype="f8",
        )


__all__ = ["MemoryJournal"]
