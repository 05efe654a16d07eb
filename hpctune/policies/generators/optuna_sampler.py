"""Model-based generators: Optuna's samplers fed from the journal.

``[generator] name = "tpe" | "cmaes" | "gp" | "qmc" | "nsga2"`` (or ``name = "optuna"`` with
``sampler = "..."``, which also offers ``"random"``: Optuna's random sampler) proposes each new
trial's configuration with that Optuna sampler. The generator keeps no state: for every proposal
it rebuilds an in-memory Optuna study from the trials in the view (:func:`build_trials`), seeds
the sampler from the study's generator seed and the trial's index, and asks it once. So the
proposal of trial ``index`` is a pure function of the seed, the index and the journal's trials,
and a restarted controller proposes exactly what the killed one would have.

What the sampler sees of each trial (docs/policies.md, "Model-based generators"):

- **Multi-fidelity (BOHB's rule)**: the *budgets* are ``max_steps`` and every step at which a
  trial stopped or paused (rungs, stopping points). The model is built at the largest budget
  ``b`` that at least ``min_points`` trials have reached (default: the number of dimensions plus
  one, as BOHB). A trial that reached ``b`` is a finished Optuna trial with its value at step
  ``b`` (its last value at or before ``b``); an ended trial that stopped before ``b`` (terminated
  at a rung, or by the median rule) is a pruned trial with its curve as intermediate values, so
  it counts at the step it reached (TPE ranks pruned trials below finished ones, by the step
  they reached and their value there); a failed trial is a failed one.
- **Pending trials** (running, queued, suspended trials that have not reached ``b``): with
  ``pending = "sampler"`` they are running Optuna trials (TPE's constant liar, on by default,
  treats them as bad; CMA-ES, QMC and NSGA-II count them as asked); with ``pending = "liar"``
  they are finished trials with the worst value observed at ``b`` (constant liar, Ginsbourger et
  al.; the default for ``gp``, whose sampler ignores running trials); ``"ignore"`` leaves them
  out.
- **Multi-objective** (``[study] objectives``): completed trials with the latest value of every
  objective; every other ended trial is pruned (NSGA-II and TPE learn from completed trials).
- **Sampler state**: what a sampler stores in its trials' and study's system attributes (CMA-ES's
  optimizer and generation, NSGA-II's generation and parent populations, QMC's sample counter)
  is returned with the proposal and journaled with the trial (``info.sampler``); the rebuild puts
  it back, so CMA-ES and NSGA-II continue their generations after a restart.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hpctune.policies._base import OptionError
from hpctune.policies.generators._base import Generator, Proposal
from hpctune.study.states import Mode, TrialStatus, as_mode

if TYPE_CHECKING:
    import optuna

    from hpctune.policies._base import StudyView, TrialView
    from hpctune.study.space import SearchSpace

# The sampler classes behind each name, and the options hpctune sets itself or that take Python
# objects (not expressible in study.toml).
SAMPLERS: Mapping[str, str] = {
    "tpe": "TPESampler",
    "cmaes": "CmaEsSampler",
    "gp": "GPSampler",
    "qmc": "QMCSampler",
    "nsga2": "NSGAIISampler",
    "random": "RandomSampler",
}
_NOT_OPTIONS = frozenset(
    {
        "seed",
        "constraints_func",
        "independent_sampler",
        "gamma",
        "weights",
        "source_trials",
        "mutation",
        "crossover",
        "elite_population_selection_strategy",
        "child_generation_strategy",
        "after_trial_strategy",
    }
)
PENDING = ("sampler", "liar", "ignore")
_FINAL = (TrialStatus.COMPLETED, TrialStatus.TERMINATED, TrialStatus.FAILED)


@dataclass(frozen=True)
class OptunaOptions:
    """Options of the Optuna-backed generators.

    Attributes:
        sampler: The sampler (``name = "optuna"`` only): tpe, cmaes, gp, qmc, nsga2, random.
        pending: How trials not finished yet are shown to the sampler: ``"sampler"`` (as running
            trials: the sampler's own handling), ``"liar"`` (constant liar: the worst value
            seen), ``"ignore"``; ``None``: ``"liar"`` for gp, else ``"sampler"``.
        min_points: BOHB's minimum number of trials at a budget for the model to be built
            there; ``None``: the number of searched dimensions plus one.
        multi_fidelity: Build the model at the largest budget with ``min_points`` trials
            (BOHB's rule); ``False``: only trials that reached ``max_steps`` are observations.
        sampler_options: The sampler's own options, passed through.
    """

    sampler: str = "tpe"
    pending: str | None = None
    min_points: int | None = None
    multi_fidelity: bool = True
    sampler_options: Mapping[str, Any] = field(default_factory=dict)


def sampler_class(name: str) -> type[optuna.samplers.BaseSampler]:
    """The Optuna sampler class of ``name`` (a key of :data:`SAMPLERS`)."""
    import optuna  # here, not at the top: importing optuna costs every command start-up time

    return getattr(optuna.samplers, SAMPLERS[name])  # type: ignore[no-any-return]


def sampler_option_names(name: str) -> dict[str, Any]:
    """The options of sampler ``name`` a study.toml may set, with their defaults."""
    params = inspect.signature(sampler_class(name)).parameters
    return {k: p.default for k, p in params.items() if k not in _NOT_OPTIONS}


def parse_optuna_options(
    options: Mapping[str, Any], sampler: str | None, generator: str
) -> OptunaOptions:
    """Split the ``[generator]`` table into hpctune's options and the sampler's.

    Raises:
        OptionError: An unknown sampler, an unknown option (the message lists the valid ones
            with their defaults) or a value of the wrong type.
    """
    table = dict(options)
    if sampler is None:
        sampler = table.pop("sampler", "tpe")
    elif "sampler" in table:
        raise OptionError(
            "sampler", f'`sampler` is set by the name {generator!r}; use name = "optuna" to set it'
        )
    if not isinstance(sampler, str) or sampler not in SAMPLERS:
        raise OptionError(
            "sampler", f"unknown sampler {sampler!r}; known samplers: {', '.join(SAMPLERS)}"
        )
    pending = table.pop("pending", None)
    if pending is not None and pending not in PENDING:
        raise OptionError("pending", f"must be one of {', '.join(PENDING)}, but got {pending!r}")
    min_points = table.pop("min_points", None)
    if min_points is not None and (
        not isinstance(min_points, int) or isinstance(min_points, bool) or min_points < 1
    ):
        raise OptionError("min_points", f"must be an integer >= 1, but got {min_points!r}")
    multi_fidelity = table.pop("multi_fidelity", True)
    if not isinstance(multi_fidelity, bool):
        raise OptionError("multi_fidelity", f"must be true or false, but got {multi_fidelity!r}")
    valid = sampler_option_names(sampler)
    annotations = _annotation_kinds(sampler)
    for key, value in table.items():
        if key not in valid:
            own = ["pending (default None)", "min_points (default None)"]
            own.append("multi_fidelity (default True)")
            if generator == "optuna":
                own.insert(0, "sampler (default 'tpe')")
            listed = ", ".join(
                [*own, *(f"{k} (default {_default_text(v)})" for k, v in valid.items())]
            )
            raise OptionError(
                key, f"unknown option of the {sampler} generator; valid options: {listed}"
            )
        kinds = annotations[key]
        if value is None and "None" in kinds:
            continue
        if kinds & {"bool"} and not kinds & {"int", "float", "str"}:
            if not isinstance(value, bool):
                raise OptionError(key, f"must be true or false, but got {value!r}")
        elif kinds & {"int", "float"} and not kinds & {"str", "dict", "Callable"}:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise OptionError(key, f"must be a number, but got {value!r}")
            if "float" not in kinds and not isinstance(value, int):
                raise OptionError(key, f"must be an integer, but got {value!r}")
    parsed = OptunaOptions(sampler, pending, min_points, multi_fidelity, table)
    try:
        _make_sampler(parsed, 0, 0)
    except (TypeError, ValueError) as exc:
        raise OptionError(
            next(iter(table), "sampler"), f"the {sampler} sampler refuses its options: {exc}"
        ) from None
    return parsed


def _annotation_kinds(name: str) -> dict[str, set[str]]:
    """The type names in each option's annotation (``"int | None"`` -> {"int", "None"})."""
    out = {}
    for key, param in inspect.signature(sampler_class(name)).parameters.items():
        text = param.annotation if isinstance(param.annotation, str) else str(param.annotation)
        out[key] = {part.strip().split("[")[0] for part in text.replace("|", ",").split(",")}
    return out


def _default_text(value: Any) -> str:
    return "required" if value is inspect.Parameter.empty else repr(value)


def _pending_mode(options: OptunaOptions) -> str:
    if options.pending is not None:
        return options.pending
    return "liar" if options.sampler == "gp" else "sampler"


def _make_sampler(options: OptunaOptions, seed: int, index: int) -> optuna.samplers.BaseSampler:
    kwargs = dict(options.sampler_options)
    if options.sampler == "tpe" and _pending_mode(options) == "sampler":
        kwargs.setdefault("constant_liar", True)
    if options.sampler in ("tpe", "cmaes", "gp", "qmc"):
        kwargs.setdefault("warn_independent_sampling", False)
    if options.sampler == "qmc":
        kwargs.setdefault("warn_asynchronous_seeding", False)
    kwargs["seed"] = proposal_seed(seed, index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sampler_class(options.sampler)(**kwargs)


def proposal_seed(seed: int, index: int) -> int:
    """The sampler's seed for the proposal of trial ``index`` (32 bits, from ``SeedSequence``)."""
    return int(np.random.SeedSequence(seed, spawn_key=(index,)).generate_state(1)[0])


# --------------------------------------------------------------------------------------------
# What the sampler sees


@dataclass(frozen=True)
class Objective:
    """One objective: a metric and its direction (``"max"`` or ``"min"``)."""

    metric: str
    mode: Mode


def budgets(view: StudyView) -> list[int]:
    """The steps observations can be made at: ``max_steps`` and where trials stopped or paused."""
    out = {view.max_steps}
    for trial in view.trials.values():
        if len(trial.steps) and trial.status in (TrialStatus.TERMINATED, TrialStatus.SUSPENDED):
            out.add(int(trial.steps[-1]))
    return sorted(out)


def value_at(trial: TrialView, budget: int) -> float | None:
    """The trial's last finite value at or before ``budget``, if it reached ``budget``."""
    if not len(trial.steps) or max(int(trial.steps[-1]), trial.step) < budget:
        return None
    values = trial.values[(trial.steps <= budget) & np.isfinite(trial.values)]
    return float(values[-1]) if len(values) else None


def choose_budget(view: StudyView, min_points: int, multi_fidelity: bool) -> int:
    """BOHB's rule: the largest budget at least ``min_points`` trials reached (else the
    smallest budget); ``max_steps`` without multi-fidelity."""
    if not multi_fidelity:
        return view.max_steps
    options = budgets(view)
    for budget in reversed(options):
        count = sum(value_at(t, budget) is not None for t in view.trials.values())
        if count >= min_points:
            return budget
    return options[0]


class OptunaGenerator(Generator):
    """Propose configurations with an Optuna sampler rebuilt from the view every time.

    Args:
        space: The study's search space.
        seed: The generator's seed.
        options: The parsed :class:`OptunaOptions`.
    """

    name: ClassVar[str] = "optuna"
    sampler_name: ClassVar[str | None] = None  # set by the named subclasses (tpe, gp, ...)
    Options = OptunaOptions
    predictable: ClassVar[bool] = False

    def __init__(
        self, space: SearchSpace, seed: int, options: OptunaOptions | None = None
    ) -> None:
        super().__init__(space, seed, options or OptunaOptions(self.sampler_name or "tpe"))
        # here, not at the top: _optuna_space imports optuna (start-up time)
        from hpctune.policies.generators._optuna_space import all_dimensions

        self.dimensions = {d.name: d for d in all_dimensions(space)}
        self._frozen: dict[int, tuple[Any, Any]] = {}  # each trial's template and its key

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> OptunaOptions:
        """Parse the ``[generator]`` table (without ``name``)."""
        return parse_optuna_options(options, cls.sampler_name, cls.sampler_name or cls.name)

    def objectives_problem(self, count: int) -> str:
        """CMA-ES optimises one metric."""
        sampler = self.options.sampler
        if count > 1 and sampler in SINGLE_OBJECTIVE:
            return (
                f"the {sampler!r} generator optimises one metric, but [study] objectives "
                f"names {count}; use tpe or nsga2 (or random, qmc, gp)"
            )
        return ""

    @property
    def min_points(self) -> int:
        """BOHB's minimum number of observations at a budget."""
        return self.options.min_points or len(self.dimensions) + 1

    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        """Return the configuration of trial ``index`` (see :meth:`propose`)."""
        return self.propose(index, view).params

    def propose(self, index: int, view: StudyView | None = None) -> Proposal:
        """Rebuild the sampler's study from ``view``'s trials and ask it for trial ``index``.

        The proposal's ``info`` holds the sampler's system attributes of the new trial (and the
        study attributes it changed), which later rebuilds put back.
        """
        import optuna  # here, not at the top: start-up time (as _optuna_space, which imports it)

        from hpctune.policies.generators._optuna_space import draw_config

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        objectives = self._objectives(view)
        study = optuna.create_study(
            storage=optuna.storages.InMemoryStorage(),
            sampler=_make_sampler(self.options, self.seed, index),
            directions=["maximize" if o.mode == "max" else "minimize" for o in objectives],
            study_name=f"hpctune-{self.seed}",
        )
        storage = study._storage
        study_attrs: dict[str, Any] = {}
        if view is not None:
            templates = self._templates(view, objectives)
            for trial_view, frozen in templates:
                storage.create_new_trial(study._study_id, template_trial=frozen)
                study_attrs.update(_study_attrs(trial_view))
        for key, value in study_attrs.items():
            storage.set_study_system_attr(study._study_id, key, value)
        before = dict(storage.get_study_system_attrs(study._study_id))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = study.ask()
            params = draw_config(self.space, lambda d: trial._suggest(d.name, d.distribution))
        frozen_new = storage.get_trial(trial._trial_id)
        after = storage.get_study_system_attrs(study._study_id)
        changed = {k: v for k, v in after.items() if before.get(k, _MISSING) != v}
        own = {k: v for k, v in frozen_new.system_attrs.items() if ":relative_params" not in k}
        info: dict[str, Any] = {}
        if own or changed:
            info["sampler"] = _jsonable({"trial": own, "study": changed})
        return Proposal(params, info)

    def _objectives(self, view: StudyView | None) -> list[Objective]:
        if view is None:
            return [Objective("", "max")]
        if view.objectives:
            return [Objective(m, as_mode(d)) for m, d in view.objectives]
        return [Objective(view.metric, view.mode)]

    def _templates(
        self, view: StudyView, objectives: list[Objective]
    ) -> list[tuple[TrialView, Any]]:
        """One Optuna trial per trial of the view, by id (cached by what each holds)."""
        multi = len(objectives) > 1
        budget = (
            view.max_steps
            if multi
            else choose_budget(view, self.min_points, self.options.multi_fidelity)
        )
        pending = _pending_mode(self.options)
        liar: float | None = None
        if pending == "liar" and not multi:
            seen = [value_at(t, budget) for t in view.trials.values()]
            finite = [v for v in seen if v is not None]
            if finite:
                liar = min(finite) if view.mode == "max" else max(finite)
        out: list[tuple[TrialView, Any]] = []
        for tid in sorted(view.trials):
            trial = view.trials[tid]
            frozen = self._frozen_trial(trial, budget, objectives, pending, liar, len(out))
            if frozen is not None:
                out.append((trial, frozen))
        return out

    def _frozen_trial(
        self,
        trial: TrialView,
        budget: int,
        objectives: list[Objective],
        pending: str,
        liar: float | None,
        number: int,
    ) -> Any:
        """The Optuna trial standing for ``trial`` (``None``: left out)."""
        from optuna.trial import TrialState  # here, not at the top: start-up time

        from hpctune.policies.generators._optuna_space import TrialTemplate, encode_config

        state, values = self._state(trial, budget, objectives, pending, liar)
        if state is None:
            return None
        n = len(trial.steps)
        key = (state, values, n, number, json.dumps(trial.info, sort_keys=True))
        cached = self._frozen.get(trial.trial_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        encoded = encode_config(self.space, trial.params)
        intermediate = {
            int(s): float(v)
            for s, v in zip(trial.steps.tolist(), trial.values.tolist(), strict=True)
            if math.isfinite(v)
        }
        attrs = dict(trial.info.get("sampler", {}).get("trial", {}))
        start = _EPOCH + timedelta(seconds=trial.trial_id)
        frozen = TrialTemplate(
            number=number,
            state=state,
            value=None,
            values=list(values) if values is not None else None,
            datetime_start=start,
            datetime_complete=None if state is TrialState.RUNNING else start,
            params=encoded,
            distributions={k: self.dimensions[k].distribution for k in encoded},
            user_attrs={},
            system_attrs=attrs,
            intermediate_values=intermediate if len(objectives) == 1 else {},
            trial_id=number,
        )
        self._frozen[trial.trial_id] = (key, frozen)  # only the latest of each trial
        return frozen

    def _state(
        self,
        trial: TrialView,
        budget: int,
        objectives: list[Objective],
        pending: str,
        liar: float | None,
    ) -> tuple[Any, tuple[float, ...] | None]:
        from optuna.trial import TrialState  # here, not at the top: start-up time

        ended = trial.status in _FINAL
        if len(objectives) > 1:
            if trial.status is TrialStatus.COMPLETED:
                values = [trial.last_metrics.get(o.metric) for o in objectives]
                if all(v is not None and math.isfinite(v) for v in values):
                    return TrialState.COMPLETE, tuple(float(v) for v in values)  # type: ignore[arg-type]
                return TrialState.FAIL, None
            if ended:
                return (
                    TrialState.FAIL if trial.status is TrialStatus.FAILED else TrialState.PRUNED
                ), None
            return (TrialState.RUNNING, None) if pending == "sampler" else (None, None)
        value = value_at(trial, budget)
        if value is not None:
            return TrialState.COMPLETE, (value,)
        if trial.status is TrialStatus.FAILED and not len(trial.steps):
            return TrialState.FAIL, None
        if ended:
            return TrialState.PRUNED, None
        if pending == "sampler":
            return TrialState.RUNNING, None
        if pending == "liar" and liar is not None:
            return TrialState.COMPLETE, (liar,)
        return None, None


_MISSING = object()

_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # trials' fixed start times (by id)


def _study_attrs(trial: TrialView) -> dict[str, Any]:
    return dict(trial.info.get("sampler", {}).get("study", {}))


def _jsonable(data: Any) -> Any:
    """Sampler attributes as JSON data (tuples to lists; anything else as text)."""
    return json.loads(json.dumps(data, default=str))


def _named(sampler: str) -> type[OptunaGenerator]:
    """The generator class registered as ``sampler`` (``name = "tpe"`` and so on)."""
    return type(
        f"{sampler.upper()}Generator",
        (OptunaGenerator,),
        {"name": sampler, "sampler_name": sampler, "__doc__": f"Optuna's {sampler} sampler."},
    )


#: Samplers of one objective only.
SINGLE_OBJECTIVE = ("cmaes",)

NAMED: Mapping[str, type[OptunaGenerator]] = {
    name: _named(name) for name in ("tpe", "cmaes", "gp", "qmc", "nsga2")
}

__all__ = [
    "NAMED",
    "SAMPLERS",
    "Objective",
    "OptunaGenerator",
    "OptunaOptions",
    "budgets",
    "choose_budget",
    "parse_optuna_options",
    "proposal_seed",
    "value_at",
]
