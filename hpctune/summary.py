"""What `hpctune status` and the end of a local run print: tables, the best trial, JSON.

Everything here works from a :class:`~hpctune.journal.state.StudyRecord`, the same fold the
controller acts on and a reader rebuilds from the journal.
"""

from __future__ import annotations

import math
import time
from typing import Any

from hpctune.accounting import study_usage, trial_training_s, trial_wall_s
from hpctune.journal.state import StudyRecord, TrialRecord
from hpctune.schedules import is_schedule_dict
from hpctune.states import TrialStatus

STATUS_JSON_VERSION = 1


def best_value(record: StudyRecord, trial: TrialRecord) -> tuple[float, int | None]:
    """The best finite value of the study metric in a trial's curve, and its step."""
    sign = _sign(record)
    best, at = math.nan, None
    for step, value in zip(trial.curve_steps, trial.curve_values, strict=True):
        if math.isfinite(value) and (math.isnan(best) or sign * value > sign * best):
            best, at = value, step
    return best, at


def best_trial(record: StudyRecord) -> TrialRecord | None:
    """The trial with the best value of the study metric at any step."""
    sign = _sign(record)
    winner: TrialRecord | None = None
    winner_value = -math.inf
    for trial in record.trials.values():
        value, _ = best_value(record, trial)
        if not math.isnan(value) and sign * value > winner_value:
            winner, winner_value = trial, sign * value
    return winner


def _sign(record: StudyRecord) -> float:
    return -1.0 if record.spec.get("mode") == "min" else 1.0


def format_value(value: Any) -> str:
    """Short text for a hyperparameter or metric value."""
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}"
    if is_schedule_dict(value):
        args = ",".join(
            f"{k}={format_value(v)}"
            for k, v in value.items()
            if k != "schedule" and not (k == "integer" and v is False)
        )
        return f"{value['schedule']}({args})"
    return str(value)


def format_params(params: dict[str, Any]) -> str:
    """``name=value`` pairs, short."""
    return " ".join(f"{k}={format_value(v)}" for k, v in params.items())


