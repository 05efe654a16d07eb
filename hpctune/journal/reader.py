"""Read a study from its journal: offline, read-only, also while the study runs.

The fold of the log (:func:`load_state`), the metric rows and their valid rows, and
:class:`StudyReader`, which the public :class:`hpctune.Study` (:mod:`hpctune.api`) builds on.

>>> study = open_study("runs/digits-20261122-101500")       # doctest: +SKIP
>>> best = study.best_trial()                                 # doctest: +SKIP
>>> best.params, best.value, best.step, best.checkpoint       # doctest: +SKIP
>>> steps, values = study.curve(3)                           # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from hpctune.errors import JournalError, UnknownNameError
from hpctune.journal.best import BestTrial, describe_best, peak_value
from hpctune.journal.checkpoints import ReadRows
from hpctune.journal.curve_rows import valid_rows
from hpctune.journal.entities import TrialRecord
from hpctune.journal.epochs import JOURNAL_DIR, current_journal
from hpctune.journal.state import (
    CHECKPOINT_DELETED,
    LOG_KINDS,
    StudyRecord,
    decode_data,
    inherit_prefix_curves,
)
from hpctune.journal.store import DAMAGED_HINT, FORMAT_MINOR, FORMAT_VERSION, JournalReader
from hpctune.study.states import Mode, as_mode

if TYPE_CHECKING:
    import pandas as pd

    from hpctune.journal.best import BestTrial


class JournalTables(Protocol):
    """What replaying a journal reads: the zarr journal (:class:`JournalReader`), an HDF5 export
    or the simulator's :class:`~hpctune.journal.memory.MemoryJournal`."""

    path: Path

    @property
    def metric_names(self) -> list[str]:
        """Every metric name reported."""

    @property
    def cursors(self) -> dict[str, int]:
        """The committed byte cursor of every open event file."""

    def table(self, table: str, start: int = 0) -> dict[str, np.ndarray]:
        """The committed rows of ``table`` from ``start``, by column."""

    def column(self, table: str, column: str, start: int = 0) -> np.ndarray:
        """One column of ``table`` from ``start``."""

    def metric_values(self, name: str, start: int = 0) -> np.ndarray:
        """The values of the metric ``name`` in the metrics table, NaN where not reported."""


__all__ = [
    "JOURNAL_DIR",
    "Curve",
    "JournalTables",
    "MetricRows",
    "StudyReader",
    "load_state",
    "read_spec",
    "read_study",
]


class MetricRows:
    """The metrics table of one snapshot, read once: columns, valid rows, rows by trial.

    Args:
        reader: The journal snapshot.
        record: Its study state (whose segments decide which rows are valid).
    """

    def __init__(self, reader: JournalTables, record: StudyRecord) -> None:
        self._reader = reader
        self.trial = reader.column("metrics", "trial")
        self.segment = reader.column("metrics", "segment")
        self.step = reader.column("metrics", "step")
        self.time = reader.column("metrics", "time")
        self.valid = valid_rows(self.segment, self.step, record.segments)
        index = np.flatnonzero(self.valid)
        # the valid rows by trial, each trial's in row (= step) order
        self.order = index[np.argsort(self.trial[index], kind="stable")]
        self._trials, self._starts = np.unique(self.trial[self.order], return_index=True)
        groups = np.split(self.order, self._starts[1:]) if len(self.order) else []
        self.by_trial: dict[int, np.ndarray] = {
            int(t): rows for t, rows in zip(self._trials, groups, strict=True)
        }
        self._values: dict[str, np.ndarray] = {}

    def last_steps(self) -> dict[int, int]:
        """Each trial's highest step among its valid rows."""
        if not len(self.order):
            return {}
        highest = np.maximum.reduceat(self.step[self.order], self._starts)
        return dict(zip(self._trials.tolist(), highest.tolist(), strict=True))

    def _rows_with(self, metric: str) -> np.ndarray:
        """The valid rows that hold a value of ``metric``, by trial, each trial's in step order."""
        rows: np.ndarray = self.order[~np.isnan(self.values(metric)[self.order])]
        return rows

    def curves(self, metric: str) -> dict[int, tuple[list[int], list[float], list[float]]]:
        """Every trial's curve of ``metric`` (steps, values, times; valid rows with a value, in
        step order), for trials with at least one: one pass over the table, not one a trial."""
        rows = self._rows_with(metric)
        if not len(rows):
            return {}
        trials, starts = np.unique(self.trial[rows], return_index=True)
        steps, times = self.step[rows].tolist(), self.time[rows].tolist()
        values = self.values(metric)[rows].tolist()
        ends = [*starts[1:].tolist(), len(rows)]
        return {
            t: (steps[a:b], values[a:b], times[a:b])
            for t, a, b in zip(trials.tolist(), starts.tolist(), ends, strict=True)
        }

    def last_values(self, metric: str) -> dict[int, float]:
        """Each trial's last value of ``metric`` (valid rows), for trials with one."""
        rows = self._rows_with(metric)
        if not len(rows):
            return {}
        trials = self.trial[rows]
        last = np.flatnonzero(np.append(trials[1:] != trials[:-1], True))
        values = self.values(metric)[rows[last]]
        return dict(zip(trials[last].tolist(), values.tolist(), strict=True))

    def values(self, metric: str) -> np.ndarray:
        """All rows of one metric (NaN where not reported), read once."""
        if metric not in self._values:
            self._values[metric] = self._reader.metric_values(metric)
        return self._values[metric]

    def curve_rows(self, trial_id: int, metric: str) -> np.ndarray:
        """The valid rows of a trial that hold a value of ``metric``, in step order (one trial's
        :meth:`_rows_with`)."""
        rows = self.by_trial.get(trial_id, np.zeros(0, dtype=np.int64))
        valid: np.ndarray = rows[~np.isnan(self.values(metric)[rows])]
        return valid


