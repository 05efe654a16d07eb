"""A journal kept in memory, with the writer's interface: the simulator's controller writes it.

Rows are appended and committed as :class:`~hpctune.journal.store.JournalWriter` does, without
files; the committed rows stay readable (``log``, ``checkpoints``, ``metrics``) for the
simulator's results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hpctune.journal.store import TABLES


class MemoryJournal:
    """Buffer rows, then commit them (to lists) — :class:`JournalWriter`'s interface."""

    def __init__(self) -> None:
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


__all__ = ["MemoryJournal"]
