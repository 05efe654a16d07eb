"""The simulated study: its spec and context, its creation in the journal, the order in which the
trace's configurations become trials, and the generators answered from the trace."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from hpctune.files import dumps
from hpctune.journal import state as st
from hpctune.journal.memory import MemoryJournal
from hpctune.journal.state import StudyRecord
from hpctune.policies import Policy, StudyContext, StudyView
from hpctune.policies.generators import Generator, Proposal
from hpctune.simulator._config import SimulatorConfig, SimulatorError
from hpctune.simulator.nearest import NearestConfigurations, trace_space
from hpctune.simulator.traces import Trace
from hpctune.spec import StudySpec, study_context
from hpctune.stagetree.options import stage_policies
from hpctune.study.seeding import component_seed, index_rng
from hpctune.study.states import StudyState


class TraceOrder(Generator):
    """Proposes the trace's configurations in a given order (random search over the trace)."""

    name: ClassVar[str] = "trace-order"

    def __init__(self, trace: Trace, order: list[int]) -> None:
        super().__init__(trace_space(trace), 0)
        self.trace = trace
        self.order = order

    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        return dict(self.trace.hparams[self.order[index]])

    def propose(self, index: int, view: StudyView | None = None) -> Proposal:
        row = self.order[index]
        return Proposal(dict(self.trace.hparams[row]), {"trace_row": row})


class NearestInTrace(Generator):
    """A generator's proposals answered with the nearest configuration of the trace not used
    yet (:mod:`hpctune.simulator.nearest`)."""

    name: ClassVar[str] = "nearest-in-trace"
    predictable: ClassVar[bool] = False

    def __init__(self, trace: Trace, inner: Generator, nearest: NearestConfigurations) -> None:
        super().__init__(inner.space, inner.seed)
        self.trace = trace
        self.inner = inner
        self.nearest = nearest
        self.proposals: list[dict[str, Any]] = []  # the inner generator's, by trial

    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        return self.propose(index, view).params

    def propose(self, index: int, view: StudyView | None = None) -> Proposal:
        proposal = self.inner.propose(index, view)
        row = self.nearest.take(proposal.params)
        if row is None:
            raise SimulatorError("the generator asked for more configurations than the trace has")
        self.proposals.append(proposal.params)
        return Proposal(dict(self.trace.hparams[row]), {**proposal.info, "trace_row": row})


def simulation_spec(
    trace: Trace,
    policy: Policy,
    *,
    slots: int,
    seed: int,
    config: SimulatorConfig,
    num_trials: int,
) -> StudySpec:
    """The spec of a simulated study of ``trace`` (what ``hpctune export-trace`` recorded)."""
    bounds = config.metric_bounds(trace)
    data: dict[str, Any] = {
        "source": "",
        "name": "simulation",
        "directory": "simulated-study",
        "entry": {"file": None, "module": "simulated", "function": "train"},
        "metric": trace.metric,
        "mode": trace.mode,
        "max_steps": config.max_steps or trace.num_epochs,
        "step_unit": "step",
        "boundary": config.boundary,
        "num_trials": num_trials,
        "seed": seed,
        "fail_fast": False,
        "max_retries": 3,
        "space": trace_space(trace).to_dict(),
        "generator": {"name": "random", "options": {}},
        "policy": {"name": policy.name, "options": options_dict(policy)},
        "resources": {"slots": slots, "cpus_per_worker": 1, "gpus_per_worker": 0},
        "metric_bounds": list(bounds),
        "random_level": None if math.isnan(trace.random_level) else trace.random_level,
        "report_timeout": 0.0,
        "stages": {"enabled": config.stages, "scheduler": config.stage_scheduler},
        "best": "last" if policy.traits.makes_configurations else "peak",
        "keep_checkpoints": "last",
        "curves": {"recalibrate": config.recalibrate},
    }
    return StudySpec.from_dict(data)


def simulation_context(trace: Trace, config: SimulatorConfig | None = None) -> StudyContext:
    """The study context a policy simulated on ``trace`` with ``config`` is built with (that
    of :func:`simulation_spec`'s study: :func:`~hpctune.spec.study_context`)."""
    config = config or SimulatorConfig()
    return StudyContext(
        max_steps=config.max_steps or trace.num_epochs, mode=trace.mode, boundary=config.boundary
    )


def check_slots(policy: Policy, slots: int, config: SimulatorConfig) -> None:
    """Refuse fewer than one slot, and stage trees under a policy that cannot run them."""
    if slots < 1:
        raise SimulatorError(f"slots must be >= 1, but got {slots}")
    if config.stages and not policy.traits.runs_on_stage_trees:
        raise SimulatorError(
            f"stages: stage trees run with the policies {', '.join(stage_policies())}, not "
            f"{policy.name!r}"
        )


def trial_order(trace: Trace, seed: int, order: list[int] | None) -> list[int]:
    """The order in which the trace's configurations become trials (random from ``seed``)."""
    if order is None:
        order = [
            int(i)
            for i in index_rng(component_seed(seed, "order"), 0).permutation(trace.num_configs)
        ]
    bad = [i for i in order if not 0 <= i < trace.num_configs]
    if bad:
        raise SimulatorError(f"order names configurations {bad} not in the trace")
    return list(order)


def check_context(policy: Policy, spec: StudySpec) -> None:
    """Refuse a policy built for another study than the simulated one."""
    context = study_context(spec)
    if policy.context != context:
        raise SimulatorError(
            f"the policy {policy.name!r} was built for the study {policy.context}, but the "
            f"simulated study is {context}; build it with simulation_context(trace, config)"
        )


def created_study(spec: StudySpec) -> tuple[StudyRecord, MemoryJournal]:
    """The simulated study's record and journal, holding its creation."""
    record = StudyRecord()
    created = {"state": StudyState.CREATED.value, "spec": spec.to_dict(), "reason": "simulated"}
    record.apply(st.STUDY, -1, -1, 0.0, created)
    journal = MemoryJournal()
    journal.append("log", kind=st.STUDY, trial=-1, segment=-1, time=0.0, data=dumps(created))
    journal.commit({})
    return record, journal


def options_dict(policy: Policy) -> dict[str, Any]:
    options = getattr(policy, "options", None)
    if options is None or not hasattr(options, "__dataclass_fields__"):
        return {}
    return {name: getattr(options, name) for name in options.__dataclass_fields__}