def read_spec(journal: Path) -> dict[str, Any]:
    """The study spec (JSON form) from a journal's first log record, reading nothing else.

    Raises:
        JournalError: The journal is missing or damaged, or its first record holds no spec.
    """
    reader = JournalReader(journal)
    first = reader.column("log", "data", 0, 1)
    data = decode_data(str(first[0])) if len(first) else {}
    spec = data.get("spec")
    if not isinstance(spec, dict):
        raise JournalError(
            f"{reader.path}: its first log record holds no study spec: {DAMAGED_HINT}"
        )
    return spec


def load_state(reader: JournalTables) -> StudyRecord:
    """Rebuild a :class:`StudyRecord` from one journal snapshot (log, checkpoints, metrics)."""
    return _load(reader)[0]


def _load(reader: JournalTables) -> tuple[StudyRecord, MetricRows]:
    record = StudyRecord()
    trial = reader.column("checkpoints", "trial")
    record.checkpoints.load(trial, _checkpoint_rows(reader))
    log = reader.table("log")
    kinds, trials, segments, times = (
        log[c].tolist() for c in ("kind", "trial", "segment", "time")
    )
    texts = log["data"].tolist()
    _check_kinds(reader, kinds)
    # a run of checkpoint deletions (a study with a checkpoint per step journals one a step)
    # is applied as one deletion of all its rows: the same state, without a record each
    batched = (log["kind"] == CHECKPOINT_DELETED) & (log["trial"] < 0)
    datas = _decode_all([t for t, b in zip(texts, batched.tolist(), strict=True) if not b])
    singles = iter(datas)
    for start, end, in_run in _runs(batched):
        deleted = _deleted_rows(texts[start:end]) if in_run else None
        if deleted is not None:
            run = {"rows": deleted}
            _apply(reader, record, start, kinds[start], -1, -1, times[end - 1], run, "")
            record.checkpoint_changes += end - start - 1  # one change a record, as one by one
            continue
        for row in range(start, end):  # (a run of another form: its records one by one)
            data = None if in_run else next(singles)
            _apply(reader, record, row, kinds[row], trials[row], segments[row], times[row],
                   data, texts[row])  # fmt: skip
    for trial_id, row in record.checkpoints.latest_live().items():
        if trial_id in record.trials:
            record.hold_checkpoint(record.trials[trial_id], row)
    metrics = MetricRows(reader, record)
    curves = metrics.curves(record.metric)
    for trial_id, step in metrics.last_steps().items():
        tr = record.trials.get(trial_id)
        if tr is None:
            continue
        tr.step = max(tr.step, step)
        tr.curve_steps, tr.curve_values, tr.curve_times = curves.get(trial_id, ([], [], []))
    inherit_prefix_curves(record)
    for name in reader.metric_names if record.trials else []:
        for trial_id, value in metrics.last_values(name).items():
            tr = record.trials.get(trial_id)
            if tr is not None:
                tr.last_metrics[name] = value
    return record, metrics


