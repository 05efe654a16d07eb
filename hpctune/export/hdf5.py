"""A whole study as one self-describing HDF5 file, and reading it back with the read API.

Layout (``docs/journal.md``): the root's attributes say what the file is (``format =
"hpctune.study"``, ``version``, the study's name, directory, metric and mode); ``/journal`` holds
the journal's tables as they were committed (``log``, ``checkpoints``, ``metrics`` and one
dataset per metric under ``metrics/values``, named by index with the metric's name as an
attribute), so :func:`hpctune.open_study` rebuilds exactly the same study from the file;
``/trials`` holds one row per trial (for tools that do not speak hpctune) and
``/curves/<i>`` one ``[trials, max_steps]`` array per metric (valid rows only, NaN where a
trial did not report that step).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from hpctune import __version__
from hpctune.errors import JournalError
from hpctune.files import atomic_path
from hpctune.journal.best import peak_value
from hpctune.journal.store import TABLES

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader

FORMAT = "hpctune.study"
VERSION = 1
_STR = h5py.string_dtype("utf-8")


def write_hdf5(study: StudyReader, out: Path) -> Path:
    """Write ``study`` to the HDF5 file ``out`` (through a temporary name, then renamed)."""
    out = Path(out)
    reader = study.journal
    with atomic_path(out) as tmp, h5py.File(tmp, "w") as f:
        f.attrs.update(
            {
                "format": FORMAT,
                "version": VERSION,
                "hpctune_version": __version__,
                "exported": time.time(),
                "study": str(study.spec.get("name", "")),
                "directory": str(study.directory),
                "metric": study.metric,
                "mode": study.mode,
                "spec": json.dumps(study.spec),
            }
        )
        journal = f.create_group("journal")
        journal.attrs["cursors"] = json.dumps(reader.cursors)
        for table_name, table_columns in TABLES.items():
            group = journal.create_group(table_name)
            for column, (kind, _) in table_columns.items():
                _dataset(group, column, reader.column(table_name, column), kind)
        values = journal.create_group("metrics/values")
        for i, name in enumerate(reader.metric_names):
            ds = values.create_dataset(f"{i:04d}", data=reader.metric_values(name))
            ds.attrs["name"] = name
        trials = f.create_group("trials")
        rows = study.trials
        trial_columns: dict[str, tuple[list[Any], str]] = {
            "id": ([t.trial_id for t in rows], "i8"),
            "status": ([t.status.value for t in rows], "str"),
            "step": ([t.step for t in rows], "i8"),
            "last": ([t.curve_values[-1] if t.curve_values else math.nan for t in rows], "f8"),
            "best": ([peak_value(study.record, t)[0] for t in rows], "f8"),
            "parent": ([-1 if t.parent_trial is None else t.parent_trial for t in rows], "i8"),
            "parent_step": ([t.parent_step or 0 for t in rows], "i8"),
            "generation": ([-1 if t.generation is None else t.generation for t in rows], "i8"),
            "params": ([json.dumps(t.params) for t in rows], "str"),
            "reason": ([t.reason for t in rows], "str"),
        }
        for name, (data, kind) in trial_columns.items():
            _dataset(trials, name, np.asarray(data, dtype=object if kind == "str" else kind), kind)
        curves = f.create_group("curves")
        max_steps = int(study.spec.get("max_steps", 0) or 0)
        ids = {t.trial_id: i for i, t in enumerate(rows)}
        reports = study.metric_rows()
        row_of = np.full(int(reports["trial"].max(initial=0)) + 1, -1)
        for tid, i in ids.items():
            if tid < len(row_of):
                row_of[tid] = i
        for i, name in enumerate(study.metric_names()):
            grid = np.full((len(rows), max_steps), math.nan)
            step = reports["step"]
            where = row_of[reports["trial"]] if len(reports["trial"]) else step
            ok = (where >= 0) & (step >= 1) & (step <= max_steps) & ~np.isnan(reports[name])
            grid[where[ok], step[ok] - 1] = reports[name][ok]
            if name == study.metric:  # stage-tree trials inherit their prefix
                for t in rows:
                    for s, value in zip(t.curve_steps, t.curve_values, strict=True):
                        if 1 <= s <= max_steps:
                            grid[ids[t.trial_id], s - 1] = value
            ds = curves.create_dataset(f"{i:04d}", data=grid, compression="gzip")
            ds.attrs["name"] = name
            ds.attrs["axes"] = "trial (row of /trials), step - 1"
    return out


def _dataset(group: h5py.Group, name: str, data: np.ndarray, kind: str) -> None:
    if kind == "str":
        group.create_dataset(name, data=np.asarray([str(v) for v in data], dtype=_STR))
    else:
        group.create_dataset(name, data=np.asarray(data, dtype=kind))


def is_hdf5_export(path: Path) -> bool:
    """True if ``path`` is a file that starts with the HDF5 signature."""
    try:
        with open(path, "rb") as f:
            return f.read(8) == b"\x89HDF\r\n\x1a\n"
    except OSError:
        return False


class Hdf5Journal:
    """The journal tables of an HDF5 export, with :class:`JournalReader`'s reading methods.

    Args:
        path: The ``.h5`` file written by :func:`write_hdf5`.

    Raises:
        JournalError: The file is not an hpctune study export, or of a newer version.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            with h5py.File(self.path, "r") as f:
                attrs = dict(f.attrs)
                if attrs.get("format") != FORMAT:
                    raise JournalError(
                        f"{self.path} is an HDF5 file but not a study written by `hpctune "
                        "export --format hdf5`"
                    )
                if int(attrs.get("version", 0)) > VERSION:
                    raise JournalError(
                        f"{self.path} has export version {attrs['version']}, newer than this "
                        f"hpctune ({VERSION}); upgrade hpctune to read it"
                    )
                self.attrs = attrs
                self._columns = {
                    table: {
                        column: _read(f[f"journal/{table}/{column}"]) for column in TABLES[table]
                    }
                    for table in TABLES
                }
                self._cursors = json.loads(f["journal"].attrs.get("cursors", "{}"))
                values = f["journal/metrics/values"]
                self._values = {
                    str(values[key].attrs["name"]): np.asarray(values[key][...], dtype="f8")
                    for key in sorted(values)
                }
        except OSError as exc:
            raise JournalError(f"cannot read {self.path}: {exc}") from None

    @property
    def directory(self) -> Path:
        """The study directory the file was exported from."""
        return Path(str(self.attrs["directory"]))

    @property
    def lengths(self) -> dict[str, int]:
        """Row count of each table."""
        return {t: len(next(iter(c.values()))) for t, c in self._columns.items()}

    @property
    def metric_names(self) -> list[str]:
        """Names of the metric columns."""
        return list(self._values)

    @property
    def cursors(self) -> dict[str, int]:
        """Event-file offsets as of the export."""
        return dict(self._cursors)

    def column(self, table: str, column: str, start: int = 0) -> np.ndarray:
        """Rows ``start:`` of one column (strings as an object array)."""
        return self._columns[table][column][start:]

    def table(self, table: str, start: int = 0) -> dict[str, np.ndarray]:
        """Every column of ``table`` from row ``start`` on."""
        return {column: self.column(table, column, start) for column in TABLES[table]}

    def metric_values(self, name: str, start: int = 0) -> np.ndarray:
        """The values of metric ``name`` (NaN where a row did not report it)."""
        n = self.lengths["metrics"]
        if name not in self._values:
            return np.full(max(n - start, 0), math.nan)
        return self._values[name][start:]


def _read(ds: Any) -> np.ndarray:
    data = ds[...]
    if data.dtype.kind in "OSU":
        return np.asarray(
            [v.decode() if isinstance(v, bytes) else str(v) for v in data], dtype=object
        )
    return np.asarray(data)


__all__ = ["FORMAT", "VERSION", "Hdf5Journal", "is_hdf5_export", "write_hdf5"]
