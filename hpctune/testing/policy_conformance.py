"""The policy conformance kit: run a policy through random, valid studies and check its contract.

:func:`check_policy` builds random studies (:mod:`._study_walk`: trials in every status, curves,
checkpoints, forks, predictions), moves each on for a few rounds as the controller would and gives
the policy every event the controller gives it (SLOT_FREE, REPORT, BOUNDARY, PREDICTION). Every
decision is checked (:data:`CHECKS`, in this order):

* ``exception``: ``decide`` (and ``state_dict``, ``needed_checkpoints``, ...) does not raise;
* ``no-io``, ``no-clock``: no file, directory, socket, process or sleep; no clock of :mod:`time`;
* ``no-mutation``: the view is left as it was (trials' parameters, metrics, curves);
* ``state-json``: ``state_dict()`` is a mapping the journal can write (JSON);
* ``state-round-trip``: a new policy given that state (after JSON) gives the same state back;
* ``state-changes``: for a policy that tracks its state changes, each patch it gives turns the
  state as of its previous patch into its state now (:mod:`hpctune.journal.delta`);
* ``determinism``: two policies restored from the same state decide alike with the same seed;
* ``restart``: the policy restored from the journaled state before the decision decides as the
  policy that ran uninterrupted, and ends in the same state;
* ``slots``: no more START/RESUME/FORK actions than free slots on SLOT_FREE;
* ``legal``: a :class:`~hpctune.policies.PolicyDecision` of only actions the controller carries out
  (:func:`action_problem`).

A failure raises :class:`ConformanceError` naming the policy, the check, the event and the seed
that reproduces it.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn, TypeVar

import numpy as np

from hpctune.curves.predict import CurvePrediction
from hpctune.errors import UsageError
from hpctune.files import dumps
from hpctune.journal.delta import apply_delta
from hpctune.plugins import find
from hpctune.policies import POLICIES, make_policy
from hpctune.policies._base import (
    Action,
    ActionKind,
    Event,
    EventKind,
    OptionError,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
)
from hpctune.study.space import SearchSpace
from hpctune.study.states import TrialStatus
from hpctune.testing._io_guard import Violation, forbid_io
from hpctune.testing._study_walk import PLACING, WAITING, StudyWalk, default_space

#: The checks, in the order they are made for each decision.
CHECKS: tuple[str, ...] = (
    "exception",
    "no-io",
    "no-clock",
    "no-mutation",
    "state-json",
    "state-round-trip",
    "state-changes",
    "determinism",
    "restart",
    "slots",
    "legal",
)
_INT_FIELDS = ("trial_id", "step", "until_step", "end_step", "generation", "initiator", "seed")
_T = TypeVar("_T")


class ConformanceError(AssertionError):
    """A policy broke its contract.

    Attributes:
        policy: The policy's name.
        check: Which check failed (one of :data:`CHECKS`).
        detail: What was wrong.
        event: The event decided on (``None`` outside ``decide``: a hook such as
            ``needed_checkpoints``).
        seed: The seed of the study it happened in.
        decision: How many decisions of that study were checked, this one included (0: the
            failure came before the first).
        views: ``check_policy(make, seed=seed, n_views=views)`` reproduces the failure.
        headline: The message without the reproducer.
        view: The view the policy was given, or ``None``.
        actions: The actions it returned, or ``None``.
    """

    def __init__(
        self,
        policy: str,
        check: str,
        detail: str,
        *,
        event: Event | None,
        seed: int,
        decision: int,
        view: StudyView | None = None,
        actions: Sequence[Any] | None = None,
    ) -> None:
        self.policy = policy
        self.check = check
        self.detail = detail
        self.event = event
        self.seed = seed
        self.decision = decision
        self.view = view
        self.actions = actions
        where = describe_event(event) if event is not None else "a call outside decide"
        self.headline = (
            f"policy {policy!r} failed the check {check!r} at decision {decision} ({where}) of "
            f"the study with seed {seed}: {detail}"
        )
        self.views = max(decision, 1)
        super().__init__(
            f"{self.headline}\nreproduce: check_policy(make, seed={seed}, n_views={self.views})"
        )


@dataclass(frozen=True)
class ConformanceReport:
    """What :func:`check_policy` ran (it raises on the first failure, so all checks passed).

    Attributes:
        policy: The policy's name.
        decisions: Decisions checked.
        studies: Random studies walked through.
        events: Decisions per event kind (``slot_free``, ``report``, ...).
        actions: Actions returned per kind (``start``, ``terminate``, ...).
        statuses: Trials seen per status, summed over the decisions' views.
        seconds: Wall time of the run.
    """

    policy: str
    decisions: int
    studies: int
    events: Mapping[str, int]
    actions: Mapping[str, int]
    statuses: Mapping[str, int]
    seconds: float
    checks: tuple[str, ...] = CHECKS

    def summary(self) -> str:
        """One paragraph for people."""
        events = ", ".join(f"{k} {v}" for k, v in sorted(self.events.items()))
        actions = ", ".join(f"{k} {v}" for k, v in sorted(self.actions.items())) or "none"
        return (
            f"policy {self.policy!r} passed {len(self.checks)} checks ({', '.join(self.checks)}) "
            f"on {self.decisions} decisions in {self.studies} random studies "
            f"({self.seconds:.1f} s)\n  events: {events}\n  actions: {actions}"
        )


def describe_event(event: Event) -> str:
    """``SLOT_FREE with 2 free slots``, ``BOUNDARY of trial 3 at step 4``."""
    if event.kind is EventKind.SLOT_FREE:
        return f"SLOT_FREE with {_free(event.free_slots)}"
    return f"{event.kind.name} of trial {event.trial_id} at step {event.step}"


def _free(slots: int) -> str:
    return f"{slots} free slot{'' if slots == 1 else 's'}"


def describe_action(action: Any) -> str:
    """A short text of an action: its kind, then the fields that are set."""
    if not isinstance(action, Action):
        return repr(action)
    parts = [f"{name}={getattr(action, name)!r}" for name in _INT_FIELDS if getattr(action, name)]
    if action.params is not None:
        parts.append(f"params={dict(action.params)!r}")
    if action.priority:
        parts.append(f"priority={action.priority!r}")
    return f"{getattr(action.kind, 'name', action.kind)}({', '.join(parts)})"


# -- valid views ---------------------------------------------------------------------------------


def view_problems(view: StudyView) -> list[str]:
    """What makes ``view`` impossible for the controller to give (empty if nothing).

    The kit checks every view it makes with this; use it for views built by hand too.
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
        problems += [f"trial {tid}: {p}" for p in _trial_problems(view, tid)]
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

    Legal: a list (or a :class:`PolicyDecision`'s tuple) of :class:`Action`; START, RESUME and FORK
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
        return "slots", f"{len(placing)} placements ({shown}) with {_free(event.free_slots)}"
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _problem(view: StudyView, event: Event, action: Action, resumed: set[int]) -> str:
    """Why the controller cannot carry ``action`` out ("" if it can)."""
    for name in _INT_FIELDS:
        value = getattr(action, name)
        if value is not None and not _is_int(value):
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


# -- the run -------------------------------------------------------------------------------------


#: The study a policy is first built for, to learn its name and traits and check its space.
PROBE_CONTEXT = StudyContext(max_steps=12, mode="max", boundary=1)


def check_policy(
    make: Callable[[StudyContext], Policy],
    *,
    seed: int = 0,
    n_views: int = 200,
    rounds: int = 12,
    space: SearchSpace | None = None,
) -> ConformanceReport:
    """Check the policies ``make()`` builds on ``n_views`` decisions of random studies.

    Args:
        make: Builds a new policy with the options to check for a study's context (called
            for every random study, with its context, and for every restart).
        seed: The first study's seed (the next ones: ``seed + 1``, ...).
        n_views: Decisions to check (a view and an event each), over as many studies as needed.
        rounds: Rounds of each study (a round: training, events, then free slots).
        space: The search space of the studies (default: floats, ints, categoricals, a fixed
            value and a schedule).

    Returns:
        What was checked (every check passed).

    Raises:
        ConformanceError: A check failed (the first failure).
        OptionError: The policy refuses the search space (``check_space``); pass ``space``.
        ValueError: ``n_views`` or ``rounds`` below 1.
    """
    if n_views < 1 or rounds < 1:
        raise ValueError(f"n_views and rounds must be >= 1, but got {n_views} and {rounds}")
    started = time.perf_counter()
    space = space if space is not None else default_space()
    first = make(PROBE_CONTEXT)
    first.check_space(space)
    run = _Run(make, type(first).name or type(first).__name__, first.traits)
    studies = 0
    while run.decisions < n_views and studies < 10 * n_views:
        run.walk(seed + studies, space, rounds, n_views)
        studies += 1
    return ConformanceReport(
        policy=run.name,
        decisions=run.decisions,
        studies=studies,
        events=dict(run.events),
        actions=dict(run.actions),
        statuses=dict(run.statuses),
        seconds=time.perf_counter() - started,
    )


@dataclass
class _Run:
    """The state of one :func:`check_policy` run."""

    make: Callable[[StudyContext], Policy]
    name: str
    traits: PolicyTraits
    decisions: int = 0
    events: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    # the study under way
    seed: int = 0
    index: int = 0
    event: Event | None = None
    view: StudyView | None = None
    patched: str = "{}"  # the policy's state (JSON) as of its last patch (state-changes)
    context: StudyContext = PROBE_CONTEXT  # the study's, which every policy is built with

    def walk(self, seed: int, space: SearchSpace, rounds: int, n_views: int) -> None:
        """Walk one study for ``rounds`` rounds (or until ``n_views`` decisions in all)."""
        self.seed, self.index, self.event, self.view = seed, 0, None, None
        study = StudyWalk(
            np.random.default_rng(seed),
            space,
            makes_configurations=self.traits.makes_configurations,
            wants_predictions=self.traits.wants_predictions,
            wants_fit=lambda step: bool(self._hook(lambda: policy.wants_fit(step))),
        )
        self.context = study.context
        policy = self.make(self.context)
        loaded = self._call(lambda: policy.load_state_dict({}))  # as a new study's controller
        if isinstance(loaded, BaseException):
            self._fail(
                "state-round-trip",
                f"load_state_dict({{}}) (a new study's state) raised {_exception_text(loaded)}",
            )
        self.patched = self._state(policy)[0]  # the state its next patch starts from
        for _ in range(rounds):
            self.event = None
            events = study.advance()
            view = study.view(0)
            for event in events:
                if self.decisions >= n_views:
                    return
                if study.deliverable(event):
                    for action in self._decide(policy, view, event):
                        study.apply(action)
            free = study.free_slots()
            if free > 0:
                if self.decisions >= n_views:
                    return
                view = study.view(free)
                actions = self._decide(policy, view, Event.slot_free(free))
                study.place(actions, free)
                self._after_slots(policy, study)

    # -- one decision ----------------------------------------------------------------------------

    def _decide(self, policy: Policy, view: StudyView, event: Event) -> list[Action]:
        """Check one decision of ``policy``; return its actions."""
        self.index += 1
        self.decisions += 1
        self.event, self.view = event, view
        problems = view_problems(view)
        if problems:  # a bug of the kit, not of the policy
            raise RuntimeError(f"the kit made an invalid view: {'; '.join(problems)}")
        self.events[event.kind.value] += 1
        self.statuses.update(t.status.value for t in view.trials.values())

        raw, before = self._state(policy)
        self._check_changes(policy, raw, before)
        restored = self._restore(raw, before)
        twin = self._restore(raw, before)
        fingerprint = _fingerprint(view)
        ours = self._call(lambda: policy.decide(view, event, self._rng()))
        if isinstance(ours, BaseException):
            if _is_mutation(ours):
                self._fail("no-mutation", f"decide changed the view: {_exception_text(ours)}")
            self._fail("exception", f"decide raised {_exception_text(ours)}")
        theirs = self._call(lambda: restored.decide(view, event, self._rng()))
        again = self._call(lambda: twin.decide(view, event, self._rng()))
        changed = [t for t, f in _fingerprint(view).items() if f != fingerprint[t]]
        if changed:
            self._fail(
                "no-mutation",
                f"decide changed the parameters, metrics or info of trials {changed} in the view "
                "(the controller's own records)",
            )
        if _key(theirs) != _key(again):
            self._fail(
                "determinism",
                "the same state, view, event and seed gave different actions: "
                f"{_show(theirs)} and then {_show(again)}",
                again,
            )
        if _key(ours) != _key(theirs):
            self._fail(
                "restart",
                f"uninterrupted: {_show(ours)}; restored from its journaled state: "
                f"{_show(theirs)}",
                ours,
            )
        after = self._state(policy)[1]
        after_restored = self._state(restored)[1]
        if after_restored != self._state(twin)[1]:
            self._fail("determinism", "the same decision left two policies in different states")
        if after != after_restored:
            self._fail(
                "restart",
                f"after the same decision the uninterrupted policy's state is {after} but the "
                f"restored one's is {after_restored}",
            )
        if not isinstance(ours, PolicyDecision):
            self._fail("legal", f"decide returned a {type(ours).__name__}, not a PolicyDecision")
        actions = list(ours.actions)
        problem = action_problem(view, event, actions)
        if problem is not None:
            self._fail(problem[0], problem[1], actions)
        if not isinstance(ours.hold_idle_workers, bool | np.bool_):
            self._fail("legal", f"hold_idle_workers is {ours.hold_idle_workers!r}, not a bool")
        self.actions.update(a.kind.value for a in actions)
        return actions

    def _check_changes(self, policy: Policy, raw: str, canonical: str) -> None:
        """A policy that tracks its changes: its patch turns the state of its last patch into
        the state now (``raw``, ``canonical``)."""
        if not self.traits.tracks_state_changes:
            return
        changes = self._hook(policy.state_changes)
        try:
            patch = json.loads(dumps(changes))
        except (TypeError, ValueError) as exc:
            self._fail("state-changes", f"state_changes() cannot be written as JSON: {exc}")
        patched = json.dumps(apply_delta(json.loads(self.patched), patch), sort_keys=True)
        if patched != canonical:
            self._fail(
                "state-changes",
                f"the state as of the last patch {self.patched} with the patch {patch} is "
                f"{patched}, but the state is {canonical}",
            )
        self.patched = raw

    def _after_slots(self, policy: Policy, study: StudyWalk) -> None:
        """The controller's other questions after filling slots (and PBT's garbage collection)."""
        self.event = None
        view = study.view(0)
        self.view = view
        self._milestones(policy, view)
        if not self.traits.makes_configurations:
            return
        needed = self._hook(lambda: policy.needed_checkpoints(view))
        if needed is not None:  # ids of trials to come are allowed (replay's targets)
            if not _iterable(needed) or not all(_is_int(t) for t in needed):
                self._fail("legal", f"needed_checkpoints returned {needed!r}, not trial ids")
            needed = {int(t) for t in needed}
        study.collect_checkpoints(needed)

    def _milestones(self, policy: Policy, view: StudyView) -> None:
        """``stage_milestones`` (stage trees), asked of a copy restored from the policy's state
        (it may draw from ``rng`` and remember, as ASHA's bracket choice)."""
        copy = self._restore(*self._state(policy))
        trial_ids: list[int | None] = [None, *list(view.trials)[-1:]]
        for trial_id in trial_ids:
            steps = self._hook(partial(copy.stage_milestones, view, trial_id, self._rng()))
            if steps is None:
                continue
            ints = isinstance(steps, list) and all(_is_int(s) for s in steps)
            if not ints or steps != sorted(set(steps)) or not _within(steps, view.max_steps):
                self._fail(
                    "legal",
                    f"stage_milestones(view, {trial_id}) returned {steps!r}, not ascending steps "
                    f"in 1..{view.max_steps}",
                )

    # -- helpers ---------------------------------------------------------------------------------

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.index])

    def _call(self, fn: Callable[[], _T]) -> _T | BaseException:
        """Run ``fn`` with I/O and clocks refused; return its result or the exception it raised."""
        result: _T | BaseException
        with forbid_io() as violations:
            try:
                result = fn()
            except Exception as exc:
                result = exc
        if violations:
            self._violation(violations[0])
        return result

    def _hook(self, fn: Callable[[], _T]) -> _T:
        result = self._call(fn)
        if isinstance(result, BaseException):
            self._fail("exception", f"raised {_exception_text(result)}")
        return result

    def _violation(self, violation: Violation) -> None:
        if violation.kind == "clock":
            self._fail("no-clock", f"read the clock ({violation}); a policy reads view.now")
        self._fail("no-io", f"attempted I/O: {violation}")

    def _state(self, policy: Policy) -> tuple[str, str]:
        """The policy's state as the journal writes it, and a canonical text of it."""
        state = self._hook(policy.state_dict)
        if not isinstance(state, Mapping):
            self._fail("state-json", f"state_dict returned a {type(state).__name__}")
        try:
            raw = dumps(state)
            canonical = json.dumps(json.loads(raw), sort_keys=True)
        except (TypeError, ValueError) as exc:
            self._fail("state-json", f"state_dict() cannot be written as JSON: {exc}")
        return raw, canonical

    def _restore(self, raw: str, canonical: str) -> Policy:
        """A new policy given the journaled state ``raw``; its state must come back unchanged."""
        policy = self.make(self.context)
        loaded = self._call(lambda: policy.load_state_dict(json.loads(raw)))
        if isinstance(loaded, BaseException):
            self._fail(
                "state-round-trip",
                f"load_state_dict raised {_exception_text(loaded)} on the state {canonical}",
            )
        again = self._state(policy)[1]
        if again != canonical:
            self._fail(
                "state-round-trip",
                f"state_dict() gave {canonical}; after load_state_dict of it a new policy "
                f"gives {again}",
            )
        return policy

    def _fail(self, check: str, detail: str, actions: Any = None) -> NoReturn:
        raise ConformanceError(
            self.name,
            check,
            detail,
            event=self.event,
            seed=self.seed,
            decision=self.index,
            view=self.view,
            actions=list(actions.actions)
            if isinstance(actions, PolicyDecision)
            else actions
            if isinstance(actions, list)
            else None,
        )


