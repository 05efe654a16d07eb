"""``hpctune compare``: several studies side by side (a table, and best-so-far curves)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpctune.analysis.summary import done_count, total_trials
from hpctune.analysis.timeline import best_so_far, time_to_best
from hpctune.journal.best import describe_best
from hpctune.journal.usage import study_usage
from hpctune.plotting import metric_scale, pyplot
from hpctune.study.formatting import format_duration, format_value

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader


def compare_rows(studies: Sequence[StudyReader]) -> list[dict[str, Any]]:
    """One JSON-able row per study: name, policy, state, trials, best value, its trial and
    step, the time to reach it, allocated hours and the share of them spent training."""
    rows = []
    for study in studies:
        record = study.record
        usage = study_usage(record)
        best = describe_best(record, study.directory)
        seconds = math.nan if best is None else time_to_best(record, best.value)
        gpus = usage.gpus_per_worker
        rows.append(
            {
                "study": str(study.spec.get("name")),
                "directory": str(study.directory),
                "policy": study.spec.get("policy", {}).get("name"),
                "state": record.state.value,
                "metric": study.metric,
                "mode": study.mode,
                "trials_done": done_count(record),
                "trials": total_trials(record),
                "best": None if best is None else best.value,
                "best_trial": None if best is None else best.trial_id,
                "best_step": None if best is None else best.step,
                "time_to_best_s": None if math.isnan(seconds) else seconds,
                "hours": usage.gpu_hours if gpus else usage.cpu_hours,
                "hours_unit": "GPU-h" if gpus else "CPU-h",
                "training_share": 1.0 - usage.not_training_share if usage.allocated_s else None,
            }
        )
    return rows


def compare_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table."""
    header = ["study", "policy", "state", "trials", "best", "trial", "reached after", "hours",
              "training"]  # fmt: skip
    lines = [header]
    for r in rows:
        lines.append(
            [
                r["study"],
                str(r["policy"]),
                r["state"],
                f"{r['trials_done']}/{r['trials']}",
                "-" if r["best"] is None else f"{r['metric']} {format_value(r['best'])}",
                "-" if r["best_trial"] is None else f"{r['best_trial']} (step {r['best_step']})",
                "-" if r["time_to_best_s"] is None else format_duration(r["time_to_best_s"]),
                f"{r['hours']:.3g} {r['hours_unit']}",
                "-" if r["training_share"] is None else f"{100 * r['training_share']:.0f}%",
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def plot_compare(studies: Sequence[StudyReader], out: str | Path) -> Path:
    """Best-so-far curves of the studies against wall-clock minutes and allocated hours."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    values: list[float] = []
    unit = "GPU-h"
    for study in studies:
        curve = best_so_far(study.record)
        unit = curve.unit
        label = f"{study.spec.get('name')} ({study.spec.get('policy', {}).get('name')})"
        axes[0].step(curve.seconds / 60, curve.values, where="post", marker=".", label=label)
        axes[1].step(curve.hours, curve.values, where="post", marker=".", label=label)
        values.extend(curve.values.tolist())
    mode = studies[0].mode if studies else "max"
    for ax, xlabel in zip(
        axes, ("minutes since the study started", f"{unit} allocated"), strict=True
    ):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"best {studies[0].metric if studies else ''} so far")
        metric_scale(ax, values, mode)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = Path(out)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["compare_rows", "compare_table", "plot_compare"]
