"""The policy conformance kit (hpctune.testing): every registered policy passes it, and every
check catches a policy built to break it. The kit's studies run on the real scheduling core, so
a test policy declares in its traits the events it acts on (the core gives it no others)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.cli import main
from hpctune.core import SchedulingCore
from hpctune.policies import (
    POLICIES,
    Action,
    AshaPolicy,
    DefaultPolicy,
    Event,
    EventKind,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
    TruncationPbtPolicy,
    make_policy,
)
from hpctune.study.states import StudyState, TrialStatus
from hpctune.testing import (
    CHECKS,
    ConformanceError,
    ForbiddenIOError,
    RandomStudy,
    check_policy,
    default_space,
    forbid_io,
    view_problems,
)
from tests.policies._views import context

PLAN = [
    {"params": {"lr": 0.1}, "seed": 1, "end_step": 3, "parent": None},
    {"params": {"lr": 0.05}, "seed": 2, "end_step": 6, "parent": 0, "parent_step": 3},
    {"params": {"lr": 0.2}, "seed": 3, "end_step": 4, "parent": None},
    {"params": {"lr": 0.01}, "seed": 4, "end_step": 9, "parent": 1, "parent_step": 6},
]
# every registered policy with its defaults (or what it needs) and with options that make it
# act within the kit's short studies (boundaries of 1-5 steps, 4-40 steps per trial)
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("default", {}),
    ("bandit", {}),
    ("bandit", {"boundary": 2, "epsilon": 0.2}),
    ("sha", {}),
    ("sha", {"reduction_factor": 2, "bracket_size": 3}),
    ("asha", {}),
    ("asha", {"brackets": 3, "reduction_factor": 2}),
    ("hyperband", {}),
    ("hyperband", {"reduction_factor": 2, "grace_period": 2}),
    ("median", {}),
    ("median", {"hard_stop": False, "min_samples_required": 1, "min_time_slice": 2}),
    ("median", {"yield_slots": True, "min_time_slice": 1}),
    ("pop", {"boundary": 2}),
    ("pop", {"boundary": 1, "target": 0.8, "t_max": 100.0, "kill_threshold": 0.2}),
    ("earlyterm", {"boundary": 2}),
    ("hybrid", {}),
    ("hybrid", {"check_every": 1, "reduction_factor": 2, "noise_guard": 0.0, "rungs": 2}),
    ("hybrid", {"adaptive": True}),
    ("hybrid", {"adaptive": True, "probes": 3, "min_pairs": 3, "reliable": -1.0}),
    ("freeze-thaw", {}),
    ("freeze-thaw", {"segment": 0.25, "first": 2, "candidates": 4, "lookahead": False}),
    ("one-epoch", {}),
    ("one-epoch", {"screen": 2, "screened": 4, "top_k": 2}),
    ("pbt", {"population_size": 4, "steps_per_generation": 3}),
    (
        "pbt",
        {
            "population_size": 3,
            "steps_per_generation": 2,
            "budget": True,
            "objectives": ["aux:min", "accuracy"],
            "comparison": "pareto",
        },
    ),
    ("pbt-truncation", {"population_size": 4, "perturbation_interval": 2}),
    ("replay", {"trials": PLAN}),
]


def _events_for(traits: PolicyTraits) -> set[str]:
    """The event kinds the scheduling core gives a policy with ``traits``."""
    kinds = {EventKind.SLOT_FREE}
    if traits.wants_boundaries or traits.boundary_decisions:
        kinds.add(EventKind.BOUNDARY)
    if traits.wants_reports:
        kinds.add(EventKind.REPORT)
    if traits.wants_predictions:
        kinds.add(EventKind.PREDICTION)
    return {kind.value for kind in kinds}


def _id(config: tuple[str, dict[str, Any]]) -> str:
    name, options = config
    return f"{name}-{'-'.join(f'{k}={v}' for k, v in options.items() if k != 'trials')}"


def test_every_registered_policy_is_in_the_conformance_run() -> None:
    assert {name for name, _ in CONFIGS} == set(POLICIES)


@pytest.mark.parametrize("config", CONFIGS, ids=[_id(c) for c in CONFIGS])
def test_registered_policy_conforms(config: tuple[str, dict[str, Any]]) -> None:
    name, options = config
    report = check_policy(lambda ctx: make_policy(name, options, ctx), seed=100, n_views=250)
    assert report.policy == name
    assert report.decisions == 250
    assert report.checks == CHECKS
    traits = make_policy(name, options, context()).traits
    assert set(report.events) == _events_for(traits)  # every event kind the core gives it
    assert report.actions  # the policy acted


def test_the_studies_show_trials_in_every_status() -> None:
    report = check_policy(DefaultPolicy, seed=3, n_views=300)
    assert set(report.statuses) == {status.value for status in TrialStatus}


# -- policies built to fail one check each ----------------------------------------------------


class OverPlacing(DefaultPolicy):
    """Starts one trial more than there are free slots."""

    name: ClassVar[str] = "over-placing"

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of([Action.start() for _ in range(event.free_slots + 1)])
        return PolicyDecision()


class Reading(DefaultPolicy):
    """Does I/O when a trial reports: ``action`` says which."""

    name: ClassVar[str] = "reading"
    traits: ClassVar[PolicyTraits] = dataclasses.replace(DefaultPolicy.traits, wants_reports=True)
    action: ClassVar[Callable[[], Any]] = staticmethod(lambda: open(os.devnull).close())

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is EventKind.REPORT:
            with contextlib.suppress(OSError):  # swallowing the refusal hides nothing
                type(self).action()
        return super().decide(view, event, rng)


class ClockReading(DefaultPolicy):
    """Reads the wall clock instead of ``view.now``."""

    name: ClassVar[str] = "clock-reading"

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is EventKind.SLOT_FREE and time.monotonic() < 0:
            return PolicyDecision()
        return super().decide(view, event, rng)


class SetState(DefaultPolicy):
    """Keeps a set in its state: not JSON."""

    name: ClassVar[str] = "set-state"

    def __init__(self, context: StudyContext) -> None:
        super().__init__(context)
        self.seen: set[int] = set()

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.trial_id is not None:
            self.seen.add(event.trial_id)
        return super().decide(view, event, rng)

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen}


class Forgetful(DefaultPolicy):
    """Journals a counter but ignores it when restored."""

    name: ClassVar[str] = "forgetful"

    def __init__(self, context: StudyContext) -> None:
        super().__init__(context)
        self.decisions = 0

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        self.decisions += 1
        return super().decide(view, event, rng)

    def state_dict(self) -> dict[str, Any]:
        return {"decisions": self.decisions}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class HiddenState(DefaultPolicy):
    """Remembers what it started without journaling it: it starts one trial in all."""

    name: ClassVar[str] = "hidden-state"

    def __init__(self, context: StudyContext) -> None:
        super().__init__(context)
        self.started = False

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is not EventKind.SLOT_FREE or self.started:
            return PolicyDecision()
        self.started = True
        return PolicyDecision.of([Action.start()])


#: Default's traits, but it is given BOUNDARY events (policies that act at boundaries).
AT_BOUNDARIES = dataclasses.replace(DefaultPolicy.traits, wants_boundaries=True)


class Nondeterministic(DefaultPolicy):
    """Draws priorities from Python's global generator instead of ``rng``."""

    name: ClassVar[str] = "nondeterministic"
    traits: ClassVar[PolicyTraits] = AT_BOUNDARIES

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is EventKind.BOUNDARY and event.trial_id is not None:
            return PolicyDecision.of([Action.continue_(event.trial_id, priority=random.random())])
        return super().decide(view, event, rng)