def _check_kinds(reader: JournalTables, kinds: list[Any]) -> None:
    """Refuse a log record of a kind no hpctune of the journal's format writes.

    Only a journal whose minor version registers its kinds (1 on) and is not newer than this
    hpctune's is checked: a newer one may hold kinds added since (replay skips them).

    Raises:
        JournalError: Naming the first such row and its kind.
    """
    minor = getattr(reader, "format_minor", 0)
    if not 1 <= minor <= FORMAT_MINOR:
        return
    unknown = set(kinds) - set(LOG_KINDS)
    if unknown:
        row = next(i for i, kind in enumerate(kinds) if kind in unknown)
        raise JournalError(
            f"{reader.path}: log row {row} has kind {kinds[row]!r}, which no hpctune of this "
            f"journal's format ({FORMAT_VERSION}.{minor}) writes: {DAMAGED_HINT}"
        )


def _checkpoint_rows(reader: JournalTables) -> ReadRows:
    """How to read rows ``start:end`` of a checkpoints column when they are first needed. A
    study open for long may see its snapshot's journal directory pruned (two controller epochs
    later): then from the study's current journal, whose first rows are these (rows are only
    appended). Journals in memory (the simulator's, an HDF5 export) give whole columns."""
    if not isinstance(reader, JournalReader):
        columns: dict[str, np.ndarray] = {}

        def from_memory(name: str, start: int, end: int) -> np.ndarray:
            if name not in columns:
                columns[name] = reader.column("checkpoints", name)
            return columns[name][start:end]

        return from_memory

    def from_files(name: str, start: int, end: int) -> np.ndarray:
        try:
            return reader.column("checkpoints", name, start, end)
        except JournalError:
            later = JournalReader(current_journal(reader.path.parent))
            return later.column("checkpoints", name, start, end)

    return from_files


def _apply(
    reader: JournalTables,
    record: StudyRecord,
    row: int,
    kind: Any,
    trial: Any,
    segment: Any,
    time: Any,
    data: dict[str, Any] | None,
    text: Any,
) -> None:
    """Apply log row ``row`` to the record (``data``: its decoded ``text``, or ``None`` to
    decode it here), naming the row if it does not decode or does not fit."""
    try:
        if data is None:
            data = decode_data(str(text))
        record.apply(str(kind), int(trial), int(segment), float(time), data)
    except JournalError as exc:  # a record missing a key, or one of the wrong type
        raise JournalError(
            f"{reader.path}: log row {row} ({kind!r}): {exc}: {DAMAGED_HINT}"
        ) from exc
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise JournalError(
            f"{reader.path}: log row {row} ({kind!r}) does not fit the rows before it "
            f"({type(exc).__name__}: {exc}): {DAMAGED_HINT}"
        ) from exc


def _runs(flags: np.ndarray) -> Iterator[tuple[int, int, bool]]:
    """The runs of equal values of a boolean array: ``(start, end, value)``."""
    if not len(flags):
        return
    edges = np.flatnonzero(flags[1:] != flags[:-1]) + 1
    starts = [0, *edges.tolist()]
    ends = [*edges.tolist(), len(flags)]
    for start, end in zip(starts, ends, strict=True):
        yield start, end, bool(flags[start])


_ROWS_PREFIX, _ROWS_SUFFIX = '{"rows":[', "]}"
_ROW_LIST = re.compile(r"[0-9]+(,[0-9]+)*")


