"""The policy interface: pure schedulers fed frozen views of a study, returning decisions.

A policy is built with its study's :class:`StudyContext` and declares what it can do in its
:class:`PolicyTraits`. It sees a read-only :class:`StudyView` and one :class:`Event` at a time
(HyperDrive's up-calls, §4.2 of the paper: *AllocateJobs* is :attr:`EventKind.SLOT_FREE`,
*ApplicationStat* is :attr:`EventKind.REPORT`, *OnIterationFinish* is
:attr:`EventKind.BOUNDARY`) and returns a :class:`PolicyDecision` (its :class:`Action` list and
what goes with it). It does no I/O, reads no clock (the view carries the time) and draws random
numbers only from the generator it is given. The same object runs under the local executor, on
Slurm and in the simulator. Whatever it must remember across restarts goes through
:meth:`Policy.state_dict`, which the controller writes to the journal.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

import numpy as np

from hpctune.errors import HpctuneError
from hpctune.study.states import Mode, TrialStatus

if TYPE_CHECKING:
    from hpctune.curves.predict import CurvePrediction
    from hpctune.study.space import SearchSpace


class OptionError(HpctuneError, ValueError):
    """An option of a policy or generator is invalid (bad input: exit code 2).

    Args:
        key: The option's name (as written under ``[policy]`` or ``[generator]``).
        message: What must hold and what was given.
    """

    exit_code = 2

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


class EventKind(Enum):
    """What happened, from the policy's point of view."""

    SLOT_FREE = "slot_free"  # HyperDrive's AllocateJobs: idle workers wait for work
    REPORT = "report"  # ApplicationStat: a trial reported metrics
    BOUNDARY = "boundary"  # OnIterationFinish: a trial reached an evaluation boundary
    PREDICTION = "prediction"  # a new learning-curve prediction of a trial is in the view


@dataclass(frozen=True)
class Event:
    """One up-call to the policy.

    Attributes:
        kind: What happened.
        trial_id: The trial concerned (REPORT, BOUNDARY).
        step: The step reported or reached (REPORT, BOUNDARY).
        free_slots: How many workers are idle (SLOT_FREE).
    """

    kind: EventKind
    trial_id: int | None = None
    step: int | None = None
    free_slots: int = 0

    @classmethod
    def slot_free(cls, free_slots: int) -> Event:
        """Idle workers are waiting for assignments."""
        return cls(EventKind.SLOT_FREE, free_slots=free_slots)

    @classmethod
    def report(cls, trial_id: int, step: int) -> Event:
        """Trial ``trial_id`` reported metrics for ``step``."""
        return cls(EventKind.REPORT, trial_id=trial_id, step=step)

    @classmethod
    def boundary(cls, trial_id: int, step: int) -> Event:
        """Trial ``trial_id`` reached the evaluation boundary at ``step``."""
        return cls(EventKind.BOUNDARY, trial_id=trial_id, step=step)

    @classmethod
    def prediction(cls, trial_id: int, step: int) -> Event:
        """A prediction of ``trial_id`` fitted on its curve up to ``step`` arrived."""
        return cls(EventKind.PREDICTION, trial_id=trial_id, step=step)


class ActionKind(Enum):
    """What a policy can ask the controller to do."""

    START = "start"  # a new trial from the generator (or with given params) on a free slot
    CONTINUE = "continue"  # keep training a running trial
    SUSPEND = "suspend"  # stop a running trial at its boundary, keep its checkpoint
    RESUME = "resume"  # put a queued or suspended trial on a free slot
    TERMINATE = "terminate"  # stop a trial for good
    FORK = "fork"  # a new trial from another trial's checkpoint (PBT, stage trees)