class TerminatesEnded(DefaultPolicy):
    """Terminates trials that have completed already."""

    name: ClassVar[str] = "terminates-ended"

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        done = view.with_status(TrialStatus.COMPLETED)
        return PolicyDecision.of(
            [Action.terminate(t.trial_id) for t in done]
            + list(super().decide(view, event, rng).actions)
        )


class Misplacing(DefaultPolicy):
    """Places trials the controller cannot place; ``mistake`` says how."""

    name: ClassVar[str] = "misplacing"
    traits: ClassVar[PolicyTraits] = AT_BOUNDARIES
    mistake: ClassVar[str] = "resume-running"

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        running = view.with_status(TrialStatus.RUNNING)
        if self.mistake == "start-at-boundary" and event.kind is EventKind.BOUNDARY:
            return PolicyDecision.of([Action.start()])
        if self.mistake == "continue-other" and event.kind is EventKind.BOUNDARY:
            return PolicyDecision.of([Action.continue_(t.trial_id) for t in running])
        if event.kind is not EventKind.SLOT_FREE:
            return PolicyDecision()
        if self.mistake == "resume-running" and running:
            return PolicyDecision.of([Action.resume(running[0].trial_id)])
        if self.mistake == "fork-without-checkpoint":
            bare = [t for t in view.trials.values() if t.checkpoint_step is None]
            return PolicyDecision.of(
                [Action.fork(bare[0].trial_id, 1, {"lr": 0.1})] if bare else []
            )
        if self.mistake == "too-many-starts":
            return PolicyDecision.of([Action.start() for _ in range(event.free_slots)])
        return PolicyDecision()