def _within(steps: list[int], max_steps: int) -> bool:
    return not steps or (steps[0] >= 1 and steps[-1] <= max_steps)


def _fingerprint(view: StudyView) -> dict[int, str]:
    """The mutable parts of each trial's view, as text."""
    return {tid: dumps([t.params, t.info, t.last_metrics]) for tid, t in view.trials.items()}


def _is_mutation(exc: BaseException) -> bool:
    """Whether ``exc`` is numpy's or a read-only mapping's refusal to be changed."""
    text = str(exc)
    return isinstance(exc, ValueError | TypeError) and (
        "read-only" in text or "mappingproxy" in text
    )


def _iterable(value: Any) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


def _exception_text(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _key(result: Any) -> Any:
    """A comparable form of a decision's result (its actions and hold, or the exception)."""
    if isinstance(result, BaseException):
        return ("raised", type(result).__name__, str(result))
    if not isinstance(result, PolicyDecision) or not isinstance(result.actions, tuple):
        return ("returned", repr(result))
    return ([_action_key(a) for a in result.actions], repr(result.hold_idle_workers))


def _action_key(action: Any) -> Any:
    if not isinstance(action, Action):
        return repr(action)
    try:
        params = None if action.params is None else dumps(dict(action.params))
    except (TypeError, ValueError):
        params = repr(action.params)
    fields = [_plain(getattr(action, name)) for name in _INT_FIELDS]
    return (repr(action.kind), _plain(action.priority), params, repr(action.reason), *fields)


def _plain(value: Any) -> str:
    """``repr`` of a number as Python's (numpy scalars and Python numbers alike)."""
    if _is_int(value):
        return repr(int(value))
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return repr(float(value))
    return repr(value)


def _show(result: Any) -> str:
    if isinstance(result, BaseException):
        return f"raised {_exception_text(result)}"
    if not isinstance(result, PolicyDecision) or not isinstance(result.actions, tuple):
        return repr(result)
    hold = ", holding idle workers" if result.hold_idle_workers else ""
    return "[" + ", ".join(describe_action(a) for a in result.actions) + "]" + hold


# -- policies named on the command line -----------------------------------------------------------


def policy_factory(target: str, options: Mapping[str, Any]) -> Callable[[StudyContext], Policy]:
    """The factory ``hpctune check-policy TARGET --options JSON`` checks.

    ``TARGET`` is a policy of the registry (:func:`hpctune.policies.make_policy`: a registered
    name such as ``asha``, another package's, or ``MODULE:CLASS`` of a :class:`Policy`
    subclass, built from its ``Options`` dataclass as ``[policy]`` options are) or
    ``MODULE:FUNCTION``, a function returning a policy (called with the options and
    ``context``, the :class:`StudyContext`, as keyword arguments).
    Modules are imported with the current directory on ``sys.path``.

    Raises:
        UsageError: The target cannot be imported, is no policy, or refuses the options.
    """
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    found = find("policy", target, POLICIES)
    factory: Callable[[StudyContext], Policy]
    if isinstance(found, type) and issubclass(found, Policy):
        factory = lambda context: make_policy(target, options, context)  # noqa: E731
    elif isinstance(found, type) or not callable(found):
        raise UsageError(f"{target} is not a Policy subclass or a function returning one")
    else:
        factory = lambda context: found(context=context, **options)  # noqa: E731
    try:
        policy = factory(PROBE_CONTEXT)
    except (OptionError, TypeError, ValueError) as exc:
        raise UsageError(f"{target} with options {dict(options)}: {exc}") from exc
    if not isinstance(policy, Policy):
        raise UsageError(f"{target} returned a {type(policy).__name__}, not a Policy")
    return factory