@dataclass(frozen=True)
class Action:
    """One decision of a policy. Build them with the class methods.

    Attributes:
        kind: The kind of action.
        trial_id: The trial acted on (CONTINUE, SUSPEND, RESUME, TERMINATE) or the parent (FORK).
        priority: Higher runs first when slots are scarce (HyperDrive's ``labelJob``).
        params: Hyperparameters of the new trial (START with explicit params, FORK).
        step: FORK: the parent's checkpoint step to start from.
        until_step: How far the assignment trains; ``None`` means the trial's last step.
        reason: A short text for the journal and the logs.
        end_step: START, FORK: the step at which the new trial is complete (a PBT trial is a
            short session); ``None``: the study's ``max_steps``.
        generation: START, FORK: the new trial's generation (PBT), recorded in the journal.
        initiator: START, FORK: the trial whose reproduction created the new trial (PBT's
            initiator; not always the parent).
        seed: START, FORK: the new trial's seed (replay); ``None``: derived from the study's
            seed and the trial id.
    """

    kind: ActionKind
    trial_id: int | None = None
    priority: float = 0.0
    params: Mapping[str, Any] | None = None
    step: int | None = None
    until_step: int | None = None
    reason: str = ""
    end_step: int | None = None
    generation: int | None = None
    initiator: int | None = None
    seed: int | None = None

    @classmethod
    def start(
        cls,
        *,
        params: Mapping[str, Any] | None = None,
        priority: float = 0.0,
        until_step: int | None = None,
        reason: str = "",
        end_step: int | None = None,
        generation: int | None = None,
        initiator: int | None = None,
        seed: int | None = None,
    ) -> Action:
        """Start a new trial: the generator's next configuration unless ``params`` are given."""
        return cls(
            ActionKind.START,
            params=params,
            priority=priority,
            until_step=until_step,
            reason=reason,
            end_step=end_step,
            generation=generation,
            initiator=initiator,
            seed=seed,
        )

    @classmethod
    def continue_(cls, trial_id: int, *, priority: float = 0.0, reason: str = "") -> Action:
        """Keep ``trial_id`` training."""
        return cls(ActionKind.CONTINUE, trial_id=trial_id, priority=priority, reason=reason)

    @classmethod
    def suspend(cls, trial_id: int, *, priority: float = 0.0, reason: str = "") -> Action:
        """Stop ``trial_id`` at its boundary and keep it resumable."""
        return cls(ActionKind.SUSPEND, trial_id=trial_id, priority=priority, reason=reason)

    @classmethod
    def resume(
        cls,
        trial_id: int,
        *,
        priority: float = 0.0,
        until_step: int | None = None,
        reason: str = "",
    ) -> Action:
        """Run the queued or suspended ``trial_id`` on a free slot."""
        return cls(
            ActionKind.RESUME,
            trial_id=trial_id,
            priority=priority,
            until_step=until_step,
            reason=reason,
        )

    @classmethod
    def terminate(cls, trial_id: int, *, reason: str = "") -> Action:
        """Stop ``trial_id`` for good."""
        return cls(ActionKind.TERMINATE, trial_id=trial_id, reason=reason)

    @classmethod
    def fork(
        cls,
        parent_id: int,
        step: int,
        params: Mapping[str, Any],
        *,
        priority: float = 0.0,
        until_step: int | None = None,
        reason: str = "",
        end_step: int | None = None,
        generation: int | None = None,
        initiator: int | None = None,
        seed: int | None = None,
    ) -> Action:
        """Start a new trial from ``parent_id``'s checkpoint at ``step`` with ``params``."""
        return cls(
            ActionKind.FORK,
            trial_id=parent_id,
            step=step,
            params=params,
            priority=priority,
            until_step=until_step,
            reason=reason,
            end_step=end_step,
            generation=generation,
            initiator=initiator,
            seed=seed,
        )


@dataclass(frozen=True)
class PolicyDecision:
    """What a policy decided on one event: its actions, and what the controller asks with them.

    Build one with :meth:`of`. The controller carries the actions out in order.

    Attributes:
        actions: The actions (a tuple; :meth:`of` takes any iterable).
        hold_idle_workers: SLOT_FREE: keep idle workers waiting when the actions leave some
            without work, because running trials will make new work when they end (PBT: the
            next assignment runs in the same worker, no new job, no queue wait). ``False``
            (the default): idle workers without work exit.
    """

    actions: tuple[Action, ...] = ()
    hold_idle_workers: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.actions, tuple):
            object.__setattr__(self, "actions", tuple(self.actions))

    @classmethod
    def of(
        cls, actions: Iterable[Action] = (), *, hold_idle_workers: bool = False
    ) -> PolicyDecision:
        """A decision of ``actions`` (a list, a generator, ...)."""
        return cls(tuple(actions), hold_idle_workers)


_EMPTY = np.zeros(0)