class Raising(DefaultPolicy):
    """Fails on learning-curve predictions: takes ``view.trials`` for a list."""

    name: ClassVar[str] = "raising"
    traits: ClassVar[PolicyTraits] = dataclasses.replace(
        DefaultPolicy.traits, wants_predictions=True
    )

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is EventKind.PREDICTION:
            return PolicyDecision.of([Action.terminate(view.trials[-1].trial_id)])
        return super().decide(view, event, rng)


def _caught(make: Callable[[StudyContext], Policy], check: str) -> ConformanceError:
    """Check that the kit catches ``make``'s policy with ``check``, reproducibly."""
    with pytest.raises(ConformanceError) as info:
        check_policy(make, seed=7, n_views=300)
    err = info.value
    assert err.check == check, str(err)
    assert err.policy == make(context()).name
    assert f"failed the check {check!r}" in str(err)
    assert f"seed={err.seed}, n_views={err.views}" in str(err)
    with pytest.raises(ConformanceError) as again:  # the reproducer fails at the same decision
        check_policy(make, seed=err.seed, n_views=err.views)
    assert (again.value.check, again.value.decision, again.value.event) == (
        check,
        err.decision,
        err.event,
    )
    return err


def test_more_placements_than_free_slots_are_caught() -> None:
    err = _caught(OverPlacing, "slots")
    assert err.event is not None
    assert err.event.kind is EventKind.SLOT_FREE
    free = err.event.free_slots
    assert f"with {free} free slot{'' if free == 1 else 's'}" in err.detail


@pytest.mark.parametrize(
    ("action", "what"),
    [
        (lambda: open(os.devnull).close(), "open"),
        (lambda: os.listdir("."), "os.listdir"),
        (lambda: socket.socket().close(), "socket.__new__"),
        (lambda: subprocess.run(["true"], check=False), "subprocess.Popen"),
        (lambda: time.sleep(0), "time.sleep"),
    ],
    ids=["file", "directory", "socket", "process", "sleep"],
)
def test_io_is_caught_and_refused(action: Callable[[], Any], what: str) -> None:
    policy_class = type("Reading", (Reading,), {"action": staticmethod(action)})
    err = _caught(policy_class, "no-io")
    assert err.event is not None
    assert err.event.kind is EventKind.REPORT
    assert what in err.detail


def test_reading_the_clock_is_caught() -> None:
    err = _caught(ClockReading, "no-clock")
    assert "time.monotonic" in err.detail


def test_a_state_that_is_not_json_is_caught() -> None:
    err = _caught(SetState, "state-json")
    assert "set" in err.detail


def test_a_state_that_does_not_round_trip_is_caught() -> None:
    err = _caught(Forgetful, "state-round-trip")
    assert '{"decisions": 0}' in err.detail


def test_state_missing_from_the_journal_is_caught_at_restart() -> None:
    err = _caught(HiddenState, "restart")
    assert "uninterrupted: []" in err.detail


class ForgetsClones(TruncationPbtPolicy):
    """Ray's PBT without its waiting clones in the journal."""

    def __init__(self, context: StudyContext) -> None:
        options = TruncationPbtPolicy.Options(population_size=4, perturbation_interval=2)
        super().__init__(context, options)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "pending": []}


def test_a_registered_policy_missing_part_of_its_state_fails_restart() -> None:
    err = _caught(ForgetsClones, "restart")
    assert "FORK" in err.detail  # the uninterrupted one forks a clone, the restored one cannot


class ForgetsStops(AshaPolicy):
    """ASHA whose patches leave out the trials it stopped."""

    def state_changes(self) -> dict[str, Any]:
        patch = super().state_changes()
        for bracket in patch.get("sub", {}).get("brackets", {}).get("sub", {}).values():
            bracket["sub"].pop("stopped", None)
        return patch


def test_a_patch_that_leaves_out_a_change_is_caught() -> None:
    err = _caught(ForgetsStops, "state-changes")
    assert "but the state is" in err.detail


class NeedsState(DefaultPolicy):
    """Cannot start from a new study's empty state."""

    name: ClassVar[str] = "needs-state"

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.count = int(state["count"])

    def state_dict(self) -> dict[str, Any]:
        return {"count": 0}


def test_a_policy_that_cannot_load_an_empty_state_is_caught() -> None:
    err = _caught(NeedsState, "state-round-trip")
    assert "load_state_dict({}) (a new study's state) raised KeyError" in err.detail