def trials_table(record: StudyRecord, *, limit: int | None = None) -> str:
    """A text table of the trials: id, status, steps, last and best metric, hyperparameters."""
    metric = record.metric
    max_steps = record.spec.get("max_steps", "?")
    header = ["trial", "status", "steps", f"last {metric}", f"best {metric}", "params"]
    rows = []
    trials = [record.trials[k] for k in sorted(record.trials)]
    if limit is not None:
        trials = trials[-limit:]
    for tr in trials:
        best, _ = best_value(record, tr)
        last = tr.curve_values[-1] if tr.curve_values else math.nan
        status = tr.status.value + (f" ({tr.retries} retries)" if tr.retries else "")
        if tr.missing_rows:
            status += f" with {tr.missing_rows} missing rows"
        rows.append(
            [
                str(tr.trial_id),
                status,
                f"{tr.step}/{max_steps}",
                format_value(last),
                format_value(best),
                format_params(tr.params),
            ]
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def study_line(record: StudyRecord, now: float | None = None) -> str:
    """One line: state, trial counts, best metric so far, elapsed time."""
    now = time.time() if now is None else now
    counts = record.counts()
    total = max(record.spec.get("num_trials", 0), len(record.trials))  # PBT forks add trials
    done = sum(counts[s.value] for s in TrialStatus if s.is_final)
    parts = [
        f"{record.state.value}",
        f"trials {done}/{total} done",
        f"{counts['running']} running",
    ]
    for name in ("queued", "suspended", "ended_early", "failed"):
        if counts[name]:
            parts.append(f"{counts[name]} {name}")
    best = best_trial(record)
    if best is not None:
        value, step = best_value(record, best)
        parts.append(
            f"best {record.metric} {format_value(value)} (trial {best.trial_id}, step {step})"
        )
    elapsed = _elapsed(record, now)
    if elapsed is not None:
        parts.append(f"elapsed {format_duration(elapsed)}")
    return " | ".join(parts)


def usage_line(record: StudyRecord, now: float | None = None) -> str:
    """One line: workers, allocated GPU- or CPU-hours, share spent training, queue wait."""
    usage = study_usage(record, now)
    if usage.gpus_per_worker:
        held = f"{usage.gpu_hours:.3g} GPU-h"
    else:
        held = f"{usage.cpu_hours:.3g} CPU-h"
    training = 100.0 * (1.0 - usage.not_training_share) if usage.allocated_s else 0.0
    return (
        f"usage: {usage.workers} workers, allocated {held} "
        f"({format_duration(usage.allocated_s)}), training {training:.0f}% of it, "
        f"queue wait {format_duration(usage.queue_s)}"
    )


def _elapsed(record: StudyRecord, now: float) -> float | None:
    """Seconds from the study's start to its end (or to ``now`` while it runs)."""
    start = record.started_time or record.created_time
    if not start:
        return None
    return (record.ended_time or now) - start


def format_duration(seconds: float) -> str:
    """``1h02m03s`` style."""
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def best_text(record: StudyRecord) -> str:
    """The best trial and its configuration, for the end of a run."""
    best = best_trial(record)
    if best is None:
        return "no trial reported the study metric yet"
    value, step = best_value(record, best)
    lines = [
        f"best trial: {best.trial_id} ({best.status.value}), {record.metric} = "
        f"{format_value(value)} at step {step}",
        "best configuration:",
    ]
    lines.extend(f"  {k} = {format_value(v)}" for k, v in best.params.items())
    return "\n".join(lines)


def status_json(record: StudyRecord, directory: str, now: float | None = None) -> dict[str, Any]:
    """The documented JSON form of `hpctune status --json` (see docs/cli.md)."""
    trials = []
    for tid in sorted(record.trials):
        tr = record.trials[tid]
        best, best_step = best_value(record, tr)
        trials.append(
            {
                "id": tid,
                "status": tr.status.value,
                "step": tr.step,
                "last": _num(tr.curve_values[-1]) if tr.curve_values else None,
                "best": _num(best),
                "best_step": best_step,
                "params": tr.params,
                "parent": tr.parent_trial,
                "parent_step": tr.parent_step,
                "generation": tr.generation,
                "initiator": tr.initiator,
                "end_step": tr.end_step,
                "retries": tr.retries,
                "missing_rows": tr.missing_rows,
                "segments": len(tr.segments),
                "training_s": trial_training_s(record, tr, now),
                "wall_s": trial_wall_s(record, tr, now),
                "reason": tr.reason,
                "error": tr.error.strip().splitlines()[-1] if tr.error.strip() else None,
            }
        )
    winner = best_trial(record)
    best_entry = None
    if winner is not None:
        value, step = best_value(record, winner)
        best_entry = {
            "id": winner.trial_id,
            "value": _num(value),
            "step": step,
            "params": winner.params,
        }
    return {
        "version": STATUS_JSON_VERSION,
        "study": {
            "name": record.spec.get("name"),
            "directory": directory,
            "state": record.state.value,
            "reason": record.reason,
            "metric": record.metric,
            "mode": record.spec.get("mode"),
            "max_steps": record.spec.get("max_steps"),
            "num_trials": record.spec.get("num_trials"),
            "created": record.created_time,
            "elapsed_s": _elapsed(record, time.time() if now is None else now),
            "counts": record.counts(),
            "workers": sum(w.state in ("started", "stopping") for w in record.workers.values()),
            "warnings": [
                {"code": w.code, "message": w.message, "time": w.time, "trial": _id(w.trial)}
                for w in record.warnings
            ],
            "rejected_commands": [
                {"file": c.file, "reason": c.reason, "time": c.time}
                for c in record.rejected_commands
            ],
        },
        "accounting": study_usage(record, now).to_dict(),
        "trials": trials,
        "best": best_entry,
    }


def notices(record: StudyRecord, limit: int = 10) -> list[str]:
    """Lines for `hpctune status`: rejected inbox files, warnings, missing metric rows."""
    lines = []
    for command in record.rejected_commands[-limit:]:
        lines.append(f"rejected inbox file {command.file} (see inbox/rejected/): {command.reason}")
    for warning in record.warnings[-limit:]:
        lines.append(f"warning: {warning.message}")
    missing = {t.trial_id: t.missing_rows for t in record.trials.values() if t.missing_rows}
    if missing:
        shown = ", ".join(f"trial {t}: {n}" for t, n in sorted(missing.items())[:limit])
        lines.append(f"metric rows missing (corrupt event lines skipped): {shown}")
    return lines


def _id(value: int) -> int | None:
    return value if value >= 0 else None


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None