def _deleted_rows(texts: list[Any]) -> list[int] | None:
    """The rows of a run of deletion records, in one parse of their joined lists; ``None``
    unless each is ``{"rows":[...]}`` with integers, as the controller writes them."""
    joined = "".join(map(str, texts))
    if joined.startswith(_ROWS_PREFIX) and joined.endswith(_ROWS_SUFFIX):
        body = joined[len(_ROWS_PREFIX) : -len(_ROWS_SUFFIX)]
        flat = body.replace(_ROWS_SUFFIX + _ROWS_PREFIX, ",")
        if _ROW_LIST.fullmatch(flat):  # integers only: the parse below cannot fail
            return list(json.loads("[" + flat + "]"))
    return None


def _decode_all(texts: list[Any]) -> list[Any]:
    """The log's ``data`` column decoded in one pass (one JSON array: a million small records
    cost one parse, not a million); a column that does not parse as a whole gives ``None``
    for every row, which is then decoded alone (and a damaged row named)."""
    try:
        decoded = json.loads("[" + ",".join(str(t) or "{}" for t in texts) + "]")
    except ValueError:
        return [None] * len(texts)
    if len(decoded) != len(texts) or not all(isinstance(d, dict) for d in decoded):
        return [None] * len(texts)
    return list(decoded)


@dataclass(frozen=True)
class Curve:
    """A trial's learning curve of one metric (valid rows only, in step order)."""

    steps: np.ndarray
    values: np.ndarray
    times: np.ndarray

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.steps, self.values))

    def __len__(self) -> int:
        return len(self.steps)


