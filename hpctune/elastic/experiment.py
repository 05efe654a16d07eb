"""The experiment specification: a study's rungs as stages of (trials, steps), known in advance.

RubberBand (Misra et al., EuroSys 2021, §3.1 and Figure 6) plans declarative early-stopping
algorithms offline: successive halving fixes, before anything runs, how many trials each stage
(rung) trains and for how many steps. :class:`ExperimentSpec` is that ``get_stage`` /
``num_stages`` API as data. Stages run one after another: a stage starts when the previous one
is judged (its SYNC); brackets of SHA and Hyperband are sequences of stages, one bracket after
another (the paper's multi-job).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpctune.errors import PlanningError
from hpctune.policies import make_policy, policy_names
from hpctune.policies._common import geometric_rungs
from hpctune.policies._halving import SyncHalvingPolicy
from hpctune.spec import study_context


@dataclass(frozen=True)
class Stage:
    """One stage (a rung of a bracket): ``trials`` trials each train ``start_step..end_step``.

    Attributes:
        trials: How many trials train in this stage.
        start_step: The step they resume from (0: they start fresh).
        end_step: The step they train to (the rung's milestone).
        bracket: The bracket it belongs to (0 for SHA's first).
    """

    trials: int
    start_step: int
    end_step: int
    bracket: int = 0

    @property
    def steps(self) -> int:
        """Steps each trial trains in this stage."""
        return self.end_step - self.start_step

    def to_dict(self) -> dict[str, int]:
        """JSON form."""
        return {
            "trials": self.trials,
            "start_step": self.start_step,
            "end_step": self.end_step,
            "bracket": self.bracket,
        }


@dataclass(frozen=True)
class ExperimentSpec:
    """The stages of a study, in the order they run.

    Attributes:
        stages: The stages; stage ``i + 1`` starts when stage ``i`` has been judged.
        name: The study's name (for printing).
        step_unit: What a step is called.
    """

    stages: tuple[Stage, ...]
    name: str = ""
    step_unit: str = "step"

    def __post_init__(self) -> None:
        if not self.stages:
            raise PlanningError("an experiment needs at least one stage")
        for i, stage in enumerate(self.stages):
            if stage.trials < 1 or stage.start_step < 0 or stage.end_step <= stage.start_step:
                raise PlanningError(
                    f"stage {i} must have trials >= 1 and 0 <= start_step < end_step, but has "
                    f"trials={stage.trials}, start_step={stage.start_step}, "
                    f"end_step={stage.end_step}"
                )

    def num_stages(self) -> int:
        """How many stages there are (the paper's ``num_stages``)."""
        return len(self.stages)

    def get_stage(self, index: int) -> tuple[int, int]:
        """``(trials, steps per trial)`` of stage ``index`` (the paper's ``get_stage``)."""
        stage = self.stages[index]
        return stage.trials, stage.steps

    def trial_steps(self) -> int:
        """Steps of all trials in all stages (the work, whatever the allocation)."""
        return sum(s.trials * s.steps for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (:meth:`from_dict` turns it back)."""
        return {
            "name": self.name,
            "step_unit": self.step_unit,
            "stages": [s.to_dict() for s in self.stages],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExperimentSpec:
        """Rebuild from :meth:`to_dict`."""
        return cls(
            stages=tuple(
                Stage(
                    int(s["trials"]), int(s["start_step"]), int(s["end_step"]), int(s["bracket"])
                )
                for s in data["stages"]
            ),
            name=str(data.get("name", "")),
            step_unit=str(data.get("step_unit", "step")),
        )

    @classmethod
    def successive_halving(
        cls,
        trials: int,
        milestones: Sequence[int],
        eta: int,
        *,
        bracket: int = 0,
        name: str = "",
        step_unit: str = "step",
    ) -> ExperimentSpec:
        """One SHA bracket: ``trials`` train to ``milestones[0]``, the top ``floor(n / eta)``
        (at least one) go on to the next milestone, and so on.

        RubberBand's example, SHA(n = 32, r = 1, R = 50, eta = 3), is
        ``successive_halving(32, [1, 4, 13, 50], 3)``: 32, 10, 3 and 1 trials for 1, 3, 9 and
        37 epochs.
        """
        return cls(
            halving_stages(trials, milestones, eta, bracket), name=name, step_unit=step_unit
        )


def halving_stages(
    trials: int, milestones: Sequence[int], eta: int, bracket: int = 0
) -> tuple[Stage, ...]:
    """The stages of one successive-halving bracket (:meth:`ExperimentSpec.successive_halving`)."""
    stages = []
    start, n = 0, trials
    for milestone in milestones:
        stages.append(Stage(n, start, int(milestone), bracket))
        start, n = int(milestone), max(1, n // eta)
    return tuple(stages)


def experiment_from_study(spec: Any) -> ExperimentSpec:
    """The stages of a study spec (a :class:`~hpctune.spec.StudySpec`) under its policy.

    SHA: brackets of the policy's shape, one after another, until ``num_trials`` trials are
    used (the last bracket may be smaller); Hyperband: the policy's cycle of brackets, in order,
    one after another; ASHA: its rungs as one synchronous bracket of all trials keeping the top
    ``1 / eta`` at each (the planner's view of ASHA; it promotes asynchronously when it runs).

    Raises:
        PlanningError: The policy is not one the planner knows.
    """
    name = spec.policy.name
    policy = make_policy(name, spec.policy.options, study_context(spec))
    if not policy.traits.rungs_known:
        names = policy_names(rungs_known=True)
        planned = [f'"{n}"' for n in names]
        raise PlanningError(
            f"{spec.source}: the elastic planner plans policies whose rungs are known in "
            f"advance ({', '.join(names)}), not {name!r}; set [policy] name = "
            f"{planned[0]} (or {', '.join(planned[1:])})"
        )
    options = policy.options  # type: ignore[attr-defined]
    max_t = min(options.max_t or spec.max_steps, spec.max_steps)
    left = spec.num_trials
    stages: list[Stage] = []
    if isinstance(policy, SyncHalvingPolicy):
        shapes = policy.shapes(max_t)
        bracket = 0
        while left > 0:
            shape = shapes[bracket % len(shapes)]
            n = min(shape.capacity, left)
            stages += halving_stages(n, shape.milestones, policy.eta, bracket)
            left -= n
            bracket += 1
    else:
        eta = int(options.reduction_factor)
        rungs = [*geometric_rungs(int(options.grace_period), eta, max_t), max_t]
        stages += halving_stages(left, rungs, eta)
    return ExperimentSpec(tuple(stages), name=spec.name, step_unit=spec.step_unit)


@dataclass(frozen=True)
class Progress:
    """Where a running study stands, measured: what a re-plan starts from.

    Attributes:
        stage: The stage running now; earlier stages are done. Its workers are held and keep
            their shape; the plan chooses the shapes of the stages after it.
        steps_left: Steps each of its trials still has to train (0: at the rung already).
        elapsed: Seconds since the study started.
        spent: Cost so far, in the cost model's units.
        devices: Devices per trial of the running stage.
        workers: Workers of the running stage.
    """

    stage: int
    steps_left: tuple[int, ...]
    elapsed: float
    spent: float
    devices: int
    workers: int

    def check(self, spec: ExperimentSpec) -> None:
        """Raise :class:`PlanningError` if this progress does not fit ``spec``."""
        if not 0 <= self.stage < spec.num_stages():
            raise PlanningError(
                f"progress: stage {self.stage} is not one of the {spec.num_stages()} stages"
            )
        stage = spec.stages[self.stage]
        if len(self.steps_left) != stage.trials or any(
            not 0 <= s <= stage.steps for s in self.steps_left
        ):
            raise PlanningError(
                f"progress: steps_left must give 0..{stage.steps} for each of the "
                f"{stage.trials} trials of stage {self.stage}, but got {list(self.steps_left)}"
            )
        if self.devices < 1 or self.workers < 1 or self.elapsed < 0 or self.spent < 0:
            raise PlanningError(
                "progress: devices and workers must be >= 1 and elapsed and spent >= 0"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "stage": self.stage,
            "steps_left": list(self.steps_left),
            "elapsed": self.elapsed,
            "spent": self.spent,
            "devices": self.devices,
            "workers": self.workers,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Progress:
        """Rebuild from :meth:`to_dict`."""
        return cls(
            int(data["stage"]),
            tuple(int(s) for s in data["steps_left"]),
            float(data["elapsed"]),
            float(data["spent"]),
            int(data["devices"]),
            int(data["workers"]),
        )


__all__ = [
    "ExperimentSpec",
    "PlanningError",
    "Progress",
    "Stage",
    "bracket_trials",
    "experiment_from_study",
    "halving_stages",
]


def bracket_trials(spec: ExperimentSpec) -> dict[int, range]:
    """The trial ids of each bracket: brackets take trials in id order, each as many as its
    first stage has (as the policies fill them: :func:`experiment_from_study`)."""
    out: dict[int, range] = {}
    first = 0
    for stage in spec.stages:
        if stage.bracket not in out:
            out[stage.bracket] = range(first, first + stage.trials)
            first += stage.trials
    return out