@dataclass(frozen=True)
class TrialView:
    """A frozen picture of one trial.

    Attributes:
        trial_id: The trial's id (0, 1, 2, ... in creation order).
        status: Its current status.
        params: Its hyperparameters as stored (schedules as dicts).
        step: The last step it reported (its start step if none yet).
        steps: Steps of its curve of the study's metric (the valid rows only).
        values: The metric at those steps (raw, in the metric's own direction).
        times: Study-relative seconds at which those values were reported.
        checkpoint_step: The step of its latest checkpoint, or ``None``.
        parent_trial: The trial it was forked from, or ``None``.
        parent_step: The parent's step it started from, or ``None``.
        priority: The priority the policy gave it last.
        retries: How often it was restarted after a lost worker.
        info: Free-form data set by the generator or policy.
        end_step: The step at which the trial is complete (``None``: the study's
            ``max_steps``).
        generation: Its generation (PBT), ``None`` if the policy gave none.
        initiator: The trial whose reproduction created it (PBT), or ``None``.
        last_metrics: The latest reported value of each metric (fitness tuples).
    """

    trial_id: int
    status: TrialStatus
    params: Mapping[str, Any]
    step: int = 0
    steps: np.ndarray = field(default_factory=lambda: _EMPTY)
    values: np.ndarray = field(default_factory=lambda: _EMPTY)
    times: np.ndarray = field(default_factory=lambda: _EMPTY)
    checkpoint_step: int | None = None
    parent_trial: int | None = None
    parent_step: int | None = None
    priority: float = 0.0
    retries: int = 0
    info: Mapping[str, Any] = field(default_factory=dict)
    end_step: int | None = None
    generation: int | None = None
    initiator: int | None = None
    last_metrics: Mapping[str, float] = field(default_factory=dict)

    @property
    def last_value(self) -> float:
        """The last reported metric value, NaN if none."""
        return float(self.values[-1]) if len(self.values) else math.nan


@dataclass(frozen=True)
class StudyView:
    """A frozen picture of the study, the only input of a policy besides the event.

    Attributes:
        metric: The name of the metric the study optimises.
        mode: ``"max"`` or ``"min"``.
        max_steps: The last step of a trial.
        boundary: The evaluation boundary, in steps.
        now: Seconds since the study started (the controller's clock).
        trials: Every trial by id.
        free_slots: Idle workers right now.
        total_slots: Workers the study may hold.
        trials_remaining: New trials the generator may still create (``None``: unbounded).
        predictions: The latest learning-curve prediction of each trial that has one (only for
            policies with the trait ``wants_predictions``); it may be older than the trial's
            last report: its ``n`` tells how many points it used.
        bounds: ``(low, high)``: the metric's range (the study's ``metric_bounds``).
        random_level: The metric of a model that learnt nothing, if the study declares it.
        space: The study's search space (``None`` in the simulator, whose trace fixes the
            configurations); policies that make configurations (PBT) need it.
        objectives: ``(metric, mode)`` of each objective of a multi-objective study (``[study]
            objectives``); empty for a study with one metric.
    """

    metric: str
    mode: Mode
    max_steps: int
    boundary: int
    now: float
    trials: Mapping[int, TrialView]
    free_slots: int
    total_slots: int
    trials_remaining: int | None
    predictions: Mapping[int, CurvePrediction] = field(default_factory=dict)
    bounds: tuple[float, float] = (0.0, 1.0)
    random_level: float | None = None
    space: SearchSpace | None = None
    objectives: tuple[tuple[str, str], ...] = ()

    @property
    def sign(self) -> float:
        """+1 for ``max``, -1 for ``min``: multiply values by it so that larger is better."""
        return 1.0 if self.mode == "max" else -1.0

    def with_status(self, *statuses: TrialStatus) -> list[TrialView]:
        """The trials in any of ``statuses``, by id."""
        return sorted(
            (t for t in self.trials.values() if t.status in statuses), key=lambda t: t.trial_id
        )


@dataclass(frozen=True)
class StudyContext:
    """What a policy knows of its study from the start: it is built with it and sets itself
    up in its constructor (rungs, brackets), never on its first decision.

    Built from the study's spec by :func:`hpctune.spec.study_context` (the controller,
    the spec's own checks), from the simulated study by the simulator and from each random
    study by the conformance kit. Every view the policy is given agrees with it.

    Attributes:
        max_steps: The last step of a trial.
        mode: ``"max"`` or ``"min"``.
        boundary: The evaluation boundary, in steps.

    Raises:
        ValueError: ``max_steps`` or ``boundary`` below 1, or a mode other than max or min.
    """

    max_steps: int
    mode: Mode = "max"
    boundary: int = 1

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.boundary < 1:
            raise ValueError(
                f"a study context needs max_steps >= 1 and boundary >= 1, but got "
                f"max_steps={self.max_steps}, boundary={self.boundary}"
            )
        if self.mode not in ("max", "min"):
            raise ValueError(f'a study context\'s mode must be "max" or "min", not {self.mode!r}')


