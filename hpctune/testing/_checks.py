"""The conformance kit's checks of one policy: on every call the core makes to it in random
studies, and on the liveness study (:func:`hpctune.testing.check_policy` runs them)."""

from __future__ import annotations

import json
import numbers
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn, TypeVar

import numpy as np

from hpctune.files import dumps
from hpctune.journal.delta import apply_delta
from hpctune.policies import (
    Action,
    Event,
    EventKind,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
    TrialView,
)
from hpctune.simulator import SimulatorError
from hpctune.study.space import SearchSpace
from hpctune.study.states import StudyState
from hpctune.testing._contract import (
    INT_FIELDS,
    action_problem,
    describe_action,
    is_int,
    view_problems,
)
from hpctune.testing._io_guard import Violation, forbid_io
from hpctune.testing._random_study import RandomStudy, wrapper_type
from hpctune.testing._results import ConformanceError

_T = TypeVar("_T")
_ENDED = (StudyState.FINISHED, StudyState.STOPPED, StudyState.FAILED)

#: The study a policy is first built for, to learn its name and traits and check its space.
PROBE_CONTEXT = StudyContext(max_steps=12, mode="max", boundary=1)


class _StudyOver(BaseException):
    """Enough of a study was seen (its rounds, or every decision asked for): the kit leaves
    its core (a ``BaseException``: nothing on the way catches it)."""


class _Checked(Policy):
    """The policy under check as the core sees it: every call goes through the kit's checks
    (:class:`Run`)."""

    name = "checked"

    def __init__(self, run: Run, policy: Policy) -> None:
        super().__init__(policy.context)
        self.run = run
        self.policy = policy

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """The policy's decision, checked."""
        return self.run.decide(self.policy, view, event, rng)

    def wants_fit(self, step: int) -> bool:
        """The policy's, guarded."""
        return bool(self.run.hook(partial(self.policy.wants_fit, step)))

    def state_dict(self) -> dict[str, Any]:
        """The policy's state as the core journals it, guarded."""
        return self.run.core_state(self.policy)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The journal's state (a new study's), checked."""
        self.run.load(self.policy, state)

    def state_changes(self) -> dict[str, Any]:
        """The policy's patch, checked; the core gets the patch of what it journaled."""
        return self.run.core_changes(self.policy)

    def needed_checkpoints(self, view: StudyView) -> set[int] | None:
        """The policy's, checked."""
        return self.run.needed(self.policy, view)

    def stage_milestones(
        self, view: StudyView, trial_id: int | None, rng: np.random.Generator
    ) -> list[int] | None:
        """The policy's, guarded."""
        return self.run.hook(partial(self.policy.stage_milestones, view, trial_id, rng))


