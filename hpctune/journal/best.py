"""Which trial is a study's best, at which step, and which checkpoints keep its model.

Pure functions of a :class:`~hpctune.journal.state.StudyRecord` (the journal's fold), shared by
``hpctune status``/``best``/``report``, the read API and the controller's checkpoint garbage
collection, so what is reported as best and what is kept on disk cannot drift apart, also across
a controller restart.

- ``[study] best = "peak"``: a trial's value is the best value of the study metric at any of its
  steps; ``"last"``: its value at its last step. A trial's *best step* is that step.
- Only **completed** trials that trained to ``max_steps`` can be the study's best trial
  (a terminated, failed or still running trial cannot; a PBT session that ended before the last
  generation is not a final model).
- ``[study] keep_checkpoints``: ``"last"`` keeps each trial's latest checkpoint (a trial that
  has not ended always keeps it, to resume from); ``"best"`` keeps the checkpoint at the best
  step of every trial that may still become the best (not ended) and of the best trial;
  ``"best_and_last"`` (the default) keeps both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpctune.journal.entities import TrialRecord
from hpctune.journal.state import StudyRecord
from hpctune.study.states import TrialStatus

BEST_MODES = ("peak", "last")
KEEP_MODES = ("last", "best", "best_and_last")
DEFAULT_KEEP = "best_and_last"


def best_mode(record: StudyRecord) -> str:
    """The study's ``best`` rule (``"peak"`` for journals written before it existed)."""
    mode = str(record.spec.get("best", "peak"))
    return mode if mode in BEST_MODES else "peak"


def keep_mode(record: StudyRecord) -> str:
    """The study's ``keep_checkpoints`` rule (``"last"`` for journals written before it)."""
    mode = str(record.spec.get("keep_checkpoints", "last"))
    return mode if mode in KEEP_MODES else "last"


def sign(record: StudyRecord) -> float:
    """+1 when larger values of the study metric are better, -1 when smaller are."""
    return -1.0 if record.spec.get("mode") == "min" else 1.0


def trial_value(record: StudyRecord, trial: TrialRecord) -> tuple[float, int | None]:
    """A trial's value of the study metric under the study's ``best`` rule, and its step.

    ``(nan, None)`` when the trial has no finite value (for ``"last"``: when its last value is
    not finite).
    """
    if best_mode(record) == "last":
        if trial.curve_values and math.isfinite(trial.curve_values[-1]):
            return trial.curve_values[-1], trial.curve_steps[-1]
        return math.nan, None
    return peak_value(record, trial)


def peak_value(record: StudyRecord, trial: TrialRecord) -> tuple[float, int | None]:
    """The best finite value of the study metric in a trial's curve, and its step."""
    values = trial.curve_values
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, None
    best = max(finite) if sign(record) > 0 else min(finite)
    at = values.index(best)  # the first of equal values
    return values[at], trial.curve_steps[at]


def is_candidate(record: StudyRecord, trial: TrialRecord) -> bool:
    """True if the trial can be the study's best: completed, trained to ``max_steps``."""
    max_steps = int(record.spec.get("max_steps", 0) or 0)
    return trial.status is TrialStatus.COMPLETED and trial.step >= max_steps


def best_trial(record: StudyRecord) -> TrialRecord | None:
    """The best of the completed trials (ties: the lower id), or ``None``."""
    s = sign(record)
    mode = best_mode(record)
    winner: TrialRecord | None = None
    winner_value = -math.inf
    for tid in sorted(record.trials):
        trial = record.trials[tid]
        if not is_candidate(record, trial):
            continue
        # a completed trial's curve stays as it is (a retry changes its status; lineage, the
        # list): its value is computed once per curve
        values = trial.curve_values
        key = (mode, trial.status, len(values), values[-1] if values else None, id(values))
        memo = record.best_values.get(tid)
        if memo is None or memo[0] != key:
            memo = record.best_values[tid] = (key, trial_value(record, trial)[0])
        value = memo[1]
        if not math.isnan(value) and s * value > winner_value:
            winner, winner_value = trial, s * value
    return winner