@dataclass(frozen=True)
class PolicyTraits:
    """What a policy can do and wants, as data the controller, simulator and stage trees read.

    The core never asks a policy's name: each capability is a field here, declared once per
    policy class (:attr:`Policy.traits`).

    Attributes:
        boundary_decisions: The policy acts at boundaries (continue, suspend, terminate), so a
            worker waits for its decision there; ``False`` when it never does (segments end
            where the policy asked, ``until_step``).
        wants_predictions: It gets learning-curve fits of its trials' curves at boundaries
            (:meth:`Policy.wants_fit`), asynchronously: a PREDICTION event and
            ``view.predictions`` once a fit is done.
        wants_reports: REPORT events (reports between boundaries) reach it (none of the
            registered policies decides there; the controller then builds no view for them).
        wants_boundaries: BOUNDARY events reach it even without :attr:`boundary_decisions`
            (``False``: Default, which decides nothing at boundaries).
        makes_configurations: It creates trials with configurations of its own (forks,
            explicit parameters: PBT, replay) and names the checkpoints it may still fork
            from (:meth:`Policy.needed_checkpoints`); in the trace-driven simulator a forked
            trial goes on along the recorded configuration nearest to its parameters.
        tracks_state_changes: It gives the patches of its state itself
            (:meth:`Policy.state_changes`), so a commit journals the change alone (ASHA).
        admits_every_trial: Over a stage tree the controller admits every trial of the study
            itself (the generator's, up to ``num_trials``) and asks the policy nothing, as
            Default's grid and random searches want.
        runs_on_stage_trees: The policy can run over a stage tree (``[stages] enabled``): it
            admits every trial, asks for trials trained to a step (``until_step``), judges
            trials at known steps (:meth:`Policy.stage_milestones`) or forks from checkpoints.
        rungs_known: Its rungs are known before anything runs (how many trials each trains,
            to which step: SHA, Hyperband, ASHA), so the elastic planner can plan a deadline
            for it (``[resources] deadline``, :mod:`hpctune.elastic.experiment`).
    """

    boundary_decisions: bool = True
    wants_predictions: bool = False
    wants_reports: bool = False
    wants_boundaries: bool = True
    makes_configurations: bool = False
    tracks_state_changes: bool = False
    admits_every_trial: bool = False
    runs_on_stage_trees: bool = False
    rungs_known: bool = False


