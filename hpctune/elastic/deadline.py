"""A study's deadline set or changed at resume (``hpctune resume --deadline 3h``): checked
here, carried to the controller as an inbox command, which journals it and re-plans the stages
not yet finished (docs/elastic.md)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from hpctune.elastic.experiment import PlanningError
from hpctune.elastic.follow import Billing, load_study_profile, study_cost_model
from hpctune.errors import StudySpecError, UsageError
from hpctune.journal.state import StudyRecord
from hpctune.spec import StudySpec, with_deadline
from hpctune.study.formatting import format_duration, parse_duration


@dataclass(frozen=True)
class DeadlineChange:
    """What ``resume --deadline`` does to a study.

    Attributes:
        command: The inbox command that carries the new deadline to the controller, or
            ``None`` when the deadline stays as it is.
        message: One line saying what changes.
    """

    command: dict[str, Any] | None
    message: str


def change_deadline(
    spec: StudySpec,
    record: StudyRecord,
    text: str,
    billing: Billing,
    now: float | None = None,
) -> DeadlineChange:
    """Check the deadline ``text`` (``"3h"``, counted from the study's start) for the study of
    ``spec`` and ``record``, whose workers are billed by ``billing`` (the backend's).

    Raises:
        UsageError: ``text`` is not a duration, has passed already (it counts from the study's
            start), or the study cannot follow a deadline (its policy, a stage tree, no
            profile to plan from).
    """
    try:
        seconds = parse_duration(text)
    except PlanningError as exc:
        raise UsageError(str(exc)) from None
    if not math.isfinite(seconds):
        raise UsageError(f"--deadline must be a finite duration such as 3h, not {text!r}")
    try:
        new = with_deadline(spec, seconds)
    except StudySpecError as exc:
        raise UsageError(
            f"--deadline {text}: this study cannot follow a deadline: {exc.message} (a study's "
            f"{exc.field or 'spec'} does not change at resume: resume it without --deadline, or "
            "launch a new study with the fix)"
        ) from None
    now = time.time() if now is None else now
    elapsed = now - (record.started_time or record.created_time)
    if seconds <= elapsed:
        raise UsageError(
            f"--deadline {text} has passed already: a deadline counts from the study's start, "
            f"{format_duration(elapsed)} ago; give a longer one (e.g. --deadline "
            f"{format_duration(elapsed + 3600)})"
        )
    old = spec.resources.deadline
    if old == seconds:
        return DeadlineChange(
            None, f"deadline unchanged ({format_duration(seconds)} from the study's start)"
        )
    plan = record.elastic_plan
    if plan is None or "profile_data" not in plan:  # planned by the controller: can it be?
        try:
            load_study_profile(new)
            study_cost_model(new, billing)
        except PlanningError as exc:
            raise UsageError(f"--deadline {text}: {exc}") from None
    was = "none" if old is None else format_duration(old)
    return DeadlineChange(
        {"command": "deadline", "deadline": seconds, "source": f"--deadline {text}"},
        f"deadline: {was} -> {format_duration(seconds)} from the study's start; the controller "
        "re-plans the stages not yet finished",
    )


__all__ = ["DeadlineChange", "change_deadline"]