class Mutating(DefaultPolicy):
    """Changes the view it is given: ``how`` says what."""

    name: ClassVar[str] = "mutating"
    traits: ClassVar[PolicyTraits] = AT_BOUNDARIES
    how: ClassVar[str] = "params"

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        trial = view.trials.get(event.trial_id) if event.trial_id is not None else None
        if trial is not None and self.how == "params":
            trial.params["seen"] = True  # type: ignore[index]
        elif trial is not None and self.how == "values":
            trial.values.sort()
        elif trial is not None and self.how == "trials":
            view.trials[trial.trial_id] = trial  # type: ignore[index]
        return super().decide(view, event, rng)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("params", "changed the parameters, metrics or info of trials ["),
        ("values", "read-only"),
        ("trials", "mappingproxy"),
    ],
)
def test_changing_the_view_is_caught(how: str, message: str) -> None:
    err = _caught(type("Mutating", (Mutating,), {"how": how}), "no-mutation")
    assert message in err.detail


def test_nondeterminism_is_caught() -> None:
    err = _caught(Nondeterministic, "determinism")
    assert err.event is not None
    assert err.event.kind is EventKind.BOUNDARY


def test_acting_on_an_ended_trial_is_caught() -> None:
    err = _caught(TerminatesEnded, "legal")
    assert "has ended (completed)" in err.detail
    assert err.view is not None
    assert err.actions is not None


@pytest.mark.parametrize(
    ("mistake", "message"),
    [
        ("resume-running", "cannot resume a running trial"),
        ("fork-without-checkpoint", "has no checkpoint at step 1"),
        ("too-many-starts", "but trials_remaining is"),
        ("start-at-boundary", "placed only on SLOT_FREE"),
        ("continue-other", "continues only that trial"),
    ],
)
def test_illegal_actions_are_caught(mistake: str, message: str) -> None:
    policy_class = type("Misplacing", (Misplacing,), {"mistake": mistake})
    err = _caught(policy_class, "legal")
    assert message in err.detail


def test_an_exception_in_decide_is_caught() -> None:
    err = _caught(Raising, "exception")
    assert "KeyError" in err.detail
    assert "test_conformance.py" in err.detail


# -- the parts: views, the I/O guard ------------------------------------------------------------


class Recording(DefaultPolicy):
    """Default, keeping every view and event the core gives it; it asks for forks' fields
    (the prelude forks for it), predictions and boundaries."""

    name: ClassVar[str] = "recording"
    traits: ClassVar[PolicyTraits] = dataclasses.replace(
        DefaultPolicy.traits,
        wants_boundaries=True,
        wants_predictions=True,
        makes_configurations=True,
    )

    def __init__(self, context: StudyContext) -> None:
        super().__init__(context)
        self.seen: list[tuple[StudyView, Event]] = []

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        self.seen.append((view, event))
        return super().decide(view, event, rng)


def _recorded(seed: int) -> tuple[Recording, StudyState]:
    """A random study of the kit run to its end under :class:`Recording`."""
    study = RandomStudy.draw(seed, default_space())
    policy = Recording(study.context)
    sim = study.simulator(policy)
    sim.run()
    return policy, sim.record.state


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_kits_studies_give_valid_views(seed: int) -> None:
    """The real core's views of the kit's random studies are valid, and the studies end (the
    policy may see none: a prelude that ends its study before taking it over)."""
    policy, state = _recorded(seed)
    assert state in (StudyState.FINISHED, StudyState.STOPPED, StudyState.FAILED)
    for view, event in policy.seen:
        assert view_problems(view) == []
        assert event.trial_id is None or event.trial_id in view.trials


def test_view_problems_finds_impossible_views() -> None:
    policy, _ = _recorded(4)
    view = next(v for v, _ in policy.seen if any(t.step > 0 for t in v.trials.values()))
    assert view_problems(view) == []
    trial = next(t for t in view.trials.values() if t.step > 0)
    bad_trial = dataclasses.replace(trial, checkpoint_step=trial.step + 1)
    bad = dataclasses.replace(view, trials={**view.trials, trial.trial_id: bad_trial})
    assert view_problems(bad) == [
        f"trial {trial.trial_id}: checkpoint at {trial.step + 1} after step {trial.step}"
    ]
    too_free = dataclasses.replace(view, free_slots=view.total_slots + 1)
    assert "free slots" in view_problems(too_free)[0]