class Policy(abc.ABC):
    """Base class of all policies (schedulers).

    Contract: :meth:`decide` is a pure function of the view, the event, the generator and the
    policy's own state; it does no I/O and never reads a clock. It returns only actions the
    controller can carry out (at most ``event.free_slots`` START/RESUME/FORK actions on a
    SLOT_FREE event; CONTINUE, SUSPEND or TERMINATE for the trial of a BOUNDARY event).

    Subclasses set :attr:`name`, may declare an ``Options`` dataclass (parsed by
    :func:`parse_options`) and declare what they can do and want in :attr:`traits` (a
    :class:`PolicyTraits`; the default: decisions at boundaries, no predictions, no forks).
    A policy is built with its study's :class:`StudyContext` (``Policy(context, options)``)
    and sets itself up there: nothing waits for the first view.

    Args:
        context: The study the policy schedules (kept as :attr:`context`).
    """

    name: ClassVar[str] = ""
    traits: ClassVar[PolicyTraits] = PolicyTraits()

    def __init__(self, context: StudyContext) -> None:
        self.context = context

    @classmethod
    def from_options(cls, context: StudyContext, options: Mapping[str, Any]) -> Self:
        """Build the policy for ``context`` from its options (the ``[policy]`` table without
        ``name``): ``cls(context, parsed)`` with its ``Options`` dataclass parsed by
        :func:`parse_options`, or ``cls(context)`` for a policy without one.

        Raises:
            OptionError: An option is unknown or invalid (``key`` names which).
        """
        options_type = getattr(cls, "Options", None)
        if options_type is None:
            for key in options:
                raise OptionError(
                    key, f"unknown option; {cls.__name__} has no Options dataclass, so no options"
                )
            return cls(context)
        return cls(context, parse_options(options_type, options))  # type: ignore[call-arg]

    @abc.abstractmethod
    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Return the decision on ``event``: its actions (:meth:`PolicyDecision.of`) and, on
        SLOT_FREE, whether idle workers without work wait
        (:attr:`PolicyDecision.hold_idle_workers`)."""

    def wants_fit(self, step: int) -> bool:
        """Whether a trial reaching ``step`` should get a new learning-curve fit."""
        return self.traits.wants_predictions

    def state_dict(self) -> dict[str, Any]:
        """Return the policy's state as JSON-able data (empty for stateless policies)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: B027
        """Restore the state returned by :meth:`state_dict`."""

    def state_changes(self) -> dict[str, Any]:
        """For policies with the trait ``tracks_state_changes``: the patch (the form of
        :mod:`hpctune.journal.delta`) that turns the JSON form of :meth:`state_dict` as of the
        last call (or of construction, or :meth:`load_state_dict`) into the state now; empty
        when nothing changed. The controller then journals a commit's change at the cost of
        the change instead of comparing whole states (a state that grows with the study)."""
        raise NotImplementedError(f"{type(self).__name__} does not track its state changes")

    def check_space(self, space: SearchSpace) -> None:  # noqa: B027
        """Check the options against the study's search space (raise :class:`OptionError`)."""

    def stage_tree_problem(self) -> tuple[str, str]:
        """Why the policy, with its options, cannot run over a stage tree (``[stages]
        enabled``) although its class can (:attr:`PolicyTraits.runs_on_stage_trees`): the
        option at fault and the message; ``("", "")`` when it can."""
        return "", ""

    def needed_checkpoints(self, view: StudyView) -> set[int] | None:
        """The ended trials whose latest checkpoint the policy may still fork from.

        For policies with the trait ``makes_configurations``, the controller deletes the latest
        checkpoint of an ended trial that is not in the set (unless a trial not yet ended was
        forked from it). ``None`` (the default) keeps every trial's latest checkpoint.
        """
        return None

    def stage_milestones(
        self, view: StudyView, trial_id: int | None, rng: np.random.Generator
    ) -> list[int] | None:
        """The steps at which the policy judges a trial, ascending, for stage trees
        (``trial_id`` ``None``: every step it may judge any trial at).

        A policy that decides at boundaries runs over a stage tree only if it judges trials at
        known steps (ASHA's rungs): each trial is then trained up to its next milestone as a
        request of the stage tree, and judged there with a BOUNDARY event; the checkpoints at
        milestones are kept for trials still to come. ``None`` (the default): no milestones.
        """
        return None

    @staticmethod
    def fill_slots(view: StudyView, free_slots: int) -> list[Action]:
        """Fill free slots: queued trials first, then suspended ones, then new trials.

        Queued and suspended trials go by priority (highest first), then by id.
        """
        actions: list[Action] = []
        waiting = view.with_status(TrialStatus.QUEUED) + sorted(
            view.with_status(TrialStatus.SUSPENDED), key=lambda t: (-t.priority, t.trial_id)
        )
        for trial in waiting[:free_slots]:
            actions.append(Action.resume(trial.trial_id, priority=trial.priority))
        remaining = free_slots - len(actions)
        if view.trials_remaining is not None:
            remaining = min(remaining, view.trials_remaining)
        actions.extend(Action.start() for _ in range(max(remaining, 0)))
        return actions


_O = TypeVar("_O")


def parse_options(options_type: type[_O], options: Mapping[str, Any]) -> _O:
    """Build the options dataclass ``options_type`` from a mapping, with precise errors.

    Unknown keys raise :class:`OptionError` listing the valid ones with their defaults; a value of
    the wrong type raises :class:`OptionError` naming the expected type.
    """
    fields = {f.name: f for f in dataclasses.fields(options_type)}  # type: ignore[arg-type]
    for key in options:
        if key not in fields:
            valid = (
                ", ".join(f"{name} (default {_default_repr(f)})" for name, f in fields.items())
                or "none"
            )
            raise OptionError(key, f"unknown option; valid options: {valid}")
    values: dict[str, Any] = {}
    for key, value in options.items():
        expected = fields[key].type
        values[key] = _check_type(key, value, expected if isinstance(expected, str) else "")
    return options_type(**values)


def _default_repr(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    return "required"


def _check_type(key: str, value: Any, type_name: str) -> Any:
    """Check ``value`` against the annotation text ``type_name`` (float, int, bool, str)."""
    kinds = {part.strip() for part in type_name.split("|")}
    if value is None and "None" in kinds:
        return None
    if "bool" in kinds and isinstance(value, bool):
        return value
    if "int" in kinds and isinstance(value, int) and not isinstance(value, bool):
        return value
    if "float" in kinds and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if "str" in kinds and isinstance(value, str):
        return value
    if not kinds & {"bool", "int", "float", "str"}:
        return value
    raise OptionError(key, f"must be of type {type_name}, but got {value!r}")
