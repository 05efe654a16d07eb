"""What `hpctune status` and the end of a local run print: tables, the best trial, JSON.

Everything here works from a :class:`~hpctune.journal.state.StudyRecord`, the same fold the
controller acts on and a reader rebuilds from the journal.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from hpctune.analysis.lineage import schedule
from hpctune.analysis.pareto import pareto_front
from hpctune.elastic.status import study_plan_status
from hpctune.journal.best import (
    BestTrial,
    best_trial,
    describe_best,
    leading_trial,
    peak_value,
    trial_value,
)
from hpctune.journal.state import StudyRecord
from hpctune.journal.usage import study_usage, trial_training_s, trial_wall_s
from hpctune.study.formatting import (
    format_duration,
    format_params,
    format_params_toml,
    format_sessions,
    format_value,
)
from hpctune.study.states import StudyState, TrialStatus

STATUS_JSON_VERSION = 1


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
        best, _ = peak_value(record, tr)
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


def done_count(record: StudyRecord) -> int:
    """Trials in a final state (whatever final states the project has)."""
    return sum(t.status.is_final for t in record.trials.values())


def total_trials(record: StudyRecord) -> int:
    """The trials the study will have as far as known (PBT forks add trials)."""
    return max(int(record.spec.get("num_trials", 0) or 0), len(record.trials))


def best_phrase(record: StudyRecord) -> str:
    """``best val_accuracy 0.97 (trial 6, step 18)``; while no trial has completed, the
    leading value of a running one; empty without any value."""
    best = best_trial(record)
    if best is not None:
        value, step = trial_value(record, best)
        return f"best {record.metric} {format_value(value)} (trial {best.trial_id}, step {step})"
    lead = leading_trial(record)
    if lead is None:
        return ""
    value, step = trial_value(record, lead)
    return (
        f"leading {record.metric} {format_value(value)} (trial {lead.trial_id} "
        f"{lead.status.value}, step {step}; none completed yet)"
    )


def study_line(record: StudyRecord, now: float | None = None) -> str:
    """One line: state, trial counts by state, best metric so far, elapsed time."""
    now = time.time() if now is None else now
    counts = record.counts()
    parts = [f"{record.state.value}", f"trials {done_count(record)}/{total_trials(record)} done"]
    parts.extend(f"{n} {name}" for name, n in counts.items() if n and name != "completed")
    best = best_phrase(record)
    if best:
        parts.append(best)
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


def best_text(record: StudyRecord, directory: str | Path | None = None) -> str:
    """The best trial, its value, step, checkpoint and configuration, for the end of a run."""
    best = describe_best(record, directory or record.spec.get("directory", "."))
    if best is None:
        if any(t.curve_values for t in record.trials.values()):
            return "no completed trial yet: only a trial that completes can be the best"
        return "no trial reported the study metric yet"
    rule = "at its best step" if best.mode == "peak" else "at its last step"
    lines = [
        f"best trial: {best.trial_id}, {record.metric} = {format_value(best.value)} at step "
        f'{best.step} ({rule}; [study] best = "{best.mode}")',
        f"checkpoint: {best.checkpoint}" if best.checkpoint else _no_checkpoint(best.step),
        "best configuration:",
    ]
    lines.extend(f"  {k} = {format_value(v)}" for k, v in best.params.items())
    return "\n".join(lines)


def best_json(record: StudyRecord, best: BestTrial) -> dict[str, Any]:
    """``hpctune best --json`` (docs/cli.md): the best trial, its value, step, checkpoint and
    parameters and, for a trial of a lineage (PBT), the schedule of its sessions."""
    out: dict[str, Any] = {
        "version": 1,
        "trial": best.trial_id,
        "metric": record.metric,
        "mode": str(record.spec.get("mode", "max")),
        "rule": best.mode,
        "value": best.value,
        "step": best.step,
        "checkpoint": None if best.checkpoint is None else str(best.checkpoint),
        "params": best.params,
    }
    if best.trial.generation is not None:
        out["schedule"] = [
            {"trial": s.trial_id, "start": s.start_step, "end": s.end_step, "params": s.params}
            for s in schedule(record, best.trial_id)
        ]
    return out


def best_toml_lines(record: StudyRecord, best: BestTrial) -> list[str]:
    """``hpctune best``: the best trial's value, checkpoint (how to load it) and, for a
    lineage, its schedule as TOML comments, then its configuration as a ``[search_space]``
    table to paste."""
    rule = "its best step" if best.mode == "peak" else "its last step"
    lines = [
        f"# best trial {best.trial_id} of {record.spec.get('name')}: {record.metric} = "
        f"{format_value(best.value)} at step {best.step} ({rule}, [study] best = "
        f'"{best.mode}")'
    ]
    if best.checkpoint is not None:
        lines.append(f"# checkpoint: {best.checkpoint}")
        lines.append(f'#   state = torch.load("{best.checkpoint}", weights_only=True)')
    else:
        lines.append(f"# checkpoint: none kept at step {best.step}")
    if best.trial.generation is not None:
        lines += [f"# {line}" for line in schedule_lines(record, best.trial_id)]
    return [*lines, "[search_space]", format_params_toml(best.params)]


def pareto_text(record: StudyRecord) -> str:
    """The Pareto front of a multi-objective study ("" for a study with one metric)."""
    objectives = record.spec.get("objectives") or []
    if not objectives:
        return ""
    names = ", ".join(f"{m} ({mode})" for m, mode in objectives)
    front = pareto_front(record)
    if not front:
        return f"Pareto front over {names}: no completed trial yet"
    lines = [f"Pareto front over {names}: {len(front)} trial(s)"]
    for entry in front:
        values = ", ".join(f"{k} = {format_value(v)}" for k, v in entry.values.items())
        lines.append(f"  trial {entry.trial_id}: {values}; {format_params(dict(entry.params))}")
    return "\n".join(lines)


def _no_checkpoint(step: int) -> str:
    return (
        f"checkpoint: none at step {step} (the training function saved none there, or it was "
        "deleted: save a checkpoint after every report and keep [study] keep_checkpoints = "
        '"best_and_last")'
    )


def status_json(record: StudyRecord, directory: str, now: float | None = None) -> dict[str, Any]:
    """The documented JSON form of `hpctune status --json` (see docs/cli.md)."""
    trials = []
    for tid in sorted(record.trials):
        tr = record.trials[tid]
        best, best_step = peak_value(record, tr)
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
    winner = describe_best(record, directory)
    best_entry = None
    if winner is not None:
        best_entry = {
            "id": winner.trial_id,
            "value": _num(winner.value),
            "step": winner.step,
            "rule": winner.mode,
            "checkpoint": None if winner.checkpoint is None else str(winner.checkpoint),
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
            "workers": sum(w.state.is_alive for w in record.workers.values()),
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
        "pareto_front": _front_json(record),
        "elastic": _elastic_json(record, now),
    }


def _elastic_json(record: StudyRecord, now: float | None) -> dict[str, Any] | None:
    """The plan a study with a deadline follows, predicted against measured (or null)."""
    if record.elastic_plan is None:
        return None  # (the planner's modules are not imported for other studies)
    status = study_plan_status(record, now)
    return None if status is None else status.to_dict()


def _front_json(record: StudyRecord) -> list[dict[str, Any]] | None:
    """The Pareto front as JSON (``None`` for a study with one metric)."""
    if not record.spec.get("objectives"):
        return None
    return [entry.to_dict() for entry in pareto_front(record)]


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


def stage_steps(record: StudyRecord) -> tuple[int, int]:
    """``(steps trained, steps requested)`` of a study: what its segments trained, and what its
    trials reached (what trial-based training would have trained for the same results)."""
    trained = 0
    for seg in record.segments.values():
        end = seg.end_step
        if end is None and not seg.status.is_final:
            end = record.trials[seg.trial_id].step
        trained += max(int(end or seg.start_step) - seg.start_step, 0)
    requested = sum(max(t.step, 0) for t in record.trials.values())
    return trained, requested


def policy_lines(record: StudyRecord) -> list[str]:
    """What the policy did, in a few lines: PBT's generations and the schedule it found, what a
    stage tree's sharing saved, and trials stopped, suspended and resumed early."""
    lines: list[str] = []
    trials = list(record.trials.values())
    generations = [t.generation for t in trials if t.generation is not None]
    if generations:
        lines.append(
            f"population based training: {len(trials)} trials in {max(generations) + 1} "
            "generations"
        )
        best = best_trial(record)
        if best is not None:
            lines.extend(schedule_lines(record, best.trial_id))
    if record.spec.get("stages", {}).get("enabled"):
        trained, requested = stage_steps(record)
        ratio = f", {requested / trained:.2f}x fewer" if trained else ""
        lines.append(
            f"stage tree: {trained} steps trained for {requested} steps reached by the trials "
            f"({requested - trained} saved by sharing{ratio})"
        )
    stopped = sum(t.status is TrialStatus.TERMINATED for t in trials)
    suspensions = [t for t in trials if any(h.status is TrialStatus.SUSPENDED for h in t.history)]
    times = sum(h.status is TrialStatus.SUSPENDED for t in trials for h in t.history)
    if stopped or times:
        policy = record.spec.get("policy", {}).get("name", "")
        lines.append(
            f"policy {policy}: {_n(stopped, 'trial')} terminated before the end, "
            f"{_n(times, 'suspension')} of {_n(len(suspensions), 'trial')}"
        )
    return lines


