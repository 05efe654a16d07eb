"""Two CSV files of a study: one row per trial, one row per metric report."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpctune.files import atomic_path
from hpctune.journal.best import peak_value, trial_value

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader


def trial_rows(study: StudyReader) -> tuple[list[str], list[list[Any]]]:
    """The header and rows of ``trials.csv``: id, status, steps, values, lineage, every
    parameter (schedules as JSON)."""
    names = list(dict.fromkeys(k for t in study.trials for k in t.params))
    metric = study.metric
    header = [
        "trial", "status", "step", f"last_{metric}", f"best_{metric}", "best_step",
        f"value_{metric}", "value_step", "parent", "parent_step", "generation", "retries",
        "reason", *[f"param.{n}" for n in names],
    ]  # fmt: skip
    rows = []
    for t in study.trials:
        best, best_step = peak_value(study.record, t)
        value, value_step = trial_value(study.record, t)
        params = [_cell(t.params.get(n)) for n in names]
        rows.append(
            [
                t.trial_id,
                t.status.value,
                t.step,
                _num(t.curve_values[-1] if t.curve_values else math.nan),
                _num(best),
                best_step,
                _num(value),
                value_step,
                t.parent_trial,
                t.parent_step,
                t.generation,
                t.retries,
                t.reason,
                *params,
            ]
        )
    return header, rows


def _cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def _num(value: float) -> Any:
    return "" if math.isnan(value) else value


def write_csv(study: StudyReader, out: Path) -> list[Path]:
    """Write ``out/trials.csv`` and ``out/metrics.csv`` (valid reports only); return them.

    The folder is built under a temporary name and renamed into place.
    """
    out = Path(out)
    header, rows = trial_rows(study)
    table = study.metric_rows()
    names = list(table)
    columns = [table[n].tolist() for n in names]
    metric_rows = [
        [_num(v) if isinstance(v, float) else v for v in row] for row in zip(*columns, strict=True)
    ]
    with atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        _write(tmp / "trials.csv", header, rows)
        _write(tmp / "metrics.csv", names, metric_rows)
    return [out / "trials.csv", out / "metrics.csv"]


def _write(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(["" if v is None else v for v in row] for row in rows)


__all__ = ["trial_rows", "write_csv"]