@dataclass
class Run:
    """The state of one :func:`check_policy` run."""

    make: Callable[[StudyContext], Policy]
    name: str
    traits: PolicyTraits
    n_views: int
    rounds: int
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
    rounds_done: int = 0  # rounds of the study under way (SLOT_FREE decisions)
    valid: dict[int, TrialView] = field(default_factory=dict)  # its trial views found valid
    context: StudyContext = PROBE_CONTEXT  # the study's, which every policy is built with

    def study(self, seed: int, space: SearchSpace) -> None:
        """Run one random study until it ends, ``rounds`` rounds have passed (each ends with
        the policy offered free slots) or ``n_views`` decisions in all were checked."""
        self.seed, self.index, self.event, self.view = seed, 0, None, None
        self.rounds_done, self.valid = 0, {}
        study = RandomStudy.draw(seed, space)
        self.context = study.context
        policy = self.make(self.context)
        checked = wrapper_type(_Checked, policy)(self, policy)
        sim = study.simulator(checked, self.traits)  # the core loads the journal's state
        try:
            sim.run()
        except _StudyOver:
            pass
        except SimulatorError:
            pass  # it does not end (nothing runs): the liveness study tells

    def liveness(self, seed: int, space: SearchSpace) -> None:
        """Run a small study from its start with the policy alone (no prelude, fault or user);
        it must start a trial and end."""
        self.seed, self.index, self.event, self.view = seed, 0, None, None
        study = RandomStudy.draw(seed, space, fresh=True)
        policy = self.make(study.context)
        sim = study.simulator(policy)
        stuck = ""
        try:
            sim.run()
        except SimulatorError as exc:
            stuck = str(exc)
        except Exception as exc:
            self._fail("exception", f"raised {_exception_text(exc)}", views=self.n_views)
        record = sim.record
        trials = list(record.trials.values())
        started = sum(bool(t.segments) for t in trials)
        num_trials = study.config.num_trials
        if not started:
            self._fail(
                "liveness",
                f"the policy never started a trial: the study {record.state.value} with none of "
                f"its {num_trials} trials run ({len(trials)} created); on SLOT_FREE a policy "
                "must place trials while the study has some to run",
                views=self.n_views,
            )
        if stuck or record.state not in _ENDED:
            counts = Counter(t.status.value for t in trials)
            shown = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            why = stuck or (
                f"after {sim.clock.now():.0f} s of simulated time (20 times what training its "
                f"{num_trials} trials to their end takes) it is still {record.state.value}"
            )
            self._fail(
                "liveness",
                f"the study did not end: {why}; its {len(trials)} trials: {shown}. A policy "
                "must let a study end (not start trials without end, nor keep trials waiting)",
                views=self.n_views,
            )

    # -- one decision ----------------------------------------------------------------------------

    def decide(
        self, policy: Policy, view: StudyView, event: Event, rng: np.random.Generator
    ) -> PolicyDecision:
        """The core asks ``policy`` to decide: check the decision and return it."""
        if self.decisions >= self.n_views:
            raise _StudyOver
        if event.kind is EventKind.SLOT_FREE:  # a round of the study ends with free slots
            self.rounds_done += 1
            if self.rounds_done > self.rounds:
                raise _StudyOver
        decision = self._decide(policy, view, event, rng)
        if event.kind is EventKind.SLOT_FREE:
            self._milestones(policy, view)
        return decision

    def _decide(
        self, policy: Policy, view: StudyView, event: Event, rng: np.random.Generator
    ) -> PolicyDecision:
        """Check one decision of ``policy``; return it."""
        self.index += 1
        self.decisions += 1
        self.event, self.view = event, view
        problems = view_problems(view, known=self.valid)
        if problems:  # a bug of hpctune's core, not of the policy
            raise RuntimeError(f"the scheduling core made an invalid view: {'; '.join(problems)}")
        self.events[event.kind.value] += 1
        self.statuses.update(t.status.value for t in view.trials.values())

        raw, before = self._state(policy)
        restored = self._restore(raw, before)
        twin = self._restore(raw, before)
        fingerprint = _fingerprint(view)
        rngs = [_same_rng(rng), _same_rng(rng)]
        ours = self._call(lambda: policy.decide(view, event, rng))
        if isinstance(ours, BaseException):
            if _is_mutation(ours):
                self._fail("no-mutation", f"decide changed the view: {_exception_text(ours)}")
            self._fail("exception", f"decide raised {_exception_text(ours)}")
        theirs = self._call(lambda: restored.decide(view, event, rngs[0]))
        again = self._call(lambda: twin.decide(view, event, rngs[1]))
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
        return ours

    # -- the core's other calls ------------------------------------------------------------------

    def load(self, policy: Policy, state: Mapping[str, Any]) -> None:
        """The core gives the policy the journal's state (a new study's: empty)."""
        loaded = self._call(lambda: policy.load_state_dict(state))
        if isinstance(loaded, BaseException):
            self._fail(
                "state-round-trip",
                f"load_state_dict({dumps(dict(state))}) (a new study's state) raised "
                f"{_exception_text(loaded)}",
            )
        self.patched = self._state(policy)[0]  # the state its next patch starts from

    def core_state(self, policy: Policy) -> dict[str, Any]:
        """The core journals the policy's whole state."""
        return self.hook(policy.state_dict)

    def core_changes(self, policy: Policy) -> dict[str, Any]:
        """A policy that tracks its changes gives the core its patch: it must turn the state as
        of its previous patch into its state now (the kit takes no patch itself: the core's
        are the ones checked)."""
        self.event, self.view = None, None
        changes = self.hook(policy.state_changes)
        raw, canonical = self._state(policy)
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
        return changes

    def needed(self, policy: Policy, view: StudyView) -> set[int] | None:
        """The core asks which ended trials' checkpoints the policy may still fork from."""
        self.event, self.view = None, view
        needed = self.hook(lambda: policy.needed_checkpoints(view))
        if needed is None:
            return None
        if not _iterable(needed) or not all(is_int(t) for t in needed):
            self._fail("legal", f"needed_checkpoints returned {needed!r}, not trial ids")
        return {int(t) for t in needed}  # ids of trials to come are allowed (replay's targets)

    def _milestones(self, policy: Policy, view: StudyView) -> None:
        """``stage_milestones`` (stage trees), asked of a copy restored from the policy's state
        (it may draw from ``rng`` and remember, as ASHA's bracket choice)."""
        self.event = None
        copy_ = self._restore(*self._state(policy))
        trial_ids: list[int | None] = [None, *list(view.trials)[-1:]]
        for trial_id in trial_ids:
            rng = np.random.default_rng([self.seed, self.index])
            steps = self.hook(partial(copy_.stage_milestones, view, trial_id, rng))
            if steps is None:
                continue
            ints = isinstance(steps, list) and all(is_int(s) for s in steps)
            if not ints or steps != sorted(set(steps)) or not _within(steps, view.max_steps):
                self._fail(
                    "legal",
                    f"stage_milestones(view, {trial_id}) returned {steps!r}, not ascending steps "
                    f"in 1..{view.max_steps}",
                )

    # -- helpers ---------------------------------------------------------------------------------

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

    def hook(self, fn: Callable[[], _T]) -> _T:
        """Run one of the policy's other methods, guarded; fail if it raises."""
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
        state = self.hook(policy.state_dict)
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

    def _fail(
        self, check: str, detail: str, actions: Any = None, views: int | None = None
    ) -> NoReturn:
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
            views=views,
        )


def _same_rng(rng: np.random.Generator) -> np.random.Generator:
    """A generator that draws what ``rng`` will draw next."""
    bits = rng.bit_generator
    same = type(bits)(0)
    same.state = bits.state
    return np.random.Generator(same)


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
    fields = [_plain(getattr(action, name)) for name in INT_FIELDS]
    return (repr(action.kind), _plain(action.priority), params, repr(action.reason), *fields)


def _plain(value: Any) -> str:
    """``repr`` of a number as Python's (numpy scalars and Python numbers alike)."""
    if is_int(value):
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


__all__ = ["PROBE_CONTEXT", "Run"]
