"""The policy contract the conformance kit checks: what makes a view one the controller can
give, and which actions it carries out (used by :func:`~hpctune.testing.check_policy`, and on
their own for views and actions built by hand)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from hpctune.curves.predict import CurvePrediction
from hpctune.files import dumps
from hpctune.policies import Action, ActionKind, Event, EventKind, StudyView, TrialView
from hpctune.study.states import TrialStatus

PLACING = (ActionKind.START, ActionKind.RESUME, ActionKind.FORK)
WAITING = (TrialStatus.QUEUED, TrialStatus.SUSPENDED)
INT_FIELDS = ("trial_id", "step", "until_step", "end_step", "generation", "initiator", "seed")


def describe_event(event: Event) -> str:
    """``SLOT_FREE with 2 free slots``, ``BOUNDARY of trial 3 at step 4``."""
    if event.kind is EventKind.SLOT_FREE:
        return f"SLOT_FREE with {free_text(event.free_slots)}"
    return f"{event.kind.name} of trial {event.trial_id} at step {event.step}"


def free_text(slots: int) -> str:
    """``1 free slot``, ``2 free slots``."""
    return f"{slots} free slot{'' if slots == 1 else 's'}"


def describe_action(action: Any) -> str:
    """A short text of an action: its kind, then the fields that are set."""
    if not isinstance(action, Action):
        return repr(action)
    parts = [f"{name}={getattr(action, name)!r}" for name in INT_FIELDS if getattr(action, name)]
    if action.params is not None:
        parts.append(f"params={dict(action.params)!r}")
    if action.priority:
        parts.append(f"priority={action.priority!r}")
    return f"{getattr(action.kind, 'name', action.kind)}({', '.join(parts)})"


# -- valid views ---------------------------------------------------------------------------------


def view_problems(view: StudyView, *, known: dict[int, TrialView] | None = None) -> list[str]:
    """What makes ``view`` impossible for the controller to give (empty if nothing).

    The kit checks every view the core gives with this; use it for views built by hand too.
    ``known``: trial views found valid before, by ``id`` (the core keeps an unchanged trial's
    view object), not checked again; the valid ones of ``view`` are added.
    """
    problems: list[str] = []
    if view.mode not in ("max", "min"):
        problems.append(f"mode {view.mode!r}")
    if view.max_steps < 1 or view.boundary < 1:
        problems.append(f"max_steps {view.max_steps}, boundary {view.boundary}")
    if not (math.isfinite(view.now) and view.now >= 0):
        problems.append(f"now {view.now}")
    if not view.bounds[0] < view.bounds[1]:
        problems.append(f"bounds {view.bounds}")
    if view.trials_remaining is not None and view.trials_remaining < 0:
        problems.append(f"trials_remaining {view.trials_remaining}")
    if sorted(view.trials) != list(range(len(view.trials))):
        problems.append(f"trial ids {sorted(view.trials)} are not 0..n-1")
    running = 0
    for tid, trial in view.trials.items():
        running += trial.status is TrialStatus.RUNNING
        if known is not None and known.get(id(trial)) is trial:
            continue
        found = [f"trial {tid}: {p}" for p in _trial_problems(view, tid)]
        if not found and known is not None:
            known[id(trial)] = trial
        problems += found
    if not 0 <= view.free_slots <= view.total_slots - running:
        problems.append(
            f"{view.free_slots} free slots with {running} running of {view.total_slots}"
        )
    for tid, prediction in view.predictions.items():
        if tid not in view.trials:
            problems.append(f"a prediction of trial {tid}, which does not exist")
        elif not isinstance(prediction, CurvePrediction):
            problems.append(f"prediction of trial {tid} is a {type(prediction).__name__}")
        elif prediction.mode != view.mode or prediction.x_max != view.max_steps:
            problems.append(f"prediction of trial {tid} is not for this study")
    return problems


def _trial_problems(view: StudyView, tid: int) -> list[str]:
    trial = view.trials[tid]
    out: list[str] = []
    if trial.trial_id != tid or not isinstance(trial.status, TrialStatus):
        out.append(f"id {trial.trial_id}, status {trial.status!r}")
    steps, values, times = trial.steps, trial.values, trial.times
    if not len(steps) == len(values) == len(times):
        out.append("steps, values and times differ in length")
        return out
    start = trial.parent_step or 0
    if len(steps) and (np.any(np.diff(steps) <= 0) or steps[0] <= start or steps[-1] > trial.step):
        out.append(f"steps {list(steps)} not increasing within ({start}, {trial.step}]")
    if not np.all(np.isfinite(values)):
        out.append("a value is not finite")
    if len(times) and (np.any(np.diff(times) < 0) or times[-1] > view.now):
        out.append("times decrease or lie after now")
    if not start <= trial.step <= view.max_steps:
        out.append(f"step {trial.step} outside [{start}, {view.max_steps}]")
    if trial.checkpoint_step is not None and not 0 < trial.checkpoint_step <= trial.step:
        out.append(f"checkpoint at {trial.checkpoint_step} after step {trial.step}")
    end = min(trial.end_step or view.max_steps, view.max_steps)
    if trial.status is TrialStatus.COMPLETED and trial.step < end:
        out.append(f"completed at step {trial.step} before its end {end}")
    if (trial.parent_trial is None) != (trial.parent_step is None):
        out.append("parent_trial and parent_step must be set together")
    for name in ("parent_trial", "initiator"):
        other = getattr(trial, name)
        if other is not None and not 0 <= other < tid:
            out.append(f"{name} {other} is not an earlier trial")
    if not math.isfinite(trial.priority) or trial.retries < 0:
        out.append(f"priority {trial.priority}, retries {trial.retries}")
    return out


# -- legal actions -------------------------------------------------------------------------------


def action_problem(view: StudyView, event: Event, actions: Any) -> tuple[str, str] | None:
    """The first check (``slots`` or ``legal``) ``actions`` fail for ``event`` on ``view``, and
    why; ``None`` if the controller can carry them all out.

    Legal: a list (or a :class:`Decision`'s tuple) of :class:`Action`; START, RESUME and FORK
    only on SLOT_FREE, at most ``free_slots`` of them, and no more STARTs without parameters
    than ``trials_remaining``;
    RESUME of a QUEUED or SUSPENDED trial, once, ``until_step`` after its checkpoint; FORK of an
    existing trial at the step of its checkpoint (the latest, the one the view shows), with
    parameters; CONTINUE, SUSPEND and TERMINATE of existing trials not ended, CONTINUE at a
    BOUNDARY only of the event's trial; integer fields integers, a finite priority, parameters
    JSON-able mappings.
    """
    if not isinstance(actions, list | tuple):
        return "legal", f"the actions are a {type(actions).__name__}, not a list of actions"
    for action in actions:
        if not isinstance(action, Action) or not isinstance(action.kind, ActionKind):
            return "legal", f"{action!r} is not an Action"
    placing = [a for a in actions if a.kind in PLACING]
    if event.kind is EventKind.SLOT_FREE and len(placing) > event.free_slots:
        shown = ", ".join(describe_action(a) for a in placing)
        return "slots", f"{len(placing)} placements ({shown}) with {free_text(event.free_slots)}"
    resumed: set[int] = set()
    for action in actions:
        problem = _problem(view, event, action, resumed)
        if problem:
            return "legal", f"{describe_action(action)}: {problem}"
    starts = sum(a.kind is ActionKind.START and a.params is None for a in actions)
    if view.trials_remaining is not None and starts > view.trials_remaining:
        return "legal", (
            f"{starts} STARTs of new configurations, but trials_remaining is "
            f"{view.trials_remaining} (the controller ignores the rest)"
        )
    return None


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (Python's or numpy's, not a bool)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _problem(view: StudyView, event: Event, action: Action, resumed: set[int]) -> str:
    """Why the controller cannot carry ``action`` out ("" if it can)."""
    for name in INT_FIELDS:
        value = getattr(action, name)
        if value is not None and not is_int(value):
            return f"{name} must be an int, not {type(value).__name__}"
    real = isinstance(action.priority, numbers.Real) and not isinstance(action.priority, bool)
    if not real or not math.isfinite(action.priority):
        return f"priority must be a finite number, not {action.priority!r}"
    if not isinstance(action.reason, str):
        return "reason must be a string"
    if action.params is not None:
        if not isinstance(action.params, Mapping):
            return f"params must be a mapping, not {type(action.params).__name__}"
        try:
            dumps(dict(action.params))
        except (TypeError, ValueError) as exc:
            return f"params cannot be journaled as JSON ({exc})"
    for name, low in (("until_step", 1), ("end_step", 1), ("generation", 0), ("seed", 0)):
        value = getattr(action, name)
        if value is not None and value < low:
            return f"{name} must be >= {low}"
    if action.initiator is not None and action.initiator not in view.trials:
        return f"initiator {action.initiator} is not a trial"
    kind = action.kind
    if kind in PLACING and event.kind is not EventKind.SLOT_FREE:
        return "trials are placed only on SLOT_FREE (the controller ignores it here)"
    if kind is ActionKind.START:
        return ""
    trial = view.trials.get(action.trial_id) if action.trial_id is not None else None
    if trial is None:
        return f"trial {action.trial_id} does not exist"
    if kind is ActionKind.FORK:
        if action.params is None:
            return "a fork needs params"
        if trial.checkpoint_step is None or action.step != trial.checkpoint_step:
            return (
                f"trial {trial.trial_id} has no checkpoint at step {action.step} (its "
                f"checkpoint: {trial.checkpoint_step})"
            )
        return ""
    if kind is ActionKind.RESUME:
        if trial.status not in WAITING or trial.trial_id in resumed:
            again = " again" if trial.trial_id in resumed else ""
            return f"cannot resume{again} a {trial.status.value} trial"
        resumed.add(trial.trial_id)
        start = trial.checkpoint_step if trial.checkpoint_step is not None else trial.parent_step
        if action.until_step is not None and action.until_step <= (start or 0):
            return f"until_step {action.until_step} is not after its checkpoint at {start}"
        return ""
    if trial.status.is_final:
        return f"trial {trial.trial_id} has ended ({trial.status.value})"
    if (
        kind is ActionKind.CONTINUE
        and event.kind is EventKind.BOUNDARY
        and trial.trial_id != event.trial_id
    ):
        return f"a BOUNDARY of trial {event.trial_id} continues only that trial"
    return ""


__all__ = [
    "INT_FIELDS",
    "PLACING",
    "WAITING",
    "action_problem",
    "describe_action",
    "describe_event",
    "free_text",
    "is_int",
    "view_problems",
]