def leading_trial(record: StudyRecord) -> TrialRecord | None:
    """The trial with the best value so far among those not ended or completed (for progress
    displays while no trial has completed); ``None`` without values."""
    s = sign(record)
    winner: TrialRecord | None = None
    winner_value = -math.inf
    for tid in sorted(record.trials):
        trial = record.trials[tid]
        if trial.status.is_final and trial.status is not TrialStatus.COMPLETED:
            continue
        value, _ = trial_value(record, trial)
        if not math.isnan(value) and s * value > winner_value:
            winner, winner_value = trial, s * value
    return winner


def checkpoint_at(record: StudyRecord, trial: TrialRecord, step: int | None) -> int | None:
    """The journal row of a kept checkpoint holding ``trial``'s model at ``step``, or ``None``.

    Its own checkpoint at that step; for a trial that went on from another trial's checkpoint
    (stage trees) and a step up to that point, the other trial's.
    """
    if step is None:
        return None
    seen: set[int] = set()
    current: TrialRecord | None = trial
    while current is not None and current.trial_id not in seen:
        seen.add(current.trial_id)
        for ref in record.live_checkpoints(current.trial_id):
            if ref.step == step:
                return ref.row
        if not current.shares_prefix or current.parent_trial is None:
            break
        if step > int(current.parent_step or 0):
            break
        current = record.trials.get(current.parent_trial)
    return None


def best_checkpoint_rows(record: StudyRecord) -> set[int]:
    """The checkpoint rows the ``keep_checkpoints`` rule keeps for the best model.

    Empty for ``"last"``. Otherwise the checkpoint at the best step of every trial that has not
    ended (it may become the best; its own checkpoint) and of the study's best trial (its own, or
    in a stage tree the one it shares with the trial it went on from).
    """
    if keep_mode(record) == "last":
        return set()
    rows: set[int] = set()
    best = best_trial(record)
    for trial in record.trials.values():
        if trial.status.is_final and trial is not best:
            continue
        _, step = trial_value(record, trial)
        if trial is best:
            row = checkpoint_at(record, trial, step)
        else:  # its own checkpoint; one it shares with another trial is that trial's to keep
            row = next(
                (r.row for r in record.live_checkpoints(trial.trial_id) if r.step == step), None
            )
        if row is not None:
            rows.add(row)
    return rows


def keeps_latest(record: StudyRecord, trial: TrialRecord) -> bool:
    """True if the ``keep_checkpoints`` rule keeps the trial's latest checkpoint."""
    return not trial.status.is_final or keep_mode(record) != "best"


@dataclass(frozen=True)
class BestTrial:
    """The study's best trial as the read API and ``hpctune best`` give it.

    Attributes:
        trial_id: The trial.
        params: Its hyperparameters (schedules as dicts).
        value: Its value of the study metric under the study's ``best`` rule.
        step: The step of that value.
        mode: The ``best`` rule (``"peak"`` or ``"last"``).
        checkpoint: The file holding the model at ``step`` (absolute), or ``None`` when no
            checkpoint was saved at that step or it was deleted.
        trial: The trial's whole record.
    """

    trial_id: int
    params: dict[str, Any]
    value: float
    step: int
    mode: str
    checkpoint: Path | None
    trial: TrialRecord

    @property
    def status(self) -> TrialStatus:
        """The trial's status (always completed)."""
        return self.trial.status


def describe_best(record: StudyRecord, directory: str | Path) -> BestTrial | None:
    """The study's best trial with its step and checkpoint file (``directory``: the study's)."""
    trial = best_trial(record)
    if trial is None:
        return None
    value, step = trial_value(record, trial)
    row = checkpoint_at(record, trial, step)
    path = None if row is None else Path(directory) / record.checkpoints[row].path
    return BestTrial(
        trial_id=trial.trial_id,
        params=dict(trial.params),
        value=value,
        step=int(step or 0),
        mode=best_mode(record),
        checkpoint=path,
        trial=trial,
    )


__all__ = [
    "BEST_MODES",
    "DEFAULT_KEEP",
    "KEEP_MODES",
    "BestTrial",
    "best_checkpoint_rows",
    "best_mode",
    "best_trial",
    "checkpoint_at",
    "describe_best",
    "is_candidate",
    "keep_mode",
    "keeps_latest",
    "leading_trial",
    "peak_value",
    "trial_value",
]