def schedule_lines(record: StudyRecord, trial_id: int) -> list[str]:
    """The hyperparameter schedule behind a (PBT) trial: its lineage's sessions, one line per
    parameter that changed along it, then the parameters that stayed the same."""
    sessions = schedule(record, trial_id)
    names = list(dict.fromkeys(n for s in sessions for n in s.params))
    changing = [n for n in names if len({repr(s.params.get(n)) for s in sessions}) > 1]
    fixed = {n: sessions[-1].params.get(n) for n in names if n not in changing}
    chain = " -> ".join(str(s.trial_id) for s in sessions)
    lines = [f"schedule found (lineage {chain}, {len(sessions)} sessions):"]
    rows = [(s.start_step, s.end_step, {n: s.params.get(n) for n in changing}) for s in sessions]
    lines.extend("  " + text for text in format_sessions(rows))
    if fixed:
        lines.append("  unchanged: " + format_params(fixed))
    return lines


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def summary_lines(record: StudyRecord, root: Path, hint: str) -> list[str]:
    """What the end of a foreground run (and of a controller job) prints: the trials, the
    study's state, what the policy did, the best trial, the Pareto front, the last warnings
    and, for a stopped or failed study, what to do; ``hint``: the command that resumes it."""
    lines = [trials_table(record), study_line(record), *policy_lines(record)]
    lines.append(best_text(record, root))
    front = pareto_text(record)
    if front:
        lines.append(front)
    lines += [f"warning: {warning.message}" for warning in record.warnings[-5:]]
    if record.state is StudyState.STOPPED:
        lines.append(f"stopped; resume with: {hint}")
    elif record.state is StudyState.FAILED:
        lines.append(f"study failed: {record.reason}")
    return lines