def test_the_kit_runs_the_real_scheduling_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kit's studies are iterations of the controller's own core (no stand-in)."""
    steps = []
    step = SchedulingCore.step

    def counted(self: SchedulingCore) -> bool:
        steps.append(self)
        return step(self)

    monkeypatch.setattr(SchedulingCore, "step", counted)
    report = check_policy(DefaultPolicy, n_views=20)
    assert report.decisions == 20
    assert len({id(core) for core in steps}) > report.studies  # and the liveness study's


# -- liveness ---------------------------------------------------------------------------------


class NeverStarts(DefaultPolicy):
    """Decides nothing, ever: on free slots it places no trial."""

    name: ClassVar[str] = "never-starts"

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        return PolicyDecision()


class NeverEnds(DefaultPolicy):
    """Fills every free slot with a new configuration of its own, without end (a START with
    parameters is not counted against the study's trials)."""

    name: ClassVar[str] = "never-ends"

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is not EventKind.SLOT_FREE or view.space is None:
            return PolicyDecision()
        params = [dict(view.space.sample(rng)) for _ in range(event.free_slots)]
        return PolicyDecision.of([Action.start(params=p) for p in params])


def test_a_policy_that_never_starts_a_trial_fails_liveness() -> None:
    err = _caught(NeverStarts, "liveness")
    assert "never started a trial" in err.detail
    assert "run from its start" in str(err)
    assert err.views == 300  # the whole run reproduces it


def test_a_policy_that_never_lets_a_study_end_fails_liveness() -> None:
    err = _caught(NeverEnds, "liveness")
    assert "the study did not end" in err.detail
    assert "running" in err.detail


def test_forbid_io_refuses_this_thread_only_and_allows_imports(tmp_path: Path) -> None:
    seen: list[BaseException | None] = []

    def other_thread() -> None:
        try:
            open(os.devnull).close()
            seen.append(None)
        except BaseException as exc:
            seen.append(exc)

    written = tmp_path / "written"
    with forbid_io() as violations:
        with pytest.raises(ForbiddenIOError), open(written, "w"):
            pass
        with pytest.raises(ForbiddenIOError):
            time.time()
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        import json.tool  # noqa: F401  (an import reads files: allowed)
    assert [v.what for v in violations] == ["open", "time.time"]
    assert not written.exists()  # refused, not only recorded
    assert seen == [None]
    open(os.devnull).close()  # nothing refused after the block
    assert time.time() > 0


# -- the command ------------------------------------------------------------------------------


def test_check_policy_command_passes_a_registered_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["check-policy", "asha", "--options", '{"reduction_factor": 2}', "--views", "40"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"policy 'asha' passed {len(CHECKS)} checks" in out
    assert "on 40 decisions" in out


def test_check_policy_command_names_the_failing_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = "tests.policies.test_conformance:OverPlacing"
    assert main(["check-policy", target, "--views", "60", "--seed", "3"]) == 1
    out = capsys.readouterr().out
    assert "failed the check 'slots'" in out
    reproduce = out.splitlines()[-1].split()
    assert reproduce[:3] == ["reproduce:", "hpctune", "check-policy"]
    assert reproduce[3:5] == [target, "--seed"]
    assert main(reproduce[2:]) == 1  # the command it prints fails the same way
    assert capsys.readouterr().out.splitlines()[0] == out.splitlines()[0]


def test_check_policy_command_takes_factories_and_class_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    factory = ["hpctune.policies:make_policy", "--options", '{"name": "sha", "options": {}}']
    assert main(["check-policy", *factory, "--views", "20"]) == 0
    median = ["hpctune.policies.median:MedianStoppingPolicy", "--options", '{"hard_stop": false}']
    assert main(["check-policy", *median, "--views", "20"]) == 0
    assert "policy 'median' passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuch"], "unknown policy 'nosuch'"),
        (["nosuch_module:Policy"], "cannot import 'nosuch_module'"),
        (["hpctune.policies:NoSuch"], "has no 'NoSuch'"),
        (["hpctune.policies:POLICIES"], "not a Policy subclass"),
        (["sha", "--options", "{bad"], "is not JSON"),
        (["sha", "--options", "[1]"], "must be a JSON object"),
        (["sha", "--options", '{"eta": 3}'], "unknown option"),
        (["replay"], "refuses the search space"),
        (["sha", "--views", "0"], "--views"),
    ],
)
def test_check_policy_command_exits_2_on_bad_arguments(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-policy", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.out + captured.err


def test_the_report_counts_every_decision() -> None:
    report = check_policy(DefaultPolicy, n_views=30)
    assert sum(report.events.values()) == report.decisions == 30
    assert f"passed {len(CHECKS)} checks" in report.summary()