class StudyReader:
    """A read-only view of a study, as of the journal's last commit: its trials, curves and
    reports (the public :class:`hpctune.Study` adds the rest, :mod:`hpctune.api`).

    Args:
        directory: The study directory (holding ``journal.zarr``); with ``tables``, the
            directory the study ran in (checkpoint paths point into it).
        tables: The journal's tables when they come from elsewhere (an HDF5 export); ``None``:
            the study directory's current journal.
    """

    def __init__(self, directory: str | Path, tables: JournalTables | None = None) -> None:
        self.directory = Path(directory).resolve()
        self._reader: JournalTables
        if tables is None:
            self._reader, self.record, self._metrics = _open_directory(self.directory)
        else:
            self._reader = tables
            self.record, self._metrics = _load(tables)

    @property
    def journal(self) -> JournalTables:
        """The journal snapshot this view was read from (its tables, as committed)."""
        return self._reader

    @property
    def spec(self) -> dict[str, Any]:
        """The study spec as launched (JSON form)."""
        return self.record.spec

    @property
    def metric(self) -> str:
        """The name of the metric the study optimises."""
        return self.record.metric

    @property
    def mode(self) -> Mode:
        """``"max"`` or ``"min"``."""
        return as_mode(self.record.spec.get("mode", "max"))

    @property
    def trials(self) -> list[TrialRecord]:
        """All trials, by id."""
        return [self.record.trials[k] for k in sorted(self.record.trials)]

    def trial(self, trial_id: int) -> TrialRecord:
        """Return one trial.

        Raises:
            UnknownNameError: (a ``KeyError``) no such trial; the message names the known ids.
        """
        try:
            return self.record.trials[trial_id]
        except (KeyError, TypeError):
            known = f"0..{len(self.trials) - 1}" if self.trials else "none yet"
            raise UnknownNameError(
                f"no trial {trial_id!r} in {self.directory}; its trials are {known}"
            ) from None

    def _check_metric(self, metric: str) -> None:
        if metric != self.metric and metric not in self.metric_names():
            names = ", ".join(sorted({self.metric, *self.metric_names()}))
            raise UnknownNameError(
                f"no metric {metric!r} in {self.directory}; its metrics are {names}"
            )

    def metric_names(self) -> list[str]:
        """Every metric name reported in the study."""
        return self._reader.metric_names

    def curve(self, trial_id: int, metric: str | None = None) -> Curve:
        """Return the curve of ``metric`` (default: the study's) for one trial.

        A stage-tree trial that went on from another trial's checkpoint has that trial's curve
        up to the step it went on from (``lineage``), then its own.
        """
        tr = self.trial(trial_id)
        metric = metric or self.metric
        self._check_metric(metric)
        if metric == self.metric:
            return Curve(
                np.asarray(tr.curve_steps, dtype=np.int64),
                np.asarray(tr.curve_values, dtype=float),
                np.asarray(tr.curve_times, dtype=float),
            )
        rows = self._metrics.curve_rows(trial_id, metric)
        m = self._metrics
        own = Curve(m.step[rows], m.values(metric)[rows], m.time[rows])
        if not tr.shares_prefix or tr.parent_trial is None or tr.parent_trial == trial_id:
            return own
        parent, at = self.curve(tr.parent_trial, metric), int(tr.parent_step or 0)
        keep, mine = parent.steps <= at, own.steps > at
        return Curve(
            np.concatenate([parent.steps[keep], own.steps[mine]]),
            np.concatenate([parent.values[keep], own.values[mine]]),
            np.concatenate([parent.times[keep], own.times[mine]]),
        )

    def best_value(self, trial_id: int) -> float:
        """The best value of the study metric a trial reached at any step (NaN if none)."""
        return peak_value(self.record, self.trial(trial_id))[0]

    def best_trial(self) -> BestTrial | None:
        """The study's best trial, or ``None`` while no trial has completed.

        Only completed trials that trained to ``max_steps`` count; a trial's value follows the
        study's ``[study] best`` rule (``"peak"``: its best step, ``"last"``: its last). The
        result has ``trial_id``, ``params``, ``value``, ``step``, ``mode`` and ``checkpoint``
        (the file with the model at ``step``, or ``None`` when none was saved or kept there).
        """
        return describe_best(self.record, self.directory)

    def checkpoint_path(self, trial_id: int) -> Path | None:
        """The file of a trial's latest checkpoint, or ``None``."""
        row = self.trial(trial_id).checkpoint_row
        return None if row is None else self.directory / self.record.checkpoints[row].path

    def counts(self) -> dict[str, int]:
        """Number of trials in each status."""
        return self.record.counts()

    def is_done(self) -> bool:
        """True when every trial is in a final state and the study has ended."""
        return all(t.status.is_final for t in self.trials) and self.record.state.value in (
            "finished",
            "failed",
        )

    def trials_frame(self) -> pd.DataFrame:
        """One row per trial (needs pandas): id, status, steps, last and best value, params."""
        import pandas as pd

        rows = []
        for tr in self.trials:
            row: dict[str, Any] = {
                "trial": tr.trial_id,
                "status": tr.status.value,
                "step": tr.step,
                "last": tr.curve_values[-1] if tr.curve_values else math.nan,
                "best": self.best_value(tr.trial_id),
                "parent": tr.parent_trial,
                "parent_step": tr.parent_step,
                "generation": tr.generation,
                "initiator": tr.initiator,
                "missing_rows": tr.missing_rows,
            }
            row.update({f"param.{k}": v for k, v in tr.params.items()})
            rows.append(row)
        return pd.DataFrame(rows)

    def metric_rows(self) -> dict[str, np.ndarray]:
        """Every valid report as columns: ``trial``, ``segment``, ``step``, ``time`` and one
        column per metric (NaN where a report did not hold it), in journal order."""
        m = self._metrics
        data: dict[str, np.ndarray] = {
            "trial": m.trial[m.valid],
            "segment": m.segment[m.valid],
            "step": m.step[m.valid],
            "time": m.time[m.valid],
        }
        for name in self.metric_names():
            data[name] = m.values(name)[m.valid]
        return data

    def metrics_frame(self) -> pd.DataFrame:
        """One row per valid report (needs pandas): trial, segment, step, time and every metric."""
        import pandas as pd

        return pd.DataFrame(self.metric_rows())


def _open_directory(directory: Path) -> tuple[JournalReader, StudyRecord, MetricRows]:
    """Read the current journal of a study directory (again, if a new controller deleted it
    while it was read)."""
    for attempt in range(3):
        journal = current_journal(directory)
        if not journal.exists():
            raise JournalError(
                f"{directory} is not a study directory (no {JOURNAL_DIR} in it); "
                "give the directory `hpctune launch` printed"
            )
        try:
            reader = JournalReader(journal)
            return (reader, *_load(reader))
        except (JournalError, FileNotFoundError):
            if attempt == 2 or current_journal(directory) == journal:
                raise
    raise AssertionError("unreachable")


def read_study(directory: str | Path) -> StudyReader:
    """Read a study directory's journal (safe while its controller runs)."""
    return StudyReader(directory)
